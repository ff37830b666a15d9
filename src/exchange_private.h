#ifndef RETRYPROXY_EXCHANGE_PRIVATE_H
#define RETRYPROXY_EXCHANGE_PRIVATE_H

/*
 * The exchange's fields and internal steps, shared by its three files only:
 * exchange_request.c (routing, the upstream request, the request body),
 * exchange_response.c (response heads, keeping or relaying bodies) and
 * exchange.c (tries, the retry verdict, backoff, the one end).
 *
 * Every way into an exchange from the loop (a conn callback, a timer, a
 * connect result, a call from its owner) is bracketed by exchange_enter()
 * and exchange_leave(): exchange_close() may end it anywhere inside, and
 * the exchange is freed only when the outermost entry leaves, so nothing
 * ever reads a freed exchange.
 */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "body.h"
#include "config.h"
#include "exchange.h"
#include "http1.h"
#include "retry.h"
#include "upstream.h"
#include "upstreams.h"

struct conn;
struct evbuffer;
struct event;
struct proxy;
struct resume;
struct spool;
struct timer;

#define EXCHANGE_ADD_LITERAL(buf, s) evbuffer_add((buf), (s), sizeof(s) - 1)

/* Heads are laid out in space reserved once in the output buffer, piece by
 * piece, instead of one evbuffer_add or printf per piece. */
static inline char *exchange_put(char *p, const void *src, size_t n)
{
	memcpy(p, src, n);
	return p + n;
}

#define EXCHANGE_PUT_LITERAL(p, s) exchange_put((p), (s), sizeof(s) - 1)

/* Decimal digits of v at p; returns the end. */
static inline char *exchange_put_uint(char *p, unsigned v)
{
	char digits[10];
	size_t n = 0;

	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = digits[--n];
	return p;
}

/* RFC 9110 section 8.6: a Content-Length of one number repeated ("5, 5"),
 * which the parser takes, must not be forwarded as it came; it goes as
 * "Content-Length: 5". The digits of its first element (the parser checked
 * that all are the same number), or 0 when the value is no such list. */
static inline size_t exchange_length_list_digits(const struct http1_field *f)
{
	size_t n = 0;

	if (f->known != HTTP1_FIELD_CONTENT_LENGTH || memchr(f->value, ',', f->value_len) == NULL)
		return 0;
	while (n < f->value_len && f->value[n] >= '0' && f->value[n] <= '9')
		n++;
	return n;
}

#define EXCHANGE_LENGTH_NAME "Content-Length: "

/* The bytes a forwarded field line takes. */
static inline size_t exchange_field_size(const struct http1_field *f)
{
	size_t digits = exchange_length_list_digits(f);

	return digits == 0 ? f->line_len : sizeof(EXCHANGE_LENGTH_NAME) - 1 + digits + 2;
}

/* A forwarded field line at p; returns the end. */
static inline char *exchange_put_field(char *p, const struct http1_field *f)
{
	size_t digits = exchange_length_list_digits(f);

	if (digits == 0)
		return exchange_put(p, f->line, f->line_len);
	p = EXCHANGE_PUT_LITERAL(p, EXCHANGE_LENGTH_NAME);
	p = exchange_put(p, f->value, digits);
	return EXCHANGE_PUT_LITERAL(p, "\r\n");
}

/* The field lines marked forward at p, as they came unless a Content-Length
 * was listed or repeated (http1_framing.length_repeated); returns the end. */
static inline char *exchange_put_fields(char *p, const struct http1_head *head, const bool *forward,
					bool length_repeated)
{
	size_t i;

	if (!length_repeated) {
		for (i = 0; i < head->field_count; i++)
			if (forward[i])
				p = exchange_put(p, head->fields[i].line, head->fields[i].line_len);
		return p;
	}
	for (i = 0; i < head->field_count; i++)
		if (forward[i])
			p = exchange_put_field(p, &head->fields[i]);
	return p;
}

/* Backpressure marks: a side's queued output past HIGH stops reading the
 * other side until it drains below LOW. */
#define EXCHANGE_OUTPUT_HIGH (256 * 1024)
#define EXCHANGE_OUTPUT_LOW (64 * 1024)
#define EXCHANGE_UPSTREAM_READ_HIGH (256 * 1024)

enum exchange_state {
	EXCHANGE_READING_BODY, /* reading the whole request body into the replay buffer */
	EXCHANGE_TRYING,       /* tries in flight; nothing of a response reached the client */
	EXCHANGE_RELAYING, /* the winning try's response head reached the client; body flowing */
	EXCHANGE_BACKOFF,  /* between tries, on the backoff timer */
	EXCHANGE_HELD,	   /* waiting for its upstream to be known good (upstreams.c) */
	EXCHANGE_QUEUED,   /* waiting for a connection under max_upstream_connections */
	EXCHANGE_DONE,	   /* ended (exchange_close); freed once no callback of it runs */
};

enum exchange_try_state {
	EXCHANGE_TRY_IDLE,	 /* the slot holds no try */
	EXCHANGE_TRY_CONNECTING, /* waiting for an upstream connection, new or pooled */
	EXCHANGE_TRY_WAITING,	 /* the request is (being) sent; no response head yet */
	EXCHANGE_TRY_KEEPING,	 /* reading a retryable response's body, not shown to the client */
	EXCHANGE_TRY_RELAYING,	 /* its response is the one the client gets */
};

/* One try: an upstream connection and what came back on it. An exchange
 * has slots for several at once: a hedge races the try that is slow. */
struct exchange_try {
	struct exchange *ex;
	enum exchange_try_state state;
	struct upstream_connect *connecting;
	struct conn *up;
	struct timer *timer;	      /* try_timeout until the response head on a new
					 * connection; kept with a spare */
	bool timer_armed;	      /* timer is pending: a pooled connection's try has
					 * its try_timeout as the conn's deadline instead */
	bool reused;		      /* the connection came from the pool */
	bool admitted;		      /* its connect counts in the upstream's health */
	bool placed;		      /* its connect holds a place under max_upstream_connections */
	bool hedge;		      /* started beside another try (retry.hedge) */
	bool local_failure;	      /* its connect failed for the proxy's own shortage */
	bool read_paused;	      /* client output full: upstream not read */
	bool byte_seen;		      /* a response byte arrived */
	bool answered_http10;	      /* its response came in HTTP/1.0 */
	bool body_awaited;	      /* waits for the client's body: try_timeout off */
	size_t interim_bytes;	      /* its interim (1xx) responses' heads so far */
	struct http1_framing framing; /* its response's */
	struct evbuffer *keeping;     /* a retryable response being kept, head and body */
	size_t keeping_head_len;
	struct body_relay keeping_body; /* finds where the response being kept ends */
	bool verdict_pending;		/* kept while other tries raced: decide when it is whole */
	bool parked;	    /* ... but over retry_response_buffer: not read while another may win */
	bool parked_closed; /* ... and its connection ended meanwhile, the answer whole */
	int keeping_status; /* ... with its status and Retry-After */
	uint64_t keeping_retry_after_until; /* (as a time: the wait runs from the head) */
	enum retry_should keeping_should;   /* ... and x-should-retry */
	bool keeping_unclean;	 /* its close-delimited body ended with no TLS close_notify */
	time_t keeping_received; /* when its head came: its Date if it has none */
	bool keeping_no_room;	 /* too large to keep for retry_memory, not retry_response_buffer */
	unsigned number;	 /* which try of the exchange it is, from 1 */
	size_t record;		 /* its response head's place in the tries trail */
	uint64_t written_before; /* conn_bytes_written() of up before its request */
};

/* Try slots per exchange: one, and the three hedges SPEC allows at most. */
#define EXCHANGE_TRY_SLOTS 4

struct exchange {
	struct proxy *proxy;
	struct exchange_owner owner; /* the client connection it serves */
	struct config *config;	     /* held: the request finishes under this one */
	const struct route *route;   /* inside config */
	enum exchange_state state;
	unsigned busy;	     /* entries on the stack: freeing waits for them */
	uint64_t started_ms; /* monotonic (timer_now_ms), as the timers' waits */

	/* the request as the client sent it */
	char *method; /* in text */
	char *target; /* in text */
	size_t method_len;
	size_t target_len;
	int client_minor;	/* HTTP/1.x of the client */
	bool client_keep_alive; /* the client allows another request */
	bool head_request;
	bool is_connect;
	bool expect_continue;
	bool expect_forwarded; /* 100-continue went upstream with a streamed body: the
				* upstream's 100 is the client's, the proxy sends none */
	bool continue_relayed; /* an upstream's 100 reached the client: with Expect
				* forwarded, only from then does it owe the body */
	bool has_body;	       /* any, even an empty chunked one */
	bool body_over_limit;  /* its Content-Length is over max_body_bytes: 413 before any try */
	bool upgrade;	       /* the request asks to switch protocols: a 101 ends it in a tunnel */

	/* where it goes */
	struct upstream_endpoint endpoint;
	char *endpoint_host; /* in text */
	const struct tls_policy *tls;
	char *pool_key; /* in text */
	char *text;	/* method, target, host and pool key, kept with a spare */
	size_t text_room;
	char *request_head; /* built once, sent again on every try; kept with a spare */
	size_t request_head_len;
	size_t request_head_room;
	struct body_relay request_body; /* the client's body as it arrives */
	struct evbuffer *replay; /* the whole body, re-sent on every try; NULL: streamed once */
	uint64_t replay_claim;	 /* a body of known length kept in memory counts whole in
				  * proxy->retry_memory_bytes from the start; 0 once it is not */
	uint64_t memory_counted; /* what proxy->retry_memory_bytes counts for this exchange */
	struct spool *spool; /* the body in a file (limits.spool_max), re-sent from there; replay
			      * then holds only what is not written yet; closed once queued
			      * when the body goes once (body_once) */
	uint64_t spool_sent; /* the file's bytes queued on the current try (one at a time: a
			      * request with a body is never hedged) */
	bool spool_queued;   /* ... all of them, and what follows them */
	bool request_body_started; /* streamed body bytes left the client's input */
	bool client_read_paused;   /* upstream output full: client not read */
	bool body_watched;	   /* the owner times out a stalled request body */

	/* may it be tried again */
	bool idempotent;	    /* by the route's idempotency map */
	bool conditional;	    /* ... by a when_present condition, not its method */
	bool json_pending;	    /* only a json_field condition could make it idempotent */
	bool body_too_large;	    /* the body was streamed because it is over replay_buffer */
	bool body_once;		    /* in the replay buffer, but over replay_buffer: once
					 * a try sends it, it is not sent again */
	bool upstream_http10;	    /* a retryable answer came in HTTP/1.0: no retry sends
				     * the body chunked (RFC 9112 section 6.1) */
	bool body_reframed;	    /* the kept chunked body now goes with Content-Length */
	enum retry_give_up gave_up; /* why retrying stopped, for the log and metrics */
	uint64_t first_try_ms;	    /* the deadline counts from here; 0: no try yet */
	struct timer *timer;   /* backoff, held or queued: made on first use, kept with a spare */
	uint64_t next_wait_ms; /* decided with the retry, used by the timer */
	uint64_t next_backoff_ms;	   /* ... its backoff, when the response asked for more: */
	uint64_t next_asked_until;	   /* the time it asked to wait until, else 0 */
	uint64_t backoff_until_ms;	   /* EXCHANGE_BACKOFF: when the timer starts the try */
	enum retry_cause retry_cause;	   /* why the scheduled retry happens */
	struct retry_budget_state *budget; /* the route's retry budget; NULL for CONNECT */
	bool retry_reserved;		   /* counted in proxy->backoff_pending */
	bool retried;			   /* a retry was counted (retries_total) */
	bool gauged_backoff;		   /* counted in its route's backoff gauge */
	bool gauged_held;		   /* counted in its route's held gauge */
	bool gauged_queued;		   /* counted in its route's queued gauge */
	bool skip_pool;			   /* the next try takes a new connection */
	struct upstream *upstream;	   /* its health (upstreams.c); held from the first try */
	struct upstream_waiter waiter;	   /* EXCHANGE_HELD: its place in the upstream's queue */
	uint64_t held_since_ms;		   /* EXCHANGE_HELD: since when, on timer_now_ms() */
	uint64_t queued_since_ms;	   /* EXCHANGE_QUEUED: since when */
	bool queue_released;		   /* released from the connection queue: first in line */
	uint64_t queue_counted_ms; /* EXCHANGE_QUEUED: the time up to here is in the trail */
	uint64_t waited_first_ms;  /* held or queued before the first try: no trail wait has it */
	bool queue_deadline_first; /* EXCHANGE_QUEUED: the deadline comes before try_timeout */
	struct timer *hedge_timer; /* retry.hedge: made on first use, kept with a spare */
	bool hedged;		   /* a hedged try was started */
	bool keyed;		 /* conditional, and the request upstream has an Idempotency-Key */
	bool key_injected;	 /* retry.idempotency_key: inject gave it idempotency_key */
	bool ambiguous;		 /* the client got Retry-Ambiguous: true */
	bool observe;		 /* retry.mode: observe: nothing is retried */
	bool observe_replayable; /* observe: the body would have been kept for a retry */
	bool observe_unkeyed;	 /* observe: idempotent only by the key enforce would have
				  * injected, so not safe to send twice as it goes */
	uint64_t observe_streamed; /* observe: a chunked body's bytes streamed, framing included */
	const char *would_retry;   /* observe: the cause of the retry not made, for the log */

	/* the tries */
	unsigned attempts;	  /* started, the first included */
	unsigned unwaited;	  /* ... of them hedges and stale connections' replacements,
				   * which no backoff wait came before */
	unsigned lost_after_send; /* conditional: the number of the first try that ended with no
				   * response after bytes of its request were written, 0 for
				   * none: a later try's 412 (409 keyed) is ambiguous */
	struct exchange_try slots[EXCHANGE_TRY_SLOTS];
	struct exchange_try *current; /* the latest started: it gets a streamed body */
	struct exchange_try *winner;  /* the try whose response the client gets */
	struct conn *tunnel;	      /* CONNECT: the upstream handed to the owner */

	/* the response */
	struct body_relay response_body; /* toward the client */
	bool client_keep_after; /* the response's framing lets the client connection live */
	int status;		/* what the client got */
	const char *note;

	/* the most recent retryable response, kept whole in case no later try
	 * gets a better one */
	struct evbuffer *kept; /* head and body as received */
	size_t kept_head_len;
	unsigned kept_number; /* the try it came from */
	time_t kept_received; /* when its head came (RFC 9110 section 6.6.1) */
	/* it came whole while other tries raced it, so nothing was decided on
	 * it yet: if they all fail, it decides (status, Retry-After,
	 * x-should-retry), not the last failure */
	bool kept_undecided;
	int kept_status;
	uint64_t kept_retry_after_until;
	enum retry_should kept_should;
	bool kept_unclean; /* the kept body may be cut: delivered, it is broken off */
	/* given back, or passed on as final while its body came: kept now
	 * holds the body read so far in the client's framing, handed to the
	 * client as it reads (and counted in retry_memory until then), as a
	 * streamed response is; the winner's upstream, if any, follows */
	bool kept_feeding;
	short kept_closed_what; /* ... and how the winner's upstream ended meanwhile, if it did
				 * (conn events): taken once what was kept has gone */
	/* it came from a hedge, not counted in retryproxy_hedges_total yet:
	 * won if it is what the client gets in the end */
	bool kept_hedge;

	struct access_try *tries; /* one per try, for the log: tries_inline, or grown */
	size_t try_count;
	size_t try_room;
	struct access_try tries_inline[4]; /* most requests take one try */
	struct resume *resume;	     /* retry.resume: the offer and the resume under way, made on
				* first use; kept with a spare */
	bool resumable;		     /* the 200 offered a resume: resume holds it */
	struct exchange *next_spare; /* in proxy->spare_exchanges */
};

/* Spare exchanges kept for reuse with their timer and text blocks, so that
 * a request allocates none of them. Under AddressSanitizer every exchange is
 * freed, so that a use after exchange_free() is still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define EXCHANGE_SPARES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EXCHANGE_SPARES 0
#endif
#endif
#ifndef EXCHANGE_SPARES
#define EXCHANGE_SPARES 256
#endif

/* exchange.c */
struct exchange *exchange_alloc(struct proxy *proxy);
char *exchange_block(char **block, size_t *room, size_t need);
/* The exchange's one timer (backoff, held or queued), made on first use:
 * cb runs once ms have passed since now_ms (timer_now_ms()). */
void exchange_timer_start(struct exchange *ex, event_callback_fn cb, uint64_t now_ms, uint64_t ms);
void exchange_timer_stop(struct exchange *ex);
void exchange_set_state(struct exchange *ex, enum exchange_state state);
void exchange_try_set_state(struct exchange_try *t, enum exchange_try_state state);
void exchange_enter(struct exchange *ex);
void exchange_leave(struct exchange *ex);
void exchange_record_try(struct exchange *ex, int status, const char *error, bool hedge);
void exchange_end_try(struct exchange_try *t, bool reusable);
/* Count the kept response's hedge, if it came from one, as won or lost. */
void exchange_count_kept_hedge(struct exchange *ex, bool won);
#define EXCHANGE_TRY_TIMEOUT_TEXT "no response head within try_timeout"
/* The response head arrived or the try ended: its try_timeout is over. */
void exchange_try_timeout_stop(struct exchange_try *t);
/* Try t's request with a body moved on (its upstream took bytes, or the
 * client's went to it): try_timeout runs again from now, or stops while the
 * try waits for the client's body (client_timeout's). */
void exchange_request_progress(struct exchange_try *t);
/* The ways to end, all through exchange_close(): the response is queued
 * whole (the client connection lives on when the framing allows); answer
 * with an error of our own; a response broke off after some of it reached
 * the client. */
void exchange_finish(struct exchange *ex);
/* The exchange's connection upstream (ex->tunnel) and the client's go on as
 * a tunnel: after a CONNECT, or a 101 to an Upgrade. */
void exchange_finish_tunnel(struct exchange *ex);
void exchange_respond_error(struct exchange *ex, int status, const char *text);
void exchange_break_response(struct exchange *ex, const char *why);
/* Start a try, or wait for a place or the upstream. False only when the
 * request was answered instead (a drain's answer time passed), or its
 * client is found gone (its EOF drops it at the end of the pass), before it
 * took a connection or a place. */
bool exchange_start_try(struct exchange *ex);

/* exchange_gauges.c: bring the route's backoff, held and queued gauges in
 * line with the exchange, after retry_reserved or its wait for the upstream
 * or a connection changed. */
void exchange_gauges_update(struct exchange *ex);

/* exchange.c: give back this exchange's place among the pending retries. */
void exchange_release_retry(struct exchange *ex);

/* exchange_queue.c: put the time queued since last counted into the
 * trail's wait. */
void exchange_queue_count_wait(struct exchange *ex);

/* exchange_queue.c: a queued request's client input reached its limit:
 * look for the client's close every so often from now on, as for a held
 * one (exchange_held_input_full()). */
void exchange_queue_input_full(struct exchange *ex);

/* exchange.c: the next wait of a held or queued request's timer, left ms
 * before its wait ends: sooner when a close of its client's may hide
 * behind input the proxy does not read, to look for it. */
uint64_t exchange_wait_timer_ms(const struct exchange *ex, uint64_t left);

/* exchange.c: a held or queued exchange leaves its upstream's queue, the
 * time it waited in its trail; any other is left alone. */
void exchange_stop_waiting(struct exchange *ex);

/* exchange.c: end every try still under way, its connection closed, never
 * pooled; record: one with no response head yet goes in the trail as
 * cancelled. */
void exchange_cancel_tries(struct exchange *ex, bool record);

/* exchange_queue.c: take a place for a new connection under
 * max_upstream_connections, first in line when first; when none is free
 * and close_idle, one an idle pooled connection holds (closing it). False
 * when there is none; nothing else is done. */
bool exchange_take_place(struct exchange *ex, bool first, bool close_idle);

/* exchange_queue.c: exchange_take_place() for a try; false when the
 * exchange waits for a place (EXCHANGE_QUEUED) instead. */
bool exchange_take_connection_place(struct exchange *ex);

/* exchange_queue.c: while a lowered max_upstream_connections leaves the
 * upstream over it, close its idle pooled connections, so that none serves
 * beside those in use. */
void exchange_close_over_cap(struct exchange *ex);
void exchange_try_failed(struct exchange_try *t, enum try_outcome outcome, const char *reason);
/* Would a try failing as stale now go again at once (retry_stale_replaceable())? */
bool exchange_may_replace_stale(const struct exchange *ex);
struct retry_verdict exchange_decide(struct exchange *ex, enum try_outcome outcome, int status,
				     bool connecting, uint64_t retry_after_ms, bool too_large);
/* exchange_decide() for a response, with its x-should-retry. */
struct retry_verdict exchange_decide_response(struct exchange *ex, int status,
					      uint64_t retry_after_ms, bool too_large,
					      enum retry_should should);
void exchange_schedule_retry(struct exchange *ex);
/* Wait in the upstream's queue until it is back (EXCHANGE_HELD), within the
 * deadline and max_pending_retries: a try that may not start yet. */
void exchange_hold(struct exchange *ex);
/* What a HOLD verdict does: exchange_hold(), the retry it replaces counted
 * in retries_total under cause, as a backoff's is when it starts. */
void exchange_hold_retry(struct exchange *ex, enum retry_cause cause);
/* A held request's client input reached its limit (a next request it
 * pipelined): look for the client's close every so often from now on,
 * which the bytes the proxy does not read would otherwise hide. */
void exchange_held_input_full(struct exchange *ex);
/* Tries under way (not idle), and those of them still waiting for a
 * response head. */
unsigned exchange_tries_left(const struct exchange *ex);
unsigned exchange_tries_racing(const struct exchange *ex);
/* No more hedges for this exchange's tries in flight. */
void exchange_stop_hedging(struct exchange *ex);
/* winner's response goes to the client: close every other try, never
 * pooling its connection, and log it as cancelled before the winner's
 * record, which moves to the end of the trail (winner NULL: a kept
 * response goes instead, and only the others are cancelled). */
void exchange_cancel_racing(struct exchange *ex, struct exchange_try *winner);

/* exchange_request.c */
void exchange_read_request_body(struct exchange *ex);

/* exchange.c: limits.retry_memory. Bring proxy->retry_memory_bytes up to
 * what this exchange keeps in memory for retries now: its replay buffer (or
 * what a body of known length claims while it arrives), its kept response,
 * and the responses its tries are keeping. Called where those change; the
 * exchange's free gives back what it counted, whatever was missed. */
void exchange_memory_recount(struct exchange *ex);
/* Move bytes the exchange holds in memory (held: its kept response, or a
 * body going once) to out as far as EXCHANGE_OUTPUT_HIGH queued there, and
 * recount: until queued they count in retry_memory, so that a peer that
 * takes them slowly cannot leave them beside the cap. */
void exchange_memory_feed(struct exchange *ex, struct evbuffer *held, struct evbuffer *out);
/* May more bytes be kept without passing limits.retry_memory? */
bool exchange_memory_room(const struct exchange *ex, uint64_t more);
void exchange_pump_request_body(struct exchange *ex);
void exchange_send_request(struct exchange_try *t);

/* exchange_spool.c: bodies over replay_buffer kept in a file (spool.c) */
/* Start spooling, if the config and the request allow it: true when the
 * body now goes to a file. length: the body's, when known (else 0), which
 * must fit in what spool_total leaves. */
bool exchange_spool_start(struct exchange *ex, uint64_t length);
/* Write what the replay buffer took into the file. -1 when the body now
 * goes once instead (the write failed, or the body passed spool_max). */
int exchange_spool_body(struct exchange *ex);
/* Queue more of the file on try t's connection; once all of it is queued,
 * what was not written follows, then the client's rest. */
void exchange_spool_feed(struct exchange_try *t);
/* Is some of the spooled body still to be queued on try t? */
static inline bool exchange_spool_pending(const struct exchange_try *t)
{
	return t->ex->spool != NULL && !t->ex->spool_queued;
}
/* Is some of a body going once still in the replay buffer, queued on the
 * try's connection only as the upstream takes it (exchange_memory_feed())? */
static inline bool exchange_once_pending(const struct exchange *ex)
{
	return ex->body_once && ex->spool == NULL && ex->replay != NULL &&
	       evbuffer_get_length(ex->replay) > 0;
}
/* Is some of the body still to be queued on try t before the client's rest? */
static inline bool exchange_body_queue_pending(const struct exchange_try *t)
{
	return exchange_spool_pending(t) || exchange_once_pending(t->ex);
}

/* exchange_response.c */
void exchange_read_response_head(struct exchange_try *t);
void exchange_relay_response(struct exchange *ex);
/* The winner t's upstream, paused while the client's output was full (or a
 * kept part went first), is read again and relayed. */
void exchange_relay_resumed(struct exchange_try *t);
void exchange_keep_response(struct exchange_try *t);
bool exchange_pass_on_parked(struct exchange *ex);
/* A drain's answer time: an answer held while tries are in flight (a
 * retryable one kept, from a try they raced or one before them, or parked
 * too large to keep) goes to the client now, the tries still in flight
 * cancelled (gave_up=deadline, note=draining). False when none is held. */
bool exchange_give_held(struct exchange *ex);
void exchange_deliver_kept(struct exchange *ex);
/* Hand the client more of a kept response given back, as it drains. */
void exchange_feed_kept(struct exchange *ex);
/* What is left of a wait that ends at until (a timer_now_ms() time;
 * 0 for none): a Retry-After counts from its response's head, not from
 * when a decision on it was put off to. */
uint64_t exchange_wait_left(uint64_t until);
void exchange_upstream_closed(struct exchange_try *t, short what);
uint64_t exchange_retry_after(const struct http1_head *head);
/* Is this response head retryable by the route's retry.on and its
 * x-should-retry? *should is what x-should-retry said (read only on an error
 * status or one retry.on names), for exchange_decide_response(). */
bool exchange_response_retryable(const struct exchange *ex, const struct http1_head *head,
				 enum retry_should *should);

/* exchange_resume.c: a download that broke off is continued with a Range
 * request (retry.resume); only an exact 206 is spliced onto the body. */
void exchange_resume_offer(struct exchange_try *t, const struct http1_head *head);
void exchange_resume_broken(struct exchange_try *t, enum try_outcome outcome, const char *why);
void exchange_resume_answer(struct exchange_try *t, const struct http1_head *head);
void exchange_resume_give_up(struct exchange *ex, const char *why);

/* exchange_reframe.c: the kept chunked body's data alone, in a new buffer
 * (its chains refer to the replay buffer's), or NULL when its framing is
 * broken. */
struct evbuffer *exchange_replay_decoded(struct exchange *ex);
/* A retry comes: if a try's answer came in HTTP/1.0 and the body is kept
 * chunked in the replay buffer, every try from now on sends it with
 * Content-Length instead (the head and the replay buffer are rewritten
 * once). Only between tries: no connection's output refers to them then. */
void exchange_reframe_for_http10(struct exchange *ex);
/* A try on a new connection to an upstream no answer came from yet: the
 * body, kept chunked whole in the replay buffer, goes with Content-Length
 * from now on, as after an answer in HTTP/1.0, unless it has a trailer
 * section or chunk extensions (which only chunked framing carries). Before
 * the try. */
void exchange_reframe_for_unheard(struct exchange *ex);

#endif
