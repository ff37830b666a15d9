#include "exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "client.h"
#include "conn.h"
#include "exchange_private.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "retry_budget.h"
#include "proxy.h"
#include "xmalloc.h"
#include "timeval.h"

/*
 * One exchange's tries: start a try, decide after each failure or retryable
 * response whether another try is legal and how long to wait, and end the
 * exchange. Retrying is legal only while nothing of a response has reached
 * the client; that rule lives in exchange_retry_allowed() and the states
 * that call it.
 */

static const char *const exchange_state_names[] = {
	[EXCHANGE_READING_BODY] = "reading-body",
	[EXCHANGE_CONNECTING] = "connecting",
	[EXCHANGE_WAITING_HEAD] = "waiting-head",
	[EXCHANGE_KEEPING] = "keeping",
	[EXCHANGE_RELAYING] = "relaying",
	[EXCHANGE_BACKOFF] = "backoff",
	[EXCHANGE_DONE] = "done",
};

static const char *const try_failure_names[] = {
	[TRY_DNS] = "dns",
	[TRY_REFUSED] = "refused",
	[TRY_CONNECT_TIMEOUT] = "connect-timeout",
	[TRY_TLS] = "tls",
	[TRY_TLS_VERIFY] = "tls-verify",
	[TRY_STALE] = "stale",
	[TRY_RESET] = "reset",
	[TRY_TIMEOUT] = "timeout",
	[TRY_MALFORMED] = "malformed",
};

/* The upstream_errors_total kind of each failure. */
static const char *const try_failure_kinds[] = {
	[TRY_DNS] = "dns",
	[TRY_REFUSED] = "connect",
	[TRY_CONNECT_TIMEOUT] = "connect",
	[TRY_TLS] = "tls",
	[TRY_TLS_VERIFY] = "tls",
	[TRY_STALE] = "reset",
	[TRY_RESET] = "reset",
	[TRY_TIMEOUT] = "timeout",
	[TRY_MALFORMED] = "malformed",
};

void exchange_set_state(struct exchange *ex, enum exchange_state state)
{
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_debug("exchange %p %.*s %.*s: %s -> %s", (void *)ex, (int)ex->method_len,
			  ex->method, (int)ex->target_len, ex->target,
			  exchange_state_names[ex->state], exchange_state_names[state]);
	ex->state = state;
}

/* Milliseconds from then to now. */
static uint64_t exchange_ms_since(const struct timeval *then)
{
	struct timeval now;
	int64_t ms;

	gettimeofday(&now, NULL);
	ms = (int64_t)(now.tv_sec - then->tv_sec) * 1000 + (now.tv_usec - then->tv_usec) / 1000;
	return ms > 0 ? (uint64_t)ms : 0;
}

/* Access-log line for this exchange. */
static void exchange_log(struct exchange *ex)
{
	struct access_record record;

	memset(&record, 0, sizeof(record));
	record.client = client_peer(ex->client);
	record.method = ex->method;
	record.method_len = ex->method_len;
	record.target = ex->target;
	record.target_len = ex->target_len;
	record.route = ex->route->name;
	record.status = ex->status;
	record.attempts = ex->attempts;
	record.bytes = ex->response_body.payload_bytes;
	record.duration_ms = exchange_ms_since(&ex->started);
	record.note = ex->note;
	record.gave_up = ex->gave_up;
	record.tries = ex->tries;
	record.try_count = ex->try_count;
	access_log_write(&record);
	if (ex->status != 0)
		metrics_request_done(ex->proxy->metrics, ex->route->name, ex->status,
				     (double)record.duration_ms / 1000.0, ex->attempts);
	if (ex->gave_up != NULL)
		metrics_gave_up(ex->proxy->metrics, ex->route->name, ex->gave_up);
}

void exchange_record_try(struct exchange *ex, int status, const char *error)
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
	ex->try_count++;
}

void exchange_drop_upstream(struct exchange *ex)
{
	if (ex->connecting != NULL) {
		upstream_connect_cancel(ex->connecting);
		ex->connecting = NULL;
	}
	if (ex->up != NULL) {
		conn_free(ex->up);
		ex->up = NULL;
	}
	if (ex->keeping != NULL) {
		evbuffer_free(ex->keeping);
		ex->keeping = NULL;
	}
	ex->up_read_paused = false;
	if (ex->client_read_paused) {
		ex->client_read_paused = false;
		conn_read_enable(client_conn(ex->client), true);
	}
}

/* Give back this exchange's place among the pending retries. */
static void exchange_release_retry(struct exchange *ex)
{
	if (ex->retry_reserved) {
		ex->retry_reserved = false;
		ex->proxy->backoff_pending--;
	}
}

struct exchange *exchange_alloc(struct proxy *proxy)
{
	struct exchange *ex = proxy->spare_exchanges;
	struct exchange kept;

	if (ex == NULL)
		return xcalloc(1, sizeof(*ex));
	proxy->spare_exchanges = ex->next_spare;
	proxy->spare_exchange_count--;
	kept = *ex;
	memset(ex, 0, sizeof(*ex));
	ex->timer = kept.timer;
	ex->text = kept.text;
	ex->text_room = kept.text_room;
	ex->request_head = kept.request_head;
	ex->request_head_room = kept.request_head_room;
	return ex;
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

/* Free an exchange's timer and blocks, and the exchange. */
static void exchange_destroy(struct exchange *ex)
{
	if (ex->timer != NULL)
		event_free(ex->timer);
	free(ex->text);
	free(ex->request_head);
	free(ex);
}

void exchange_free(struct exchange *ex)
{
	struct proxy *proxy;

	if (ex == NULL)
		return;
	proxy = ex->proxy;
	exchange_drop_upstream(ex);
	exchange_release_retry(ex);
	if (ex->replay != NULL)
		evbuffer_free(ex->replay);
	if (ex->kept != NULL)
		evbuffer_free(ex->kept);
	if (ex->tries != ex->tries_inline)
		free(ex->tries);
	config_release(ex->config);
	if (proxy->spare_exchange_count + 1 > EXCHANGE_SPARES) {
		exchange_destroy(ex);
		return;
	}
	if (ex->timer != NULL)
		evtimer_del(ex->timer);
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

void exchange_finish(struct exchange *ex, bool keep_alive)
{
	exchange_set_state(ex, EXCHANGE_DONE);
	exchange_drop_upstream(ex);
	exchange_log(ex);
	/* the request's unread rest would be taken for the next request */
	if (!ex->request_body.done)
		keep_alive = false;
	client_exchange_done(ex->client, keep_alive);
}

void exchange_respond_error(struct exchange *ex, int status, const char *text)
{
	bool keep_alive = ex->client_keep_alive && ex->request_body.done && !ex->is_connect &&
			  !client_closing_after_request(ex->client);

	exchange_drop_upstream(ex);
	ex->status = status;
	client_write_error(ex->client, status, text, ex->attempts, !keep_alive);
	exchange_finish(ex, keep_alive);
}

void exchange_break_response(struct exchange *ex, const char *why)
{
	bool hard = ex->response_body.mode == BODY_MODE_UNTIL_CLOSE;

	log_warn("%.*s %.*s: response broken off: %s", (int)ex->method_len, ex->method,
		 (int)ex->target_len, ex->target, why);
	ex->note = why;
	exchange_set_state(ex, EXCHANGE_DONE);
	exchange_drop_upstream(ex);
	exchange_log(ex);
	/* a close-delimited body cut short looks complete after a clean close:
	 * reset instead, so the client sees the error */
	if (hard)
		client_exchange_reset(ex->client);
	else
		client_exchange_done(ex->client, false);
}

bool exchange_retry_allowed(struct exchange *ex, enum retry_cause cause, bool never_sent,
			    uint64_t retry_after_ms)
{
	const struct retry_policy *policy = &ex->route->retry;
	uint64_t wait;

	exchange_release_retry(ex);

	if (cause == RETRY_CAUSE_STATUS ? false : !retry_on_failure(policy, cause))
		return false;
	if (ex->is_connect)
		return false;
	/* a request that may have reached the upstream is repeated only when
	 * repeating it is safe */
	if (!ex->idempotent && !never_sent) {
		ex->gave_up = "not_idempotent";
		return false;
	}
	if (ex->request_body_started) {
		ex->gave_up = ex->not_retryable != NULL ? ex->not_retryable : "not_idempotent";
		return false;
	}
	if (ex->attempts >= policy->max_attempts) {
		ex->gave_up = "attempts";
		return false;
	}
	wait = retry_backoff_ms(policy, ex->attempts - 1, &ex->proxy->rng);
	if (policy->honor_retry_after && retry_after_ms > wait)
		wait = retry_after_ms;
	if (exchange_ms_since(&ex->first_try) + wait > policy->deadline_ms) {
		ex->gave_up = "deadline";
		return false;
	}
	/* each waiting retry keeps its request body and last response in
	 * memory: past the cap, answer now instead of piling up */
	if (ex->proxy->backoff_pending >= ex->config->limits.max_pending_retries) {
		ex->gave_up = "budget";
		return false;
	}
	/* last, so that only a retry that would happen spends the budget */
	if (!retry_budget_take(ex->budget, &policy->budget, retry_budget_now_ms())) {
		ex->gave_up = "budget";
		return false;
	}
	ex->gave_up = NULL;
	ex->next_wait_ms = wait;
	ex->retry_cause = cause;
	/* the place is taken now, not when the backoff starts: a retryable
	 * response is kept in memory until then */
	ex->retry_reserved = true;
	ex->proxy->backoff_pending++;
	return true;
}

static void exchange_backoff_cb(evutil_socket_t fd, short what, void *arg)
{
	exchange_start_try(arg);
}

/* Run cb after tv on the exchange's one timer: a try's timeout and a
 * backoff never run at once. */
static void exchange_timer_start(struct exchange *ex, event_callback_fn cb,
				 const struct timeval *tv)
{
	evtimer_del(ex->timer);
	evtimer_assign(ex->timer, ex->proxy->base, cb, ex);
	evtimer_add(ex->timer, tv);
}

void exchange_schedule_retry(struct exchange *ex)
{
	struct timeval tv = timeval_from_ms(ex->next_wait_ms);

	/* reading a kept response's body takes time too: the next try must
	 * still start within the deadline */
	if (exchange_ms_since(&ex->first_try) + ex->next_wait_ms > ex->route->retry.deadline_ms) {
		ex->gave_up = "deadline";
		exchange_release_retry(ex);
		if (ex->kept != NULL)
			exchange_deliver_kept(ex);
		else
			exchange_respond_error(ex, 504, "504 retry deadline passed");
		return;
	}

	if (ex->try_count > 0)
		ex->tries[ex->try_count - 1].wait_ms = ex->next_wait_ms;
	log_debug("%.*s %.*s: try %u failed; next in %llu ms", (int)ex->method_len, ex->method,
		  (int)ex->target_len, ex->target, ex->attempts,
		  (unsigned long long)ex->next_wait_ms);
	exchange_set_state(ex, EXCHANGE_BACKOFF);
	metrics_retry(ex->proxy->metrics, ex->route->name, ex->retry_cause);
	exchange_timer_start(ex, exchange_backoff_cb, &tv);
}

/* The retry kind of a failure, and whether the request provably never
 * reached the upstream (nothing of it was written). */
static enum retry_cause exchange_failure_cause(enum try_failure failure, bool connecting,
					       bool *never_sent)
{
	*never_sent = false;
	switch (failure) {
	case TRY_DNS:
	case TRY_REFUSED:
	case TRY_CONNECT_TIMEOUT:
	case TRY_TLS:
	case TRY_TLS_VERIFY:
		*never_sent = true;
		return RETRY_CAUSE_CONNECT;
	case TRY_TIMEOUT:
		*never_sent = connecting;
		return RETRY_CAUSE_TIMEOUT;
	case TRY_STALE:
	case TRY_RESET:
	case TRY_MALFORMED:
		return RETRY_CAUSE_RESET;
	}
	return RETRY_CAUSE_RESET;
}

void exchange_try_failed(struct exchange *ex, enum try_failure failure, const char *reason)
{
	char text[512];
	/* a connect timeout is a connect failure (SPEC: 502); 504 is for a try
	 * that got no response head in time */
	int status = failure == TRY_TIMEOUT ? 504 : 502;
	bool connecting = ex->state == EXCHANGE_CONNECTING;
	bool never_sent;
	enum retry_cause cause = exchange_failure_cause(failure, connecting, &never_sent);

	/* a kept response that broke off replaces its own try's record */
	if (ex->state == EXCHANGE_KEEPING && ex->try_count > 0)
		ex->try_count--;
	exchange_record_try(ex, 0, try_failure_names[failure]);
	metrics_upstream_error(ex->proxy->metrics, try_failure_kinds[failure]);
	exchange_drop_upstream(ex);
	evtimer_del(ex->timer);
	log_debug("%.*s %.*s: try %u failed: %s: %s", (int)ex->method_len, ex->method,
		  (int)ex->target_len, ex->target, ex->attempts, try_failure_names[failure], reason);
	/* A pooled connection the upstream had already closed says nothing about
	 * the upstream: go again at once on a new connection. Only idempotent
	 * requests use pooled connections, so this never repeats an unsafe one. */
	if (failure == TRY_STALE && ex->idempotent && !ex->request_body_started &&
	    ex->attempts < ex->route->retry.max_attempts) {
		ex->skip_pool = true;
		exchange_start_try(ex);
		return;
	}
	/* a certificate that fails verification is not a transient failure */
	if (failure != TRY_TLS_VERIFY && exchange_retry_allowed(ex, cause, never_sent, 0)) {
		exchange_schedule_retry(ex);
		return;
	}
	if (ex->kept != NULL) {
		/* the most recent response beats an error of our own */
		exchange_deliver_kept(ex);
		return;
	}
	snprintf(text, sizeof(text), "%d %s: %s (%u attempt%s)", status,
		 status == 504 ? "upstream timeout" : "upstream unreachable", reason, ex->attempts,
		 ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, status, text);
}

static void exchange_up_read_cb(struct conn *conn, void *arg)
{
	struct exchange *ex = arg;

	switch (ex->state) {
	case EXCHANGE_WAITING_HEAD:
		exchange_read_response_head(ex);
		break;
	case EXCHANGE_KEEPING:
		exchange_keep_response(ex);
		break;
	case EXCHANGE_RELAYING:
		exchange_relay_response(ex);
		break;
	default:
		break;
	}
}

static void exchange_up_write_cb(struct conn *conn, void *arg)
{
	struct exchange *ex = arg;

	if (ex->client_read_paused) {
		ex->client_read_paused = false;
		conn_read_enable(client_conn(ex->client), true);
		exchange_pump_request_body(ex);
	}
}

static void exchange_up_event_cb(struct conn *conn, short what, void *arg)
{
	exchange_upstream_closed(arg, what);
}

/* try_timeout passed with no response head. */
static void exchange_try_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	if (ex->state == EXCHANGE_CONNECTING || ex->state == EXCHANGE_WAITING_HEAD)
		exchange_try_failed(ex, TRY_TIMEOUT, "no response head within try_timeout");
}

/* A connection for this try is ready: send the request. */
static void exchange_upstream_ready(struct exchange *ex, struct conn *conn, bool reused)
{
	ex->up = conn;
	ex->up_reused = reused;
	ex->response_byte_seen = false;
	conn_setcb(conn, exchange_up_read_cb, exchange_up_write_cb, exchange_up_event_cb, ex);
	conn_set_input_limit(conn, EXCHANGE_UPSTREAM_READ_HIGH);
	conn_set_output_low(conn, EXCHANGE_OUTPUT_LOW);
	conn_set_timeouts(conn, 0, 0);
	exchange_set_state(ex, EXCHANGE_WAITING_HEAD);
	conn_read_enable(conn, true);
	exchange_send_request(ex);
}

static void exchange_tunnel_connected(struct exchange *ex, struct conn *conn)
{
	struct evbuffer *out = conn_output(client_conn(ex->client));

	ex->status = 200;
	exchange_record_try(ex, 200, NULL);
	exchange_set_state(ex, EXCHANGE_DONE);
	evtimer_del(ex->timer);
	EXCHANGE_ADD_LITERAL(out, "HTTP/1.1 200 Connection established\r\nVia: 1.1 retryproxy\r\n\r\n");
	exchange_log(ex);
	client_exchange_tunnel(ex->client, conn);
}

static void exchange_connected_cb(struct conn *conn, enum upstream_failure failure,
				  const char *reason, void *arg)
{
	struct exchange *ex = arg;

	ex->connecting = NULL;
	switch (failure) {
	case UPSTREAM_OK:
		if (ex->is_connect)
			exchange_tunnel_connected(ex, conn);
		else
			exchange_upstream_ready(ex, conn, false);
		return;
	case UPSTREAM_FAIL_DNS:
		exchange_try_failed(ex, TRY_DNS, reason);
		return;
	case UPSTREAM_FAIL_REFUSED:
		exchange_try_failed(ex, TRY_REFUSED, reason);
		return;
	case UPSTREAM_FAIL_CONNECT_TIMEOUT:
		exchange_try_failed(ex, TRY_CONNECT_TIMEOUT, reason);
		return;
	case UPSTREAM_FAIL_TLS_HANDSHAKE:
		exchange_try_failed(ex, TRY_TLS, reason);
		return;
	case UPSTREAM_FAIL_TLS_VERIFY:
		exchange_try_failed(ex, TRY_TLS_VERIFY, reason);
		return;
	}
}

void exchange_start_try(struct exchange *ex)
{
	struct timeval tv = timeval_from_ms(ex->config->limits.try_timeout_ms);
	struct conn *pooled = NULL;

	if (ex->attempts == 0)
		gettimeofday(&ex->first_try, NULL);
	exchange_release_retry(ex);
	ex->attempts++;
	metrics_try(ex->proxy->metrics, ex->route->name);
	exchange_timer_start(ex, exchange_try_timeout_cb, &tv);
	exchange_set_state(ex, EXCHANGE_CONNECTING);
	/* Pooled connections may have been closed by the upstream a moment ago;
	 * only a request that is safe to repeat takes that chance. */
	if (!ex->is_connect && ex->idempotent && !ex->skip_pool)
		pooled = pool_take(ex->proxy->pool, ex->pool_key);
	ex->skip_pool = false;
	if (pooled != NULL) {
		metrics_pool_reuse(ex->proxy->metrics);
		exchange_upstream_ready(ex, pooled, true);
		return;
	}
	ex->connecting = upstream_connect_start(ex->proxy, &ex->endpoint, ex->tls, ex->pool_key,
						ex->config->limits.connect_timeout_ms,
						exchange_connected_cb, ex);
}

void exchange_run(struct exchange *ex)
{
	if (ex->timer == NULL)
		ex->timer = evtimer_new(ex->proxy->base, exchange_try_timeout_cb, ex);
	if (!ex->request_body.done)
		client_watch_body(ex->client, true);
	if (ex->expect_continue && !ex->request_body.done && ex->client_minor >= 1)
		EXCHANGE_ADD_LITERAL(conn_output(client_conn(ex->client)),
				     "HTTP/1.1 100 Continue\r\n\r\n");
	if (ex->replay != NULL && !ex->request_body.done) {
		exchange_set_state(ex, EXCHANGE_READING_BODY);
		exchange_read_request_body(ex);
		return;
	}
	exchange_start_try(ex);
}

void exchange_client_drained(struct exchange *ex)
{
	if (ex->state == EXCHANGE_RELAYING && ex->up_read_paused) {
		ex->up_read_paused = false;
		conn_read_enable(ex->up, true);
		exchange_relay_response(ex);
	}
}

void exchange_abort(struct exchange *ex, const char *reason)
{
	if (ex->state != EXCHANGE_DONE) {
		if (ex->state == EXCHANGE_BACKOFF || ex->state == EXCHANGE_KEEPING ||
		    ex->kept != NULL)
			ex->gave_up = "client_gone";
		ex->note = reason;
		exchange_log(ex);
	}
	exchange_free(ex);
}
