#include "exchange_private.h"
#include "metrics.h"
#include "proxy.h"
#include "config.h"

/*
 * The per-route gauges of /metrics and the status page: requests in backoff
 * (a place among the pending retries, retry_reserved, while not waiting for
 * their upstream) and held (in their upstream's queue, upstream_wait). Each
 * exchange remembers what it added, so the gauges follow it exactly whatever
 * order its state changes in, and its end takes back what is left.
 */

void exchange_gauges_update(struct exchange *ex)
{
	bool held = ex->waiter.upstream != NULL && !ex->waiter.for_connection;
	bool backoff = ex->retry_reserved && !held;

	if (held == ex->gauged_held && backoff == ex->gauged_backoff)
		return;
	metrics_route_gauges(ex->proxy->metrics, ex->route->name,
			     (int)backoff - (int)ex->gauged_backoff,
			     (int)held - (int)ex->gauged_held);
	ex->gauged_backoff = backoff;
	ex->gauged_held = held;
}
