#include "status_page.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "metrics.h"
#include "retry.h"
#include "upstreams.h"

#define STATUS_PAGE_CAUSES (RETRY_CAUSE_TIMEOUT + 1)

/* Phone widths and below: tables turn into one card per row, each cell a
 * "label value" line, so nothing needs scrolling sideways. */
#define STATUS_PAGE_NARROW_PX "720"

static const char status_page_css[] =
	"*{box-sizing:border-box}"
	":root{color-scheme:light;font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,"
	"sans-serif;color:#1d2330;background:#f3f5f8}"
	"body{margin:0 auto;max-width:1500px;padding:16px 20px}"
	"h1{font-size:20px;margin:0}"
	"h2{font-size:13px;margin:22px 0 8px;text-transform:uppercase;letter-spacing:.05em;"
	"color:#4a5568}"
	".sub{margin:4px 0 0;color:#5b6576;font-size:13px}"
	".sub a{color:#2459c9;margin-right:8px}"
	".tiles{display:flex;flex-wrap:wrap;gap:10px;margin-top:14px}"
	".tile{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:8px 12px;"
	"flex:1 1 100px;display:flex;flex-direction:column;justify-content:space-between}"
	".tile .k{display:block;font-size:12px;color:#5b6576}"
	".tile .v{display:block;font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}"
	".box{overflow-x:auto;background:#fff;border:1px solid #dde2ea;border-radius:8px}"
	"table{border-collapse:collapse;width:100%}"
	"th,td{padding:6px 3px;text-align:right;border-bottom:1px solid #edf0f4;white-space:nowrap;"
	"font-variant-numeric:tabular-nums}"
	"tbody tr:last-child th,tbody tr:last-child td{border-bottom:0}"
	"thead th{background:#eef1f6;font-size:11px;font-weight:600;color:#3c4657;"
	"white-space:normal;vertical-align:bottom}"
	"thead th[colspan]{text-align:center}"
	"th.g,td.g{border-left:1px solid #dde2ea}"
	"th[scope=row],th.name{text-align:left}"
	"th[scope=row]{font-weight:600}"
	".z{color:#a3abb8}"
	".good{color:#17803d}.warn{color:#b25e00}.bad{color:#c62828;font-weight:600}"
	".badge{display:inline-block;padding:1px 9px;border-radius:10px;font-size:12px;"
	"font-weight:600}"
	".up{background:#dcf3e3;color:#17803d}.down{background:#fde2e1;color:#c62828}"
	"td.empty{text-align:left;color:#5b6576}"
	"@media (max-width:" STATUS_PAGE_NARROW_PX "px){"
	"body{padding:10px}"
	".box{overflow:visible;background:none;border:0}"
	"table,tbody,tr,th,td{display:block}"
	"thead{display:none}"
	"tbody tr{background:#fff;border:1px solid #dde2ea;border-radius:8px;margin-bottom:10px;"
	"padding:4px 0}"
	"th[scope=row]{font-size:15px;padding:6px 12px;border-bottom:1px solid #edf0f4;"
	"white-space:normal;overflow-wrap:anywhere}"
	"td,th.g,td.g{display:flex;justify-content:space-between;border:0;padding:2px 12px}"
	"td::before{content:attr(data-label);color:#5b6576;font-weight:400;margin-right:12px}"
	"td.empty::before{content:none}"
	".tile{flex:1 1 40%}"
	"}";

/* A cause or reason as a heading: "not_idempotent" reads "not idempotent". */
static void status_page_words(char *buf, size_t size, const char *name)
{
	char *p;

	snprintf(buf, size, "%s", name);
	for (p = buf; *p != '\0'; p++)
		if (*p == '_')
			*p = ' ';
}

void status_page_escape(struct evbuffer *out, const char *s)
{
	const char *run = s;

	for (; *s != '\0'; s++) {
		const char *ref;

		switch (*s) {
		case '&':
			ref = "&amp;";
			break;
		case '<':
			ref = "&lt;";
			break;
		case '>':
			ref = "&gt;";
			break;
		case '"':
			ref = "&quot;";
			break;
		case '\'':
			ref = "&#39;";
			break;
		default:
			if ((unsigned char)*s >= 0x20 && *s != 0x7f)
				continue;
			ref = "&#xFFFD;";
			break;
		}
		evbuffer_add(out, run, (size_t)(s - run));
		evbuffer_add(out, ref, strlen(ref));
		run = s + 1;
	}
	evbuffer_add(out, run, (size_t)(s - run));
}

/* A number cell; zero is dimmed so that what happened stands out. attention
 * is the class for a non-zero value ("" for none). */
static void status_page_count(struct evbuffer *out, const char *key, const char *label,
			      uint64_t value, const char *attention, bool group_start)
{
	const char *cls = value == 0 ? "z" : attention;

	evbuffer_add_printf(out, "<td data-key=\"%s\" data-label=\"%s\" class=\"%s%s\">%llu</td>",
			    key, label, cls, group_start ? " g" : "", (unsigned long long)value);
}

/* "97.5%" of the final responses that were 2xx, 3xx or 101, "–" before any, and
 * the class that colours it. Cut, not rounded, to the tenth: 99.96 % is
 * 99.9 %, since "100.0%" would say no request failed. */
static const char *status_page_rate(char *buf, size_t size, uint64_t succeeded, uint64_t requests)
{
	unsigned long long tenths;

	if (requests == 0) {
		snprintf(buf, size, "\xe2\x80\x93");
		return "z";
	}
	tenths = (unsigned long long)((long double)succeeded * 1000.0L / (long double)requests);
	snprintf(buf, size, "%llu.%llu%%", tenths / 10, tenths % 10);
	if (tenths >= 990)
		return "good";
	return tenths >= 900 ? "warn" : "bad";
}

/* Sums over every route for the tiles. */
struct status_page_totals {
	uint64_t requests;
	uint64_t succeeded;
	uint64_t retries;
	uint64_t gave_up;
	unsigned routes;
	unsigned upstreams;
	unsigned upstreams_down;
};

static void status_page_add_route(const struct metrics_route_view *view, void *arg)
{
	struct status_page_totals *totals = arg;
	size_t i;

	totals->requests += view->requests;
	totals->succeeded += view->succeeded;
	for (i = 0; i < STATUS_PAGE_CAUSES; i++)
		totals->retries += view->retries[i];
	for (i = RETRY_GIVE_UP_NONE + 1; i < RETRY_GIVE_UP_COUNT; i++)
		totals->gave_up += view->gave_up[i];
	totals->routes++;
}

static void status_page_add_upstream(const struct upstream_view *view, void *arg)
{
	struct status_page_totals *totals = arg;

	totals->upstreams++;
	totals->upstreams_down += view->down;
}

/* One tile: a label over a big value (value is trusted text). */
static void status_page_tile(struct evbuffer *out, const char *key, const char *label,
			     const char *cls, const char *value)
{
	evbuffer_add_printf(out,
			    "<div class=\"tile\"><span class=\"k\">%s</span>"
			    "<span class=\"v %s\" data-key=\"%s\">%s</span></div>\n",
			    label, cls, key, value);
}

static void status_page_tiles(struct evbuffer *out, const struct status_page_state *state,
			      const struct status_page_totals *totals)
{
	char value[64];
	const char *cls;

	evbuffer_add_printf(out, "<section class=\"tiles\">\n");
	snprintf(value, sizeof(value), "%llu", (unsigned long long)totals->requests);
	status_page_tile(out, "requests", "Requests", "", value);
	cls = status_page_rate(value, sizeof(value), totals->succeeded, totals->requests);
	status_page_tile(out, "success_rate", "Success rate", cls, value);
	snprintf(value, sizeof(value), "%llu", (unsigned long long)totals->retries);
	status_page_tile(out, "retries", "Retries", totals->retries != 0 ? "warn" : "z", value);
	snprintf(value, sizeof(value), "%llu", (unsigned long long)totals->gave_up);
	status_page_tile(out, "gave_up", "Given up", totals->gave_up != 0 ? "bad" : "z", value);
	snprintf(value, sizeof(value), "%u", state->gauges->backoff_pending);
	status_page_tile(out, "backoff_pending", "Backoffs pending",
			 state->gauges->backoff_pending != 0 ? "warn" : "z", value);
	snprintf(value, sizeof(value), "%u", upstreams_waiting(state->upstreams));
	status_page_tile(out, "held_requests", "Held requests",
			 upstreams_waiting(state->upstreams) != 0 ? "warn" : "z", value);
	snprintf(value, sizeof(value), "%u", upstreams_slot_waiting(state->upstreams));
	status_page_tile(out, "queued", "Queued",
			 upstreams_slot_waiting(state->upstreams) != 0 ? "warn" : "z", value);
	snprintf(value, sizeof(value), "%u of %u", totals->upstreams_down, totals->upstreams);
	status_page_tile(out, "upstreams_down", "Upstreams down",
			 totals->upstreams_down != 0 ? "bad" : "good", value);
	snprintf(value, sizeof(value), "%u", state->gauges->client_connections);
	status_page_tile(out, "client_connections", "Client connections", "", value);
	snprintf(value, sizeof(value), "%u", state->gauges->upstream_connections);
	status_page_tile(out, "upstream_connections", "Upstream connections", "", value);
	evbuffer_add_printf(out, "</section>\n");
}

static void status_page_route_head(struct evbuffer *out)
{
	char words[32];
	size_t i;

	evbuffer_add_printf(out, "<h2>Routes</h2>\n<div class=\"box\"><table id=\"routes\">\n"
				 "<thead><tr><th class=\"name\" rowspan=\"2\">Route</th>"
				 "<th rowspan=\"2\">Requests</th><th rowspan=\"2\">Success</th>"
				 "<th rowspan=\"2\">Tries</th>");
	evbuffer_add_printf(out,
			    "<th class=\"g\" colspan=\"%d\">Retries by cause</th>"
			    "<th class=\"g\" colspan=\"%d\">Given up by reason</th>"
			    "<th class=\"g\" colspan=\"2\">Hedges</th>"
			    "<th class=\"g\" colspan=\"3\">Now</th></tr>\n<tr>",
			    STATUS_PAGE_CAUSES, RETRY_GIVE_UP_COUNT - 1);
	for (i = 0; i < STATUS_PAGE_CAUSES; i++)
		evbuffer_add_printf(out, "<th%s>%s</th>", i == 0 ? " class=\"g\"" : "",
				    retry_cause_name((enum retry_cause)i));
	for (i = RETRY_GIVE_UP_NONE + 1; i < RETRY_GIVE_UP_COUNT; i++) {
		status_page_words(words, sizeof(words), retry_give_up_name((enum retry_give_up)i));
		evbuffer_add_printf(out, "<th%s>%s</th>",
				    i == RETRY_GIVE_UP_NONE + 1 ? " class=\"g\"" : "", words);
	}
	evbuffer_add_printf(
		out, "<th class=\"g\">won</th><th>lost</th>"
		     "<th class=\"g\">backoff</th><th>held</th><th>queued</th></tr></thead>\n"
		     "<tbody>\n");
}

static void status_page_route_row(const struct metrics_route_view *view, void *arg)
{
	struct evbuffer *out = arg;
	char key[48], label[64], words[32], rate[32];
	const char *cls;
	size_t i;

	evbuffer_add_printf(out, "<tr data-route=\"");
	status_page_escape(out, view->name);
	evbuffer_add_printf(out, "\"><th scope=\"row\">");
	status_page_escape(out, view->name);
	evbuffer_add_printf(out, "</th>");
	status_page_count(out, "requests", "Requests", view->requests, "", false);
	cls = status_page_rate(rate, sizeof(rate), view->succeeded, view->requests);
	evbuffer_add_printf(out,
			    "<td data-key=\"success_rate\" data-label=\"Success\" class=\"%s\" "
			    "title=\"%llu of %llu final responses were 2xx, 3xx or 101\">%s</td>",
			    cls, (unsigned long long)view->succeeded,
			    (unsigned long long)view->requests, rate);
	status_page_count(out, "tries", "Tries", view->tries, "", false);
	for (i = 0; i < STATUS_PAGE_CAUSES; i++) {
		const char *name = retry_cause_name((enum retry_cause)i);

		snprintf(key, sizeof(key), "retries.%s", name);
		snprintf(label, sizeof(label), "Retries: %s", name);
		status_page_count(out, key, label, view->retries[i], "warn", i == 0);
	}
	for (i = RETRY_GIVE_UP_NONE + 1; i < RETRY_GIVE_UP_COUNT; i++) {
		const char *name = retry_give_up_name((enum retry_give_up)i);

		status_page_words(words, sizeof(words), name);
		snprintf(key, sizeof(key), "gave_up.%s", name);
		snprintf(label, sizeof(label), "Given up: %s", words);
		status_page_count(out, key, label, view->gave_up[i], "bad",
				  i == RETRY_GIVE_UP_NONE + 1);
	}
	status_page_count(out, "hedges.won", "Hedges won", view->hedges_won, "", true);
	status_page_count(out, "hedges.lost", "Hedges lost", view->hedges_lost, "", false);
	status_page_count(out, "backoff_pending", "Backoffs pending", view->backoff_pending, "warn",
			  true);
	status_page_count(out, "held", "Held requests", view->held, "warn", false);
	status_page_count(out, "queued", "Queued requests", view->queued, "warn", false);
	evbuffer_add_printf(out, "</tr>\n");
}

/* Rows left to show, and which upstreams this pass shows. */
struct status_page_upstream_pass {
	struct evbuffer *out;
	bool attention; /* this pass: down or holding requests; else the others */
	unsigned left;	/* rows still allowed */
	unsigned shown;
};

static void status_page_upstream_row(const struct upstream_view *view, void *arg)
{
	struct status_page_upstream_pass *pass = arg;
	struct evbuffer *out = pass->out;
	const char *state = view->down ? "down" : "up";

	if ((view->down || view->held > 0 || view->waiting > 0) != pass->attention ||
	    pass->left == 0)
		return;
	pass->left--;
	pass->shown++;

	evbuffer_add_printf(out, "<tr data-upstream=\"");
	status_page_escape(out, view->name);
	evbuffer_add_printf(out, "\"><th scope=\"row\">");
	status_page_escape(out, view->name);
	evbuffer_add_printf(out,
			    "</th><td data-key=\"state\" data-label=\"State\">"
			    "<span class=\"badge %s\">%s</span></td>",
			    state, state);
	status_page_count(out, "failures", "Failures", view->failures, "bad", false);
	status_page_count(out, "held", "Held requests", view->held, "warn", false);
	status_page_count(out, "waiting", "Waiting for a connection", view->waiting, "warn", false);
	status_page_count(out, "probes.ok", "Probes ok", view->probes_ok, "", true);
	status_page_count(out, "probes.fail", "Probes failed", view->probes_failed, "", false);
	/* the proxy's own shortage, not the upstream's: amber, as the log's
	 * warning is */
	status_page_count(out, "probes.local_shortage", "Probes not made", view->probes_short,
			  "warn", false);
	evbuffer_add_printf(out, "</tr>\n");
}

void status_page_render(const struct status_page_state *state, struct evbuffer *out)
{
	struct status_page_totals totals = { 0 };
	struct status_page_upstream_pass upstream_pass = { .out = out,
							   .left = STATUS_PAGE_UPSTREAM_ROWS };
	struct tm tm;
	char when[32];

	metrics_each_route(state->metrics, status_page_add_route, &totals);
	upstreams_each(state->upstreams, status_page_add_upstream, &totals);
	gmtime_r(&state->now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);

	evbuffer_add_printf(
		out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
	if (!state->no_refresh)
		evbuffer_add_printf(out, "<meta http-equiv=\"refresh\" content=\"%d\">\n",
				    STATUS_PAGE_REFRESH_S);
	evbuffer_add_printf(
		out, "<title>retryproxy status</title>\n<style>%s</style>\n</head>\n<body>\n",
		status_page_css);
	evbuffer_add_printf(out,
			    "<header><h1>retryproxy</h1><p class=\"sub\">version %s &middot; "
			    "<span data-key=\"serving\" class=\"%s\">%s</span> &middot; "
			    "updated <span data-key=\"updated\">%s</span> &middot; ",
			    RETRYPROXY_VERSION, state->draining ? "bad" : "good",
			    state->draining ? "draining" : "serving", when);
	if (metrics_last_reload_failed(state->metrics))
		evbuffer_add_printf(out, "<span data-key=\"reload\" class=\"bad\">last reload "
					 "refused: see the log</span> &middot; ");
	if (state->no_refresh)
		evbuffer_add_printf(out, "a snapshot: <a href=\"/\">the live page</a>");
	else
		evbuffer_add_printf(out, "refreshes every %d&nbsp;s", STATUS_PAGE_REFRESH_S);
	evbuffer_add_printf(out,
			    "</p><p class=\"sub\"><a href=\"/metrics\">/metrics</a>"
			    "<a href=\"/upstreams\">/upstreams</a><a href=\"/config\">/config</a>"
			    "<a href=\"/healthz\">/healthz</a></p></header>\n");
	status_page_tiles(out, state, &totals);

	status_page_route_head(out);
	metrics_each_route(state->metrics, status_page_route_row, out);
	if (totals.routes == 0)
		evbuffer_add_printf(out,
				    "<tr><td class=\"empty\" colspan=\"%d\">No requests "
				    "yet.</td></tr>\n",
				    4 + STATUS_PAGE_CAUSES + RETRY_GIVE_UP_COUNT - 1 + 2 + 3);
	evbuffer_add_printf(out, "</tbody></table></div>\n");

	evbuffer_add_printf(out, "<h2>Upstreams</h2>\n<div class=\"box\"><table id=\"upstreams\">\n"
				 "<thead><tr><th class=\"name\">Upstream</th><th>State</th>"
				 "<th>Failures</th><th>Held</th><th>Waiting for a connection</th>"
				 "<th class=\"g\">Probes ok</th>"
				 "<th>Probes failed</th>"
				 "<th title=\"not made: the proxy was short of file descriptors or "
				 "local ports\">Probes not made</th></tr></thead>\n<tbody>\n");
	/* the ones that need a look first, then the most recently used */
	upstream_pass.attention = true;
	upstreams_each(state->upstreams, status_page_upstream_row, &upstream_pass);
	upstream_pass.attention = false;
	upstreams_each(state->upstreams, status_page_upstream_row, &upstream_pass);
	if (totals.upstreams == 0)
		evbuffer_add_printf(out, "<tr><td class=\"empty\" colspan=\"8\">No upstream "
					 "contacted yet.</td></tr>\n");
	else if (upstream_pass.shown < totals.upstreams)
		evbuffer_add_printf(
			out,
			"<tr><td class=\"empty\" colspan=\"8\" data-key=\"upstreams_more\">"
			"and %u more: see <a href=\"/upstreams\">/upstreams</a></td></tr>\n",
			totals.upstreams - upstream_pass.shown);
	evbuffer_add_printf(out, "</tbody></table></div>\n</body>\n</html>\n");
}
