/*
 * Route matching: host patterns by table, then route_match over a config:
 * first match wins, absent match fields match anything, no match is the
 * default route. Then route_destination by table: forward, sidecar, a
 * route's upstream over the listener's, CONNECT, access.allow_hosts and the
 * refusals; route_check_tunnel and route_check_tunnel_host for requests
 * inside an intercepted tunnel.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ca.h"
#include "config.h"
#include "config_values.h"
#include "http1.h"
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
		/* an IPv6 literal in another spelling is the same address */
		{ "::1", "[0::1]", true },
		{ "::1", "[0:0:0:0:0:0:0:1]", true },
		{ "2001:db8::1", "2001:0db8:0:0::1", true },
		{ "::1", "[::2]", false },
		{ "::1", "[::ffff:127.0.0.1]", false },
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

/* Prefixes match the path's normal form (RFC 3986 section 6.2.2), the
 * resource the origin sees: escapes and dot segments cannot reach a
 * payment path past its route, or keep a request out of one. */
static void test_path_prefix_normal_form(void **state)
{
	static const char text[] = "routes:\n"
				   "  - name: charges\n"
				   "    match: { path_prefix: /v1/charges }\n"
				   "  - name: cards\n"
				   "    match: { path_prefix: /v1/%63ards/ }\n"
				   "  - name: files\n"
				   "    match: { path_prefix: /files/caf%c3%a9/ }\n"
				   "  - name: static\n"
				   "    match: { path_prefix: /static/ }\n"
				   "  - name: dotfiles\n"
				   "    match: { path_prefix: /. }\n";
	struct config *config = test_config(text);
	size_t long_len = 3000;
	char *long_path = malloc(long_len + 1);

	(void)state;
	assert_string_equal(test_match(config, "a", "/v1/charges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/v1/%63harges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/v1/%63%68arges/1?x=%2e%2e", "POST"),
			    "charges");
	assert_string_equal(test_match(config, "a", "/v1/x/../charges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/./v1/./charges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/v1//charges/1", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "//v1/charges/", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/v1/x/%2E%2e/charges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/static/../v1/charges", "POST"), "charges");
	assert_string_equal(test_match(config, "a", "/static/%2e%2e/v1/charges", "POST"),
			    "charges");
	/* not the same resource: an escaped '%', an escaped '/', a query */
	assert_string_equal(test_match(config, "a", "/v1/%2563harges", "POST"), "default");
	assert_string_equal(test_match(config, "a", "/v1%2Fcharges", "POST"), "default");
	assert_string_equal(test_match(config, "a", "/v1/x?/../charges", "POST"), "default");
	/* a prefix's last segment may be cut short: "/." is the start of
	 * /.env, not a dot segment; /./x and / are not under it */
	assert_string_equal(test_match(config, "a", "/.env", "GET"), "dotfiles");
	assert_string_equal(test_match(config, "a", "/%2egit/config", "GET"), "dotfiles");
	assert_string_equal(test_match(config, "a", "/./index.html", "GET"), "default");
	assert_string_equal(test_match(config, "a", "/", "GET"), "default");
	/* the prefixes are normalised too */
	assert_string_equal(test_match(config, "a", "/v1/cards/1", "GET"), "cards");
	assert_string_equal(test_match(config, "a", "/v1/%63ards/1", "GET"), "cards");
	assert_string_equal(test_match(config, "a", "/files/caf%C3%A9/menu", "GET"), "files");
	assert_string_equal(test_match(config, "a", "/files/caf%c3%a9/menu", "GET"), "files");
	/* a path too long for the stack is normalised all the same */
	assert_non_null(long_path);
	memset(long_path, 'x', long_len);
	memcpy(long_path, "/static/", 8);
	memcpy(long_path + long_len - 18, "/../v1/charges/%2e", 18);
	long_path[long_len] = '\0';
	assert_string_equal(test_match(config, "a", long_path, "POST"), "static");
	memcpy(long_path + long_len - 21, "/../../v1/charges/%2e", 21);
	assert_string_equal(test_match(config, "a", long_path, "POST"), "charges");
	/* either side of the stack buffer's 2,048 bytes */
	for (size_t len = 2047; len <= 2050; len++) {
		memset(long_path, 'x', len);
		memcpy(long_path, "/static/", 8);
		memcpy(long_path + len - 16, "/../v1/charges/.", 16);
		long_path[len] = '\0';
		assert_string_equal(test_match(config, "a", long_path, "POST"), "static");
	}
	free(long_path);
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

static const char test_destinations_config[] =
	"access:\n"
	"  allow_hosts: [allowed.test, \"*.ok.test\", \"[::1]\"]\n"
	"routes:\n"
	"  - name: svc\n"
	"    match: { host: svc.local }\n"
	"    upstream: https://[2001:db8::1]:9443\n"
	"  - name: uploads\n"
	"    match: { path_prefix: /upload/ }\n";

/* Parse a request head (fields without the final empty line) as the client
 * would, then decide where it goes from a listener with upstream listener
 * (NULL: a forward-proxy listener). */
static int test_destination(const struct config *config, const struct upstream_url *listener,
			    const char *request, struct route_destination *dest, char *reason,
			    size_t reason_len)
{
	static struct http1_head head;
	static char buf[512];
	const struct http1_limits limits = { .max_head_bytes = 4096, .max_target_bytes = 1024 };
	struct http1_framing framing;
	enum http1_error error;
	size_t len = (size_t)snprintf(buf, sizeof(buf), "%s\r\n", request);

	assert_int_equal(http1_parse_request_head(buf, len, &limits, &head, &error),
			 HTTP1_PARSE_DONE);
	assert_int_equal(http1_request_framing(&head, &framing, &error), 0);
	reason[0] = '\0';
	return route_destination(config, listener, &head.parsed_target, framing.host_name,
				 framing.host_name_len, head.method, head.method_len, dest, reason,
				 reason_len);
}

#define FORWARD NULL
#define SIDECAR "http://127.0.0.1:9000"
#define NO_UPSTREAM                                                                          \
	"origin-form request on a listener with no upstream (this is a forward proxy: send " \
	"absolute-form)"
/* OPTIONS * is no origin-form request: the answer names what it is */
#define NO_UPSTREAM_ASTERISK                                                                  \
	"OPTIONS * (asterisk-form) on a listener with no upstream (this is a forward proxy: " \
	"send OPTIONS with an absolute-form target, http://host:port, for a server's options)"

/* Where each request goes, or why it is refused. */
static void test_destinations(void **state)
{
	static const struct {
		const char *listener;
		const char *request;
		int status;
		const char *route; /* when status is 0 */
		bool tls;
		const char *host;
		unsigned port;
		const char *authority;
		const char *reason; /* when status is not 0 */
	} cases[] = {
		/* forward: the absolute URI's host, if allow_hosts has it */
		{ FORWARD, "GET http://allowed.test/x HTTP/1.1\r\nHost: allowed.test\r\n", 0,
		  "default", false, "allowed.test", 80, "allowed.test", NULL },
		{ FORWARD, "GET https://a.ok.test:8443 HTTP/1.1\r\nHost: a\r\n", 0, "default", true,
		  "a.ok.test", 8443, "a.ok.test:8443", NULL },
		{ FORWARD, "GET http://ALLOWED.test./ HTTP/1.1\r\nHost: a\r\n", 0, "default", false,
		  "ALLOWED.test.", 80, "ALLOWED.test.", NULL },
		{ FORWARD, "POST http://b.a.ok.test/upload/x HTTP/1.1\r\nHost: a\r\n", 0, "uploads",
		  false, "b.a.ok.test", 80, "b.a.ok.test", NULL },
		{ FORWARD, "GET http://[::1]:8080/ HTTP/1.1\r\nHost: a\r\n", 0, "default", false,
		  "::1", 8080, "[::1]:8080", NULL },
		/* an empty port is the default one, and the upstream's Host says so */
		{ FORWARD, "GET http://allowed.test:/x HTTP/1.1\r\nHost: a:\r\n", 0, "default",
		  false, "allowed.test", 80, "allowed.test", NULL },
		{ FORWARD, "GET https://[::1]: HTTP/1.1\r\nHost: a\r\n", 0, "default", true, "::1",
		  443, "[::1]", NULL },
		{ FORWARD, "GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n", 403, NULL,
		  false, NULL, 0, NULL, "host evil.test not allowed by access.allow_hosts" },
		{ FORWARD, "GET http://ok.test/ HTTP/1.1\r\nHost: a\r\n", 403, NULL, false, NULL, 0,
		  NULL, "host ok.test not allowed by access.allow_hosts" },
		{ FORWARD, "GET http://evilok.test/ HTTP/1.1\r\nHost: a\r\n", 403, NULL, false,
		  NULL, 0, NULL, "host evilok.test not allowed by access.allow_hosts" },
		{ FORWARD, "GET http://allowed.test.evil/ HTTP/1.1\r\nHost: a\r\n", 403, NULL,
		  false, NULL, 0, NULL,
		  "host allowed.test.evil not allowed by access.allow_hosts" },
		/* the URI's host is matched, not Host */
		{ FORWARD, "GET http://allowed.test/ HTTP/1.1\r\nHost: svc.local\r\n", 0, "default",
		  false, "allowed.test", 80, "allowed.test", NULL },
		/* a route's upstream decides: allow_hosts is not asked */
		{ FORWARD, "GET http://svc.local/p HTTP/1.1\r\nHost: a\r\n", 0, "svc", true,
		  "2001:db8::1", 9443, "[2001:db8::1]:9443", NULL },
		/* origin-form on a forward listener: only a route's upstream serves */
		{ FORWARD, "GET /p HTTP/1.1\r\nHost: svc.local\r\n", 0, "svc", true, "2001:db8::1",
		  9443, "[2001:db8::1]:9443", NULL },
		{ FORWARD, "GET /p HTTP/1.1\r\nHost: allowed.test\r\n", 400, NULL, false, NULL, 0,
		  NULL, NO_UPSTREAM },
		{ FORWARD, "OPTIONS * HTTP/1.1\r\nHost: allowed.test\r\n", 400, NULL, false, NULL,
		  0, NULL, NO_UPSTREAM_ASTERISK },
		/* sidecar: the route's upstream, else the listener's; Host only matches */
		{ SIDECAR, "GET /p HTTP/1.1\r\nHost: evil.test\r\n", 0, "default", false,
		  "127.0.0.1", 9000, "127.0.0.1:9000", NULL },
		{ SIDECAR, "GET /p HTTP/1.1\r\nHost: SVC.local:8080\r\n", 0, "svc", true,
		  "2001:db8::1", 9443, "[2001:db8::1]:9443", NULL },
		{ SIDECAR, "PUT /upload/a HTTP/1.1\r\nHost: x\r\n", 0, "uploads", false,
		  "127.0.0.1", 9000, "127.0.0.1:9000", NULL },
		{ SIDECAR, "OPTIONS * HTTP/1.1\r\nHost: x\r\n", 0, "default", false, "127.0.0.1",
		  9000, "127.0.0.1:9000", NULL },
		{ SIDECAR, "GET /p HTTP/1.0\r\n", 0, "default", false, "127.0.0.1", 9000,
		  "127.0.0.1:9000", NULL },
		/* an absolute-form request on a sidecar listener still goes to its URI */
		{ SIDECAR, "GET http://a.ok.test/ HTTP/1.1\r\nHost: a\r\n", 0, "default", false,
		  "a.ok.test", 80, "a.ok.test", NULL },
		{ SIDECAR, "GET http://evil.test/ HTTP/1.1\r\nHost: a\r\n", 403, NULL, false, NULL,
		  0, NULL, "host evil.test not allowed by access.allow_hosts" },
		/* CONNECT: where the client asked, on any listener, even when its route
		 * has an upstream; allow_hosts always applies */
		{ FORWARD, "CONNECT a.ok.test:443 HTTP/1.1\r\nHost: a.ok.test:443\r\n", 0,
		  "default", false, "a.ok.test", 443, "a.ok.test:443", NULL },
		{ SIDECAR, "CONNECT [::1]:8443 HTTP/1.1\r\nHost: x\r\n", 0, "default", false, "::1",
		  8443, "[::1]:8443", NULL },
		{ SIDECAR, "CONNECT svc.local:443 HTTP/1.1\r\nHost: svc.local\r\n", 403, NULL,
		  false, NULL, 0, NULL, "host svc.local not allowed by access.allow_hosts" },
		{ FORWARD, "CONNECT evil.test:443 HTTP/1.1\r\nHost: allowed.test\r\n", 403, NULL,
		  false, NULL, 0, NULL, "host evil.test not allowed by access.allow_hosts" },
	};
	struct config *config = test_config(test_destinations_config);
	struct upstream_url sidecar;

	const char *why = NULL;

	assert_int_equal(config_values_url(SIDECAR, &sidecar, &why), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct route_destination dest;
		char reason[256];
		int status = test_destination(config, cases[i].listener != NULL ? &sidecar : NULL,
					      cases[i].request, &dest, reason, sizeof(reason));

		if (status != cases[i].status)
			fail_msg("case %zu (%s): status %d (%s)", i, cases[i].request, status,
				 reason);
		if (status != 0) {
			assert_string_equal(reason, cases[i].reason);
			continue;
		}
		assert_string_equal(dest.route->name, cases[i].route);
		assert_int_equal(dest.tls, cases[i].tls);
		assert_int_equal(dest.port, cases[i].port);
		if (dest.host_len != strlen(cases[i].host) ||
		    memcmp(dest.host, cases[i].host, dest.host_len) != 0)
			fail_msg("case %zu: host %.*s", i, (int)dest.host_len, dest.host);
		if (dest.authority_len != strlen(cases[i].authority) ||
		    memcmp(dest.authority, cases[i].authority, dest.authority_len) != 0)
			fail_msg("case %zu: authority %.*s", i, (int)dest.authority_len,
				 dest.authority);
	}
	config_values_url_free(&sidecar);
	config_release(config);
}

/* An absolute-form target with no path goes upstream as "/" and its query,
 * and is routed so; a CONNECT, which has no path, matches no path_prefix. */
static void test_destination_implied_slash(void **state)
{
	static const char text[] = "routes:\n"
				   "  - name: query\n"
				   "    match: { path_prefix: \"/?x\" }\n"
				   "  - name: root\n"
				   "    match: { path_prefix: / }\n";
	static const struct {
		const char *request;
		const char *route;
	} cases[] = {
		{ "GET http://a.test HTTP/1.1\r\nHost: a.test\r\n", "root" },
		{ "GET http://a.test?x=1 HTTP/1.1\r\nHost: a.test\r\n", "query" },
		{ "GET http://a.test?y=1 HTTP/1.1\r\nHost: a.test\r\n", "root" },
		{ "GET http://a.test/?x=1 HTTP/1.1\r\nHost: a.test\r\n", "query" },
		{ "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n", "default" },
	};
	struct config *config = test_config(text);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct route_destination dest;
		char reason[256];

		if (test_destination(config, FORWARD, cases[i].request, &dest, reason,
				     sizeof(reason)) != 0)
			fail_msg("case %zu refused: %s", i, reason);
		if (strcmp(dest.route->name, cases[i].route) != 0)
			fail_msg("case %zu (%s): route %s, not %s", i, cases[i].request,
				 dest.route->name, cases[i].route);
	}
	config_release(config);
}

/* The default allow_hosts is "*"; a long refused host is cut in the reason. */
static void test_destination_allow_all_and_long_host(void **state)
{
	struct config *config = test_config("log: {level: info}\n");
	struct route_destination dest;
	char request[400];
	char reason[400];
	char want[300];

	assert_int_equal(test_destination(config, FORWARD,
					  "GET http://any.test/ HTTP/1.1\r\nHost: a\r\n", &dest,
					  reason, sizeof(reason)),
			 0);
	assert_int_equal(test_destination(config, FORWARD,
					  "CONNECT any.test:1 HTTP/1.1\r\nHost: a\r\n", &dest,
					  reason, sizeof(reason)),
			 0);
	config_release(config);

	config = test_config("access: {allow_hosts: [a.test]}\n");
	snprintf(request, sizeof(request), "GET http://%0300d/ HTTP/1.1\r\nHost: a\r\n", 0);
	assert_int_equal(test_destination(config, FORWARD, request, &dest, reason, sizeof(reason)),
			 403);
	snprintf(want, sizeof(want), "host %0200d not allowed by access.allow_hosts", 0);
	assert_string_equal(reason, want);
	/* a short buffer gets a cut reason, never an overflow */
	assert_int_equal(test_destination(config, FORWARD, request, &dest, reason, 10), 403);
	assert_string_equal(reason, "host 0000");
	config_release(config);
}

/* Inside an intercepted tunnel: requests whose Host names the tunnel's host
 * and port pass, however the same host is spelled (case, a trailing dot, an
 * IPv6 literal's forms; no port for 443), and so does no Host at all on
 * HTTP/1.0; another host or port is a 400, and so is a CONNECT. An
 * absolute-form target must name the tunnel's origin (https, host, port),
 * else 421. */
struct tunnel_case {
	const char *tunnel;
	uint16_t port;
	const char *request;
	int status;
	const char *reason; /* when status is not 0 */
};

/* Check the cases against a tunnel that carries TLS, or plain HTTP. */
static void check_tunnel_cases(const struct tunnel_case *cases, size_t count, bool tls)
{
	for (size_t i = 0; i < count; i++) {
		static struct http1_head head;
		static char buf[512];
		const struct http1_limits limits = { .max_head_bytes = 4096,
						     .max_target_bytes = 1024 };
		struct http1_framing framing;
		enum http1_error error;
		char reason[256] = "";
		size_t len = (size_t)snprintf(buf, sizeof(buf), "%s\r\n", cases[i].request);
		int status;

		assert_int_equal(http1_parse_request_head(buf, len, &limits, &head, &error),
				 HTTP1_PARSE_DONE);
		assert_int_equal(http1_request_framing(&head, &framing, &error), 0);
		status = route_check_tunnel(cases[i].tunnel, cases[i].port, tls, &head, &framing,
					    reason, sizeof(reason));
		if (status != cases[i].status)
			fail_msg("case %zu (%s): status %d (%s)", i, cases[i].request, status,
				 reason);
		if (status != 0 && reason[0] == '\0')
			fail_msg("case %zu: no reason", i);
		if (cases[i].reason != NULL)
			assert_string_equal(reason, cases[i].reason);
	}
}

static void test_check_tunnel(void **state)
{
	static const struct tunnel_case cases[] = {
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example\r\n", 0, NULL },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: API.Example:443\r\n", 0, NULL },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example.\r\n", 0, NULL },
		{ "api.example.", 443, "GET /x HTTP/1.1\r\nHost: API.EXAMPLE\r\n", 0, NULL },
		{ "api.example", 8443, "GET /x HTTP/1.1\r\nHost: api.example.:8443\r\n", 0, NULL },
		{ "api.example", 443, "GET /x HTTP/1.0\r\n", 0, NULL },
		{ "::1", 8443, "GET / HTTP/1.1\r\nHost: [::1]:8443\r\n", 0, NULL },
		{ "::1", 8443, "GET / HTTP/1.1\r\nHost: [0:0::1]:8443\r\n", 0, NULL },
		{ "2001:db8::a", 443, "GET / HTTP/1.1\r\nHost: [2001:DB8:0:0::A]\r\n", 0, NULL },
		{ "127.0.0.1", 443, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", 0, NULL },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: other.example\r\n", 400,
		  "Host other.example is not the tunnel's api.example:443" },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example.evil\r\n", 400,
		  "Host api.example.evil is not the tunnel's api.example:443" },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example..\r\n", 400, NULL },
		{ "api.example", 8443, "GET /x HTTP/1.1\r\nHost: API.example:9999\r\n", 400,
		  "Host API.example:9999 is not the tunnel's api.example:8443" },
		{ "api.example", 8443, "GET /x HTTP/1.1\r\nHost: api.example\r\n", 400,
		  "Host api.example is not the tunnel's api.example:8443" },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example:8443\r\n", 400, NULL },
		{ "::1", 8443, "GET / HTTP/1.1\r\nHost: [::2]:8443\r\n", 400,
		  "Host [::2]:8443 is not the tunnel's [::1]:8443" },
		{ "::1", 8443, "GET / HTTP/1.1\r\nHost: localhost:8443\r\n", 400, NULL },
		{ "127.0.0.1", 443, "GET / HTTP/1.1\r\nHost: [::ffff:127.0.0.1]\r\n", 400, NULL },
		{ "127.0.0.1", 443, "GET / HTTP/1.1\r\nHost: 127.0.0.2\r\n", 400, NULL },
		{ "api.example", 443, "OPTIONS * HTTP/1.1\r\nHost: api.example\r\n", 0, NULL },
		{ "api.example", 443, "OPTIONS * HTTP/1.1\r\nHost: other.example\r\n", 400, NULL },
		{ "api.example", 443, "CONNECT api.example:443 HTTP/1.1\r\nHost: api.example\r\n",
		  400, "a CONNECT inside the intercepted tunnel to api.example:443" },
		/* absolute-form names the origin itself: the tunnel's, or 421 */
		{ "api.example", 443, "GET https://api.example/x HTTP/1.1\r\nHost: api.example\r\n",
		  0, NULL },
		{ "api.example", 443,
		  "GET https://API.example.:443 HTTP/1.1\r\nHost: api.example\r\n", 0, NULL },
		{ "api.example", 443,
		  "GET https://api.example:/x HTTP/1.1\r\nHost: api.example:\r\n", 0, NULL },
		{ "api.example", 8443, "GET https://api.example:8443/x HTTP/1.0\r\n", 0, NULL },
		{ "::1", 8443, "GET https://[0::1]:8443/ HTTP/1.1\r\nHost: [::1]:8443\r\n", 0,
		  NULL },
		{ "api.example", 443,
		  "GET https://other.example/x HTTP/1.1\r\nHost: api.example\r\n", 421,
		  "https://other.example is not the origin of the intercepted tunnel to "
		  "https://api.example:443" },
		{ "api.example", 8443,
		  "GET https://api.example/x HTTP/1.1\r\nHost: api.example\r\n", 421, NULL },
		{ "api.example", 443,
		  "GET https://api.example:8443/ HTTP/1.1\r\nHost: api.example\r\n", 421, NULL },
		{ "api.example", 443,
		  "GET http://api.example:443/x HTTP/1.1\r\nHost: api.example\r\n", 421,
		  "http://api.example:443 is not the origin of the intercepted tunnel to "
		  "https://api.example:443" },
		{ "::1", 8443, "GET https://[::2]:8443/ HTTP/1.1\r\nHost: [::1]:8443\r\n", 421,
		  "https://[::2]:8443 is not the origin of the intercepted tunnel to "
		  "https://[::1]:8443" },
		/* the Host still names the tunnel: one that disagrees is a 400 */
		{ "api.example", 443,
		  "GET https://api.example/x HTTP/1.1\r\nHost: other.example\r\n", 400,
		  "Host other.example is not the tunnel's api.example:443" },
	};

	check_tunnel_cases(cases, sizeof(cases) / sizeof(cases[0]), true);
}

/* A tunnel that carries plain HTTP (a client that spoke no TLS after its
 * CONNECT): http, and 80 for a Host without a port. */
static void test_check_tunnel_plain(void **state)
{
	static const struct tunnel_case cases[] = {
		{ "api.example", 80, "GET /x HTTP/1.1\r\nHost: api.example\r\n", 0, NULL },
		{ "api.example", 80, "GET /x HTTP/1.1\r\nHost: api.example:80\r\n", 0, NULL },
		{ "api.example", 8080, "GET /x HTTP/1.1\r\nHost: api.example\r\n", 400,
		  "Host api.example is not the tunnel's api.example:8080" },
		{ "api.example", 80, "GET http://api.example/x HTTP/1.1\r\nHost: api.example\r\n",
		  0, NULL },
		{ "api.example", 80,
		  "GET https://api.example:80/x HTTP/1.1\r\nHost: api.example\r\n", 421,
		  "https://api.example:80 is not the origin of the intercepted tunnel to "
		  "http://api.example:80" },
		{ "api.example", 443, "GET /x HTTP/1.1\r\nHost: api.example\r\n", 400,
		  "Host api.example is not the tunnel's api.example:443" },
	};

	check_tunnel_cases(cases, sizeof(cases) / sizeof(cases[0]), false);
}

/* A tunnel carries requests only while its host is in access.allow_hosts and
 * still intercepted (listed, with the CA loaded): a reload may take either
 * away after the CONNECT. */
static void test_check_tunnel_host(void **state)
{
	static const struct {
		const char *allow;     /* access.allow_hosts */
		const char *intercept; /* intercept.hosts, NULL: no intercept: */
		const char *tunnel;
		int status;
		const char *reason; /* when status is not 0 */
	} cases[] = {
		{ "[\"*\"]", "[api.example]", "api.example", 0, NULL },
		{ "[\"*.example\"]", "[\"*.example\"]", "api.example", 0, NULL },
		{ "[\"*\"]", "[\"::1\"]", "::1", 0, NULL },
		{ "[other.example]", "[api.example]", "api.example", 403,
		  "host api.example no longer allowed by access.allow_hosts (config reloaded)" },
		{ "[\"*\"]", "[other.example]", "api.example", 403,
		  "host api.example no longer intercepted (config reloaded)" },
		{ "[\"*\"]", NULL, "api.example", 403,
		  "host api.example no longer intercepted (config reloaded)" },
	};
	char dir[] = "/tmp/test_route.XXXXXX", path[64], err[256];

	assert_non_null(mkdtemp(dir));
	if (ca_make(dir, err, sizeof(err)) != 0)
		fail_msg("ca_make: %s", err);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[512], reason[256] = "";
		struct config *config;
		int status;

		if (cases[i].intercept != NULL)
			snprintf(text, sizeof(text),
				 "access: {allow_hosts: %s}\n"
				 "intercept: {hosts: %s, ca_cert: %s/ca.pem, ca_key: "
				 "%s/ca-key.pem}\n",
				 cases[i].allow, cases[i].intercept, dir, dir);
		else
			snprintf(text, sizeof(text), "access: {allow_hosts: %s}\n", cases[i].allow);
		config = test_config(text);
		status = route_check_tunnel_host(config, cases[i].tunnel, reason, sizeof(reason));
		if (status != cases[i].status)
			fail_msg("case %zu: status %d (%s)", i, status, reason);
		if (status != 0)
			assert_string_equal(reason, cases[i].reason);
		config_release(config);
	}
	snprintf(path, sizeof(path), "%s/ca.pem", dir);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/ca-key.pem", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_patterns),
		cmocka_unit_test(test_host_length_is_respected),
		cmocka_unit_test(test_first_match_wins),
		cmocka_unit_test(test_path_prefix),
		cmocka_unit_test(test_path_prefix_normal_form),
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_default_fallback),
		cmocka_unit_test(test_host_forms),
		cmocka_unit_test(test_catch_all),
		cmocka_unit_test(test_destinations),
		cmocka_unit_test(test_destination_implied_slash),
		cmocka_unit_test(test_destination_allow_all_and_long_host),
		cmocka_unit_test(test_check_tunnel),
		cmocka_unit_test(test_check_tunnel_plain),
		cmocka_unit_test(test_check_tunnel_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
