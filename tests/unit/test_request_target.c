/* Unit tests for request_target.c: absolute-form, authority-form and Host. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "request_target.h"

static int parse_abs(const char *s, struct request_target *t)
{
	return request_target_parse_absolute(s, strlen(s), t);
}

static void test_absolute_forms(void **state)
{
	static const struct {
		const char *target;
		int tls;
		const char *host;
		unsigned port;
		const char *authority;
		const char *path;
	} cases[] = {
		{ "http://example.com/a/b?c=d", 0, "example.com", 80, "example.com", "/a/b?c=d" },
		{ "http://example.com", 0, "example.com", 80, "example.com", "" },
		{ "HTTP://Example.com:8080/", 0, "Example.com", 8080, "Example.com:8080", "/" },
		{ "https://127.0.0.1:8443/x", 1, "127.0.0.1", 8443, "127.0.0.1:8443", "/x" },
		{ "https://h", 1, "h", 443, "h", "" },
		{ "http://[::1]:3000/p", 0, "::1", 3000, "[::1]:3000", "/p" },
		{ "http://[::1]?q", 0, "::1", 80, "[::1]", "?q" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct request_target t;

		assert_int_equal(parse_abs(cases[i].target, &t), 0);
		assert_int_equal(t.tls, cases[i].tls);
		assert_int_equal(t.host_len, strlen(cases[i].host));
		assert_memory_equal(t.host, cases[i].host, t.host_len);
		assert_int_equal(t.port, cases[i].port);
		assert_int_equal(t.authority_len, strlen(cases[i].authority));
		assert_memory_equal(t.authority, cases[i].authority, t.authority_len);
		assert_int_equal(t.path_len, strlen(cases[i].path));
		assert_memory_equal(t.path, cases[i].path, t.path_len);
	}
}

static void test_absolute_rejects(void **state)
{
	static const char *const bad[] = {
		"ftp://example.com/",        /* not http(s) */
		"http://user:pw@example.com/", /* userinfo */
		"http://@example.com/",
		"http:///path",              /* empty host */
		"http://example.com:0/",     /* port 0 */
		"http://example.com:65536/", /* port too large */
		"http://example.com:80x/",
		"http://example.com:/",      /* empty port */
		"http://exa mple.com/",
		"http://example.com/#frag",  /* fragments are never sent */
		"http://[::1/",              /* unclosed bracket */
		"http://[]/",
		"http://[g::1]/",
		"example.com/path",
		"/origin-form",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct request_target t;

		if (parse_abs(bad[i], &t) != -1)
			fail_msg("accepted %s", bad[i]);
	}
}

static void test_authority_form(void **state)
{
	struct request_target t;

	assert_int_equal(request_target_parse_authority("example.com:443", 15, &t), 0);
	assert_int_equal(t.port, 443);
	assert_int_equal(t.host_len, 11);
	assert_int_equal(request_target_parse_authority("[::1]:8443", 10, &t), 0);
	assert_int_equal(t.port, 8443);
	assert_memory_equal(t.host, "::1", 3);
	/* CONNECT needs a port */
	assert_int_equal(request_target_parse_authority("example.com", 11, &t), -1);
	assert_int_equal(request_target_parse_authority("u@example.com:443", 17, &t), -1);
	assert_int_equal(request_target_parse_authority(":443", 4, &t), -1);
}

static void test_host_of(void **state)
{
	const char *host;
	size_t len;

	assert_int_equal(request_target_host_of("api.example.com:8080", 20, &host, &len), 0);
	assert_int_equal(len, 15);
	assert_memory_equal(host, "api.example.com", 15);
	assert_int_equal(request_target_host_of("[::1]", 5, &host, &len), 0);
	assert_int_equal(len, 3);
	assert_int_equal(request_target_host_of("a b", 3, &host, &len), -1);
	assert_int_equal(request_target_host_of("", 0, &host, &len), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_absolute_forms),
		cmocka_unit_test(test_absolute_rejects),
		cmocka_unit_test(test_authority_form),
		cmocka_unit_test(test_host_of),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
