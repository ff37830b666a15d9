#include "listen_socket.h"

#include <errno.h>
#include <netinet/in.h>
#include <unistd.h>

/* A bound socket as listen_socket_open() describes it; -1 with errno set. */
static int listen_socket_bind(const struct sockaddr *addr, socklen_t len)
{
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int on = 1, off = 0;

	if (fd < 0)
		return -1;
	/* accepted connections inherit the keepalive: a client gone without
	 * a word is found in the end even on a connection nobody writes to */
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
	    (addr->sa_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) < 0) ||
	    bind(fd, addr, len) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

struct evconnlistener *listen_socket_open(struct event_base *base, evconnlistener_cb cb, void *arg,
					  unsigned flags, int backlog, const struct sockaddr *addr,
					  socklen_t len)
{
	int fd = listen_socket_bind(addr, len);
	struct evconnlistener *evl;

	if (fd < 0)
		return NULL;
	evl = evconnlistener_new(base, cb, arg, flags, backlog, fd);
	if (evl == NULL) {
		int err = errno;

		close(fd);
		errno = err;
	}
	return evl;
}
