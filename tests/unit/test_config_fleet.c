/* Unit tests for config_fleet.c: the Redis addresses fleet.redis takes and
 * refuses, by table (the bad fixtures hold one fleet: each). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_fleet.h"

struct address_case {
	const char *text;
	const char *host; /* NULL: refused, or a socket */
	unsigned port;
	const char *socket; /* for unix: */
	const char *why;    /* for refusals */
};

static void test_addresses(void **state)
{
	static const struct address_case cases[] = {
		{ "127.0.0.1:6379", "127.0.0.1", 6379, NULL, NULL },
		{ "[::1]:6380", "::1", 6380, NULL, NULL },
		{ "redis:6379", "redis", 6379, NULL, NULL },
		{ "redis-1.cache.internal:7000", "redis-1.cache.internal", 7000, NULL, NULL },
		{ "unix:/run/redis/redis.sock", NULL, 0, "/run/redis/redis.sock", NULL },
		{ "unix:redis.sock", NULL, 0, NULL,
		  "a unix socket path must be absolute, like unix:/run/redis/redis.sock" },
		{ "127.0.0.1", NULL, 0, NULL, "expected host:port or unix:/path/to/socket" },
		{ "::1:6379", NULL, 0, NULL, "an IPv6 address goes in brackets, like [::1]:6379" },
		{ "[::1]6379", NULL, 0, NULL, "expected [v6 address]:port" },
		{ "[::g]:6379", NULL, 0, NULL, "invalid IPv6 address" },
		{ ":6379", NULL, 0, NULL, "the host is missing" },
		{ "-redis:6379", NULL, 0, NULL,
		  "expected a host name or an address before the port" },
		{ "red is:6379", NULL, 0, NULL,
		  "expected a host name or an address before the port" },
		{ "a..b:6379", NULL, 0, NULL,
		  "expected a host name or an address before the port" },
		{ "redis:0", NULL, 0, NULL, "the port must be a number from 1 to 65535" },
		{ "redis:65536", NULL, 0, NULL, "the port must be a number from 1 to 65535" },
		{ "redis:", NULL, 0, NULL, "the port must be a number from 1 to 65535" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct address_case *c = &cases[i];
		struct fleet_config fleet = { 0 };
		const char *why = NULL;
		int r = config_fleet_redis_address(c->text, &fleet, &why);

		if (c->why != NULL) {
			if (r != -1 || why == NULL || strcmp(why, c->why) != 0)
				fail_msg("%s: expected \"%s\", got %d \"%s\"", c->text, c->why, r,
					 why != NULL ? why : "");
			continue;
		}
		if (r != 0)
			fail_msg("%s: refused: %s", c->text, why);
		if (c->socket != NULL) {
			assert_non_null(fleet.redis_socket);
			assert_string_equal(fleet.redis_socket, c->socket);
			assert_null(fleet.redis_host);
		} else {
			assert_non_null(fleet.redis_host);
			assert_string_equal(fleet.redis_host, c->host);
			assert_int_equal(fleet.redis_port, c->port);
			assert_null(fleet.redis_socket);
		}
		config_fleet_free(&fleet);
	}
}

/* A loaded fleet: and its default sync_interval. */
static void test_loaded(void **state)
{
	static const char text[] = "fleet:\n  redis: unix:/run/redis.sock\n  name: checkout\n";
	struct config *config = config_load_text(text, sizeof(text) - 1, "t.yaml", stderr);

	assert_non_null(config);
	assert_string_equal(config->fleet.redis, "unix:/run/redis.sock");
	assert_string_equal(config->fleet.redis_socket, "/run/redis.sock");
	assert_string_equal(config->fleet.name, "checkout");
	assert_int_equal(config->fleet.sync_interval_ms, CONFIG_FLEET_SYNC_DEFAULT_MS);
	config_release(config);
}

/* No fleet: section, no fleet. */
static void test_absent(void **state)
{
	static const char text[] = "log: { level: warn }\n";
	struct config *config = config_load_text(text, sizeof(text) - 1, "t.yaml", stderr);

	assert_non_null(config);
	assert_null(config->fleet.redis);
	assert_null(config->fleet.name);
	config_release(config);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_loaded),
		cmocka_unit_test(test_absent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
