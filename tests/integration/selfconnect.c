/* Preloaded into the proxy by test_self_connect.py: a connect to 127.0.0.1
 * on one of the ports listed in RETRYPROXY_SELFCONNECT_PORTS (comma
 * separated) first binds the socket to that same address and port, as the
 * kernel does when it happens to pick the destination's port as the
 * connect's ephemeral source port. With nothing listening there, TCP's
 * simultaneous open then connects the socket to itself. */
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int connect_fn(int, const struct sockaddr *, socklen_t);

static int listed(const char *ports, unsigned port)
{
	char *end;

	while (ports != NULL && *ports != '\0') {
		if (strtoul(ports, &end, 10) == port)
			return 1;
		ports = *end == ',' ? end + 1 : NULL;
	}
	return 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static connect_fn *real;
	const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;
	int one = 1;

	if (real == NULL)
		real = (connect_fn *)dlsym(RTLD_NEXT, "connect");
	if (addr->sa_family == AF_INET && sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
	    listed(getenv("RETRYPROXY_SELFCONNECT_PORTS"), ntohs(sin->sin_port))) {
		/* a port left in TIME_WAIT by an earlier such connect is
		 * taken again */
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		bind(fd, addr, len);
	}
	return real(fd, addr, len);
}
