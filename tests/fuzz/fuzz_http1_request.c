/* Request heads: parse, framing and hop-by-hop checks must never crash, and
 * what they report must agree with the bytes and with parses of prefixes. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;

/* Abort unless [p, p + len) lies inside [buf, buf + size). */
static void fuzz_check_span(const char *buf, size_t size, const char *p, size_t len)
{
	if (p < buf || p > buf + size || len > (size_t)(buf + size - p))
		abort();
}

/* True when [p, p + len) lies inside [outer, outer + outer_len). */
static bool fuzz_within(const char *outer, size_t outer_len, const char *p, size_t len)
{
	return p >= outer && p <= outer + outer_len && len <= (size_t)(outer + outer_len - p);
}

/* True when every byte of a host span is one a routable host may hold:
 * unreserved, or hex digits, ':' and '.' of an IPv6 literal. */
static bool fuzz_routable_host(const char *host, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = host[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_' || c == '~' || c == ':'))
			return false;
	}
	return true;
}

/* Abort unless the split target agrees with the target as sent and with the
 * method rules: authority-form exactly with CONNECT, asterisk-form only with
 * OPTIONS. */
static void fuzz_check_target(const struct http1_head *h)
{
	const struct http1_target *t = &h->parsed_target;
	bool connect = h->method_len == 7 && memcmp(h->method, "CONNECT", 7) == 0;
	bool options = h->method_len == 7 && memcmp(h->method, "OPTIONS", 7) == 0;

	if (memchr(h->target, '#', h->target_len) != NULL)
		abort();
	if (!fuzz_within(h->target, h->target_len, t->path, t->path_len))
		abort();
	if (connect != (t->form == HTTP1_TARGET_AUTHORITY))
		abort();
	switch (t->form) {
	case HTTP1_TARGET_ORIGIN:
	case HTTP1_TARGET_ASTERISK:
		if (t->host != NULL || t->authority != NULL || t->port != 0 || t->tls)
			abort();
		if (t->path != h->target || t->path_len != h->target_len)
			abort();
		if (t->form == HTTP1_TARGET_ORIGIN
			    ? h->target[0] != '/'
			    : !options || h->target_len != 1 || h->target[0] != '*')
			abort();
		return;
	case HTTP1_TARGET_AUTHORITY:
		if (t->authority != h->target || t->authority_len != h->target_len || t->tls ||
		    t->path_len != 0)
			abort();
		break;
	case HTTP1_TARGET_ABSOLUTE:
		/* "http[s]://" authority path, in that order, nothing left over */
		if (t->authority != h->target + (t->tls ? 8 : 7) ||
		    t->authority + t->authority_len != t->path ||
		    t->path + t->path_len != h->target + h->target_len)
			abort();
		if (t->path_len > 0 && t->path[0] != '/' && t->path[0] != '?')
			abort();
		if ((h->target[4] == 's' || h->target[4] == 'S') != t->tls)
			abort();
		break;
	default:
		abort();
	}
	if (t->port == 0 || !fuzz_within(t->authority, t->authority_len, t->host, t->host_len) ||
	    !fuzz_routable_host(t->host, t->host_len))
		abort();
	/* the authority is the host, bracketed if IPv6, then maybe ":" port */
	if (t->host[-1] == '[' ? t->host != t->authority + 1 || t->host[t->host_len] != ']'
			       : t->host != t->authority)
		abort();
}

/* The parser's name recognition, done the slow way: by comparing names. */
static uint32_t fuzz_known(const struct http1_field *f)
{
	static const struct {
		const char *name;
		uint32_t known;
	} names[] = {
		{ "host", HTTP1_FIELD_HOST },
		{ "expect", HTTP1_FIELD_EXPECT },
		{ "connection", HTTP1_FIELD_CONNECTION },
		{ "content-length", HTTP1_FIELD_CONTENT_LENGTH },
		{ "transfer-encoding", HTTP1_FIELD_TRANSFER_ENCODING },
		{ "te", HTTP1_FIELD_TE },
		{ "upgrade", HTTP1_FIELD_UPGRADE },
		{ "keep-alive", HTTP1_FIELD_KEEP_ALIVE },
		{ "proxy-connection", HTTP1_FIELD_PROXY_CONNECTION },
		{ "proxy-authorization", HTTP1_FIELD_PROXY_AUTHORIZATION },
		{ "retry-attempts", HTTP1_FIELD_RETRY_ATTEMPTS },
		{ "date", HTTP1_FIELD_DATE },
	};
	/* every name but OTHER and UNDERSCORED_FRAMING: a name the parser learns
	 * must be learned here too, or the oracle calls it a mismatch */
	_Static_assert(sizeof(names) / sizeof(names[0]) == HTTP1_FIELD_NAME_COUNT - 2,
		       "a recognised field name is missing from the oracle");
	char folded[32];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (http1_name_equals(f->name, f->name_len, names[i].name))
			return names[i].known;
	if (f->name_len != 14 && f->name_len != 17)
		return HTTP1_FIELD_OTHER;
	for (size_t i = 0; i < f->name_len; i++)
		folded[i] = f->name[i] == '_' ? '-' : f->name[i];
	if (http1_name_equals(folded, f->name_len, "content-length") ||
	    http1_name_equals(folded, f->name_len, "transfer-encoding"))
		return HTTP1_FIELD_UNDERSCORED_FRAMING;
	return HTTP1_FIELD_OTHER;
}
/* Abort unless a parsed head is consistent with its buffer. */
static void fuzz_check_head(const char *buf, size_t len, size_t max_head)
{
	const struct http1_head *h = &fuzz_head;

	if (h->head_len < 4 || h->head_len > len || h->head_len > max_head)
		abort();
	if (memcmp(buf + h->head_len - 4, "\r\n\r\n", 4) != 0)
		abort();
	if (h->field_count > HTTP1_MAX_FIELDS || h->method_len == 0 || h->target_len == 0)
		abort();
	/* HTTP/1.0 to HTTP/1.9: the minor digit as sent (RFC 9112 section 2.3) */
	if (h->version_minor < 0 || h->version_minor > 9)
		abort();
	fuzz_check_span(buf, h->head_len, h->method, h->method_len);
	fuzz_check_span(buf, h->head_len, h->target, h->target_len);
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];

		fuzz_check_span(buf, h->head_len, f->line, f->line_len);
		fuzz_check_span(f->line, f->line_len, f->value, f->value_len);
		if (f->name != f->line || f->name_len == 0 || f->line_len < f->name_len + 3)
			abort();
		if (f->line[f->name_len] != ':' ||
		    memcmp(f->line + f->line_len - 2, "\r\n", 2) != 0)
			abort();
		if (f->value_len > 0 &&
		    (f->value[0] == ' ' || f->value[0] == '\t' ||
		     f->value[f->value_len - 1] == ' ' || f->value[f->value_len - 1] == '\t'))
			abort();
		for (size_t j = 0; j < f->value_len; j++)
			if (f->value[j] == '\r' || f->value[j] == '\n' || f->value[j] == '\0')
				abort();
		if (i > 0 && f->line != h->fields[i - 1].line + h->fields[i - 1].line_len)
			abort();
		if (f->known != fuzz_known(f))
			abort();
	}
	fuzz_check_target(h);
}

/* Abort unless the error has a text of its own: an error code the parser
 * learns without one reads "unknown error" to clients and in logs. */
static void fuzz_check_error_text(enum http1_error error)
{
	const char *text = http1_error_text(error);

	if (text == NULL || strcmp(text, "unknown error") == 0)
		abort();
}

/* Abort unless what a refused head names (for the access log) is where the
 * request line has it: the method, a token followed by a space, at the
 * start after any empty lines; the target right after that space, within
 * the bytes looked at and no longer than the target limit (and the byte
 * refused after a target of the limit's length). */
static void fuzz_check_refused(const char *buf, size_t size, const struct http1_limits *limits)
{
	const struct http1_head *h = &fuzz_head;

	if (h->method_len == 0) {
		if (h->target != NULL || h->target_len != 0)
			abort();
		return;
	}
	fuzz_check_span(buf, size, h->method, h->method_len + 1);
	if (h->method[h->method_len] != ' ')
		abort();
	for (const char *p = buf; p < h->method; p++)
		if (*p != '\r' && *p != '\n')
			abort();
	if (h->target == NULL) {
		if (h->target_len != 0)
			abort();
		return;
	}
	if (h->target != h->method + h->method_len + 1 || h->target_len == 0 ||
	    h->target_len > limits->max_target_bytes + 1)
		abort();
	fuzz_check_span(buf, size < limits->max_head_bytes ? size : limits->max_head_bytes,
			h->target, h->target_len);
}

/* Check framing and the helpers on a parsed head. */
static void fuzz_check_framing(const char *buf)
{
	const struct http1_head *h = &fuzz_head;
	struct http1_framing framing;
	enum http1_error error;
	int r = http1_request_framing(h, &framing, &error);

	if ((r == 0) != (error == HTTP1_ERR_NONE) || (r != 0 && r != -1))
		abort();
	if (r == 0) {
		if (framing.body == HTTP1_BODY_UNTIL_CLOSE)
			abort();
		if ((framing.body == HTTP1_BODY_LENGTH) != (framing.content_length > 0))
			abort();
		if (h->version_minor >= 1 && framing.host == NULL)
			abort();
		if (framing.host != NULL)
			fuzz_check_span(buf, h->head_len, framing.host, framing.host_len);
		if ((framing.host == NULL) != (framing.host_name == NULL))
			abort();
		if (framing.host != NULL && !fuzz_within(framing.host, framing.host_len,
							 framing.host_name, framing.host_name_len))
			abort();
		/* without authority in the target, Host is what routes match on */
		if (framing.host != NULL &&
		    (h->parsed_target.form == HTTP1_TARGET_ORIGIN ||
		     h->parsed_target.form == HTTP1_TARGET_ASTERISK) &&
		    !fuzz_routable_host(framing.host_name, framing.host_name_len))
			abort();
		if (framing.expect_continue && framing.body == HTTP1_BODY_NONE)
			abort();
	} else {
		int status = http1_error_status(error);

		if (status != 400 && status != 414 && status != 417 && status != 431 &&
		    status != 501)
			abort();
	}
	fuzz_check_error_text(error);
	bool hops[HTTP1_MAX_FIELDS];

	http1_hop_by_hop_marks(h, hops);
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];
		bool hop = hops[i];

		if (http1_name_equals(f->name, f->name_len, "connection") && !hop)
			abort();
		if (http1_name_equals(f->name, f->name_len, "content-length") && hop)
			abort();
		if (http1_find_field(h, "host") == NULL &&
		    http1_name_equals(f->name, f->name_len, "HOST"))
			abort();
	}
}

/* Parse with the given limits and check the result against prefixes. */
static void fuzz_parse(const char *buf, size_t size, size_t max_head, size_t max_target)
{
	struct http1_limits limits = { .max_head_bytes = max_head, .max_target_bytes = max_target };
	enum http1_error error;
	enum http1_parse r = http1_parse_request_head(buf, size, &limits, &fuzz_head, &error);
	size_t head_len = fuzz_head.head_len;
	size_t cut;

	if ((r == HTTP1_PARSE_ERROR) != (error != HTTP1_ERR_NONE))
		abort();
	if (r == HTTP1_PARSE_ERROR) {
		int status = http1_error_status(error);

		fuzz_check_error_text(error);
		if (status != 400 && status != 414 && status != 431 && status != 505)
			abort();
		fuzz_check_refused(buf, size, &limits);
	}
	if (r == HTTP1_PARSE_DONE) {
		fuzz_check_head(buf, size, max_head);
		fuzz_check_framing(buf);
	}
	if (r == HTTP1_PARSE_MORE && size > max_head)
		abort();

	/* A prefix sees less: it can only be incomplete where the whole was
	 * complete, and never complete where the whole was not. */
	cut = r == HTTP1_PARSE_DONE ? head_len - 1 : size / 2;
	if (cut < size) {
		enum http1_parse rp =
			http1_parse_request_head(buf, cut, &limits, &fuzz_head, &error);

		if (r == HTTP1_PARSE_DONE && rp != HTTP1_PARSE_MORE)
			abort();
		if (r != HTTP1_PARSE_DONE && rp == HTTP1_PARSE_DONE)
			abort();
		if (r == HTTP1_PARSE_MORE && rp != HTTP1_PARSE_MORE)
			abort();
	}
	if (r == HTTP1_PARSE_DONE) {
		/* The head alone parses to the same head. */
		if (http1_parse_request_head(buf, head_len, &limits, &fuzz_head, &error) !=
			    HTTP1_PARSE_DONE ||
		    fuzz_head.head_len != head_len)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;

	fuzz_parse(buf, size, 65536, 8192);
	fuzz_parse(buf, size, size / 2 + 1, size / 4 + 1);
	return 0;
}
