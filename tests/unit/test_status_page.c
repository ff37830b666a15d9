/*
 * Unit tests for status_page.c: HTML escaping by table, and the page
 * rendered from real metrics and upstreams: a route's cells carry the
 * counters metrics.c keeps, the success rate counts 2xx, 3xx and 101, names are
 * escaped in text and attributes, an empty proxy says so, and nothing is
 * loaded from elsewhere.
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

#include "metrics.h"
#include "status_page.h"
#include "upstreams.h"

/* The buffer's bytes as a string the caller frees. */
static char *test_text(struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);
	char *text = malloc(len + 1);

	assert_non_null(text);
	evbuffer_remove(buf, text, len);
	text[len] = '\0';
	return text;
}

static char *test_escape(const char *s)
{
	struct evbuffer *buf = evbuffer_new();
	char *text;

	status_page_escape(buf, s);
	text = test_text(buf);
	evbuffer_free(buf);
	return text;
}

static void test_status_page_escape(void **state)
{
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{ "", "" },
		{ "api-v2.internal_1", "api-v2.internal_1" },
		{ "<script>", "&lt;script&gt;" },
		{ "a&b", "a&amp;b" },
		{ "\"quoted\" 'single'", "&quot;quoted&quot; &#39;single&#39;" },
		{ "tab\there\nnl\x7f", "tab&#xFFFD;here&#xFFFD;nl&#xFFFD;" },
		{ "caf\xc3\xa9", "caf\xc3\xa9" }, /* UTF-8 passes as it is */
		{ "&amp;", "&amp;amp;" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = test_escape(cases[i].in);

		assert_string_equal(got, cases[i].out);
		free(got);
	}
}

/* The page for these metrics and upstreams. */
static char *test_render(const struct metrics *metrics, const struct upstreams *upstreams,
			 unsigned backoff_pending, bool draining)
{
	struct metrics_gauges gauges = { backoff_pending, 3, 2 };
	struct status_page_state state = {
		.metrics = metrics,
		.gauges = &gauges,
		.upstreams = upstreams,
		.draining = draining,
		.now = 1700000000,
	};
	struct evbuffer *buf = evbuffer_new();
	char *text;

	status_page_render(&state, buf);
	text = test_text(buf);
	evbuffer_free(buf);
	return text;
}

/* The page as /?norefresh serves it. */
static char *test_render_snapshot(const struct metrics *metrics, const struct upstreams *upstreams)
{
	struct metrics_gauges gauges = { 0, 0, 0 };
	struct status_page_state state = {
		.metrics = metrics,
		.gauges = &gauges,
		.upstreams = upstreams,
		.now = 1700000000,
		.no_refresh = true,
	};
	struct evbuffer *buf = evbuffer_new();
	char *text;

	status_page_render(&state, buf);
	text = test_text(buf);
	evbuffer_free(buf);
	return text;
}

/* The row of route (its escaped name) up to its end. */
static char *test_row(const char *page, const char *attr)
{
	char marker[128];
	const char *start, *end;
	char *row;

	snprintf(marker, sizeof(marker), "<tr data-route=\"%s\">", attr);
	start = strstr(page, marker);
	if (start == NULL)
		fail_msg("no row %s in:\n%s", marker, page);
	end = strstr(start, "</tr>");
	assert_non_null(end);
	row = strndup(start, (size_t)(end - start));
	assert_non_null(row);
	return row;
}

/* The cell with data-key key in row shows text. */
static void test_cell(const char *row, const char *key, const char *text)
{
	char marker[64];
	const char *cell, *value, *end;

	snprintf(marker, sizeof(marker), "data-key=\"%s\"", key);
	cell = strstr(row, marker);
	if (cell == NULL)
		fail_msg("no cell %s in %s", key, row);
	value = strchr(cell, '>');
	end = strchr(value, '<');
	if ((size_t)(end - value - 1) != strlen(text) || strncmp(value + 1, text, strlen(text)))
		fail_msg("cell %s: expected %s in %.*s", key, text, (int)(end - cell), cell);
}

static void test_status_page_route_counters(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_route *api = metrics_series(m, "api");
	struct metrics_route *other = metrics_series(m, "other");
	struct upstreams *ups = upstreams_new(NULL);
	char *page, *row;

	/* 3 of 4 final responses succeed (a 200, a 304, a 200; a 503) */
	metrics_request_done(m, api, 200, 0.1, 1);
	metrics_request_done(m, api, 304, 0.1, 1);
	metrics_request_done(m, api, 200, 0.1, 2);
	metrics_request_done(m, api, 503, 0.1, 3);
	for (int i = 0; i < 7; i++)
		metrics_try(api);
	metrics_retry(api, RETRY_CAUSE_STATUS);
	metrics_retry(api, RETRY_CAUSE_STATUS);
	metrics_retry(api, RETRY_CAUSE_RESET);
	metrics_gave_up(api, RETRY_GIVE_UP_ATTEMPTS);
	metrics_gave_up(api, RETRY_GIVE_UP_BUDGET);
	metrics_hedge(api, true);
	metrics_hedge(api, false);
	metrics_hedge(api, false);
	metrics_request_done(m, other, 502, 0.1, 1);
	metrics_route_gauges(api, 2, 0);
	metrics_route_gauges(other, 0, 3);
	metrics_route_queued(other, 2);

	page = test_render(m, ups, 4, false);
	row = test_row(page, "api");
	test_cell(row, "requests", "4");
	test_cell(row, "success_rate", "75.0%");
	test_cell(row, "tries", "7");
	test_cell(row, "retries.status", "2");
	test_cell(row, "retries.connect", "0");
	test_cell(row, "retries.reset", "1");
	test_cell(row, "retries.timeout", "0");
	test_cell(row, "gave_up.attempts", "1");
	test_cell(row, "gave_up.deadline", "0");
	test_cell(row, "gave_up.budget", "1");
	test_cell(row, "hedges.won", "1");
	test_cell(row, "hedges.lost", "2");
	test_cell(row, "backoff_pending", "2");
	test_cell(row, "held", "0");
	test_cell(row, "queued", "0");
	free(row);
	row = test_row(page, "other");
	test_cell(row, "requests", "1");
	test_cell(row, "success_rate", "0.0%");
	test_cell(row, "backoff_pending", "0");
	test_cell(row, "held", "3");
	test_cell(row, "queued", "2");
	free(row);
	/* the tiles sum over routes; gauges come as given */
	test_cell(page, "requests", "5");
	test_cell(page, "success_rate", "60.0%");
	test_cell(page, "retries", "3");
	test_cell(page, "gave_up", "2");
	test_cell(page, "backoff_pending", "4");
	test_cell(page, "held_requests", "0");
	/* the Queued tile counts the upstreams' connection queues: none here */
	test_cell(page, "queued", "0");
	test_cell(page, "upstreams_down", "0 of 0");
	test_cell(page, "client_connections", "3");
	test_cell(page, "upstream_connections", "2");
	test_cell(page, "serving", "serving");
	test_cell(page, "updated", "2023-11-14 22:13:20 UTC");
	assert_non_null(strstr(page, "No upstream contacted yet."));
	free(page);
	upstreams_free(ups);
	metrics_free(m);
}

/* The rate is cut to the tenth, not rounded: one failure in 2,500 is 99.9 %,
 * never "100.0%", which would say none failed; 2 in 3 is 66.6 %. */
static void test_status_page_rate_cut(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_route *api = metrics_series(m, "api");
	struct metrics_route *third = metrics_series(m, "third");
	struct upstreams *ups = upstreams_new(NULL);
	char *page, *row;

	for (int i = 0; i < 2499; i++)
		metrics_request_done(m, api, 200, 0.1, 1);
	metrics_request_done(m, api, 503, 0.1, 1);
	metrics_request_done(m, third, 200, 0.1, 1);
	metrics_request_done(m, third, 200, 0.1, 1);
	metrics_request_done(m, third, 503, 0.1, 1);
	page = test_render(m, ups, 0, false);
	row = test_row(page, "api");
	test_cell(row, "success_rate", "99.9%");
	free(row);
	row = test_row(page, "third");
	test_cell(row, "success_rate", "66.6%");
	free(row);
	free(page);
	upstreams_free(ups);
	metrics_free(m);
}

/* A 101 that switched protocols (a WebSocket's handshake) is a success,
 * as a 2xx is; the other 1xx never end a request. */
static void test_status_page_switch_succeeds(void **state)
{
	struct metrics *m = metrics_new();
	struct metrics_route *ws = metrics_series(m, "ws");
	struct upstreams *ups = upstreams_new(NULL);
	char *page, *row;

	metrics_request_done(m, ws, 101, 0.1, 1);
	metrics_request_done(m, ws, 101, 0.1, 1);
	metrics_request_done(m, ws, 101, 0.1, 2);
	metrics_request_done(m, ws, 502, 0.1, 3);
	page = test_render(m, ups, 0, false);
	row = test_row(page, "ws");
	test_cell(row, "success_rate", "75.0%");
	assert_non_null(strstr(row, "title=\"3 of 4 final responses were 2xx, 3xx or 101\""));
	free(row);
	test_cell(page, "success_rate", "75.0%");
	free(page);
	upstreams_free(ups);
	metrics_free(m);
}

static void test_status_page_escapes_names(void **state)
{
	struct metrics *m = metrics_new();
	struct upstreams *ups = upstreams_new(NULL);
	struct upstream_endpoint endpoint = { .tls = false, .host = "x\"><b>y", .port = 8080 };
	struct upstream *u = upstreams_hold(ups, &endpoint);
	char *page, *row;

	metrics_request_done(m, metrics_series(m, "<i>r&d</i>\"'"), 200, 0.1, 1);
	page = test_render(m, ups, 0, true);
	assert_null(strstr(page, "<i>"));
	assert_null(strstr(page, "<b>"));
	row = test_row(page, "&lt;i&gt;r&amp;d&lt;/i&gt;&quot;&#39;");
	assert_non_null(
		strstr(row, "<th scope=\"row\">&lt;i&gt;r&amp;d&lt;/i&gt;&quot;&#39;</th>"));
	free(row);
	assert_non_null(strstr(page, "<tr data-upstream=\"http://x&quot;&gt;&lt;b&gt;y:8080\">"));
	assert_non_null(strstr(page, "<td data-key=\"state\" data-label=\"State\"><span "
				     "class=\"badge up\">up</span></td>"));
	test_cell(page, "serving", "draining");
	free(page);
	upstream_release(u);
	upstreams_free(ups);
	metrics_free(m);
}

/* An upstream's row counts its probes by result, as retryproxy_probes_total
 * does: those that connected, that failed, and those the proxy could not
 * make for want of its own descriptors or ports (local_shortage). */
static void test_status_page_upstream_probes(void **state)
{
	struct metrics *m = metrics_new();
	struct upstreams *ups = upstreams_new(NULL);
	struct upstream_endpoint endpoint = { .tls = false, .host = "127.0.0.1", .port = 8080 };
	struct upstream *u = upstreams_hold(ups, &endpoint);
	const char *row;
	char *page;

	page = test_render(m, ups, 0, false);
	row = strstr(page, "<tr data-upstream=\"http://127.0.0.1:8080\">");
	assert_non_null(row);
	test_cell(row, "probes.ok", "0");
	test_cell(row, "probes.fail", "0");
	test_cell(row, "probes.local_shortage", "0");
	assert_non_null(strstr(page, "\">Probes not made</th>"));
	free(page);
	upstream_release(u);
	upstreams_free(ups);
	metrics_free(m);
}

static void test_status_page_empty_and_self_contained(void **state)
{
	struct metrics *m = metrics_new();
	struct upstreams *ups = upstreams_new(NULL);
	char *page = test_render(m, ups, 0, false);

	assert_true(strncmp(page, "<!DOCTYPE html>", 15) == 0);
	assert_non_null(strstr(page, "<meta http-equiv=\"refresh\" content=\"2\">"));
	assert_non_null(strstr(page, "No requests yet."));
	test_cell(page, "success_rate", "\xe2\x80\x93");
	/* nothing that would fetch from elsewhere or run */
	assert_null(strstr(page, "<script"));
	assert_null(strstr(page, "<link"));
	assert_null(strstr(page, "<img"));
	assert_null(strstr(page, "src="));
	assert_null(strstr(page, "url("));
	assert_null(strstr(page, "@import"));
	assert_null(strstr(page, "http://"));
	assert_null(strstr(page, "https://"));
	assert_true(strlen(page) > 0 && page[strlen(page) - 1] == '\n');
	assert_non_null(strstr(page, "</html>\n"));
	free(page);
	/* a snapshot: the same page without the refresh */
	page = test_render_snapshot(m, ups);
	assert_null(strstr(page, "http-equiv=\"refresh\""));
	assert_null(strstr(page, "refreshes every"));
	assert_non_null(strstr(page, "a snapshot: <a href=\"/\">the live page</a>"));
	assert_non_null(strstr(page, "No requests yet."));
	free(page);
	upstreams_free(ups);
	metrics_free(m);
}

/* A refused reload is named in the header until a good one. */
static void test_status_page_reload_refused(void **state)
{
	struct metrics *m = metrics_new();
	struct upstreams *ups = upstreams_new(NULL);
	char *page = test_render(m, ups, 0, false);

	assert_null(strstr(page, "data-key=\"reload\""));
	free(page);
	metrics_reload(m, false);
	page = test_render(m, ups, 0, false);
	assert_non_null(
		strstr(page, "<span data-key=\"reload\" class=\"bad\">last reload refused"));
	free(page);
	metrics_reload(m, true);
	page = test_render(m, ups, 0, false);
	assert_null(strstr(page, "data-key=\"reload\""));
	free(page);
	upstreams_free(ups);
	metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_page_escape),
		cmocka_unit_test(test_status_page_route_counters),
		cmocka_unit_test(test_status_page_switch_succeeds),
		cmocka_unit_test(test_status_page_rate_cut),
		cmocka_unit_test(test_status_page_escapes_names),
		cmocka_unit_test(test_status_page_upstream_probes),
		cmocka_unit_test(test_status_page_empty_and_self_contained),
		cmocka_unit_test(test_status_page_reload_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
