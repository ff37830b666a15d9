#include "exchange.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "dns_cache.h"
#include "exchange_private.h"
#include "idempotency_key.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "proxy.h"
#include "reply.h"
#include "resume.h"
#include "retry_budget.h"
#include "spool.h"
#include "timer.h"
#include "timeval.h"
#include "tls.h"
#include "xmalloc.h"

/*
 * One exchange's tries and its end: start a try, gather the facts after each
 * failure or retryable response and act on retry_decide()'s verdict, wait
 * out a backoff, and end in one place, exchange_close().
 */

static const char *const exchange_state_names[] = {
	[EXCHANGE_READING_BODY] = "reading-body",
	[EXCHANGE_TRYING] = "trying",
	[EXCHANGE_RELAYING] = "relaying",
	[EXCHANGE_BACKOFF] = "backoff",
	[EXCHANGE_HELD] = "held",
	[EXCHANGE_QUEUED] = "queued",
	[EXCHANGE_DONE] = "done",
};

static const char *const exchange_try_state_names[] = {
	[EXCHANGE_TRY_IDLE] = "idle",
	[EXCHANGE_TRY_CONNECTING] = "connecting",
	[EXCHANGE_TRY_WAITING] = "waiting-head",
	[EXCHANGE_TRY_KEEPING] = "keeping",
	[EXCHANGE_TRY_RELAYING] = "relaying",
};

void exchange_set_state(struct exchange *ex, enum exchange_state state)
{
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_debug("exchange %p %.*s %.*s: %s -> %s", (void *)ex, (int)ex->method_len,
			  ex->method, (int)ex->target_len, ex->target,
			  exchange_state_names[ex->state], exchange_state_names[state]);
	ex->state = state;
}

void exchange_try_set_state(struct exchange_try *t, enum exchange_try_state state)
{
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_debug("exchange %p try %d: %s -> %s", (void *)t->ex, (int)(t - t->ex->slots),
			  exchange_try_state_names[t->state], exchange_try_state_names[state]);
	t->state = state;
}

/* Zero a spare's try slot that a try used; its timer stays. A slot no try
 * used since it was last zeroed is still zero (every try starts in
 * exchange_begin_try, which numbers it from 1), so it is left alone: most
 * requests use one slot of four. */
static void exchange_slot_reset(struct exchange *ex, struct exchange_try *t)
{
	struct timer *timer = t->timer;

	if (t->number == 0)
		return;
	memset(t, 0, sizeof(*t));
	t->ex = ex;
	t->timer = timer;
}

_Static_assert(offsetof(struct exchange, current) ==
		       offsetof(struct exchange, slots) +
			       EXCHANGE_TRY_SLOTS * sizeof(struct exchange_try),
	       "exchange_alloc zeroes around the slots: current must follow them");

struct exchange *exchange_alloc(struct proxy *proxy)
{
	struct exchange *ex = proxy->spare_exchanges;
	struct timer *timer, *hedge_timer;
	struct resume *resume;
	char *text, *request_head;
	size_t text_room, request_head_room;
	size_t i;

	if (ex == NULL) {
		ex = xcalloc(1, sizeof(*ex));
		for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
			ex->slots[i].ex = ex;
		return ex;
	}
	proxy->spare_exchanges = ex->next_spare;
	proxy->spare_exchange_count--;
	/* a spare keeps its timers and blocks; everything else starts at zero */
	timer = ex->timer;
	hedge_timer = ex->hedge_timer;
	text = ex->text;
	text_room = ex->text_room;
	request_head = ex->request_head;
	request_head_room = ex->request_head_room;
	resume = ex->resume;
	memset(ex, 0, offsetof(struct exchange, slots));
	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		exchange_slot_reset(ex, &ex->slots[i]);
	/* current is the member after the slots */
	memset((char *)ex + offsetof(struct exchange, current), 0,
	       sizeof(*ex) - offsetof(struct exchange, current));
	/* the timers' argument is this same exchange or slot: they need no new
	 * setup */
	ex->timer = timer;
	ex->hedge_timer = hedge_timer;
	ex->text = text;
	ex->text_room = text_room;
	ex->request_head = request_head;
	ex->request_head_room = request_head_room;
	ex->resume = resume;
	return ex;
}

void exchange_timer_start(struct exchange *ex, event_callback_fn cb, uint64_t now_ms, uint64_t ms)
{
	if (ex->timer == NULL)
		ex->timer = timer_new(ex->proxy->base, cb, ex);
	else
		timer_set_cb(ex->timer, cb, ex);
	timer_start(ex->timer, now_ms, ms);
}

void exchange_timer_stop(struct exchange *ex)
{
	if (ex->timer != NULL)
		timer_stop(ex->timer);
}

char *exchange_block(char **block, size_t *room, size_t need)
{
	if (need > *room) {
		free(*block);
		*block = xmalloc(need);
		*room = need;
	}
	return *block;
}

/* Free an exchange's timers and blocks, and the exchange. */
static void exchange_destroy(struct exchange *ex)
{
	size_t i;

	timer_free(ex->timer);
	timer_free(ex->hedge_timer);
	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		timer_free(ex->slots[i].timer);
	free(ex->text);
	free(ex->request_head);
	resume_free(ex->resume);
	free(ex);
}

void exchange_memory_recount(struct exchange *ex)
{
	uint64_t held = ex->replay != NULL ? evbuffer_get_length(ex->replay) : 0;

	/* only a body kept in memory for every try claims its whole length */
	if (ex->spool != NULL || ex->body_once)
		ex->replay_claim = 0;
	if (held < ex->replay_claim)
		held = ex->replay_claim;
	if (ex->kept != NULL)
		held += evbuffer_get_length(ex->kept);
	for (size_t i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		if (ex->slots[i].keeping != NULL)
			held += evbuffer_get_length(ex->slots[i].keeping);
	ex->proxy->retry_memory_bytes = ex->proxy->retry_memory_bytes - ex->memory_counted + held;
	ex->memory_counted = held;
}

void exchange_memory_feed(struct exchange *ex, struct evbuffer *held, struct evbuffer *out)
{
	size_t queued = evbuffer_get_length(out);

	if (queued < EXCHANGE_OUTPUT_HIGH)
		evbuffer_remove_buffer(held, out, EXCHANGE_OUTPUT_HIGH - queued);
	exchange_memory_recount(ex);
}

bool exchange_memory_room(const struct exchange *ex, uint64_t more)
{
	uint64_t cap = ex->config->limits.retry_memory;
	uint64_t used = ex->proxy->retry_memory_bytes;

	return cap == 0 || (used <= cap && more <= cap - used);
}

/* Release what a closed exchange holds and keep it as a spare, or free it. */
static void exchange_free(struct exchange *ex)
{
	struct proxy *proxy = ex->proxy;

	proxy->retry_memory_bytes -= ex->memory_counted;
	ex->memory_counted = 0;
	body_relay_release(&ex->request_body);
	body_relay_release(&ex->response_body);
	if (ex->replay != NULL)
		evbuffer_free(ex->replay);
	/* the file goes with its exchange, however that ended; a large one a
	 * step per pass of the loop, which would stall on it whole */
	if (ex->spool != NULL)
		spool_close_in_steps(ex->spool, proxy->spool_reaper);
	if (ex->kept != NULL)
		evbuffer_free(ex->kept);
	if (ex->tries != ex->tries_inline)
		free(ex->tries);
	upstream_release(ex->upstream);
	config_release(ex->config);
	if (proxy->spare_exchange_count + 1 > EXCHANGE_SPARES) {
		exchange_destroy(ex);
		return;
	}
	ex->next_spare = proxy->spare_exchanges;
	proxy->spare_exchanges = ex;
	proxy->spare_exchange_count++;
}

void exchange_free_spares(struct proxy *proxy)
{
	while (proxy->spare_exchanges != NULL) {
		struct exchange *ex = proxy->spare_exchanges;

		proxy->spare_exchanges = ex->next_spare;
		exchange_destroy(ex);
	}
	proxy->spare_exchange_count = 0;
}

void exchange_enter(struct exchange *ex)
{
	ex->busy++;
}

/* Does the client owe the rest of its body now? One whose expectation went
 * upstream owes nothing before the upstream's 100 reached it: it waits for
 * it, or got a final status instead (RFC 9110 section 10.1.1); try_timeout
 * bounds the wait for a response head meanwhile. One that stopped waiting
 * and began its body (curl does after 1 s) owes the rest, as without
 * Expect, until such a final status: its stall is its own, not the
 * upstream's timeout. */
static bool exchange_body_owed(const struct exchange *ex)
{
	return !ex->expect_forwarded || ex->continue_relayed ||
	       (ex->request_body_started && ex->state != EXCHANGE_RELAYING);
}

/* Whether the client's input holds the rest of its body: sent whole, it
 * waits there while no try takes it in (held, queued, connecting). Asked
 * only as the client's connection ends: the chunked case parses a copy. */
static bool exchange_request_body_in_input(const struct exchange *ex)
{
	struct evbuffer *in = conn_input(ex->owner.conn);
	size_t len = evbuffer_get_length(in);
	struct body_relay rest = ex->request_body;
	struct evbuffer *copy, *sink;
	enum http1_error error;
	bool whole;

	if (rest.mode == BODY_MODE_LENGTH)
		return len >= rest.remaining;
	if (rest.mode != BODY_MODE_CHUNKED && rest.mode != BODY_MODE_CHUNKED_DECODE)
		return false;
	copy = evbuffer_new();
	sink = evbuffer_new(); /* a held trailer section is passed on, never dropped */
	evbuffer_add(copy, evbuffer_pullup(in, -1), len);
	whole = body_relay_move(&rest, copy, sink, &error) == 0 && rest.done;
	evbuffer_free(copy);
	evbuffer_free(sink);
	return whole;
}

bool exchange_request_body_owed(const struct exchange *ex)
{
	return !ex->request_body.done && exchange_body_owed(ex) &&
	       !exchange_request_body_in_input(ex);
}

/* A request body that stops arriving times out only while a try takes it
 * in (or the replay buffer does) and the client owes it: held, in backoff,
 * queued or connecting, it waits in the client's input through no fault of
 * the client's; so it does while a body sent once after its spool gave up
 * waits behind the file's part, which the try is still sending. */
static void exchange_watch_body(struct exchange *ex)
{
	bool want = !ex->request_body.done && exchange_body_owed(ex) &&
		    (ex->state == EXCHANGE_READING_BODY ||
		     ((ex->state == EXCHANGE_RELAYING ||
		       (ex->current != NULL && ex->current->state == EXCHANGE_TRY_WAITING)) &&
		      (ex->current == NULL || !exchange_body_queue_pending(ex->current))));

	if (want != ex->body_watched) {
		ex->body_watched = want;
		ex->owner.watch_body(ex->owner.arg, want);
	}
}

void exchange_leave(struct exchange *ex)
{
	if (--ex->busy > 0)
		return;
	if (ex->state == EXCHANGE_DONE)
		exchange_free(ex);
	else
		exchange_watch_body(ex);
}

/* Milliseconds from then to now, on the monotonic clock (timer_now_ms()):
 * a wall clock set back or slewed would shorten a duration below the waits
 * it covers. */
static uint64_t exchange_ms_between(uint64_t then, uint64_t now)
{
	return now > then ? now - then : 0;
}

static uint64_t exchange_ms_since(uint64_t then)
{
	return exchange_ms_between(then, timer_now_ms());
}

/* Access-log line and the request's metrics. A tunnel's line waits for the
 * tunnel's end: *tunnel_log takes a copy, which the tunnel writes. */
static void exchange_log(struct exchange *ex, struct access_record **tunnel_log)
{
	struct access_record record;

	memset(&record, 0, sizeof(record));
	record.client = ex->owner.peer;
	record.method = ex->method;
	record.method_len = ex->method_len;
	record.target = ex->target;
	record.target_len = ex->target_len;
	record.route = ex->route->name;
	record.status = ex->status;
	record.attempts = ex->attempts;
	record.bytes = ex->response_body.payload_bytes;
	record.duration_ms = exchange_ms_since(ex->started_ms);
	record.note = ex->note;
	record.gave_up = retry_give_up_name(ex->gave_up);
	record.tries = ex->tries;
	record.try_count = ex->try_count;
	record.waited_ms = ex->waited_first_ms;
	record.ambiguous = ex->ambiguous;
	record.would_retry = ex->would_retry;
	if (tunnel_log != NULL) {
		record.tunnel = true;
		*tunnel_log = access_record_dup(&record);
	} else
		access_log_write(&record);
	if (ex->status != 0)
		metrics_request_done(ex->proxy->metrics, ex->route->series, ex->status,
				     (double)record.duration_ms / 1000.0, ex->attempts);
	metrics_gave_up(ex->route->series, ex->gave_up);
}

void exchange_record_try(struct exchange *ex, int status, const char *error, bool hedge)
{
	if (ex->tries == NULL) {
		ex->tries = ex->tries_inline;
		ex->try_room = sizeof(ex->tries_inline) / sizeof(ex->tries_inline[0]);
	} else if (ex->try_count == ex->try_room) {
		struct access_try *more = xcalloc(ex->try_room * 2, sizeof(*more));

		memcpy(more, ex->tries, ex->try_count * sizeof(*more));
		if (ex->tries != ex->tries_inline)
			free(ex->tries);
		ex->tries = more;
		ex->try_room *= 2;
	}
	ex->tries[ex->try_count].status = status;
	ex->tries[ex->try_count].error = error;
	ex->tries[ex->try_count].wait_ms = 0;
	ex->tries[ex->try_count].hedge = hedge;
	ex->tries[ex->try_count].broken = NULL;
	/* a try made for a resume says so, whether or not a head came back */
	ex->tries[ex->try_count].resumed = ex->resumable && ex->resume->pending;
	ex->tries[ex->try_count].resumed_at = ex->tries[ex->try_count].resumed ? ex->resume->at : 0;
	ex->try_count++;
}

/* Read the client again if a try's full output had stopped it. */
static void exchange_resume_client(struct exchange *ex)
{
	if (ex->client_read_paused) {
		ex->client_read_paused = false;
		conn_read_enable(ex->owner.conn, true);
	}
}

void exchange_end_try(struct exchange_try *t, bool reusable)
{
	struct exchange *ex = t->ex;

	if (t->connecting != NULL) {
		upstream_connect_cancel(t->connecting);
		t->connecting = NULL;
	}
	if (t->placed) {
		t->placed = false;
		upstream_slot_put(ex->upstream);
	}
	if (t->admitted) {
		/* given up before it ended: it says nothing of the upstream */
		t->admitted = false;
		upstream_connect_end(ex->upstream, &ex->config->health, UPSTREAM_CONNECT_ABANDONED);
	}
	if (t->hedge) {
		t->hedge = false;
		metrics_hedge(ex->route->series, ex->winner == t);
	}
	t->verdict_pending = false;
	t->parked = false;
	t->parked_closed = false;
	if (t->up != NULL) {
		/* a connection verified under a trust a reload replaced is not
		 * kept for another request */
		if (reusable && conn_ssl(t->up) != NULL &&
		    !tls_store_current(ex->proxy->tls, conn_ssl(t->up)))
			reusable = false;
		/* nor one over a limit a reload lowered: closing it brings the
		 * upstream back under */
		if (reusable && ex->upstream != NULL && upstream_slot_over_cap(ex->upstream))
			reusable = false;
		if (reusable) {
			/* a pool already full closes it, and its place goes back
			 * as it closes: no pooled connection to offer then. The
			 * pool's limits are the running config's, not those the
			 * request started under: a reload that lowered them
			 * applies to connections coming back from requests in
			 * flight too */
			if (pool_put(ex->proxy->pool, ex->pool_key, t->up, t->answered_http10,
				     ex->proxy->config->limits.pool_max_idle,
				     ex->proxy->config->limits.pool_idle_timeout_ms))
				upstream_slot_pooled(ex->upstream);
		} else {
			/* its place goes back now, not once a callback of the
			 * conn running now returns: a stale connection's
			 * replacement takes it at once */
			conn_on_closed_now(t->up);
			/* a chunked body cut after its last chunk went upstream
			 * is complete to the upstream after a FIN (RFC 9112
			 * section 8): a reset tells it the request was not */
			if (!ex->request_body.done && ex->request_body.mode == BODY_MODE_CHUNKED &&
			    http1_chunked_past_last_chunk(&ex->request_body.chunked))
				conn_free_reset(t->up);
			else
				conn_free(t->up);
		}
		t->up = NULL;
	}
	if (t->keeping != NULL) {
		evbuffer_free(t->keeping);
		t->keeping = NULL;
		exchange_memory_recount(t->ex);
	}
	exchange_try_timeout_stop(t);
	t->read_paused = false;
	if (t->state != EXCHANGE_TRY_IDLE)
		exchange_try_set_state(t, EXCHANGE_TRY_IDLE);
	if (ex->current == t) {
		ex->current = NULL;
		exchange_resume_client(ex);
	}
	if (ex->winner == t)
		ex->winner = NULL;
}

void exchange_count_kept_hedge(struct exchange *ex, bool won)
{
	if (ex->kept_hedge) {
		ex->kept_hedge = false;
		metrics_hedge(ex->route->series, won);
	}
}

void exchange_release_retry(struct exchange *ex)
{
	if (ex->retry_reserved) {
		ex->retry_reserved = false;
		ex->proxy->backoff_pending--;
		exchange_gauges_update(ex);
	}
}

/* A backoff cut short (the client left, the drain came): the trail's last
 * wait is the time waited, as for a held or queued request no try
 * followed, not the wait planned. */
static void exchange_trail_backoff_cut(struct exchange *ex)
{
	uint64_t now, began;

	/* every exchange ends through here: the clock only for a backoff */
	if (ex->state != EXCHANGE_BACKOFF || ex->try_count == 0)
		return;
	now = timer_now_ms();
	began = ex->backoff_until_ms - ex->next_wait_ms;
	ex->tries[ex->try_count - 1].wait_ms = now > began ? now - began : 0;
}

/* Put the time held since last counted into the trail's wait: the wait
 * before the next try, or the last one's when none follows, as
 * exchange_queue_count_wait() does for the connection queue; before the
 * first try, into the wait the log gives apart (waited_ms). */
static void exchange_held_count_wait(struct exchange *ex)
{
	uint64_t now = timer_now_ms();

	if (ex->try_count > 0)
		ex->tries[ex->try_count - 1].wait_ms += now - ex->held_since_ms;
	else
		ex->waited_first_ms += now - ex->held_since_ms;
	ex->held_since_ms = now;
}

/* Was a retry under way, with no reason for stopping it given yet: in a
 * backoff, held, queued after a try, with a retryable answer kept, or a
 * retry's try in flight (whether or not a response was kept before it)? A
 * response being relayed is final: retrying ended with it. */
static bool exchange_retrying(const struct exchange *ex)
{
	bool keeping = false;
	size_t i;

	if (ex->gave_up != RETRY_GIVE_UP_NONE || ex->state == EXCHANGE_RELAYING)
		return false;
	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		keeping = keeping || ex->slots[i].state == EXCHANGE_TRY_KEEPING;
	return ex->state == EXCHANGE_BACKOFF || ex->state == EXCHANGE_HELD || keeping ||
	       ex->kept != NULL || ex->retried ||
	       (ex->state == EXCHANGE_QUEUED && ex->attempts > 0);
}

void exchange_cancel_tries(struct exchange *ex, bool record)
{
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++) {
		struct exchange_try *t = &ex->slots[i];

		/* a try that ends here with no response head, the client gone
		 * or answered by the proxy, is in the trail too: Retry-Attempts
		 * and the log's attempts count it */
		if (record &&
		    (t->state == EXCHANGE_TRY_CONNECTING || t->state == EXCHANGE_TRY_WAITING))
			exchange_record_try(ex, 0, "cancelled", t->hedge);
		if (t->state != EXCHANGE_TRY_IDLE)
			exchange_end_try(t, false);
	}
}

void exchange_stop_waiting(struct exchange *ex)
{
	if (ex->state != EXCHANGE_HELD && ex->state != EXCHANGE_QUEUED)
		return;
	upstream_unwait(&ex->waiter);
	/* the trail shows the time waited, also when the client left
	 * meanwhile, as for a backoff cut short */
	if (ex->state == EXCHANGE_HELD)
		exchange_held_count_wait(ex);
	else
		exchange_queue_count_wait(ex);
}

void exchange_proxy_ends(struct exchange *ex)
{
	/* the drain's deadline stopped the retrying, not a client that left */
	if (ex->state != EXCHANGE_DONE && exchange_retrying(ex))
		ex->gave_up = RETRY_GIVE_UP_DEADLINE;
}

/* The one end of an exchange: stop its tries and timers, write its
 * access-log line, tell its owner how it ended. It is freed when the
 * outermost entry into it leaves (at once when none runs). */
static void exchange_close(struct exchange *ex, enum exchange_end end, const char *why)
{
	struct access_record *tunnel_log = NULL;

	if (ex->state == EXCHANGE_DONE)
		return;
	if (why != NULL)
		ex->note = why;
	if (end == EXCHANGE_END_BROKEN || end == EXCHANGE_END_RESET)
		log_warn("%.*s %.*s: response broken off: %s", (int)ex->method_len, ex->method,
			 (int)ex->target_len, ex->target, why);
	/* a retry was underway: the client left before it could finish */
	if (end == EXCHANGE_END_CLIENT_GONE && exchange_retrying(ex))
		ex->gave_up = RETRY_GIVE_UP_CLIENT_GONE;
	/* a resume begun (in its backoff, held, or asked for) that the client
	 * did not wait for ended its body short: a failed one, as SPEC counts
	 * every resume (it stays pending until its try in flight, if any, is
	 * in the trail as the resume it was) */
	if (end == EXCHANGE_END_CLIENT_GONE && ex->resumable && ex->resume->pending)
		metrics_resume(ex->route->series, false);
	/* bytes= counts what was written to the client's socket: the part of
	 * the response still queued here when the client went never left
	 * (also of a body that waited for its resume) */
	if (end == EXCHANGE_END_CLIENT_GONE &&
	    (ex->state == EXCHANGE_RELAYING || (ex->resumable && ex->resume->pending)) &&
	    ex->owner.conn != NULL) {
		uint64_t *sent = &ex->response_body.payload_bytes;
		uint64_t unsent = conn_output_length(ex->owner.conn) +
				  (ex->kept_feeding ? evbuffer_get_length(ex->kept) : 0);

		*sent = unsent < *sent ? *sent - unsent : 0;
	}
	/* the request's unread rest would be taken for the next request */
	if (end == EXCHANGE_END_KEEP_ALIVE && !ex->request_body.done)
		end = EXCHANGE_END_CLOSE;
	if (ex->state == EXCHANGE_HELD || ex->state == EXCHANGE_QUEUED)
		exchange_stop_waiting(ex);
	exchange_trail_backoff_cut(ex);
	exchange_set_state(ex, EXCHANGE_DONE);
	exchange_cancel_tries(ex, end != EXCHANGE_END_TUNNEL);
	if (ex->resumable)
		ex->resume->pending = false;
	exchange_release_retry(ex);
	/* a hedge's response kept and never given to the client lost */
	exchange_count_kept_hedge(ex, false);
	if (ex->gauged_backoff || ex->gauged_held || ex->gauged_queued)
		exchange_gauges_update(ex);
	exchange_timer_stop(ex);
	if (ex->hedge_timer != NULL)
		timer_stop(ex->hedge_timer);
	exchange_log(ex, end == EXCHANGE_END_TUNNEL ? &tunnel_log : NULL);
	if (end != EXCHANGE_END_CLIENT_GONE) {
		if (ex->body_watched)
			ex->owner.watch_body(ex->owner.arg, false);
		ex->owner.ended(ex->owner.arg, end, ex->tunnel, tunnel_log);
	}
	ex->tunnel = NULL;
	if (ex->busy == 0)
		exchange_free(ex);
}

void exchange_finish(struct exchange *ex)
{
	exchange_close(ex, ex->client_keep_after ? EXCHANGE_END_KEEP_ALIVE : EXCHANGE_END_CLOSE,
		       NULL);
}

void exchange_finish_tunnel(struct exchange *ex)
{
	exchange_close(ex, EXCHANGE_END_TUNNEL, NULL);
}

/* An answer's text without the status it begins with ("503 the proxy is
 * shutting down: ..."), for a note where that answer was never sent. */
static const char *exchange_text_without_status(const char *text, int status)
{
	char code[8];

	snprintf(code, sizeof(code), "%d ", status);
	return strncmp(text, code, strlen(code)) == 0 ? text + strlen(code) : text;
}

void exchange_respond_error(struct exchange *ex, int status, const char *text)
{
	if (ex->resumable && ex->resume->pending) {
		/* the client has a 200 head already: no error of ours fits after
		 * it, and the note does not name one */
		exchange_resume_give_up(ex, exchange_text_without_status(text, status));
		return;
	}
	ex->client_keep_after = ex->client_keep_alive && ex->request_body.done && !ex->is_connect &&
				!ex->owner.closing(ex->owner.arg);
	ex->status = status;
	/* the access line says why, as for an answer before any exchange;
	 * text may be the caller's buffer: the line is written before this
	 * returns (exchange_finish()) */
	if (ex->note == NULL)
		ex->note = text;
	/* the access log's bytes: no upstream body reached the client, ours did */
	ex->response_body.payload_bytes =
		reply_error(conn_output(ex->owner.conn), status, text, ex->attempts,
			    !ex->client_keep_after  ? REPLY_CLOSE
			    : ex->client_minor == 0 ? REPLY_KEEP_HTTP10
						    : REPLY_KEEP,
			    ex->head_request);
	exchange_finish(ex);
}

void exchange_break_response(struct exchange *ex, const char *why)
{
	/* a body the client reads until the close (close-delimited, or chunked
	 * decoded for an HTTP/1.0 client) looks complete after a clean close,
	 * cut short or not: reset instead, so the client sees the error. So
	 * does a chunked one whose last chunk went out, cut in its trailer
	 * section (RFC 9112 section 8: complete once the last chunk came) */
	bool until_close = ex->response_body.mode == BODY_MODE_UNTIL_CLOSE ||
			   ex->response_body.mode == BODY_MODE_CHUNKED_DECODE ||
			   (ex->response_body.mode == BODY_MODE_CHUNKED &&
			    http1_chunked_past_last_chunk(&ex->response_body.chunked));

	exchange_close(ex, until_close ? EXCHANGE_END_RESET : EXCHANGE_END_BROKEN, why);
}

/* retry.mode: observe: decide as enforce would, as if the body had been
 * kept when it would have been, with no other request's retries in the
 * way; but what would be a retry is counted and logged, and the outcome
 * goes to the client as final. Spends nothing, holds nothing. */
static struct retry_verdict exchange_observe(struct exchange *ex, struct retry_facts *facts)
{
	struct retry_verdict verdict;

	facts->body_streamed = ex->request_body_started && !ex->observe_replayable;
	/* no retry waits in observe, so none is in the way of this one, even
	 * under a cap of 0 */
	facts->pending_retries = 0;
	facts->max_pending_retries = 1;
	facts->budget_allows = true;
	facts->upstream_down = false;
	verdict = retry_decide(&ex->route->retry, facts, &ex->proxy->rng);
	if (verdict.kind == RETRY_VERDICT_RETRY && !verdict.immediate) {
		ex->would_retry = retry_cause_name(verdict.cause);
		metrics_would_retry(ex->route->series, verdict.cause);
		verdict.kind = RETRY_VERDICT_FINAL;
		verdict.wait_ms = 0;
	} else if (verdict.kind == RETRY_VERDICT_GIVE_UP) {
		ex->gave_up = verdict.reason;
	}
	return verdict;
}

bool exchange_may_replace_stale(const struct exchange *ex)
{
	struct retry_facts facts = {
		.outcome = TRY_STALE,
		.idempotent = ex->idempotent,
		.body_streamed = ex->request_body_started,
		.attempts = ex->attempts,
		.elapsed_ms = exchange_ms_since(ex->first_try_ms),
	};

	return retry_stale_replaceable(&ex->route->retry, &facts);
}

/* exchange_decide() with the response's x-should-retry. */
static struct retry_verdict exchange_decide_should(struct exchange *ex, enum try_outcome outcome,
						   int status, bool connecting,
						   uint64_t retry_after_ms, bool too_large,
						   enum retry_should should)
{
	const struct retry_policy *policy = &ex->route->retry;
	uint64_t now = timer_now_ms();
	struct retry_facts facts = {
		.outcome = outcome,
		.status = status,
		.connecting = connecting,
		.is_connect = ex->is_connect,
		.idempotent = ex->idempotent,
		.body_streamed = ex->request_body_started,
		.body_too_large = ex->body_too_large,
		.body_unread = ex->json_pending && ex->body_too_large,
		.body_chunked_only = ex->upstream_http10 && ex->spool != NULL &&
				     ex->request_body.mode == BODY_MODE_CHUNKED,
		.response_started = ex->state == EXCHANGE_RELAYING,
		.response_too_large = too_large,
		.attempts = ex->attempts,
		.unwaited = ex->unwaited,
		.elapsed_ms = exchange_ms_since(ex->first_try_ms),
		.retry_after_ms = retry_after_ms,
		.should_retry = should,
		.max_pending_retries = ex->config->limits.max_pending_retries,
		.upstream_down = ex->upstream != NULL && upstream_down(ex->upstream),
		.hold_when_down = ex->config->health.hold && ex->config->health.down_after > 0,
	};
	struct retry_verdict verdict;

	/* whatever is decided now supersedes a kept response's pending verdict */
	ex->kept_undecided = false;
	if (ex->observe)
		return exchange_observe(ex, &facts);
	/* this exchange's own place, if it held one, is not counted against it */
	exchange_release_retry(ex);
	facts.pending_retries = ex->proxy->backoff_pending;
	facts.budget_allows =
		ex->budget != NULL && retry_budget_allows(ex->budget, &policy->budget, now);
	verdict = retry_decide(policy, &facts, &ex->proxy->rng);
	switch (verdict.kind) {
	case RETRY_VERDICT_RETRY:
		ex->gave_up = RETRY_GIVE_UP_NONE;
		if (verdict.immediate)
			break;
		/* the budget is spent when the backoff starts, looked at again
		 * then (exchange_schedule_retry()): a retryable response's body
		 * may yet break off or overflow, and the deadline pass meanwhile */
		ex->next_wait_ms = verdict.wait_ms;
		/* a wait the response asked for runs from its head, which is
		 * now: reading its body until the backoff starts takes from it */
		ex->next_backoff_ms = verdict.backoff_ms;
		ex->next_asked_until = verdict.asked ? now + verdict.wait_ms : 0;
		ex->retry_cause = verdict.cause;
		/* the place is taken now, not when the backoff starts: a
		 * retryable response is kept in memory until then */
		ex->retry_reserved = true;
		ex->proxy->backoff_pending++;
		exchange_gauges_update(ex);
		break;
	case RETRY_VERDICT_GIVE_UP:
		ex->gave_up = verdict.reason;
		/* max_pending_retries gives the same reason; a retry it refused
		 * while the budget allowed one is no demand for the fleet's, nor
		 * is one a response too large to keep would have stopped anyway */
		if (verdict.reason == RETRY_GIVE_UP_BUDGET && ex->budget != NULL &&
		    !facts.budget_allows && !facts.response_too_large)
			retry_budget_note_refused(ex->budget);
		break;
	case RETRY_VERDICT_FINAL:
	case RETRY_VERDICT_HOLD:
		break;
	}
	return verdict;
}

uint64_t exchange_wait_left(uint64_t until)
{
	uint64_t now;

	if (until == 0)
		return 0;
	now = timer_now_ms();
	return until > now ? until - now : 0;
}

struct retry_verdict exchange_decide(struct exchange *ex, enum try_outcome outcome, int status,
				     bool connecting, uint64_t retry_after_ms, bool too_large)
{
	return exchange_decide_should(ex, outcome, status, connecting, retry_after_ms, too_large,
				      RETRY_SHOULD_UNSET);
}

struct retry_verdict exchange_decide_response(struct exchange *ex, int status,
					      uint64_t retry_after_ms, bool too_large,
					      enum retry_should should)
{
	return exchange_decide_should(ex, TRY_RESPONSE, status, false, retry_after_ms, too_large,
				      should);
}

/* The wait is over: never before it has passed whole (the trail logs it, a
 * Retry-After asked for it), though libevent's clock is coarse (timer.h). */
static void exchange_backoff_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	exchange_enter(ex);
	exchange_start_try(ex);
	exchange_leave(ex);
}

/* The retry decided will not happen after all: its place goes back, and
 * the client gets the last response kept, else status with text. */
static void exchange_drop_retry(struct exchange *ex, enum retry_give_up reason, int status,
				const char *text)
{
	ex->gave_up = reason;
	exchange_release_retry(ex);
	if (ex->kept != NULL)
		exchange_deliver_kept(ex);
	else
		exchange_respond_error(ex, status, text);
}

/* Would a try after wait_ms start after a drain's answer time? */
static bool exchange_past_drain(const struct exchange *ex, uint64_t wait_ms)
{
	return ex->proxy->draining && timer_now_ms() + wait_ms >= ex->proxy->drain_answer_ms;
}

/* No further try: the proxy is draining and will be gone before it could
 * run. The answer the deadline would give, with a 503 of our own as the
 * fallback: it is the proxy, not the upstream, that stops here. */
static void exchange_drop_retry_draining(struct exchange *ex)
{
	char text[160];
	/* a first try that never left the connection queue gave nothing up; a
	 * held request did, as its deadline's answer says */
	enum retry_give_up reason = ex->state == EXCHANGE_QUEUED && ex->attempts == 0
					    ? RETRY_GIVE_UP_NONE
					    : RETRY_GIVE_UP_DEADLINE;

	ex->note = "draining";
	if (ex->attempts == 0)
		snprintf(text, sizeof(text),
			 "503 the proxy is shutting down: the request was not sent");
	else
		snprintf(text, sizeof(text),
			 "503 the proxy is shutting down: no try after attempt %u", ex->attempts);
	exchange_drop_retry(ex, reason, 503, text);
}

static void exchange_upstream_unavailable(struct exchange *ex);

void exchange_schedule_retry(struct exchange *ex)
{
	uint64_t now;

	/* the time a response asked for is a point in time since its head
	 * came (a Retry-After date above all): the body read meanwhile does
	 * not push it back, but the backoff still counts from now */
	if (ex->next_asked_until != 0) {
		uint64_t left = exchange_wait_left(ex->next_asked_until);

		ex->next_wait_ms = left > ex->next_backoff_ms ? left : ex->next_backoff_ms;
	}
	/* reading a kept response's body takes time too: the next try must
	 * still start within the deadline */
	if (!retry_within_deadline(&ex->route->retry, exchange_ms_since(ex->first_try_ms),
				   ex->next_wait_ms)) {
		exchange_drop_retry(ex, RETRY_GIVE_UP_DEADLINE, 504, "504 retry deadline passed");
		return;
	}
	if (exchange_past_drain(ex, ex->next_wait_ms)) {
		exchange_drop_retry_draining(ex);
		return;
	}
	/* health.hold: false, and the upstream marked down since the retry was
	 * decided (while a kept response's body was read): no try follows the
	 * backoff while it stays down, so the answer goes now, as from
	 * exchange_try_failed() */
	if (!ex->config->health.hold && ex->upstream != NULL && upstream_down(ex->upstream)) {
		ex->gave_up = RETRY_GIVE_UP_UPSTREAM_DOWN;
		exchange_release_retry(ex);
		exchange_upstream_unavailable(ex);
		return;
	}
	/* the budget allowed the retry when it was decided; others may have
	 * spent it while this one's response was read */
	if (ex->budget == NULL ||
	    !retry_budget_allows(ex->budget, &ex->route->retry.budget, timer_now_ms())) {
		if (ex->budget != NULL)
			retry_budget_note_refused(ex->budget);
		exchange_drop_retry(ex, RETRY_GIVE_UP_BUDGET, 502, "502 retry budget spent");
		return;
	}
	retry_budget_spend(ex->budget, timer_now_ms());
	exchange_reframe_for_http10(ex);
	if (ex->try_count > 0)
		ex->tries[ex->try_count - 1].wait_ms = ex->next_wait_ms;
	log_debug("%.*s %.*s: try %u failed; next in %llu ms", (int)ex->method_len, ex->method,
		  (int)ex->target_len, ex->target, ex->attempts,
		  (unsigned long long)ex->next_wait_ms);
	exchange_set_state(ex, EXCHANGE_BACKOFF);
	metrics_retry(ex->route->series, ex->retry_cause);
	ex->retried = true;
	/* the wait counts from now, not from when this loop pass began */
	now = timer_now_ms();
	ex->backoff_until_ms = now + ex->next_wait_ms;
	exchange_timer_start(ex, exchange_backoff_cb, now, ex->next_wait_ms);
}

void exchange_drain_begins(struct exchange *ex)
{
	if (ex->state == EXCHANGE_BACKOFF && ex->backoff_until_ms >= ex->proxy->drain_answer_ms)
		exchange_drain_answer(ex);
}

bool exchange_drain_answer(struct exchange *ex)
{
	bool given;

	/* the trail shows the time waited, as a deadline's answer does */
	switch (ex->state) {
	case EXCHANGE_TRYING:
		/* tries in flight would be cut when the drain ends: an answer
		 * held meanwhile (kept, or too large to keep) goes now, with
		 * the time left for writing it */
		exchange_enter(ex);
		given = exchange_give_held(ex);
		exchange_leave(ex);
		return given;
	case EXCHANGE_BACKOFF:
		exchange_trail_backoff_cut(ex);
		break;
	case EXCHANGE_HELD:
		exchange_held_count_wait(ex);
		break;
	case EXCHANGE_QUEUED:
		exchange_queue_count_wait(ex);
		break;
	case EXCHANGE_READING_BODY:
		/* a body kept to be re-sent, still arriving: no try began, and
		 * none could end before the drain does. As client_timeout would
		 * answer it, a 408 while there is time to write it, rather than
		 * a bare close at drain_timeout (RFC 9110 section 15.5.9). One
		 * just complete is on its way to its first try, which the drain
		 * lets start as a request without a body's */
		if (ex->request_body.done)
			return false;
		log_info("%.*s %.*s: request body not complete when the drain ended; answering 408",
			 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target);
		exchange_enter(ex);
		exchange_respond_error(ex, 408,
				       "request body not complete before the proxy shut down");
		exchange_leave(ex);
		return true;
	default:
		return false;
	}
	exchange_enter(ex);
	exchange_timer_stop(ex);
	exchange_drop_retry_draining(ex);
	exchange_leave(ex);
	return true;
}

unsigned exchange_tries_left(const struct exchange *ex)
{
	unsigned n = 0;
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		n += ex->slots[i].state != EXCHANGE_TRY_IDLE;
	return n;
}

/* No try can start: the upstream is down (or, waiting for a connect in
 * doubt, the deadline came first). The last response received beats a 502
 * of our own. */
static void exchange_upstream_unavailable(struct exchange *ex)
{
	char text[512];

	if (ex->kept != NULL) {
		exchange_deliver_kept(ex);
		return;
	}
	ex->note = "upstream down";
	if (upstream_down(ex->upstream))
		snprintf(text, sizeof(text), "502 upstream %s is down (%u attempt%s)",
			 upstream_name(ex->upstream), ex->attempts, ex->attempts == 1 ? "" : "s");
	else
		snprintf(text, sizeof(text),
			 "502 no connection to upstream %s before the deadline (%u attempt%s)",
			 upstream_name(ex->upstream), ex->attempts, ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, 502, text);
}

/* A held or queued request whose body, or a next request pipelined behind
 * it, waits unread behind its client's input limit reads nothing from its
 * client, so no close of the client's is seen: it looks for one this often
 * until its wait ends. */
#define EXCHANGE_HANGUP_LOOK_MS 500

/* Could a close of the client's hide behind bytes the proxy does not read?
 * Its body still owed, or input at the limit (a next request it pipelined). */
static bool exchange_close_may_hide(const struct exchange *ex)
{
	return !ex->request_body.done ||
	       (ex->owner.conn != NULL && conn_input_at_limit(ex->owner.conn));
}

uint64_t exchange_wait_timer_ms(const struct exchange *ex, uint64_t left)
{
	if (exchange_close_may_hide(ex) && left > EXCHANGE_HANGUP_LOOK_MS)
		return EXCHANGE_HANGUP_LOOK_MS;
	return left;
}

static void exchange_held_deadline_cb(evutil_socket_t fd, short what, void *arg);

/* Set a held request's timer again from now, before its deadline: for the
 * deadline, or sooner to look for a close hidden behind unread input.
 * False once the deadline is reached. */
static bool exchange_held_timer_rearm(struct exchange *ex)
{
	uint64_t deadline = ex->route->retry.deadline_ms;
	uint64_t now = timer_now_ms();
	uint64_t elapsed = exchange_ms_between(ex->first_try_ms, now);

	if (elapsed >= deadline)
		return false;
	exchange_timer_start(ex, exchange_held_deadline_cb, now,
			     exchange_wait_timer_ms(ex, deadline - elapsed));
	return true;
}

/* A held request's deadline passed before its upstream came back, or it is
 * time to look whether its client left. */
static void exchange_held_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	if (exchange_held_timer_rearm(ex)) {
		/* its EOF, at the end of this pass, drops the request */
		if (ex->owner.conn != NULL)
			conn_notice_hangup(ex->owner.conn);
		return;
	}
	exchange_enter(ex);
	upstream_unwait(&ex->waiter);
	exchange_gauges_update(ex);
	/* the trail shows the time held before the answer went out */
	exchange_held_count_wait(ex);
	ex->gave_up = RETRY_GIVE_UP_DEADLINE;
	exchange_release_retry(ex);
	exchange_upstream_unavailable(ex);
	exchange_leave(ex);
}

/* The upstream is back (or a connect in doubt ended): try now. */
static bool exchange_released(struct upstream_waiter *waiter)
{
	struct exchange *ex =
		(struct exchange *)((char *)waiter - offsetof(struct exchange, waiter));
	bool tried;

	exchange_enter(ex);
	exchange_gauges_update(ex);
	exchange_timer_stop(ex);
	/* the trail shows the time held as the wait before the next try */
	exchange_held_count_wait(ex);
	tried = exchange_start_try(ex);
	exchange_leave(ex);
	return tried;
}

/* Hold ex; retry: for a retry decided after a failed try (a HOLD verdict),
 * counted as scheduled as a backoff's is once the hold begins. */
static void exchange_hold_as(struct exchange *ex, bool retry, enum retry_cause cause)
{
	uint64_t now = timer_now_ms();
	uint64_t elapsed = exchange_ms_between(ex->first_try_ms, now);
	const struct retry_policy *policy = &ex->route->retry;

	if (!retry_within_deadline(policy, elapsed, 0)) {
		ex->gave_up = RETRY_GIVE_UP_DEADLINE;
		exchange_release_retry(ex);
		exchange_upstream_unavailable(ex);
		return;
	}
	/* a request held for a down upstream keeps its body and last response
	 * like one in backoff, and counts like one; one that only waits for the
	 * connect in doubt to end (a fresh upstream's first) is a request whose
	 * try is about to start, and a cold start with many at once must not
	 * refuse them */
	if (!ex->retry_reserved && upstream_down(ex->upstream)) {
		if (ex->proxy->backoff_pending >= ex->config->limits.max_pending_retries) {
			ex->gave_up = RETRY_GIVE_UP_BUDGET;
			exchange_upstream_unavailable(ex);
			return;
		}
		ex->retry_reserved = true;
		ex->proxy->backoff_pending++;
	}
	if (retry) {
		metrics_retry(ex->route->series, cause);
		ex->retried = true;
		exchange_reframe_for_http10(ex);
	}
	if (ex->state != EXCHANGE_HELD)
		ex->held_since_ms = now;
	exchange_set_state(ex, EXCHANGE_HELD);
	ex->waiter.release = exchange_released;
	upstream_wait(ex->upstream, &ex->waiter);
	exchange_gauges_update(ex);
	exchange_timer_start(ex, exchange_held_deadline_cb, now,
			     exchange_wait_timer_ms(ex, policy->deadline_ms - elapsed));
}

void exchange_held_input_full(struct exchange *ex)
{
	/* the hold began with room in the input, its timer set for the
	 * deadline: a close behind the bytes that filled it is looked for
	 * from now on as for one full from the start */
	exchange_held_timer_rearm(ex);
}

void exchange_hold(struct exchange *ex)
{
	exchange_hold_as(ex, false, RETRY_CAUSE_STATUS);
}

void exchange_hold_retry(struct exchange *ex, enum retry_cause cause)
{
	exchange_hold_as(ex, true, cause);
}

static void exchange_hedge_again(struct exchange *ex);

void exchange_try_failed(struct exchange_try *t, enum try_outcome outcome, const char *reason)
{
	struct exchange *ex = t->ex;
	char text[512];
	/* a connect timeout is a connect failure (SPEC: 502); 504 is for a try
	 * that got no response head in time; a destination refused is 403 */
	int status = outcome == TRY_TIMEOUT ? 504 : outcome == TRY_FORBIDDEN ? 403 : 502;
	bool connecting = t->state == EXCHANGE_TRY_CONNECTING;
	struct retry_verdict verdict;

	/* SPEC "Ambiguous outcome": the request went out and nothing came
	 * back, so the upstream may have done it. Out means some byte of it
	 * reached the kernel: a try whose connection failed before anything
	 * was written cannot have been acted on. A pooled connection found
	 * closed counts too when its write went through: it may have been
	 * closed after reading the request, which the proxy cannot tell from
	 * closed before; not one that answered 408 (a response came). */
	if (ex->conditional && t->state == EXCHANGE_TRY_WAITING && t->up != NULL &&
	    conn_bytes_written(t->up) > t->written_before &&
	    (outcome == TRY_RESET || (outcome == TRY_STALE && !t->byte_seen) ||
	     outcome == TRY_TIMEOUT || outcome == TRY_MALFORMED) &&
	    (ex->lost_after_send == 0 || t->number < ex->lost_after_send))
		ex->lost_after_send = t->number;

	/* a kept response that broke off replaces its own try's record, which
	 * a hedge's may follow by now */
	if (t->state == EXCHANGE_TRY_KEEPING && t->record < ex->try_count) {
		ex->tries[t->record].status = 0;
		ex->tries[t->record].error = try_outcome_name(outcome);
	} else {
		exchange_record_try(ex, 0, try_outcome_name(outcome), t->hedge);
	}
	/* no descriptor for its connect: the proxy's shortage, no upstream's error */
	if (!t->local_failure)
		metrics_upstream_error(ex->proxy->metrics, outcome);
	t->local_failure = false;
	exchange_end_try(t, false);
	log_debug("%.*s %.*s: try %u failed: %s: %s", (int)ex->method_len, ex->method,
		  (int)ex->target_len, ex->target, ex->attempts, try_outcome_name(outcome), reason);
	/* hedged tries still running may yet answer: the last one decides; an
	 * answer too large to keep is all that is left: it ends retrying */
	if (exchange_pass_on_parked(ex))
		return;
	if (exchange_tries_left(ex) > 0) {
		/* hedge.max bounds the tries in flight at once: this one's place
		 * may take another hedge, unless the failure is one no retry
		 * would follow either (retry_decide()): one retry.on leaves
		 * out, a certificate that fails verification, a destination
		 * refused */
		if (outcome != TRY_TLS_VERIFY && outcome != TRY_FORBIDDEN &&
		    retry_on_failure(&ex->route->retry, try_outcome_cause(outcome)))
			exchange_hedge_again(ex);
		return;
	}
	/* a retryable response that came whole while this try raced it says
	 * more than this failure: decide as if it had come alone */
	if (ex->kept_undecided)
		verdict = exchange_decide_response(ex, ex->kept_status,
						   exchange_wait_left(ex->kept_retry_after_until),
						   false, ex->kept_should);
	else
		verdict = exchange_decide(ex, outcome, 0, connecting, 0, false);
	if (verdict.kind == RETRY_VERDICT_HOLD) {
		/* the failure marked the upstream down: wait for it, not a backoff */
		exchange_hold_retry(ex, verdict.cause);
		return;
	}
	if (verdict.kind == RETRY_VERDICT_GIVE_UP &&
	    verdict.reason == RETRY_GIVE_UP_UPSTREAM_DOWN) {
		/* health.hold: false: the 502 names the upstream as down */
		exchange_upstream_unavailable(ex);
		return;
	}
	if (verdict.kind == RETRY_VERDICT_RETRY) {
		if (verdict.immediate) {
			/* a stale pooled connection says nothing about the upstream:
			 * go again at once, on a new connection */
			ex->skip_pool = true;
			ex->unwaited++;
			exchange_reframe_for_http10(ex);
			/* the place its connection held is its own still: it
			 * goes first, not behind requests that came after it
			 * and waited for a place meanwhile */
			ex->queue_released = true;
			exchange_start_try(ex);
			ex->queue_released = false;
		} else {
			exchange_schedule_retry(ex);
		}
		return;
	}
	if (ex->kept != NULL) {
		/* the most recent response beats an error of our own */
		exchange_deliver_kept(ex);
		return;
	}
	/* what the last try met: an upstream that answered was reached */
	snprintf(text, sizeof(text), "%d %s: %s (%u attempt%s)", status,
		 status == 504		     ? "upstream timeout"
		 : outcome == TRY_MALFORMED  ? "invalid response from upstream"
		 : outcome == TRY_FORBIDDEN  ? "destination refused"
		 : outcome == TRY_TLS_VERIFY ? "upstream not trusted"
					     : "upstream unreachable",
		 reason, ex->attempts, ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, status, text);
}

static void exchange_up_read_cb(struct conn *conn, void *arg)
{
	struct exchange_try *t = arg;
	struct exchange *ex = t->ex;

	exchange_enter(ex);
	switch (t->state) {
	case EXCHANGE_TRY_WAITING:
		exchange_read_response_head(t);
		break;
	case EXCHANGE_TRY_KEEPING:
		exchange_keep_response(t);
		break;
	case EXCHANGE_TRY_RELAYING:
		exchange_relay_response(ex);
		break;
	case EXCHANGE_TRY_IDLE:
	case EXCHANGE_TRY_CONNECTING:
		break;
	}
	exchange_leave(ex);
}

/* The upstream took bytes of a request with a body. try_timeout bounds the
 * wait for the response head from the request's last byte on, and before
 * that how long the upstream may take none of the body: a body that keeps
 * moving is not cut, however long it takes to send (a large upload, a slow
 * client). While the try waits for the client's next body bytes,
 * client_timeout is the bound (exchange_watch_body()); a client that waits
 * for the upstream's 100 owes none (until it begins its body anyway), and
 * try_timeout bounds that wait. */
void exchange_request_progress(struct exchange_try *t)
{
	struct exchange *ex = t->ex;

	/* started again by the client's next bytes (exchange_pump_request_body()),
	 * which the upstream may not take at once */
	t->body_awaited =
		conn_output_length(t->up) == 0 && !ex->request_body.done &&
		!exchange_body_queue_pending(t) &&
		(!ex->expect_forwarded || ex->continue_relayed || ex->request_body_started);
	if (t->body_awaited) {
		exchange_try_timeout_stop(t);
		return;
	}
	/* from now on the connection's deadline, as on a pooled one */
	if (t->timer_armed) {
		timer_stop(t->timer);
		t->timer_armed = false;
	}
	conn_set_deadline(t->up, ex->route->retry.try_timeout_ms);
}

static void exchange_up_write_cb(struct conn *conn, void *arg)
{
	struct exchange_try *t = arg;
	struct exchange *ex = t->ex;

	exchange_enter(ex);
	if (exchange_spool_pending(t) && ex->current == t && t->up != NULL)
		exchange_spool_feed(t);
	if (exchange_once_pending(ex) && ex->current == t && t->up != NULL) {
		exchange_memory_feed(ex, ex->replay, conn_output(t->up));
		exchange_pump_request_body(ex);
	}
	if (ex->client_read_paused && ex->current == t) {
		exchange_resume_client(ex);
		exchange_pump_request_body(ex);
	}
	if (ex->has_body && t->state == EXCHANGE_TRY_WAITING && ex->current == t && t->up != NULL)
		exchange_request_progress(t);
	exchange_leave(ex);
}

static void exchange_up_event_cb(struct conn *conn, short what, void *arg)
{
	struct exchange_try *t = arg;
	struct exchange *ex = t->ex;

	exchange_enter(ex);
	exchange_upstream_closed(t, what);
	exchange_leave(ex);
}

/* try_timeout passed with no response head. */
static void exchange_try_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange_try *t = arg;
	struct exchange *ex = t->ex;

	exchange_enter(ex);
	t->timer_armed = false;
	if (t->state == EXCHANGE_TRY_CONNECTING && t->admitted) {
		/* try_timeout ended a new connection's connect (or its lookup)
		 * before connect_timeout could: to the upstream's health that is
		 * a connect that timed out, not one given up for another reason;
		 * else a try_timeout below connect_timeout would never let an
		 * upstream that drops SYNs be found down */
		t->admitted = false;
		upstream_connect_end(ex->upstream, &ex->config->health, UPSTREAM_CONNECT_FAILED);
	}
	/* and to limits.dns_cache, as one connect_timeout ended: the kept
	 * answer may be what led nowhere (a container that came back on
	 * another address), so the retry asks again */
	if (t->state == EXCHANGE_TRY_CONNECTING && t->connecting != NULL &&
	    ex->proxy->dns_cache != NULL)
		dns_cache_forget(ex->proxy->dns_cache, ex->endpoint.host);
	if (t->state == EXCHANGE_TRY_CONNECTING || t->state == EXCHANGE_TRY_WAITING)
		exchange_try_failed(t, TRY_TIMEOUT, EXCHANGE_TRY_TIMEOUT_TEXT);
	exchange_leave(ex);
}

void exchange_try_timeout_stop(struct exchange_try *t)
{
	if (t->timer_armed) {
		timer_stop(t->timer);
		t->timer_armed = false;
	}
	if (t->up != NULL)
		conn_set_deadline(t->up, 0);
}

/* A connection for this try is ready: send the request. */
static void exchange_upstream_ready(struct exchange_try *t, struct conn *conn, bool reused)
{
	size_t head_max = t->ex->config->limits.max_header_bytes;

	t->up = conn;
	t->reused = reused;
	t->byte_seen = false;
	t->interim_bytes = 0;
	t->answered_http10 = false;
	t->body_awaited = false;
	t->written_before = conn_bytes_written(conn);
	conn_setcb(conn, exchange_up_read_cb, exchange_up_write_cb, exchange_up_event_cb, t);
	/* a response head may be as long as max_header_bytes: the input must
	 * take it whole, and one byte more to tell it is too long; a trailer
	 * section, held until it ends, as long and its final empty line */
	conn_set_input_limit(conn, head_max + 2 < EXCHANGE_UPSTREAM_READ_HIGH
					   ? EXCHANGE_UPSTREAM_READ_HIGH
					   : head_max + 2);
	conn_set_output_low(conn, EXCHANGE_OUTPUT_LOW);
	conn_set_timeouts(conn, 0, 0);
	/* a try on a pooled connection started just now: the conn's own lazy
	 * timer keeps its try_timeout, and the try's timer stays out of the
	 * loop's timer heap */
	if (!t->timer_armed)
		conn_set_deadline(conn, t->ex->route->retry.try_timeout_ms);
	exchange_try_set_state(t, EXCHANGE_TRY_WAITING);
	conn_read_enable(conn, true);
	exchange_send_request(t);
}

/* CONNECT: the tunnel's upstream is connected; the owner takes both ends. */
static void exchange_tunnel_connected(struct exchange_try *t, struct conn *conn)
{
	struct exchange *ex = t->ex;

	ex->status = 200;
	exchange_record_try(ex, 200, NULL, false);
	reply_connect_established(conn_output(ex->owner.conn));
	ex->tunnel = conn;
	exchange_finish_tunnel(ex);
}

static void exchange_connected_cb(struct conn *conn, enum try_outcome failure, bool local,
				  const char *reason, void *arg)
{
	struct exchange_try *t = arg;
	struct exchange *ex = t->ex;

	exchange_enter(ex);
	t->connecting = NULL;
	if (t->placed) {
		/* the connection holds the place from now on, pooled or not */
		t->placed = false;
		if (conn != NULL)
			conn_on_closed(conn, upstream_slot_closed, ex->upstream);
		else
			upstream_slot_put(ex->upstream);
	}
	if (t->admitted) {
		enum upstream_connect_result result = UPSTREAM_CONNECT_FAILED;

		/* a TLS 1.3 server that asked for a client certificate may
		 * refuse the handshake yet, with the first read
		 * (exchange_closed_before_head); a certificate that fails
		 * verification came from a live upstream */
		if (conn != NULL && conn_ssl(conn) != NULL &&
		    tls_client_may_be_refused(conn_ssl(conn)))
			result = UPSTREAM_CONNECT_MADE_IN_DOUBT;
		else if (conn != NULL || failure == TRY_TLS_VERIFY)
			result = UPSTREAM_CONNECT_MADE;
		/* no descriptor left for it: the proxy's shortage, which says
		 * nothing of the upstream (nor marks it down); every address
		 * the proxy's own admin endpoint: nothing was connected to */
		else if (local || failure == TRY_FORBIDDEN)
			result = UPSTREAM_CONNECT_ABANDONED;
		t->admitted = false;
		upstream_connect_end(ex->upstream, &ex->config->health, result);
	}
	if (conn == NULL) {
		t->local_failure = local;
		exchange_try_failed(t, failure, reason);
	} else if (ex->is_connect)
		exchange_tunnel_connected(t, conn);
	else
		exchange_upstream_ready(t, conn, false);
	exchange_leave(ex);
}

/* A free try slot. */
static struct exchange_try *exchange_free_slot(struct exchange *ex)
{
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		if (ex->slots[i].state == EXCHANGE_TRY_IDLE)
			return &ex->slots[i];
	return NULL;
}

/* Count a try as started in slot t at now_ms (timer_now_ms()) and
 * give it try_timeout to get a head: on its own timer while it connects (a
 * pooled connection's try has it as the conn's deadline, set in
 * exchange_upstream_ready). */
static void exchange_begin_try(struct exchange *ex, struct exchange_try *t, bool pooled,
			       uint64_t now_ms)
{
	exchange_release_retry(ex);
	/* only now: a try that waited for a place or for the upstream's
	 * health still must not take a pooled connection when released */
	ex->skip_pool = false;
	ex->attempts++;
	metrics_try(ex->route->series);
	exchange_set_state(ex, EXCHANGE_TRYING);
	t->number = ex->attempts;
	ex->current = t;
	if (!pooled) {
		if (t->timer == NULL)
			t->timer = timer_new(ex->proxy->base, exchange_try_timeout_cb, t);
		timer_start(t->timer, now_ms, ex->route->retry.try_timeout_ms);
		t->timer_armed = true;
	}
	exchange_try_set_state(t, EXCHANGE_TRY_CONNECTING);
}

/* Open a new connection for try t, begun at now_ms, its connect counted in
 * the upstream's health; address_shift picks the resolved address to start
 * at. */
static void exchange_connect(struct exchange *ex, struct exchange_try *t, unsigned address_shift,
			     uint64_t now_ms)
{
	t->placed = !ex->is_connect;
	t->admitted = !ex->is_connect;
	t->connecting = upstream_connect_start(ex->proxy, &ex->endpoint, ex->tls, ex->pool_key,
					       now_ms, ex->config->limits.connect_timeout_ms,
					       address_shift, exchange_connected_cb, t);
}

/* May a try open its own connection now? The upstream's health may hold the
 * request (it waits, EXCHANGE_HELD) or refuse it (502). */
static bool exchange_admit(struct exchange *ex)
{
	if (ex->is_connect)
		return true;
	switch (upstream_admit(ex->upstream, &ex->config->health)) {
	case UPSTREAM_GO:
		return true;
	case UPSTREAM_WAIT:
		/* observe holds nothing: a down upstream answers 502 at once, as
		 * with health.hold: false, and while its health is in doubt the
		 * request connects on its own rather than wait for another's
		 * connect (which could end in a hold until the deadline) */
		if (ex->observe && upstream_down(ex->upstream)) {
			exchange_release_retry(ex);
			exchange_upstream_unavailable(ex);
			return false;
		}
		if (ex->observe) {
			upstream_admit_anyway(ex->upstream);
			return true;
		}
		exchange_hold(ex);
		return false;
	case UPSTREAM_REFUSE:
		/* health.hold: false; a first try refused gave nothing up, a
		 * retry did */
		if (ex->attempts > 0)
			ex->gave_up = RETRY_GIVE_UP_UPSTREAM_DOWN;
		exchange_release_retry(ex);
		exchange_upstream_unavailable(ex);
		return false;
	}
	return true;
}

static void exchange_arm_hedge(struct exchange *ex, uint64_t now_ms);
static void exchange_hedge_cb(evutil_socket_t fd, short what, void *arg);

/* A pooled connection may have been closed by the upstream a moment ago,
 * and then the request goes again at once on a new one (retry.c,
 * retry_stale_replaceable()). Only a request that can go again takes that
 * chance: safe to repeat (under observe, not by a key it goes without),
 * and its body, if any, kept whole (observe keeps none; one over
 * replay_buffer and not spooled goes once). */
static bool exchange_may_use_pool(const struct exchange *ex)
{
	if (ex->is_connect || !ex->idempotent || ex->skip_pool || ex->observe_unkeyed)
		return false;
	return !ex->has_body ||
	       (!ex->observe && ex->replay != NULL && !ex->body_once && !ex->body_too_large);
}

bool exchange_start_try(struct exchange *ex)
{
	struct exchange_try *t;
	struct conn *pooled = NULL;
	bool said_http10 = false;
	uint64_t now;

	/* a request released from its wait after a drain's answer time (a
	 * connect in doubt ended, a place came free) is answered instead */
	if (exchange_past_drain(ex, 0) && exchange_drain_answer(ex))
		return false;
	/* a client that left while its request waited (a try before this one,
	 * a hold, a queue, its body), unread bytes behind the input limit (its
	 * own body, or a next request it pipelined): nothing more goes
	 * upstream (SPEC); its EOF, at the end of this pass, drops the request.
	 * A first try straight from the head has not waited: no look */
	if (ex->owner.conn != NULL && (ex->first_try_ms != 0 || !ex->request_body.done) &&
	    conn_notice_hangup(ex->owner.conn))
		return false;
	/* the deadline counts from the first try, or from when it was first
	 * held; the try's timers count from now (the first try's clock reading
	 * serves both) */
	now = timer_now_ms();
	if (ex->first_try_ms == 0)
		ex->first_try_ms = now;
	if (ex->upstream == NULL && !ex->is_connect)
		ex->upstream = upstreams_hold(ex->proxy->upstreams, &ex->endpoint);
	if (exchange_may_use_pool(ex) &&
	    /* a pooled connection goes to the oldest waiting request first */
	    (ex->queue_released || !upstream_slot_waiters(ex->upstream))) {
		exchange_close_over_cap(ex);
		pooled = pool_take(ex->proxy->pool, ex->pool_key, &said_http10);
	}
	/* on a new connection, what the upstream's latest answer said; none
	 * yet: it may speak HTTP/1.0, and a body kept whole goes by length */
	if (pooled == NULL && ex->request_body.mode == BODY_MODE_CHUNKED && ex->upstream != NULL) {
		if (upstream_answered_http10(ex->upstream))
			said_http10 = true;
		else if (!upstream_version_heard(ex->upstream))
			exchange_reframe_for_unheard(ex);
	}
	/* the server answered in HTTP/1.0 (this connection's last request, or
	 * its latest answer on any): it gets no chunked body (RFC 9112
	 * section 6.1), as a retry after such an answer does not. A body in
	 * the spool goes only as it came, and gives up its retries only once
	 * this request's own answer says so */
	if (said_http10 && ex->spool == NULL) {
		ex->upstream_http10 = true;
		exchange_reframe_for_http10(ex);
	}
	if (pooled == NULL && !ex->is_connect && !exchange_take_connection_place(ex))
		return true;
	if (pooled == NULL && !exchange_admit(ex)) {
		if (!ex->is_connect)
			upstream_slot_put(ex->upstream);
		return true;
	}
	t = exchange_free_slot(ex);
	exchange_begin_try(ex, t, pooled != NULL, now);
	exchange_arm_hedge(ex, now);
	if (pooled != NULL) {
		metrics_pool_reuse(ex->proxy->metrics);
		exchange_upstream_ready(t, pooled, true);
		return true;
	}
	/* each try starts one address further into the name's list: a retry
	 * after an address answered badly goes to another first */
	exchange_connect(ex, t, t->number - 1, now);
	return true;
}

/* retry.hedge: when the try just started (at now_ms, timer_now_ms())
 * has no response head after hedge.after, another may race it. Only a
 * request without a body can be sent twice at once; the rest is decided
 * when the timer fires. */
static void exchange_arm_hedge(struct exchange *ex, uint64_t now_ms)
{
	const struct hedge_policy *hedge = &ex->route->retry.hedge;

	if (hedge->after_ms == 0 || ex->is_connect || ex->has_body || ex->observe || ex->upgrade)
		return;
	/* a resume continues a body already flowing: nothing to race */
	if (ex->resumable && ex->resume->pending)
		return;
	if (ex->hedge_timer == NULL)
		ex->hedge_timer = timer_new(ex->proxy->base, exchange_hedge_cb, ex);
	timer_start(ex->hedge_timer, now_ms, hedge->after_ms);
}

unsigned exchange_tries_racing(const struct exchange *ex)
{
	unsigned n = 0;
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		n += ex->slots[i].state == EXCHANGE_TRY_CONNECTING ||
		     ex->slots[i].state == EXCHANGE_TRY_WAITING;
	return n;
}

/* May one more try race those in flight now (retry_hedge_allowed)? */
static bool exchange_hedge_allowed(struct exchange *ex)
{
	const struct retry_policy *policy = &ex->route->retry;
	struct hedge_facts facts = {
		.method = ex->method,
		.method_len = ex->method_len,
		.idempotent = ex->idempotent,
		.conditional = ex->conditional,
		.body = ex->has_body,
		.keyed = idempotency_key_sent(ex->request_head, ex->request_head_len),
		.attempts = ex->attempts,
		.in_flight = exchange_tries_racing(ex),
		.head_seen = exchange_tries_left(ex) > exchange_tries_racing(ex),
		.response_started = ex->state == EXCHANGE_RELAYING,
		.elapsed_ms = exchange_ms_since(ex->first_try_ms),
		.budget_allows = ex->budget != NULL &&
				 retry_budget_allows(ex->budget, &policy->budget, timer_now_ms()),
	};

	return ex->state == EXCHANGE_TRYING && retry_hedge_allowed(policy, &policy->hedge, &facts);
}

/* A hedge's new connection: a free place under max_upstream_connections
 * (a hedge never waits for one) and the upstream's health say go. */
static bool exchange_hedge_admit(struct exchange *ex)
{
	/* a hedge goes on a new connection, so an idle pooled one gives up
	 * its place to it as to a try that may not reuse one; not while
	 * requests wait for a place, which come first, nor when the
	 * upstream's health would not let the hedge connect (down, or in
	 * doubt with a connect under way) */
	if (!exchange_take_place(ex, false,
				 upstream_admission(ex->upstream, &ex->config->health) ==
					 UPSTREAM_GO))
		return false;
	if (upstream_admit(ex->upstream, &ex->config->health) == UPSTREAM_GO)
		return true;
	upstream_slot_put(ex->upstream);
	return false;
}

/* hedge.after passed with no response head: race another try on a new
 * connection, starting at another of the upstream's addresses. */
static void exchange_hedge_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	struct exchange_try *t;
	uint64_t now = timer_now_ms();
	unsigned racing;

	exchange_enter(ex);
	racing = exchange_tries_racing(ex);
	t = exchange_free_slot(ex);
	/* a hedge never waits for the upstream: while its health is in doubt
	 * the try in flight finds out */
	if (t != NULL && !exchange_past_drain(ex, 0) && exchange_hedge_allowed(ex) &&
	    exchange_hedge_admit(ex)) {
		retry_budget_spend(ex->budget, now);
		exchange_begin_try(ex, t, false, now);
		t->hedge = true;
		ex->unwaited++;
		ex->hedged = true;
		log_debug("%.*s %.*s: no response head after %llu ms: hedge, try %u",
			  (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			  (unsigned long long)ex->route->retry.hedge.after_ms, ex->attempts);
		/* the try's own place in the address list, as every try's
		 * (exchange_start_try()): tries in flight all start apart */
		exchange_connect(ex, t, t->number - 1, now);
		if (racing + 1 < 1 + ex->route->retry.hedge.max)
			exchange_arm_hedge(ex, now);
	} else if (t != NULL && !exchange_past_drain(ex, 0) && exchange_hedge_allowed(ex) &&
		   upstream_admission(ex->upstream, &ex->config->health) != UPSTREAM_GO) {
		/* the upstream's health kept it back (down, or in doubt with a
		 * connect under way, often this request's own first one):
		 * asked again hedge.after later, once it may be proven */
		exchange_arm_hedge(ex, now);
	}
	exchange_leave(ex);
}

/* A try in a hedge race failed while others still wait for a head: with
 * fewer than 1 + hedge.max in flight, the hedge timer runs again unless it
 * runs still. From now, so that hedges that fail at once come no faster
 * than one per hedge.after. Not while a retryable answer kept whole waits
 * to decide: after one, no more hedges start (its try has ended, so
 * exchange_hedge_allowed() does not see it). */
static void exchange_hedge_again(struct exchange *ex)
{
	if (ex->hedge_timer == NULL || timer_pending(ex->hedge_timer) || ex->kept_undecided)
		return;
	if (exchange_tries_racing(ex) == 0 || !exchange_hedge_allowed(ex))
		return;
	exchange_arm_hedge(ex, timer_now_ms());
}

void exchange_stop_hedging(struct exchange *ex)
{
	if (ex->hedge_timer != NULL)
		timer_stop(ex->hedge_timer);
}

void exchange_cancel_racing(struct exchange *ex, struct exchange_try *winner)
{
	struct access_try own;
	bool moved = false;
	size_t i;

	exchange_stop_hedging(ex);
	if (!ex->hedged)
		return; /* one try at a time: nothing races the winner */
	/* the trail ends with the winner: the losers go before it. Its record
	 * is the last one unless it was kept (too large to keep, it waited
	 * while others ended after its head) */
	if (winner != NULL && winner->record < ex->try_count) {
		own = ex->tries[winner->record];
		memmove(&ex->tries[winner->record], &ex->tries[winner->record + 1],
			(ex->try_count - winner->record - 1) * sizeof(*ex->tries));
		ex->try_count--;
		moved = true;
	}
	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++) {
		struct exchange_try *t = &ex->slots[i];

		if (t == winner || t->state == EXCHANGE_TRY_IDLE)
			continue;
		/* a try keeping a retryable response has its record already */
		if (t->state != EXCHANGE_TRY_KEEPING)
			exchange_record_try(ex, 0, "cancelled", t->hedge);
		/* closed, never pooled: its response may be on its way */
		exchange_end_try(t, false);
	}
	if (moved) {
		exchange_record_try(ex, own.status, own.error, own.hedge);
		ex->tries[ex->try_count - 1].wait_ms = own.wait_ms;
		winner->record = ex->try_count - 1;
	}
}

void exchange_run(struct exchange *ex)
{
	exchange_enter(ex);
	if (ex->body_over_limit) {
		char text[96];

		/* before 100 Continue: the client need not send the body at all */
		snprintf(text, sizeof(text), "request body of %llu bytes is over max_body_bytes",
			 (unsigned long long)ex->request_body.remaining);
		exchange_respond_error(ex, 413, text);
		exchange_leave(ex);
		return;
	}
	if (ex->expect_continue && !ex->expect_forwarded && !ex->request_body.done &&
	    ex->client_minor >= 1)
		EXCHANGE_ADD_LITERAL(conn_output(ex->owner.conn), "HTTP/1.1 100 Continue\r\n\r\n");
	if (ex->replay != NULL && !ex->request_body.done) {
		exchange_set_state(ex, EXCHANGE_READING_BODY);
		exchange_read_request_body(ex);
	} else {
		exchange_start_try(ex);
	}
	exchange_leave(ex);
}

void exchange_client_drained(struct exchange *ex)
{
	struct exchange_try *t = ex->winner;

	exchange_enter(ex);
	/* what was kept goes first; a winner's upstream is paused behind it */
	if (ex->kept_feeding && ex->state == EXCHANGE_RELAYING) {
		exchange_feed_kept(ex);
	} else if (ex->state == EXCHANGE_RELAYING && t != NULL && t->read_paused) {
		exchange_relay_resumed(t);
	}
	exchange_leave(ex);
}

void exchange_body_stalled(struct exchange *ex, const char *reason)
{
	exchange_enter(ex);
	if (ex->state == EXCHANGE_RELAYING)
		exchange_break_response(ex, reason);
	else
		/* nothing of a response reached the client: it is told, as for
		 * a head, rather than left to take a bare close for a crash
		 * (RFC 9110 section 15.5.9); the body's rest is never read */
		exchange_respond_error(ex, 408, "request body not complete within client_timeout");
	exchange_leave(ex);
}

void exchange_abort(struct exchange *ex, const char *reason)
{
	exchange_enter(ex);
	exchange_close(ex, EXCHANGE_END_CLIENT_GONE, reason);
	exchange_leave(ex);
}
