#ifndef RETRYPROXY_METRICS_H
#define RETRYPROXY_METRICS_H

/*
 * Counters and histograms for /metrics (SPEC "Admin endpoint"), rendered in
 * the Prometheus text exposition format. Per-route series are keyed by route
 * name and outlive reloads, so a counter never goes backwards; a live
 * config's routes point at theirs (route->series), so counting a request
 * looks nothing up.
 */

#include <stdbool.h>
#include <stdint.h>

#include "retry.h"

struct config;
struct evbuffer;
struct metrics;
struct metrics_route; /* one route name's series */

/* Gauges the proxy owns and passes in when rendering. */
struct metrics_gauges {
	unsigned backoff_pending;      /* requests waiting on a backoff timer now */
	unsigned client_connections;   /* open client connections and tunnels */
	unsigned upstream_connections; /* open upstream connections, pooled included */
};

struct metrics *metrics_new(void);
void metrics_free(struct metrics *metrics);

/* The series of a route name, made (every counter at 0) when first asked
 * for, shown from the first time it counts something; it lives as long as
 * metrics. */
struct metrics_route *metrics_series(struct metrics *metrics, const char *route);

/* The series "-": requests the proxy answered before any route was chosen
 * (malformed, refused, Max-Forwards: 0), as the access log names them. */
struct metrics_route *metrics_unrouted(struct metrics *metrics);

/* A config goes live: point each of its routes (default included) at its
 * series, made now for routes not seen before, in the config's order. */
void metrics_attach(struct metrics *metrics, struct config *config);

/* A final response went to the client: requests_total on the route's
 * series, the duration histogram (whole request, retries included) and
 * the tries histogram. */
void metrics_request_done(struct metrics *metrics, struct metrics_route *series, int code,
			  double duration_seconds, unsigned tries);

/* An upstream try started (first ones included). */
void metrics_try(struct metrics_route *series);

/* A retry was scheduled after a failure of this cause. */
void metrics_retry(struct metrics_route *series, enum retry_cause cause);

/* retry.mode: observe: a failure of this cause would have been retried. */
void metrics_would_retry(struct metrics_route *series, enum retry_cause cause);

/* Retrying stopped short for reason; RETRY_GIVE_UP_NONE counts nothing. */
void metrics_gave_up(struct metrics_route *series, enum retry_give_up reason);

/* A hedged try ended: its response won, or it lost (another try answered
 * first, or it failed). */
void metrics_hedge(struct metrics_route *series, bool won);

/* A broken download's resume (retry.resume) was spliced on (ok), or the
 * response ended short without one. */
void metrics_resume(struct metrics_route *series, bool ok);

/* A route's requests now in backoff (a place among the pending retries,
 * not waiting for their upstream) and held (waiting for their upstream)
 * changed by these amounts. */
void metrics_route_gauges(struct metrics_route *series, int backoff_pending, int held);

/* A route's requests now waiting for a connection under
 * max_upstream_connections changed by this amount. */
void metrics_route_queued(struct metrics_route *series, int queued);

/* Requests in backoff now, over all routes. */
unsigned metrics_backoff_pending(const struct metrics *metrics);

/* An upstream try (or a response body being relayed) failed this way,
 * counted under its try_outcome_error_kind(); TRY_RESPONSE counts nothing. */
void metrics_upstream_error(struct metrics *metrics, enum try_outcome outcome);

/* A request was sent on a pooled connection. */
void metrics_pool_reuse(struct metrics *metrics);

/* A client's TLS handshake in an intercepted tunnel failed (it refused the
 * certificate, or spoke something else). */
void metrics_intercept_failure(struct metrics *metrics);

/* Append retryproxy_fleet_connected: 1 while the fleet's Redis answers
 * and its leases are in use (fleet_connected()). Only a proxy with a
 * fleet: section has the series. */
void metrics_render_fleet(bool connected, struct evbuffer *out);

/* Count a reload (SIGHUP) that went live (ok) or was refused. */
void metrics_reload(struct metrics *metrics, bool ok);

/* Was the last reload refused, the running config not the file's? */
bool metrics_last_reload_failed(const struct metrics *metrics);

/* Append retryproxy_config_reloads_total{result} and
 * retryproxy_config_last_reload_successful. */
void metrics_render_reloads(const struct metrics *metrics, struct evbuffer *out);

/* Append retryproxy_retry_memory_bytes and retryproxy_spool_bytes: what
 * request bodies and responses kept for retries hold now in memory
 * (against limits.retry_memory), and what spool files hold (against
 * limits.spool_total). */
void metrics_render_kept(uint64_t memory_bytes, uint64_t spool_bytes, struct evbuffer *out);

/* Write a label value with backslash, " and newline escaped, as the format
 * requires. */
void metrics_label_value(struct evbuffer *out, const char *s);

/* Append the whole exposition to out. */
void metrics_render(const struct metrics *metrics, const struct metrics_gauges *gauges,
		    struct evbuffer *out);

/* One route's counters, read for the status page (the same ones /metrics
 * shows; nothing is counted twice). */
struct metrics_route_view {
	const char *name;
	uint64_t requests;			   /* final responses, every code */
	uint64_t succeeded;			   /* of those, 2xx, 3xx and 101 */
	uint64_t tries;				   /* upstream tries, first ones included */
	uint64_t retries[RETRY_CAUSE_TIMEOUT + 1]; /* by enum retry_cause */
	uint64_t gave_up[RETRY_GIVE_UP_COUNT];	   /* by enum retry_give_up; NONE unused */
	uint64_t hedges_won;
	uint64_t hedges_lost;
	unsigned backoff_pending; /* requests in backoff now */
	unsigned held;		  /* requests waiting for their upstream now */
	unsigned queued;	  /* requests waiting for a connection now */
};

/* Call fn with the counters of each route that counted something, in the
 * order the series were made. */
void metrics_each_route(const struct metrics *metrics,
			void (*fn)(const struct metrics_route_view *view, void *arg), void *arg);

#endif
