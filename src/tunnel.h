#ifndef RETRYPROXY_TUNNEL_H
#define RETRYPROXY_TUNNEL_H

/* A CONNECT tunnel: bytes spliced both ways with backpressure until either
 * side closes or nothing moves for the idle timeout. */

#include <stdbool.h>
#include <stdint.h>

struct access_record;
struct conn;
struct proxy;
struct tunnel;

/* Take over both connections; the tunnel counts as one connection. log,
 * NULL or the opening request's access line (the tunnel takes it), is
 * written when the tunnel ends, with its duration and bytes. client_eof:
 * the client's EOF was reported already (its conn reads no more), after
 * what is in its input: both go on to the upstream. */
void tunnel_new(struct proxy *proxy, struct conn *client, struct conn *upstream,
		uint64_t idle_timeout_ms, struct access_record *log, bool client_eof);

/* Close a tunnel now (shutdown). */
void tunnel_close(struct tunnel *tunnel);

#endif
