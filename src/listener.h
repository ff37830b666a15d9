#ifndef RETRYPROXY_LISTENER_H
#define RETRYPROXY_LISTENER_H

/* The proxy's listening sockets: accept, and pause accepting at
 * max_connections instead of failing connections. */

#include <stdbool.h>

struct config;
struct listener_set;
struct proxy;

/* An empty set of listeners, for proxy->listeners; freed after
 * listener_close_all(). */
struct listener_set *listener_set_new(void);
void listener_set_free(struct listener_set *set);

/* Make the open listeners those of config: addresses that stay keep their
 * sockets (now under config), new ones are bound, dropped ones closed.
 * Returns 0, or -1 after logging which address could not be bound, with the
 * listeners as they were. */
int listener_apply(struct proxy *proxy, struct config *config);

/* Close every listener. */
void listener_close_all(struct proxy *proxy);

/* Stop or resume accepting on every listener. */
void listener_set_accepting(struct proxy *proxy, bool accepting);

/* False while accepting is paused (max_connections). */
bool listener_accepting(const struct proxy *proxy);

#endif
