#include "name_lookup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/dns.h>

#include "dns_cache.h"
#include "dns_message.h"
#include "dns_search.h"
#include "dns_tcp.h"
#include "resolv_conf.h"
#include "xmalloc.h"

/* A question out to DNS: one search-list candidate at a time, over UDP
 * by evdns, or over TCP when its UDP answer was truncated. The resolver
 * calls back exactly once, even after evdns_cancel_request() (with
 * DNS_ERR_CANCEL, or with the answer it had already scheduled, from the
 * loop): while a UDP question is out the lookup outlives its asker, and
 * its cb is NULL once nobody waits for the answer. */
struct name_lookup {
	name_lookup_cb cb;
	void *arg;
	struct name_resolver resolver;
	int family;
	uint16_t port;
	char **candidates; /* the names to ask, in order (dns_search.h) */
	size_t candidate_count;
	size_t candidate;	       /* the one asked now */
	struct evdns_request *request; /* its UDP question, while out */
	struct dns_tcp_query *tcp;     /* its TCP question, while out */
	bool unwaited;		       /* on the list below: its asker went away */
	LIST_ENTRY(name_lookup) unwaited_link;
	bool asked; /* on the queue below: its UDP question is out */
	TAILQ_ENTRY(name_lookup) asked_link;
};

/* The UDP questions out, in the order asked. evdns sends a question at once
 * while fewer than max-inflight of its own are out and queues the others,
 * sending the queue in order as answers free places: on each resolver, the
 * first max-inflight here are sent, the rest wait (name_lookup_sent()). */
static TAILQ_HEAD(, name_lookup) name_lookup_asked = TAILQ_HEAD_INITIALIZER(name_lookup_asked);

/* UDP questions out whose askers went away, for a shutdown or a reload to
 * cancel. */
static LIST_HEAD(, name_lookup) name_lookup_unwaited = LIST_HEAD_INITIALIZER(name_lookup_unwaited);

/* The hosts file's answer, which the resolver without nameservers gives
 * at once or never. */
struct name_lookup_hosts {
	bool answered;
	struct evutil_addrinfo *addresses;
};

static void name_lookup_hosts_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct name_lookup_hosts *answer = arg;

	/* a question the hosts file could not answer, queued and cancelled at
	 * once, comes back with EVUTIL_EAI_CANCEL from the loop, long after
	 * the answer on the stack is gone: it is not to be touched */
	if (result != 0)
		return;
	answer->answered = true;
	/* NULL when the hosts file has the other family only */
	answer->addresses = dns_addresses_copy(res);
	if (res != NULL)
		evutil_freeaddrinfo(res);
}

/* Whether the hosts file names host; its addresses of family if so. Nothing
 * is ever sent: a question it cannot answer is queued for a nameserver the
 * resolver does not have, and cancelled. */
static bool name_lookup_in_hosts(struct evdns_base *hosts, const char *host, int family,
				 uint16_t port, struct evutil_addrinfo **addresses)
{
	struct name_lookup_hosts answer = { false, NULL };
	struct evdns_getaddrinfo_request *req;
	struct evutil_addrinfo hints;
	char service[8];

	if (hosts == NULL)
		return false;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	snprintf(service, sizeof(service), "%u", port);
	req = evdns_getaddrinfo(hosts, host, service, &hints, name_lookup_hosts_cb, &answer);
	if (!answer.answered && req != NULL)
		evdns_getaddrinfo_cancel(req);
	*addresses = answer.addresses;
	return answer.answered;
}

/* Its UDP question is answered, or taken out of evdns's queue. */
static void name_lookup_unask(struct name_lookup *lookup)
{
	if (!lookup->asked)
		return;
	TAILQ_REMOVE(&name_lookup_asked, lookup, asked_link);
	lookup->asked = false;
}

/* Is the lookup's UDP question sent, rather than waiting in evdns's queue
 * behind max-inflight others? */
static bool name_lookup_sent(const struct name_lookup *lookup)
{
	const struct resolv_conf *conf = lookup->resolver.conf;
	int max_inflight = conf != NULL ? conf->max_inflight : RESOLV_CONF_MAX_INFLIGHT;
	int before = 0;

	for (const struct name_lookup *l = TAILQ_FIRST(&name_lookup_asked); l != lookup;
	     l = TAILQ_NEXT(l, asked_link))
		if (l->resolver.dns == lookup->resolver.dns && ++before >= max_inflight)
			return false;
	return true;
}

static void name_lookup_free(struct name_lookup *lookup)
{
	name_lookup_unask(lookup);
	if (lookup->unwaited)
		LIST_REMOVE(lookup, unwaited_link);
	dns_search_free(lookup->candidates, lookup->candidate_count);
	free(lookup);
}

/* The lookup is over: its asker is told, unless it went away. */
static void name_lookup_finish(struct name_lookup *lookup, struct evutil_addrinfo *addresses,
			       int error, uint64_t ttl_ms)
{
	name_lookup_cb cb = lookup->cb;
	void *cb_arg = lookup->arg;

	name_lookup_free(lookup);
	if (cb != NULL)
		cb(addresses, error, ttl_ms, cb_arg);
	else
		dns_addresses_free(addresses);
}

static void name_lookup_resolve_cb(int result, char type, int count, int ttl, void *addresses,
				   void *arg);

/* An answer's count addresses of family, packed (4 or 16 bytes each), as
 * a list carrying the asker's port. */
static struct evutil_addrinfo *name_lookup_list(const struct name_lookup *lookup, int family,
						const void *addresses, size_t count)
{
	size_t size = family == AF_INET6 ? 16 : 4;
	struct evutil_addrinfo *list = NULL;

	for (size_t i = 0; i < count; i++)
		list = dns_addresses_add_ip(list, family, (const char *)addresses + size * i,
					    lookup->port);
	return list;
}

/* Ask evdns the candidate at index over UDP, the search list left to this
 * file; false when evdns would not ask it. */
static bool name_lookup_ask(struct name_lookup *lookup, size_t index)
{
	struct evdns_base *dns = lookup->resolver.dns;
	const char *name;

	if (index >= lookup->candidate_count)
		return false;
	lookup->candidate = index;
	name = lookup->candidates[index];
	if (lookup->family == AF_INET6)
		lookup->request = evdns_base_resolve_ipv6(dns, name, DNS_QUERY_NO_SEARCH,
							  name_lookup_resolve_cb, lookup);
	else
		lookup->request = evdns_base_resolve_ipv4(dns, name, DNS_QUERY_NO_SEARCH,
							  name_lookup_resolve_cb, lookup);
	if (lookup->request == NULL)
		return false;
	TAILQ_INSERT_TAIL(&name_lookup_asked, lookup, asked_link);
	lookup->asked = true;
	return true;
}

/* A candidate's answer with error: the next candidate is asked when evdns
 * would have gone on to it, else the lookup ends with this error. */
static void name_lookup_candidate_failed(struct name_lookup *lookup, int error)
{
	if (dns_search_goes_on(error) && name_lookup_ask(lookup, lookup->candidate + 1))
		return;
	name_lookup_finish(lookup, NULL, error, UINT64_MAX);
}

/* The TCP answer for a candidate whose UDP one was truncated. A failure of
 * TCP itself ends the lookup: the truncated answer said the name exists,
 * and a later candidate's NXDOMAIN would hide that. */
static void name_lookup_tcp_cb(int error, struct dns_message_answer *answer, void *arg)
{
	struct name_lookup *lookup = arg;

	lookup->tcp = NULL;
	if (error != DNS_ERR_NONE) {
		if (error >= 0)
			name_lookup_candidate_failed(lookup, error);
		else
			name_lookup_finish(lookup, NULL, error, UINT64_MAX);
		return;
	}
	name_lookup_finish(
		lookup, name_lookup_list(lookup, lookup->family, answer->addresses, answer->count),
		DNS_ERR_NONE, (uint64_t)answer->ttl * 1000);
}

/* A candidate's UDP answer: the addresses with the asker's port, or the
 * error, with the records' TTL. */
static void name_lookup_resolve_cb(int result, char type, int count, int ttl, void *addresses,
				   void *arg)
{
	struct name_lookup *lookup = arg;
	struct evutil_addrinfo *list = NULL;
	int error;

	lookup->request = NULL;
	name_lookup_unask(lookup);
	if (lookup->cb == NULL) {
		name_lookup_free(lookup);
		return;
	}
	if (result == DNS_ERR_NONE && count > 0 && (type == DNS_IPv4_A || type == DNS_IPv6_AAAA))
		list = name_lookup_list(lookup, type == DNS_IPv6_AAAA ? AF_INET6 : AF_INET,
					addresses, (size_t)count);
	error = result != DNS_ERR_NONE ? result : list == NULL ? DNS_ERR_NODATA : DNS_ERR_NONE;
	if (error == DNS_ERR_NONE) {
		name_lookup_finish(lookup, list, error, ttl > 0 ? (uint64_t)ttl * 1000 : 0);
		return;
	}
	/* too large for UDP: the same candidate over TCP */
	if (error == DNS_ERR_TRUNCATED) {
		lookup->tcp = dns_tcp_query_start(&lookup->resolver,
						  lookup->candidates[lookup->candidate],
						  lookup->family, name_lookup_tcp_cb, lookup);
		return;
	}
	name_lookup_candidate_failed(lookup, error);
}

struct name_lookup *name_lookup_start(const struct name_resolver *resolver, const char *host,
				      bool absolute, int family, uint16_t port, name_lookup_cb cb,
				      void *arg)
{
	struct evutil_addrinfo *addresses = NULL;
	struct name_lookup *lookup;

	if (name_lookup_in_hosts(resolver->hosts, host, family, port, &addresses)) {
		cb(addresses, DNS_ERR_NONE, UINT64_MAX, arg);
		return NULL;
	}
	/* a localhost name the hosts file lacks is loopback, as glibc with
	 * nss-myhostname, systemd-resolved and browsers answer it: never a
	 * question to DNS, whose answer could send the connection elsewhere */
	if (name_is_localhost(host)) {
		static const struct in6_addr loopback6 = IN6ADDR_LOOPBACK_INIT;
		uint32_t loopback4 = htonl(INADDR_LOOPBACK);

		addresses = dns_addresses_add_ip(
			NULL, family, family == AF_INET6 ? (const void *)&loopback6 : &loopback4,
			port);
		cb(addresses, DNS_ERR_NONE, 0, arg);
		return NULL;
	}
	lookup = xcalloc(1, sizeof(*lookup));
	lookup->cb = cb;
	lookup->arg = arg;
	lookup->resolver = *resolver;
	lookup->family = family;
	lookup->port = port;
	lookup->candidate_count =
		dns_search_candidates(resolver->conf, host, absolute, &lookup->candidates);
	if (!name_lookup_ask(lookup, 0)) {
		name_lookup_free(lookup);
		cb(NULL, NAME_LOOKUP_NOT_ASKED, UINT64_MAX, arg);
		return NULL;
	}
	return lookup;
}

void name_lookup_cancel(struct name_lookup *lookup)
{
	if (lookup == NULL)
		return;
	if (lookup->tcp != NULL) {
		dns_tcp_query_cancel(lookup->tcp);
		name_lookup_free(lookup);
		return;
	}
	/* freed by its callback, which the resolver makes when the question
	 * is answered or times out: not cancelled, so that a nameserver that
	 * stopped answering is seen to time out (name_lookup.h); one still in
	 * evdns's queue is taken out, as it would tell nothing of the
	 * nameserver, only be sent for nobody and hold up the questions after
	 * it */
	lookup->cb = NULL;
	if (!name_lookup_sent(lookup)) {
		name_lookup_unask(lookup);
		evdns_cancel_request(NULL, lookup->request);
		return;
	}
	lookup->unwaited = true;
	LIST_INSERT_HEAD(&name_lookup_unwaited, lookup, unwaited_link);
}

void name_lookup_cancel_unwaited(void)
{
	struct name_lookup *lookup;

	/* off the list first: it is cancelled once */
	while ((lookup = LIST_FIRST(&name_lookup_unwaited)) != NULL) {
		LIST_REMOVE(lookup, unwaited_link);
		lookup->unwaited = false;
		evdns_cancel_request(NULL, lookup->request);
	}
}

bool name_is_localhost(const char *host)
{
	static const char suffix[] = ".localhost";
	size_t n = strlen(host);
	size_t k = sizeof(suffix) - 1;

	return strcasecmp(host, "localhost") == 0 ||
	       (n > k && strcasecmp(host + n - k, suffix) == 0);
}

/* What one lookup's error says: an operator tells a dead resolver (timed
 * out) from a refusing or failing one. */
static const char *name_lookup_error_text(int error)
{
	switch (error) {
	case NAME_LOOKUP_NOT_ASKED:
		return "the name cannot be asked of DNS (over 255 bytes, or a label over 63)";
	case DNS_ERR_NOTEXIST:
		return "no such name (NXDOMAIN)";
	case DNS_ERR_NONE:
	case DNS_ERR_NODATA:
		return "the name has no address (no A or AAAA record)";
	case DNS_ERR_SERVERFAILED:
		return "the DNS server failed (SERVFAIL)";
	/* libevent 2.1 takes a SERVFAIL as a timeout: it sends the question
	 * again, and gives up as it does on silence */
	case DNS_ERR_REFUSED:
		return "the DNS server refused the query (REFUSED)";
	case DNS_ERR_TIMEOUT:
		return "no answer from the DNS server (timed out, or SERVFAIL at every attempt)";
	case DNS_ERR_TRUNCATED:
		return "the DNS answer was truncated (too large for UDP) or ill-formed";
	/* a truncated answer's retry over TCP */
	case DNS_TCP_CONNECT_FAILED:
		return "the DNS answer was too large for UDP, and its retry over TCP could not "
		       "connect to the DNS server";
	case DNS_TCP_TIMEOUT:
		return "the DNS answer was too large for UDP, and its retry over TCP got no answer "
		       "(timed out)";
	case DNS_TCP_CLOSED:
		return "the DNS answer was too large for UDP, and the DNS server closed its retry "
		       "over TCP without an answer";
	case DNS_TCP_LOCAL_SHORTAGE:
		return "the DNS answer was too large for UDP, and the proxy was short of its own "
		       "resources for its retry over TCP (too many open files, no memory or no "
		       "local port)";
	case DNS_MESSAGE_MALFORMED:
		return "the DNS answer was too large for UDP, and the answer over TCP was "
		       "ill-formed";
	case DNS_ERR_FORMAT:
		return "the DNS server could not read the query (FORMERR)";
	case DNS_ERR_NOTIMPL:
		return "the DNS server does not do such queries (NOTIMP)";
	default:
		return evdns_err_to_string(error);
	}
}

/* The error name_lookup_failure() tells. */
static int name_lookup_failure_error(int v4_error, int v6_error)
{
	int error = v4_error;

	if (error == DNS_ERR_NONE || error == DNS_ERR_NODATA)
		error = v6_error != DNS_ERR_NONE ? v6_error : error;
	return error;
}

const char *name_lookup_failure(int v4_error, int v6_error)
{
	return name_lookup_error_text(name_lookup_failure_error(v4_error, v6_error));
}

bool name_lookup_failure_local(int v4_error, int v6_error)
{
	return name_lookup_failure_error(v4_error, v6_error) == DNS_TCP_LOCAL_SHORTAGE;
}
