#ifndef RETRYPROXY_EXCHANGE_H
#define RETRYPROXY_EXCHANGE_H

/*
 * One proxied request and its tries: routing, the request head rebuilt for
 * the upstream once (and re-sent on every try), the request body, the
 * upstream connection of the current try, the response relayed with
 * backpressure, and the access-log line. Whether another try is still legal
 * (nothing of the response has reached the client) is decided here only.
 */

#include <stddef.h>

#include "http1.h"

struct client;
struct exchange;
struct proxy;

/* Check and route a parsed request, copying what it needs from head (the
 * caller drains the head from its input afterwards). NULL when the request
 * is refused before any upstream work: *status and reason say what to answer. */
struct exchange *exchange_new(struct client *client, const struct http1_head *head,
			      const struct http1_framing *framing, int *status, char *reason,
			      size_t reason_len);

/* Start the first try (or, for CONNECT, the tunnel's connection). */
void exchange_run(struct exchange *exchange);

/* The client's input has more bytes (request body). */
void exchange_client_readable(struct exchange *exchange);

/* The client's output drained below its low-water mark. */
void exchange_client_drained(struct exchange *exchange);

/* The client went away or the connection must close: stop everything,
 * write the access-log line and free the exchange. */
void exchange_abort(struct exchange *exchange, const char *reason);

/* Free a finished exchange (after client_exchange_done or _tunnel); it is
 * kept for reuse while the proxy has fewer than EXCHANGE_SPARES spares. */
void exchange_free(struct exchange *exchange);

/* Free the spare exchanges (shutdown). */
void exchange_free_spares(struct proxy *proxy);

#endif
