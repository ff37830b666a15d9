/*
 * config_dump: the YAML written for /config loads again with
 * config_load_text, and dumping what it loads gives the same text, for the
 * embedded default, every good fixture and configs that use the corners of
 * each value type. Plus the spelling of durations, sizes and inherited
 * route policies, which users read, health: and retry.hedge, and
 * intercept: showing where the CA's files are but never the key.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "config.h"
#include "config_dump.h"
#include "test_config_fixtures.h"

/* The dump of config as a NUL-terminated string. */
static char *test_dump(const struct config *config)
{
	struct evbuffer *buf = evbuffer_new();
	size_t len;
	char *text;

	config_dump_yaml(config, buf);
	len = evbuffer_get_length(buf);
	text = calloc(1, len + 1);
	assert_non_null(text);
	evbuffer_remove(buf, text, len);
	evbuffer_free(buf);
	return text;
}

/* Load text, failing the test with the errors and the text if it does not. */
static struct config *test_load(const char *text, const char *name)
{
	char *errors = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_text(text, strlen(text), name, out);

	fclose(out);
	if (config == NULL)
		fail_msg("%s does not load:\n%s\n--- text ---\n%s", name, errors, text);
	free(errors);
	return config;
}

/* Dump config, load the dump under the same name, dump again: the two
 * dumps must be the same text. Returns the first dump. */
static char *test_round_trip(const struct config *config)
{
	char *first = test_dump(config);
	struct config *again = test_load(first, config->source);
	char *second = test_dump(again);

	if (strcmp(first, second) != 0)
		fail_msg("dumps differ for %s:\n--- first ---\n%s--- second ---\n%s",
			 config->source, first, second);
	free(second);
	config_release(again);
	return first;
}

static int test_setup(void **state)
{
	test_fixtures_enter();
	return 0;
}

static int test_teardown(void **state)
{
	test_fixtures_leave();
	return 0;
}

static void test_embedded_default(void **state)
{
	struct config *config = test_load(config_embedded_default, "<embedded>");
	char *dump = test_round_trip(config);

	/* the default's values, as a user would write them */
	assert_non_null(strstr(dump, "admin: 127.0.0.1:9901\n"));
	assert_non_null(strstr(dump, "  max_header_bytes: 64KiB\n"));
	assert_non_null(strstr(dump, "  replay_buffer: 8MiB\n"));
	assert_non_null(strstr(dump, "  max_body_bytes: 0\n"));
	assert_non_null(strstr(dump, "  spool_max: 0\n"));
	assert_non_null(strstr(dump, "  spool_dir: /var/tmp\n"));
	assert_non_null(strstr(dump, "  spool_total: 1GiB\n"));
	assert_non_null(strstr(dump, "  drain_timeout: 30s\n"));
	assert_non_null(strstr(dump, "  ca_file: ~\n"));
	assert_non_null(strstr(dump, "on: [5xx, 408, 429, connect-failure, reset, timeout]"));
	assert_non_null(strstr(dump, "routes: []\n"));
	assert_non_null(strstr(dump, "health:\n"
				     "  down_after: 3\n"
				     "  probe_interval: 500ms\n"
				     "  hold: true\n"));
	/* try_timeout as resolved from limits:; no hedging unless asked */
	assert_non_null(strstr(dump, "    try_timeout: 30s\n"));
	assert_null(strstr(dump, "hedge"));
	/* interception is opt-in */
	assert_null(strstr(dump, "intercept"));
	free(dump);
	config_release(config);
}

/* The header names the file the config came from; a path that is not
 * UTF-8 (a directory named in Latin-1), or holds a character libyaml reads
 * as a line break, must not make the dump unloadable, and one that is UTF-8
 * is shown as it is. */
static void test_source_not_utf8(void **state)
{
	static const char text[] = "routes: []\n";
	struct config *latin1 = test_load(text, "/srv/caf\xe9/retryproxy.yaml");
	struct config *utf8 = test_load(text, "/srv/caf\xc3\xa9/retryproxy.yaml");
	struct config *breaks;
	char *dump = test_round_trip(latin1);

	assert_non_null(strstr(dump, "loaded from /srv/caf?/retryproxy.yaml\n"));
	free(dump);
	dump = test_round_trip(utf8);
	assert_non_null(strstr(dump, "loaded from /srv/caf\xc3\xa9/retryproxy.yaml\n"));
	free(dump);
	config_release(latin1);
	config_release(utf8);
	/* NEL, LS and PS end a comment line for libyaml: what follows would be
	 * read as YAML (here, a second routes:); C1 controls it refuses */
	breaks = test_load(text, "/srv/a\xe2\x80\xa8routes: x\xc2\x85"
				 "b\xe2\x80\xa9\xc2\x80/retryproxy.yaml");
	dump = test_round_trip(breaks);
	assert_non_null(strstr(dump, "loaded from /srv/a?routes: x?b??"
				     "/retryproxy.yaml\n"));
	free(dump);
	config_release(breaks);
}

/* A name that a plain scalar would make a boolean, a number or a date for
 * a YAML 1.1 or 1.2 reader (yq, PyYAML) is written in quotes; others stay
 * plain. */
static void test_value_like_names(void **state)
{
	static const char *const quoted[] = { "true", "Off",   "y",	     "1.5e3",
					      "0x1F", "1_000", ".5",	     "-7",
					      ".inf", "0b101", "2001-12-14", "2026-1-2" };
	static const char *const plain[] = { "-dash",	    "127.0.0.1", "v1.2",  "1.2.3",
					     "0xZ",	    "1e",	 "onion", "e5",
					     "v2001-12-14", "200-12-14" };
	char text[2048];
	size_t at = (size_t)snprintf(text, sizeof(text), "routes:\n");
	struct config *config, *again;
	char *dump, line[64];
	size_t i;

	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at,
				       "  - name: '%s'\n    match: { path_prefix: /q%zu }\n",
				       quoted[i], i);
	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at,
				       "  - name: '%s'\n    match: { path_prefix: /p%zu }\n",
				       plain[i], i);
	config = test_load(text, "names.yaml");
	dump = test_round_trip(config);
	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++) {
		snprintf(line, sizeof(line), "name: '%s'\n", quoted[i]);
		if (strstr(dump, line) == NULL)
			fail_msg("%s not quoted:\n%s", quoted[i], dump);
	}
	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		snprintf(line, sizeof(line), "name: %s\n", plain[i]);
		if (strstr(dump, line) == NULL)
			fail_msg("%s not plain:\n%s", plain[i], dump);
	}
	again = test_load(dump, "names.yaml");
	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++)
		assert_string_equal(again->routes[i].name, quoted[i]);
	free(dump);
	config_release(again);
	config_release(config);
}

/* Texts no route name can be but a json_field can: "=" and "<<", whose
 * plain scalars a YAML 1.1 reader (PyYAML) takes for its value and merge
 * tags and then cannot load at all, and a base 60 float (1:30.5, 90.5 to
 * it) are quoted too; others stay plain. */
static void test_value_like_fields(void **state)
{
	static const char *const quoted[] = { "=", "<<", "1:30.5", "1:30.", "-1:30.5" };
	static const char *const plain[] = { "==", "<<<", "a=b", "1:30.5.1", "1:x" };
	char text[2048];
	size_t at = (size_t)snprintf(
		text, sizeof(text), "routes:\n  - name: r\n    idempotent:\n      when_present:\n");
	struct config *config, *again;
	char *dump, line[64];
	size_t i;

	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at, "        - json_field: '%s'\n",
				       quoted[i]);
	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at, "        - json_field: '%s'\n",
				       plain[i]);
	config = test_load(text, "fields.yaml");
	dump = test_round_trip(config);
	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++) {
		snprintf(line, sizeof(line), "json_field: '%s'\n", quoted[i]);
		if (strstr(dump, line) == NULL)
			fail_msg("%s not quoted:\n%s", quoted[i], dump);
	}
	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		snprintf(line, sizeof(line), "json_field: %s\n", plain[i]);
		if (strstr(dump, line) == NULL)
			fail_msg("%s not plain:\n%s", plain[i], dump);
	}
	again = test_load(dump, "fields.yaml");
	for (i = 0; i < sizeof(quoted) / sizeof(quoted[0]); i++)
		assert_string_equal(again->routes[0].idempotent.when_present[i].name, quoted[i]);
	free(dump);
	config_release(again);
	config_release(config);
}

static void test_good_fixtures(void **state)
{
	DIR *dir = opendir("good");
	struct dirent *e;
	size_t count = 0;

	assert_non_null(dir);
	while ((e = readdir(dir)) != NULL) {
		size_t len = strlen(e->d_name);
		char path[512], *errors = NULL, *dump;
		size_t errors_len = 0;
		FILE *out;
		struct config *config;

		if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0)
			continue;
		snprintf(path, sizeof(path), "good/%s", e->d_name);
		out = open_memstream(&errors, &errors_len);
		config = config_load_file(path, out);
		fclose(out);
		if (config == NULL)
			fail_msg("%s does not load:\n%s", path, errors);
		free(errors);
		dump = test_round_trip(config);
		free(dump);
		config_release(config);
		count++;
	}
	closedir(dir);
	assert_true(count >= 3);
}

/* Routes written with few keys come out with the whole policy they
 * inherit, and load to the same policy. */
static void test_routes_resolved(void **state)
{
	static const char text[] =
		"listen:\n"
		"  - address: 127.0.0.1:3128\n"
		"  - address: \"[::1]:8080\"\n"
		"    upstream: https://API.example.com:8443/\n"
		"log: { level: debug, format: json }\n"
		"access:\n"
		"  allow_clients: [10.0.0.0/8, 192.168.1.7, \"::1/128\", \"fe80::/10\"]\n"
		"  allow_hosts: [\"*.example.com\", api.test, \"::1\"]\n"
		"limits:\n"
		"  client_timeout: 1.5s\n"
		"  max_body_bytes: 3000\n"
		"  replay_buffer: 1536KiB\n"
		"  drain_timeout: 0s\n"
		"  spool_max: 3GiB\n"
		"  spool_dir: /tmp\n"
		"  spool_total: 12GiB\n"
		"defaults:\n"
		"  retry:\n"
		"    initial_backoff: 250ms\n"
		"    multiplier: 1.25\n"
		"    jitter: full\n"
		"    retry_after: ignore\n"
		"    budget: { ratio: 0.1, min_per_second: 0.33 }\n"
		"  idempotent:\n"
		"    when_present: [header: If-Match]\n"
		"routes:\n"
		"  - name: writes\n"
		"    match: { host: \"*.Example.com\", methods: [POST, PATCH] }\n"
		"    upstream: http://127.0.0.1:9000\n"
		"    tls: { verify: false }\n"
		"    idempotent:\n"
		"      when_present:\n"
		"        - query: \"null\"\n"
		"        - header: \"~\"\n"
		"        - json_field: \"a b: c\"\n"
		"    retry: { on: [503, reset], max_backoff: 90m }\n"
		"  - name: quiet\n"
		"    match: { path_prefix: \"/v1/iamPolicies:\" }\n"
		"    retry: { on: [], max_attempts: 1 }\n"
		"  - name: anything\n";
	struct config *config = test_load(text, "routes.yaml");
	char *dump = test_round_trip(config);
	struct config *again = test_load(dump, "routes.yaml");
	const struct route *r;

	assert_non_null(strstr(dump, "  client_timeout: 1500ms\n"));
	assert_non_null(strstr(dump, "  replay_buffer: 1536KiB\n"));
	assert_non_null(strstr(dump, "  max_body_bytes: 3000\n"));
	assert_non_null(strstr(dump, "  spool_max: 3GiB\n"));
	assert_non_null(strstr(dump, "  spool_dir: /tmp\n"));
	assert_int_equal(again->limits.spool_max, 3ULL << 30);
	assert_non_null(strstr(dump, "  spool_total: 12GiB\n"));
	assert_int_equal(again->limits.spool_total, 12ULL << 30);
	assert_string_equal(again->limits.spool_dir, "/tmp");
	assert_non_null(strstr(dump, "max_backoff: 90m\n"));
	assert_int_equal(again->route_count, 3);
	/* what "writes" did not name came from defaults: */
	r = &again->routes[0];
	assert_int_equal(r->retry.initial_backoff_ms, 250);
	assert_true(r->retry.jitter_full);
	assert_false(r->retry.honor_retry_after);
	assert_true(r->retry.budget.min_per_second == 0.33);
	assert_int_equal(r->retry.max_backoff_ms, 90 * 60 * 1000);
	assert_int_equal(r->retry.on, RETRY_ON_RESET);
	assert_true(r->tls_overridden);
	assert_false(r->tls.verify);
	assert_string_equal(r->match_host, "*.example.com");
	assert_int_equal(r->idempotent.when_present_count, 3);
	assert_string_equal(r->idempotent.when_present[0].name, "null");
	assert_string_equal(r->idempotent.when_present[1].name, "~");
	assert_string_equal(r->idempotent.when_present[2].name, "a b: c");
	/* "quiet" retries on nothing, and keeps the defaults' when_present */
	r = &again->routes[1];
	assert_int_equal(r->retry.on, 0);
	assert_string_equal(r->match_path_prefix, "/v1/iamPolicies:");
	assert_int_equal(r->idempotent.when_present_count, 1);
	assert_false(r->tls_overridden);
	/* a route that names nothing but itself is the defaults */
	r = &again->routes[2];
	assert_null(r->match_host);
	assert_int_equal(r->retry.multiplier == 1.25, 1);
	assert_string_equal(again->listeners[1].upstream->text, "https://API.example.com:8443/");
	assert_int_equal(again->log_format, LOG_FORMAT_JSON);
	assert_int_equal(again->allow_client_count, 4);
	assert_null(again->admin_address);
	free(dump);
	config_release(again);
	config_release(config);
}

/* health:, retry.try_timeout and retry.hedge come out resolved (a route's
 * try_timeout from limits:, its hedge key by key from defaults:, or turned
 * off) and load to the same values. */
static void test_health_hedge(void **state)
{
	static const char text[] = "routes:\n"
				   "  - name: own\n"
				   "    retry:\n"
				   "      try_timeout: 90s\n"
				   "      hedge: { max: 3 }\n"
				   "  - name: plain\n"
				   "  - name: off\n"
				   "    retry: { hedge: { after: 0s } }\n"
				   "defaults:\n"
				   "  retry:\n"
				   "    hedge: { after: 1.5s }\n"
				   "health: { down_after: 0, probe_interval: 2m, hold: false }\n"
				   "limits: { try_timeout: 45s }\n";
	struct config *config = test_load(text, "hedge.yaml");
	char *dump = test_round_trip(config);
	struct config *again = test_load(dump, "hedge.yaml");
	const struct route *r;

	assert_non_null(strstr(dump, "health:\n"
				     "  down_after: 0\n"
				     "  probe_interval: 2m\n"
				     "  hold: false\n"));
	assert_non_null(strstr(dump, "    try_timeout: 90s\n"
				     "    hedge:\n"
				     "      after: 1500ms\n"
				     "      max: 3\n"));
	assert_non_null(strstr(dump, "    try_timeout: 45s\n"
				     "    hedge:\n"
				     "      after: 1500ms\n"
				     "      max: 1\n"));
	assert_int_equal(again->health.down_after, 0);
	assert_int_equal(again->health.probe_interval_ms, 120000);
	assert_false(again->health.hold);
	assert_int_equal(again->default_route.retry.try_timeout_ms, 45000);
	assert_int_equal(again->default_route.retry.hedge.after_ms, 1500);
	r = &again->routes[0];
	assert_int_equal(r->retry.try_timeout_ms, 90000);
	assert_int_equal(r->retry.hedge.after_ms, 1500);
	assert_int_equal(r->retry.hedge.max, 3);
	r = &again->routes[1];
	assert_int_equal(r->retry.try_timeout_ms, 45000);
	assert_int_equal(r->retry.hedge.after_ms, 1500);
	assert_int_equal(r->retry.hedge.max, 1);
	/* turned off under hedging defaults: said so, or it would come back */
	r = &again->routes[2];
	assert_int_equal(r->retry.hedge.after_ms, 0);
	free(dump);
	config_release(again);
	config_release(config);
}

/* retry.attempt_header, idempotency_key and mode: written for every
 * policy, inherited from defaults: and overridden by a route, and loaded to
 * the same values. */
static void test_retry_controls(void **state)
{
	static const char text[] =
		"routes:\n"
		"  - name: own\n"
		"    retry: { attempt_header: false, idempotency_key: none, mode: enforce }\n"
		"  - name: plain\n"
		"defaults:\n"
		"  retry:\n"
		"    attempt_header: true\n"
		"    idempotency_key: inject\n"
		"    mode: observe\n";
	struct config *config = test_load(text, "controls.yaml");
	char *dump = test_round_trip(config);
	struct config *again = test_load(dump, "controls.yaml");
	const struct route *r;

	assert_non_null(strstr(dump, "    attempt_header: true\n"
				     "    idempotency_key: inject\n"
				     "    mode: observe\n"));
	assert_non_null(strstr(dump, "    attempt_header: false\n"
				     "    idempotency_key: none\n"
				     "    mode: enforce\n"));
	assert_true(again->default_route.retry.attempt_header);
	assert_int_equal(again->default_route.retry.idempotency_key, IDEMPOTENCY_KEY_INJECT);
	assert_int_equal(again->default_route.retry.mode, RETRY_MODE_OBSERVE);
	r = &again->routes[0];
	assert_false(r->retry.attempt_header);
	assert_int_equal(r->retry.idempotency_key, IDEMPOTENCY_KEY_NONE);
	assert_int_equal(r->retry.mode, RETRY_MODE_ENFORCE);
	r = &again->routes[1];
	assert_true(r->retry.attempt_header);
	assert_int_equal(r->retry.idempotency_key, IDEMPOTENCY_KEY_INJECT);
	assert_int_equal(r->retry.mode, RETRY_MODE_OBSERVE);
	free(dump);
	config_release(again);
	config_release(config);
}

/* intercept: its patterns and the CA's paths, never the key itself, and
 * the same CA files when loaded again. */
static void test_intercept(void **state)
{
	char *cert = realpath("ca/ca.pem", NULL), *key = realpath("ca/ca-key.pem", NULL);
	char text[2 * PATH_MAX + 256], expected[2 * PATH_MAX + 256], *dump;
	struct config *config, *again;

	assert_non_null(cert);
	assert_non_null(key);
	snprintf(text, sizeof(text),
		 "intercept:\n"
		 "  hosts: [API.example.com, \"*.googleapis.com\", \"[::1]\"]\n"
		 "  ca_cert: %s\n"
		 "  ca_key: %s\n"
		 "  server_first_after: 500ms\n",
		 cert, key);
	config = test_load(text, "intercept.yaml");
	dump = test_round_trip(config);
	snprintf(expected, sizeof(expected),
		 "intercept:\n"
		 "  hosts: [api.example.com, '*.googleapis.com', '::1']\n"
		 "  ca_cert: %s\n"
		 "  ca_key: %s\n"
		 "  server_first_after: 500ms\n",
		 cert, key);
	if (strstr(dump, expected) == NULL)
		fail_msg("no\n%sin\n%s", expected, dump);
	assert_null(strstr(dump, "PRIVATE KEY"));
	again = test_load(dump, "intercept.yaml");
	assert_int_equal(again->intercept.host_count, 3);
	assert_string_equal(again->intercept.hosts[2], "::1");
	assert_string_equal(again->intercept.ca_cert, cert);
	assert_string_equal(again->intercept.ca_key, key);
	assert_non_null(again->intercept.ca);
	assert_int_equal(again->intercept.server_first_after_ms, 500);
	config_release(again);
	free(dump);
	config_release(config);
	free(cert);
	free(key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embedded_default), cmocka_unit_test(test_source_not_utf8),
		cmocka_unit_test(test_value_like_names), cmocka_unit_test(test_value_like_fields),
		cmocka_unit_test(test_good_fixtures),	 cmocka_unit_test(test_routes_resolved),
		cmocka_unit_test(test_health_hedge),	 cmocka_unit_test(test_retry_controls),
		cmocka_unit_test(test_intercept),
	};

	return cmocka_run_group_tests(tests, test_setup, test_teardown);
}
