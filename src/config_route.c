#include "config_route.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include "config_values.h"
#include "name_index.h"
#include "uri_path.h"
#include "xmalloc.h"

/* Free an array of strings and the strings. */
static void config_route_free_strings(char **strings, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(strings[i]);
	free(strings);
}

/* retry_after: honor or ignore. */
static void config_route_set_retry_after(struct config_walk *walk,
					 const struct yaml_tree_node *node, void *field)
{
	static const char *const names[] = { "honor", "ignore" };
	int i = config_walk_choice(walk, node, names, 2, "honor or ignore");

	if (i >= 0)
		*(bool *)field = i == 0;
}

static const struct config_walk_type config_route_type_retry_after = {
	YAML_TREE_SCALAR, "honor or ignore", config_route_set_retry_after
};

/* idempotency_key: none or inject. */
static void config_route_set_idempotency_key(struct config_walk *walk,
					     const struct yaml_tree_node *node, void *field)
{
	static const char *const names[] = { "none", "inject" };
	int i = config_walk_choice(walk, node, names, 2, "none or inject");

	if (i >= 0)
		*(enum idempotency_key_mode *)field =
			i == 0 ? IDEMPOTENCY_KEY_NONE : IDEMPOTENCY_KEY_INJECT;
}

static const struct config_walk_type config_route_type_idempotency_key = {
	YAML_TREE_SCALAR, "none or inject", config_route_set_idempotency_key
};

/* mode: enforce or observe. */
static void config_route_set_mode(struct config_walk *walk, const struct yaml_tree_node *node,
				  void *field)
{
	static const char *const names[] = { "enforce", "observe" };
	int i = config_walk_choice(walk, node, names, 2, "enforce or observe");

	if (i >= 0)
		*(enum retry_mode *)field = i == 0 ? RETRY_MODE_ENFORCE : RETRY_MODE_OBSERVE;
}

static const struct config_walk_type config_route_type_mode = { YAML_TREE_SCALAR,
								"enforce or observe",
								config_route_set_mode };

/* jitter: a duration added at random to each wait, or "full" jitter. */
static void config_route_set_jitter(struct config_walk *walk, const struct yaml_tree_node *node,
				    void *field)
{
	struct retry_policy *retry = field;
	uint64_t ms;

	if (strcmp(node->text, "full") == 0) {
		retry->jitter_full = true;
		retry->jitter_ms = 0;
	} else if (config_values_duration(node->text, &ms) == 0) {
		retry->jitter_full = false;
		retry->jitter_ms = ms;
	} else {
		config_walk_bad_duration(walk, node, "a duration like 1s, or full");
	}
}

static const struct config_walk_type config_route_type_jitter = { YAML_TREE_SCALAR,
								  "a duration like 1s, or full",
								  config_route_set_jitter };

/* The standard method item spells in another case (get for GET), or NULL.
 * Methods are case-sensitive (RFC 9110 section 9.1): "get" would be a method
 * of its own that no client sends, and a route or map written so would
 * never match; a method of one's own in lower case stays allowed. */
static const char *config_route_miscased_method(const char *item)
{
	static const char *const standard[] = { "GET",	   "HEAD",    "POST",  "PUT",  "DELETE",
						"CONNECT", "OPTIONS", "TRACE", "PATCH" };

	for (size_t i = 0; i < sizeof(standard) / sizeof(standard[0]); i++)
		if (strcasecmp(item, standard[i]) == 0 && strcmp(item, standard[i]) != 0)
			return standard[i];
	return NULL;
}

/* A list of method tokens, kept as written: methods are case-sensitive. */
static void config_route_methods(struct config_walk *walk, const struct yaml_tree_node *node,
				 char ***methods, size_t *count, bool allow_empty)
{
	char **out = xcalloc(node->count, sizeof(*out));
	size_t n = 0, errors = config_walk_error_count(walk);

	if (node->count == 0 && !allow_empty)
		config_walk_error(walk, node,
				  "expected at least one method; leave the key out to match any");
	for (size_t i = 0; i < node->count; i++) {
		size_t mark = config_walk_push_index(walk, i);
		const struct yaml_tree_node *item =
			config_walk_scalar_item(walk, node, i, "a method like GET");
		bool seen = false;

		if (item != NULL && !config_values_is_token(item->text)) {
			config_walk_bad_value(walk, item, "a method like GET");
		} else if (item != NULL && config_route_miscased_method(item->text) != NULL) {
			config_walk_error(walk, item,
					  "methods are case-sensitive: \"%s\" is not %s; write %s",
					  item->text, config_route_miscased_method(item->text),
					  config_route_miscased_method(item->text));
		} else if (item != NULL) {
			for (size_t j = 0; j < i && !seen; j++) {
				const struct yaml_tree_node *other = node->items[j];

				seen = other->kind == YAML_TREE_SCALAR &&
				       strcmp(other->text, item->text) == 0;
				if (seen)
					config_walk_repeated(walk, item, j);
			}
			if (!seen)
				out[n++] = xstrdup(item->text);
		}
		config_walk_pop(walk, mark);
	}
	if (config_walk_error_count(walk) > errors) {
		config_route_free_strings(out, n);
		return;
	}
	config_route_free_strings(*methods, *count);
	*methods = out;
	*count = n;
}

/* idempotent.methods: replaces the inherited list; may be empty. */
static void config_route_set_idempotent_methods(struct config_walk *walk,
						const struct yaml_tree_node *node, void *field)
{
	struct idempotency *idem = field;

	config_route_methods(walk, node, &idem->methods, &idem->method_count, true);
}

static const struct config_walk_type config_route_type_idempotent_methods = {
	YAML_TREE_SEQUENCE, "a list of methods like [GET, PUT]", config_route_set_idempotent_methods
};

/* match.methods: at least one when given; absent matches any. */
static void config_route_set_match_methods(struct config_walk *walk,
					   const struct yaml_tree_node *node, void *field)
{
	struct route *route = field;

	config_route_methods(walk, node, &route->match_methods, &route->match_method_count, false);
}

static const struct config_walk_type config_route_type_match_methods = {
	YAML_TREE_SEQUENCE, "a list of methods like [GET, PUT]", config_route_set_match_methods
};

/* The entry of out[0..n) with this kind and name, else n. A header name is
 * matched without regard to case, as header fields are (RFC 9110 section
 * 5.1); a query parameter or JSON member with it. */
static size_t config_route_when_present_index(const struct when_present *out, size_t n,
					      enum when_present_kind kind, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (out[i].kind == kind &&
		    (kind == WHEN_PRESENT_HEADER ? strcasecmp(out[i].name, name)
						 : strcmp(out[i].name, name)) == 0)
			return i;
	return n;
}

/* when_present: a list of one-key mappings, replacing the inherited one. */
static void config_route_set_when_present(struct config_walk *walk,
					  const struct yaml_tree_node *node, void *field)
{
	static const char *const kinds[] = { "query", "header", "json_field" };
	static const enum when_present_kind values[] = { WHEN_PRESENT_QUERY, WHEN_PRESENT_HEADER,
							 WHEN_PRESENT_JSON_FIELD };
	struct idempotency *idem = field;
	struct when_present *out = xcalloc(node->count, sizeof(*out));
	size_t *at = xcalloc(node->count, sizeof(*at)); /* the list index of each of out */
	size_t n = 0;

	for (size_t i = 0; i < node->count; i++) {
		const struct yaml_tree_node *item = node->items[i], *key, *value;
		size_t mark = config_walk_push_index(walk, i), inner;
		int kind = -1;

		if (item->kind != YAML_TREE_MAPPING || item->count != 1) {
			config_walk_error(
				walk, item,
				"expected one of query:, header: or json_field: and a name, "
				"like header: If-Match");
			config_walk_pop(walk, mark);
			continue;
		}
		key = item->entries[0].key;
		value = item->entries[0].value;
		for (int k = 0; k < 3; k++)
			if (strcmp(key->text, kinds[k]) == 0)
				kind = k;
		if (kind < 0) {
			config_walk_unknown_key(walk, key, kinds, 3);
			config_walk_pop(walk, mark);
			continue;
		}
		inner = config_walk_push(walk, key->text);
		if (value->kind != YAML_TREE_SCALAR || value->text_len == 0 ||
		    (kind == 1 && !config_values_is_token(value->text))) {
			const char *what = kind == 1 ? "a header field name" : "a name";

			if (value->kind == YAML_TREE_SCALAR)
				config_walk_bad_value(walk, value, what);
			else
				config_walk_error(walk, value, "expected %s, got %s", what,
						  yaml_tree_kind_name(value->kind));
		} else {
			size_t first =
				config_route_when_present_index(out, n, values[kind], value->text);

			if (first < n) {
				config_walk_repeated(walk, value, at[first]);
			} else {
				out[n].kind = values[kind];
				out[n].name = xstrdup(value->text);
				at[n++] = i;
			}
		}
		config_walk_pop(walk, inner);
		config_walk_pop(walk, mark);
	}
	free(at);
	for (size_t i = 0; i < idem->when_present_count; i++)
		free(idem->when_present[i].name);
	free(idem->when_present);
	idem->when_present = out;
	idem->when_present_count = n;
}

static const struct config_walk_type config_route_type_when_present = {
	YAML_TREE_SEQUENCE, "a list like [header: If-Match]", config_route_set_when_present
};

/* The words retry.on takes beside status codes. */
static const struct {
	const char *word;
	enum retry_on flag;
} config_route_retry_on_words[] = {
	{ "5xx", RETRY_ON_5XX },
	{ "connect-failure", RETRY_ON_CONNECT_FAILURE },
	{ "reset", RETRY_ON_RESET },
	{ "timeout", RETRY_ON_TIMEOUT },
};
#define CONFIG_ROUTE_RETRY_ON_WORDS \
	(sizeof(config_route_retry_on_words) / sizeof(config_route_retry_on_words[0]))

/* What a retry.on element stands for: a status code, or -1 - i for the
 * word config_route_retry_on_words[i], or 0 when it is none of them (or a
 * code it refuses). "503" and 503 are one element. */
static int config_route_retry_on_meaning(const struct yaml_tree_node *item)
{
	uint64_t code;

	if (item == NULL || item->kind != YAML_TREE_SCALAR)
		return 0;
	for (size_t i = 0; i < CONFIG_ROUTE_RETRY_ON_WORDS; i++)
		if (strcmp(item->text, config_route_retry_on_words[i].word) == 0)
			return -1 - (int)i;
	/* only a valid code: an invalid one gets its own error each time */
	if (config_values_unsigned(item->text, 599, &code) == 0 && code >= 200)
		return (int)code;
	return 0;
}

/* Add one retry.on element to the policy; one given before it is an error
 * naming where. */
static void config_route_retry_on_item(struct config_walk *walk, const struct yaml_tree_node *list,
				       size_t index, struct retry_policy *retry, const char *what)
{
	const struct yaml_tree_node *item = list->items[index];
	int meaning = config_route_retry_on_meaning(item);
	uint64_t code;

	for (size_t j = 0; meaning != 0 && j < index; j++) {
		if (config_route_retry_on_meaning(list->items[j]) == meaning) {
			config_walk_repeated(walk, item, j);
			return;
		}
	}
	if (meaning < 0)
		retry->on |= config_route_retry_on_words[-1 - meaning].flag;
	else if (meaning > 0)
		retry->on_codes[meaning / 8] |= (uint8_t)(1u << (meaning % 8));
	else if (config_values_unsigned(item->text, 599, &code) == 0 && code >= 100)
		/* a 1xx only announces the answer (a 101 switches protocols
		 * instead): it never ends a try, so it could never be retried on */
		config_walk_error(walk, item,
				  "%u is an interim (1xx) status, never a try's final answer: "
				  "retry.on could never match it",
				  (unsigned)code);
	else
		config_walk_bad_value(walk, item, what);
}

/* retry.on replaces the inherited conditions as a whole. */
static void config_route_set_retry_on(struct config_walk *walk, const struct yaml_tree_node *node,
				      void *field)
{
	static const char *const what =
		"5xx, connect-failure, reset, timeout or a status code from 200 to 599";
	struct retry_policy *retry = field;

	retry->on = 0;
	memset(retry->on_codes, 0, sizeof(retry->on_codes));
	for (size_t i = 0; i < node->count; i++) {
		size_t mark = config_walk_push_index(walk, i);
		const struct yaml_tree_node *item = config_walk_scalar_item(walk, node, i, what);

		if (item != NULL)
			config_route_retry_on_item(walk, node, i, retry, what);
		config_walk_pop(walk, mark);
	}
}

static const struct config_walk_type config_route_type_retry_on = { YAML_TREE_SEQUENCE,
								    "a list like [5xx, 429, reset]",
								    config_route_set_retry_on };

/* match.host: lower case, exact or "*.suffix". */
static void config_route_set_match_host(struct config_walk *walk, const struct yaml_tree_node *node,
					void *field)
{
	char **host = field, *pattern;
	const char *why;
	char quoted[128];

	if (config_values_host_pattern(node->text, &pattern, &why) < 0) {
		config_walk_error(walk, node, "invalid host pattern %s: %s",
				  config_walk_quote(node, quoted, sizeof(quoted)), why);
		return;
	}
	free(*host);
	*host = pattern;
}

static const struct config_walk_type config_route_type_match_host = {
	YAML_TREE_SCALAR, "a host like api.example.com or *.example.com",
	config_route_set_match_host
};

/* match.path_prefix: kept in its normal form (uri_path.h), as request paths
 * are compared, so that /v1/%63harges/ and /v1/charges/ are one prefix. */
static void config_route_set_path_prefix(struct config_walk *walk,
					 const struct yaml_tree_node *node, void *field)
{
	char **prefix = field;
	char *normal;
	ssize_t normal_len;

	/* A request-target never holds spaces, controls, bytes past ASCII, a
	 * backslash or a fragment, so such a prefix could never match: it is a
	 * mistake worth reporting. */
	for (const char *p = node->text; *p != '\0'; p++) {
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			config_walk_bad_value(walk, node, "a path like /v1/ with no spaces");
			return;
		}
		if ((unsigned char)*p >= 0x80 || *p == '\\' || *p == '#') {
			config_walk_bad_value(walk, node,
					      "a path as requests send it: percent-encoded past "
					      "ASCII (/files/caf%C3%A9/), no backslash or #");
			return;
		}
	}
	if (node->text[0] != '/') {
		config_walk_bad_value(walk, node, "a path starting with /");
		return;
	}
	normal = xstrdup(node->text);
	normal_len = uri_path_normalize_prefix(node->text, strlen(node->text), normal);
	if (normal_len < 0) {
		free(normal);
		config_walk_bad_value(walk, node,
				      "a path as it is meant: every % followed by two hex digits, "
				      "no . or .. segment before its end");
		return;
	}
	normal[normal_len] = '\0';
	free(*prefix);
	*prefix = normal;
}

static const struct config_walk_type config_route_type_path_prefix = {
	YAML_TREE_SCALAR, "a path like /v1/", config_route_set_path_prefix
};

/* name: unique, and not "default", which names the fallback route. */
static void config_route_set_name(struct config_walk *walk, const struct yaml_tree_node *node,
				  void *field)
{
	char **name = field;

	if (node->text_len == 0 || strspn(node->text, "abcdefghijklmnopqrstuvwxyz"
						      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
						      "0123456789-_.") != node->text_len) {
		/* Names go into log lines and metric labels as they are. */
		config_walk_bad_value(walk, node, "a name of letters, digits, '-', '_' and '.'");
		return;
	}
	if (strcmp(node->text, "default") == 0) {
		config_walk_error(walk, node,
				  "\"default\" is reserved for requests no route matches");
		return;
	}
	/* the proxy's answers before routing count and log under "-": a route
	 * of that name would share their series and read as one of them */
	if (strcmp(node->text, "-") == 0) {
		config_walk_error(walk, node, "\"-\" is reserved for answers given before routing");
		return;
	}
	*name = xstrdup(node->text); /* its uniqueness: config_route_name_unique() */
}

static const struct config_walk_type config_route_type_name = { YAML_TREE_SCALAR, "a route name",
								config_route_set_name };

/* A file of CRLs alone loads, yet trusts nothing. */
static bool config_route_store_has_certificate(X509_STORE *store)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);

	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++)
		if (X509_OBJECT_get_type(sk_X509_OBJECT_value(objects, i)) == X509_LU_X509)
			return true;
	return false;
}

/* tls.ca_file: found and readable (config_walk_file), and holding
 * certificates OpenSSL loads, so that --check and --explain refuse what a
 * start or a reload would, with the file's line and column. */
static void config_route_set_ca_file(struct config_walk *walk, const struct yaml_tree_node *node,
				     void *field)
{
	char **ca_file = field;
	size_t errors = config_walk_error_count(walk);
	X509_STORE *store;

	config_walk_file.handler(walk, node, field);
	if (*ca_file == NULL || config_walk_error_count(walk) > errors)
		return;
	store = X509_STORE_new();
	ERR_clear_error();
	if (store == NULL || X509_STORE_load_file(store, *ca_file) != 1) {
		char detail[256] = "out of memory";

		if (ERR_peek_error() != 0)
			ERR_error_string_n(ERR_get_error(), detail, sizeof(detail));
		config_walk_error(walk, node, "holds no certificate to trust (%s)", detail);
	} else if (!config_route_store_has_certificate(store)) {
		config_walk_error(walk, node, "holds no certificate to trust (only CRLs)");
	}
	ERR_clear_error();
	X509_STORE_free(store);
}

static const struct config_walk_type config_route_type_ca_file = { YAML_TREE_SCALAR, "a file path",
								   config_route_set_ca_file };

const struct config_walk_key config_route_tls_keys[] = {
	{ .name = "ca_file",
	  .type = &config_route_type_ca_file,
	  .offset = offsetof(struct tls_policy, ca_file) },
	{ .name = "verify",
	  .type = &config_walk_bool,
	  .offset = offsetof(struct tls_policy, verify) },
	{ .name = NULL },
};

/* A route's tls: starts from the global one and overrides the keys it names. */
static void config_route_set_tls(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	struct route *route = field;

	route->tls_overridden = true;
	config_walk_mapping(walk, node, config_route_tls_keys, &route->tls);
}

static const struct config_walk_type config_route_type_tls = { YAML_TREE_MAPPING, "a mapping",
							       config_route_set_tls };

static const struct config_walk_key config_route_budget_keys[] = {
	{ .name = "ratio",
	  .type = &config_walk_rate,
	  .offset = offsetof(struct retry_budget, ratio) },
	{ .name = "min_per_second",
	  .type = &config_walk_rate,
	  .offset = offsetof(struct retry_budget, min_per_second) },
	{ .name = "window",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct retry_budget, window_ms) },
	{ .name = NULL },
};

/* hedge.max: extra tries in flight, 1 to 3 (SPEC). */
static void config_route_set_hedge_max(struct config_walk *walk, const struct yaml_tree_node *node,
				       void *field)
{
	uint64_t n;

	if (config_values_unsigned(node->text, 3, &n) < 0 || n == 0)
		config_walk_bad_value(walk, node, "a whole number from 1 to 3");
	else
		*(unsigned *)field = (unsigned)n;
}

static const struct config_walk_type config_route_type_hedge_max = { YAML_TREE_SCALAR,
								     "a whole number from 1 to 3",
								     config_route_set_hedge_max };

static const struct config_walk_key config_route_hedge_keys[] = {
	{ .name = "after", /* 0: no hedging, for a route under defaults that hedge */
	  .type = &config_walk_duration,
	  .offset = offsetof(struct hedge_policy, after_ms) },
	{ .name = "max",
	  .type = &config_route_type_hedge_max,
	  .offset = offsetof(struct hedge_policy, max) },
	{ .name = NULL },
};

/* hedge: over the inherited one key by key; with none inherited, after: is
 * what turns hedging on, so it must be there. A section left empty (all
 * commented out) changes nothing. */
static void config_route_set_hedge(struct config_walk *walk, const struct yaml_tree_node *node,
				   void *field)
{
	struct hedge_policy *hedge = field;

	if (yaml_tree_is_null(node) || node->count == 0)
		return;
	config_walk_mapping(walk, node, config_route_hedge_keys, hedge);
	if (hedge->after_ms == 0 && yaml_tree_find(node, "after") == NULL)
		config_walk_error(walk, node, "missing key \"after\"");
}

static const struct config_walk_type config_route_type_hedge = { YAML_TREE_MAPPING, "a mapping",
								 config_route_set_hedge };

static const struct config_walk_key config_route_retry_keys[] = {
	{ .name = "on", .type = &config_route_type_retry_on },
	{ .name = "max_attempts",
	  .type = &config_walk_count_positive,
	  .offset = offsetof(struct retry_policy, max_attempts) },
	{ .name = "initial_backoff",
	  .type = &config_walk_duration,
	  .offset = offsetof(struct retry_policy, initial_backoff_ms) },
	{ .name = "multiplier",
	  .type = &config_walk_multiplier,
	  .offset = offsetof(struct retry_policy, multiplier) },
	{ .name = "max_backoff",
	  .type = &config_walk_duration,
	  .offset = offsetof(struct retry_policy, max_backoff_ms) },
	{ .name = "jitter", .type = &config_route_type_jitter },
	{ .name = "deadline",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct retry_policy, deadline_ms) },
	{ .name = "retry_after",
	  .type = &config_route_type_retry_after,
	  .offset = offsetof(struct retry_policy, honor_retry_after) },
	{ .name = "budget",
	  .offset = offsetof(struct retry_policy, budget),
	  .section = config_route_budget_keys },
	{ .name = "try_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct retry_policy, try_timeout_ms) },
	{ .name = "hedge",
	  .type = &config_route_type_hedge,
	  .offset = offsetof(struct retry_policy, hedge) },
	{ .name = "resume",
	  .type = &config_walk_bool,
	  .offset = offsetof(struct retry_policy, resume) },
	{ .name = "attempt_header",
	  .type = &config_walk_bool,
	  .offset = offsetof(struct retry_policy, attempt_header) },
	{ .name = "idempotency_key",
	  .type = &config_route_type_idempotency_key,
	  .offset = offsetof(struct retry_policy, idempotency_key) },
	{ .name = "mode",
	  .type = &config_route_type_mode,
	  .offset = offsetof(struct retry_policy, mode) },
	{ .name = NULL },
};

/* The try_timeout a policy ends up with: its own (a route's own or the one
 * it took from defaults.retry), else limits.try_timeout. */
static uint64_t config_route_try_timeout(const struct retry_policy *retry,
					 const struct config *config)
{
	return retry->try_timeout_ms != 0 ? retry->try_timeout_ms : config->limits.try_timeout_ms;
}

/* A hedge that waits as long as the try it would back up never fires:
 * refuse it, pointing at whichever of the two this mapping sets; if it sets
 * neither, both came from defaults.retry, which was checked already. */
static void config_route_check_hedge(struct config_walk *walk, const struct yaml_tree_node *node,
				     const struct retry_policy *retry)
{
	const struct config *config = config_walk_data(walk);
	const struct yaml_tree_entry *hedge = yaml_tree_find(node, "hedge"), *blame = NULL;
	uint64_t try_timeout = config_route_try_timeout(retry, config);
	char after[32], timeout[32];
	size_t mark;

	if (retry->hedge.after_ms == 0 || retry->hedge.after_ms < try_timeout)
		return;
	config_values_format_ms(retry->hedge.after_ms, after, sizeof(after));
	config_values_format_ms(try_timeout, timeout, sizeof(timeout));
	if (hedge != NULL && hedge->value->kind == YAML_TREE_MAPPING)
		blame = yaml_tree_find(hedge->value, "after");
	if (blame != NULL) {
		mark = config_walk_push(walk, "hedge");
		config_walk_push(walk, "after");
		config_walk_error(walk, blame->value,
				  "hedge.after (%s) must be shorter than try_timeout (%s)", after,
				  timeout);
	} else if ((blame = yaml_tree_find(node, "try_timeout")) != NULL) {
		mark = config_walk_push(walk, "try_timeout");
		config_walk_error(
			walk, blame->value,
			"try_timeout (%s) must be longer than hedge.after (%s), inherited "
			"from defaults.retry",
			timeout, after);
	} else {
		return;
	}
	config_walk_pop(walk, mark);
}

/* A budget with ratio 0 and min_per_second 0 allows no retry on any load:
 * retrying turned off by what reads as a limit on it. Not beside
 * max_attempts 1, which makes no retry anyway (a policy that says so
 * twice). Refuse it, pointing at this mapping's ratio, else its
 * min_per_second, else its max_attempts above 1 under a budget it
 * inherits; if it sets none of them, defaults.retry was checked already.
 * True when refused. */
static bool config_route_check_budget_allows_none(struct config_walk *walk,
						  const struct yaml_tree_node *node,
						  const struct retry_policy *retry)
{
	const struct yaml_tree_entry *budget = yaml_tree_find(node, "budget");
	const struct yaml_tree_entry *blame = NULL;
	size_t mark;

	if (retry->max_attempts < 2 || retry->budget.ratio > 0 ||
	    retry->budget.min_per_second > 0 || config_walk_refused(walk, node, "max_attempts"))
		return false;
	if (budget != NULL) {
		/* a budget that is no mapping, or a bad value in it, is
		 * reported as such, not as this */
		if (budget->value->kind != YAML_TREE_MAPPING ||
		    config_walk_refused(walk, budget->value, "ratio") ||
		    config_walk_refused(walk, budget->value, "min_per_second"))
			return false;
		blame = yaml_tree_find(budget->value, "ratio");
		if (blame == NULL)
			blame = yaml_tree_find(budget->value, "min_per_second");
	}
	if (blame != NULL) {
		mark = config_walk_push(walk, "budget");
		config_walk_push(walk, blame->key->text);
		config_walk_error(walk, blame->value,
				  "ratio 0 and min_per_second 0 allow no retry at all; to turn "
				  "retries off write max_attempts: 1, else give either a value "
				  "above 0");
		config_walk_pop(walk, mark);
		return true;
	}
	blame = yaml_tree_find(node, "max_attempts");
	if (blame == NULL)
		return false;
	mark = config_walk_push(walk, blame->key->text);
	config_walk_error(walk, blame->value,
			  "%u tries under a budget of ratio 0 and min_per_second 0 (from "
			  "defaults.retry) allow no retry at all; give the budget a ratio or "
			  "min_per_second above 0, or write max_attempts: 1",
			  retry->max_attempts);
	config_walk_pop(walk, mark);
	return true;
}

/* A budget whose floor (min_per_second x window) is above 0 but below one
 * retry allows no retry on a quiet route, which is not what min_per_second
 * promises: refuse it, pointing at the window if this mapping's budget
 * sets it, else at its min_per_second; if it sets neither, both came from
 * defaults.retry, which was checked already. */
static void config_route_check_budget(struct config_walk *walk, const struct yaml_tree_node *node,
				      const struct retry_policy *retry)
{
	const struct yaml_tree_entry *budget = yaml_tree_find(node, "budget"), *blame = NULL;
	double floor = retry_budget_floor(&retry->budget);
	char window[32];
	size_t mark;

	if (config_route_check_budget_allows_none(walk, node, retry) || budget == NULL ||
	    budget->value->kind != YAML_TREE_MAPPING)
		return;
	if (floor <= 0 || floor >= 1 || config_walk_refused(walk, budget->value, "window") ||
	    config_walk_refused(walk, budget->value, "min_per_second"))
		return;
	blame = yaml_tree_find(budget->value, "window");
	if (blame == NULL)
		blame = yaml_tree_find(budget->value, "min_per_second");
	if (blame == NULL)
		return;
	config_values_format_ms(retry->budget.window_ms, window, sizeof(window));
	mark = config_walk_push(walk, "budget");
	config_walk_push(walk, blame->key->text);
	config_walk_error(walk, blame->value,
			  "min_per_second x window is %g (%g x %s): below one retry, the floor "
			  "would allow none; make it at least 1, or min_per_second 0 for no floor",
			  floor, retry->budget.min_per_second, window);
	config_walk_pop(walk, mark);
}

/* max_backoff must not be shorter than initial_backoff: refuse it, pointing
 * at whichever of the two this mapping sets; if it sets neither, the
 * defaults were already reported. True when refused. */
static bool config_route_check_backoff_order(struct config_walk *walk,
					     const struct yaml_tree_node *node,
					     const struct retry_policy *retry)
{
	const struct yaml_tree_entry *blame;
	char max[32], initial[32];
	size_t mark;

	/* a refused key has left the value before it in place */
	if (retry->max_backoff_ms >= retry->initial_backoff_ms ||
	    config_walk_refused(walk, node, "initial_backoff") ||
	    config_walk_refused(walk, node, "max_backoff"))
		return false;
	config_values_format_ms(retry->max_backoff_ms, max, sizeof(max));
	config_values_format_ms(retry->initial_backoff_ms, initial, sizeof(initial));
	if ((blame = yaml_tree_find(node, "max_backoff")) != NULL) {
		mark = config_walk_push(walk, "max_backoff");
		config_walk_error(walk, blame->value, "%s is shorter than initial_backoff (%s)",
				  max, initial);
	} else if ((blame = yaml_tree_find(node, "initial_backoff")) != NULL) {
		mark = config_walk_push(walk, "initial_backoff");
		config_walk_error(walk, blame->value, "%s is longer than max_backoff (%s)", initial,
				  max);
	} else {
		return false;
	}
	config_walk_pop(walk, mark);
	return true;
}

/* Without full jitter every wait is at least initial_backoff (max_backoff
 * is not shorter), and no retry starts after the deadline: with
 * initial_backoff at or past the deadline no retry could follow a wait,
 * whatever the rest of the policy reads as. Refuse it, pointing at the
 * first of the keys that made it so that this mapping sets; if it sets
 * none, the defaults were already reported. With max_attempts 1 no retry
 * is made anyway, and the deadline still bounds a held or queued try. A
 * hedge that starts before the deadline is a try that follows no wait:
 * such a policy retries by hedging. */
static void config_route_check_backoff_deadline(struct config_walk *walk,
						const struct yaml_tree_node *node,
						const struct retry_policy *retry)
{
	/* hedge last: a route that turns off (or delays) the hedge its
	 * defaults passed with is blamed for it */
	static const char *const keys[] = { "initial_backoff", "deadline", "jitter", "max_attempts",
					    "hedge" };
	const struct yaml_tree_entry *blame = NULL;
	char initial[32], deadline[32];
	size_t mark;

	if (retry->jitter_full || retry->max_attempts < 2 ||
	    retry->initial_backoff_ms < retry->deadline_ms ||
	    (retry->hedge.after_ms > 0 && retry->hedge.after_ms < retry->deadline_ms))
		return;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (config_walk_refused(walk, node, keys[i]))
			return;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && blame == NULL; i++)
		blame = yaml_tree_find(node, keys[i]);
	if (blame == NULL)
		return;
	config_values_format_ms(retry->initial_backoff_ms, initial, sizeof(initial));
	config_values_format_ms(retry->deadline_ms, deadline, sizeof(deadline));
	mark = config_walk_push(walk, blame->key->text);
	config_walk_error(walk, blame->value,
			  "initial_backoff (%s) is not shorter than deadline (%s): every retry "
			  "would wait until the deadline or past it, so none would be made; "
			  "shorten initial_backoff, lengthen deadline, or use jitter: full",
			  initial, deadline);
	config_walk_pop(walk, mark);
}

/* A retry: mapping over the policy already in place (the defaults, for a
 * route), then the checks that involve more than one key. limits: is read
 * before defaults: and routes: whatever the file's order, so the
 * try_timeout a route falls back to is known here. */
static void config_route_set_retry(struct config_walk *walk, const struct yaml_tree_node *node,
				   void *field)
{
	struct retry_policy *retry = field;

	config_walk_mapping(walk, node, config_route_retry_keys, retry);
	if (node->kind == YAML_TREE_MAPPING) {
		config_route_check_hedge(walk, node, retry);
		config_route_check_budget(walk, node, retry);
	}
	/* one refusal for a pair already wrong between themselves */
	if (!config_route_check_backoff_order(walk, node, retry))
		config_route_check_backoff_deadline(walk, node, retry);
}

static const struct config_walk_type config_route_type_retry = { YAML_TREE_MAPPING, "a mapping",
								 config_route_set_retry };

static const struct config_walk_key config_route_idempotent_keys[] = {
	{ .name = "methods", .type = &config_route_type_idempotent_methods },
	{ .name = "when_present", .type = &config_route_type_when_present },
	{ .name = NULL },
};

static const struct config_walk_key config_route_match_keys[] = {
	{ .name = "host",
	  .type = &config_route_type_match_host,
	  .offset = offsetof(struct route, match_host) },
	{ .name = "path_prefix",
	  .type = &config_route_type_path_prefix,
	  .offset = offsetof(struct route, match_path_prefix) },
	{ .name = "methods", .type = &config_route_type_match_methods },
	{ .name = NULL },
};

static const struct config_walk_key config_route_keys[] = {
	{ .name = "name",
	  .type = &config_route_type_name,
	  .offset = offsetof(struct route, name),
	  .required = true },
	{ .name = "match", .section = config_route_match_keys },
	{ .name = "upstream",
	  .type = &config_walk_upstream,
	  .offset = offsetof(struct route, upstream) },
	{ .name = "tls", .type = &config_route_type_tls },
	{ .name = "idempotent",
	  .offset = offsetof(struct route, idempotent),
	  .section = config_route_idempotent_keys },
	{ .name = "retry",
	  .type = &config_route_type_retry,
	  .offset = offsetof(struct route, retry) },
	{ .name = NULL },
};

/* A deep copy, so that every route owns (and frees) its own lists. */
static void config_route_copy_idempotency(struct idempotency *dst, const struct idempotency *src)
{
	dst->methods = xcalloc(src->method_count, sizeof(*dst->methods));
	for (size_t i = 0; i < src->method_count; i++)
		dst->methods[i] = xstrdup(src->methods[i]);
	dst->method_count = src->method_count;
	dst->when_present = xcalloc(src->when_present_count, sizeof(*dst->when_present));
	for (size_t i = 0; i < src->when_present_count; i++) {
		dst->when_present[i].kind = src->when_present[i].kind;
		dst->when_present[i].name = xstrdup(src->when_present[i].name);
	}
	dst->when_present_count = src->when_present_count;
}

/* routes[index]'s name joins names, unless a route before it has it: the
 * error then names that one, and the name is dropped. */
static void config_route_name_unique(struct name_index *names, struct config_walk *walk,
				     const struct yaml_tree_node *route_node, struct route *routes,
				     size_t index)
{
	const struct route *first = name_index_find(names, routes[index].name, 0);
	const struct yaml_tree_node *node;
	size_t mark;
	char quoted[128];

	if (first == NULL) {
		name_index_add(names, routes[index].name, 0, &routes[index]);
		return;
	}
	node = yaml_tree_find(route_node, "name")->value;
	mark = config_walk_push(walk, "name");
	config_walk_error(walk, node, "the name %s is already used by routes[%zu]",
			  config_walk_quote(node, quoted, sizeof(quoted)),
			  (size_t)(first - routes));
	config_walk_pop(walk, mark);
	free(routes[index].name);
	routes[index].name = NULL;
}

/* routes: every item a route over the defaults, in order of matching. */
static void config_route_set_routes(struct config_walk *walk, const struct yaml_tree_node *node,
				    void *field)
{
	struct config *config = field;
	/* names seen so far: a file of many thousand routes loads in time
	 * linear in its length, not a walk of the names before for each */
	struct name_index *names = name_index_new(node->count);

	config->routes = xcalloc(node->count, sizeof(*config->routes));
	for (size_t i = 0; i < node->count; i++) {
		struct route *route = &config->routes[i];
		size_t mark = config_walk_push_index(walk, i);

		/* Every route starts from the defaults and the global tls,
		 * which the table has read by now. */
		route->retry = config->default_route.retry;
		config_route_copy_idempotency(&route->idempotent,
					      &config->default_route.idempotent);
		route->tls.ca_file = config->tls.ca_file ? xstrdup(config->tls.ca_file) : NULL;
		route->tls.verify = config->tls.verify;
		config_walk_mapping(walk, node->items[i], config_route_keys, route);
		if (route->name != NULL)
			config_route_name_unique(names, walk, node->items[i], config->routes, i);
		config->route_count++;
		config_walk_pop(walk, mark);
	}
	name_index_free(names);
}

const struct config_walk_type config_route_list = { YAML_TREE_SEQUENCE, "a list of routes",
						    config_route_set_routes };

const struct config_walk_key config_route_defaults_keys[] = {
	{ .name = "retry",
	  .type = &config_route_type_retry,
	  .offset = offsetof(struct route, retry) },
	{ .name = "idempotent",
	  .offset = offsetof(struct route, idempotent),
	  .section = config_route_idempotent_keys },
	{ .name = NULL },
};

/* The default policy: SPEC "defaults:". */
void config_route_set_defaults(struct route *route)
{
	static const char *const methods[] = { "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE" };
	struct retry_policy *retry = &route->retry;

	retry->on = RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT;
	retry->on_codes[408 / 8] |= 1u << (408 % 8);
	retry->on_codes[429 / 8] |= 1u << (429 % 8);
	retry->max_attempts = 5;
	retry->initial_backoff_ms = 1000;
	retry->multiplier = 2;
	retry->max_backoff_ms = 32 * 1000;
	retry->jitter_full = false;
	retry->jitter_ms = 1000;
	retry->deadline_ms = 120 * 1000;
	retry->honor_retry_after = true;
	retry->budget.ratio = 0.2;
	retry->budget.min_per_second = 3;
	retry->budget.window_ms = 10 * 1000;
	retry->try_timeout_ms = 0; /* limits.try_timeout, filled by config_route_resolve */
	retry->hedge.after_ms = 0;
	retry->hedge.max = 1;
	retry->resume = true;
	retry->attempt_header = false;
	retry->idempotency_key = IDEMPOTENCY_KEY_NONE;
	retry->mode = RETRY_MODE_ENFORCE;
	route->idempotent.methods = xcalloc(6, sizeof(char *));
	for (size_t i = 0; i < 6; i++)
		route->idempotent.methods[i] = xstrdup(methods[i]);
	route->idempotent.method_count = 6;
}

/* retry.try_timeout, where neither the route nor defaults.retry set it:
 * limits.try_timeout, known only once the whole file is read. */
void config_route_resolve(struct config *config)
{
	struct retry_policy *defaults = &config->default_route.retry;

	defaults->try_timeout_ms = config_route_try_timeout(defaults, config);
	for (size_t i = 0; i < config->route_count; i++)
		if (config->routes[i].retry.try_timeout_ms == 0)
			config->routes[i].retry.try_timeout_ms = defaults->try_timeout_ms;
}

/* Free what a route owns; the route itself is in an array or the config. */
void config_route_free(struct route *route)
{
	free(route->name);
	free(route->match_host);
	free(route->match_path_prefix);
	config_route_free_strings(route->match_methods, route->match_method_count);
	config_values_url_free(route->upstream);
	free(route->upstream);
	free(route->tls.ca_file);
	config_route_free_strings(route->idempotent.methods, route->idempotent.method_count);
	for (size_t i = 0; i < route->idempotent.when_present_count; i++)
		free(route->idempotent.when_present[i].name);
	free(route->idempotent.when_present);
}