#ifndef RETRYPROXY_LISTEN_SOCKET_H
#define RETRYPROXY_LISTEN_SOCKET_H

/*
 * The socket a listener (or the admin) listens on, bound but not yet
 * listening, for evconnlistener_new(). Made here rather than by
 * evconnlistener_new_bind() so that an IPv6 address takes IPv4 as well
 * whatever net.ipv6.bindv6only says: the config's checks (two listeners
 * on one port, the proxy's own addresses) take "[::]" to be every
 * address of both families, and "[::ffff:127.0.0.1]" to be bindable.
 */

#include <sys/socket.h>

/* A non-blocking, close-on-exec TCP socket bound to addr, with
 * SO_REUSEADDR and SO_KEEPALIVE as libevent's own listeners set them; -1
 * with errno set. */
int listen_socket_bind(const struct sockaddr *addr, socklen_t len);

#endif
