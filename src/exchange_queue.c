#include <stdio.h>

#include <event2/event.h>

#include "config.h"
#include "exchange.h"
#include "exchange_private.h"
#include "log.h"
#include "pool.h"
#include "proxy.h"
#include "retry_budget.h"
#include "timeval.h"
#include "upstreams.h"

/*
 * limits.max_upstream_connections, the exchange's side: a try that needs a
 * new connection takes a place under the upstream's cap first; at the cap
 * the exchange waits (EXCHANGE_QUEUED) in the upstream's queue, in arrival
 * order, until a place or a pooled connection is free for it. The wait is
 * not a try: the route's try_timeout bounds it, and then the client gets the
 * last response kept, else 504, without a retry (it would only queue again
 * behind the same connections).
 */

/* try_timeout passed while waiting for a connection. */
static void exchange_queue_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	char text[512];

	exchange_enter(ex);
	upstream_unwait(&ex->waiter);
	log_info("%.*s %.*s: no connection to %s within try_timeout: "
		 "max_upstream_connections (%u) busy",
		 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
		 upstream_name(ex->upstream), ex->config->limits.max_upstream_connections);
	if (ex->kept != NULL) {
		exchange_deliver_kept(ex);
	} else {
		ex->note = "upstream busy";
		snprintf(text, sizeof(text),
			 "504 upstream busy: no connection to %s within try_timeout, "
			 "max_upstream_connections (%u) in use (%u attempt%s)",
			 upstream_name(ex->upstream), ex->config->limits.max_upstream_connections,
			 ex->attempts, ex->attempts == 1 ? "" : "s");
		exchange_respond_error(ex, 504, text);
	}
	exchange_leave(ex);
}

/* A place or a pooled connection may be free: start the try now, ahead of
 * anyone who came later. */
static void exchange_queue_released(struct upstream_waiter *waiter)
{
	struct exchange *ex =
		(struct exchange *)((char *)waiter - offsetof(struct exchange, waiter));

	exchange_enter(ex);
	evtimer_del(ex->timer);
	ex->queue_released = true;
	exchange_start_try(ex);
	ex->queue_released = false;
	exchange_leave(ex);
}

/* Wait for a place, at the front when just released (it stays the oldest). */
static void exchange_queue(struct exchange *ex, bool front)
{
	uint64_t timeout_ms = ex->route->retry.try_timeout_ms;
	uint64_t waited = 0;
	struct timeval tv;

	if (ex->state == EXCHANGE_QUEUED)
		waited = retry_budget_now_ms() - ex->queued_since_ms;
	else
		ex->queued_since_ms = retry_budget_now_ms();
	exchange_set_state(ex, EXCHANGE_QUEUED);
	ex->waiter.release = exchange_queue_released;
	upstream_slot_wait(ex->upstream, &ex->waiter, front);
	tv = timeval_from_ms(timeout_ms > waited ? timeout_ms - waited : 0);
	evtimer_del(ex->timer);
	evtimer_assign(ex->timer, ex->proxy->base, exchange_queue_timeout_cb, ex);
	evtimer_add(ex->timer, &tv);
}

bool exchange_take_connection_place(struct exchange *ex)
{
	unsigned max = ex->config->limits.max_upstream_connections;
	bool first = ex->queue_released;

	if (upstream_slot_take(ex->upstream, max, first))
		return true;
	/* an idle connection this request may not reuse (it is not safe to
	 * repeat, or the last try failed on one) gives up its place */
	if (pool_close_one(ex->proxy->pool, ex->pool_key) &&
	    upstream_slot_take(ex->upstream, max, first))
		return true;
	exchange_queue(ex, first);
	return false;
}
