#include "explain.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config_values.h"
#include "http1.h"
#include "idempotency.h"
#include "max_forwards.h"
#include "name_lookup.h"
#include "retry.h"
#include "route.h"
#include "upstream.h"
#include "xmalloc.h"

/* Past this many waits the list ends in "...": a policy whose waits may all
 * be 0 (full jitter, no initial_backoff) could otherwise list billions. */
#define EXPLAIN_MAX_WAITS 1000

/* The body file: its size, and its first bytes, enough for the JSON check
 * (a larger body is never parsed, so the rest is only counted). A body past
 * every limit that matters is not read further (it may never end: /dev/zero,
 * a pipe): then over is set and size is only a lower bound, already past the
 * limits. */
struct explain_body {
	bool present;
	bool over; /* more than size bytes: reading stopped */
	uint64_t size;
	char *data; /* the first kept bytes */
	size_t kept;
};

/* How the proxy would receive the request. */
struct explain_view {
	const struct listener_config *listener; /* NULL when the config has none */
	bool sidecar; /* origin-form to a listener with an upstream, else absolute-form */
};

/* The request head as the proxy would parse it. */
struct explain_head {
	char *text;
	struct http1_head head;
	struct http1_framing framing;
	bool body_length; /* the Content-Length is the body file's size */
};

/* Is the URL absolute http:// or https://, with an authority, and made of
 * visible ASCII only (a space would split the request line)? */
static bool explain_url_ok(const char *url, const char **why)
{
	size_t scheme = strncasecmp(url, "http://", 7) == 0    ? 7
			: strncasecmp(url, "https://", 8) == 0 ? 8
							       : 0;

	if (scheme == 0) {
		*why = "not an absolute http:// or https:// URL";
		return false;
	}
	if (strchr("/?#", url[scheme]) != NULL) {
		*why = "no host after the scheme";
		return false;
	}
	for (const char *p = url; *p != '\0'; p++) {
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) {
			*why = "spaces, control bytes and non-ASCII bytes must be percent-encoded";
			return false;
		}
	}
	return true;
}

/* The URL's authority, host[:port] as written: after the scheme, up to the
 * path, the query or the fragment. */
static void explain_url_authority(const char *url, const char **authority, size_t *len)
{
	const char *start = strstr(url, "://") + 3;

	*authority = start;
	*len = strcspn(start, "/?#");
}

/* Is a -H argument one field line, "Name: value", with a token for a name,
 * the colon right after it and no control byte but HTAB in the value? */
static bool explain_header_ok(const char *line, const char **why)
{
	const char *colon = strchr(line, ':');
	char name[256];
	size_t name_len;

	if (colon == NULL) {
		*why = "not \"Name: value\" (no colon)";
		return false;
	}
	name_len = (size_t)(colon - line);
	if (name_len == 0 || name_len >= sizeof(name)) {
		*why = name_len == 0 ? "empty field name" : "field name too long";
		return false;
	}
	memcpy(name, line, name_len);
	name[name_len] = '\0';
	if (!config_values_is_token(name)) {
		*why = "the field name is not an HTTP token (no spaces before the colon)";
		return false;
	}
	for (const char *p = colon + 1; *p != '\0'; p++) {
		if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
			*why = "control bytes (CR, LF, ...) in the value";
			return false;
		}
	}
	return true;
}

/* Does a -H line name this field (case-insensitive)? */
static bool explain_header_is(const char *line, const char *name)
{
	size_t len = strlen(name);

	return strncasecmp(line, name, len) == 0 && line[len] == ':';
}

/* Is there a -H line for this field? */
static bool explain_has_header(const struct explain_request *request, const char *name)
{
	for (size_t i = 0; i < request->header_count; i++)
		if (explain_header_is(request->headers[i], name))
			return true;
	return false;
}

/* The most of a body that can change the answer: a larger one is refused
 * over limits.max_body_bytes, else it is over replay_buffer and spool_max
 * alike, sent once and never parsed for JSON (explain_decide()); its size
 * against a limit is at least the bytes read, framing only adding to it. */
static uint64_t explain_body_limit(const struct limits *limits)
{
	if (limits->max_body_bytes > 0)
		return limits->max_body_bytes;
	return limits->spool_max > limits->replay_buffer ? limits->spool_max
							 : limits->replay_buffer;
}

/* Read the body file: its size, and its first IDEMPOTENCY_JSON_MAX_BYTES + 1
 * bytes (one more than the JSON check parses, so it refuses a larger body by
 * its own rule). Reading stops one byte past limit: the size of a regular
 * file is then its length, of anything else limit + 1 with over set. */
static void explain_put_escaped(const char *text, FILE *out);

/* Say on err why the --body file cannot be read (error, an errno), its
 * path escaped as the other arguments are. */
static void explain_say_body_error(FILE *err, const char *path, int error)
{
	fputs("retryproxy: --explain: --body ", err);
	explain_put_escaped(path, err);
	fprintf(err, ": %s\n", strerror(error));
}

static int explain_read_body(const char *path, uint64_t limit, struct explain_body *body, FILE *err)
{
	size_t cap = IDEMPOTENCY_JSON_MAX_BYTES + 1;
	char chunk[65536];
	FILE *f = fopen(path, "rb");
	struct stat st;
	size_t n;

	if (f == NULL) {
		explain_say_body_error(err, path, errno);
		return -1;
	}
	body->present = true;
	while (body->size <= limit &&
	       (n = fread(chunk, 1,
			  limit + 1 - body->size < sizeof(chunk) ? (size_t)(limit + 1 - body->size)
								 : sizeof(chunk),
			  f)) > 0) {
		size_t keep = cap - body->kept < n ? cap - body->kept : n;

		if (keep > 0) {
			body->data = xrealloc(body->data, body->kept + keep);
			memcpy(body->data + body->kept, chunk, keep);
			body->kept += keep;
		}
		body->size += n;
	}
	if (ferror(f)) {
		explain_say_body_error(err, path, errno);
		fclose(f);
		return -1;
	}
	if (body->size > limit) {
		if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_size >= body->size)
			body->size = (uint64_t)st.st_size;
		else
			body->over = true;
	}
	fclose(f);
	return 0;
}

/* The head text: request line with target, Host unless a -H gives one, the
 * -H lines in order, Content-Length of the body unless a -H frames it. */
static char *explain_head_text(const struct explain_request *request, const char *target,
			       size_t target_len, const char *authority, size_t authority_len,
			       const struct explain_body *body, bool *length_added, size_t *len)
{
	bool host = !explain_has_header(request, "Host");
	bool length = body->present && !explain_has_header(request, "Content-Length") &&
		      !explain_has_header(request, "Transfer-Encoding");
	size_t size = strlen(request->method) + 1 + target_len + sizeof(" HTTP/1.1\r\n") +
		      sizeof("Host: \r\n") + authority_len + sizeof("Content-Length: \r\n") + 20 +
		      sizeof("\r\n");
	char *text;
	size_t at;

	for (size_t i = 0; i < request->header_count; i++)
		size += strlen(request->headers[i]) + 2;
	text = xmalloc(size);
	at = (size_t)snprintf(text, size, "%s %.*s HTTP/1.1\r\n", request->method, (int)target_len,
			      target);
	if (host)
		at += (size_t)snprintf(text + at, size - at, "Host: %.*s\r\n", (int)authority_len,
				       authority);
	for (size_t i = 0; i < request->header_count; i++)
		at += (size_t)snprintf(text + at, size - at, "%s\r\n", request->headers[i]);
	if (length)
		at += (size_t)snprintf(text + at, size - at, "Content-Length: %llu\r\n",
				       (unsigned long long)body->size);
	at += (size_t)snprintf(text + at, size - at, "\r\n");
	*length_added = length;
	*len = at;
	return text;
}

/* Parse the head text with the proxy's own parser and framing check, under
 * the config's limits; sized, or not when the text is only read for its URL
 * (the proxy's limits hold for the form it receives, parsed after). */
static int explain_parse(const struct config *config, struct explain_head *h, size_t len,
			 bool sized, FILE *err)
{
	struct http1_limits limits = { sized ? config->limits.max_header_bytes : len,
				       sized ? config->limits.max_uri_bytes : len };
	enum http1_error error = HTTP1_ERR_NONE;
	enum http1_parse parsed = http1_parse_request_head(h->text, len, &limits, &h->head, &error);

	if (parsed == HTTP1_PARSE_DONE && h->head.head_len == len &&
	    http1_request_framing(&h->head, &h->framing, &error) == 0)
		return 0;
	if (error == HTTP1_ERR_NONE)
		error = HTTP1_ERR_BAD_REQUEST_LINE; /* cannot happen: the text ends the head */
	fprintf(err, "retryproxy: --explain: bad request: %s (the proxy would answer %d)\n",
		http1_error_text(error), http1_error_status(error));
	return -1;
}

/* Does a listener bound to bound take connections to addr: the same
 * address, or a wildcard (0.0.0.0, or [::], which takes IPv4 too: the
 * proxy's listening sockets are dual-stack) with the same port? An
 * IPv4-mapped address on either side is its IPv4 one: a listener on
 * [::ffff:127.0.0.1] takes the connects to 127.0.0.1, and a connect to
 * [::ffff:127.0.0.1] goes out over IPv4; one to 0.0.0.0 or [::] is one to
 * loopback, as config_values_connect_reaches() takes it. */
static bool explain_listener_takes(const struct sockaddr_storage *bound,
				   const struct sockaddr_storage *addr)
{
	struct sockaddr_storage at, to;

	if (!config_values_unmapped((const struct sockaddr *)bound, sizeof(*bound), &at) ||
	    !config_values_unmapped((const struct sockaddr *)addr, sizeof(*addr), &to))
		return false;
	/* a connect to 0.0.0.0 or :: reaches this host's loopback */
	if (config_values_is_wildcard(&to)) {
		if (to.ss_family == AF_INET)
			((struct sockaddr_in *)&to)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		else
			((struct sockaddr_in6 *)&to)->sin6_addr = in6addr_loopback;
	}
	return config_values_same_address(&at, &to) ||
	       (config_values_is_wildcard(&at) &&
		config_values_addr_port(&at) == config_values_addr_port(&to) &&
		(at.ss_family == AF_INET6 || to.ss_family == AF_INET));
}

/* The sidecar listener that takes connections to the address text, or
 * NULL. */
static const struct listener_config *explain_sidecar_at(const struct config *config,
							const char *text)
{
	struct sockaddr_storage addr;
	socklen_t addr_len;
	const char *why;

	if (config_values_address(text, &addr, &addr_len, &why) < 0)
		return NULL;
	for (size_t i = 0; i < config->listener_count; i++) {
		const struct listener_config *listener = &config->listeners[i];

		if (listener->upstream != NULL && explain_listener_takes(&listener->addr, &addr))
			return listener;
	}
	return NULL;
}

/* Is the target's host localhost, or a name under it? Written with the
 * root's dot too (localhost.), which the proxy drops before it looks a
 * name up (upstream_host_normalise()). */
static bool explain_localhost(const struct http1_target *t)
{
	char host[256];
	size_t len = t->host_len;

	if (len > 1 && t->host[len - 1] == '.')
		len--;
	if (len >= sizeof(host) || memchr(t->host, '\0', len) != NULL)
		return false;
	memcpy(host, t->host, len);
	host[len] = '\0';
	return name_is_localhost(host);
}

/* Which listener gets the request, and in which form. A URL that names a
 * sidecar listener itself (http://127.0.0.1:8080/..., also for a listener
 * on 0.0.0.0:8080) is what the app sends
 * to it; a URL whose origin is a sidecar's upstream is what an app pointed
 * at that sidecar sends; any other URL goes to a forward proxy listener
 * (else the first listener) in absolute form. */
static struct explain_view explain_choose_view(const struct config *config,
					       const struct http1_target *t)
{
	struct explain_view view = { NULL, true };
	bool v6 = memchr(t->host, ':', t->host_len) != NULL;
	char text[320];
	size_t i;

	snprintf(text, sizeof(text), "%s%.*s%s:%u", v6 ? "[" : "",
		 (int)(t->host_len > 256 ? 256 : t->host_len), t->host, v6 ? "]" : "", t->port);
	view.listener = explain_sidecar_at(config, text);
	/* localhost is ::1 too (an app's resolver gives both), which the
	 * address reading maps to 127.0.0.1 alone; and a name under
	 * localhost (api.localhost) is both as well (RFC 6761 section 6.3, as
	 * the proxy itself and browsers take it), which the address reading
	 * does not take at all */
	if (view.listener == NULL && explain_localhost(t)) {
		snprintf(text, sizeof(text), "127.0.0.1:%u", t->port);
		view.listener = explain_sidecar_at(config, text);
		if (view.listener == NULL) {
			snprintf(text, sizeof(text), "[::1]:%u", t->port);
			view.listener = explain_sidecar_at(config, text);
		}
	}
	if (view.listener != NULL)
		return view;
	for (i = 0; i < config->listener_count; i++) {
		const struct upstream_url *up = config->listeners[i].upstream;

		view.listener = &config->listeners[i];
		if (up != NULL && up->tls == t->tls && up->port == t->port &&
		    route_same_host(up->host, strlen(up->host), t->host, t->host_len))
			return view;
	}
	view.sidecar = false;
	view.listener = config->listener_count > 0 ? &config->listeners[0] : NULL;
	for (i = 0; i < config->listener_count; i++) {
		if (config->listeners[i].upstream == NULL) {
			view.listener = &config->listeners[i];
			break;
		}
	}
	return view;
}

/* Write a text from the config or the request (a query or json_field name
 * may hold any byte) so that it stays on its line and reads the same on a
 * terminal: a backslash as \\, TAB, LF and CR as \t, \n and \r, other
 * control bytes, DEL and the UTF-8 of the C1 controls and of U+2028 and
 * U+2029 (line ends to some readers) as \xHH per byte. */
static void explain_put_escaped(const char *text, FILE *out)
{
	const unsigned char *p = (const unsigned char *)text;

	while (*p != '\0') {
		size_t escaped = 0;

		if (*p < 0x20 || *p == 0x7f)
			escaped = 1;
		else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			escaped = 2;
		else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
			escaped = 3;
		if (escaped == 1 && (*p == '\t' || *p == '\n' || *p == '\r')) {
			fputc('\\', out);
			fputc(*p == '\t' ? 't' : *p == '\n' ? 'n' : 'r', out);
			p++;
			continue;
		}
		if (*p == '\\') {
			fputs("\\\\", out);
			p++;
			continue;
		}
		if (escaped == 0) {
			fputc(*p++, out);
			continue;
		}
		for (size_t i = 0; i < escaped; i++)
			fprintf(out, "\\x%02x", *p++);
	}
}

/* retry.on in the config's words and order: [5xx, 408, connect-failure]. */
static void explain_print_retry_on(const struct retry_policy *retry, FILE *out)
{
	const char *sep = "";

	fputs("retry_on: [", out);
	if (retry->on & RETRY_ON_5XX) {
		fputs("5xx", out);
		sep = ", ";
	}
	for (int code = 100; code < 600; code++) {
		if (retry->on_codes[code / 8] & (1u << (code % 8))) {
			fprintf(out, "%s%d", sep, code);
			sep = ", ";
		}
	}
	if (retry->on & RETRY_ON_CONNECT_FAILURE) {
		fprintf(out, "%sconnect-failure", sep);
		sep = ", ";
	}
	if (retry->on & RETRY_ON_RESET) {
		fprintf(out, "%sreset", sep);
		sep = ", ";
	}
	if (retry->on & RETRY_ON_TIMEOUT)
		fprintf(out, "%stimeout", sep);
	fputs("]\n", out);
}

/* A duration as the config writes it ("1500ms", "2s"). */
static void explain_print_ms(FILE *out, uint64_t ms)
{
	char buf[32];

	config_values_format_ms(ms, buf, sizeof(buf));
	fputs(buf, out);
}

/* The wait range before each retry, in order: at most max_attempts - 1, and
 * only while the try after the wait could start within the deadline at the
 * soonest, that is with every earlier wait at its lower bound and tries
 * taking no time; "none" when there is no such wait or retried is false. */
static void explain_print_waits(const struct retry_policy *policy, bool retried, FILE *out)
{
	uint64_t earliest = 0; /* the soonest the next try starts after the first */
	unsigned listed = 0;

	fputs("waits:", out);
	for (unsigned n = 0; retried && n + 1 < policy->max_attempts; n++) {
		struct retry_wait_range range = retry_wait_range(policy, n);

		if (!retry_within_deadline(policy, earliest, range.lo_ms))
			break;
		if (listed == EXPLAIN_MAX_WAITS) {
			fputs(" ...", out);
			break;
		}
		earliest += range.lo_ms;
		fputc(' ', out);
		explain_print_ms(out, range.lo_ms);
		fputc('-', out);
		explain_print_ms(out, range.hi_ms);
		listed++;
	}
	if (listed == 0)
		fputs(" none", out);
	fputc('\n', out);
}

/* Say on err how the proxy receives the request: which listener, which form,
 * and what an https:// URL means for a forward proxy client. */
static void explain_note_view(const struct config *config, const struct explain_view *view,
			      const struct explain_head *h, FILE *err)
{
	const struct http1_target *t = &h->head.parsed_target;

	fputs("retryproxy: --explain: config ", err);
	explain_put_escaped(config->source, err);
	fputs("; ", err);
	if (view->listener == NULL)
		fputs("no listener: ", err);
	else
		fprintf(err, "%s listener %s gets ", view->sidecar ? "sidecar" : "forward proxy",
			view->listener->address);
	fprintf(err, "%.*s %.*s with Host %.*s\n", (int)h->head.method_len, h->head.method,
		(int)h->head.target_len, h->head.target,
		h->framing.host != NULL ? (int)h->framing.host_len : 6,
		h->framing.host != NULL ? h->framing.host : "(none)");
	if (view->sidecar || !t->tls)
		return;
	if (route_host_intercepted(config, t->host, t->host_len))
		fprintf(err, "retryproxy: --explain: a client behind HTTP_PROXY sends CONNECT "
			     "for it; intercept: lists the host, so the request inside is "
			     "handled as shown\n");
	else
		fprintf(err, "retryproxy: --explain: note: a client behind HTTP_PROXY sends "
			     "CONNECT for an https:// URL, which is tunnelled blind and never "
			     "retried unless intercept: lists the host; shown is the request "
			     "sent in absolute form\n");
}

/* The body's size as the proxy holds it against limits.replay_buffer: a
 * Content-Length as it says; a chunked body with its framing, taken as one
 * chunk and the last one (the proxy keeps the framing it received). */
static uint64_t explain_framed_size(const struct explain_head *h, const struct explain_body *body)
{
	char digits[32];

	if (h->framing.body == HTTP1_BODY_LENGTH)
		return h->framing.content_length;
	if (h->framing.body != HTTP1_BODY_CHUNKED)
		return 0;
	if (body->size == 0)
		return 5; /* "0\r\n\r\n" */
	return (uint64_t)snprintf(digits, sizeof(digits), "%llx", (unsigned long long)body->size) +
	       2 + body->size + 2 + 5;
}

/* A size taken from the body file for a message: "N bytes", or "more than
 * N bytes", N the limit reading stopped past (explain_read_body()). */
static void explain_size_text(const struct explain_head *h, const struct explain_body *body,
			      uint64_t size, char *buf, size_t len)
{
	bool from_body = h->framing.body == HTTP1_BODY_CHUNKED || h->body_length;

	if (body->over && from_body)
		snprintf(buf, len, "more than %llu bytes", (unsigned long long)(body->size - 1));
	else
		snprintf(buf, len, "%llu bytes", (unsigned long long)size);
}

/* What the exchange decides (exchange_decide_replay(),
 * exchange_read_request_body()): whether the request may be repeated, and
 * whether it is, after it was sent. */
struct explain_decision {
	bool idempotent;
	bool retried;
};

/* The idempotency decision the exchange makes, body and
 * retry.idempotency_key included, and whether the body is kept for a retry;
 * what the proxy does differently from a first guess is said on err. */
static struct explain_decision explain_decide(const struct config *config,
					      const struct route *route,
					      const struct explain_head *h,
					      const struct explain_body *body,
					      struct idempotency_why *why, FILE *err)
{
	const struct limits *limits = &config->limits;
	const struct retry_policy *retry = &route->retry;
	const struct http1_target *t = &h->head.parsed_target;
	const char *query = memchr(t->path, '?', t->path_len);
	size_t query_len = 0;
	bool has_body = h->framing.body != HTTP1_BODY_NONE;
	bool observe = retry->mode == RETRY_MODE_OBSERVE;
	/* what the replay buffer or the spool file would hold: a chunked body
	 * with its framing, against replay_buffer and spool_max alike (the file
	 * keeps the framing too: exchange_spool_body()) */
	uint64_t framed = explain_framed_size(h, body);
	bool in_memory = framed <= limits->replay_buffer;
	bool spooled;
	enum idempotency_verdict verdict;
	struct explain_decision d;

	if (query != NULL) {
		query++;
		query_len = t->path_len - (size_t)(query - t->path);
	}
	verdict = idempotency_decide_head(&route->idempotent, retry->idempotency_key,
					  h->head.method, h->head.method_len, query, query_len,
					  &h->head, has_body, why);
	if (verdict == IDEMPOTENCY_NEEDS_BODY) {
		/* the proxy reads a JSON body only when it keeps it whole in
		 * memory for a retry: never under observe, with max_attempts 1, or
		 * for a body over replay_buffer (the spool takes only requests
		 * already idempotent by their head) */
		if (observe)
			fprintf(err,
				"retryproxy: --explain: note: retry.mode observe keeps no "
				"body, so json_field conditions are not read: not idempotent\n");
		else if (retry->max_attempts < 2)
			fprintf(err,
				"retryproxy: --explain: note: with max_attempts 1 no body is "
				"kept, so json_field conditions are not read: not idempotent\n");
		else if (!in_memory)
			fprintf(err,
				"retryproxy: --explain: note: json_field conditions are read only "
				"in a body within limits.replay_buffer (%zu): not idempotent\n",
				limits->replay_buffer);
		else
			why->name = idempotency_json_body_field(&route->idempotent, body->data,
								body->kept);
		why->reason =
			why->name != NULL ? IDEMPOTENCY_REASON_JSON_FIELD : IDEMPOTENCY_REASON_NONE;
		verdict = why->name != NULL ? IDEMPOTENCY_YES : IDEMPOTENCY_NO;
	}
	d.idempotent = verdict == IDEMPOTENCY_YES;
	/* a body over replay_buffer is kept only by the spool, and only for a
	 * request idempotent by its head (one by its JSON fits in memory) */
	spooled = !in_memory && limits->spool_max > 0 && framed <= limits->spool_max;
	if (has_body && !in_memory && !spooled && retry->max_attempts > 1) {
		char size[64];

		explain_size_text(h, body, framed, size, sizeof(size));
		fprintf(err,
			"retryproxy: --explain: the body (%s%s) is over "
			"limits.replay_buffer (%zu)%s: it is sent once, not retried\n",
			size,
			h->framing.body == HTTP1_BODY_CHUNKED ? " with its chunk framing" : "",
			limits->replay_buffer,
			limits->spool_max > 0 ? " and limits.spool_max" : "");
	}
	if (observe)
		fprintf(err, "retryproxy: --explain: note: the route's retry.mode is observe: "
			     "nothing is retried, failures that would be are counted and logged\n");
	d.retried = d.idempotent && !observe && (!has_body || in_memory || spooled);
	return d;
}

/* The upstream line: the destination named as /upstreams names it, in the
 * spelling an exchange gives its endpoint (exchange_set_destination()):
 * lower case, an absolute name's dot kept, an IPv6 address the short way. */
static void explain_print_upstream(const struct route_destination *dest, FILE *out)
{
	bool v6 = memchr(dest->host, ':', dest->host_len) != NULL;
	char *host = xmalloc(dest->host_len + UPSTREAM_IPV6_TEXT_MAX + 1);
	size_t len;
	bool absolute;

	memcpy(host, dest->host, dest->host_len);
	len = upstream_host_spelling(host, dest->host_len, v6, &absolute);
	fprintf(out, "upstream: %s://%s%.*s%s%s:%u\n", dest->tls ? "https" : "http", v6 ? "[" : "",
		(int)len, host, v6 ? "]" : "", absolute ? "." : "", dest->port);
	free(host);
}

/* A body over limits.max_body_bytes is refused with 413 (said on err). */
static bool explain_body_refused(const struct config *config, const struct explain_head *h,
				 const struct explain_body *body, FILE *err)
{
	uint64_t max = config->limits.max_body_bytes;
	uint64_t payload =
		h->framing.body == HTTP1_BODY_LENGTH ? h->framing.content_length : body->size;
	char size[64];

	if (max == 0 || h->framing.body == HTTP1_BODY_NONE || payload <= max)
		return false;
	explain_size_text(h, body, payload, size, sizeof(size));
	fprintf(err,
		"retryproxy: --explain: the proxy would refuse this request with 413: request "
		"body of %s is over limits.max_body_bytes (%llu)\n",
		size, (unsigned long long)max);
	return true;
}

/* Is the destination an address of the proxy's own admin endpoint or of
 * one of its listeners, which it never connects to for a client
 * (upstream.c: 403 after the one try)? Said on err. Only an address is
 * known here: a name that resolves to it is found at run time. */
static bool explain_own_refused(const struct config *config, const struct route_destination *dest,
				FILE *err)
{
	struct sockaddr_storage addr;
	socklen_t addr_len;
	const char *why;
	char host[INET6_ADDRSTRLEN], text[INET6_ADDRSTRLEN + 16];
	unsigned char buf[sizeof(struct in6_addr)];
	bool v6 = memchr(dest->host, ':', dest->host_len) != NULL;

	if (dest->host_len >= sizeof(host))
		return false;
	snprintf(host, sizeof(host), "%.*s", (int)dest->host_len, dest->host);
	if (inet_pton(v6 ? AF_INET6 : AF_INET, host, buf) != 1)
		return false;
	snprintf(text, sizeof(text), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", dest->port);
	if (config_values_address(text, &addr, &addr_len, &why) < 0)
		return false;
	if (config->admin_address != NULL &&
	    config_values_connect_reaches(&config->admin_addr, (const struct sockaddr *)&addr,
					  addr_len) != 0) {
		fprintf(err,
			"retryproxy: --explain: the proxy would answer 403 after one try, never "
			"retried: %s is its own admin endpoint (admin: %s), which it does not "
			"connect to for a client\n",
			text, config->admin_address);
		return true;
	}
	for (size_t i = 0; i < config->listener_count; i++) {
		const struct listener_config *listen = &config->listeners[i];

		if (config_values_connect_reaches(&listen->addr, (const struct sockaddr *)&addr,
						  addr_len) == 0)
			continue;
		fprintf(err,
			"retryproxy: --explain: the proxy would answer 403 after one try, never "
			"retried: %s is its own listener (%s), which it does not connect to for "
			"a client (a loop)\n",
			text, listen->address);
		return true;
	}
	return false;
}

/* Say on err that the user's argument is bad and why, the argument escaped:
 * a control byte in it must not rewrite the terminal or forge a line. */
static void explain_say_bad(FILE *err, const char *what, const char *arg, const char *why)
{
	fprintf(err, "retryproxy: --explain: bad %s \"", what);
	explain_put_escaped(arg, err);
	fprintf(err, "\": %s\n", why);
}

/* Check the request description; on a bad one say why on err. */
static int explain_check_request(const struct explain_request *request, FILE *err)
{
	const char *why;

	if (!config_values_is_token(request->method)) {
		explain_say_bad(err, "method", request->method, "not an HTTP token");
		return -1;
	}
	if (strcmp(request->method, "CONNECT") == 0) {
		fprintf(err, "retryproxy: --explain: CONNECT is tunnelled byte for byte and never "
			     "retried (the proxy cannot see inside); explain the requests sent "
			     "through the tunnel instead\n");
		return -1;
	}
	if (!explain_url_ok(request->url, &why)) {
		explain_say_bad(err, "URL", request->url, why);
		return -1;
	}
	for (size_t i = 0; i < request->header_count; i++) {
		if (!explain_header_ok(request->headers[i], &why)) {
			explain_say_bad(err, "header line", request->headers[i], why);
			return -1;
		}
	}
	return 0;
}

/* Build and parse the head for target, sized or not (explain_parse()); 0 or
 * -1 (said on err). */
static int explain_head(const struct config *config, const struct explain_request *request,
			const char *target, size_t target_len, const struct explain_body *body,
			bool sized, struct explain_head *h, FILE *err)
{
	const char *authority;
	size_t authority_len;
	size_t len;

	explain_url_authority(request->url, &authority, &authority_len);
	free(h->text);
	h->text = explain_head_text(request, target, target_len, authority, authority_len, body,
				    &h->body_length, &len);
	return explain_parse(config, h, len, sized, err);
}

/* Build and parse, under the config's limits, the origin-form head of the
 * URL h holds parsed: the URL's path and query, Host its authority. */
static int explain_origin_form(const struct config *config, const struct explain_request *request,
			       const struct explain_body *body, struct explain_head *h, FILE *err)
{
	const struct http1_target *t = &h->head.parsed_target;
	char *path = xmalloc(t->path_len + 2);
	size_t path_len = 0;
	int status;

	if (t->path_len == 0 || t->path[0] != '/')
		path[path_len++] = '/';
	memcpy(path + path_len, t->path, t->path_len);
	path_len += t->path_len;
	status = explain_head(config, request, path, path_len, body, true, h, err);
	free(path);
	return status;
}

/* Does a forward proxy client reach this URL through an intercepted
 * CONNECT tunnel? */
static bool explain_tunnelled(const struct config *config, const struct http1_target *t)
{
	return t->tls && route_host_intercepted(config, t->host, t->host_len);
}

int explain_run(const struct config *config, const struct explain_request *request, FILE *out,
		FILE *err)
{
	struct explain_body body = { false, false, 0, NULL, 0 };
	struct explain_head *h = xcalloc(1, sizeof(*h));
	struct route_destination dest;
	struct explain_view view;
	struct idempotency_why why = { IDEMPOTENCY_REASON_NONE, NULL };
	struct explain_decision decision;
	const struct retry_policy *retry;
	char reason[512];
	int status;
	int rc = -1;
	/* a fragment is the client's own: clients leave it out of the request */
	size_t url_len = strcspn(request->url, "#");

	if (explain_check_request(request, err) < 0)
		goto done;
	if (request->body_path != NULL &&
	    explain_read_body(request->body_path, explain_body_limit(&config->limits), &body, err) <
		    0)
		goto done;
	/* absolute form first: the proxy's parser checks the URL; its size
	 * limits hold for what a listener receives, which a sidecar's app
	 * sends in origin-form, shorter */
	if (explain_head(config, request, request->url, url_len, &body, false, h, err) < 0)
		goto done;
	view = explain_choose_view(config, &h->head.parsed_target);
	if (view.sidecar) {
		/* the app's request to the sidecar */
		if (explain_origin_form(config, request, &body, h, err) < 0)
			goto done;
	} else if (explain_tunnelled(config, &h->head.parsed_target)) {
		/* in an intercepted tunnel the request arrives in origin-form,
		 * and is routed as the URL says */
		if (explain_origin_form(config, request, &body, h, err) < 0 ||
		    explain_head(config, request, request->url, url_len, &body, false, h, err) < 0)
			goto done;
	} else if (explain_head(config, request, request->url, url_len, &body, true, h, err) < 0) {
		goto done;
	}
	explain_note_view(config, &view, h, err);
	if (max_forwards_of(&h->head, NULL) == 0) {
		/* client.c answers it before routing: nothing goes upstream */
		fprintf(err,
			"retryproxy: --explain: the proxy would answer this %.*s itself (200, "
			"Max-Forwards: 0 makes it the final recipient): nothing is sent upstream\n",
			(int)h->head.method_len, h->head.method);
		goto done;
	}
	status = route_destination(
		config, view.sidecar && view.listener != NULL ? view.listener->upstream : NULL,
		&h->head.parsed_target, h->framing.host_name, h->framing.host_name_len,
		h->head.method, h->head.method_len, &dest, reason, sizeof(reason));
	if (status != 0) {
		fprintf(err,
			"retryproxy: --explain: the proxy would refuse this request with %d: %s\n",
			status, reason);
		goto done;
	}
	/* a body over the limit is refused under its route (exchange_new()
	 * routes first, exchange_run() answers 413): a refused host or path
	 * is what the client hears */
	if (explain_body_refused(config, h, &body, err))
		goto done;
	if (explain_own_refused(config, &dest, err))
		goto done;
	retry = &dest.route->retry;
	decision = explain_decide(config, dest.route, h, &body, &why, err);
	if (h->framing.upgrade)
		fprintf(err,
			"retryproxy: --explain: note: the request asks to switch protocols "
			"(Upgrade): until the upstream answers it is tried as below, never "
			"hedged; a 101 makes the connection a tunnel, where nothing is retried\n");
	fputs("route: ", out);
	explain_put_escaped(dest.route->name, out);
	fputc('\n', out);
	explain_print_upstream(&dest, out);
	{
		size_t len = (why.name != NULL ? strlen(why.name) : 0) + 64;
		char *text = xmalloc(len);

		idempotency_why_text(&why, text, len);
		fputs("idempotent: ", out);
		explain_put_escaped(text, out);
		fputc('\n', out);
		free(text);
	}
	explain_print_retry_on(retry, out);
	fprintf(out, "max_attempts: %u\n", retry->max_attempts);
	fputs("deadline: ", out);
	explain_print_ms(out, retry->deadline_ms);
	fputc('\n', out);
	explain_print_waits(retry, decision.retried, out);
	rc = 0;
done:
	free(body.data);
	free(h->text);
	free(h);
	return rc;
}
