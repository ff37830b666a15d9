#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"

/* A string literal as pointer and length, so it may hold NUL bytes. */
#define S(lit) lit, sizeof(lit) - 1

static const struct http1_limits test_limits = {
	.max_head_bytes = 65536,
	.max_target_bytes = 8192,
};

/* One head buffer for every test: it is large, and the tests run one by one. */
static struct http1_head test_head;

/* Parse a request head with the default limits. */
static enum http1_parse test_parse_request(const char *s, size_t len, enum http1_error *error)
{
	return http1_parse_request_head(s, len, &test_limits, &test_head, error);
}

/* Parse a request head and its framing, which must both succeed. */
static void test_request_ok(const char *s, struct http1_framing *framing)
{
	enum http1_error error;

	assert_int_equal(test_parse_request(s, strlen(s), &error), HTTP1_PARSE_DONE);
	assert_int_equal(error, HTTP1_ERR_NONE);
	assert_int_equal(test_head.head_len, strlen(s));
	assert_int_equal(http1_request_framing(&test_head, framing, &error), 0);
}

/* True when the counted string equals the C string exactly. */
static bool test_span_is(const char *p, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(p, want, len) == 0;
}

/* Valid requests of every target form; also fed to the prefix test. */
static const struct {
	const char *req;
	const char *method;
	const char *target;
	int minor;
} valid_requests[] = {
	{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "/", 1 },
	{ "GET /a/b?c=d&e=%20f HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET", "/a/b?c=d&e=%20f",
	  1 },
	{ "GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET",
	  "http://example.com/x?y", 1 },
	{ "GET http://example.com:8080 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "GET",
	  "http://example.com:8080", 1 },
	{ "GET https://[2001:db8::1]:443/p HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", "GET",
	  "https://[2001:db8::1]:443/p", 1 },
	{ "GET http://10.0.0.1?q HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", "GET", "http://10.0.0.1?q",
	  1 },
	{ "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "CONNECT",
	  "example.com:443", 1 },
	{ "CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n", "CONNECT", "[::1]:8443", 1 },
	{ "CONNECT 192.0.2.1:80 HTTP/1.1\r\nHost: 192.0.2.1:80\r\n\r\n", "CONNECT", "192.0.2.1:80",
	  1 },
	{ "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "OPTIONS", "*", 1 },
	{ "OPTIONS /x HTTP/1.1\r\nHost: a\r\n\r\n", "OPTIONS", "/x", 1 },
	{ "GET / HTTP/1.0\r\n\r\n", "GET", "/", 0 },
	{ "PATCH /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n", "PATCH", "/p", 1 },
	{ "M-SEARCH~!#$%&'*+.^_`| /x HTTP/1.1\r\nHost: a\r\n\r\n", "M-SEARCH~!#$%&'*+.^_`|", "/x",
	  1 },
	{ "x /{}|^ HTTP/1.1\r\nHost: a\r\n\r\n", "x", "/{}|^", 1 },
	{ "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "/", 1 },
	/* a higher minor version is read as 1.1 (RFC 9112 section 2.3) */
	{ "GET / HTTP/1.2\r\nHost: a\r\n\r\n", "GET", "/", 2 },
	{ "GET / HTTP/1.9\r\nHost: a\r\n\r\n", "GET", "/", 9 },
};

/* Every target form parses to the right parts. */
static void test_request_target_forms(void **state)
{
	for (size_t i = 0; i < sizeof(valid_requests) / sizeof(valid_requests[0]); i++) {
		enum http1_error error;
		const char *req = valid_requests[i].req;

		assert_int_equal(test_parse_request(req, strlen(req), &error), HTTP1_PARSE_DONE);
		assert_int_equal(test_head.head_len, strlen(req));
		assert_true(test_span_is(test_head.method, test_head.method_len,
					 valid_requests[i].method));
		assert_true(test_span_is(test_head.target, test_head.target_len,
					 valid_requests[i].target));
		assert_int_equal(test_head.version_minor, valid_requests[i].minor);
	}
}

/* Each target form splits into the parts a proxy routes on. */
static void test_request_target_parts(void **state)
{
	static const struct {
		const char *line;
		enum http1_target_form form;
		bool tls;
		const char *host; /* NULL: not set in this form */
		unsigned port;
		const char *authority;
		const char *path;
	} cases[] = {
		{ "GET /a/b?c=d", HTTP1_TARGET_ORIGIN, false, NULL, 0, NULL, "/a/b?c=d" },
		{ "OPTIONS *", HTTP1_TARGET_ASTERISK, false, NULL, 0, NULL, "*" },
		{ "GET http://example.com/a/b?c=d", HTTP1_TARGET_ABSOLUTE, false, "example.com", 80,
		  "example.com", "/a/b?c=d" },
		{ "GET http://example.com", HTTP1_TARGET_ABSOLUTE, false, "example.com", 80,
		  "example.com", "" },
		{ "GET HTTP://Example.com:8080/", HTTP1_TARGET_ABSOLUTE, false, "Example.com", 8080,
		  "Example.com:8080", "/" },
		{ "GET https://127.0.0.1:8443/x", HTTP1_TARGET_ABSOLUTE, true, "127.0.0.1", 8443,
		  "127.0.0.1:8443", "/x" },
		{ "GET HttpS://h", HTTP1_TARGET_ABSOLUTE, true, "h", 443, "h", "" },
		/* an empty port is the scheme's default (RFC 3986 section 3.2.3) */
		{ "GET http://h:/x", HTTP1_TARGET_ABSOLUTE, false, "h", 80, "h:", "/x" },
		{ "GET https://[::1]:", HTTP1_TARGET_ABSOLUTE, true, "::1", 443, "[::1]:", "" },
		{ "GET http://[::1]:3000/p", HTTP1_TARGET_ABSOLUTE, false, "::1", 3000,
		  "[::1]:3000", "/p" },
		{ "GET http://[::1]?q", HTTP1_TARGET_ABSOLUTE, false, "::1", 80, "[::1]", "?q" },
		{ "OPTIONS http://a.b-c_d~:65535", HTTP1_TARGET_ABSOLUTE, false, "a.b-c_d~", 65535,
		  "a.b-c_d~:65535", "" },
		{ "CONNECT example.com:443", HTTP1_TARGET_AUTHORITY, false, "example.com", 443,
		  "example.com:443", "" },
		{ "CONNECT [::1]:8443", HTTP1_TARGET_AUTHORITY, false, "::1", 8443, "[::1]:8443",
		  "" },
		{ "CONNECT 192.0.2.1:1", HTTP1_TARGET_AUTHORITY, false, "192.0.2.1", 1,
		  "192.0.2.1:1", "" },
	};
	char buf[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct http1_target *t = &test_head.parsed_target;
		enum http1_error error;
		size_t len = (size_t)snprintf(buf, sizeof(buf), "%s HTTP/1.1\r\nHost: a\r\n\r\n",
					      cases[i].line);

		if (test_parse_request(buf, len, &error) != HTTP1_PARSE_DONE)
			fail_msg("%s: %s", cases[i].line, http1_error_text(error));
		assert_int_equal(t->form, cases[i].form);
		assert_int_equal(t->tls, cases[i].tls);
		assert_int_equal(t->port, cases[i].port);
		assert_true(test_span_is(t->path, t->path_len, cases[i].path));
		assert_true(t->path >= buf && t->path + t->path_len <= buf + len);
		if (cases[i].host == NULL) {
			assert_null(t->host);
			assert_null(t->authority);
			continue;
		}
		assert_true(test_span_is(t->host, t->host_len, cases[i].host));
		assert_true(test_span_is(t->authority, t->authority_len, cases[i].authority));
	}
}

/* Field names, trimmed values and raw lines point into the buffer. */
static void test_request_fields(void **state)
{
	static const char req[] = "GET / HTTP/1.1\r\n"
				  "Host:a\r\n"
				  "X-Trim: \t value with  inner space \t \r\n"
				  "X-Empty:\r\n"
				  "X-Blank:   \r\n"
				  "X-Obs: caf\xc3\xa9\r\n"
				  "x-dup: 1\r\n"
				  "X-Dup: 2\r\n"
				  "\r\n";
	enum http1_error error;
	const struct http1_field *f;

	assert_int_equal(test_parse_request(S(req), &error), HTTP1_PARSE_DONE);
	assert_int_equal(test_head.field_count, 7);
	f = &test_head.fields[0];
	assert_true(test_span_is(f->name, f->name_len, "Host"));
	assert_true(test_span_is(f->value, f->value_len, "a"));
	assert_true(test_span_is(f->line, f->line_len, "Host:a\r\n"));
	f = &test_head.fields[1];
	assert_true(test_span_is(f->value, f->value_len, "value with  inner space"));
	assert_true(
		test_span_is(f->line, f->line_len, "X-Trim: \t value with  inner space \t \r\n"));
	assert_int_equal(test_head.fields[2].value_len, 0);
	assert_int_equal(test_head.fields[3].value_len, 0);
	f = &test_head.fields[4];
	assert_true(test_span_is(f->value, f->value_len, "caf\xc3\xa9"));
	f = http1_find_field(&test_head, "X-DUP");
	assert_non_null(f);
	assert_true(test_span_is(f->value, f->value_len, "1"));
	assert_null(http1_find_field(&test_head, "X-Missing"));
	assert_null(http1_find_field(&test_head, "Hos"));
	assert_true(http1_name_equals("Content-Length", 14, "content-length"));
	assert_true(http1_name_equals("content-length", 14, "CONTENT-LENGTH"));
	assert_false(http1_name_equals("Content-Lengt", 13, "content-length"));
	assert_false(http1_name_equals("Content-Lengthx", 15, "content-length"));
	assert_false(http1_name_equals("Content_Length", 14, "content-length"));
	/* 0x0d | 0x20 is '-': case folding must not make CR equal to '-'. */
	assert_false(http1_name_equals("a\rb", 3, "a-b"));
}

/* A second request right behind the first parses from buf + head_len. */
static void test_request_pipelined(void **state)
{
	static const char reqs[] = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
				   "POST /2 HTTP/1.1\r\nHost: b\r\nContent-Length: 0\r\n\r\n"
				   "GET /3 HTTP/1.1\r\nHo";
	const char *p = reqs;
	size_t left = sizeof(reqs) - 1;
	enum http1_error error;

	assert_int_equal(test_parse_request(p, left, &error), HTTP1_PARSE_DONE);
	assert_true(test_span_is(test_head.target, test_head.target_len, "/1"));
	p += test_head.head_len;
	left -= test_head.head_len;
	assert_int_equal(test_parse_request(p, left, &error), HTTP1_PARSE_DONE);
	assert_true(test_span_is(test_head.target, test_head.target_len, "/2"));
	assert_int_equal(test_head.field_count, 2);
	p += test_head.head_len;
	left -= test_head.head_len;
	assert_int_equal(test_parse_request(p, left, &error), HTTP1_PARSE_MORE);
}

/* Every proper prefix of a valid head is MORE, never ERROR. */
static void test_request_prefixes(void **state)
{
	for (size_t i = 0; i < sizeof(valid_requests) / sizeof(valid_requests[0]); i++) {
		const char *req = valid_requests[i].req;
		size_t len = strlen(req);
		enum http1_error error;

		for (size_t n = 0; n < len; n++) {
			assert_int_equal(test_parse_request(req, n, &error), HTTP1_PARSE_MORE);
			assert_int_equal(error, HTTP1_ERR_NONE);
		}
	}
}

/* Request heads that must be refused, with the reason. */
static const struct {
	const char *req;
	size_t len;
	enum http1_error error;
} bad_requests[] = {
	/* request line */
	{ S("GET  / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_REQUEST_LINE },
	{ S("GET / HTTP/1.1 \r\n\r\n"), HTTP1_ERR_BAD_REQUEST_LINE },
	{ S("GET \r\n\r\n"), HTTP1_ERR_BAD_REQUEST_LINE },
	{ S("GET\r\n\r\n"), HTTP1_ERR_BAD_REQUEST_LINE },
	{ S("GET\t/ HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S("G(T / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S("GE\"T / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S("GET\0 / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S("G\xc3\x89T / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S(" GET / HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_METHOD },
	{ S("GET /\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET /\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/2.0\r\n\r\n"), HTTP1_ERR_VERSION_NOT_SUPPORTED },
	{ S("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), HTTP1_ERR_VERSION_NOT_SUPPORTED },
	{ S("GET / HTTP/0.9\r\n\r\n"), HTTP1_ERR_VERSION_NOT_SUPPORTED },
	{ S("GET / HTTP/1.x\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/x.1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/01.1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/1.10\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / http/1.1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET /  HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_REQUEST_LINE },
	{ S("GET / hTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTPS/1.1\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET /a b\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
	{ S("GET / HTTP/1.1\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\rX\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	/* request-target */
	{ S("GET /a\x7f HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /\x80 HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /a\tb HTTP/1.1\r\n\r\n"), HTTP1_ERR_SPACE_IN_TARGET },
	{ S("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_SPACE_IN_TARGET },
	{ S("GET /a?q=b c HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_SPACE_IN_TARGET },
	{ S("GET /a HTTP b HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_SPACE_IN_TARGET },
	{ S("GET /a\0b HTTP/1.1\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("OPTIONS *x HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http:/x HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://user@host/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://u:p@host/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://host:99999/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://[::1/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET 1http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET urn:isbn:1 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT example.com: HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT u@example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT http://example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT [1:2:3]:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT * HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT :443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	/* hosts and ports the proxy does not route on, though RFC 3986 allows them */
	{ S("CONNECT example.com:0 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT a!b:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("CONNECT %61:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://example.com:0/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://a$b/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://%61/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	/* schemes other than http and https */
	{ S("GET ftp://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET httpx://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http+s://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	/* authority-form and asterisk-form belong to CONNECT and OPTIONS only */
	{ S("OPTIONS example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("POST * HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("options * HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("connect example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://example.com/#frag HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://[]/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://[g::1]/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://@example.com/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /a\\b HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /aaaaaaaaaaaaaaaaaa\\b HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET http://example.com\\@evil/ HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_SPACE_IN_TARGET },
	{ S("GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	{ S("GET /aaaaaaaaaaaaaaaaaa\x1f HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_TARGET },
	/* fields */
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo : bar\r\n\r\n"), HTTP1_ERR_SPACE_BEFORE_COLON },
	{ S("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"), HTTP1_ERR_SPACE_BEFORE_COLON },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: bar\r\n baz\r\n\r\n"), HTTP1_ERR_OBS_FOLD },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: bar\r\n\tbaz\r\n\r\n"), HTTP1_ERR_OBS_FOLD },
	{ S("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), HTTP1_ERR_OBS_FOLD },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: b\0r\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: \0\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: b\x01r\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: b\x7fr\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: b\x1b[0m\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: bar\nX: y\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: b\rar\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\r\nHost: a\r\nFoo: bar\r\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\r\nHost: a\r\n\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("GET / HTTP/1.1\r\n: empty\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	{ S("GET / HTTP/1.1\r\nFo(o: x\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	{ S("GET / HTTP/1.1\r\nFo\"o: x\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	{ S("GET / HTTP/1.1\r\nFo\xc3\xa9: x\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	{ S("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	{ S("GET / HTTP/1.1\r\nFo\0o: x\r\n\r\n"), HTTP1_ERR_BAD_FIELD_NAME },
	/* empty lines before the request line */
	{ S("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("\r\rGET / HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
	{ S("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
	  HTTP1_ERR_BAD_REQUEST_LINE },
};

/* Every malformed head is refused with its reason; no prefix of it is DONE. */
static void test_request_errors(void **state)
{
	for (size_t i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++) {
		enum http1_error error;
		enum http1_parse r =
			test_parse_request(bad_requests[i].req, bad_requests[i].len, &error);

		if (r != HTTP1_PARSE_ERROR || error != bad_requests[i].error)
			fail_msg("case %zu: got %d/%d (%s), want error %d", i, r, error,
				 http1_error_text(error), bad_requests[i].error);
		for (size_t n = 0; n < bad_requests[i].len; n++)
			assert_int_not_equal(test_parse_request(bad_requests[i].req, n, &error),
					     HTTP1_PARSE_DONE);
	}
}

/* Errors are found as soon as the bad byte is in, not at the end of the head. */
static void test_request_errors_early(void **state)
{
	static const struct {
		const char *req;
		enum http1_error error;
	} cases[] = {
		{ "GET / HTTP/1.1\nHost", HTTP1_ERR_BAD_LINE_ENDING },
		{ "GET /\n", HTTP1_ERR_BAD_VERSION },
		{ "G\n", HTTP1_ERR_BAD_REQUEST_LINE },
		{ "G(", HTTP1_ERR_BAD_METHOD },
		{ "GET /\x01", HTTP1_ERR_BAD_TARGET },
		{ "GET / HTTP/2.", HTTP1_ERR_VERSION_NOT_SUPPORTED },
		{ "GET / HTTP/01", HTTP1_ERR_BAD_VERSION },
		{ "GET / HTTP/x", HTTP1_ERR_BAD_VERSION },
		{ "GET / X\r", HTTP1_ERR_BAD_VERSION },
		{ "GET /a b ", HTTP1_ERR_SPACE_IN_TARGET },
		{ "GET /a\t", HTTP1_ERR_SPACE_IN_TARGET },
		{ "GET * HTTP/1.1", HTTP1_ERR_BAD_TARGET },
		{ "GET / HTTP/1.1\r\nA\x01", HTTP1_ERR_BAD_FIELD_NAME },
		{ "GET / HTTP/1.1\r\nA: b\x01", HTTP1_ERR_BAD_FIELD_VALUE },
		{ "GET / HTTP/1.1\r\nA: b\r\n ", HTTP1_ERR_OBS_FOLD },
		{ "GET / HTTP/1.1\r\nA ", HTTP1_ERR_SPACE_BEFORE_COLON },
		{ "\r\n\n", HTTP1_ERR_BAD_LINE_ENDING },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum http1_error error;

		assert_int_equal(test_parse_request(cases[i].req, strlen(cases[i].req), &error),
				 HTTP1_PARSE_ERROR);
		assert_int_equal(error, cases[i].error);
	}
}

/* A request line refused in or after its target still names its method, and
 * its target as far as the parser read it: the byte refused included unless
 * it ends the line, at most the limit of a target over it. The access log
 * shows them (escaped). */
static void test_request_error_names(void **state)
{
	static const struct {
		const char *req;
		enum http1_error error;
		const char *method;
		const char *target; /* NULL: none read */
	} cases[] = {
		{ "GET /a\001b HTTP/1.1\r\n", HTTP1_ERR_BAD_TARGET, "GET", "/a\001" },
		{ "PUT /a\xc3\xa9 HTTP/1.1\r\n", HTTP1_ERR_BAD_TARGET, "PUT", "/a\xc3" },
		{ "GET /a\tb HTTP/1.1\r\n", HTTP1_ERR_SPACE_IN_TARGET, "GET", "/a\t" },
		{ "GET /a b HTTP/1.1\r\n", HTTP1_ERR_SPACE_IN_TARGET, "GET", "/a" },
		{ "GET /a\r\n", HTTP1_ERR_BAD_VERSION, "GET", "/a" },
		{ "GET /a HTTP/2.0\r\n", HTTP1_ERR_VERSION_NOT_SUPPORTED, "GET", "/a" },
		{ "GET * HTTP/1.1\r\n", HTTP1_ERR_BAD_TARGET, "GET", "*" },
		{ "GET /0123456789abcdef HTTP/1.1\r\n", HTTP1_ERR_URI_TOO_LONG, "GET", "/0123456" },
		{ "DELETE /0123456789", HTTP1_ERR_URI_TOO_LONG, "DELETE", "/0123456" },
		{ "GET  / HTTP/1.1\r\n", HTTP1_ERR_BAD_REQUEST_LINE, "GET", NULL },
		{ "G(T / HTTP/1.1\r\n", HTTP1_ERR_BAD_METHOD, NULL, NULL },
	};
	struct http1_limits limits = { .max_head_bytes = 1024, .max_target_bytes = 8 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *req = cases[i].req;
		enum http1_error error;

		if (http1_parse_request_head(req, strlen(req), &limits, &test_head, &error) !=
			    HTTP1_PARSE_ERROR ||
		    error != cases[i].error)
			fail_msg("case %zu: error %d (%s), want %d", i, error,
				 http1_error_text(error), cases[i].error);
		if (cases[i].method == NULL) {
			assert_int_equal(test_head.method_len, 0);
		} else {
			assert_int_equal(test_head.method_len, strlen(cases[i].method));
			assert_memory_equal(test_head.method, cases[i].method,
					    test_head.method_len);
		}
		if (cases[i].target == NULL) {
			assert_null(test_head.target);
			assert_int_equal(test_head.target_len, 0);
		} else {
			if (test_head.target == NULL ||
			    test_head.target_len != strlen(cases[i].target))
				fail_msg("case %zu: target of %zu bytes, want \"%s\"", i,
					 test_head.target_len, cases[i].target);
			assert_memory_equal(test_head.target, cases[i].target,
					    test_head.target_len);
		}
	}
}

/* 414 for a long target even before its line is complete, 431 for a long head. */
static void test_request_limits(void **state)
{
	static const char req[] = "GET /1234567 HTTP/1.1\r\nHost: a\r\n\r\n";
	struct http1_limits limits = { .max_head_bytes = sizeof(req) - 1, .max_target_bytes = 8 };
	char big[128];
	enum http1_error error;

	/* Target of exactly the limit, head of exactly the limit. */
	assert_int_equal(http1_parse_request_head(S(req), &limits, &test_head, &error),
			 HTTP1_PARSE_DONE);
	/* Bytes after a complete head may go past the head limit. */
	snprintf(big, sizeof(big), "%sGET / HTTP/1.1\r\n", req);
	assert_int_equal(http1_parse_request_head(big, strlen(big), &limits, &test_head, &error),
			 HTTP1_PARSE_DONE);
	assert_int_equal(test_head.head_len, sizeof(req) - 1);

	limits.max_target_bytes = 7;
	assert_int_equal(http1_parse_request_head(S(req), &limits, &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_URI_TOO_LONG);
	assert_int_equal(http1_error_status(error), 414);
	assert_int_equal(http1_parse_request_head(S("GET /1234567"), &limits, &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_URI_TOO_LONG);
	assert_int_equal(http1_parse_request_head(S("GET /123456"), &limits, &test_head, &error),
			 HTTP1_PARSE_MORE);

	limits.max_target_bytes = 8;
	limits.max_head_bytes = sizeof(req) - 2;
	assert_int_equal(http1_parse_request_head(S(req), &limits, &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_HEAD_TOO_LARGE);
	assert_int_equal(http1_error_status(error), 431);
	/* Up to the limit, an incomplete head is only incomplete. */
	assert_int_equal(
		http1_parse_request_head(req, sizeof(req) - 2, &limits, &test_head, &error),
		HTTP1_PARSE_MORE);

	/* Leading empty lines count toward the head size. */
	limits.max_head_bytes = sizeof(req) - 1;
	snprintf(big, sizeof(big), "\r\n%s", req);
	assert_int_equal(http1_parse_request_head(big, strlen(big), &limits, &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_HEAD_TOO_LARGE);
	limits.max_head_bytes = sizeof(req) + 1;
	assert_int_equal(http1_parse_request_head(big, strlen(big), &limits, &test_head, &error),
			 HTTP1_PARSE_DONE);
	assert_int_equal(test_head.head_len, sizeof(req) + 1);
}

/* Build a head with count fields into buf; returns its length. */
static size_t test_build_fields(char *buf, size_t size, size_t count, bool complete)
{
	size_t len = (size_t)snprintf(buf, size, "GET / HTTP/1.1\r\n");

	for (size_t i = 0; i < count; i++)
		len += (size_t)snprintf(buf + len, size - len, "X-F%zu: %zu\r\n", i, i);
	if (complete)
		len += (size_t)snprintf(buf + len, size - len, "\r\n");
	return len;
}

/* HTTP1_MAX_FIELDS fields are accepted, one more is a 431 at once. */
static void test_request_field_count(void **state)
{
	static char buf[HTTP1_MAX_FIELDS * 32];
	enum http1_error error;
	size_t len;

	len = test_build_fields(buf, sizeof(buf), HTTP1_MAX_FIELDS, true);
	assert_int_equal(test_parse_request(buf, len, &error), HTTP1_PARSE_DONE);
	assert_int_equal(test_head.field_count, HTTP1_MAX_FIELDS);

	len = test_build_fields(buf, sizeof(buf), HTTP1_MAX_FIELDS + 1, true);
	assert_int_equal(test_parse_request(buf, len, &error), HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_TOO_MANY_FIELDS);
	assert_int_equal(http1_error_status(error), 431);

	/* Found on the first byte of the extra field line. */
	len = test_build_fields(buf, sizeof(buf), HTTP1_MAX_FIELDS, false);
	buf[len++] = 'X';
	assert_int_equal(test_parse_request(buf, len, &error), HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_TOO_MANY_FIELDS);
}

/* The RFC 9110 tchar set, written out from the grammar. */
static bool test_is_tchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Bytes allowed in a field value: field-vchar, obs-text, SP, HTAB. */
static bool test_is_value_byte(int c)
{
	return c == ' ' || c == '\t' || (c >= 0x21 && c <= 0x7e) || c >= 0x80;
}

/* reg-name bytes other than '%': unreserved and sub-delims (RFC 3986). */
static bool test_is_regname(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("-._~!$&'()*+,;=", c) != NULL);
}

/* unreserved bytes (RFC 3986): all a host name the proxy routes on may hold. */
static bool test_is_unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("-._~", c) != NULL);
}

/* Each byte class is checked against its grammar, byte by byte. */
static void test_byte_classes(void **state)
{
	char buf[256];
	enum http1_error error;
	struct http1_framing framing;

	for (int c = 0; c < 256; c++) {
		size_t len;
		enum http1_parse r;

		len = (size_t)snprintf(buf, sizeof(buf), "G%cT / HTTP/1.1\r\nHost: a\r\n\r\n", 'x');
		buf[1] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != test_is_tchar(c))
			fail_msg("method byte 0x%02x", c);

		len = (size_t)snprintf(buf, sizeof(buf),
				       "GET / HTTP/1.1\r\nHost: a\r\nX%cY: v\r\n\r\n", 'x');
		buf[26] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != (test_is_tchar(c) || c == ':'))
			fail_msg("field name byte 0x%02x", c);

		len = (size_t)snprintf(buf, sizeof(buf),
				       "GET / HTTP/1.1\r\nHost: a\r\nX: a%cb\r\n\r\n", 'x');
		buf[29] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != test_is_value_byte(c))
			fail_msg("field value byte 0x%02x", c);

		len = (size_t)snprintf(buf, sizeof(buf), "GET /a%cb HTTP/1.1\r\nHost: a\r\n\r\n",
				       'x');
		buf[6] = (char)c;
		r = test_parse_request(buf, len, &error);
		/* '#' starts a fragment, which a request-target never has; a
		 * backslash some servers read as '/' */
		if ((r == HTTP1_PARSE_DONE) != (c >= 0x21 && c <= 0x7e && c != '#' && c != '\\'))
			fail_msg("target byte 0x%02x", c);

		/* http and https are the only schemes, in any case */
		len = (size_t)snprintf(buf, sizeof(buf),
				       "GET ht%cp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 'x');
		buf[6] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != (c == 't' || c == 'T'))
			fail_msg("scheme byte 0x%02x", c);

		/* a target's host is one the proxy can route on; '/' and '?' end it */
		len = (size_t)snprintf(buf, sizeof(buf),
				       "GET http://a%cb/ HTTP/1.1\r\nHost: a\r\n\r\n", 'x');
		buf[12] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != (test_is_unreserved(c) || c == '/' || c == '?'))
			fail_msg("absolute-form host byte 0x%02x", c);

		len = (size_t)snprintf(buf, sizeof(buf),
				       "CONNECT a%cb:1 HTTP/1.1\r\nHost: a\r\n\r\n", 'x');
		buf[9] = (char)c;
		r = test_parse_request(buf, len, &error);
		if ((r == HTTP1_PARSE_DONE) != test_is_unreserved(c))
			fail_msg("authority-form host byte 0x%02x", c);

		/* Host: any reg-name beside an absolute-form target, which names
		 * the host itself; a routable one beside an origin-form target */
		len = (size_t)snprintf(buf, sizeof(buf),
				       "GET http://a/ HTTP/1.1\r\nHost: a%cb\r\n\r\n", 'x');
		buf[31] = (char)c;
		if (test_parse_request(buf, len, &error) == HTTP1_PARSE_DONE &&
		    (http1_request_framing(&test_head, &framing, &error) == 0) !=
			    test_is_regname(c))
			fail_msg("host byte 0x%02x", c);

		len = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a%cb\r\n\r\n",
				       'x');
		buf[23] = (char)c;
		if (test_parse_request(buf, len, &error) == HTTP1_PARSE_DONE &&
		    (http1_request_framing(&test_head, &framing, &error) == 0) !=
			    test_is_unreserved(c))
			fail_msg("origin-form host byte 0x%02x", c);
	}
}

/* A framing table row that expects an error; the other columns are unused. */
#define REQ_BAD(error) error, HTTP1_BODY_NONE, 0, false, false
#define RESP_BAD(error) error, HTTP1_BODY_NONE, 0, false

/* What a request head says about its body and connection. */
static const struct {
	const char *req;
	enum http1_error error;
	enum http1_body body;
	uint64_t length;
	bool keep_alive;
	bool expect_continue;
} request_framings[] = {
	{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.0\r\n\r\n", 0, HTTP1_BODY_NONE, 0, false, false },
	{ "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 0, HTTP1_BODY_NONE, 0, false,
	  false },
	{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive ,CLOSE\r\n\r\n", 0, HTTP1_BODY_NONE,
	  0, false, false },
	{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true,
	  false },
	{ "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", 0,
	  HTTP1_BODY_NONE, 0, false, false },
	/* Content-Length */
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", 0, HTTP1_BODY_LENGTH, 5, true,
	  false },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true,
	  false },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 0, HTTP1_BODY_LENGTH, 5,
	  true, false },
	{ "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\nCONTENT-LENGTH: 5\r\n\r\n", 0,
	  HTTP1_BODY_LENGTH, 5, true, false },
	/* leading zeros: 0 alone is the only number that starts with one */
	{ "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\nCONTENT-LENGTH: 005\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 00\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 012\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12, 012\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n", 0, HTTP1_BODY_LENGTH, 10,
	  true, false },
	/* a framing field's name with '_' for '-': an origin mapping '_' to '-'
	 * would see a second one */
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_UNDERSCORE_FRAMING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent_length: 9\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_UNDERSCORE_FRAMING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTRANSFER_ENCODING: chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_UNDERSCORE_FRAMING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding_: chunked\r\n\r\n", 0, HTTP1_BODY_NONE,
	  0, true, false },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent_Lengthy: 5\r\nX_Host: b\r\n\r\n", 0,
	  HTTP1_BODY_NONE, 0, true, false },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999999999999\r\n\r\n", 0,
	  HTTP1_BODY_LENGTH, 999999999999999999ULL, true, false },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_DIFFERING_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_DIFFERING_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456789\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
	/* Transfer-Encoding */
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0, HTTP1_BODY_CHUNKED,
	  0, true, false },
	{ "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: CHUNKED\r\n\r\n", 0, HTTP1_BODY_CHUNKED,
	  0, true, false },
	/* a coding the proxy cannot decode, which an origin may not know */
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CODING_NOT_IMPLEMENTED) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: "
	  "chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CODING_NOT_IMPLEMENTED) },
	/* empty list elements: a next hop might read the list differently */
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked,\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
	  "chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
	  "gzip\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CL_AND_TE) },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CL_AND_TE) },
	{ "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_TE_IN_HTTP10) },
	/* Host */
	{ "GET / HTTP/1.1\r\n\r\n", REQ_BAD(HTTP1_ERR_MISSING_HOST) },
	{ "GET http://a/ HTTP/1.1\r\n\r\n", REQ_BAD(HTTP1_ERR_MISSING_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost:\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a:\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: [::1]:\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: a::\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a: \r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a:80:80\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: :80\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: [::g]\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a%4\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.0\r\nHost: a@b\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET / HTTP/1.1\r\nHost: [::ffff:192.0.2.1]:80\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true,
	  false },
	{ "GET / HTTP/1.1\r\nHost: [1:2:3:4:5:6:7:8]\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "GET http://a/ HTTP/1.1\r\nHost: a%41-b.c_d~\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true,
	  false },
	{ "GET http://a/ HTTP/1.1\r\nHost: a:0\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "CONNECT a:1 HTTP/1.1\r\nHost: a!:0\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	/* a CONNECT has no content: the bytes after its head are the tunnel's */
	{ "CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\nContent-Length: 5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CONNECT_CONTENT) },
	{ "CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\nTransfer-Encoding: chunked\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_CONNECT_CONTENT) },
	{ "CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\nContent-Length: 0\r\n\r\n", 0, HTTP1_BODY_NONE, 0,
	  true, false },
	/* without authority in the target, routes match on Host: a plain name */
	{ "GET / HTTP/1.1\r\nHost: a%41-b.c_d~\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a:0\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "OPTIONS * HTTP/1.1\r\nHost: a!\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_HOST) },
	{ "GET / HTTP/1.1\r\nHost: a-b.c_d~:1\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true, false },
	{ "PUT / HTTP/1.1\r\nHost: a!\r\nExpect: foo\r\nContent-Length: 1\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_EXPECT) },
	/* Expect */
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", 0,
	  HTTP1_BODY_LENGTH, 5, true, true },
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n",
	  0, HTTP1_BODY_CHUNKED, 0, true, true },
	{ "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", 0, HTTP1_BODY_NONE, 0, true,
	  false },
	{ "PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", 0,
	  HTTP1_BODY_LENGTH, 5, false, false },
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect: , 100-continue,\r\nContent-Length: 5\r\n\r\n", 0,
	  HTTP1_BODY_LENGTH, 5, true, true },
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect:\r\nContent-Length: 5\r\n\r\n", 0, HTTP1_BODY_LENGTH,
	  5, true, false },
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect: foo\r\nContent-Length: 5\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_EXPECT) },
	{ "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\n\r\n",
	  REQ_BAD(HTTP1_ERR_BAD_EXPECT) },
	{ "PUT / HTTP/1.0\r\nExpect: 100-continuex\r\n\r\n", REQ_BAD(HTTP1_ERR_BAD_EXPECT) },
};

/* Request framing, table-driven. */
static void test_request_framing(void **state)
{
	for (size_t i = 0; i < sizeof(request_framings) / sizeof(request_framings[0]); i++) {
		const char *req = request_framings[i].req;
		struct http1_framing framing;
		enum http1_error error;
		int r;

		assert_int_equal(test_parse_request(req, strlen(req), &error), HTTP1_PARSE_DONE);
		r = http1_request_framing(&test_head, &framing, &error);
		if (error != request_framings[i].error || r != (error ? -1 : 0))
			fail_msg("case %zu: got %d (%s)", i, error, http1_error_text(error));
		if (r < 0)
			continue;
		assert_int_equal(framing.body, request_framings[i].body);
		assert_int_equal(framing.content_length, request_framings[i].length);
		assert_int_equal(framing.keep_alive, request_framings[i].keep_alive);
		assert_int_equal(framing.expect_continue, request_framings[i].expect_continue);
	}
}

/* The Host value is handed back as it was sent, and its host without the port. */
static void test_request_host(void **state)
{
	struct http1_framing framing;

	test_request_ok("GET / HTTP/1.1\r\nHost:  Example.COM:80 \r\n\r\n", &framing);
	assert_true(test_span_is(framing.host, framing.host_len, "Example.COM:80"));
	assert_true(test_span_is(framing.host_name, framing.host_name_len, "Example.COM"));
	test_request_ok("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", &framing);
	assert_true(test_span_is(framing.host_name, framing.host_name_len, "::1"));
	assert_int_equal(framing.host_port, 8080);
	test_request_ok("GET / HTTP/1.1\r\nHost: a:\r\n\r\n", &framing);
	assert_true(test_span_is(framing.host_name, framing.host_name_len, "a"));
	assert_int_equal(framing.host_port, 0);
	test_request_ok("GET http://b/ HTTP/1.1\r\nHost: a!b\r\n\r\n", &framing);
	assert_true(test_span_is(framing.host_name, framing.host_name_len, "a!b"));
	test_request_ok("GET / HTTP/1.0\r\n\r\n", &framing);
	assert_null(framing.host);
	assert_int_equal(framing.host_len, 0);
	assert_null(framing.host_name);
	assert_int_equal(framing.host_name_len, 0);
}

/* Host values: reg-name, IPv4 and IPv6 literals, each with or without a port;
 * beside an origin-form target, only what the proxy routes on. */
static void test_request_host_forms(void **state)
{
	static const struct {
		const char *host;
		bool valid;    /* beside an absolute-form target */
		bool routable; /* beside an origin-form target */
	} cases[] = {
		{ "a", true, true },
		{ "A.b-c_d~!$&'()*+,;=", true, false },
		{ "%41%4a", true, false },
		{ "127.0.0.1:0", true, false },
		{ "example.com:65535", true, true },
		{ "example.com:", true, true },
		{ "[::1]:", true, true },
		{ "[::]", true, true },
		{ "[::1]", true, true },
		{ "[1::]", true, true },
		{ "[1:2:3:4:5:6:7::]", true, true },
		{ "[::2:3:4:5:6:7:8]", true, true },
		{ "[1:2:3:4:5:6:7:8]:80", true, true },
		{ "[::ffff:1.2.3.4]", true, true },
		{ "[1:2:3:4:5:6:1.2.3.4]", true, true },
		{ "[FE80::a:B]:8080", true, true },
		{ "[1:2:3:4:5:6:7:8:9]", false, false },
		{ "[1:2:3:4:5:6:7]", false, false },
		{ "[1:2:3:4:5:6:7:8::]", false, false },
		{ "[1::2::3]", false, false },
		{ "[1:]", false, false },
		{ "[:1]", false, false },
		{ "[:::]", false, false },
		{ "[12345::]", false, false },
		{ "[::1.2.3]", false, false },
		{ "[::1.2.3.4.5]", false, false },
		{ "[::1.2.3.256]", false, false },
		{ "[::01.2.3.4]", false, false },
		{ "[::1.2.3.4:1]", false, false },
		{ "[1:2:3:4:5:6:7:1.2.3.4]", false, false },
		{ "[]", false, false },
		{ "[::1]x", false, false },
		{ "[::1]:123456", false, false },
		{ "[v1.x]", false, false },
		{ "a:b", false, false },
		{ "a:-1", false, false },
		{ "a::80", false, false },
		{ "%zz", false, false },
		{ "a%", false, false },
		{ "\"a\"", false, false },
	};
	char buf[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (int origin = 0; origin < 2; origin++) {
			struct http1_framing framing;
			enum http1_error error;
			bool valid = origin ? cases[i].routable : cases[i].valid;
			size_t len = (size_t)snprintf(buf, sizeof(buf),
						      "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n",
						      origin ? "/" : "http://a/", cases[i].host);

			assert_int_equal(test_parse_request(buf, len, &error), HTTP1_PARSE_DONE);
			if ((http1_request_framing(&test_head, &framing, &error) == 0) != valid)
				fail_msg("host %s beside %s: %s", cases[i].host,
					 origin ? "origin-form" : "absolute-form",
					 http1_error_text(error));
			if (!valid)
				assert_int_equal(error, HTTP1_ERR_BAD_HOST);
		}
	}
}

/* Status lines: what is accepted and what each part parses to. */
static void test_response_head(void **state)
{
	static const struct {
		const char *resp;
		int status;
		int minor;
		const char *reason;
	} cases[] = {
		{ "HTTP/1.1 200 OK\r\n\r\n", 200, 1, "OK" },
		{ "HTTP/1.0 404 Not Found\r\nServer: x\r\n\r\n", 404, 0, "Not Found" },
		{ "HTTP/1.1 200 \r\n\r\n", 200, 1, "" },
		/* out of grammar, but unambiguous and sent by real servers */
		{ "HTTP/1.1 204\r\n\r\n", 204, 1, "" },
		{ "HTTP/1.1 599  spaced\treason \xff\r\n\r\n", 599, 1, " spaced\treason \xff" },
		{ "HTTP/1.1 100 Continue\r\n\r\n", 100, 1, "Continue" },
		{ "HTTP/1.2 200 OK\r\n\r\n", 200, 2, "OK" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *resp = cases[i].resp;
		size_t len = strlen(resp);
		enum http1_error error;

		assert_int_equal(http1_parse_response_head(resp, len, 65536, &test_head, &error),
				 HTTP1_PARSE_DONE);
		assert_int_equal(test_head.head_len, len);
		assert_int_equal(test_head.status, cases[i].status);
		assert_int_equal(test_head.version_minor, cases[i].minor);
		assert_true(test_span_is(test_head.reason, test_head.reason_len, cases[i].reason));
		for (size_t n = 0; n < len; n++)
			assert_int_equal(
				http1_parse_response_head(resp, n, 65536, &test_head, &error),
				HTTP1_PARSE_MORE);
	}
}

/* Malformed response heads and why. */
static void test_response_errors(void **state)
{
	static const struct {
		const char *resp;
		size_t len;
		enum http1_error error;
	} cases[] = {
		{ S("HTTP/1.1 200\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 200x\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1  200 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 099 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 600 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 2000 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 20 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 2x0 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("http/1.1 200 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("ICY 200 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("\r\nHTTP/1.1 200 OK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 200 O\0K\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/1.1 200 O\x7fK\r\n\r\n"), HTTP1_ERR_BAD_STATUS_LINE },
		{ S("HTTP/2.0 200 OK\r\n\r\n"), HTTP1_ERR_VERSION_NOT_SUPPORTED },
		{ S("HTTP/1.x 200 OK\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
		{ S("HTTP/1.10 200 OK\r\n\r\n"), HTTP1_ERR_BAD_VERSION },
		{ S("HTTP/1.1 200 OK\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("HTTP/1.1 200 O\rK\r\n\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"), HTTP1_ERR_OBS_FOLD },
		{ S("HTTP/1.1 200 OK\r\nA : b\r\n\r\n"), HTTP1_ERR_SPACE_BEFORE_COLON },
		{ S("HTTP/1.1 200 OK\r\nA: b\0\r\n\r\n"), HTTP1_ERR_BAD_FIELD_VALUE },
		{ S("HTTP/1.1 200 OK\r\nA: b\r\n\n"), HTTP1_ERR_BAD_LINE_ENDING },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum http1_error error;
		enum http1_parse r = http1_parse_response_head(cases[i].resp, cases[i].len, 65536,
							       &test_head, &error);

		if (r != HTTP1_PARSE_ERROR || error != cases[i].error)
			fail_msg("case %zu: got %d/%d, want %d", i, r, error, cases[i].error);
	}
}

/* Response heads have a size limit and a field count limit too. */
static void test_response_limits(void **state)
{
	static char buf[HTTP1_MAX_FIELDS * 32];
	enum http1_error error;
	size_t len;

	assert_int_equal(
		http1_parse_response_head(S("HTTP/1.1 200 OK\r\n\r\n"), 19, &test_head, &error),
		HTTP1_PARSE_DONE);
	assert_int_equal(
		http1_parse_response_head(S("HTTP/1.1 200 OK\r\nA: b\r\n"), 20, &test_head, &error),
		HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_HEAD_TOO_LARGE);
	assert_int_equal(
		http1_parse_response_head(S("HTTP/1.1 200 OK\r\nA: b\r"), 25, &test_head, &error),
		HTTP1_PARSE_MORE);

	len = (size_t)snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\n");
	for (size_t i = 0; i <= HTTP1_MAX_FIELDS; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "A: %zu\r\n", i);
	assert_int_equal(http1_parse_response_head(buf, len, sizeof(buf), &test_head, &error),
			 HTTP1_PARSE_ERROR);
	assert_int_equal(error, HTTP1_ERR_TOO_MANY_FIELDS);
}

/* Response framing by status, request method, version and fields. */
static void test_response_framing(void **state)
{
	static const struct {
		const char *resp;
		bool was_head;
		enum http1_error error;
		enum http1_body body;
		uint64_t length;
		bool keep_alive;
	} cases[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, 0, HTTP1_BODY_LENGTH, 5,
		  true },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, 0, HTTP1_BODY_NONE, 0,
		  true },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0,
		  HTTP1_BODY_CHUNKED, 0, true },
		{ "HTTP/1.1 200 OK\r\n\r\n", false, 0, HTTP1_BODY_UNTIL_CLOSE, 0, false },
		{ "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", false, 0,
		  HTTP1_BODY_UNTIL_CLOSE, 0, false },
		{ "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", false, 0, HTTP1_BODY_LENGTH, 3,
		  false },
		{ "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n", false,
		  0, HTTP1_BODY_LENGTH, 3, true },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\n", false, 0,
		  HTTP1_BODY_LENGTH, 3, false },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, 0, HTTP1_BODY_NONE, 0,
		  true },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, 0, HTTP1_BODY_NONE,
		  0, true },
		{ "HTTP/1.1 200 OK\r\n\r\n", true, 0, HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 204 No Content\r\n\r\n", false, 0, HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", false, 0, HTTP1_BODY_NONE,
		  0, true },
		{ "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", false, 0,
		  HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0,
		  HTTP1_BODY_NONE, 0, true },
		/* Transfer-Encoding from HTTP/1.0 is faulty framing (RFC 9112
		 * section 6.1): the connection closes after it, body or none */
		{ "HTTP/1.0 304 Not Modified\r\nTransfer-Encoding: chunked\r\nConnection: "
		  "keep-alive\r\n\r\n",
		  false, 0, HTTP1_BODY_NONE, 0, false },
		{ "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
		  true, 0, HTTP1_BODY_NONE, 0, false },
		{ "HTTP/1.1 100 Continue\r\n\r\n", false, 0, HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false, 0,
		  HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false, 0, HTTP1_BODY_NONE, 0,
		  true },
		{ "HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n", false, 0,
		  HTTP1_BODY_NONE, 0, true },
		{ "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", false,
		  RESP_BAD(HTTP1_ERR_BAD_CONTENT_LENGTH) },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, 0, HTTP1_BODY_LENGTH, 5,
		  true },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 4\r\n\r\n", true,
		  RESP_BAD(HTTP1_ERR_DIFFERING_CONTENT_LENGTH) },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		  false, RESP_BAD(HTTP1_ERR_CL_AND_TE) },
		/* no content, yet both framing fields: malformed all the same */
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		  true, RESP_BAD(HTTP1_ERR_CL_AND_TE) },
		{ "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\nContent-Length: "
		  "5\r\n\r\n",
		  false, RESP_BAD(HTTP1_ERR_CL_AND_TE) },
		{ "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false,
		  RESP_BAD(HTTP1_ERR_TE_IN_HTTP10) },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false,
		  RESP_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", false,
		  RESP_BAD(HTTP1_ERR_BAD_TRANSFER_ENCODING) },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *resp = cases[i].resp;
		struct http1_framing framing;
		enum http1_error error;
		int r;

		assert_int_equal(
			http1_parse_response_head(resp, strlen(resp), 65536, &test_head, &error),
			HTTP1_PARSE_DONE);
		r = http1_response_framing(&test_head, cases[i].was_head, &framing, &error);
		if (error != cases[i].error || r != (error ? -1 : 0))
			fail_msg("case %zu: got %d (%s)", i, error, http1_error_text(error));
		if (r < 0)
			continue;
		if (framing.body != cases[i].body || framing.content_length != cases[i].length ||
		    framing.keep_alive != cases[i].keep_alive)
			fail_msg("case %zu: body %d length %llu keep-alive %d", i, framing.body,
				 (unsigned long long)framing.content_length, framing.keep_alive);
		assert_null(framing.host);
		assert_false(framing.expect_continue);
	}
}

/* A request asks to switch protocols only as RFC 9110 section 7.8 has it:
 * HTTP/1.1, an Upgrade naming a protocol, the upgrade option in Connection;
 * and, for this proxy, with no content and not as a CONNECT. */
static void test_upgrade_asked(void **state)
{
	static const struct {
		const char *req;
		bool upgrade;
	} cases[] = {
		{ "GET /c HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		  true },
		{ "GET /c HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nconnection: , "
		  "UPGRADE\r\nupgrade: h2c, websocket\r\n\r\n",
		  true },
		{ "GET http://a/c HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: "
		  "upgrade\r\nContent-Length: 0\r\n\r\n",
		  true },
		/* no upgrade option, or no Upgrade, or an empty one */
		{ "GET /c HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", false },
		{ "GET /c HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: "
		  "upgraded\r\n\r\n",
		  false },
		{ "GET /c HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", false },
		{ "GET /c HTTP/1.1\r\nHost: a\r\nUpgrade:\r\nConnection: upgrade\r\n\r\n", false },
		/* HTTP/1.0: ignored; content: not offered; CONNECT: a switch of its own */
		{ "GET /c HTTP/1.0\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", false },
		{ "POST /c HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade\r\n"
		  "Content-Length: 2\r\n\r\n",
		  false },
		{ "POST /c HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n",
		  false },
		{ "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nUpgrade: websocket\r\nConnection: "
		  "upgrade\r\n\r\n",
		  false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http1_framing framing;
		enum http1_error error;

		assert_int_equal(test_parse_request(cases[i].req, strlen(cases[i].req), &error),
				 HTTP1_PARSE_DONE);
		assert_int_equal(http1_request_framing(&test_head, &framing, &error), 0);
		if (framing.upgrade != cases[i].upgrade)
			fail_msg("case %zu: upgrade %d", i, framing.upgrade);
	}
}

/* Hop-by-hop fields: the fixed set and the ones Connection names. */
static void test_hop_by_hop(void **state)
{
	static const char req[] = "GET / HTTP/1.1\r\n"
				  "Host: a\r\n"
				  "Connection: keep-alive, X-Secret ,x-other\r\n"
				  "connection: , Foo\r\n"
				  "Keep-Alive: timeout=5\r\n"
				  "Proxy-Connection: close\r\n"
				  "TE: trailers\r\n"
				  "Transfer-Encoding: chunked\r\n"
				  "Upgrade: h2c\r\n"
				  "X-Secret: 1\r\n"
				  "X-OTHER: 2\r\n"
				  "foo: 3\r\n"
				  "X-Secre: 4\r\n"
				  "Accept: */*\r\n"
				  "Via: 1.1 a\r\n"
				  "Trailer: x\r\n"
				  "\r\n";
	static const bool want[] = { false, true, true, true,  true,  true,  true, true,
				     true,  true, true, false, false, false, false };
	bool hop[HTTP1_MAX_FIELDS];
	enum http1_error error;

	assert_int_equal(test_parse_request(S(req), &error), HTTP1_PARSE_DONE);
	assert_int_equal(test_head.field_count, sizeof(want) / sizeof(want[0]));
	http1_hop_by_hop_marks(&test_head, hop);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (hop[i] != want[i])
			fail_msg("field %zu (%.*s)", i, (int)test_head.fields[i].name_len,
				 test_head.fields[i].name);

	/* Content-Length frames the body that is forwarded: naming it in
	 * Connection must not get it dropped. */
	assert_int_equal(
		test_parse_request(S("POST / HTTP/1.1\r\nHost: a\r\nConnection: Content-Length, "
				     "host\r\nContent-Length: 1\r\n\r\n"),
				   &error),
		HTTP1_PARSE_DONE);
	http1_hop_by_hop_marks(&test_head, hop);
	assert_true(hop[0]);
	assert_false(hop[2]);

	/* Without a Connection field only the fixed set is hop-by-hop. */
	assert_int_equal(
		test_parse_request(S("GET / HTTP/1.1\r\nHost: a\r\nX-Secret: 1\r\nte: x\r\n\r\n"),
				   &error),
		HTTP1_PARSE_DONE);
	http1_hop_by_hop_marks(&test_head, hop);
	assert_false(hop[1]);
	assert_true(hop[2]);
}

/* The parser recognises the names that matter in any case, and nothing
 * else: one byte off, a byte whose bit 0x20 differs, or a different length
 * is another name. */
static void test_field_names(void **state)
{
	static const struct {
		const char *name;
		uint32_t known;
	} cases[] = {
		{ "Host", HTTP1_FIELD_HOST },
		{ "hOST", HTTP1_FIELD_HOST },
		{ "Hosts", HTTP1_FIELD_OTHER },
		{ "Hos", HTTP1_FIELD_OTHER },
		{ "H0st", HTTP1_FIELD_OTHER },
		{ "Expect", HTTP1_FIELD_EXPECT },
		{ "Connection", HTTP1_FIELD_CONNECTION },
		{ "CONNECTION", HTTP1_FIELD_CONNECTION },
		{ "Connectio~", HTTP1_FIELD_OTHER },
		{ "Content-Length", HTTP1_FIELD_CONTENT_LENGTH },
		{ "content-LENGTH", HTTP1_FIELD_CONTENT_LENGTH },
		{ "Content_Length", HTTP1_FIELD_UNDERSCORED_FRAMING },
		{ "content_length", HTTP1_FIELD_UNDERSCORED_FRAMING },
		{ "Content-Lengt^", HTTP1_FIELD_OTHER },
		{ "Content-Lengtx", HTTP1_FIELD_OTHER },
		{ "Content.Length", HTTP1_FIELD_OTHER },
		{ "Transfer-Encoding", HTTP1_FIELD_TRANSFER_ENCODING },
		{ "TRANSFER-encoding", HTTP1_FIELD_TRANSFER_ENCODING },
		{ "Transfer_Encoding", HTTP1_FIELD_UNDERSCORED_FRAMING },
		{ "Transfer-Encodin_", HTTP1_FIELD_OTHER },
		{ "TE", HTTP1_FIELD_TE },
		{ "t", HTTP1_FIELD_OTHER },
		{ "TF", HTTP1_FIELD_OTHER },
		{ "Upgrade", HTTP1_FIELD_UPGRADE },
		{ "Upgrad`", HTTP1_FIELD_OTHER },
		{ "Keep-Alive", HTTP1_FIELD_KEEP_ALIVE },
		{ "Keep_Alive", HTTP1_FIELD_OTHER },
		{ "Proxy-Connection", HTTP1_FIELD_PROXY_CONNECTION },
		{ "Proxy-Connectioo", HTTP1_FIELD_OTHER },
		{ "Proxy-Authorization", HTTP1_FIELD_PROXY_AUTHORIZATION },
		{ "Proxy-Authorizatioo", HTTP1_FIELD_OTHER },
		{ "Retry-Attempts", HTTP1_FIELD_RETRY_ATTEMPTS },
		{ "Retry_Attempts", HTTP1_FIELD_OTHER },
		{ "Date", HTTP1_FIELD_DATE },
		{ "DATE", HTTP1_FIELD_DATE },
		{ "Datum", HTTP1_FIELD_OTHER },
		{ "Content-Type", HTTP1_FIELD_OTHER },
	};
	bool hop[HTTP1_MAX_FIELDS];
	enum http1_error error;
	char req[128];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\n%s: 1\r\n\r\n",
				 cases[i].name);

		assert_int_equal(test_parse_request(req, (size_t)n, &error), HTTP1_PARSE_DONE);
		if (test_head.fields[0].known != cases[i].known)
			fail_msg("%s: %u", cases[i].name, (unsigned)test_head.fields[0].known);
	}

	/* "close" and "KEEP-ALIVE" in Connection: the first names a field
	 * that goes, the second one marked already. */
	assert_int_equal(test_parse_request(S("GET / HTTP/1.1\r\nHost: a\r\nConnection: "
					      "KEEP-ALIVE,close\r\nclose: 1\r\nkeep-alive: "
					      "2\r\n\r\n"),
					    &error),
			 HTTP1_PARSE_DONE);
	http1_hop_by_hop_marks(&test_head, hop);
	assert_false(hop[0]);
	assert_true(hop[1]);
	assert_true(hop[2]);
	assert_true(hop[3]);
}

/* Status codes and texts for every error code. */
static void test_error_status_and_text(void **state)
{
	for (int e = HTTP1_ERR_NONE; e < HTTP1_ERR_COUNT; e++) {
		const char *text = http1_error_text((enum http1_error)e);
		int status = http1_error_status((enum http1_error)e);

		assert_non_null(text);
		assert_true(strlen(text) > 0);
		assert_string_not_equal(text, "unknown error");
		for (const char *p = text; *p != '\0'; p++)
			assert_false(*p >= 'A' && *p <= 'Z');
		switch (e) {
		case HTTP1_ERR_URI_TOO_LONG:
			assert_int_equal(status, 414);
			break;
		case HTTP1_ERR_HEAD_TOO_LARGE:
		case HTTP1_ERR_TOO_MANY_FIELDS:
			assert_int_equal(status, 431);
			break;
		case HTTP1_ERR_BAD_EXPECT:
			assert_int_equal(status, 417);
			break;
		case HTTP1_ERR_VERSION_NOT_SUPPORTED:
			assert_int_equal(status, 505);
			break;
		case HTTP1_ERR_CODING_NOT_IMPLEMENTED:
			assert_int_equal(status, 501);
			break;
		default:
			assert_int_equal(status, 400);
		}
	}
	assert_string_equal(http1_error_text(HTTP1_ERR_BAD_CHUNK_SIZE), "invalid chunk size");
	assert_string_equal(http1_error_text((enum http1_error)1000), "unknown error");
}

/* The outcome of feeding a whole chunked body to a decoder. */
struct test_decoded {
	enum http1_chunk_step last; /* DONE, ERROR, or the last step when input ran out */
	enum http1_error error;
	size_t consumed; /* bytes taken, up to DONE's end */
	size_t data_len;
	char data[8192];
};

/* Feed body in pieces of split bytes (0: all at once), checking the step
 * contract as it goes. */
static void test_decode(const char *body, size_t len, size_t split, size_t max_trailer,
			struct test_decoded *out)
{
	struct http1_chunked dec;
	size_t off = 0;

	http1_chunked_init(&dec, max_trailer);
	memset(out, 0, sizeof(*out));
	out->last = HTTP1_CHUNK_FRAMING;
	while (off < len) {
		size_t piece = split == 0 || len - off < split ? len - off : split;
		size_t n = 0;
		enum http1_chunk_step step =
			http1_chunked_step(&dec, body + off, piece, &n, &out->error);

		out->last = step;
		if (step == HTTP1_CHUNK_ERROR) {
			assert_int_not_equal(out->error, HTTP1_ERR_NONE);
			assert_false(http1_chunked_done(&dec));
			return;
		}
		assert_int_equal(out->error, HTTP1_ERR_NONE);
		assert_true(n <= piece);
		if (step == HTTP1_CHUNK_DATA) {
			assert_true(n > 0);
			assert_true(out->data_len + n <= sizeof(out->data));
			memcpy(out->data + out->data_len, body + off, n);
			out->data_len += n;
		} else {
			assert_true(n > 0);
		}
		off += n;
		out->consumed = off;
		if (step == HTTP1_CHUNK_DONE) {
			assert_true(http1_chunked_done(&dec));
			return;
		}
		assert_false(http1_chunked_done(&dec));
	}
}

/* Valid chunked bodies: data and end are the same however the input is split. */
static void test_chunked_valid(void **state)
{
	static const struct {
		const char *body;
		size_t len;
		const char *data;
		size_t consumed;
	} cases[] = {
		{ S("5\r\nhello\r\n0\r\n\r\n"), "hello", 15 },
		{ S("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), "hello world", 26 },
		{ S("0\r\n\r\n"), "", 5 },
		{ S("00005\r\nhello\r\n000\r\n\r\n"), "hello", 21 },
		{ S("A\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n"), "0123456789abcdefghij",
		  35 },
		{ S("5\r\n\r\n0\r\n\r\n0\r\n\r\n"), "\r\n0\r\n", 15 },
		{ S("5;name\r\nhello\r\n0\r\n\r\n"), "hello", 20 },
		{ S("5;name=value\r\nhello\r\n0\r\n\r\n"), "hello", 26 },
		{ S("5 ; a = b ;c=\"q \\\"x\\\\\"\t;d\r\nhello\r\n0\r\n\r\n"), "hello", 39 },
		{ S("5;a=\"\";b=\"\xff\"\r\nhello\r\n0\r\n\r\n"), "hello", 26 },
		{ S("5;a=b\t;c\r\nhello\r\n0;last=1\r\n\r\n"), "hello", 29 },
		{ S("5  \t;a;b ;\tc\r\nhello\r\n0\r\n\r\n"), "hello", 26 },
		{ S("0\r\nExpires: never\r\nX-Empty:\r\nX-T: a\tb \xff\r\n\r\n"), "", 43 },
		{ S("0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), "", 5 },
		{ S("1\r\nx\r\n0\r\n\r\n0\r\n\r\n"), "x", 11 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		static struct test_decoded whole;
		static struct test_decoded bytes;
		static struct test_decoded threes;

		test_decode(cases[i].body, cases[i].len, 0, 1024, &whole);
		test_decode(cases[i].body, cases[i].len, 1, 1024, &bytes);
		test_decode(cases[i].body, cases[i].len, 3, 1024, &threes);
		if (whole.last != HTTP1_CHUNK_DONE)
			fail_msg("case %zu: step %d error %s", i, whole.last,
				 http1_error_text(whole.error));
		if (whole.consumed != cases[i].consumed)
			fail_msg("case %zu: consumed %zu", i, whole.consumed);
		assert_true(test_span_is(whole.data, whole.data_len, cases[i].data));
		assert_int_equal(bytes.last, HTTP1_CHUNK_DONE);
		assert_int_equal(bytes.consumed, whole.consumed);
		assert_int_equal(bytes.data_len, whole.data_len);
		assert_memory_equal(bytes.data, whole.data, whole.data_len);
		assert_int_equal(threes.last, HTTP1_CHUNK_DONE);
		assert_int_equal(threes.consumed, whole.consumed);
		assert_int_equal(threes.data_len, whole.data_len);
		assert_memory_equal(threes.data, whole.data, whole.data_len);
	}
}

/* Framing steps take all framing in the buffer and stop where data begins. */
static void test_chunked_steps(void **state)
{
	static const char body[] = "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\nNEXT";
	struct http1_chunked dec;
	enum http1_error error;
	size_t n;

	http1_chunked_init(&dec, 64);
	assert_int_equal(http1_chunked_step(&dec, body, sizeof(body) - 1, &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_int_equal(n, 3);
	assert_int_equal(http1_chunked_step(&dec, body + 3, 2, &n, &error), HTTP1_CHUNK_DATA);
	assert_int_equal(n, 2);
	assert_int_equal(dec.remaining, 1);
	assert_int_equal(http1_chunked_step(&dec, body + 5, sizeof(body) - 6, &n, &error),
			 HTTP1_CHUNK_DATA);
	assert_int_equal(n, 1);
	assert_int_equal(http1_chunked_step(&dec, body + 6, sizeof(body) - 7, &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_int_equal(n, 9);
	assert_int_equal(http1_chunked_step(&dec, body + 15, sizeof(body) - 16, &n, &error),
			 HTTP1_CHUNK_DATA);
	assert_int_equal(n, 2);
	/* the trailer section is a step of its own */
	assert_int_equal(http1_chunked_step(&dec, body + 17, sizeof(body) - 18, &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_int_equal(n, 5);
	assert_false(http1_chunked_has_trailer(&dec));
	assert_int_equal(http1_chunked_step(&dec, body + 22, sizeof(body) - 23, &n, &error),
			 HTTP1_CHUNK_DONE);
	assert_int_equal(n, 8);
	assert_true(http1_chunked_done(&dec));
	assert_true(http1_chunked_has_trailer(&dec));
	assert_memory_equal(body + 30, "NEXT", 4);
	/* Once done, nothing more is taken. */
	assert_int_equal(http1_chunked_step(&dec, "x", 1, &n, &error), HTTP1_CHUNK_DONE);
	assert_int_equal(n, 0);
}

/* A trailer section in pieces: TRAILER steps, then DONE; without one the
 * last chunk and the empty line are one step. Past the last chunk's line
 * from its LF on, not before. */
static void test_chunked_trailer_steps(void **state)
{
	static const char body[] = "0\r\nA: b\r\nC: d\r\n\r\n";
	struct http1_chunked dec;
	enum http1_error error;
	size_t n;

	http1_chunked_init(&dec, 64);
	assert_false(http1_chunked_past_last_chunk(&dec));
	assert_int_equal(http1_chunked_step(&dec, body, 2, &n, &error), HTTP1_CHUNK_FRAMING);
	assert_false(http1_chunked_past_last_chunk(&dec));
	assert_int_equal(http1_chunked_step(&dec, body + 2, 1, &n, &error), HTTP1_CHUNK_FRAMING);
	assert_int_equal(n, 1);
	assert_true(http1_chunked_past_last_chunk(&dec));
	assert_int_equal(http1_chunked_step(&dec, body + 3, 6, &n, &error), HTTP1_CHUNK_TRAILER);
	assert_true(http1_chunked_past_last_chunk(&dec));
	assert_int_equal(n, 6);
	assert_int_equal(http1_chunked_step(&dec, body + 9, 6, &n, &error), HTTP1_CHUNK_TRAILER);
	assert_int_equal(n, 6);
	assert_int_equal(http1_chunked_step(&dec, body + 15, 2, &n, &error), HTTP1_CHUNK_DONE);
	assert_int_equal(n, 2);
	assert_true(http1_chunked_has_trailer(&dec));

	/* a chunk of data is no last chunk, nor is a size 0 line's start */
	http1_chunked_init(&dec, 64);
	assert_int_equal(http1_chunked_step(&dec, S("1\r\n"), &n, &error), HTTP1_CHUNK_FRAMING);
	assert_false(http1_chunked_past_last_chunk(&dec));
	assert_int_equal(http1_chunked_step(&dec, S("x\r\n0;e=1\r"), &n, &error), HTTP1_CHUNK_DATA);
	assert_int_equal(http1_chunked_step(&dec, S("\r\n0;e=1\r"), &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_false(http1_chunked_past_last_chunk(&dec));

	http1_chunked_init(&dec, 64);
	assert_int_equal(http1_chunked_step(&dec, S("0\r\n\r\nNEXT"), &n, &error),
			 HTTP1_CHUNK_DONE);
	assert_int_equal(n, 5);
	assert_false(http1_chunked_has_trailer(&dec));

	/* an invalid trailer section is still past the last chunk; an invalid
	 * chunk-size line is not */
	http1_chunked_init(&dec, 64);
	assert_int_equal(http1_chunked_step(&dec, S("0\r\nA b: c\r\n"), &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_int_equal(http1_chunked_step(&dec, S("A b: c\r\n"), &n, &error), HTTP1_CHUNK_ERROR);
	assert_int_equal(error, HTTP1_ERR_BAD_TRAILER);
	assert_true(http1_chunked_past_last_chunk(&dec));
	http1_chunked_init(&dec, 4);
	assert_int_equal(http1_chunked_step(&dec, S("0\r\n"), &n, &error), HTTP1_CHUNK_FRAMING);
	assert_int_equal(http1_chunked_step(&dec, S("Abcdef: g\r\n"), &n, &error),
			 HTTP1_CHUNK_ERROR);
	assert_int_equal(error, HTTP1_ERR_BAD_TRAILER);
	assert_true(http1_chunked_past_last_chunk(&dec));
	http1_chunked_init(&dec, 64);
	assert_int_equal(http1_chunked_step(&dec, S("0x\r\n"), &n, &error), HTTP1_CHUNK_ERROR);
	assert_false(http1_chunked_past_last_chunk(&dec));
}

/* Which trailer fields go on: not those a trailer must not carry, nor those
 * the head's Connection names. */
static void test_trailer_fields(void **state)
{
	static const char raw[] = "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-A,close\r\n"
				  "Connection: TE, x-b\r\n\r\n";
	static struct http1_head head;
	enum http1_error error;
	char named[16];

	assert_int_equal(http1_parse_response_head(S(raw), 4096, &head, &error), HTTP1_PARSE_DONE);
	assert_int_equal(http1_trailer_named(&head, named, sizeof(named)), 8);
	assert_memory_equal(named, "X-A,x-b,", 8);
	assert_int_equal(http1_trailer_named(&head, named, 5), 8);
	assert_false(http1_trailer_field_passes(S("x-a"), named, 8));
	assert_false(http1_trailer_field_passes(S("X-B"), named, 8));
	assert_true(http1_trailer_field_passes(S("X-AB"), named, 8));
	assert_true(http1_trailer_field_passes(S("X-Checksum"), named, 8));
	assert_true(http1_trailer_field_passes(S("Server-Timing"), NULL, 0));
	assert_false(http1_trailer_field_passes(S("content-LENGTH"), NULL, 0));
	assert_false(http1_trailer_field_passes(S("Trailer"), NULL, 0));
	assert_false(http1_trailer_field_passes(S("Host"), NULL, 0));
	assert_false(http1_trailer_field_passes(S("Keep-Alive"), NULL, 0));
	assert_false(http1_trailer_field_passes(S("Authorization"), NULL, 0));
}

/* A chunk of exactly 2^62 bytes is accepted; data steps never look at data. */
static void test_chunked_large(void **state)
{
	static const char line[] = "4000000000000000\r\n";
	struct http1_chunked dec;
	enum http1_error error;
	size_t n;

	http1_chunked_init(&dec, 0);
	assert_int_equal(http1_chunked_step(&dec, S(line), &n, &error), HTTP1_CHUNK_FRAMING);
	assert_int_equal(n, sizeof(line) - 1);
	assert_int_equal(dec.remaining, UINT64_C(1) << 62);
	assert_int_equal(http1_chunked_step(&dec, S("\0\r\n0\r\n\r\n"), &n, &error),
			 HTTP1_CHUNK_DATA);
	assert_int_equal(n, 8);
	assert_int_equal(dec.remaining, (UINT64_C(1) << 62) - 8);
}

/* Invalid chunked framing, with the reason; the same however it is split. */
static void test_chunked_errors(void **state)
{
	static const struct {
		const char *body;
		size_t len;
		enum http1_error error;
	} cases[] = {
		{ S("\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("x\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("5x\r\nhello\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("-5\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("+5\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S(" 5\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("0x5\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("5\n"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("5\rx"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("5\r\r\n"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("5\r\nhelloX"), HTTP1_ERR_BAD_CHUNK_END },
		{ S("5\r\nhello\n0\r\n\r\n"), HTTP1_ERR_BAD_CHUNK_END },
		{ S("5\r\nhello\r\r\n"), HTTP1_ERR_BAD_CHUNK_END },
		{ S("5\r\nhello\r\n\r\n"), HTTP1_ERR_BAD_CHUNK_SIZE },
		{ S("10000000000000000\r\n"), HTTP1_ERR_CHUNK_SIZE_OVERFLOW },
		{ S("4000000000000001\r\n"), HTTP1_ERR_CHUNK_SIZE_OVERFLOW },
		{ S("FFFFFFFFFFFFFFFFF\r\n"), HTTP1_ERR_CHUNK_SIZE_OVERFLOW },
		{ S("5;\r\nhello\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5 \r\nhello\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5 x\r\nhello\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;=a\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a \r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a b\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=b c\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=b \r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a@b\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=b@\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\"x\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\"\x01\"\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\"\\\x01\"\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\"x\"y\r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a=\"x\" \r\n"), HTTP1_ERR_BAD_CHUNK_EXT },
		{ S("5;a\n"), HTTP1_ERR_BAD_LINE_ENDING },
		{ S("0\r\nBad Name: x\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA : b\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\n x\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA: b\r\n c\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA: \x01\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA: \0\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA: b\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nA: b\rc\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\nNoColon\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\n:x\r\n\r\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\n\n"), HTTP1_ERR_BAD_TRAILER },
		{ S("0\r\n\rx"), HTTP1_ERR_BAD_TRAILER },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		static struct test_decoded whole;
		static struct test_decoded bytes;

		test_decode(cases[i].body, cases[i].len, 0, 1024, &whole);
		test_decode(cases[i].body, cases[i].len, 1, 1024, &bytes);
		if (whole.last != HTTP1_CHUNK_ERROR || whole.error != cases[i].error)
			fail_msg("case %zu: step %d error %d (%s), want %d", i, whole.last,
				 whole.error, http1_error_text(whole.error), cases[i].error);
		assert_int_equal(bytes.last, HTTP1_CHUNK_ERROR);
		assert_int_equal(bytes.error, whole.error);
	}
}

/* Leading zeros are fine (RFC 9112 section 7.1: chunk-size = 1*HEXDIG); the
 * line-length limit is what bounds them, as every byte of the line. */
static void test_chunked_line_limit(void **state)
{
	static char body[8192];
	static struct test_decoded out;
	size_t len;

	memset(body, '0', 4000);
	memcpy(body + 4000, "5\r\nhello\r\n0\r\n\r\n", 16);
	test_decode(body, 4016, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
	assert_true(test_span_is(out.data, out.data_len, "hello"));

	/* past the limit, the error says the line is too long, whatever byte
	 * goes over it: a digit, the CR or LF, an extension's */
	memset(body, '0', 5000);
	test_decode(body, 5000, 7, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_CHUNK_LINE_TOO_LONG);
	assert_string_equal(http1_error_text(out.error), "chunk-size line too long");
	memset(body, '0', 4094);
	memcpy(body + 4094, "1\r\nx\r\n0\r\n\r\n", 11);
	test_decode(body, 4105, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_CHUNK_LINE_TOO_LONG);
	memset(body, '0', 4095);
	memcpy(body + 4095, "1\r\nx\r\n0\r\n\r\n", 11);
	test_decode(body, 4106, 1, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_CHUNK_LINE_TOO_LONG);
	/* 4096 bytes including the CRLF, leading zeros and all, is taken */
	memset(body, '0', 4093);
	memcpy(body + 4093, "1\r\nx\r\n0\r\n\r\n", 11);
	test_decode(body, 4104, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
	assert_true(test_span_is(out.data, out.data_len, "x"));

	/* 4096 bytes including the CRLF is the longest line. */
	memcpy(body, "5;", 2);
	memset(body + 2, 'a', 4092);
	memcpy(body + 4094, "\r\nhello\r\n0\r\n\r\n", 15);
	test_decode(body, 4109, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
	memcpy(body, "5;a", 3);
	memset(body + 3, 'a', 4092);
	memcpy(body + 4095, "\r\nhello\r\n0\r\n\r\n", 15);
	test_decode(body, 4110, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_CHUNK_LINE_TOO_LONG);
	/* an invalid extension within the limit is still said to be one */
	memcpy(body, "5;a", 3);
	memset(body + 3, 'a', 4000);
	memcpy(body + 4003, "@\r\nhello\r\n0\r\n\r\n", 16);
	test_decode(body, 4019, 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_BAD_CHUNK_EXT);

	/* a trailer line is bounded by the section's limit alone, as a
	 * header line is by the head's */
	len = (size_t)snprintf(body, sizeof(body), "0\r\nX: %05000d\r\n\r\n", 0);
	test_decode(body, len, 0, 100000, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
	test_decode(body, len, 0, 5000, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_BAD_TRAILER);
}

/* Trailers count against max_trailer; the final CRLF does not. */
static void test_chunked_trailer_limit(void **state)
{
	static const char body[] = "0\r\nA: 0123456789\r\n\r\n";
	static struct test_decoded out;

	test_decode(S(body), 0, 15, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
	test_decode(S(body), 0, 14, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_ERROR);
	assert_int_equal(out.error, HTTP1_ERR_BAD_TRAILER);
	test_decode(S("0\r\n\r\n"), 0, 0, &out);
	assert_int_equal(out.last, HTTP1_CHUNK_DONE);
}

/* Whether a chunked body carried a chunk extension, on any size line: the
 * proxy keeps chunked framing for it rather than drop the extensions. */
static bool test_decode_extended(const char *body, size_t len)
{
	struct http1_chunked dec;
	enum http1_error error;
	size_t off = 0, n;

	http1_chunked_init(&dec, 1024);
	while (off < len) {
		enum http1_chunk_step step =
			http1_chunked_step(&dec, body + off, len - off, &n, &error);

		assert_int_not_equal(step, HTTP1_CHUNK_ERROR);
		off += n;
		if (step == HTTP1_CHUNK_DONE)
			break;
	}
	assert_true(http1_chunked_done(&dec));
	return http1_chunked_has_extension(&dec);
}

static void test_chunked_has_extension(void **state)
{
	(void)state;
	assert_false(test_decode_extended(S("5\r\nhello\r\n0\r\n\r\n")));
	assert_false(test_decode_extended(S("5\r\nhello\r\n0\r\nX-A: ;b=c\r\n\r\n")));
	assert_true(test_decode_extended(S("5;a\r\nhello\r\n0\r\n\r\n")));
	assert_true(test_decode_extended(S("5\r\nhello\r\n3 ; sig=\"x;y\"\r\nabc\r\n0\r\n\r\n")));
	assert_true(test_decode_extended(S("5\r\nhello\r\n0;last=1\r\n\r\n")));
}

/* After an error the decoder keeps saying so. */
static void test_chunked_sticky_error(void **state)
{
	struct http1_chunked dec;
	enum http1_error error;
	size_t n;

	http1_chunked_init(&dec, 0);
	assert_int_equal(http1_chunked_step(&dec, S("5\r\nhello"), &n, &error),
			 HTTP1_CHUNK_FRAMING);
	assert_int_equal(http1_chunked_step(&dec, S("hello"), &n, &error), HTTP1_CHUNK_DATA);
	assert_int_equal(http1_chunked_step(&dec, S("\r\nz"), &n, &error), HTTP1_CHUNK_ERROR);
	assert_int_equal(error, HTTP1_ERR_BAD_CHUNK_SIZE);
	assert_int_equal(http1_chunked_step(&dec, S("0\r\n\r\n"), &n, &error), HTTP1_CHUNK_ERROR);
	assert_int_equal(error, HTTP1_ERR_BAD_CHUNK_SIZE);
	assert_int_equal(n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_target_forms),
		cmocka_unit_test(test_request_target_parts),
		cmocka_unit_test(test_request_fields),
		cmocka_unit_test(test_request_pipelined),
		cmocka_unit_test(test_request_prefixes),
		cmocka_unit_test(test_request_errors),
		cmocka_unit_test(test_request_errors_early),
		cmocka_unit_test(test_request_error_names),
		cmocka_unit_test(test_request_limits),
		cmocka_unit_test(test_request_field_count),
		cmocka_unit_test(test_byte_classes),
		cmocka_unit_test(test_request_framing),
		cmocka_unit_test(test_request_host),
		cmocka_unit_test(test_request_host_forms),
		cmocka_unit_test(test_response_head),
		cmocka_unit_test(test_response_errors),
		cmocka_unit_test(test_response_limits),
		cmocka_unit_test(test_response_framing),
		cmocka_unit_test(test_upgrade_asked),
		cmocka_unit_test(test_hop_by_hop),
		cmocka_unit_test(test_field_names),
		cmocka_unit_test(test_error_status_and_text),
		cmocka_unit_test(test_chunked_valid),
		cmocka_unit_test(test_chunked_steps),
		cmocka_unit_test(test_chunked_large),
		cmocka_unit_test(test_chunked_errors),
		cmocka_unit_test(test_chunked_line_limit),
		cmocka_unit_test(test_chunked_trailer_limit),
		cmocka_unit_test(test_chunked_trailer_steps),
		cmocka_unit_test(test_trailer_fields),
		cmocka_unit_test(test_chunked_has_extension),
		cmocka_unit_test(test_chunked_sticky_error),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
