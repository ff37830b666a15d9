/* Unit tests for config_fleet.c: the Redis addresses fleet.redis takes and
 * refuses, by table (the bad fixtures hold one fleet: each); the password
 * read from password_file, and the secrets refused with file:line:column. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_fleet.h"
#include "config_values.h"

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
		{ "redis.cache.internal.:7000", "redis.cache.internal.", 7000, NULL, NULL },
		{ "redis..:7000", NULL, 0, NULL,
		  "expected a host name or an address before the port" },
		{ "unix:/run/redis/redis.sock", NULL, 0, "/run/redis/redis.sock", NULL },
		{ "unix:redis.sock", NULL, 0, NULL,
		  "a unix socket path must be absolute, like unix:/run/redis/redis.sock" },
		/* sun_path holds 107 bytes and a NUL: a longer path would be cut */
		{ "unix:/run/redis/"
		  "ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss"
		  "ssssssssssssssss",
		  NULL, 0,
		  "/run/redis/"
		  "ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss"
		  "ssssssssssssssss",
		  NULL },
		{ "unix:/run/redis/"
		  "ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss"
		  "sssssssssssssssss",
		  NULL, 0, NULL, "a unix socket path may have at most 107 bytes" },
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
		/* a last label of digits: an exact IPv4 address or nothing */
		{ "127.1:6379", NULL, 0, NULL, CONFIG_VALUES_BAD_IPV4 },
		{ "10.0.0.256:6379", NULL, 0, NULL, CONFIG_VALUES_BAD_IPV4 },
		{ "127.0.0.1.:6379", NULL, 0, NULL, CONFIG_VALUES_BAD_IPV4 },
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

/* A file in a fresh directory holding len bytes of text; its path goes in
 * path. */
static void write_secret(char *path, size_t size, const char *text, size_t len)
{
	char dir[] = "/tmp/retryproxy-fleet-XXXXXX";
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, size, "%s/password", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
}

static void remove_secret(const char *path)
{
	char dir[256];

	unlink(path);
	snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
	rmdir(dir);
}

/* Load text; the config (NULL on errors) and what was printed. */
static struct config *load(const char *text, char **errors)
{
	size_t len;
	FILE *out = open_memstream(errors, &len);
	struct config *config = config_load_text(text, strlen(text), "t.yaml", out);

	fclose(out);
	return config;
}

/* username and password_file: the file's first line is the password,
 * without its line ending; /config-style dumps never see it. */
static void test_password_file(void **state)
{
	static const char *const contents[] = { "s3cret pass\n", "s3cret pass\r\n", "s3cret pass",
						"s3cret pass\nsecond line\n" };
	char path[256], text[512];

	(void)state;
	for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		struct config *config;
		char *errors = NULL;

		write_secret(path, sizeof(path), contents[i], strlen(contents[i]));
		snprintf(text, sizeof(text),
			 "fleet:\n  redis: 127.0.0.1:6379\n  name: checkout\n"
			 "  username: retryproxy\n  password_file: %s\n",
			 path);
		config = load(text, &errors);
		assert_non_null(config);
		assert_string_equal(errors, "");
		assert_string_equal(config->fleet.username, "retryproxy");
		assert_string_equal(config->fleet.password_file, path);
		assert_string_equal(config->fleet.password, "s3cret pass");
		config_release(config);
		free(errors);
		remove_secret(path);
	}
}

/* A secret that cannot be used fails the load where password_file is
 * written; so does a username with nothing to log in with. */
static void test_password_file_refused(void **state)
{
	static const struct {
		const char *content; /* NULL: no such file */
		size_t len;
		const char *expected;
	} cases[] = {
		{ "", 0, "t.yaml:4:18: fleet.password_file: " },
		{ "\nsecret on the second line\n", 27, "must hold a password of 1 to 4096 bytes" },
		{ "secret\0on one line\n", 19, "must hold a password of 1 to 4096 bytes" },
		{ NULL, 0, "t.yaml:4:18: fleet.password_file: cannot read" },
	};
	char path[256], text[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *errors = NULL;

		write_secret(path, sizeof(path), cases[i].content != NULL ? cases[i].content : "x",
			     cases[i].content != NULL ? cases[i].len : 1);
		if (cases[i].content == NULL)
			unlink(path);
		snprintf(text, sizeof(text),
			 "fleet:\n  redis: 127.0.0.1:6379\n  name: checkout\n"
			 "  password_file: %s\n",
			 path);
		assert_null(load(text, &errors));
		if (strstr(errors, cases[i].expected) == NULL)
			fail_msg("case %zu: expected %s in: %s", i, cases[i].expected, errors);
		assert_null(strstr(errors, "secret on"));
		free(errors);
		remove_secret(path);
	}
	{
		/* one byte over the longest password */
		static char longest[CONFIG_FLEET_PASSWORD_MAX + 2];
		char *errors = NULL;

		memset(longest, 'a', CONFIG_FLEET_PASSWORD_MAX + 1);
		write_secret(path, sizeof(path), longest, CONFIG_FLEET_PASSWORD_MAX + 1);
		snprintf(text, sizeof(text),
			 "fleet:\n  redis: 127.0.0.1:6379\n  name: checkout\n"
			 "  password_file: %s\n",
			 path);
		assert_null(load(text, &errors));
		if (strstr(errors, "must hold a password of 1 to 4096 bytes") == NULL)
			fail_msg("expected the length error in: %s", errors);
		free(errors);
		remove_secret(path);
	}
	{
		/* a password_file refused says why, and a username beside it
		 * adds no second error */
		char dir[] = "/tmp/retryproxy-fleet-XXXXXX";
		char *errors = NULL;

		assert_non_null(mkdtemp(dir));
		snprintf(text, sizeof(text),
			 "fleet:\n  redis: 127.0.0.1:6379\n  name: checkout\n"
			 "  username: retryproxy\n  password_file: %s\n",
			 dir);
		assert_null(load(text, &errors));
		if (strstr(errors, "t.yaml:5:18: fleet.password_file: ") == NULL ||
		    strstr(errors, "is not a regular file") == NULL)
			fail_msg("expected the file error in: %s", errors);
		if (strstr(errors, "username needs password_file") != NULL)
			fail_msg("a second error for the username in: %s", errors);
		free(errors);
		rmdir(dir);
	}
	{
		char *errors = NULL;

		assert_null(load("fleet:\n  redis: 127.0.0.1:6379\n  name: checkout\n"
				 "  username: retryproxy\n",
				 &errors));
		if (strstr(errors, "t.yaml:2:3: fleet: username needs password_file") == NULL)
			fail_msg("expected the username error in: %s", errors);
		free(errors);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_loaded),
		cmocka_unit_test(test_absent),
		cmocka_unit_test(test_password_file),
		cmocka_unit_test(test_password_file_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
