#ifndef RETRYPROXY_LISTENER_H
#define RETRYPROXY_LISTENER_H

/* The proxy's listening sockets: accept, and pause accepting at
 * max_connections instead of failing connections. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct config;
struct event;
struct evconnlistener;
struct listener_set;
struct proxy;

/* An empty set of listeners, for proxy->listeners; freed after
 * listener_close_all(). */
struct listener_set *listener_set_new(void);
void listener_set_free(struct listener_set *set);

/* Make the open listeners those of config: addresses that stay keep their
 * sockets (now under config), new ones are bound, dropped ones closed.
 * Returns 0, or -1 after logging which address could not be bound, with the
 * listeners as they were, except that those it closed to free a port stay
 * closed until listener_rebind(). */
int listener_apply(struct proxy *proxy, struct config *config);

/* Close the sockets of the listeners config drops on addr's port (they hold
 * it: 0.0.0.0:P and 127.0.0.1:P cannot both listen), so that address (a new
 * listener's, or the admin's) can be bound; the listeners are kept, to bind
 * again with listener_rebind() if the reload fails. Returns how many were
 * closed. */
size_t listener_unbind_port(struct proxy *proxy, const struct config *config,
			    const struct sockaddr_storage *addr, const char *address);

/* Listen again where listener_unbind_port() closed listeners; one whose
 * address was taken meanwhile is gone. */
void listener_rebind(struct proxy *proxy);

/* accept() on evl (in logs: kind, "listener" or "admin", and address) failed. Out of file
 * descriptors is survivable: when idle pooled connections can be closed to
 * make room, accepting goes on (evl is still readable); else the error is
 * logged and evl disabled until resume_timer, armed here, enables it again,
 * rather than the accept being retried in a busy loop. */
void listener_accept_failed(struct proxy *proxy, struct evconnlistener *evl, const char *kind,
			    const char *address, struct event *resume_timer);

/* Whether a connect to addr (len bytes) would reach one of the proxy's own
 * listening sockets (config_values_connect_reaches()): the proxy never
 * connects there for a client, since a CONNECT to itself would nest one
 * tunnel in another for every CONNECT head the client sends behind it.
 * 1, 0, or -1 with errno when it cannot be told now for one of them. */
int listener_is_address(const struct proxy *proxy, const struct sockaddr *addr, socklen_t len);

/* Close every listener. */
void listener_close_all(struct proxy *proxy);

/* Accept below limits.max_connections and not at it, as the open client
 * connections and tunnels say now: after an accept, a close, and a reload
 * that changed the limit. Nothing while draining. At the limit, a
 * connection waiting to be accepted makes room: idle client connections
 * close for it (client_close_longest_idle). */
void listener_check_accepting(struct proxy *proxy);

/* A client connection became idle, the first on the idle list: at the
 * limit, a connection that found none to close may take its place now. */
void listener_idle_available(struct proxy *proxy);

#endif
