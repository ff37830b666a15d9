#include "config_dump.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <yaml.h>

#include "config.h"
#include "config_values.h"
#include "log.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * libyaml's emitter does the writing, so quoting is always right: a value
 * like "::1/128" or "*" inside a flow list gets quotes without this file
 * knowing YAML's indicator rules. Only one rule is ours: a text that a plain
 * scalar would turn into something else is forced into quotes: a null ("~",
 * "null", empty), which the loader reads as null, and a boolean, a number or
 * a date ("true", "off", "1.5e3", "0x1F", ".inf", "2001-12-14"), which this
 * loader reads as the text but a YAML 1.1 or 1.2 reader of /config (yq,
 * PyYAML) would not.
 */

struct config_dump {
	yaml_emitter_t emitter;
	struct evbuffer *out;
};

/* The emitter's output goes straight into the reply buffer. */
static int config_dump_write(void *data, unsigned char *buffer, size_t size)
{
	struct config_dump *d = data;

	return evbuffer_add(d->out, buffer, size) == 0;
}

/* Emit one event. The sequence of events is fixed by this file and the text
 * in them is valid UTF-8, so a failure is a bug or out of memory: like
 * xmalloc, stop with the reason rather than serve half a document. */
static void config_dump_emit(struct config_dump *d, yaml_event_t *event)
{
	if (!yaml_emitter_emit(&d->emitter, event)) {
		log_error("config dump: libyaml emitter failed: %s",
			  d->emitter.problem != NULL ? d->emitter.problem : "unknown error");
		abort();
	}
}

/* Whether a plain scalar with this text would load as a null. */
static bool config_dump_reads_as_null(const char *text)
{
	return text[0] == '\0' || strcmp(text, "~") == 0 || strcmp(text, "null") == 0 ||
	       strcmp(text, "Null") == 0 || strcmp(text, "NULL") == 0;
}

/* The run of characters of set (and '_', YAML 1.1's digit separator) at p,
 * and whether it holds a character of set. */
static const char *config_dump_digits(const char *p, const char *set, bool *any)
{
	*any = false;
	for (; *p != '\0' && (*p == '_' || strchr(set, *p) != NULL); p++)
		*any = *any || *p != '_';
	return p;
}

/* Whether a YAML 1.1 or 1.2 reader would take a plain scalar with this text
 * for a number: an integer in base 2, 8, 10 or 16, 1.1's base 60 (1:30,
 * 1:30.5), or a float (1.5, .5, 1e3, 1.5e-3). */
static bool config_dump_reads_as_number(const char *p)
{
	static const char decimal[] = "0123456789";
	bool whole, fraction, exponent;

	if (*p == '+' || *p == '-')
		p++;
	if (p[0] == '0' && p[1] != '\0' && strchr("xXoObB", p[1]) != NULL) {
		const char *set = strchr("xX", p[1]) != NULL   ? "0123456789abcdefABCDEF"
				  : strchr("oO", p[1]) != NULL ? "01234567"
							       : "01";

		p = config_dump_digits(p + 2, set, &whole);
		return whole && *p == '\0';
	}
	p = config_dump_digits(p, decimal, &whole);
	if (whole && *p == ':') {
		while (*p == ':') {
			p = config_dump_digits(p + 1, decimal, &fraction);
			if (!fraction)
				return false;
		}
		/* 1.1's base 60 float (1:30.5, 1:30.) */
		if (*p == '.')
			p = config_dump_digits(p + 1, decimal, &fraction);
		return *p == '\0';
	}
	fraction = false;
	if (*p == '.')
		p = config_dump_digits(p + 1, decimal, &fraction);
	if (!whole && !fraction)
		return false;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		p = config_dump_digits(p, decimal, &exponent);
		if (!exponent)
			return false;
	}
	return *p == '\0';
}

/* Whether a YAML 1.1 reader (PyYAML) might take a plain scalar with this
 * text for a timestamp (2001-12-14, 2001-12-14t21:59:43.10-05:00): every one
 * starts with four digits, a '-' and a digit, and quoting a text that only
 * starts like one costs nothing. */
static bool config_dump_reads_as_timestamp(const char *p)
{
	for (size_t i = 0; i < 4; i++)
		if (!isdigit((unsigned char)p[i]))
			return false;
	return p[4] == '-' && isdigit((unsigned char)p[5]);
}

/* Whether a YAML 1.1 or 1.2 reader would take a plain scalar with this text
 * for a boolean, a number or a timestamp, or for 1.1's value or merge key
 * ("=", "<<"), which PyYAML then cannot load at all. */
static bool config_dump_reads_as_value(const char *text)
{
	static const char *const words[] = {
		"true", "false", "yes",	  "no",	   "on",   "off", "y",
		"n",	".inf",	 "-.inf", "+.inf", ".nan", "=",	  "<<"
	};
	size_t i;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcasecmp(text, words[i]) == 0)
			return true;
	return config_dump_reads_as_number(text) || config_dump_reads_as_timestamp(text);
}

/* A scalar; plain_ok false forces quotes. */
static void config_dump_scalar(struct config_dump *d, const char *text, bool plain_ok)
{
	yaml_event_t event;
	char *copy = NULL;

	if (!yaml_scalar_event_initialize(&event, NULL, NULL, (yaml_char_t *)text, -1, plain_ok, 1,
					  YAML_ANY_SCALAR_STYLE)) {
		/* Not UTF-8 (a ca_file path from a directory named in another
		 * encoding): show it with the odd bytes replaced rather than
		 * not at all. */
		copy = xstrdup(text);
		for (char *p = copy; *p != '\0'; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
		if (!yaml_scalar_event_initialize(&event, NULL, NULL, (yaml_char_t *)copy, -1,
						  plain_ok, 1, YAML_ANY_SCALAR_STYLE)) {
			log_error("config dump: cannot make a YAML scalar");
			abort();
		}
	}
	config_dump_emit(d, &event);
	free(copy);
}

/* A text from the config: a name, a host, a path, an address. */
static void config_dump_text(struct config_dump *d, const char *text)
{
	config_dump_scalar(d, text,
			   !config_dump_reads_as_null(text) && !config_dump_reads_as_value(text));
}

/* A key, a keyword or a number this file wrote: always plain. */
static void config_dump_word(struct config_dump *d, const char *word)
{
	config_dump_scalar(d, word, true);
}

/* Open a mapping, block style unless flow. */
static void config_dump_mapping_start(struct config_dump *d, bool flow)
{
	yaml_event_t event;

	yaml_mapping_start_event_initialize(
		&event, NULL, NULL, 1, flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
	config_dump_emit(d, &event);
}

/* Close the innermost mapping. */
static void config_dump_mapping_end(struct config_dump *d)
{
	yaml_event_t event;

	yaml_mapping_end_event_initialize(&event);
	config_dump_emit(d, &event);
}

/* Open a list, block style unless flow. */
static void config_dump_sequence_start(struct config_dump *d, bool flow)
{
	yaml_event_t event;

	yaml_sequence_start_event_initialize(
		&event, NULL, NULL, 1, flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
	config_dump_emit(d, &event);
}

/* Close the innermost list. */
static void config_dump_sequence_end(struct config_dump *d)
{
	yaml_event_t event;

	yaml_sequence_end_event_initialize(&event);
	config_dump_emit(d, &event);
}

/* key: text */
static void config_dump_pair_text(struct config_dump *d, const char *key, const char *text)
{
	config_dump_word(d, key);
	config_dump_text(d, text);
}

/* key: word, for a value this file formatted. */
static void config_dump_pair_word(struct config_dump *d, const char *key, const char *word)
{
	config_dump_word(d, key);
	config_dump_word(d, word);
}

/* key: a duration in the largest unit that keeps it exact ("1500ms", "2s"). */
static void config_dump_pair_ms(struct config_dump *d, const char *key, uint64_t ms)
{
	char buf[32];

	config_values_format_ms(ms, buf, sizeof(buf));
	config_dump_pair_word(d, key, buf);
}

/* key: a size in the largest of GiB, MiB, KiB that keeps it exact, or bytes. */
static void config_dump_pair_size(struct config_dump *d, const char *key, uint64_t bytes)
{
	static const struct {
		const char *unit;
		uint64_t bytes;
	} units[] = {
		{ "GiB", 1024ull * 1024 * 1024 },
		{ "MiB", 1024ull * 1024 },
		{ "KiB", 1024ull },
	};
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
	for (size_t i = 0; bytes != 0 && i < sizeof(units) / sizeof(units[0]); i++) {
		if (bytes % units[i].bytes == 0) {
			snprintf(buf, sizeof(buf), "%llu%s",
				 (unsigned long long)(bytes / units[i].bytes), units[i].unit);
			break;
		}
	}
	config_dump_pair_word(d, key, buf);
}

/* key: a whole number. */
static void config_dump_pair_unsigned(struct config_dump *d, const char *key, unsigned long long n)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", n);
	config_dump_pair_word(d, key, buf);
}

/* key: true or false. */
static void config_dump_pair_bool(struct config_dump *d, const char *key, bool value)
{
	config_dump_pair_word(d, key, value ? "true" : "false");
}

/* key: the shortest fixed-point decimal that reads back as the same double;
 * the loader takes digits and a fraction, never an exponent. */
static void config_dump_pair_number(struct config_dump *d, const char *key, double value)
{
	char buf[64];

	for (int precision = 0; precision <= 17; precision++) {
		snprintf(buf, sizeof(buf), "%.*f", precision, value);
		if (strtod(buf, NULL) == value)
			break;
	}
	config_dump_pair_word(d, key, buf);
}

/* A flow list of texts: [GET, HEAD]. */
static void config_dump_list(struct config_dump *d, const char *key, char *const *items,
			     size_t count)
{
	config_dump_word(d, key);
	config_dump_sequence_start(d, true);
	for (size_t i = 0; i < count; i++)
		config_dump_text(d, items[i]);
	config_dump_sequence_end(d);
}

/* retry.on: the condition words, then the explicit codes. */
static void config_dump_retry_on(struct config_dump *d, const struct retry_policy *retry)
{
	char code[8];

	config_dump_word(d, "on");
	config_dump_sequence_start(d, true);
	if (retry->on & RETRY_ON_5XX)
		config_dump_word(d, "5xx");
	for (unsigned c = 100; c < 600; c++) {
		if (retry->on_codes[c / 8] & (1u << (c % 8))) {
			snprintf(code, sizeof(code), "%u", c);
			config_dump_word(d, code);
		}
	}
	if (retry->on & RETRY_ON_CONNECT_FAILURE)
		config_dump_word(d, "connect-failure");
	if (retry->on & RETRY_ON_RESET)
		config_dump_word(d, "reset");
	if (retry->on & RETRY_ON_TIMEOUT)
		config_dump_word(d, "timeout");
	config_dump_sequence_end(d);
}

/* retry: every key of a resolved policy. A route that turned off the
 * hedging defaults.retry gives says so (after: 0s): left out, it would
 * inherit it again when the dump is loaded. */
static void config_dump_retry(struct config_dump *d, const struct retry_policy *retry,
			      bool hedge_inherited)
{
	config_dump_word(d, "retry");
	config_dump_mapping_start(d, false);
	config_dump_retry_on(d, retry);
	config_dump_pair_unsigned(d, "max_attempts", retry->max_attempts);
	config_dump_pair_ms(d, "initial_backoff", retry->initial_backoff_ms);
	config_dump_pair_number(d, "multiplier", retry->multiplier);
	config_dump_pair_ms(d, "max_backoff", retry->max_backoff_ms);
	if (retry->jitter_full)
		config_dump_pair_word(d, "jitter", "full");
	else
		config_dump_pair_ms(d, "jitter", retry->jitter_ms);
	config_dump_pair_ms(d, "deadline", retry->deadline_ms);
	config_dump_pair_word(d, "retry_after", retry->honor_retry_after ? "honor" : "ignore");
	config_dump_word(d, "budget");
	config_dump_mapping_start(d, false);
	config_dump_pair_number(d, "ratio", retry->budget.ratio);
	config_dump_pair_number(d, "min_per_second", retry->budget.min_per_second);
	config_dump_pair_ms(d, "window", retry->budget.window_ms);
	config_dump_mapping_end(d);
	config_dump_pair_ms(d, "try_timeout", retry->try_timeout_ms);
	/* no hedge: key is how a policy says no hedging, unless it has one
	 * to turn off */
	if (retry->hedge.after_ms != 0 || hedge_inherited) {
		config_dump_word(d, "hedge");
		config_dump_mapping_start(d, false);
		config_dump_pair_ms(d, "after", retry->hedge.after_ms);
		config_dump_pair_unsigned(d, "max", retry->hedge.max);
		config_dump_mapping_end(d);
	}
	config_dump_pair_bool(d, "resume", retry->resume);
	config_dump_pair_bool(d, "attempt_header", retry->attempt_header);
	config_dump_pair_word(d, "idempotency_key",
			      retry->idempotency_key == IDEMPOTENCY_KEY_INJECT ? "inject" : "none");
	config_dump_pair_word(d, "mode", retry->mode == RETRY_MODE_OBSERVE ? "observe" : "enforce");
	config_dump_mapping_end(d);
}

/* idempotent: the methods and the when_present list. */
static void config_dump_idempotent(struct config_dump *d, const struct idempotency *idem)
{
	static const char *const kinds[] = {
		[WHEN_PRESENT_QUERY] = "query",
		[WHEN_PRESENT_HEADER] = "header",
		[WHEN_PRESENT_JSON_FIELD] = "json_field",
	};

	config_dump_word(d, "idempotent");
	config_dump_mapping_start(d, false);
	config_dump_list(d, "methods", idem->methods, idem->method_count);
	config_dump_word(d, "when_present");
	config_dump_sequence_start(d, idem->when_present_count == 0);
	for (size_t i = 0; i < idem->when_present_count; i++) {
		config_dump_mapping_start(d, false);
		config_dump_pair_text(d, kinds[idem->when_present[i].kind],
				      idem->when_present[i].name);
		config_dump_mapping_end(d);
	}
	config_dump_sequence_end(d);
	config_dump_mapping_end(d);
}

/* tls: ca_file (~ for OpenSSL's default paths) and verify. */
static void config_dump_tls(struct config_dump *d, const struct tls_policy *tls)
{
	config_dump_word(d, "tls");
	config_dump_mapping_start(d, false);
	config_dump_word(d, "ca_file");
	if (tls->ca_file != NULL)
		config_dump_text(d, tls->ca_file);
	else
		config_dump_word(d, "~");
	config_dump_pair_bool(d, "verify", tls->verify);
	config_dump_mapping_end(d);
}

/* One routes[] item: its own match, upstream and tls, and the policy it
 * ended up with. A route without a tls: of its own uses the global one, so
 * none is written, which keeps the route's meaning when loaded again. */
static void config_dump_route(struct config_dump *d, const struct route *route,
			      const struct route *defaults)
{
	config_dump_mapping_start(d, false);
	config_dump_pair_text(d, "name", route->name);
	if (route->match_host != NULL || route->match_path_prefix != NULL ||
	    route->match_method_count > 0) {
		config_dump_word(d, "match");
		config_dump_mapping_start(d, false);
		if (route->match_host != NULL)
			config_dump_pair_text(d, "host", route->match_host);
		if (route->match_path_prefix != NULL)
			config_dump_pair_text(d, "path_prefix", route->match_path_prefix);
		if (route->match_method_count > 0)
			config_dump_list(d, "methods", route->match_methods,
					 route->match_method_count);
		config_dump_mapping_end(d);
	}
	if (route->upstream != NULL)
		config_dump_pair_text(d, "upstream", route->upstream->text);
	if (route->tls_overridden)
		config_dump_tls(d, &route->tls);
	config_dump_idempotent(d, &route->idempotent);
	config_dump_retry(d, &route->retry, defaults->retry.hedge.after_ms != 0);
	config_dump_mapping_end(d);
}

/* access: the client networks as address/prefix. */
static void config_dump_access(struct config_dump *d, const struct config *config)
{
	char addr[INET6_ADDRSTRLEN], cidr[INET6_ADDRSTRLEN + 8];

	config_dump_word(d, "access");
	config_dump_mapping_start(d, false);
	config_dump_word(d, "allow_clients");
	config_dump_sequence_start(d, true);
	for (size_t i = 0; i < config->allow_client_count; i++) {
		const struct cidr *c = &config->allow_clients[i];
		const void *a =
			c->addr.ss_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)&c->addr)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)&c->addr)->sin6_addr;

		if (inet_ntop(c->addr.ss_family, a, addr, sizeof(addr)) == NULL)
			continue;
		snprintf(cidr, sizeof(cidr), "%s/%u", addr, c->prefix_len);
		config_dump_text(d, cidr);
	}
	config_dump_sequence_end(d);
	config_dump_list(d, "allow_hosts", config->allow_hosts, config->allow_host_count);
	config_dump_pair_bool(d, "admin_remote", config->admin_remote);
	config_dump_mapping_end(d);
}

/* intercept: the host patterns and where the CA's files are; never what is
 * in them. */
static void config_dump_intercept(struct config_dump *d, const struct intercept_config *intercept)
{
	config_dump_word(d, "intercept");
	config_dump_mapping_start(d, false);
	config_dump_list(d, "hosts", intercept->hosts, intercept->host_count);
	config_dump_pair_text(d, "ca_cert", intercept->ca_cert);
	config_dump_pair_text(d, "ca_key", intercept->ca_key);
	config_dump_pair_ms(d, "server_first_after", intercept->server_first_after_ms);
	config_dump_mapping_end(d);
}

/* fleet: where the shared Redis is, the name and the interval, and who logs
 * in: the password's file, never the password. */
static void config_dump_fleet(struct config_dump *d, const struct fleet_config *fleet)
{
	config_dump_word(d, "fleet");
	config_dump_mapping_start(d, false);
	config_dump_pair_text(d, "redis", fleet->redis);
	config_dump_pair_text(d, "name", fleet->name);
	config_dump_pair_ms(d, "sync_interval", fleet->sync_interval_ms);
	if (fleet->username != NULL)
		config_dump_pair_text(d, "username", fleet->username);
	if (fleet->password_file != NULL)
		config_dump_pair_text(d, "password_file", fleet->password_file);
	config_dump_mapping_end(d);
}

/* limits: every one, sizes and durations in units. */
static void config_dump_limits(struct config_dump *d, const struct limits *limits)
{
	config_dump_word(d, "limits");
	config_dump_mapping_start(d, false);
	config_dump_pair_unsigned(d, "max_connections", limits->max_connections);
	config_dump_pair_size(d, "max_header_bytes", limits->max_header_bytes);
	config_dump_pair_size(d, "max_uri_bytes", limits->max_uri_bytes);
	config_dump_pair_size(d, "max_body_bytes", limits->max_body_bytes);
	config_dump_pair_size(d, "replay_buffer", limits->replay_buffer);
	config_dump_pair_ms(d, "client_timeout", limits->client_timeout_ms);
	config_dump_pair_size(d, "retry_response_buffer", limits->retry_response_buffer);
	config_dump_pair_size(d, "retry_memory", limits->retry_memory);
	config_dump_pair_ms(d, "connect_timeout", limits->connect_timeout_ms);
	config_dump_pair_ms(d, "try_timeout", limits->try_timeout_ms);
	config_dump_pair_ms(d, "drain_timeout", limits->drain_timeout_ms);
	config_dump_pair_unsigned(d, "pool_max_idle", limits->pool_max_idle);
	config_dump_pair_ms(d, "pool_idle_timeout", limits->pool_idle_timeout_ms);
	config_dump_pair_ms(d, "tunnel_idle_timeout", limits->tunnel_idle_timeout_ms);
	config_dump_pair_ms(d, "dns_cache", limits->dns_cache_ms);
	config_dump_pair_unsigned(d, "max_pending_retries", limits->max_pending_retries);
	config_dump_pair_size(d, "spool_max", limits->spool_max);
	config_dump_pair_text(d, "spool_dir", limits->spool_dir);
	config_dump_pair_size(d, "spool_total", limits->spool_total);
	config_dump_pair_unsigned(d, "max_upstream_connections", limits->max_upstream_connections);
	config_dump_mapping_end(d);
}

/* health: every key. */
static void config_dump_health(struct config_dump *d, const struct health_policy *health)
{
	config_dump_word(d, "health");
	config_dump_mapping_start(d, false);
	config_dump_pair_unsigned(d, "down_after", health->down_after);
	config_dump_pair_ms(d, "probe_interval", health->probe_interval_ms);
	config_dump_pair_bool(d, "hold", health->hold);
	config_dump_mapping_end(d);
}

/* The document's one mapping, in the order of the shipped config file. */
static void config_dump_document(struct config_dump *d, const struct config *config)
{
	static const char *const levels[] = {
		[LOG_LEVEL_ERROR] = "error",
		[LOG_LEVEL_WARN] = "warn",
		[LOG_LEVEL_INFO] = "info",
		[LOG_LEVEL_DEBUG] = "debug",
	};

	config_dump_mapping_start(d, false);
	config_dump_word(d, "listen");
	config_dump_sequence_start(d, false);
	for (size_t i = 0; i < config->listener_count; i++) {
		const struct listener_config *lc = &config->listeners[i];

		config_dump_mapping_start(d, false);
		config_dump_pair_text(d, "address", lc->address);
		if (lc->upstream != NULL)
			config_dump_pair_text(d, "upstream", lc->upstream->text);
		config_dump_mapping_end(d);
	}
	config_dump_sequence_end(d);
	/* no admin: key is how a config turns the admin listener off */
	if (config->admin_address != NULL)
		config_dump_pair_text(d, "admin", config->admin_address);
	config_dump_word(d, "log");
	config_dump_mapping_start(d, false);
	config_dump_pair_word(d, "level", levels[config->log_level]);
	config_dump_pair_word(d, "format", config->log_format == LOG_FORMAT_JSON ? "json" : "text");
	config_dump_mapping_end(d);
	config_dump_access(d, config);
	config_dump_tls(d, &config->tls);
	/* no intercept: key is how a config leaves CONNECT alone */
	if (config->intercept.ca != NULL)
		config_dump_intercept(d, &config->intercept);
	/* no fleet: key is how a config keeps every budget local */
	if (config->fleet.redis != NULL)
		config_dump_fleet(d, &config->fleet);
	config_dump_limits(d, &config->limits);
	config_dump_health(d, &config->health);
	config_dump_word(d, "defaults");
	config_dump_mapping_start(d, false);
	config_dump_retry(d, &config->default_route.retry, false);
	config_dump_idempotent(d, &config->default_route.idempotent);
	config_dump_mapping_end(d);
	config_dump_word(d, "routes");
	config_dump_sequence_start(d, config->route_count == 0);
	for (size_t i = 0; i < config->route_count; i++)
		config_dump_route(d, &config->routes[i], &config->default_route);
	config_dump_sequence_end(d);
	config_dump_mapping_end(d);
}

/* Does libyaml's reader take the character at s (n bytes of well-formed
 * UTF-8) as text within a comment line? It ends the line at NEL, LS and PS
 * as at a newline, and refuses other control characters, U+FFFE and U+FFFF. */
static bool config_dump_comment_char(const unsigned char *s, size_t n)
{
	uint32_t code;

	if (n == 1)
		return s[0] >= 0x20 && s[0] != 0x7f;
	if (n == 2)
		return (((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f)) >= 0xa0;
	if (n == 3) {
		code = ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) |
		       (s[2] & 0x3f);
		return code != 0x2028 && code != 0x2029 && code != 0xfffe && code != 0xffff;
	}
	return true;
}

/* A comment line naming the source. A character that would end the comment
 * (a newline, NEL, LS or PS: what follows would be read as YAML), or that
 * libyaml refuses (a control, a byte that is not UTF-8 as from a directory
 * named in Latin-1: the whole document would not load), is written '?'. */
static void config_dump_header(struct evbuffer *out, const char *source)
{
	const unsigned char *p = (const unsigned char *)source;
	size_t left = strlen(source);

	evbuffer_add_printf(out, "# retryproxy effective configuration, loaded from ");
	while (left > 0) {
		size_t n = utf8_char_length(p, left);

		if (n > 0 && config_dump_comment_char(p, n)) {
			evbuffer_add(out, p, n);
		} else {
			evbuffer_add(out, "?", 1);
			n = n > 0 ? n : 1;
		}
		p += n;
		left -= n;
	}
	evbuffer_add_printf(out, "\n");
}

void config_dump_yaml(const struct config *config, struct evbuffer *out)
{
	struct config_dump d = { .out = out };
	yaml_event_t event;

	config_dump_header(out, config->source);
	if (!yaml_emitter_initialize(&d.emitter)) {
		log_error("config dump: cannot start the libyaml emitter");
		abort();
	}
	yaml_emitter_set_output(&d.emitter, config_dump_write, &d);
	yaml_emitter_set_unicode(&d.emitter, 1);
	yaml_emitter_set_width(&d.emitter, -1); /* long values stay on one line */
	yaml_emitter_set_indent(&d.emitter, 2);
	yaml_stream_start_event_initialize(&event, YAML_UTF8_ENCODING);
	config_dump_emit(&d, &event);
	yaml_document_start_event_initialize(&event, NULL, NULL, NULL, 1);
	config_dump_emit(&d, &event);
	config_dump_document(&d, config);
	yaml_document_end_event_initialize(&event, 1);
	config_dump_emit(&d, &event);
	yaml_stream_end_event_initialize(&event);
	config_dump_emit(&d, &event);
	yaml_emitter_flush(&d.emitter);
	yaml_emitter_delete(&d.emitter);
}
