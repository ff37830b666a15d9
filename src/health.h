#ifndef RETRYPROXY_HEALTH_H
#define RETRYPROXY_HEALTH_H

/*
 * The health of one upstream (scheme, host, port) as a pure state machine
 * (SPEC "Upstream health"). The caller feeds it events with the time of a
 * monotonic clock and carries out the actions it returns: logging, starting
 * a probe connection, arming or cancelling the probe timer, releasing the
 * requests it holds. No clock reads, no I/O, no allocation.
 *
 * The caller maps how a connect ended: refused, DNS failure, connect
 * timeout and a failed TLS handshake are HEALTH_CONNECT_FAILED (or
 * HEALTH_PROBE_FAILED for a probe; HEALTH_PROBE_ABANDONED for one the
 * proxy could not make for want of its own resources). A certificate that fails verification
 * is not a health failure: the upstream answered, only its certificate is
 * wrong, so it is HEALTH_CONNECTED (or HEALTH_PROBE_CONNECTED).
 */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

enum health_state {
	HEALTH_UP,   /* requests open their own connections */
	HEALTH_DOWN, /* no request connects; one probe at a time finds out when it is back */
};

enum health_event {
	HEALTH_CONNECT_FAILED,	/* a request's connect failed (refused, DNS, connect timeout, TLS
				 * handshake) */
	HEALTH_CONNECTED,	/* a request's connection was made (TLS included) */
	HEALTH_RESPONSE_HEAD,	/* a response head arrived from the upstream, on any connection:
				 * resets the count, but only a connect marks it up */
	HEALTH_PROBE_DUE,	/* the probe timer fired */
	HEALTH_PROBE_CONNECTED, /* the probe in flight connected */
	HEALTH_PROBE_FAILED,	/* the probe in flight failed to connect */
	HEALTH_PROBE_ABANDONED, /* the probe in flight was never made: the proxy had no descriptor
				 * or local port for it, which says nothing of the upstream */
	HEALTH_POLICY_CHANGED,	/* a reload put a new policy in force */
};

/* One upstream's health; zeroed (or health_init) is up with no failures. */
struct health {
	enum health_state state;
	unsigned failures;	/* consecutive connect failures, saturating */
	bool probing;		/* a probe is in flight; its result is still to come */
	uint64_t next_probe_ms; /* while down and no probe in flight: when the next may start */
};

/* What the caller must do after health_step(); several may be set at once,
 * and the caller does them in the order of the fields. */
struct health_actions {
	bool went_down;	   /* UP -> DOWN: log a warning */
	bool went_up;	   /* DOWN -> UP: log at info */
	bool cancel_timer; /* the probe timer is no longer needed (with went_up) */
	bool release;	   /* start every held request's try now, oldest first */
	bool start_probe;  /* open one probe connection now; report how it ends with
			    * HEALTH_PROBE_CONNECTED or HEALTH_PROBE_FAILED */
	bool arm_timer;	   /* (re)arm the probe timer to fire at timer_ms, then report
			    * HEALTH_PROBE_DUE */
	uint64_t timer_ms; /* with arm_timer: when, on the clock of now_ms */
};

/* Start as up, with no failures and no probe. */
void health_init(struct health *h);

/* Apply one event that happened at now_ms (a monotonic clock) and say what
 * the caller must do. Down after policy->down_after consecutive connect
 * failures (0: never; a reload to 0 brings a down upstream up at its next
 * event). While down, probes run one at a time, the next starting
 * probe_interval after the previous one started, the failed connect that
 * marked it down counting as the first; the first probe that connects,
 * a request's own connection or any response head marks it up and releases
 * the held requests. A connect or response head resets the failure count.
 * Probe results while up, and a timer that fires while a probe is in
 * flight or while up, change nothing. A new policy (a reload) takes effect
 * at once: a shorter probe_interval brings a down upstream's next probe to
 * at most that interval from now. */
struct health_actions health_step(struct health *h, const struct health_policy *policy,
				  enum health_event event, uint64_t now_ms);

/* May a request open its own connection to the upstream now? False while
 * down: only the probe connects then. */
bool health_may_connect(const struct health *h);

/* Should a request whose try would start now be held until the upstream is
 * back (down and hold), rather than tried? When down without hold, the
 * request is answered 502 at once instead. */
bool health_hold(const struct health *h, const struct health_policy *policy);

/* "up" or "down", for logs and the admin endpoint. */
const char *health_state_name(enum health_state state);

#endif
