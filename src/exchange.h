#ifndef RETRYPROXY_EXCHANGE_H
#define RETRYPROXY_EXCHANGE_H

/*
 * One proxied request and its tries: routing, the request head rebuilt for
 * the upstream once (and re-sent on every try), the request body, the
 * upstream connections of its tries, the response relayed with
 * backpressure, and the access-log line. Whether another try is still legal
 * is decided by retry_decide() from facts gathered here; an exchange ends
 * in exactly one place, exchange_close().
 */

#include <stdbool.h>
#include <stddef.h>

#include "http1.h"

struct config;
struct access_record;
struct conn;
struct exchange;
struct proxy;
struct upstream_url;

/* How an exchange ended, as its owner hears it. */
enum exchange_end {
	EXCHANGE_END_KEEP_ALIVE,  /* the response is queued whole; the connection may go on */
	EXCHANGE_END_CLOSE,	  /* the response is queued whole; close after writing it */
	EXCHANGE_END_BROKEN,	  /* the response broke off: close now */
	EXCHANGE_END_RESET,	  /* a close-delimited body broke off: reset, so the client
				   * does not take the cut body for a whole one */
	EXCHANGE_END_TUNNEL,	  /* CONNECT succeeded, or a 101 switched protocols: the upstream
				   * connection is the owner's, for a tunnel */
	EXCHANGE_END_CLIENT_GONE, /* the owner ended it (exchange_abort): no report */
};

/* What an exchange needs from the client connection it serves: the
 * connection to read the body from and write the response to, and the
 * owner's answers. The owner outlives the exchange until ended() (or its
 * own exchange_abort()); after ended() the exchange touches nothing of it. */
struct exchange_owner {
	struct conn *conn;
	struct config *config;		     /* the config the connection runs under */
	const struct upstream_url *upstream; /* its listener's upstream, NULL for a forward proxy;
					      * an intercepted tunnel's https://host:port */
	const char *tunnel_host;	     /* intercepted tunnel: the CONNECT host, which every
				    * request must name and routes match on; else NULL */
	const char *target_prefix;	     /* put before the target in the log
				    * ("https://host:port"), or NULL */
	const char *peer;		     /* for the log */
	void (*watch_body)(void *arg, bool on); /* time out a request body that stalls */
	bool (*closing)(void *arg);		/* the connection closes after this request */
	/* a tunnel gets its upstream connection and its access line, to be
	 * written when it ends (the owner takes both) */
	void (*ended)(void *arg, enum exchange_end end, struct conn *tunnel,
		      struct access_record *tunnel_log);
	void *arg;
};

/* Check and route a parsed request for owner, copying what it needs from
 * head (the caller drains the head from its input afterwards). NULL when the
 * request is refused before any upstream work: *status and reason say what
 * to answer. */
struct exchange *exchange_new(struct proxy *proxy, const struct exchange_owner *owner,
			      const struct http1_head *head, const struct http1_framing *framing,
			      int *status, char *reason, size_t reason_len);

/* For a request in owner's intercepted tunnel: 0 when the tunnel may carry
 * it, else the status to refuse it with (reason says why). */
int exchange_check_tunnel(const struct exchange_owner *owner, const struct http1_head *head,
			  const struct http1_framing *framing, char *reason, size_t reason_len);

/* Start the first try (or, for CONNECT, the tunnel's connection). */
void exchange_run(struct exchange *exchange);

/* The client's input has more bytes (request body). */
void exchange_client_readable(struct exchange *exchange);

/* The client's output drained below its low-water mark. */
void exchange_client_drained(struct exchange *exchange);

/* The client went away or its connection must close: stop everything and
 * write the access-log line. The exchange is gone afterwards; its owner
 * hears nothing more. */
void exchange_abort(struct exchange *exchange, const char *reason);

/* Is the client still sending a request body it owes (not one it has yet
 * to begin for a 100 Continue the upstream has not sent, nor one whose rest
 * waits whole in its input for a try to take it)? */
bool exchange_request_body_owed(const struct exchange *exchange);

/* The proxy is about to close the client's connection itself (drain_timeout,
 * shutdown): a retry under way is logged and counted as given up for the
 * drain's deadline (gave_up=deadline), not as one the client left. */
void exchange_proxy_ends(struct exchange *exchange);

/* The request body stopped arriving for client_timeout. A response already
 * under way is broken off as an upstream's break would be (a reset where a
 * clean close would make a body delimited by it look whole); when none has
 * begun, the client gets 408 and the connection closes after it. The owner
 * hears how it ended. */
void exchange_body_stalled(struct exchange *exchange, const char *reason);

/* A drain is under way: a request in backoff whose next try would start
 * after proxy->drain_answer_ms gives up now, with the last response kept,
 * else 503 (gave_up=deadline, note=draining); a retry decided from now on is
 * held to the same time. */
void exchange_drain_begins(struct exchange *exchange);

/* The drain's answer time came: a request waiting for its next try (in
 * backoff, held for a down upstream or queued for a connection) gets its
 * answer now, as above; no try of any request starts from now on (a hedge
 * neither). False, and nothing done, for one that waits for none of these:
 * a try in flight or a response under way goes on until drain_timeout. */
bool exchange_drain_answer(struct exchange *exchange);

/* Free the spare exchanges (shutdown). */
void exchange_free_spares(struct proxy *proxy);

#endif
