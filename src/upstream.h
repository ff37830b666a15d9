#ifndef RETRYPROXY_UPSTREAM_H
#define RETRYPROXY_UPSTREAM_H

/*
 * A new connection to an upstream: resolve the name without blocking (evdns,
 * honouring the hosts file and resolv.conf; A and AAAA apart, connecting
 * on the first answer as RFC 8305 section 3 says), connect to its addresses with
 * staggered attempts (happy_eyeballs.h: an address that neither connects nor
 * fails within a short delay gets the next started beside it, a failure
 * starts the next at once), and for https complete a verified TLS
 * handshake; the first connection made wins, all within one timeout.
 */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "retry.h"

struct conn;
struct proxy;
struct upstream_connect;

/* Where to connect. */
struct upstream_endpoint {
	bool tls;
	bool absolute; /* the host was written with a trailing dot (dropped from host) */
	const char *host;
	uint16_t port;
};

/* Called once: with a connected conn (now the caller's, callbacks unset,
 * not reading), or with NULL, how the try ended (TRY_DNS, TRY_REFUSED,
 * TRY_CONNECT_TIMEOUT, TRY_TLS or TRY_TLS_VERIFY) and a reason; local when
 * nothing reached the network because the proxy itself was short (no
 * descriptor or local port left, a TLS connection it could not set up): it
 * says nothing of the upstream's health. */
typedef void (*upstream_connect_cb)(struct conn *conn, enum try_outcome failure, bool local,
				    const char *reason, void *arg);

/* Start connecting; the callback never runs before this returns. tls is
 * used only for https endpoints; session_key names the upstream for TLS
 * session resumption. The resolved addresses are tried from the
 * address_shift-th on (in happy_eyeballs_order), round to the one before
 * it: a retry, a hedge or the next probe starts at another address than
 * the connect before it. timeout_ms (connect_timeout) counts from now_ms,
 * a timer_now_ms() reading the caller took just now. */
struct upstream_connect *upstream_connect_start(struct proxy *proxy,
						const struct upstream_endpoint *endpoint,
						const struct tls_policy *tls,
						const char *session_key, uint64_t now_ms,
						uint64_t timeout_ms, unsigned address_shift,
						upstream_connect_cb cb, void *arg);

/* Stop a connect in progress; its callback will not run. */
void upstream_connect_cancel(struct upstream_connect *uc);

/* Write a host name in the one form the upstream uses: lower case, without
 * a trailing dot (SNI takes none). Returns its new length, one less when a
 * dot was dropped: the caller keeps that as upstream_endpoint.absolute. The
 * name is not NUL-terminated here. */
size_t upstream_host_normalise(char *host, size_t len);

/* The longest IPv6 address inet_ntop writes, without its NUL. */
#define UPSTREAM_IPV6_TEXT_MAX 45

/* Write an IPv6 address literal (any text with a ':') in the one spelling
 * inet_ntop gives it (RFC 5952: "0:0::1" and "::0001" are "::1"), so that
 * each address is one upstream, one pool and one cap. The result can be
 * longer than the text ("::ffff:7f00:1" is "::ffff:127.0.0.1"): host has
 * room for UPSTREAM_IPV6_TEXT_MAX bytes. Returns the new length; other
 * hosts, and text that is no address, are left as they are. Not
 * NUL-terminated here. */
size_t upstream_host_canonical_ipv6(char *host, size_t len);

/* The one spelling of an upstream's host, in place: normalised (the
 * trailing dot dropped: *absolute says whether there was one), then, when
 * ipv6 (the host has a ':'), the address as inet_ntop writes it (room for
 * UPSTREAM_IPV6_TEXT_MAX bytes). One upstream, pool and cap per spelling.
 * Returns the new length; not NUL-terminated here. */
size_t upstream_host_spelling(char *host, size_t len, bool ipv6, bool *absolute);

/* The pool key of an endpoint under a trust policy, written to buf. */
void upstream_pool_key(const struct upstream_endpoint *endpoint, const struct tls_policy *tls,
		       char *buf, size_t len);

#endif
