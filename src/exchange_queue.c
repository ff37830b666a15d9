#include <stdio.h>

#include <event2/event.h>

#include "config.h"
#include "conn.h"
#include "exchange.h"
#include "exchange_private.h"
#include "log.h"
#include "pool.h"
#include "proxy.h"
#include "retry.h"
#include "retry_budget.h"
#include "timer.h"
#include "timeval.h"
#include "upstreams.h"

/*
 * limits.max_upstream_connections, the exchange's side: a try that needs a
 * new connection takes a place under the upstream's cap first; at the cap
 * the exchange waits (EXCHANGE_QUEUED) in the upstream's queue, in arrival
 * order, until a place or a pooled connection is free for it. The wait is
 * not a try: the route's try_timeout bounds it, and so does the retry
 * deadline (no try starts after it); then the client gets the last response
 * kept, else 504, without a retry (it would only queue again behind the
 * same connections). The trail shows the time queued as a wait before the
 * next try, as it does the time held for a down upstream; when no try
 * follows, as the wait before the answer went out (the held path does the
 * same), so the trail's waits add up to the time the request took; a wait
 * before the first try, which no trail entry can carry, is logged apart
 * (waited_ms). A retry that runs out of waiting has given up:
 * gave_up=deadline, or upstream_busy when try_timeout was the bound.
 */

/* Milliseconds since the first try (or the first wait for it). */
static uint64_t exchange_queue_elapsed(const struct exchange *ex)
{
	uint64_t now = timer_now_ms();

	return now > ex->first_try_ms ? now - ex->first_try_ms : 0;
}

void exchange_queue_count_wait(struct exchange *ex)
{
	uint64_t now = timer_now_ms();

	if (now > ex->queue_counted_ms) {
		if (ex->try_count > 0)
			ex->tries[ex->try_count - 1].wait_ms += now - ex->queue_counted_ms;
		else
			ex->waited_first_ms += now - ex->queue_counted_ms;
	}
	ex->queue_counted_ms = now;
}

/* The retry deadline passed while waiting for a connection: the last
 * response kept, else 504. */
static void exchange_queue_deadline(struct exchange *ex)
{
	char text[512];

	log_info("%.*s %.*s: no connection to %s before the retry deadline: "
		 "max_upstream_connections (%u) busy",
		 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
		 upstream_name(ex->upstream), ex->proxy->config->limits.max_upstream_connections);
	ex->gave_up = RETRY_GIVE_UP_DEADLINE;
	if (ex->kept != NULL) {
		exchange_deliver_kept(ex);
		return;
	}
	ex->note = "upstream busy";
	snprintf(text, sizeof(text),
		 "504 upstream busy: no connection to %s before the retry deadline, "
		 "max_upstream_connections (%u) in use (%u attempt%s)",
		 upstream_name(ex->upstream), ex->proxy->config->limits.max_upstream_connections,
		 ex->attempts, ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, 504, text);
}

/* Milliseconds left of the wait at now: its try_timeout, counted from when
 * it began to wait, or the deadline, whichever comes first
 * (queue_deadline_first says which). */
static uint64_t exchange_queue_left(struct exchange *ex, uint64_t now)
{
	const struct retry_policy *policy = &ex->route->retry;
	uint64_t elapsed = exchange_queue_elapsed(ex);
	uint64_t deadline_left = policy->deadline_ms > elapsed ? policy->deadline_ms - elapsed : 0;
	uint64_t waited = now - ex->queued_since_ms;
	uint64_t left = policy->try_timeout_ms > waited ? policy->try_timeout_ms - waited : 0;
	bool deadline_first = deadline_left < left;

	/* which ends the wait is settled while time is left: a timer that
	 * fires late finds both at 0 */
	if (deadline_first || left > 0)
		ex->queue_deadline_first = deadline_first;
	return deadline_first ? deadline_left : left;
}

static void exchange_queue_timeout_cb(evutil_socket_t fd, short what, void *arg);

/* Set the queued request's timer from now: for the end of its wait, or
 * sooner to look for a close hidden behind unread input. */
static void exchange_queue_timer_arm(struct exchange *ex, uint64_t now, uint64_t left)
{
	exchange_timer_start(ex, exchange_queue_timeout_cb, now, exchange_wait_timer_ms(ex, left));
}

void exchange_queue_input_full(struct exchange *ex)
{
	uint64_t now = timer_now_ms();

	exchange_queue_timer_arm(ex, now, exchange_queue_left(ex, now));
}

/* try_timeout (or the deadline) passed while waiting for a connection, or
 * it is time to look whether the client left. */
static void exchange_queue_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	uint64_t now = timer_now_ms();
	uint64_t left = exchange_queue_left(ex, now);
	char text[512];

	if (left > 0) {
		exchange_queue_timer_arm(ex, now, left);
		/* its EOF, at the end of this pass, drops the request */
		if (ex->owner.conn != NULL)
			conn_notice_hangup(ex->owner.conn);
		return;
	}
	exchange_enter(ex);
	upstream_unwait(&ex->waiter);
	exchange_gauges_update(ex);
	exchange_queue_count_wait(ex);
	if (ex->queue_deadline_first) {
		exchange_queue_deadline(ex);
		exchange_leave(ex);
		return;
	}
	log_info("%.*s %.*s: no connection to %s within try_timeout: "
		 "max_upstream_connections (%u) busy",
		 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
		 upstream_name(ex->upstream), ex->proxy->config->limits.max_upstream_connections);
	/* a first try that never started gave nothing up; a retry did */
	if (ex->attempts > 0)
		ex->gave_up = RETRY_GIVE_UP_UPSTREAM_BUSY;
	if (ex->kept != NULL) {
		exchange_deliver_kept(ex);
	} else {
		ex->note = "upstream busy";
		snprintf(text, sizeof(text),
			 "504 upstream busy: no connection to %s within try_timeout, "
			 "max_upstream_connections (%u) in use (%u attempt%s)",
			 upstream_name(ex->upstream),
			 ex->proxy->config->limits.max_upstream_connections, ex->attempts,
			 ex->attempts == 1 ? "" : "s");
		exchange_respond_error(ex, 504, text);
	}
	exchange_leave(ex);
}

/* A place or a pooled connection may be free: start the try now, ahead of
 * anyone who came later. The deadline may have passed in the loop pass that
 * freed it, before the timer could say so: then the answer goes out, and
 * what was offered goes to the next in line (false). */
static bool exchange_queue_released(struct upstream_waiter *waiter)
{
	struct exchange *ex =
		(struct exchange *)((char *)waiter - offsetof(struct exchange, waiter));
	bool tried;

	exchange_enter(ex);
	exchange_gauges_update(ex);
	exchange_timer_stop(ex);
	exchange_queue_count_wait(ex);
	if (!retry_within_deadline(&ex->route->retry, exchange_queue_elapsed(ex), 0)) {
		exchange_queue_deadline(ex);
		exchange_leave(ex);
		return false;
	}
	ex->queue_released = true;
	tried = exchange_start_try(ex);
	ex->queue_released = false;
	exchange_leave(ex);
	return tried;
}

/* Wait for a place, at the front when just released (it stays the oldest),
 * until try_timeout or the deadline, whichever comes first. */
static void exchange_queue(struct exchange *ex, bool front)
{
	uint64_t now = timer_now_ms();

	if (ex->state != EXCHANGE_QUEUED) {
		ex->queued_since_ms = now;
		ex->queue_counted_ms = ex->queued_since_ms;
	}
	exchange_set_state(ex, EXCHANGE_QUEUED);
	ex->waiter.release = exchange_queue_released;
	upstream_slot_wait(ex->upstream, &ex->waiter, front);
	exchange_gauges_update(ex);
	exchange_queue_timer_arm(ex, now, exchange_queue_left(ex, now));
}

void exchange_close_over_cap(struct exchange *ex)
{
	while (upstream_slot_over_cap(ex->upstream) &&
	       pool_close_one(ex->proxy->pool, ex->pool_key))
		;
}

bool exchange_take_place(struct exchange *ex, bool first, bool close_idle)
{
	/* the live config's limit: this request may carry the one before a
	 * reload */
	unsigned max = ex->proxy->config->limits.max_upstream_connections;

	if (upstream_slot_take(ex->upstream, max, first))
		return true;
	if (!close_idle)
		return false;
	/* an idle connection this request may not reuse (it is not safe to
	 * repeat, or the last try failed on one, or a hedge, which races on
	 * a new connection) gives up its place; not when others wait first:
	 * they would get the place, or that connection. Over a cap a reload
	 * lowered, as many as it takes to get under */
	while (upstream_slot_at_cap(ex->upstream, first) &&
	       pool_close_one(ex->proxy->pool, ex->pool_key))
		;
	return upstream_slot_take(ex->upstream, max, first);
}

bool exchange_take_connection_place(struct exchange *ex)
{
	bool first = ex->queue_released;

	if (exchange_take_place(ex, first, true))
		return true;
	exchange_queue(ex, first);
	return false;
}
