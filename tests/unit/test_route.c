/*
 * Route matching: host patterns by table, then route_match over a config:
 * first match wins, absent match fields match anything, no match is the
 * default route.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "route.h"

static const char test_routes[] = "routes:\n"
				  "  - name: api-writes\n"
				  "    match:\n"
				  "      host: api.example.com\n"
				  "      path_prefix: /v1/\n"
				  "      methods: [POST, PATCH]\n"
				  "  - name: api\n"
				  "    match: { host: API.Example.com }\n"
				  "  - name: subdomains\n"
				  "    match: { host: \"*.example.com\" }\n"
				  "  - name: static\n"
				  "    match: { path_prefix: /static/ }\n"
				  "  - name: deletes\n"
				  "    match: { methods: [DELETE] }\n"
				  "  - name: v6\n"
				  "    match: { host: \"[2001:db8::1]\" }\n";

static struct config *test_config(const char *text)
{
	struct config *config = config_load_text(text, strlen(text), "test.yaml", stderr);

	assert_non_null(config);
	return config;
}

/* The route's name for a request, with C strings for brevity. */
static const char *test_match(const struct config *config, const char *host, const char *path,
			      const char *method)
{
	const struct route *route = route_match(config, host, host != NULL ? strlen(host) : 0, path,
						path != NULL ? strlen(path) : 0, method,
						method != NULL ? strlen(method) : 0);

	assert_non_null(route);
	return route->name;
}

static void test_host_patterns(void **state)
{
	static const struct {
		const char *pattern;
		const char *host;
		bool matches;
	} cases[] = {
		{ "*", "anything.example", true },
		{ "*", "", true },
		{ "example.com", "example.com", true },
		{ "example.com", "EXAMPLE.com", true },
		{ "example.com", "example.com.", true },
		{ "example.com", "example.org", false },
		{ "example.com", "www.example.com", false },
		{ "example.com", "example.co", false },
		{ "example.com", "example.comm", false },
		{ "example.com", "", false },
		{ "*.example.com", "sub.example.com", true },
		{ "*.example.com", "a.b.example.com", true },
		{ "*.example.com", "SUB.Example.COM", true },
		{ "*.example.com", "sub.example.com.", true },
		{ "*.example.com", "example.com", false },
		{ "*.example.com", "xexample.com", false },
		{ "*.example.com", ".example.com", false },
		{ "*.example.com", "example.com.evil", false },
		{ "*.example.com", "sub.example.org", false },
		{ "::1", "[::1]", true },
		{ "::1", "::1", true },
		{ "2001:db8::1", "[2001:DB8::1]", true },
		{ "127.0.0.1", "127.0.0.1", true },
		{ "127.0.0.1", "127.0.0.10", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool got = route_host_pattern_matches(cases[i].pattern, cases[i].host,
						      strlen(cases[i].host));

		if (got != cases[i].matches)
			fail_msg("pattern \"%s\" host \"%s\": got %d", cases[i].pattern,
				 cases[i].host, got);
	}
	assert_true(route_host_pattern_matches("*", NULL, 0));
	assert_false(route_host_pattern_matches("example.com", NULL, 0));
}

/* Only host_len bytes count: the caller passes the host without its port. */
static void test_host_length_is_respected(void **state)
{
	const char *host = "example.com:8443";

	assert_true(route_host_pattern_matches("example.com", host, strlen("example.com")));
	assert_false(route_host_pattern_matches("example.com", host, strlen(host)));
	assert_true(route_host_pattern_matches("*.example.com", "a.example.comX", 13));
}

static void test_first_match_wins(void **state)
{
	struct config *config = test_config(test_routes);

	/* api-writes needs host, prefix and method all at once. */
	assert_string_equal(test_match(config, "api.example.com", "/v1/objects", "POST"),
			    "api-writes");
	assert_string_equal(test_match(config, "API.EXAMPLE.COM", "/v1/", "PATCH"), "api-writes");
	assert_string_equal(test_match(config, "api.example.com", "/v1/objects", "GET"), "api");
	assert_string_equal(test_match(config, "api.example.com", "/v2/objects", "POST"), "api");
	assert_string_equal(test_match(config, "api.example.com", "/v1", "POST"), "api");
	/* api also matches *.example.com, but comes first. */
	assert_string_equal(test_match(config, "api.example.com", "/static/x", "DELETE"), "api");
	assert_string_equal(test_match(config, "www.example.com", "/static/x", "GET"),
			    "subdomains");
	assert_string_equal(test_match(config, "other.org", "/static/x", "DELETE"), "static");
	assert_string_equal(test_match(config, "other.org", "/api", "DELETE"), "deletes");
	config_release(config);
}

static void test_path_prefix(void **state)
{
	struct config *config = test_config(test_routes);

	assert_string_equal(test_match(config, "other.org", "/static/", "GET"), "static");
	assert_string_equal(test_match(config, "other.org", "/static/a/b?c=d", "GET"), "static");
	assert_string_equal(test_match(config, "other.org", "/static", "GET"), "default");
	assert_string_equal(test_match(config, "other.org", "/STATIC/x", "GET"), "default");
	assert_string_equal(test_match(config, "other.org", "/x/static/", "GET"), "default");
	assert_string_equal(test_match(config, "other.org", NULL, "GET"), "default");
	config_release(config);
}

/* Methods are case-sensitive tokens. */
static void test_methods(void **state)
{
	struct config *config = test_config(test_routes);

	assert_string_equal(test_match(config, "other.org", "/", "DELETE"), "deletes");
	assert_string_equal(test_match(config, "other.org", "/", "delete"), "default");
	assert_string_equal(test_match(config, "other.org", "/", "DELETES"), "default");
	assert_string_equal(test_match(config, "other.org", "/", "DELET"), "default");
	assert_string_equal(test_match(config, "other.org", "/", NULL), "default");
	config_release(config);
}

static void test_default_fallback(void **state)
{
	struct config *config = test_config(test_routes);
	const struct route *route = route_match(config, "example.com", 11, "/", 1, "GET", 3);

	/* example.com itself is not under *.example.com. */
	assert_ptr_equal(route, &config->default_route);
	assert_string_equal(route->name, "default");
	assert_string_equal(test_match(config, "xexample.com", "/", "GET"), "default");
	assert_string_equal(test_match(config, NULL, "/", "GET"), "default");
	assert_string_equal(test_match(config, "", "/", "GET"), "default");
	config_release(config);

	config = test_config("log: {level: info}\n");
	assert_ptr_equal(route_match(config, "a", 1, "/", 1, "GET", 3), &config->default_route);
	config_release(config);
}

/* The caller strips the port; brackets and a trailing dot are allowed. */
static void test_host_forms(void **state)
{
	struct config *config = test_config(test_routes);
	const char *with_port = "api.example.com:8443";

	assert_string_equal(
		route_match(config, with_port, strlen("api.example.com"), "/", 1, "GET", 3)->name,
		"api");
	assert_string_equal(test_match(config, "api.example.com.", "/", "GET"), "api");
	assert_string_equal(test_match(config, "[2001:db8::1]", "/", "GET"), "v6");
	assert_string_equal(test_match(config, "2001:db8::1", "/", "GET"), "v6");
	config_release(config);
}

/* A route with no match: at all takes every request. */
static void test_catch_all(void **state)
{
	struct config *config = test_config("routes:\n"
					    "  - name: everything\n"
					    "  - name: never\n"
					    "    match: { host: example.com }\n");

	assert_string_equal(test_match(config, "example.com", "/", "GET"), "everything");
	assert_string_equal(test_match(config, NULL, NULL, NULL), "everything");
	config_release(config);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_patterns),
		cmocka_unit_test(test_host_length_is_respected),
		cmocka_unit_test(test_first_match_wins),
		cmocka_unit_test(test_path_prefix),
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_default_fallback),
		cmocka_unit_test(test_host_forms),
		cmocka_unit_test(test_catch_all),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
