/* Request heads: parse, framing and hop-by-hop checks must never crash, and
 * what they report must agree with the bytes and with parses of prefixes. */

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

	if (h->head_len < 4 || h->head_len > len || h->head_len > max_head)
		abort();
	if (memcmp(buf + h->head_len - 4, "\r\n\r\n", 4) != 0)
		abort();
	if (h->field_count > HTTP1_MAX_FIELDS || h->method_len == 0 || h->target_len == 0)
		abort();
	if (h->version_minor != 0 && h->version_minor != 1)
		abort();
	fuzz_check_span(buf, h->head_len, h->method, h->method_len);
	fuzz_check_span(buf, h->head_len, h->target, h->target_len);
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];

		fuzz_check_span(buf, h->head_len, f->line, f->line_len);
		fuzz_check_span(f->line, f->line_len, f->value, f->value_len);
		if (f->name != f->line || f->name_len == 0 || f->line_len < f->name_len + 3)
			abort();
		if (f->line[f->name_len] != ':' || memcmp(f->line + f->line_len - 2, "\r\n", 2) != 0)
			abort();
		if (f->value_len > 0 && (f->value[0] == ' ' || f->value[0] == '\t' ||
					 f->value[f->value_len - 1] == ' ' ||
					 f->value[f->value_len - 1] == '\t'))
			abort();
		for (size_t j = 0; j < f->value_len; j++)
			if (f->value[j] == '\r' || f->value[j] == '\n' || f->value[j] == '\0')
				abort();
		if (i > 0 && f->line != h->fields[i - 1].line + h->fields[i - 1].line_len)
			abort();
	}
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
		if (h->version_minor == 1 && framing.host == NULL)
			abort();
		if (framing.host != NULL)
			fuzz_check_span(buf, h->head_len, framing.host, framing.host_len);
		if (framing.expect_continue && framing.body == HTTP1_BODY_NONE)
			abort();
	} else {
		int status = http1_error_status(error);

		if (status != 400 && status != 414 && status != 417 && status != 431)
			abort();
	}
	if (http1_error_text(error) == NULL)
		abort();
	bool hops[HTTP1_MAX_FIELDS];

	http1_hop_by_hop_marks(h, hops);
	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];
		bool hop = hops[i];

		if (http1_name_equals(f->name, f->name_len, "connection") && !hop)
			abort();
		if (http1_name_equals(f->name, f->name_len, "content-length") && hop)
			abort();
		if (http1_find_field(h, "host") == NULL && http1_name_equals(f->name, f->name_len, "HOST"))
			abort();
	}
}

/* Parse with the given limits and check the result against prefixes. */
static void fuzz_parse(const char *buf, size_t size, size_t max_head, size_t max_target)
{
	struct http1_limits limits = {.max_head_bytes = max_head, .max_target_bytes = max_target};
	enum http1_error error;
	enum http1_parse r = http1_parse_request_head(buf, size, &limits, &fuzz_head, &error);
	size_t head_len = fuzz_head.head_len;
	size_t cut;

	if ((r == HTTP1_PARSE_ERROR) != (error != HTTP1_ERR_NONE))
		abort();
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
		enum http1_parse rp = http1_parse_request_head(buf, cut, &limits, &fuzz_head, &error);

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
