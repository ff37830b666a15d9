#ifndef RETRYPROXY_LISTEN_SOCKET_H
#define RETRYPROXY_LISTEN_SOCKET_H

/*
 * The listening socket of a listener or the admin, made here rather than by
 * evconnlistener_new_bind() so that an IPv6 address takes IPv4 as well
 * whatever net.ipv6.bindv6only says: the config's checks (two listeners
 * on one port, the proxy's own addresses) take "[::]" to be every
 * address of both families, and "[::ffff:127.0.0.1]" to be bindable.
 */

#include <sys/socket.h>

#include <event2/listener.h>

/* evconnlistener_new_bind() with that difference: a non-blocking,
 * close-on-exec TCP socket bound to addr, with SO_REUSEADDR and
 * SO_KEEPALIVE as libevent's own listeners set them, listening with
 * backlog; NULL with errno set. */
struct evconnlistener *listen_socket_open(struct event_base *base, evconnlistener_cb cb, void *arg,
					  unsigned flags, int backlog, const struct sockaddr *addr,
					  socklen_t len);

#endif
