#ifndef RETRYPROXY_UPSTREAMS_H
#define RETRYPROXY_UPSTREAMS_H

/*
 * Every upstream the proxy talks to, by scheme, host and port (SPEC
 * "Upstream health"): its health (health.c), shared by all routes and
 * exchanges; the requests waiting for it; its probes while it is down; and
 * what /upstreams and the metrics show.
 *
 * Requests open their own connections while the upstream is up and proven.
 * While its health is in doubt (no connection made yet, or failures since
 * the last one) one connect at a time finds out and the others wait for it,
 * so that a burst of requests to an upstream that is not there costs
 * down_after connects, not one per request. While it is down, requests
 * wait (health.hold) or are refused, and one probe per probe_interval
 * finds out when it is back.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "upstream.h"

struct evbuffer;
struct proxy;
struct upstream;
struct upstreams;

/* A request waiting for an upstream. */
struct upstream_waiter {
	TAILQ_ENTRY(upstream_waiter) link;
	struct upstream *upstream; /* NULL when not waiting */
	uint64_t seq;		   /* arrival order */
	/* go: start the try now; false when the request ended instead,
	 * taking nothing (the queue offers its turn to the next) */
	bool (*release)(struct upstream_waiter *w);
	bool for_connection; /* in the queue for a connection (upstream_slot_wait) */
};

/* What a request that would open a connection does now. */
enum upstream_admit {
	UPSTREAM_GO,	 /* connect */
	UPSTREAM_WAIT,	 /* wait (upstream_wait) for the upstream to be known good */
	UPSTREAM_REFUSE, /* the upstream is down and health.hold is false: 502 now */
};

struct upstreams *upstreams_new(struct proxy *proxy);
void upstreams_free(struct upstreams *upstreams);

/* The upstream at endpoint, made on first use; held by the caller until
 * upstream_release() (an upstream no one holds may be forgotten when there
 * are many). */
struct upstream *upstreams_hold(struct upstreams *upstreams,
				const struct upstream_endpoint *endpoint);
void upstream_release(struct upstream *upstream);

/* "http://host:port": its name in /upstreams, logs and metrics. */
const char *upstream_name(const struct upstream *upstream);

bool upstream_down(const struct upstream *upstream);

/* Whether the upstream's latest answer that told came in HTTP/1.0: any
 * answer in HTTP/1.0, or one in HTTP/1.1 to a chunked body (what would be
 * sent differently). RFC 9112 section 6.1: no Transfer-Encoding to a server
 * not known to handle HTTP/1.1, as a prior response's version says. */
void upstream_note_http10(struct upstream *upstream, bool http10);
bool upstream_answered_http10(const struct upstream *upstream);

/* Whether a response head came from the upstream since its record was made
 * (upstream_response_seen()), so that upstream_answered_http10() tells its
 * version: before one, it may speak HTTP/1.0 or HTTP/1.1. */
bool upstream_version_heard(const struct upstream *upstream);

/* May a request open its own connection now (policy: the request's
 * config's health:)? On UPSTREAM_GO the caller connects and reports the end
 * with upstream_connect_end(). */
enum upstream_admit upstream_admit(struct upstream *upstream, const struct health_policy *policy);

/* What upstream_admit() would answer now, counting nothing: for a caller
 * that must do something first (close an idle connection to make room)
 * only if it may then connect. */
enum upstream_admit upstream_admission(const struct upstream *upstream,
				       const struct health_policy *policy);

/* After UPSTREAM_WAIT for an upstream that is not down: connect anyway,
 * counted like an admitted connect (report its end with
 * upstream_connect_end()). For a request that never waits (retry.mode:
 * observe): it finds out for itself instead of waiting for a connect in
 * doubt. */
void upstream_admit_anyway(struct upstream *upstream);

/* Wait, in arrival order, until released or upstream_unwait(). */
void upstream_wait(struct upstream *upstream, struct upstream_waiter *waiter);
void upstream_unwait(struct upstream_waiter *waiter);

/* A connect admitted by upstream_admit() ended: made (a certificate that
 * fails verification counts as made: the upstream answered), made with a
 * handshake the server may still refuse on the first read (TLS 1.3,
 * tls_client_may_be_refused(): as made, but the failures in a row stand
 * until a response head comes, or the refusal adds one with
 * upstream_handshake_refused()), failed, or given up before it ended
 * (abandoned: no verdict on the upstream). */
enum upstream_connect_result {
	UPSTREAM_CONNECT_MADE,
	UPSTREAM_CONNECT_MADE_IN_DOUBT,
	UPSTREAM_CONNECT_FAILED,
	UPSTREAM_CONNECT_ABANDONED,
};
void upstream_connect_end(struct upstream *upstream, const struct health_policy *policy,
			  enum upstream_connect_result result);

/* A new connection's first read was the server's refusal of the handshake
 * (a TLS 1.3 server that judged the client's side after it ended): a
 * connect failure, as a refusal during the handshake is. */
void upstream_handshake_refused(struct upstream *upstream, const struct health_policy *policy);

/* A response head arrived from the upstream: it is alive, and its HTTP
 * version is heard (upstream_version_heard()). */
void upstream_response_seen(struct upstream *upstream, const struct health_policy *policy);

/* limits.max_upstream_connections: the connections open or being opened
 * to an upstream are counted, and past max a request waits for one, in
 * arrival order. Take a place for a new connection: true when one is free
 * and nobody waits for it before the caller (first_in_line: the caller was
 * just released from the queue, so it is the oldest). */
bool upstream_slot_take(struct upstream *upstream, unsigned max, bool first_in_line);

/* After upstream_slot_take() refused: was it only for the cap, so that a
 * place freed now would go to this caller (and not to those waiting before
 * it)? */
bool upstream_slot_at_cap(const struct upstream *upstream, bool first_in_line);

/* More connections open than the live limit allows (a reload lowered it):
 * an idle one should close rather than serve or be pooled again. */
bool upstream_slot_over_cap(const struct upstream *upstream);

/* Give back a place taken that no connection holds (its connect failed or
 * was given up, or it was not needed). */
void upstream_slot_put(struct upstream *upstream);

/* conn_on_closed() callback for a connection holding a place: arg is the
 * upstream. */
void upstream_slot_closed(void *arg);

/* Wait for a place (or a pooled connection), at the end of the queue or,
 * for a request released a moment ago that found none after all, at its
 * front; released from the loop, oldest first, as places free up. Left with
 * upstream_unwait(). */
void upstream_slot_wait(struct upstream *upstream, struct upstream_waiter *waiter, bool front);

/* An idle connection to it went into the pool: the oldest waiting request
 * may take it. */
void upstream_slot_pooled(struct upstream *upstream);

/* Requests waiting for a connection now, over all upstreams. */
unsigned upstreams_slot_waiting(const struct upstreams *upstreams);

/* A new max_upstream_connections is in force (a reload): requests waiting
 * under the old one go now if the new one leaves room. */
void upstreams_slot_limit(struct upstreams *upstreams, unsigned max);

/* A new health policy is in force (a reload): every upstream's health goes
 * by it now (a down one's next probe comes sooner if the interval was
 * shortened, or it is up if health was turned off), not only once a request
 * under the new config comes for it. */
void upstreams_health_policy(struct upstreams *upstreams, const struct health_policy *policy);

/* Do requests wait for a connection to this upstream? */
bool upstream_slot_waiters(const struct upstream *upstream);

/* Requests waiting now, over all upstreams. */
unsigned upstreams_waiting(const struct upstreams *upstreams);

/* /upstreams: one line per upstream, "<name> up|down failures=N held=N". */
void upstreams_render(const struct upstreams *upstreams, struct evbuffer *out);

/* retryproxy_upstream_up, retryproxy_held_requests,
 * retryproxy_upstream_waiting and retryproxy_probes_total in the
 * Prometheus text format. */
void upstreams_render_metrics(const struct upstreams *upstreams, struct evbuffer *out);

/* One upstream as the status page shows it. */
struct upstream_view {
	const char *name; /* "http://host:port" */
	bool down;
	unsigned failures; /* consecutive connect failures */
	unsigned held;	   /* requests waiting for it now */
	unsigned waiting;  /* requests waiting for a connection to it (max_upstream_connections) */
	uint64_t probes_ok;
	uint64_t probes_failed;
	uint64_t probes_short; /* not made for want of the proxy's descriptors or ports */
};

/* Call fn for each upstream, most recently used first, as /upstreams lists
 * them. */
void upstreams_each(const struct upstreams *upstreams,
		    void (*fn)(const struct upstream_view *view, void *arg), void *arg);

#endif
