#include "exchange_private.h"
#include "metrics.h"
#include "proxy.h"
#include "config.h"

/*
 * The per-route gauges of /metrics and the status page: requests in backoff
 * (a place among the pending retries, retry_reserved, while waiting for
 * nothing else), held (in their upstream's queue, upstream_wait) and queued
 * (waiting for a connection under max_upstream_connections; a retry keeps
 * its place among the pending retries there, but is no longer in backoff).
 * Each exchange remembers what it added, so the gauges follow it exactly
 * whatever order its state changes in, and its end takes back what is left.
 */

void exchange_gauges_update(struct exchange *ex)
{
	bool waiting = ex->waiter.upstream != NULL;
	bool held = waiting && !ex->waiter.for_connection;
	bool queued = waiting && ex->waiter.for_connection;
	bool backoff = ex->retry_reserved && !waiting;

	if (held == ex->gauged_held && backoff == ex->gauged_backoff && queued == ex->gauged_queued)
		return;
	if (held != ex->gauged_held || backoff != ex->gauged_backoff)
		metrics_route_gauges(ex->route->series, (int)backoff - (int)ex->gauged_backoff,
				     (int)held - (int)ex->gauged_held);
	if (queued != ex->gauged_queued)
		metrics_route_queued(ex->route->series, (int)queued - (int)ex->gauged_queued);
	ex->gauged_backoff = backoff;
	ex->gauged_held = held;
	ex->gauged_queued = queued;
}
