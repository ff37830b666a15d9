/* Unit tests for resume.c: which 200 responses offer a resume, the Range
 * and If-Range lines of the resume request, a client's own Range, and which
 * answers continue the body exactly. By table, on heads parsed from text. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"
#include "resume.h"

static struct http1_head test_head;
static struct http1_framing test_framing;

/* Parse a response head given as its field lines ("Name: value\r\n"...). */
static const struct http1_head *parse(int status, const char *fields)
{
	static char text[4096];
	enum http1_error error = HTTP1_ERR_NONE;
	int n = snprintf(text, sizeof(text), "HTTP/1.1 %d X\r\n%s\r\n", status, fields);

	assert_int_equal(
		http1_parse_response_head(text, (size_t)n, sizeof(text), &test_head, &error),
		HTTP1_PARSE_DONE);
	assert_int_equal(http1_response_framing(&test_head, false, &test_framing, &error), 0);
	return &test_head;
}

static void test_resume_offered(void **state)
{
	static const struct {
		const char *fields;
		const char *validator; /* NULL: no resume */
		bool etag;
	} cases[] = {
		{ "Accept-Ranges: bytes\r\nETag: \"abc\"\r\n", "\"abc\"", true },
		{ "accept-ranges: BYTES\r\netag: \"abc\"\r\n", "\"abc\"", true },
		{ "Accept-Ranges: none, bytes\r\nETag: \"a\"\r\n", "\"a\"", true },
		{ "Accept-Ranges: none\r\nAccept-Ranges: bytes\r\nETag: \"a\"\r\n", "\"a\"", true },
		{ "ETag: \"abc\"\r\n", NULL, false }, /* no Accept-Ranges */
		{ "Accept-Ranges: none\r\nETag: \"abc\"\r\n", NULL, false },
		{ "Accept-Ranges: bytesx\r\nETag: \"abc\"\r\n", NULL, false },
		{ "Accept-Ranges: bytes\r\nETag: W/\"abc\"\r\n", NULL, false }, /* weak */
		/* a weak ETag is an ETag: Last-Modified does not stand in for it */
		{ "Accept-Ranges: bytes\r\nETag: W/\"a\"\r\n"
		  "Last-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n",
		  NULL, false },
		{ "Accept-Ranges: bytes\r\nETag: abc\r\n", NULL, false },      /* unquoted */
		{ "Accept-Ranges: bytes\r\nETag: \"a\"b\"\r\n", NULL, false }, /* quote inside */
		{ "Accept-Ranges: bytes\r\nETag: \"a\"\r\nETag: \"b\"\r\n", NULL, false },
		/* a date is strong only with a Date a second or more after it */
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:27 GMT\r\n",
		  "Tue, 15 Nov 1994 12:45:26 GMT", false },
		{ "Accept-Ranges: bytes\r\nDate: Sunday, 20-Nov-94 08:00:00 GMT\r\n"
		  "Last-Modified: Tue Nov 15 12:45:26 1994\r\n",
		  "Tue Nov 15 12:45:26 1994", false },
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n", NULL,
		  false }, /* no Date */
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:26 GMT\r\n",
		  NULL, false }, /* the same second */
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:25 GMT\r\n",
		  NULL, false }, /* before it */
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Date: soon\r\n",
		  NULL, false },
		{ "Accept-Ranges: bytes\r\nLast-Modified: yesterday\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:27 GMT\r\n",
		  NULL, false },
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "ETag: \"e\"\r\n",
		  "\"e\"", true },
		{ "Accept-Ranges: bytes\r\n", NULL, false }, /* no validator */
		/* two Last-Modified or two Date lines: which one would If-Range
		 * name, and which one tells the date strong? */
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Last-Modified: Tue, 15 Nov 1994 12:45:20 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:27 GMT\r\n",
		  NULL, false },
		{ "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:27 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:26 GMT\r\n",
		  NULL, false },
		/* with a strong ETag neither is read */
		{ "Accept-Ranges: bytes\r\nETag: \"e\"\r\n"
		  "Last-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		  "Last-Modified: Tue, 15 Nov 1994 12:45:20 GMT\r\n"
		  "Date: Tue, 15 Nov 1994 12:45:27 GMT\r\nDate: Tue, 15 Nov 1994 12:45:28 GMT\r\n",
		  "\"e\"", true },
	};

	struct resume *r = NULL;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool offered = resume_read_offer(&r, parse(200, cases[i].fields), 100 + i);

		if (cases[i].validator == NULL) {
			if (offered)
				fail_msg("case %zu: resume offered for %s", i, cases[i].fields);
			continue;
		}
		if (!offered)
			fail_msg("case %zu: no resume for %s", i, cases[i].fields);
		assert_int_equal(r->validator_len, strlen(cases[i].validator));
		assert_memory_equal(r->validator, cases[i].validator, r->validator_len);
		assert_int_equal(r->etag, cases[i].etag);
		assert_int_equal(r->length, 100 + i);
		assert_false(r->pending);
		/* the block is reused: a pending resume from before is forgotten */
		r->pending = true;
	}
	resume_free(r);
}

/* The block is made on the first offer only, and a refused offer leaves it
 * as it was. */
static void test_resume_block_reused(void **state)
{
	struct resume *r = NULL, *first;

	assert_false(resume_read_offer(&r, parse(200, "ETag: \"a\"\r\n"), 10));
	assert_null(r);
	assert_true(
		resume_read_offer(&r, parse(200, "Accept-Ranges: bytes\r\nETag: \"a\"\r\n"), 10));
	first = r;
	assert_true(
		resume_read_offer(&r, parse(200, "Accept-Ranges: bytes\r\nETag: \"b\"\r\n"), 20));
	assert_ptr_equal(r, first);
	assert_memory_equal(r->validator, "\"b\"", 3);
	assert_int_equal(r->length, 20);
	resume_free(r);
}

static void test_resume_prepare(void **state)
{
	struct resume *r = NULL;
	static const char want[] = "Range: bytes=1048576-\r\nIf-Range: \"v1\"\r\n\r\n";
	static const char want0[] = "Range: bytes=0-\r\nIf-Range: \"v1\"\r\n\r\n";

	assert_true(resume_read_offer(&r, parse(200, "Accept-Ranges: bytes\r\nETag: \"v1\"\r\n"),
				      4194304));
	resume_prepare(r, 1048576);
	assert_int_equal(r->at, 1048576);
	assert_int_equal(r->lines_len, sizeof(want) - 1);
	assert_memory_equal(r->lines, want, sizeof(want) - 1);
	/* a resume of the resume asks from the new K */
	resume_prepare(r, 0);
	assert_int_equal(r->lines_len, sizeof(want0) - 1);
	assert_memory_equal(r->lines, want0, sizeof(want0) - 1);
	resume_free(r);
	resume_free(NULL);
}

static void test_resume_request_has_range(void **state)
{
	static const struct {
		const char *head;
		bool has;
	} cases[] = {
		{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nrange: bytes=0-1\r\nHost: a\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nHost: a\r\nIf-Range: \"x\"\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX-Range: 1\r\nAccept-Ranges: bytes\r\n\r\n",
		  false },
		{ "GET /Range: HTTP/1.1\r\nHost: a\r\nRanges: 1\r\n\r\n", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (resume_request_has_range(cases[i].head, strlen(cases[i].head)) != cases[i].has)
			fail_msg("case %zu: %s", i, cases[i].head);
}

static void test_resume_check_answer(void **state)
{
	static const struct {
		int status;
		const char *fields;
		enum resume_answer want;
	} cases[] = {
		{ 206, "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE },
		/* a 206 carries the ETag a 200 would (RFC 9110 section 15.3.7):
		 * one without proves no representation */
		{ 206, "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\n",
		  RESUME_ANSWER_NO_ETAG },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\n"
		  "Last-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n",
		  RESUME_ANSWER_NO_ETAG },
		{ 206, "content-range: BYTES 40-99/100\r\nContent-Length: 60\r\netag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE },
		{ 200, "Content-Length: 100\r\nETag: \"v2\"\r\n", RESUME_ANSWER_NOT_PARTIAL },
		{ 416, "Content-Range: bytes */100\r\nContent-Length: 0\r\n",
		  RESUME_ANSWER_NOT_PARTIAL },
		{ 206, "Content-Range: bytes 41-99/100\r\nContent-Length: 59\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 40-98/100\r\nContent-Length: 59\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 40-99/101\r\nContent-Length: 60\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 40-99/*\r\nContent-Length: 60\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 040-99/100\r\nContent-Length: 60\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE }, /* the same numbers */
		{ 206,
		  "Content-Range: bytes 40-99/100 \r\nX: y\r\nContent-Length: 60\r\n"
		  "ETag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE }, /* trailing whitespace is not part of the value */
		{ 206, "Content-Range: bytes  40-99/100\r\nContent-Length: 60\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 40-99/100x\r\nContent-Length: 60\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Length: 60\r\n", RESUME_ANSWER_OTHER_RANGE },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Range: bytes 40-99/100\r\n"
		  "Content-Length: 60\r\n",
		  RESUME_ANSWER_OTHER_RANGE },
		{ 206, "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nETag: \"v2\"\r\n",
		  RESUME_ANSWER_CHANGED },
		{ 206, "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nETag: W/\"v1\"\r\n",
		  RESUME_ANSWER_CHANGED },
		{ 206, "Content-Range: bytes 40-99/100\r\nContent-Length: 61\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_BAD_LENGTH },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nTransfer-Encoding: chunked\r\n"
		  "ETag: \"v1\"\r\n",
		  RESUME_ANSWER_BAD_LENGTH },
		/* the 200 had no Content-Encoding */
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Encoding: "
		  "gzip\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_OTHER_CODING },
		/* a server that sends parts and a top-level Content-Range both */
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "multipart/byteranges; boundary=b\r\n",
		  RESUME_ANSWER_MULTIPART },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "Multipart/ByteRanges\r\n",
		  RESUME_ANSWER_MULTIPART },
		/* with two types, parts and boundaries may be what follows */
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "multipart/byteranges; boundary=b\r\nContent-Type: text/plain\r\n"
		  "ETag: \"v1\"\r\n",
		  RESUME_ANSWER_MULTIPART },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "text/plain\r\nContent-Type: multipart/byteranges; boundary=b\r\n"
		  "ETag: \"v1\"\r\n",
		  RESUME_ANSWER_MULTIPART },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "multipart/byterangesx\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE },
		{ 206,
		  "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\nContent-Type: "
		  "application/octet-stream\r\nETag: \"v1\"\r\n",
		  RESUME_ANSWER_SPLICE },
	};
	struct resume *r = NULL;

	assert_true(
		resume_read_offer(&r, parse(200, "Accept-Ranges: bytes\r\nETag: \"v1\"\r\n"), 100));
	resume_prepare(r, 40);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct http1_head *head = parse(cases[i].status, cases[i].fields);
		enum resume_answer got = resume_check_answer(r, head, &test_framing);

		if (got != cases[i].want)
			fail_msg("case %zu: got %d, want %d: %s", i, got, cases[i].want,
				 cases[i].fields);
		assert_non_null(resume_answer_text(got));
	}
	resume_free(r);
}

/* A 200 in a Content-Encoding is resumed only by a 206 that names its
 * strong ETag and is in the same coding (compared without case), or has
 * no Content-Encoding (RFC 9110 section 15.3.7: a 206 to If-Range should
 * leave it out); an offer with two or an overlong one is none. */
static void test_resume_check_answer_coding(void **state)
{
	static const char range[] = "Content-Range: bytes 40-99/100\r\nContent-Length: 60\r\n";
	static const struct {
		const char *coding;
		enum resume_answer want;
	} cases[] = {
		{ "ETag: \"v1\"\r\nContent-Encoding: gzip\r\n", RESUME_ANSWER_SPLICE },
		{ "ETag: \"v1\"\r\nContent-Encoding: GZip\r\n", RESUME_ANSWER_SPLICE },
		/* without the ETag, the same coding proves nothing */
		{ "", RESUME_ANSWER_NO_ETAG },
		{ "Content-Encoding: gzip\r\n", RESUME_ANSWER_NO_ETAG },
		{ "ETag: \"v1\"\r\n", RESUME_ANSWER_SPLICE },
		{ "ETag: \"v2\"\r\n", RESUME_ANSWER_CHANGED },
		{ "ETag: \"v1\"\r\nContent-Encoding: br\r\n", RESUME_ANSWER_OTHER_CODING },
		{ "ETag: \"v1\"\r\nContent-Encoding: gzip2\r\n", RESUME_ANSWER_OTHER_CODING },
		{ "ETag: \"v1\"\r\nContent-Encoding: gzip\r\nContent-Encoding: gzip\r\n",
		  RESUME_ANSWER_OTHER_CODING },
	};
	struct resume *r = NULL;
	char fields[256];
	char longer[128];

	(void)state;
	assert_true(resume_read_offer(
		&r,
		parse(200, "Accept-Ranges: bytes\r\nETag: \"v1\"\r\nContent-Encoding: gzip\r\n"),
		100));
	resume_prepare(r, 40);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum resume_answer got;

		snprintf(fields, sizeof(fields), "%s%s", range, cases[i].coding);
		got = resume_check_answer(r, parse(206, fields), &test_framing);
		if (got != cases[i].want)
			fail_msg("case %zu: got %d, want %d: %s", i, got, cases[i].want, fields);
	}
	assert_false(
		resume_read_offer(&r,
				  parse(200, "Accept-Ranges: bytes\r\nETag: \"v1\"\r\n"
					     "Content-Encoding: gzip\r\nContent-Encoding: br\r\n"),
				  100));
	memset(longer, 'x', 65);
	longer[65] = '\0';
	snprintf(fields, sizeof(fields),
		 "Accept-Ranges: bytes\r\nETag: \"v1\"\r\nContent-Encoding: %s\r\n", longer);
	assert_false(resume_read_offer(&r, parse(200, fields), 100));
	resume_free(r);
}

/* With Last-Modified as the validator, the 206's Last-Modified is compared
 * and its ETag (which the 200 did not have) is not. */
static void test_resume_check_answer_last_modified(void **state)
{
	struct resume *r = NULL;

	assert_true(resume_read_offer(
		&r,
		parse(200,
		      "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		      "Date: Wed, 16 Nov 1994 08:00:00 GMT\r\n"),
		10));
	resume_prepare(r, 3);
	assert_int_equal(resume_check_answer(r,
					     parse(206, "Content-Range: bytes 3-9/10\r\n"
							"Content-Length: 7\r\nETag: \"new\"\r\n"
							"Last-Modified: Tue, 15 Nov 1994 "
							"12:45:26 GMT\r\n"),
					     &test_framing),
			 RESUME_ANSWER_SPLICE);
	assert_int_equal(resume_check_answer(r,
					     parse(206, "Content-Range: bytes 3-9/10\r\n"
							"Content-Length: 7\r\n"
							"Last-Modified: Wed, 16 Nov 1994 "
							"12:45:26 GMT\r\n"),
					     &test_framing),
			 RESUME_ANSWER_CHANGED);
	/* a Last-Modified may be the same for both codings of a file: a 206
	 * without the 200's Content-Encoding is not taken for it */
	assert_true(resume_read_offer(
		&r,
		parse(200,
		      "Accept-Ranges: bytes\r\nLast-Modified: Tue, 15 Nov 1994 12:45:26 GMT\r\n"
		      "Date: Wed, 16 Nov 1994 08:00:00 GMT\r\nContent-Encoding: gzip\r\n"),
		10));
	resume_prepare(r, 3);
	assert_int_equal(resume_check_answer(r,
					     parse(206, "Content-Range: bytes 3-9/10\r\n"
							"Content-Length: 7\r\n"
							"Last-Modified: Tue, 15 Nov 1994 "
							"12:45:26 GMT\r\n"),
					     &test_framing),
			 RESUME_ANSWER_OTHER_CODING);
	resume_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resume_offered),
		cmocka_unit_test(test_resume_block_reused),
		cmocka_unit_test(test_resume_prepare),
		cmocka_unit_test(test_resume_request_has_range),
		cmocka_unit_test(test_resume_check_answer),
		cmocka_unit_test(test_resume_check_answer_last_modified),
		cmocka_unit_test(test_resume_check_answer_coding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
