#ifndef RETRYPROXY_RETRY_H
#define RETRYPROXY_RETRY_H

/*
 * Pure retry policy (SPEC "Retry semantics"): how a try ended, which endings
 * retry.on covers, whether the request may be tried again and how long to
 * wait before the next try (backoff with jitter, Retry-After, deadline,
 * pending cap, budget). No I/O, no allocation and no clock reads (seeding
 * the generator from the OS aside): the caller passes the facts, the random
 * generator and the current time, so every function is tested by tables.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "config.h"

/* A Retry-After or retry-after-ms wait is read exactly, however long: the
 * deadline alone bounds it (SPEC: a wait that would start the next try after
 * the deadline means answering now), and a route's deadline may be days. One
 * past 64 bits of milliseconds saturates at this, longer than any deadline a
 * config can give (durations stay under UINT64_MAX / 2 ms). */
#define RETRY_AFTER_SATURATED_MS UINT64_MAX

/* xoshiro256** state: fast, good enough for jitter, seeded from the OS. */
struct retry_rng {
	uint64_t s[4];
};

/* Seed from getrandom(); falls back to time^pid^address if that fails. */
void retry_rng_seed(struct retry_rng *rng);

/* Seed deterministically (for tests) by splitmix64 expansion of seed. */
void retry_rng_seed_with(struct retry_rng *rng, uint64_t seed);

/* The next raw 64 random bits. */
uint64_t retry_rng_next(struct retry_rng *rng);

/* Uniform in [0, max], inclusive, without modulo bias. */
uint64_t retry_rng_uniform(struct retry_rng *rng, uint64_t max);

/* The backoff before jitter, initial_backoff * multiplier^n rounded to the
 * nearest millisecond and capped at max_backoff; never overflows. */
uint64_t retry_backoff_base_ms(const struct retry_policy *policy, unsigned n);

/* The range the wait before the next try is drawn from, n = 0 for the first
 * wait, and how it is drawn: lo_ms + uniform(0, spread_ms), capped at hi_ms.
 * retry_backoff_ms() draws from it and --explain prints it, so the two
 * cannot disagree. */
struct retry_wait_range {
	uint64_t lo_ms;	    /* the shortest wait: the backoff, 0 with full jitter */
	uint64_t hi_ms;	    /* the longest: min(backoff + jitter, max_backoff), or the
			     * backoff (already capped) with full jitter */
	uint64_t spread_ms; /* the width drawn over before the cap: the jitter, or the
			     * backoff with full jitter */
};

/* The range of the wait before the next try, n = 0 for the first wait
 * (SPEC "jitter"). Pure; never overflows. */
struct retry_wait_range retry_wait_range(const struct retry_policy *policy, unsigned n);

/* The wait before the next try, n = 0 for the first wait (SPEC), drawn from
 * retry_wait_range():
 * jitter as a duration: min(initial_backoff * multiplier^n + uniform(0, jitter), max_backoff)
 * jitter full: uniform(0, min(initial_backoff * multiplier^n, max_backoff)).
 * Saturates at max_backoff for huge n or multipliers. */
uint64_t retry_backoff_ms(const struct retry_policy *policy, unsigned n, struct retry_rng *rng);

enum retry_cause {
	RETRY_CAUSE_STATUS,  /* a response status in retry.on */
	RETRY_CAUSE_CONNECT, /* refused, DNS, TLS handshake, connect timeout */
	RETRY_CAUSE_RESET,   /* closed or reset before the whole response head */
	RETRY_CAUSE_TIMEOUT, /* no response head within try_timeout */
};

/* "status", "connect", "reset", "timeout": the metric label values. */
const char *retry_cause_name(enum retry_cause cause);

/* Is this status in retry.on (5xx flag or an explicit code)? */
bool retry_on_status(const struct retry_policy *policy, int status);

/* What a response's x-should-retry says (SPEC "More retry controls"). */
enum retry_should {
	RETRY_SHOULD_UNSET, /* absent, or neither true nor false */
	RETRY_SHOULD_TRUE,  /* retry even a status not in retry.on (an error status only) */
	RETRY_SHOULD_FALSE, /* do not retry, even a status in retry.on */
};

/* Read an x-should-retry value: "true" or "false", any case, with optional
 * surrounding SP/HTAB; anything else is RETRY_SHOULD_UNSET. A
 * comma-separated list is read as that many copies of the field: a false
 * in any wins, else a true; elements that are neither are ignored. */
enum retry_should retry_should_parse(const char *value, size_t len);

/* Is a response retryable by its status and x-should-retry? false says no,
 * whatever retry.on says; true adds an error status (400..599) that
 * retry.on leaves out; unset leaves retry_on_status() to decide. Whether
 * the request may be repeated is retry_decide()'s to say. */
bool retry_response_retryable(const struct retry_policy *policy, int status,
			      enum retry_should should);

/* Is this failure kind in retry.on (connect-failure / reset / timeout)?
 * RETRY_CAUSE_STATUS gives false: statuses go through retry_on_status. */
bool retry_on_failure(const struct retry_policy *policy, enum retry_cause cause);

/* How a try ended: the one vocabulary from the upstream connection up to the
 * access-log trail and the metric labels. */
enum try_outcome {
	TRY_RESPONSE,	     /* a response head arrived; its status decides */
	TRY_DNS,	     /* the upstream name did not resolve */
	TRY_REFUSED,	     /* connect refused or unreachable */
	TRY_CONNECT_TIMEOUT, /* no connection (TLS included) within connect_timeout */
	TRY_TLS,	     /* the TLS handshake failed */
	TRY_TLS_VERIFY,	     /* the certificate failed verification: never retried */
	TRY_STALE,	     /* a pooled connection closed before any response byte */
	TRY_RESET,	     /* closed or reset before the whole response head */
	TRY_TIMEOUT,	     /* no response head within try_timeout */
	TRY_MALFORMED,	     /* the response broke HTTP/1.1 */
	TRY_FORBIDDEN,	     /* the proxy's own admin endpoint or listener: not connected to */
};

/* How many outcomes there are, for tables indexed by enum try_outcome. */
#define TRY_OUTCOME_COUNT (TRY_FORBIDDEN + 1)

/* The access-log trail word: "response", "dns", "refused", "connect-timeout",
 * "tls", "tls-verify", "stale", "reset", "timeout", "malformed", "forbidden". */
const char *try_outcome_name(enum try_outcome outcome);

/* The retryproxy_upstream_errors_total kind: dns|connect|tls|reset|timeout|
 * malformed; NULL for TRY_RESPONSE, which is no error, and TRY_FORBIDDEN,
 * which the proxy refused without reaching an upstream. */
const char *try_outcome_error_kind(enum try_outcome outcome);

/* The retry.on condition an outcome falls under; RETRY_CAUSE_STATUS for
 * TRY_RESPONSE. */
enum retry_cause try_outcome_cause(enum try_outcome outcome);

/* Why retrying stopped short of a retryable outcome. */
enum retry_give_up {
	RETRY_GIVE_UP_NONE,	      /* retrying did not stop short */
	RETRY_GIVE_UP_ATTEMPTS,	      /* max_attempts tries were made */
	RETRY_GIVE_UP_DEADLINE,	      /* the next try would start after the deadline */
	RETRY_GIVE_UP_NOT_IDEMPOTENT, /* it may have reached the upstream and is unsafe to repeat */
	RETRY_GIVE_UP_BODY_TOO_LARGE, /* the body could not be kept (replay_buffer, retry_memory,
				       * the spool), so it went once; or only a json_field in it
				       * could have made the request safe, and it was too large
				       * to read */
	RETRY_GIVE_UP_CLIENT_GONE,    /* the client left while a retry was pending */
	RETRY_GIVE_UP_BUDGET,	      /* max_pending_retries or the route's retry budget */
	RETRY_GIVE_UP_UPSTREAM_BUSY,  /* try_timeout passed waiting for a connection at the cap */
	RETRY_GIVE_UP_UPSTREAM_DOWN,  /* health.hold: false refused the retry of a down upstream */
	RETRY_GIVE_UP_UPSTREAM_HTTP10, /* the upstream answered HTTP/1.0, and the body could go
					* again only chunked (RFC 9112 section 6.1) */
};

/* How many reasons there are, RETRY_GIVE_UP_NONE included. */
#define RETRY_GIVE_UP_COUNT (RETRY_GIVE_UP_UPSTREAM_HTTP10 + 1)

/* The retries_given_up_total reason label: attempts|deadline|not_idempotent|
 * body_too_large|client_gone|budget|upstream_busy|upstream_down|
 * upstream_http10; NULL for
 * RETRY_GIVE_UP_NONE. */
const char *retry_give_up_name(enum retry_give_up reason);

/* Everything retry_decide() needs to know about a try that just ended, as
 * the exchange sees it then. */
struct retry_facts {
	enum try_outcome outcome;
	int status;			/* with TRY_RESPONSE */
	bool connecting;		/* the try ended before its connection was made (a
				      * timeout then means nothing was sent) */
	bool is_connect;		/* a CONNECT tunnel: never retried */
	bool idempotent;		/* by the route's idempotency map (json_field resolved) */
	bool body_streamed;		/* request body bytes left the client without being kept:
				      * it cannot be sent again */
	bool body_too_large;		/* ... and that was because it was over replay_buffer */
	bool body_unread;		/* only the body could have made it idempotent (a
				      * json_field condition), and it was too large to keep
				      * and read */
	bool body_chunked_only;		/* a try's answer came in HTTP/1.0, and the kept body
				      * can go again only in its chunked framing (from the
				      * spool), which that upstream may not be sent */
	bool response_started;		/* bytes of a response already reached the client */
	bool response_too_large;	/* TRY_RESPONSE whose Content-Length is over
				      * retry_response_buffer */
	unsigned attempts;		/* tries made, this one included */
	unsigned unwaited;		/* of those, tries no backoff came before: hedges and a
				      * stale connection's replacement; the next wait is
				      * backoff_n with n the waits so far */
	uint64_t elapsed_ms;		/* since the first try started */
	uint64_t retry_after_ms;	/* from the response (the longer of Retry-After and
				      * retry-after-ms), 0 when none; only TRY_RESPONSE uses it */
	enum retry_should should_retry; /* the response's x-should-retry, with TRY_RESPONSE */
	unsigned pending_retries;	/* requests holding a place among max_pending_retries now,
				      * this one excluded */
	unsigned max_pending_retries;
	bool budget_allows;  /* the route's retry budget would allow one more retry now
				      * (a peek: nothing taken) */
	bool upstream_down;  /* the upstream is marked down (upstream health) */
	bool hold_when_down; /* health.hold: a retry for a down upstream is held; without
				      * it, retrying gives up at once (upstream_down) */
};

enum retry_verdict_kind {
	RETRY_VERDICT_FINAL,   /* not a retryable outcome: the response (or error) goes to the
				* client as it is, no give-up reason */
	RETRY_VERDICT_RETRY,   /* retry after wait_ms (take from the budget, unless immediate) */
	RETRY_VERDICT_GIVE_UP, /* retryable, but retrying stops: reason says why */
	RETRY_VERDICT_HOLD,    /* wait for the upstream to come back (health) */
};

/* What to do after a try, as decided by retry_decide(). */
struct retry_verdict {
	enum retry_verdict_kind kind;
	enum retry_give_up reason; /* with GIVE_UP; RETRY_GIVE_UP_NONE otherwise */
	enum retry_cause cause;	   /* the outcome's cause, for metrics */
	uint64_t wait_ms;	   /* with RETRY */
	bool immediate;		   /* RETRY at once on a new connection, without backoff or
				    * budget (a stale pooled connection) */
	bool too_large;		   /* FINAL because the retryable response is over
				    * retry_response_buffer (the log notes it) */
	bool asked;		   /* with RETRY: wait_ms is the wait the response asked
				    * for (Retry-After, retry-after-ms), longer than... */
	uint64_t backoff_ms;	   /* ... the backoff drawn, which wait_ms is otherwise */
};

/* Does a try starting wait_ms from now, elapsed_ms after the first try
 * started, start within the route's deadline? Never overflows. */
bool retry_within_deadline(const struct retry_policy *policy, uint64_t elapsed_ms,
			   uint64_t wait_ms);

/* Is this a stale pooled connection (facts->outcome TRY_STALE) that may be
 * replaced at once, on a new connection? retry_decide() asks first. */
bool retry_stale_replaceable(const struct retry_policy *policy, const struct retry_facts *facts);

/* May the request be tried again after this try, and after how long? The
 * whole retry decision in one place. Draws from rng (one backoff) only when
 * the decision gets as far as computing the wait; takes nothing from the
 * budget: on RETRY without immediate the caller spends it. A TRY_RESPONSE
 * that retry_response_retryable() refuses is FINAL whatever the other facts
 * say, so a caller may test that first and gather the rest (clock, budget)
 * only for a retryable response. */
struct retry_verdict retry_decide(const struct retry_policy *policy,
				  const struct retry_facts *facts, struct retry_rng *rng);

/* Everything retry_hedge_allowed() needs to know about a request whose
 * hedge timer fired, as the exchange sees it then. */
struct hedge_facts {
	const char *method; /* the request method, exact case */
	size_t method_len;
	bool idempotent;       /* by the route's idempotency map (method or when_present) */
	bool conditional;      /* retryable only by a precondition (when_present) or an
				 * idempotency key, not by its method */
	bool body;	       /* the request has a body (any length, even an empty chunked one) */
	bool keyed;	       /* the request carries an Idempotency-Key upstream */
	unsigned attempts;     /* tries made so far, those in flight included */
	unsigned in_flight;    /* tries in flight now, the first included */
	bool head_seen;	       /* a response head arrived on any try */
	bool response_started; /* bytes of a response already reached the client */
	uint64_t elapsed_ms;   /* since the first try started */
	bool budget_allows;    /* the route's retry budget would allow one more retry now
				 * (a peek: nothing taken) */
};

/* May one more try start now beside those in flight, because none has
 * answered within hedge->after_ms (SPEC "More retry controls": hedge)?
 * Only GET and HEAD idempotent by their method, without a body or an
 * Idempotency-Key (the copies would race for the key); only with
 * hedging configured; only while no response head has been seen and
 * nothing reached the client; only within max extra tries in flight,
 * max_attempts, the deadline and the budget. hedge is the route's
 * retry.hedge. Takes nothing from the budget: on true the caller spends
 * it, and the hedge counts as a try. */
bool retry_hedge_allowed(const struct retry_policy *policy, const struct hedge_policy *hedge,
			 const struct hedge_facts *facts);

/* Parse a Retry-After value (RFC 9110 section 10.2.3): delta-seconds, or an
 * HTTP-date in any of the three formats of section 5.6.7 (IMF-fixdate,
 * RFC 850 with its two-digit-year rule, asctime), with optional surrounding
 * SP/HTAB. Names are matched with their exact case; a weekday that does not
 * fit the date is accepted (it is redundant), an impossible date (Feb 30) is
 * not. *wait_ms is the wait from now_ms (milliseconds since the epoch: a
 * date means its whole second, and now is not rounded down to one, which
 * would add up to a second), 0 for a date not in the future; delta-seconds
 * too many for 64 bits of milliseconds give RETRY_AFTER_SATURATED_MS.
 * Returns 0, or -1 with *wait_ms untouched. */
int retry_after_parse(const char *value, size_t len, int64_t now_ms, uint64_t *wait_ms);

/* Parse a retry-after-ms value: milliseconds as digits, optionally with a
 * fraction (rounded up: the wait is at least that long), with optional
 * surrounding SP/HTAB; one too large for 64 bits gives
 * RETRY_AFTER_SATURATED_MS. Returns 0, or -1 with *wait_ms untouched. */
int retry_after_ms_parse(const char *value, size_t len, uint64_t *wait_ms);

#endif
