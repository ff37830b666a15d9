/*
 * explain.c in process: the embedded default config's answers (the
 * integration test cannot reach it on a machine with
 * /etc/retryproxy/retryproxy.yaml), the listener chosen for a URL, and that
 * a bad description writes only to the error stream.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "explain.h"

/* The result of one explain_run(): its return and both streams. */
struct test_run {
	int rc;
	char *out;
	char *err;
};

static struct test_run test_explain(const struct config *config, const char *method,
				    const char *url, const char *const *headers, size_t count)
{
	struct explain_request request = { method, url, headers, count, NULL };
	struct test_run run;
	size_t out_len, err_len;
	FILE *out = open_memstream(&run.out, &out_len);
	FILE *err = open_memstream(&run.err, &err_len);

	assert_non_null(out);
	assert_non_null(err);
	run.rc = explain_run(config, &request, out, err);
	fclose(out);
	fclose(err);
	return run;
}

static void test_run_free(struct test_run *run)
{
	free(run->out);
	free(run->err);
}

static struct config *test_config(const char *text)
{
	struct config *config = config_load_text(text, strlen(text), "test.yaml", stderr);

	assert_non_null(config);
	return config;
}

static void test_embedded_default(void **state)
{
	struct config *config = config_load(NULL, CONFIG_SOURCE_ANY, NULL, NULL);
	struct test_run run;

	assert_non_null(config);
	run = test_explain(config, "GET", "http://example.test/a?b=1", NULL, 0);
	assert_int_equal(run.rc, 0);
	assert_string_equal(run.out, "route: default\n"
				     "upstream: http://example.test:80\n"
				     "idempotent: yes (method)\n"
				     "retry_on: [5xx, 408, 429, connect-failure, reset, timeout]\n"
				     "max_attempts: 5\n"
				     "deadline: 2m\n"
				     "waits: 1s-2s 2s-3s 4s-5s 8s-9s\n");
	assert_non_null(
		strstr(run.err, "config <embedded>; forward proxy listener 127.0.0.1:3128"));
	test_run_free(&run);
	run = test_explain(config, "POST", "http://example.test/a", NULL, 0);
	assert_int_equal(run.rc, 0);
	assert_non_null(strstr(run.out, "idempotent: no\n"));
	assert_non_null(strstr(run.out, "waits: none\n"));
	test_run_free(&run);
	config_release(config);
}

static void test_listener_choice(void **state)
{
	struct config *config = test_config("listen:\n"
					    "  - address: 127.0.0.1:18080\n"
					    "    upstream: https://api.example.com\n"
					    "  - address: 127.0.0.1:13128\n"
					    "  - address: 127.0.0.1:18081\n"
					    "    upstream: http://127.0.0.1:19000\n"
					    "  - address: 0.0.0.0:18082\n"
					    "    upstream: http://127.0.0.1:19001\n"
					    "  - address: \"[::]:18083\"\n"
					    "    upstream: http://127.0.0.1:19002\n");
	static const struct {
		const char *url;
		const char *seen;     /* in the note on the error stream */
		const char *upstream; /* the upstream: line */
	} cases[] = {
		{ "https://api.example.com/x", "sidecar listener 127.0.0.1:18080 gets GET /x",
		  "upstream: https://api.example.com:443\n" },
		{ "https://API.example.com:443/x?q",
		  "sidecar listener 127.0.0.1:18080 gets GET /x?q",
		  "upstream: https://api.example.com:443\n" },
		{ "http://127.0.0.1:18080", "sidecar listener 127.0.0.1:18080 gets GET /",
		  "upstream: https://api.example.com:443\n" },
		{ "http://127.0.0.1:18081/y", "sidecar listener 127.0.0.1:18081 gets GET /y",
		  "upstream: http://127.0.0.1:19000\n" },
		{ "http://127.0.0.1:19000/y", "sidecar listener 127.0.0.1:18081 gets GET /y",
		  "upstream: http://127.0.0.1:19000\n" },
		/* a listener on a wildcard address takes the loopback one */
		{ "http://127.0.0.1:18082/w", "sidecar listener 0.0.0.0:18082 gets GET /w",
		  "upstream: http://127.0.0.1:19001\n" },
		{ "http://[::1]:18083/w", "sidecar listener [::]:18083 gets GET /w",
		  "upstream: http://127.0.0.1:19002\n" },
		{ "http://127.0.0.1:18083/w", "sidecar listener [::]:18083 gets GET /w",
		  "upstream: http://127.0.0.1:19002\n" },
		/* another port or scheme than the upstream's: forward */
		{ "http://api.example.com/x",
		  "forward proxy listener 127.0.0.1:13128 gets GET http://api.example.com/x",
		  "upstream: http://api.example.com:80\n" },
		{ "http://[::1]:8/z",
		  "forward proxy listener 127.0.0.1:13128 gets GET http://[::1]:8/z",
		  "upstream: http://[::1]:8\n" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct test_run run = test_explain(config, "GET", cases[i].url, NULL, 0);

		if (run.rc != 0 || strstr(run.err, cases[i].seen) == NULL ||
		    strstr(run.out, cases[i].upstream) == NULL)
			fail_msg("%s: rc %d, out %s, err %s", cases[i].url, run.rc, run.out,
				 run.err);
		test_run_free(&run);
	}
	config_release(config);
}

static void test_bad_descriptions(void **state)
{
	struct config *config = config_load(NULL, CONFIG_SOURCE_ANY, NULL, NULL);
	static const char *const bad_header[] = { "X-Ok: 1", "X-Bad\t: 2" };
	static const char *const two_hosts[] = { "Host: a", "Host: b" };
	static const struct {
		const char *method;
		const char *url;
		const char *const *headers;
		size_t count;
		const char *words;
	} cases[] = {
		{ "G(T", "http://a/", NULL, 0, "bad method" },
		{ "GET", "https:/a/", NULL, 0, "bad URL" },
		{ "GET", "http://a/\x7f", NULL, 0, "bad URL" },
		{ "GET", "http://a/", bad_header, 2, "bad header line \"X-Bad\\t: 2\"" },
		{ "GET", "http://a/", two_hosts, 2, "bad request" },
		{ "GET", "http://a:99999/", NULL, 0, "bad request" },
	};

	assert_non_null(config);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct test_run run = test_explain(config, cases[i].method, cases[i].url,
						   cases[i].headers, cases[i].count);

		if (run.rc != -1 || run.out[0] != '\0' || strstr(run.err, cases[i].words) == NULL)
			fail_msg("case %zu: rc %d, out %s, err %s", i, run.rc, run.out, run.err);
		test_run_free(&run);
	}
	config_release(config);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embedded_default),
		cmocka_unit_test(test_listener_choice),
		cmocka_unit_test(test_bad_descriptions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
