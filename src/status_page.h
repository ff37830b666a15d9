#ifndef RETRYPROXY_STATUS_PAGE_H
#define RETRYPROXY_STATUS_PAGE_H

/*
 * The admin listener's `/`: one self-contained HTML page for a person (SPEC
 * "Admin additions"). Per route: requests, success rate, tries, retries by
 * cause, give-ups by reason, hedges, requests in backoff and held now; per
 * upstream: up or down, failures, held requests, probes; and the gauges
 * (backoffs pending, held requests, connections). It reads the very
 * counters /metrics renders. Inline CSS, no script, nothing loaded from
 * elsewhere; it asks the browser to load it again every
 * STATUS_PAGE_REFRESH_S seconds.
 *
 * Success rate: 2xx and 3xx final responses, and 101s that switched
 * protocols, over all final responses to clients, the proxy's own 502 and
 * 504 included.
 */

#include <stdbool.h>
#include <time.h>

struct evbuffer;
struct metrics;
struct metrics_gauges;
struct upstreams;

#define STATUS_PAGE_REFRESH_S 2

/* Upstream rows at most (down ones and those holding requests first, then
 * the most recently used); /upstreams lists them all. A forward proxy's
 * clients choose the hosts, and the page is made on the event loop. */
#define STATUS_PAGE_UPSTREAM_ROWS 100

/* What the page shows besides the counters. */
struct status_page_state {
	const struct metrics *metrics;
	const struct metrics_gauges *gauges;
	const struct upstreams *upstreams;
	bool draining;	 /* SIGTERM came: the proxy takes no new requests */
	time_t now;	 /* wall clock, shown as when the page was made */
	bool no_refresh; /* a snapshot: no meta refresh */
};

/* Append the whole page to out. */
void status_page_render(const struct status_page_state *state, struct evbuffer *out);

/* Append s with &, <, >, " and ' as character references and control
 * characters as U+FFFD, so that a name is text wherever it lands in the
 * page, attribute values included. */
void status_page_escape(struct evbuffer *out, const char *s);

#endif
