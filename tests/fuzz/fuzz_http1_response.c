/* Response heads: parse and framing must never crash, and what they report
 * must agree with the bytes and with parses of prefixes. */

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

/* Abort unless a parsed head is consistent with its buffer. */
static void fuzz_check_head(const char *buf, size_t len, size_t max_head)
{
	const struct http1_head *h = &fuzz_head;

	/* "HTTP/1.1 200\r\n\r\n" (no space, no reason) is the shortest head */
	if (h->head_len < 16 || h->head_len > len || h->head_len > max_head)
		abort();
	if (memcmp(buf + h->head_len - 2, "\r\n", 2) != 0 || memcmp(buf, "HTTP/1.", 7) != 0)
		abort();
	if (h->status < 100 || h->status > 599 || h->field_count > HTTP1_MAX_FIELDS)
		abort();
	/* HTTP/1.0 to HTTP/1.9: the minor digit as sent (RFC 9112 section 2.3) */
	if (h->version_minor < 0 || h->version_minor > 9)
		abort();
	/* the reason follows "HTTP/1.x NNN ", or is empty right after "NNN" */
	if (h->reason != buf + 13 && !(h->reason == buf + 12 && h->reason_len == 0))
		abort();
	fuzz_check_span(buf, h->head_len, h->reason, h->reason_len);
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];

		fuzz_check_span(buf, h->head_len, f->line, f->line_len);
		fuzz_check_span(f->line, f->line_len, f->value, f->value_len);
		if (f->name != f->line || f->name_len == 0 || f->line[f->name_len] != ':')
			abort();
		if (memcmp(f->line + f->line_len - 2, "\r\n", 2) != 0)
			abort();
	}
}

/* Abort unless the error has a text of its own: an error code the parser
 * learns without one reads "unknown error" to clients and in logs. */
static void fuzz_check_error_text(enum http1_error error)
{
	const char *text = http1_error_text(error);

	if (text == NULL || strcmp(text, "unknown error") == 0)
		abort();
}

/* Check framing both as a response to HEAD and to anything else. */
static void fuzz_check_framing(void)
{
	const struct http1_head *h = &fuzz_head;
	struct http1_framing framing;
	struct http1_framing head_framing;
	enum http1_error error;
	enum http1_error head_error;
	int r = http1_response_framing(h, false, &framing, &error);
	int rh = http1_response_framing(h, true, &head_framing, &head_error);

	if ((r == 0) != (error == HTTP1_ERR_NONE) || (rh == 0) != (head_error == HTTP1_ERR_NONE))
		abort();
	/* A HEAD response never has a body, and fails only where any would. */
	if (rh == 0 && head_framing.body != HTTP1_BODY_NONE)
		abort();
	if (rh != 0 && r == 0)
		abort();
	if (r == 0) {
		if (framing.body == HTTP1_BODY_UNTIL_CLOSE && framing.keep_alive)
			abort();
		if ((framing.body == HTTP1_BODY_LENGTH) != (framing.content_length > 0))
			abort();
		if ((h->status < 200 || h->status == 204 || h->status == 304) &&
		    framing.body != HTTP1_BODY_NONE)
			abort();
		if (framing.host != NULL || framing.expect_continue)
			abort();
	}
	fuzz_check_error_text(error);
	bool hops[HTTP1_MAX_FIELDS];

	http1_hop_by_hop_marks(h, hops);
	for (size_t i = 0; i < h->field_count; i++)
		if (http1_name_equals(h->fields[i].name, h->fields[i].name_len, "content-length") &&
		    hops[i])
			abort();
}

/* Parse with the given limit and check the result against a prefix. */
static void fuzz_parse(const char *buf, size_t size, size_t max_head)
{
	enum http1_error error;
	enum http1_parse r = http1_parse_response_head(buf, size, max_head, &fuzz_head, &error);
	size_t head_len = fuzz_head.head_len;
	size_t cut;

	if ((r == HTTP1_PARSE_ERROR) != (error != HTTP1_ERR_NONE))
		abort();
	if (r == HTTP1_PARSE_ERROR)
		fuzz_check_error_text(error);
	if (r == HTTP1_PARSE_DONE) {
		fuzz_check_head(buf, size, max_head);
		fuzz_check_framing();
	}
	if (r == HTTP1_PARSE_MORE && size > max_head)
		abort();
	cut = r == HTTP1_PARSE_DONE ? head_len - 1 : size / 2;
	if (cut < size) {
		enum http1_parse rp =
			http1_parse_response_head(buf, cut, max_head, &fuzz_head, &error);

		if (r == HTTP1_PARSE_DONE && rp != HTTP1_PARSE_MORE)
			abort();
		if (r != HTTP1_PARSE_DONE && rp == HTTP1_PARSE_DONE)
			abort();
		if (r == HTTP1_PARSE_MORE && rp != HTTP1_PARSE_MORE)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;

	fuzz_parse(buf, size, 65536);
	fuzz_parse(buf, size, size / 2 + 1);
	return 0;
}
