/*
 * Unit tests for uri_path.c: the normal form routes match a path by, by
 * table (RFC 3986 section 6.2.2: unreserved escapes decoded, other escapes
 * in upper case, empty segments merged, dot segments removed as section
 * 5.2.4 does, the query untouched), the check that says a path is normal
 * already, and route prefixes.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>

#include <cmocka.h>

#include "uri_path.h"

struct test_uri_path_case {
	const char *path;
	const char *normal;
};

static const struct test_uri_path_case test_uri_path_cases[] = {
	/* normal already */
	{ "/", "/" },
	{ "/v1/charges", "/v1/charges" },
	{ "/index.html", "/index.html" },
	{ "/a/.b/c.", "/a/.b/c." },
	{ "/a/.../b", "/a/.../b" },
	{ "/a/..b/b..", "/a/..b/b.." },
	{ "", "" },
	{ "*", "*" },
	{ "?x=/../%61", "?x=/../%61" },
	{ "/a?b=%2e%2e&c=/./", "/a?b=%2e%2e&c=/./" },
	/* unreserved escapes decoded, in either case */
	{ "/v1/%63harges", "/v1/charges" },
	{ "/v1/%43harges", "/v1/Charges" },
	{ "/%7e%7E%2d%5f%2E%30", "/~~-_.0" },
	/* other escapes kept, their hex digits in upper case; an escaped '/'
	 * is data, not a segment's end */
	{ "/a%2fb", "/a%2Fb" },
	{ "/a%2F..%2Fb", "/a%2F..%2Fb" },
	{ "/v1/x;y/../charges", "/v1/charges" },
	{ "/v1/x/..;/charges", "/v1/x/..;/charges" },
	{ "/caf%c3%a9/", "/caf%C3%A9/" },
	{ "/%20%25%3f", "/%20%25%3F" },
	/* not an escape: left alone */
	{ "/a%", "/a%" },
	{ "/a%6", "/a%6" },
	{ "/a%zz%6g", "/a%zz%6g" },
	{ "/%%63", "/%c" },
	{ "/a%6?1", "/a%6?1" },
	/* dot segments (RFC 3986 section 5.2.4 and its examples) */
	{ "/a/b/c/./../../g", "/a/g" },
	{ "/mid/content=5/../6", "/mid/6" },
	{ "/v1/x/../charges", "/v1/charges" },
	{ "/./v1/charges", "/v1/charges" },
	{ "/../v1/charges", "/v1/charges" },
	{ "/../../..", "/" },
	{ "/a/.", "/a/" },
	{ "/a/..", "/" },
	{ "/a/b/..", "/a/" },
	{ "/.", "/" },
	{ "/..", "/" },
	/* empty segments merged (as nginx does) after the dot segments are
	 * removed; where a ".." would remove an empty one, the path is
	 * ambiguous (test_trouble) */
	{ "//a//b/", "/a/b/" },
	{ "/v1//charges", "/v1/charges" },
	{ "/a//", "/a/" },
	{ "//", "/" },
	{ "/a//../b", "/a/b" },
	{ "/a/..//b", "/b" },
	{ "/a/.//", "/a/" },
	{ "/..//", "/" },
	{ "/a?//b", "/a?//b" },
	{ "/a/?x=//y/../z", "/a/?x=//y/../z" },
	{ "/a/./", "/a/" },
	/* escaped dots are dots */
	{ "/v1/x/%2e%2E/charges", "/v1/charges" },
	{ "/v1/%2e/charges", "/v1/charges" },
	{ "/v1/x/.%2e/charges", "/v1/charges" },
	/* the query is not the path */
	{ "/a/../b?c=/../%63", "/b?c=/../%63" },
	{ "/v1/%63harges?%63=1", "/v1/charges?%63=1" },
	{ "/a/..?x", "/?x" },
	{ "/a/.?", "/a/?" },
};

/* Each path comes out as the table says, and the check agrees. */
static void test_normalize(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(test_uri_path_cases) / sizeof(test_uri_path_cases[0]); i++) {
		const struct test_uri_path_case *c = &test_uri_path_cases[i];
		size_t len = strlen(c->path);
		char *out = malloc(len + 1);
		size_t out_len = uri_path_normalize(c->path, len, out, NULL);
		bool same = strcmp(c->path, c->normal) == 0;
		bool normal = uri_path_is_normal(c->path, len);

		assert_non_null(out);
		out[out_len] = '\0';
		if (strcmp(out, c->normal) != 0)
			fail_msg("%s: got %s, want %s", c->path, out, c->normal);
		/* the check may send a path with a '%' to be normalised for
		 * nothing, never let one through that changes; without '%' it
		 * is exact */
		if ((normal && !same) || (same && strchr(c->path, '%') == NULL && !normal))
			fail_msg("%s: uri_path_is_normal says %d", c->path, normal);
		free(out);
	}
}

/* A path normal already comes out as it went in, and a normal form is its
 * own normal form. */
static void test_idempotent(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(test_uri_path_cases) / sizeof(test_uri_path_cases[0]); i++) {
		const char *normal = test_uri_path_cases[i].normal;
		size_t len = strlen(normal);
		char out[64];

		assert_true(len < sizeof(out));
		assert_int_equal(uri_path_normalize(normal, len, out, NULL), len);
		assert_memory_equal(out, normal, len);
	}
}

/* What makes a normal form unfit to route on: a '%' that is no escape,
 * and a ".." that removes an empty segment (nginx merges slashes first and
 * reads /v1/charges//../x as /v1/x; RFC 3986, Node and Envoy as
 * /v1/charges/x). */
static void test_trouble(void **state)
{
	static const struct {
		const char *path;
		enum uri_path_trouble trouble;
	} cases[] = {
		{ "/v1/charges/x", URI_PATH_FINE },
		{ "/v1/%63harges?q=100%", URI_PATH_FINE },
		{ "/a/..//b", URI_PATH_FINE },
		{ "/..//x", URI_PATH_FINE },
		{ "/a//b/", URI_PATH_FINE },
		{ "/a?x=//..", URI_PATH_FINE },
		{ "/a%", URI_PATH_BAD_ESCAPE },
		{ "/a%6", URI_PATH_BAD_ESCAPE },
		{ "/%%36%31", URI_PATH_BAD_ESCAPE },
		{ "/a%zz?b", URI_PATH_BAD_ESCAPE },
		{ "/v1/charges//../x", URI_PATH_AMBIGUOUS },
		{ "/a//..", URI_PATH_AMBIGUOUS },
		{ "/a/b/..//..", URI_PATH_AMBIGUOUS },
		{ "//..", URI_PATH_AMBIGUOUS },
		{ "/a//%2e%2e/b", URI_PATH_AMBIGUOUS },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].path);
		char out[64];
		enum uri_path_trouble trouble = URI_PATH_FINE;

		uri_path_normalize(cases[i].path, len, out, &trouble);
		if (trouble != cases[i].trouble)
			fail_msg("%s: trouble %d, want %d", cases[i].path, (int)trouble,
				 (int)cases[i].trouble);
		/* a path the check lets through has no trouble */
		if (uri_path_is_normal(cases[i].path, len) && trouble != URI_PATH_FINE)
			fail_msg("%s: taken as normal", cases[i].path);
	}
}

/* A route prefix: normalised as a path, but its last segment may be cut
 * short; refused when it cannot be meant as written. */
static void test_prefix(void **state)
{
	static const struct {
		const char *prefix;
		const char *normal; /* NULL: refused */
	} cases[] = {
		{ "/v1/charges/", "/v1/charges/" },
		{ "/v1/%63harges", "/v1/charges" },
		{ "/files/caf%c3%a9/", "/files/caf%C3%A9/" },
		{ "/v1//charges", "/v1/charges" },
		/* the start of /.env, /.git/, /..data */
		{ "/.", "/." },
		{ "/..", "/.." },
		{ "/files/.", "/files/." },
		{ "/files/%2e", "/files/." },
		{ "/files//.", "/files/." },
		/* a dot segment it goes on past */
		{ "/v1/charges/../", NULL },
		{ "/v1/./charges", NULL },
		{ "/../x", NULL },
		{ "/v1/%2e%2E/x", NULL },
		{ "/./", NULL },
		/* a '%' that is no escape */
		{ "/x/%%36%31/", NULL },
		{ "/a%6", NULL },
		{ "/a%", NULL },
		{ "/a%zz", NULL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].prefix);
		char out[64];
		ssize_t n = uri_path_normalize_prefix(cases[i].prefix, len, out);

		assert_true(len < sizeof(out));
		if (cases[i].normal == NULL) {
			if (n != -1)
				fail_msg("%s: taken as %.*s, want refused", cases[i].prefix,
					 (int)(n > 0 ? n : 0), out);
			continue;
		}
		if (n < 0 || (size_t)n != strlen(cases[i].normal) ||
		    memcmp(out, cases[i].normal, (size_t)n) != 0)
			fail_msg("%s: got %.*s (%zd), want %s", cases[i].prefix,
				 (int)(n > 0 ? n : 0), out, n, cases[i].normal);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_idempotent),
		cmocka_unit_test(test_prefix),
		cmocka_unit_test(test_trouble),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
