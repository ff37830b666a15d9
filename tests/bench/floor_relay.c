/*
 * The floor: the least work a proxy between wrk and the origin can do.
 *
 *     floor_relay LISTEN_PORT ORIGIN_PORT [CONNECT_AUTHORITY]
 *
 * Each client accepted on 127.0.0.1:LISTEN_PORT gets one connection of its
 * own to 127.0.0.1:ORIGIN_PORT, and bytes are moved both ways unread: no
 * HTTP, no pool, no timers, no log. Every socket is registered once with
 * edge-triggered epoll (as HAProxy does), a read takes up to 64 KiB, and
 * what it read is sent at once, so a keep-alive request costs two recv, two
 * send and a share of an epoll_wait: the syscalls no HTTP/1.1 proxy can do
 * without. bench.py --floor runs it beside HAProxy and retryproxy to show
 * what the kernel alone costs per request on the machine at hand.
 *
 * With CONNECT_AUTHORITY, ORIGIN_PORT is a proxy's: each connection to it
 * first asks for a tunnel to that authority and relays once it is open.
 * bench.py puts it on the load core in front of both proxies at the TLS
 * point, since wrk speaks no CONNECT: with the authority in front of
 * retryproxy, without it in front of HAProxy's TLS frontend, so that both
 * pay the same for the relay.
 *
 * A benchmark instrument, not a proxy: the connect to the origin blocks
 * (loopback, once per client), an error on either side closes both, and
 * accept failing for want of descriptors is retried at the next wait. A
 * half-close is passed on once what was read before it is sent.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define FLOOR_MAX_FDS 65536
#define FLOOR_READ_SIZE 65536

/* One socket's side of a pair: its peer, what could not yet be sent to it
 * (reading from the peer waits until that is gone), and how far its
 * closing went: no more to read from it, its output to be shut once
 * pending is sent. */
struct floor_end {
	int peer;
	char *pending;
	size_t pending_len;
	bool read_done;
	bool shut_after;
};

static struct floor_end floor_ends[FLOOR_MAX_FDS];
static char floor_read_buffer[FLOOR_READ_SIZE];

/* Close both sockets of a pair and forget what they held. */
static void floor_close(int fd)
{
	int peer = floor_ends[fd].peer;

	if (peer < 0)
		return;
	for (int i = 0; i < 2; i++) {
		int end = i == 0 ? fd : peer;

		free(floor_ends[end].pending);
		floor_ends[end] = (struct floor_end){ .peer = -1 };
		close(end);
	}
}

/* src said all it will: pass the half-close on once what waits for its
 * peer is sent, and close the pair when both directions are done. */
static void floor_end_of_input(int src)
{
	int dst = floor_ends[src].peer;

	floor_ends[src].read_done = true;
	if (floor_ends[dst].pending != NULL) {
		floor_ends[dst].shut_after = true;
		return;
	}
	shutdown(dst, SHUT_WR);
	if (floor_ends[dst].read_done && floor_ends[src].pending == NULL)
		floor_close(src);
}

/* Move what src has to its peer until src has nothing more or the peer's
 * kernel buffer is full. A short read ends it unless drain (the peer
 * half-closed: its FIN may sit behind the data, with no edge of its own). */
static void floor_relay(int src, bool drain)
{
	int dst = floor_ends[src].peer;

	while (dst >= 0 && !floor_ends[src].read_done && floor_ends[dst].pending == NULL) {
		ssize_t got = recv(src, floor_read_buffer, sizeof(floor_read_buffer), 0);
		ssize_t sent;

		if (got == 0) {
			floor_end_of_input(src);
			return;
		}
		if (got < 0) {
			if (errno != EAGAIN && errno != EINTR)
				floor_close(src);
			return;
		}
		sent = send(dst, floor_read_buffer, (size_t)got, MSG_NOSIGNAL);
		if (sent < 0 && errno != EAGAIN) {
			floor_close(src);
			return;
		}
		if (sent < 0)
			sent = 0;
		if (sent < got) {
			floor_ends[dst].pending_len = (size_t)(got - sent);
			floor_ends[dst].pending = malloc(floor_ends[dst].pending_len);
			if (floor_ends[dst].pending == NULL)
				abort();
			memcpy(floor_ends[dst].pending, floor_read_buffer + sent,
			       floor_ends[dst].pending_len);
			return;
		}
		/* a short read emptied the socket: the next byte is a new edge */
		if ((size_t)got < sizeof(floor_read_buffer) && !drain)
			return;
	}
}

/* The kernel took some of fd's output: send what waits, then pass on a
 * half-close that waited for it and read on from the peer held back. */
static void floor_flush(int fd)
{
	struct floor_end *end = &floor_ends[fd];
	int peer = end->peer;
	ssize_t sent;

	if (end->pending == NULL)
		return;
	sent = send(fd, end->pending, end->pending_len, MSG_NOSIGNAL);
	if (sent < 0) {
		if (errno != EAGAIN)
			floor_close(fd);
		return;
	}
	end->pending_len -= (size_t)sent;
	if (end->pending_len > 0) {
		memmove(end->pending, end->pending + sent, end->pending_len);
		return;
	}
	free(end->pending);
	end->pending = NULL;
	if (end->shut_after) {
		end->shut_after = false;
		shutdown(fd, SHUT_WR);
		if (end->read_done && floor_ends[peer].pending == NULL) {
			floor_close(fd);
			return;
		}
	}
	floor_relay(peer, false);
}

/* Register fd for both directions, edge-triggered, for good. */
static int floor_watch(int epoll_fd, int fd)
{
	struct epoll_event event = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				     .data.fd = fd };
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

/* Ask the proxy on fd (still blocking) for a tunnel to authority and read
 * its answer's head: 0 when the tunnel is open. Nothing can follow the head
 * before the client speaks, so reading up to its end takes nothing more. */
static int floor_open_tunnel(int fd, const char *authority)
{
	char head[4096];
	size_t got = 0;
	int len = snprintf(head, sizeof(head), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority,
			   authority);

	if (len < 0 || (size_t)len >= sizeof(head) || send(fd, head, (size_t)len, 0) != len)
		return -1;
	while (got < 4 || memcmp(head + got - 4, "\r\n\r\n", 4) != 0) {
		if (got == sizeof(head) || recv(fd, head + got, 1, 0) != 1)
			return -1;
		got++;
	}
	return strncmp(head, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
}

/* A new client: connect its own origin connection (through a tunnel when
 * authority is set) and pair the two. */
static void floor_accept(int epoll_fd, int listen_fd, const struct sockaddr_in *origin,
			 const char *authority)
{
	for (;;) {
		int client = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK);
		int upstream;

		if (client < 0)
			return;
		upstream = socket(AF_INET, SOCK_STREAM, 0);
		if (upstream < 0 || client >= FLOOR_MAX_FDS || upstream >= FLOOR_MAX_FDS ||
		    connect(upstream, (const struct sockaddr *)origin, sizeof(*origin)) != 0 ||
		    (authority != NULL && floor_open_tunnel(upstream, authority) != 0) ||
		    fcntl(upstream, F_SETFL, O_NONBLOCK) != 0) {
			close(client);
			if (upstream >= 0)
				close(upstream);
			continue;
		}
		floor_ends[client] = (struct floor_end){ .peer = upstream };
		floor_ends[upstream] = (struct floor_end){ .peer = client };
		if (floor_watch(epoll_fd, client) != 0 || floor_watch(epoll_fd, upstream) != 0)
			floor_close(client);
	}
}

/* 127.0.0.1:port */
static struct sockaddr_in floor_address(const char *port)
{
	struct sockaddr_in address = { .sin_family = AF_INET,
				       .sin_port = htons((unsigned short)atoi(port)),
				       .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	return address;
}

int main(int argc, char **argv)
{
	struct sockaddr_in listen_address, origin;
	struct epoll_event events[256];
	int listen_fd, epoll_fd, one = 1;

	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: floor_relay LISTEN_PORT ORIGIN_PORT [CONNECT_AUTHORITY]\n");
		return 2;
	}
	listen_address = floor_address(argv[1]);
	origin = floor_address(argv[2]);
	listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	epoll_fd = epoll_create1(0);
	if (listen_fd < 0 || epoll_fd < 0 ||
	    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(listen_fd, (const struct sockaddr *)&listen_address, sizeof(listen_address)) !=
		    0 ||
	    listen(listen_fd, 4096) != 0 ||
	    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = listen_fd }) != 0) {
		perror("floor_relay");
		return 1;
	}
	for (int i = 0; i < FLOOR_MAX_FDS; i++)
		floor_ends[i].peer = -1;
	for (;;) {
		int ready = epoll_wait(epoll_fd, events, 256, -1);

		for (int i = 0; i < ready; i++) {
			int fd = events[i].data.fd;

			if (fd == listen_fd) {
				floor_accept(epoll_fd, listen_fd, &origin,
					     argc == 4 ? argv[3] : NULL);
				continue;
			}
			if (events[i].events & EPOLLOUT)
				floor_flush(fd);
			if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				floor_relay(fd, (events[i].events &
						 (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
		}
	}
}
