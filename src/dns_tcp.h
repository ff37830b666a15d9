#ifndef RETRYPROXY_DNS_TCP_H
#define RETRYPROXY_DNS_TCP_H

/*
 * One A or AAAA question over TCP (RFC 1035 section 4.2.2, RFC 7766), for
 * a name whose answer over UDP came back truncated: sent to the
 * nameservers evdns has, in turn, non-blocking on the event loop, each
 * attempt given resolv.conf's timeout, as many attempts as its attempts:
 * (at least one); a refused connect, a timeout, a close or an ill-formed
 * answer moves on to the next. Always from the first: evdns does not say
 * which nameserver sent the truncated answer. The answer is read by
 * dns_message.h.
 */

#include <stddef.h>

struct name_resolver;
struct dns_message_answer;
struct dns_tcp_query;

/* Why a TCP question got no answer; beside evdns's DNS_ERR_* codes, which
 * are 0 or more, and dns_message.h's DNS_MESSAGE_MALFORMED. */
#define DNS_TCP_CONNECT_FAILED (-2) /* refused, unreachable */
#define DNS_TCP_TIMEOUT (-3)	    /* no whole answer in time */
#define DNS_TCP_CLOSED (-4)	    /* the server closed before a whole answer */
/* the proxy's own shortage (no descriptor, memory or local port for the
 * socket): nothing reached the DNS server, which is not to blame */
#define DNS_TCP_LOCAL_SHORTAGE (-6)

/* The question ended: error DNS_ERR_NONE with answer's addresses (which
 * the callee may take, setting answer->addresses to NULL), or the
 * error. */
typedef void (*dns_tcp_cb)(int error, struct dns_message_answer *answer, void *arg);

/* Ask the resolver's nameservers name's A (family AF_INET) or AAAA
 * (AF_INET6) records over TCP, with its resolv.conf's timeout and attempts
 * (libevent's defaults without one), on its loop; a socket short of
 * descriptors asks its conn_loop for some. cb is called once, from the
 * loop, never before this returns. */
struct dns_tcp_query *dns_tcp_query_start(const struct name_resolver *resolver, const char *name,
					  int family, dns_tcp_cb cb, void *arg);

/* Stop the question: cb is not called. */
void dns_tcp_query_cancel(struct dns_tcp_query *query);

#endif
