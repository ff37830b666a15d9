#ifndef RETRYPROXY_NAME_LOOKUP_H
#define RETRYPROXY_NAME_LOOKUP_H

/*
 * One family's lookup of a host name, the one way upstreams and the
 * fleet's Redis are resolved: the hosts file first; then localhost and
 * names under .localhost are loopback, never asked of DNS (RFC 6761
 * section 6.3); then DNS, with evdns_base_resolve_ipv4/6, which give the
 * records' TTL and the resolver's own error (NXDOMAIN, REFUSED, ...).
 * Address literals are the caller's: they are no question at all.
 *
 * evdns is asked one search-list candidate at a time (dns_search.h), and
 * a candidate whose answer came back truncated (too large for UDP) is
 * asked again over TCP (dns_tcp.h), as glibc's resolver does.
 */

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

struct conn_loop;
struct event_base;
struct evdns_base;
struct resolv_conf;
struct name_lookup; /* a question out to DNS */

/* Where names are looked up. */
struct name_resolver {
	struct event_base *base;	/* the loop, for TCP questions */
	struct evdns_base *hosts;	/* the hosts file, and no nameserver */
	struct evdns_base *dns;		/* the nameservers */
	const struct resolv_conf *conf; /* its search list, timeout and attempts;
                                   * NULL: none, and libevent's defaults */
	struct conn_loop *loop;		/* asked for descriptors when a TCP question has
                                 * none; NULL: no one to ask */
};

/* A lookup's error when evdns would not ask the question at all: a name
 * over 255 bytes, or with a label over 63. Beside the DNS_ERR_* codes,
 * which are 0 or more, and the failures of a TCP retry (dns_tcp.h's
 * DNS_TCP_*, dns_message.h's DNS_MESSAGE_MALFORMED), which are below. */
#define NAME_LOOKUP_NOT_ASKED (-1)

/* A lookup ended: addresses (a list made by dns_addresses_add(), which the
 * callee owns from now on; NULL for none), error (DNS_ERR_NONE,
 * DNS_ERR_NODATA for a DNS answer without an address of the family, another
 * DNS_ERR_*, NAME_LOOKUP_NOT_ASKED or a TCP retry's failure) and how long
 * the answer may be kept (the records' TTL; UINT64_MAX for the hosts
 * file's, which has none; 0 for a loopback answer, which costs nothing to
 * give again). */
typedef void (*name_lookup_cb)(struct evutil_addrinfo *addresses, int error, uint64_t ttl_ms,
			       void *arg);

/* Look host (normalised, without a trailing dot) up for family (AF_INET or
 * AF_INET6), its addresses carrying port: in the resolver's hosts file,
 * then as a localhost name, then in its DNS, with the search list unless
 * absolute (the name was written with a trailing dot). An answer had at
 * once (the hosts file's, loopback, a name that cannot be asked) is given
 * by calling cb before this returns, and NULL is returned; else the
 * question out, whose answer cb gets from the loop. */
struct name_lookup *name_lookup_start(const struct name_resolver *resolver, const char *host,
				      bool absolute, int family, uint16_t port, name_lookup_cb cb,
				      void *arg);

/* Stop waiting for a question's answer: cb is not called. A question out
 * over UDP is left to run its course, answered or timed out, rather than
 * cancelled: libevent's resolver takes turns between nameservers and
 * learns that one is dead only from its questions timing out, and a try's
 * connect_timeout, not longer than the resolver's own timeout, would
 * otherwise end every question to it first. */
void name_lookup_cancel(struct name_lookup *lookup);

/* Cancel the questions nobody waits for any more, before the resolver is
 * freed or its nameservers read again (which would send them again, each
 * with a new timeout): their callbacks, which free them, come in the
 * loop's next pass. */
void name_lookup_cancel_unwaited(void);

/* Is host localhost or a name under .localhost (RFC 6761 section 6.3)? */
bool name_is_localhost(const char *host);

/* What a name's failed lookups say, for a 502 and a log line: the IPv4
 * lookup's error (most names have IPv4), unless it only said the name has
 * no such address; then the IPv6 one's. */
const char *name_lookup_failure(int v4_error, int v6_error);

/* Is that error the proxy's own shortage (no descriptor, memory or local
 * port for a truncated answer's TCP retry), no verdict on the name, its
 * DNS server or the upstream? */
bool name_lookup_failure_local(int v4_error, int v6_error);

#endif
