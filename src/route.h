#ifndef RETRYPROXY_ROUTE_H
#define RETRYPROXY_ROUTE_H

/* Match a request to a route: the first route whose host, path prefix and
 * methods all match wins; no match is the default route. Then decide where
 * the request goes, or why it may not go anywhere. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "http1.h"

/* Where a request goes, as route_destination() decides it. Pointers are into
 * the config or the parsed request. */
struct route_destination {
	const struct route *route; /* the matched route, or the default one */
	bool tls;		   /* connect with TLS */
	uint16_t port;
	const char *host; /* to resolve and connect to; no brackets around IPv6 */
	size_t host_len;
	const char *authority; /* host[:port] for the Host field sent upstream */
	size_t authority_len;
};

/* host is without the port; compared case-insensitively. Path prefixes match
 * the path's normal form (uri_path.h). */
const struct route *route_match(const struct config *config, const char *host, size_t host_len,
				const char *path, size_t path_len, const char *method,
				size_t method_len);

/* "*" matches any host, "*.example.com" any subdomain of example.com (not
 * example.com itself), anything else the host exactly, ignoring case. */
bool route_host_pattern_matches(const char *pattern, const char *host, size_t host_len);

/* Match a parsed request to its route and decide where it goes: the route's
 * upstream, else for origin-form the listener's (listener_upstream, may be
 * NULL), else the absolute URI's host; a CONNECT goes where the client asked.
 * host is the Host field's host without port (NULL when absent), which routes
 * match in origin and asterisk form. Where the client's host decides the
 * destination, it must be in access.allow_hosts. Returns 0 with *dest filled
 * in, or the status to refuse with (400, 403) and the reason in reason. Route
 * prefixes match the path's normal form (uri_path.h); a path without one
 * (a stray '%', a ".." after an empty segment) is a 400. Pure: no I/O, and
 * no allocation but for a path over 2 KiB that needs normalising. */
int route_destination(const struct config *config, const struct upstream_url *listener_upstream,
		      const struct http1_target *target, const char *host, size_t host_len,
		      const char *method, size_t method_len, struct route_destination *dest,
		      char *reason, size_t reason_len);

/* Does config intercept CONNECTs to host: intercept: with its CA loaded,
 * and host in intercept.hosts? */
bool route_host_intercepted(const struct config *config, const char *host, size_t host_len);

/* May a tunnel to tunnel_host (the CONNECT host, no port) still carry
 * requests under config: the host in access.allow_hosts and still
 * intercepted? A reload may have taken either away since the CONNECT.
 * Returns 0, or 403 with a reason. */
int route_check_tunnel_host(const struct config *config, const char *tunnel_host, char *reason,
			    size_t reason_len);

/* Do two hosts (a name, or an IP literal with or without brackets) name the
 * same host: names compared without regard to case or a trailing dot,
 * addresses as addresses (0:0::1 is ::1)? */
bool route_same_host(const char *a, size_t a_len, const char *b, size_t b_len);

/* Inside an intercepted tunnel every request names the tunnel's host and port
 * (the CONNECT host without brackets, and its port) in its Host, or has no
 * Host at all (HTTP/1.0): no fronting another host or port through it. An
 * absolute-form target must name the tunnel's origin too: https (http for a
 * tunnel that carries plain HTTP, tls false), its host and port (none, or an
 * empty one, means the scheme's default), else 421; the caller then routes
 * it as its origin-form equivalent. No CONNECT. Hosts compare as
 * route_same_host says; a Host without a port means 443 (80 without TLS).
 * Returns 0, or 400 or 421 with a reason. */
int route_check_tunnel(const char *tunnel_host, uint16_t tunnel_port, bool tls,
		       const struct http1_head *head, const struct http1_framing *framing,
		       char *reason, size_t reason_len);

#endif
