#ifndef RETRYPROXY_CLIENT_H
#define RETRYPROXY_CLIENT_H

/*
 * One downstream connection: reads request heads (client_timeout bounds each
 * one), runs one exchange at a time so pipelined responses stay in order,
 * keeps the connection alive between requests, and writes the proxy's own
 * error responses.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

struct config;
struct listener_config;
struct proxy;
struct client;

/* Take over an accepted socket. config is the one the listener runs under. */
void client_new(struct proxy *proxy, struct config *config, const struct listener_config *listen,
		evutil_socket_t fd, const struct sockaddr *peer, socklen_t peer_len);

/* Close a client connection now, for any state (drain timeout, shutdown). */
void client_close(struct client *client, const char *reason);

/* At max_connections with a connection waiting to be accepted: close the
 * client connection idle longest between requests (its response written,
 * nothing of a next one read), cleanly, as client_timeout closes an idle
 * one; its client sends its next request on a new connection. Only one
 * idle for a second or more is closed. Returns false when none is closed:
 * *closable_at is then when the longest idle one may be
 * (timeval_now_coarse_ms), 0 when no connection is idle. */
bool client_close_longest_idle(struct proxy *proxy, uint64_t *closable_at);

#endif
