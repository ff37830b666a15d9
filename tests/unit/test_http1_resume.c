#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"
#include "http1_resume.h"

/* A string literal as pointer and length, so it may hold NUL bytes. */
#define S(lit) lit, sizeof(lit) - 1

static const struct http1_limits test_limits = {
	.max_head_bytes = 65536,
	.max_target_bytes = 8192,
};

static struct http1_head test_head;

/* Feed the first n bytes of s, as a connection that has read them so far. */
static enum http1_parse test_feed(struct http1_resume *resume, const char *s, size_t n,
				  enum http1_error *error)
{
	return http1_resume_request_head(resume, s, n, &test_limits, &test_head, error);
}

/* A 60 KiB head dripped one byte a read is looked at a bounded number of
 * times a byte, not once per read from the start. */
static void test_resume_dripped_head_is_linear(void **state)
{
	size_t size = 61440;
	char *buf = malloc(size + 1);
	size_t len = 0;
	int fields = 0;
	struct http1_resume resume = { 0 };
	enum http1_error error;

	(void)state;
	assert_non_null(buf);
	len += (size_t)snprintf(buf, size, "GET /dripped HTTP/1.1\r\nHost: a.example\r\n");
	/* fields of about 500 bytes, as many as fit with the empty line */
	while (len + 520 < size) {
		int n = snprintf(buf + len, size - len, "X-Filler-%03d: ", fields++);

		len += (size_t)n;
		memset(buf + len, 'v', 490);
		len += 490;
		memcpy(buf + len, "\r\n", 2);
		len += 2;
	}
	/* one last field fills the head up to exactly size bytes */
	len += (size_t)snprintf(buf + len, size - len, "X-Last: ");
	memset(buf + len, 'w', size - 4 - len);
	len = size - 4;
	memcpy(buf + len, "\r\n\r\n", 4);
	len += 4;
	fields++;
	assert_true(len >= 60 * 1024);
	assert_true(fields < HTTP1_MAX_FIELDS);

	for (size_t n = 1; n < len; n++)
		if (test_feed(&resume, buf, n, &error) != HTTP1_PARSE_MORE)
			fail_msg("after %zu bytes: %s", n, http1_error_text(error));
	assert_int_equal(test_feed(&resume, buf, len, &error), HTTP1_PARSE_DONE);
	assert_int_equal(test_head.head_len, len);
	assert_int_equal(test_head.field_count, (size_t)fields + 1);
	/* every byte once by the scan, once by the final parse, and the
	 * request line once more when it ended; starting over on every read
	 * would be len * len / 2 */
	assert_true(resume.examined >= len);
	assert_true(resume.examined < 3 * len);
	free(buf);
}

/* A head that arrives whole is parsed once, as without resuming. */
static void test_resume_whole_head_parsed_once(void **state)
{
	static const char req[] =
		"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\r\nGET /next HTTP/1.1\r\n";
	struct http1_resume resume = { 0 };
	enum http1_error error;
	size_t first = sizeof("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\r\n") - 1;

	(void)state;
	assert_int_equal(test_feed(&resume, S(req), &error), HTTP1_PARSE_DONE);
	assert_int_equal(test_head.head_len, first);
	assert_int_equal(resume.examined, first);
	/* ready for the next head at once, which starts a fresh buffer */
	assert_int_equal(resume.scanned, 0);
	assert_int_equal(test_feed(&resume, req + first, sizeof(req) - 1 - first, &error),
			 HTTP1_PARSE_MORE);
}

/* Heads and the outcome the one-shot parser gives for them. */
static const struct {
	const char *req;
	size_t len;
} resume_heads[] = {
	{ S("GET / HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET http://a.example/x?y HTTP/1.1\r\nHost: a.example\r\nX: \tb c\t\r\n\r\n") },
	{ S("POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc") },
	{ S("G@T / HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET /a\\b HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET / HTTP/1.2\r\nHost: a\r\n\r\n") },
	{ S("GET / HTTP/1.1\nHost: a\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nX@Y: a\r\n\r\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\n\n") },
	{ S("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n") },
	{ S("\r\n\nGET / HTTP/1.1\r\n\r\n") },
	{ S("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") },
	{ S("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") },
	{ S("GET / HTTP/01.1\r\nHost: a\r\n\r\n") },
	{ S("GET / HTTP/9.9\r\nHost: a\r\n\r\n") },
	{ S("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET /a HTxP/1.1\r\nHost: a\r\n\r\n") },
	{ S("GET /a b\r\nHost: a\r\n\r\n") },
	{ S("GET /a  HTTP/1.1\r\nHost: a\r\n\r\n") },
};

/* Dripped a byte a read, or in two reads at every split, each head gets at
 * every read what the one-shot parser says of the same bytes; a read may
 * even bring a copy of the buffer at another address. */
static void test_resume_same_outcome(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(resume_heads) / sizeof(resume_heads[0]); i++) {
		const char *req = resume_heads[i].req;
		size_t len = resume_heads[i].len;
		enum http1_error want_error;
		enum http1_parse want =
			http1_parse_request_head(req, len, &test_limits, &test_head, &want_error);
		size_t want_head_len = test_head.head_len;

		for (size_t split = 0; split <= len; split++) {
			struct http1_resume resume = { 0 };
			enum http1_error error = HTTP1_ERR_NONE;
			enum http1_parse r = HTTP1_PARSE_MORE;
			size_t n;

			/* split 0: one byte a read; otherwise two reads */
			for (n = split == 0 ? 1 : split; n <= len; n = split == 0 ? n + 1 : len) {
				char *copy = malloc(len + 1);

				assert_non_null(copy);
				memcpy(copy, req, len);
				r = test_feed(&resume, copy, n, &error);
				free(copy);
				/* at every read, what the one-shot parse of the same
				 * bytes says */
				{
					struct http1_head *mine = malloc(sizeof(*mine));
					enum http1_error e;

					assert_non_null(mine);
					*mine = test_head;
					if (http1_parse_request_head(req, n, &test_limits,
								     &test_head, &e) != r ||
					    e != error ||
					    (r == HTTP1_PARSE_DONE &&
					     test_head.head_len != mine->head_len))
						fail_msg("head %zu split %zu: differs after %zu "
							 "bytes",
							 i, split, n);
					test_head = *mine;
					free(mine);
				}
				if (r != HTTP1_PARSE_MORE || n == len)
					break;
			}
			if (r != want || error != want_error)
				fail_msg("head %zu split %zu: got %d (%s) after %zu bytes, want %d "
					 "(%s)",
					 i, split, r, http1_error_text(error), n, want,
					 http1_error_text(want_error));
			if (r == HTTP1_PARSE_DONE && test_head.head_len != want_head_len)
				fail_msg("head %zu split %zu: head_len %zu", i, split,
					 test_head.head_len);
		}
	}
}

/* Errors are found as soon as the bad byte is in, as by the one-shot
 * parser: in the request line, in a field name or value, a bare CR or LF,
 * obs-fold, one field too many, bytes that are not HTTP at all. */
static void test_resume_errors_early(void **state)
{
	static const struct {
		const char *req;
		size_t len; /* bytes it takes for the error */
		enum http1_error error;
	} cases[] = {
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\0"), HTTP1_ERR_BAD_FIELD_VALUE },
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01"), HTTP1_ERR_BAD_FIELD_VALUE },
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("GET / HTTP/1.1\r\nHost: a\nX"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("GET / HTTP/1.1\r\nHost: a\r\n "), HTTP1_ERR_OBS_FOLD },
		{ S("G@T / HTTP/1.1\r\n"), HTTP1_ERR_BAD_METHOD },
		{ S("GET /a\\b HTTP/1.1\r\n"), HTTP1_ERR_BAD_TARGET },
		{ S("GET / HTTP/1.x"), HTTP1_ERR_BAD_VERSION },
		{ S("\x16\x03"), HTTP1_ERR_BAD_METHOD },
		{ S("G@"), HTTP1_ERR_BAD_METHOD },
		{ S("GET /a\\"), HTTP1_ERR_BAD_TARGET },
		{ S("GET / HTTP/2."), HTTP1_ERR_VERSION_NOT_SUPPORTED },
		{ S("GET / HTTP/01"), HTTP1_ERR_BAD_VERSION },
		{ S("GET /a b "), HTTP1_ERR_SPACE_IN_TARGET },
		{ S("GET /a HTxP/1.1\r"), HTTP1_ERR_BAD_VERSION },
		{ S("GET /a \x01"), HTTP1_ERR_BAD_VERSION },
		{ S("GET /a  "), HTTP1_ERR_BAD_REQUEST_LINE },
		{ S("GET http://a$b/ HTTP/1.1"), HTTP1_ERR_BAD_TARGET },
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX@"), HTTP1_ERR_BAD_FIELD_NAME },
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX "), HTTP1_ERR_SPACE_BEFORE_COLON },
		{ S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f"), HTTP1_ERR_BAD_FIELD_VALUE },
		{ S("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r"), HTTP1_ERR_BAD_REQUEST_LINE },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http1_resume resume = { 0 };
		enum http1_error error = HTTP1_ERR_NONE;
		enum http1_parse r = HTTP1_PARSE_MORE;

		size_t n, first = 0;

		/* the shortest prefix the one-shot parser refuses */
		for (n = 1; n <= cases[i].len && first == 0; n++)
			if (http1_parse_request_head(cases[i].req, n, &test_limits, &test_head,
						     &error) == HTTP1_PARSE_ERROR)
				first = n;
		for (n = 1; n <= cases[i].len && r == HTTP1_PARSE_MORE; n++)
			r = test_feed(&resume, cases[i].req, n, &error);
		if (r != HTTP1_PARSE_ERROR || error != cases[i].error || n - 1 != first)
			fail_msg("case %zu: got %d (%s) after %zu bytes, one-shot after %zu", i, r,
				 http1_error_text(error), n - 1, first);
	}
}

/* The field after HTTP1_MAX_FIELDS is refused as its first byte comes in. */
static void test_resume_too_many_fields(void **state)
{
	char buf[8192];
	size_t len = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\n");
	struct http1_resume resume = { 0 };
	enum http1_error error = HTTP1_ERR_NONE;
	enum http1_parse r = HTTP1_PARSE_MORE;
	size_t n;

	(void)state;
	for (int i = 0; i < HTTP1_MAX_FIELDS; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "X%d: v\r\n", i);
	buf[len++] = 'Y';
	for (n = 1; n <= len && r == HTTP1_PARSE_MORE; n++)
		r = test_feed(&resume, buf, n, &error);
	assert_int_equal(r, HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_TOO_MANY_FIELDS);
	assert_int_equal(n - 1, len);
}

/* A dripped target over the limit is a 414 once it passes the limit, before
 * the line ends; a dripped head over the limit is a 431 at the limit. */
static void test_resume_limits(void **state)
{
	struct http1_limits limits = { .max_head_bytes = 4096, .max_target_bytes = 1024 };
	char *buf = malloc(8192);
	struct http1_resume resume = { 0 };
	enum http1_error error = HTTP1_ERR_NONE;
	enum http1_parse r = HTTP1_PARSE_MORE;
	size_t n;

	(void)state;
	assert_non_null(buf);
	memcpy(buf, "GET /", 5);
	memset(buf + 5, 'a', 8192 - 5);
	for (n = 1; n <= 8192 && r == HTTP1_PARSE_MORE; n++)
		r = http1_resume_request_head(&resume, buf, n, &limits, &test_head, &error);
	assert_int_equal(r, HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_URI_TOO_LONG);
	assert_true(n <= 1024 + 8);

	memset(&resume, 0, sizeof(resume));
	memcpy(buf, "GET / HTTP/1.1\r\nX: ", 19);
	r = HTTP1_PARSE_MORE;
	for (n = 1; n <= 8192 && r == HTTP1_PARSE_MORE; n++)
		r = http1_resume_request_head(&resume, buf, n, &limits, &test_head, &error);
	assert_int_equal(r, HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_HEAD_TOO_LARGE);
	assert_true(n <= 4096 + 2);
	free(buf);
}

/* Limits that change between reads (a reload while a head arrives): each
 * read says what the one-shot parse with that read's limits says. */
static void test_resume_limits_change(void **state)
{
	struct http1_limits wide = { .max_head_bytes = 4096, .max_target_bytes = 1024 };
	struct http1_limits narrow = { .max_head_bytes = 4096, .max_target_bytes = 100 };
	struct http1_limits small_head = { .max_head_bytes = 150, .max_target_bytes = 100 };
	char buf[400];
	struct http1_resume resume = { 0 };
	enum http1_error error = HTTP1_ERR_NONE;
	enum http1_error want_error;

	(void)state;
	memcpy(buf, "GET /", 5);
	memset(buf + 5, 'a', sizeof(buf) - 5);
	/* 200 target bytes in under the wide limit, then it is lowered to 100 */
	assert_int_equal(http1_resume_request_head(&resume, buf, 205, &wide, &test_head, &error),
			 HTTP1_PARSE_MORE);
	assert_int_equal(http1_parse_request_head(buf, 210, &narrow, &test_head, &want_error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(want_error, HTTP1_ERR_URI_TOO_LONG);
	assert_int_equal(http1_resume_request_head(&resume, buf, 210, &narrow, &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_URI_TOO_LONG);

	/* a field line under the limit, then max_head_bytes lowered under what
	 * is in */
	memset(&resume, 0, sizeof(resume));
	memcpy(buf, "GET / HTTP/1.1\r\nX: ", 19);
	assert_int_equal(http1_resume_request_head(&resume, buf, 140, &narrow, &test_head, &error),
			 HTTP1_PARSE_MORE);
	assert_int_equal(http1_parse_request_head(buf, 160, &small_head, &test_head, &want_error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(
		http1_resume_request_head(&resume, buf, 160, &small_head, &test_head, &error),
		HTTP1_PARSE_ERROR);
	assert_int_equal(error, want_error);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resume_dripped_head_is_linear),
		cmocka_unit_test(test_resume_whole_head_parsed_once),
		cmocka_unit_test(test_resume_same_outcome),
		cmocka_unit_test(test_resume_errors_early),
		cmocka_unit_test(test_resume_too_many_fields),
		cmocka_unit_test(test_resume_limits),
		cmocka_unit_test(test_resume_limits_change),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
