/* Preloaded into the proxy by test_listen_dual_stack.py: every IPv6 socket
 * starts IPv6-only, as on a host with net.ipv6.bindv6only = 1 (the kernel
 * takes that default when the socket is made; a program that wants both
 * families sets IPV6_V6ONLY to 0 itself). */
#include <dlfcn.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

typedef int socket_fn(int, int, int);

int socket(int domain, int type, int protocol)
{
	static socket_fn *real;
	int one = 1;
	int fd;

	if (real == NULL)
		real = (socket_fn *)dlsym(RTLD_NEXT, "socket");
	fd = real(domain, type, protocol);
	if (fd >= 0 && domain == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	return fd;
}
