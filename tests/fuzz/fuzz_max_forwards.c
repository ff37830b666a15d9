/* Max-Forwards on a TRACE or OPTIONS, and the proxy's own answer at 0.
 * The client's head, through the strict parser and its framing check (as
 * the client takes it), then max_forwards_of() against a reference written
 * from RFC 9110 section 7.6.2 the slow way: the method compared whole, the
 * Max-Forwards lines counted by a plain case-insensitive name comparison,
 * the value read as a decimal string of any length (leading zeros
 * stripped, compared as text with LONG_MAX's digits) so that what goes on,
 * the value less one, is the lesser of the received value less one and the
 * most the proxy holds.
 *
 * At 0 the answer is a round trip: it must parse as a 200 response whose
 * Content-Length is its body and what max_forwards_answer() returned, and
 * for TRACE the body, parsed again as a request head, must be the request
 * (method, target, version) with the same field lines in the same order,
 * byte for byte, less Authorization, Proxy-Authorization and Cookie. */

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "http1.h"
#include "max_forwards.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;
static struct http1_head fuzz_answer;
static struct http1_head fuzz_echo;

static bool fuzz_named(const struct http1_field *f, const char *name)
{
	return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

/* The reference: the value, LONG_MAX for one past it, -1 when the
 * request has none to act on. */
static long fuzz_ref_value(const struct http1_head *h, size_t *index)
{
	char digits[32];
	const struct http1_field *f = NULL;
	const char *v;
	size_t len, n;

	if (!((h->method_len == 5 && memcmp(h->method, "TRACE", 5) == 0) ||
	      (h->method_len == 7 && memcmp(h->method, "OPTIONS", 7) == 0)))
		return -1;
	for (size_t i = 0; i < h->field_count; i++) {
		if (!fuzz_named(&h->fields[i], "Max-Forwards"))
			continue;
		if (f != NULL)
			return -1; /* a list of two */
		f = &h->fields[i];
		*index = i;
	}
	if (f == NULL || f->value_len == 0)
		return -1;
	for (size_t i = 0; i < f->value_len; i++)
		if (f->value[i] < '0' || f->value[i] > '9')
			return -1;
	v = f->value;
	len = f->value_len;
	while (len > 1 && v[0] == '0') {
		v++;
		len--;
	}
	n = (size_t)snprintf(digits, sizeof(digits), "%ld", LONG_MAX);
	if (len > n || (len == n && memcmp(v, digits, n) > 0))
		return LONG_MAX;
	memcpy(digits, v, len);
	digits[len] = '\0';
	return strtol(digits, NULL, 10);
}

static bool fuzz_sensitive(const struct http1_field *f)
{
	return fuzz_named(f, "Authorization") || fuzz_named(f, "Proxy-Authorization") ||
	       fuzz_named(f, "Cookie");
}

static const struct http1_field *fuzz_find(const struct http1_head *h, const char *name)
{
	const struct http1_field *found = NULL;

	for (size_t i = 0; i < h->field_count; i++)
		if (fuzz_named(&h->fields[i], name)) {
			if (found != NULL)
				abort(); /* the answer has each of its fields once */
			found = &h->fields[i];
		}
	return found;
}

static bool fuzz_value_is(const struct http1_field *f, const char *value)
{
	return f != NULL && f->value_len == strlen(value) &&
	       memcmp(f->value, value, f->value_len) == 0;
}

/* The answer to a TRACE or OPTIONS at 0, parsed back. */
static void fuzz_check_answer(const struct http1_head *h, const struct http1_limits *limits)
{
	struct evbuffer *out = evbuffer_new();
	size_t body_len = max_forwards_answer(out, h);
	size_t len = evbuffer_get_length(out);
	const char *text = (const char *)evbuffer_pullup(out, -1);
	struct http1_framing framing;
	enum http1_error error;
	bool trace = h->method_len == 5;
	const char *body;
	char length[24];
	size_t kept = 0;

	if (http1_parse_response_head(text, len, len, &fuzz_answer, &error) != HTTP1_PARSE_DONE ||
	    http1_response_framing(&fuzz_answer, false, &framing, &error) < 0)
		abort();
	snprintf(length, sizeof(length), "%zu", body_len);
	if (fuzz_answer.status != 200 ||
	    framing.body != (body_len > 0 ? HTTP1_BODY_LENGTH : HTTP1_BODY_NONE) ||
	    (body_len > 0 && framing.content_length != body_len) ||
	    !fuzz_value_is(fuzz_find(&fuzz_answer, "Content-Length"), length) ||
	    fuzz_answer.head_len + body_len != len || framing.keep_alive ||
	    !fuzz_value_is(fuzz_find(&fuzz_answer, "Connection"), "close") ||
	    fuzz_find(&fuzz_answer, "Date") == NULL)
		abort();
	body = text + fuzz_answer.head_len;
	if (!trace) {
		const struct http1_field *allow = fuzz_find(&fuzz_answer, "Allow");

		if (body_len != 0 || allow == NULL ||
		    memmem(allow->value, allow->value_len, "OPTIONS", 7) == NULL ||
		    memmem(allow->value, allow->value_len, "TRACE", 5) == NULL)
			abort();
		evbuffer_free(out);
		return;
	}
	if (!fuzz_value_is(fuzz_find(&fuzz_answer, "Content-Type"), "message/http"))
		abort();
	/* the echo is the request again: it parses whole, as it came */
	if (http1_parse_request_head(body, body_len, limits, &fuzz_echo, &error) !=
		    HTTP1_PARSE_DONE ||
	    fuzz_echo.head_len != body_len)
		abort();
	if (fuzz_echo.method_len != h->method_len ||
	    memcmp(fuzz_echo.method, h->method, h->method_len) != 0 ||
	    fuzz_echo.target_len != h->target_len ||
	    memcmp(fuzz_echo.target, h->target, h->target_len) != 0 ||
	    fuzz_echo.version_minor != h->version_minor)
		abort();
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i], *e;

		if (fuzz_sensitive(f))
			continue;
		if (kept == fuzz_echo.field_count)
			abort();
		e = &fuzz_echo.fields[kept++];
		if (e->line_len != f->line_len || memcmp(e->line, f->line, f->line_len) != 0)
			abort();
	}
	if (kept != fuzz_echo.field_count)
		abort();
	/* and it is the same request for the next look: still at 0 */
	if (max_forwards_of(&fuzz_echo, NULL) != 0)
		abort();
	evbuffer_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };
	struct http1_framing framing;
	enum http1_error error;
	size_t index = SIZE_MAX, want_index = SIZE_MAX;
	long value, want;

	if (http1_parse_request_head((const char *)data, size, &limits, &fuzz_head, &error) !=
		    HTTP1_PARSE_DONE ||
	    http1_request_framing(&fuzz_head, &framing, &error) < 0)
		return 0;
	value = max_forwards_of(&fuzz_head, &index);
	want = fuzz_ref_value(&fuzz_head, &want_index);
	if (value != want || (want >= 0 && index != want_index) ||
	    max_forwards_of(&fuzz_head, NULL) != want)
		abort();
	if (want == 0)
		fuzz_check_answer(&fuzz_head, &limits);
	return 0;
}
