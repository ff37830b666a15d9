#ifndef RETRYPROXY_TUNNEL_H
#define RETRYPROXY_TUNNEL_H

/* A CONNECT tunnel: bytes spliced both ways with backpressure until either
 * side closes or nothing moves for the idle timeout. */

#include <stdint.h>

struct conn;
struct proxy;
struct tunnel;

/* Take over both connections; the tunnel counts as one connection. */
void tunnel_new(struct proxy *proxy, struct conn *client, struct conn *upstream,
		uint64_t idle_timeout_ms);

/* Close a tunnel now (shutdown). */
void tunnel_close(struct tunnel *tunnel);

#endif
