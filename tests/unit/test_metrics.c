/*
 * Unit tests for metrics.c: counts by enum (give-up reasons, try outcomes
 * folded into error kinds) and the rendered exposition, compared line by
 * line, including a whole page that must stay byte-identical to what the
 * proxy rendered before counters were indexed by enum.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "config.h"
#include "metrics.h"

/* A route name that needs every escape of the text format. */
#define TEST_ODD_ROUTE "we\"ird\\route\n"

/* The page for test_metrics_scenario(), as rendered by the string-keyed
 * metrics_gave_up/metrics_upstream_error this API replaced. */
static const char *const test_golden[] = {
	"# HELP retryproxy_requests_total Final responses sent to clients, by route and status "
	"code.",
	"# TYPE retryproxy_requests_total counter",
	"retryproxy_requests_total{route=\"api\",code=\"200\"} 2",
	"retryproxy_requests_total{route=\"api\",code=\"404\"} 1",
	"retryproxy_requests_total{route=\"api\",code=\"503\"} 1",
	"retryproxy_requests_total{route=\"we\\\"ird\\\\route\\n\",code=\"502\"} 1",
	"# HELP retryproxy_tries_total Upstream tries, first tries included.",
	"# TYPE retryproxy_tries_total counter",
	"retryproxy_tries_total{route=\"api\"} 3",
	"retryproxy_tries_total{route=\"we\\\"ird\\\\route\\n\"} 1",
	"# HELP retryproxy_retries_total Retries scheduled (or held for a down upstream), by route "
	"and the cause of the failed try.",
	"# TYPE retryproxy_retries_total counter",
	"retryproxy_retries_total{route=\"api\",cause=\"status\"} 2",
	"retryproxy_retries_total{route=\"api\",cause=\"connect\"} 1",
	"retryproxy_retries_total{route=\"api\",cause=\"reset\"} 0",
	"retryproxy_retries_total{route=\"api\",cause=\"timeout\"} 0",
	"retryproxy_retries_total{route=\"we\\\"ird\\\\route\\n\",cause=\"status\"} 0",
	"retryproxy_retries_total{route=\"we\\\"ird\\\\route\\n\",cause=\"connect\"} 0",
	"retryproxy_retries_total{route=\"we\\\"ird\\\\route\\n\",cause=\"reset\"} 0",
	"retryproxy_retries_total{route=\"we\\\"ird\\\\route\\n\",cause=\"timeout\"} 1",
	"# HELP retryproxy_retries_given_up_total Requests whose retrying stopped short, by route "
	"and reason.",
	"# TYPE retryproxy_retries_given_up_total counter",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"attempts\"} 2",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"deadline\"} 1",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"not_idempotent\"} 1",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"body_too_large\"} 1",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"client_gone\"} 1",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"budget\"} 0",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"upstream_busy\"} 0",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"upstream_down\"} 0",
	"retryproxy_retries_given_up_total{route=\"api\",reason=\"upstream_http10\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"attempts\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"deadline\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"not_"
	"idempotent\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"body_too_"
	"large\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"client_gone\"} "
	"0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"budget\"} 1",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"upstream_"
	"busy\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"upstream_"
	"down\"} 0",
	"retryproxy_retries_given_up_total{route=\"we\\\"ird\\\\route\\n\",reason=\"upstream_"
	"http10\"} 0",
	"# HELP retryproxy_hedges_total Hedged tries, by route and whether their response won.",
	"# TYPE retryproxy_hedges_total counter",
	"retryproxy_hedges_total{route=\"api\",result=\"won\"} 1",
	"retryproxy_hedges_total{route=\"api\",result=\"lost\"} 2",
	"retryproxy_hedges_total{route=\"we\\\"ird\\\\route\\n\",result=\"won\"} 0",
	"retryproxy_hedges_total{route=\"we\\\"ird\\\\route\\n\",result=\"lost\"} 0",
	"# HELP retryproxy_resumes_total Broken downloads continued with a Range request "
	"(retry.resume), by route and whether the rest was spliced on (ok) or the response ended "
	"short (failed).",
	"# TYPE retryproxy_resumes_total counter",
	"retryproxy_resumes_total{route=\"api\",result=\"ok\"} 2",
	"retryproxy_resumes_total{route=\"api\",result=\"failed\"} 1",
	"retryproxy_resumes_total{route=\"we\\\"ird\\\\route\\n\",result=\"ok\"} 0",
	"retryproxy_resumes_total{route=\"we\\\"ird\\\\route\\n\",result=\"failed\"} 0",
	"# HELP retryproxy_would_retry_total Failures retry.mode: observe let through that would "
	"have been retried, by route and cause.",
	"# TYPE retryproxy_would_retry_total counter",
	"retryproxy_would_retry_total{route=\"api\",cause=\"status\"} 0",
	"retryproxy_would_retry_total{route=\"api\",cause=\"connect\"} 0",
	"retryproxy_would_retry_total{route=\"api\",cause=\"reset\"} 2",
	"retryproxy_would_retry_total{route=\"api\",cause=\"timeout\"} 0",
	"retryproxy_would_retry_total{route=\"we\\\"ird\\\\route\\n\",cause=\"status\"} 1",
	"retryproxy_would_retry_total{route=\"we\\\"ird\\\\route\\n\",cause=\"connect\"} 0",
	"retryproxy_would_retry_total{route=\"we\\\"ird\\\\route\\n\",cause=\"reset\"} 0",
	"retryproxy_would_retry_total{route=\"we\\\"ird\\\\route\\n\",cause=\"timeout\"} 0",
	"# HELP retryproxy_backoff_pending Requests waiting on a backoff timer now.",
	"# TYPE retryproxy_backoff_pending gauge",
	"retryproxy_backoff_pending 3",
	"# HELP retryproxy_route_backoff_pending Requests waiting on a backoff timer now, by "
	"route.",
	"# TYPE retryproxy_route_backoff_pending gauge",
	"retryproxy_route_backoff_pending{route=\"api\"} 0",
	"retryproxy_route_backoff_pending{route=\"we\\\"ird\\\\route\\n\"} 0",
	"# HELP retryproxy_route_held_requests Requests waiting for their upstream now, by route.",
	"# TYPE retryproxy_route_held_requests gauge",
	"retryproxy_route_held_requests{route=\"api\"} 0",
	"retryproxy_route_held_requests{route=\"we\\\"ird\\\\route\\n\"} 0",
	"# HELP retryproxy_route_queued Requests waiting for a connection under "
	"max_upstream_connections now, by route.",
	"# TYPE retryproxy_route_queued gauge",
	"retryproxy_route_queued{route=\"api\"} 0",
	"retryproxy_route_queued{route=\"we\\\"ird\\\\route\\n\"} 0",
	"# HELP retryproxy_request_duration_seconds Whole request duration, retries and backoff "
	"included.",
	"# TYPE retryproxy_request_duration_seconds histogram",
	"retryproxy_request_duration_seconds_bucket{le=\"0.005\"} 1",
	"retryproxy_request_duration_seconds_bucket{le=\"0.01\"} 1",
	"retryproxy_request_duration_seconds_bucket{le=\"0.025\"} 1",
	"retryproxy_request_duration_seconds_bucket{le=\"0.05\"} 2",
	"retryproxy_request_duration_seconds_bucket{le=\"0.1\"} 2",
	"retryproxy_request_duration_seconds_bucket{le=\"0.25\"} 3",
	"retryproxy_request_duration_seconds_bucket{le=\"0.5\"} 3",
	"retryproxy_request_duration_seconds_bucket{le=\"1\"} 3",
	"retryproxy_request_duration_seconds_bucket{le=\"2.5\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"5\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"10\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"30\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"60\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"120\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"300\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"600\"} 4",
	"retryproxy_request_duration_seconds_bucket{le=\"+Inf\"} 5",
	"retryproxy_request_duration_seconds_sum 701.803000",
	"retryproxy_request_duration_seconds_count 5",
	"# HELP retryproxy_tries_per_request Upstream tries each request took, the first included.",
	"# TYPE retryproxy_tries_per_request histogram",
	"retryproxy_tries_per_request_bucket{le=\"1\"} 1",
	"retryproxy_tries_per_request_bucket{le=\"2\"} 2",
	"retryproxy_tries_per_request_bucket{le=\"3\"} 3",
	"retryproxy_tries_per_request_bucket{le=\"4\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"5\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"6\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"8\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"10\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"15\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"20\"} 4",
	"retryproxy_tries_per_request_bucket{le=\"+Inf\"} 5",
	"retryproxy_tries_per_request_sum 31.000000",
	"retryproxy_tries_per_request_count 5",
	"# HELP retryproxy_upstream_errors_total Failed upstream tries, by kind of failure.",
	"# TYPE retryproxy_upstream_errors_total counter",
	"retryproxy_upstream_errors_total{kind=\"dns\"} 1",
	"retryproxy_upstream_errors_total{kind=\"connect\"} 2",
	"retryproxy_upstream_errors_total{kind=\"tls\"} 1",
	"retryproxy_upstream_errors_total{kind=\"reset\"} 3",
	"retryproxy_upstream_errors_total{kind=\"timeout\"} 1",
	"retryproxy_upstream_errors_total{kind=\"malformed\"} 1",
	"# HELP retryproxy_connections Open connections, by side.",
	"# TYPE retryproxy_connections gauge",
	"retryproxy_connections{side=\"client\"} 7",
	"retryproxy_connections{side=\"upstream\"} 5",
	"# HELP retryproxy_pool_reuse_total Requests sent on a pooled upstream connection.",
	"# TYPE retryproxy_pool_reuse_total counter",
	"retryproxy_pool_reuse_total 2",
	"# HELP retryproxy_intercept_failures_total Client TLS handshakes in intercepted CONNECT "
	"tunnels that failed; a client that only closed or reset the connection is not counted.",
	"# TYPE retryproxy_intercept_failures_total counter",
	"retryproxy_intercept_failures_total 1",
};

/* The exposition as one NUL-terminated string; the caller frees it. */
static char *test_render(const struct metrics *metrics, const struct metrics_gauges *gauges)
{
	struct evbuffer *out = evbuffer_new();
	size_t len;
	char *text;

	metrics_render(metrics, gauges, out);
	len = evbuffer_get_length(out);
	text = malloc(len + 1);
	assert_non_null(text);
	evbuffer_remove(out, text, len);
	text[len] = '\0';
	evbuffer_free(out);
	return text;
}

/* Does text hold this exact line? */
static bool test_has_line(const char *text, const char *line)
{
	size_t len = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[len] == '\n')
			return true;
		p++;
	}
	return false;
}

/* Fail unless text holds line. */
static void test_line(const char *text, const char *line)
{
	if (!test_has_line(text, line))
		fail_msg("missing line: %s\n--- in:\n%s", line, text);
}

/* Counts of every kind, through the enum API. */
static void test_metrics_scenario(struct metrics *m)
{
	/* made in the order the golden page lists them */
	struct metrics_route *api = metrics_series(m, "api");
	struct metrics_route *odd = metrics_series(m, TEST_ODD_ROUTE);

	metrics_try(api);
	metrics_try(api);
	metrics_try(api);
	metrics_try(odd);
	metrics_retry(api, RETRY_CAUSE_CONNECT);
	metrics_retry(api, RETRY_CAUSE_STATUS);
	metrics_retry(api, RETRY_CAUSE_STATUS);
	metrics_retry(odd, RETRY_CAUSE_TIMEOUT);
	metrics_would_retry(api, RETRY_CAUSE_RESET);
	metrics_would_retry(api, RETRY_CAUSE_RESET);
	metrics_would_retry(odd, RETRY_CAUSE_STATUS);
	metrics_gave_up(api, RETRY_GIVE_UP_DEADLINE);
	metrics_gave_up(odd, RETRY_GIVE_UP_BUDGET);
	metrics_gave_up(api, RETRY_GIVE_UP_CLIENT_GONE);
	metrics_gave_up(api, RETRY_GIVE_UP_NOT_IDEMPOTENT);
	metrics_gave_up(api, RETRY_GIVE_UP_BODY_TOO_LARGE);
	metrics_gave_up(api, RETRY_GIVE_UP_ATTEMPTS);
	metrics_gave_up(api, RETRY_GIVE_UP_ATTEMPTS);
	metrics_gave_up(api, RETRY_GIVE_UP_NONE);
	metrics_upstream_error(m, TRY_DNS);
	metrics_upstream_error(m, TRY_REFUSED);
	metrics_upstream_error(m, TRY_CONNECT_TIMEOUT);
	metrics_upstream_error(m, TRY_TLS_VERIFY);
	metrics_upstream_error(m, TRY_STALE);
	metrics_upstream_error(m, TRY_RESET);
	metrics_upstream_error(m, TRY_RESET);
	metrics_upstream_error(m, TRY_TIMEOUT);
	metrics_upstream_error(m, TRY_MALFORMED);
	metrics_upstream_error(m, TRY_RESPONSE);
	metrics_request_done(m, api, 200, 0.003, 1);
	metrics_request_done(m, api, 503, 1.5, 3);
	metrics_request_done(m, api, 200, 700, 2);
	metrics_request_done(m, odd, 502, 0.05, 4);
	metrics_request_done(m, api, 404, 0.25, 21);
	metrics_pool_reuse(m);
	metrics_pool_reuse(m);
	metrics_intercept_failure(m);
	metrics_hedge(api, true);
	metrics_hedge(api, false);
	metrics_hedge(api, false);
	metrics_resume(api, true);
	metrics_resume(api, true);
	metrics_resume(api, false);
}

static void test_metrics_golden(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_gauges gauges = { 3, 7, 5 };
	size_t count = sizeof(test_golden) / sizeof(test_golden[0]);
	char *text;
	char *line;
	char *next;
	size_t i = 0;

	test_metrics_scenario(m);
	text = test_render(m, &gauges);
	assert_int_equal(text[strlen(text) - 1], '\n');
	for (line = text; *line != '\0'; line = next) {
		next = strchr(line, '\n');
		*next++ = '\0';
		if (i >= count)
			fail_msg("line %zu past the expected %zu: %s", i + 1, count, line);
		if (strcmp(line, test_golden[i]) != 0)
			fail_msg("line %zu:\n got: %s\nwant: %s", i + 1, line, test_golden[i]);
		i++;
	}
	assert_int_equal(i, count);
	free(text);
	metrics_free(m);
}

static void test_metrics_empty(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_gauges gauges = { 0, 0, 0 };
	char *text = test_render(m, &gauges);

	/* every error kind is listed at 0 before anything happened, in order */
	assert_true(strstr(text,
			   "retryproxy_upstream_errors_total{kind=\"dns\"} 0\n"
			   "retryproxy_upstream_errors_total{kind=\"connect\"} 0\n"
			   "retryproxy_upstream_errors_total{kind=\"tls\"} 0\n"
			   "retryproxy_upstream_errors_total{kind=\"reset\"} 0\n"
			   "retryproxy_upstream_errors_total{kind=\"timeout\"} 0\n"
			   "retryproxy_upstream_errors_total{kind=\"malformed\"} 0\n") != NULL);
	test_line(text, "# TYPE retryproxy_retries_given_up_total counter");
	/* per-route series appear only once a route counted something */
	assert_null(strstr(text, "route=\""));
	test_line(text, "retryproxy_backoff_pending 0");
	test_line(text, "retryproxy_pool_reuse_total 0");
	test_line(text, "retryproxy_intercept_failures_total 0");
	free(text);
	metrics_free(m);
}

static void test_metrics_gave_up_by_reason(void **state)
{
	static const char *const lines[] = {
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"attempts\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"deadline\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"not_idempotent\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"body_too_large\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"client_gone\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"budget\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"upstream_busy\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"upstream_down\"} %d",
		"retryproxy_retries_given_up_total{route=\"r\",reason=\"upstream_http10\"} %d",
	};
	struct metrics_gauges gauges = { 0, 0, 0 };

	for (int reason = RETRY_GIVE_UP_ATTEMPTS; reason < RETRY_GIVE_UP_COUNT; reason++) {
		struct metrics *m = metrics_new();
		struct metrics_route *r = metrics_series(m, "r");
		char *text;

		metrics_try(r);
		/* reason n counted n times, so a count in the wrong series shows */
		for (int n = 0; n < reason; n++)
			metrics_gave_up(r, (enum retry_give_up)reason);
		metrics_gave_up(r, RETRY_GIVE_UP_NONE);
		text = test_render(m, &gauges);
		for (int other = RETRY_GIVE_UP_ATTEMPTS; other < RETRY_GIVE_UP_COUNT; other++) {
			char line[128];

			snprintf(line, sizeof(line), lines[other - 1],
				 other == reason ? reason : 0);
			test_line(text, line);
		}
		free(text);
		metrics_free(m);
	}
}

static struct config *test_config(const char *yaml)
{
	struct config *config = config_load_text(yaml, strlen(yaml), "test.yaml", stderr);

	assert_non_null(config);
	return config;
}

/* A live config's routes point at their series, made in the config's
 * order and shown once they count something (RETRY_GIVE_UP_NONE counts
 * nothing); a reloaded config with the same route names counts into the
 * same series. */
static void test_metrics_attach(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_gauges gauges = { 0, 0, 0 };
	struct config *first = test_config("routes:\n  - name: b\n    match: {host: b.test}\n"
					   "  - name: a\n    match: {host: a.test}\n");
	struct config *reloaded = test_config("routes:\n  - name: a\n    match: {host: a.test}\n"
					      "  - name: c\n    match: {host: c.test}\n");
	char *text;

	metrics_attach(m, first);
	assert_ptr_equal(first->routes[0].series, metrics_series(m, "b"));
	assert_ptr_equal(first->default_route.series, metrics_series(m, "default"));
	metrics_gave_up(first->routes[0].series, RETRY_GIVE_UP_NONE);
	text = test_render(m, &gauges);
	assert_null(strstr(text, "route=\""));
	free(text);
	metrics_request_done(m, first->default_route.series, 200, 0.01, 1);
	metrics_try(first->routes[1].series);

	metrics_attach(m, reloaded);
	assert_ptr_equal(reloaded->routes[0].series, first->routes[1].series);
	assert_ptr_equal(reloaded->default_route.series, first->default_route.series);
	assert_ptr_equal(reloaded->routes[1].series, metrics_series(m, "c"));
	metrics_try(reloaded->routes[0].series);
	metrics_try(reloaded->routes[1].series);
	/* a before default: the order the series were made, not first use */
	text = test_render(m, &gauges);
	assert_non_null(strstr(text, "retryproxy_tries_total{route=\"a\"} 2\n"
				     "retryproxy_tries_total{route=\"default\"} 0\n"
				     "retryproxy_tries_total{route=\"c\"} 1\n"));
	test_line(text, "retryproxy_requests_total{route=\"default\",code=\"200\"} 1");
	assert_null(strstr(text, "route=\"b\""));
	free(text);
	config_release(first);
	config_release(reloaded);
	metrics_free(m);
}

/* Each per-route counter shows its route on its own, with nothing else
 * counted first. */
static void test_metrics_each_counter_shows_its_route(void **state)
{
	struct metrics_gauges gauges = { 0, 0, 0 };

	for (int c = 0; c < 9; c++) {
		struct metrics *m = metrics_new();
		struct metrics_route *r = metrics_series(m, "r");
		char *text;

		switch (c) {
		case 0:
			metrics_request_done(m, r, 200, 0.01, 1);
			break;
		case 1:
			metrics_try(r);
			break;
		case 2:
			metrics_retry(r, RETRY_CAUSE_RESET);
			break;
		case 3:
			metrics_would_retry(r, RETRY_CAUSE_STATUS);
			break;
		case 4:
			metrics_gave_up(r, RETRY_GIVE_UP_ATTEMPTS);
			break;
		case 5:
			metrics_hedge(r, false);
			break;
		case 6:
			metrics_resume(r, true);
			break;
		case 7:
			metrics_route_gauges(r, 0, 1);
			break;
		default:
			metrics_route_queued(r, 1);
			break;
		}
		text = test_render(m, &gauges);
		if (strstr(text, "retryproxy_tries_total{route=\"r\"}") == NULL)
			fail_msg("counter %d did not show route r", c);
		free(text);
		metrics_free(m);
	}
}

static void test_metrics_error_kinds(void **state)
{
	static const char *const kinds[] = { "dns",   "connect", "tls",
					     "reset", "timeout", "malformed" };
	struct metrics_gauges gauges = { 0, 0, 0 };

	/* each outcome counts once under its own kind and nowhere else */
	for (int o = 0; o < TRY_OUTCOME_COUNT; o++) {
		struct metrics *m = metrics_new();
		const char *kind = try_outcome_error_kind((enum try_outcome)o);
		bool listed = kind == NULL;
		char *text;

		metrics_upstream_error(m, (enum try_outcome)o);
		text = test_render(m, &gauges);
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			bool mine = kind != NULL && strcmp(kind, kinds[k]) == 0;
			char line[128];

			snprintf(line, sizeof(line),
				 "retryproxy_upstream_errors_total{kind=\"%s\"} %d", kinds[k],
				 mine ? 1 : 0);
			test_line(text, line);
			listed |= mine;
		}
		if (!listed)
			fail_msg("%s: kind %s is not rendered",
				 try_outcome_name((enum try_outcome)o), kind);
		free(text);
		metrics_free(m);
	}
}

static void test_metrics_error_kinds_add_up(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_gauges gauges = { 0, 0, 0 };
	char *text;

	for (int i = 0; i < 3; i++)
		metrics_upstream_error(m, TRY_REFUSED);
	metrics_upstream_error(m, TRY_CONNECT_TIMEOUT);
	metrics_upstream_error(m, TRY_TLS);
	metrics_upstream_error(m, TRY_TLS_VERIFY);
	metrics_upstream_error(m, TRY_STALE);
	metrics_upstream_error(m, TRY_RESPONSE);
	text = test_render(m, &gauges);
	test_line(text, "retryproxy_upstream_errors_total{kind=\"dns\"} 0");
	test_line(text, "retryproxy_upstream_errors_total{kind=\"connect\"} 4");
	test_line(text, "retryproxy_upstream_errors_total{kind=\"tls\"} 2");
	test_line(text, "retryproxy_upstream_errors_total{kind=\"reset\"} 1");
	test_line(text, "retryproxy_upstream_errors_total{kind=\"timeout\"} 0");
	test_line(text, "retryproxy_upstream_errors_total{kind=\"malformed\"} 0");
	free(text);
	metrics_free(m);
}

/* Each route's view of the gauges. */
static void test_gauges_view(const struct metrics_route_view *view, void *arg)
{
	unsigned *got = arg;

	if (strcmp(view->name, "a") == 0) {
		got[0] = view->backoff_pending;
		got[1] = view->held;
		got[4] = view->queued;
	} else {
		got[2] = view->backoff_pending;
		got[3] = view->held;
		got[5] = view->queued;
	}
}

/* The per-route gauges move both ways, by route, and add up. */
static void test_metrics_route_gauges(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_route *a = metrics_series(m, "a");
	struct metrics_route *b = metrics_series(m, "b");
	struct metrics_gauges gauges = { 0, 0, 0 };
	unsigned got[6];
	char *text;

	metrics_route_gauges(a, 1, 0);
	metrics_route_gauges(a, 1, 0);
	metrics_route_gauges(b, 0, 1);
	metrics_route_gauges(a, -1, 1); /* from backoff to held */
	metrics_route_gauges(b, 1, 0);
	metrics_route_queued(b, 1);
	metrics_route_queued(b, 1);
	metrics_route_queued(b, -1);
	/* queued requests are not in backoff */
	assert_int_equal(metrics_backoff_pending(m), 2);
	metrics_each_route(m, test_gauges_view, got);
	assert_int_equal(got[0], 1);
	assert_int_equal(got[1], 1);
	assert_int_equal(got[2], 1);
	assert_int_equal(got[3], 1);
	assert_int_equal(got[4], 0);
	assert_int_equal(got[5], 1);
	text = test_render(m, &gauges);
	test_line(text, "# TYPE retryproxy_route_backoff_pending gauge");
	test_line(text, "retryproxy_route_backoff_pending{route=\"a\"} 1");
	test_line(text, "retryproxy_route_backoff_pending{route=\"b\"} 1");
	test_line(text, "# TYPE retryproxy_route_held_requests gauge");
	test_line(text, "retryproxy_route_held_requests{route=\"a\"} 1");
	test_line(text, "retryproxy_route_held_requests{route=\"b\"} 1");
	test_line(text, "# TYPE retryproxy_route_queued gauge");
	test_line(text, "retryproxy_route_queued{route=\"a\"} 0");
	test_line(text, "retryproxy_route_queued{route=\"b\"} 1");
	free(text);
	metrics_route_gauges(a, 0, -1);
	metrics_route_gauges(b, -1, -1);
	assert_int_equal(metrics_backoff_pending(m), 1);
	text = test_render(m, &gauges);
	test_line(text, "retryproxy_route_backoff_pending{route=\"a\"} 1");
	test_line(text, "retryproxy_route_backoff_pending{route=\"b\"} 0");
	test_line(text, "retryproxy_route_held_requests{route=\"a\"} 0");
	test_line(text, "retryproxy_route_held_requests{route=\"b\"} 0");
	free(text);
	metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_golden),
		cmocka_unit_test(test_metrics_empty),
		cmocka_unit_test(test_metrics_gave_up_by_reason),
		cmocka_unit_test(test_metrics_attach),
		cmocka_unit_test(test_metrics_each_counter_shows_its_route),
		cmocka_unit_test(test_metrics_error_kinds),
		cmocka_unit_test(test_metrics_error_kinds_add_up),
		cmocka_unit_test(test_metrics_route_gauges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
