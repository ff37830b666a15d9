#include "upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/err.h>

#include "admin.h"
#include "conn.h"
#include "config.h"
#include "dns_cache.h"
#include "happy_eyeballs.h"
#include "listener.h"
#include "log.h"
#include "name_lookup.h"
#include "proxy.h"
#include "tls.h"
#include "xmalloc.h"
#include "timer.h"
#include "timeval.h"

#define UPSTREAM_REASON_MAX 320 /* longest failure reason passed on */

/* One address's connection attempt. */
struct upstream_attempt {
	struct upstream_connect *uc;
	struct evutil_addrinfo *address;
	struct conn *conn; /* while it has neither connected nor failed */
};

/* The lookups of a name, one per family and each with its own answer, so
 * that connecting can begin before the other family's answer comes, or
 * without it when a resolver drops AAAA queries (RFC 8305 section 3). IPv6 is
 * asked first: of answers that come at once (the hosts file), its addresses
 * go first, as RFC 8305 prefers and as one lookup for both gave them. */
enum { UPSTREAM_LOOKUP_V6, UPSTREAM_LOOKUP_V4, UPSTREAM_LOOKUPS };
static const int upstream_lookup_family[UPSTREAM_LOOKUPS] = { AF_INET6, AF_INET };

/* How long IPv4 addresses wait for the AAAA answer before connecting
 * begins without it: RFC 8305's Resolution Delay. */
#define UPSTREAM_RESOLUTION_DELAY_MS 50

struct upstream_lookup {
	struct upstream_connect *uc;
	struct name_lookup *request;	   /* while its question is out */
	struct evutil_addrinfo *addresses; /* its answer (dns_addresses_add()); NULL for none */
	struct dns_cache_entry *cached;	   /* holds addresses when not NULL */
	struct upstream_attempt *attempts; /* one per address, once taken */
	size_t count;			   /* of attempts */
	uint64_t ttl_ms;		   /* the answer's TTL; UINT64_MAX: none given */
	int error;			   /* DNS_ERR_* (or NAME_LOOKUP_NOT_ASKED) when it failed */
	bool done;
	bool taken; /* its addresses are among the attempts */
};

struct upstream_connect {
	struct proxy *proxy;
	struct upstream_endpoint endpoint;
	char *host; /* owned copy behind endpoint.host */
	struct tls_policy tls;
	char *session_key;
	upstream_connect_cb cb;
	void *arg;
	struct upstream_lookup lookups[UPSTREAM_LOOKUPS];
	struct upstream_lookup *first_answer; /* the lookup that answered first */
	struct upstream_attempt **attempts;   /* in the order they are tried */
	size_t count;			      /* attempts laid out */
	size_t started;			      /* attempts started so far, in order */
	size_t in_flight;	   /* attempts started that neither connected nor failed */
	unsigned address_shift;	   /* start this many addresses into the order */
	uint64_t attempt_delay_ms; /* how long one attempt has alone */
	struct timer *timer;	   /* connect_timeout for everything */
	struct event *stagger;	   /* attempt_delay_ms after the latest attempt started; before
				* the first, the resolution delay */
	struct event *step;	   /* defers results that arrive synchronously */
	enum try_outcome last_failure;
	char reason[UPSTREAM_REASON_MAX];
	bool short_failed;     /* an attempt failed for want of the proxy's own resources
				* (descriptors, ports, its TLS set-up) */
	bool network_failed;   /* ... and one for a reason of the network's or upstream's */
	bool resolving_inline; /* inside name_lookup_start(), which may answer at once */
	bool literal;	       /* the host is an address: nothing to keep */
	bool resolved;	       /* attempts laid out: connecting has begun */
	bool resolution_delay_over;
};

/* Append n bytes of s at buf[at], cut to fit len with room for the NUL;
 * returns the new length. */
static size_t upstream_key_append(char *buf, size_t len, size_t at, const char *s, size_t n)
{
	if (at + n > len - 1)
		n = len - 1 - at;
	memcpy(buf + at, s, n);
	return at + n;
}

/* Is any of the 8 bytes in w an upper-case ASCII letter? Per byte, with its
 * top bit cleared (so no carry crosses bytes), adding 0x80 - 'A' sets the
 * top bit from 'A' on and adding 0x80 - 'Z' - 1 from past 'Z'. */
static bool upstream_word_has_upper(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101u;
	const uint64_t tops = ones * 0x80;
	uint64_t low = w & ~tops;
	uint64_t from_a = low + ones * (0x80 - 'A');
	uint64_t past_z = low + ones * (0x80 - 'Z' - 1);

	return (from_a & ~past_z & ~w & tops) != 0;
}

size_t upstream_host_normalise(char *host, size_t len)
{
	size_t i = 0;

	if (len > 1 && host[len - 1] == '.')
		len--;
	/* every request's host comes here, nearly always in lower case
	 * already: look 8 bytes at a time for a letter to change */
	for (; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, host + i, 8);
		if (upstream_word_has_upper(w))
			break;
	}
	for (; i < len; i++)
		if (host[i] >= 'A' && host[i] <= 'Z')
			host[i] = (char)(host[i] - 'A' + 'a');
	return len;
}

size_t upstream_host_spelling(char *host, size_t len, bool ipv6, bool *absolute)
{
	size_t n = upstream_host_normalise(host, len);

	*absolute = n < len;
	return ipv6 ? upstream_host_canonical_ipv6(host, n) : n;
}

size_t upstream_host_canonical_ipv6(char *host, size_t len)
{
	char text[UPSTREAM_IPV6_TEXT_MAX + 1];
	struct in6_addr addr;
	size_t n;

	if (len > UPSTREAM_IPV6_TEXT_MAX || memchr(host, ':', len) == NULL)
		return len;
	memcpy(text, host, len);
	text[len] = '\0';
	if (inet_pton(AF_INET6, text, &addr) != 1 ||
	    inet_ntop(AF_INET6, &addr, text, sizeof(text)) == NULL)
		return len;
	n = strlen(text);
	memcpy(host, text, n);
	return n;
}

void upstream_pool_key(const struct upstream_endpoint *endpoint, const struct tls_policy *tls,
		       char *buf, size_t len)
{
	/* "http://host:port", or "https://host:port|ca_file|verify": built by
	 * hand, as it is for every request */
	const char *scheme = endpoint->tls ? "https://" : "http://";
	const char *ca = endpoint->tls && tls->ca_file != NULL ? tls->ca_file : "";
	char port[8];
	char *p = port + sizeof(port);
	unsigned v = endpoint->port;
	size_t n = 0;

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	n = upstream_key_append(buf, len, n, scheme, strlen(scheme));
	n = upstream_key_append(buf, len, n, endpoint->host, strlen(endpoint->host));
	if (endpoint->absolute)
		n = upstream_key_append(buf, len, n, ".", 1);
	n = upstream_key_append(buf, len, n, ":", 1);
	n = upstream_key_append(buf, len, n, p, (size_t)(port + sizeof(port) - p));
	if (endpoint->tls) {
		n = upstream_key_append(buf, len, n, "|", 1);
		n = upstream_key_append(buf, len, n, ca, strlen(ca));
		n = upstream_key_append(buf, len, n, tls->verify ? "|1" : "|0", 2);
	}
	buf[n] = '\0';
}

/* Free everything the connect holds, except what was handed to the caller. */
static void upstream_connect_free(struct upstream_connect *uc)
{
	size_t i;

	for (i = 0; i < uc->started; i++)
		if (uc->attempts[i]->conn != NULL)
			conn_free(uc->attempts[i]->conn);
	free(uc->attempts);
	for (i = 0; i < UPSTREAM_LOOKUPS; i++) {
		struct upstream_lookup *l = &uc->lookups[i];

		name_lookup_cancel(l->request);
		if (l->cached != NULL)
			dns_cache_release(l->cached);
		else
			dns_addresses_free(l->addresses);
		free(l->attempts);
	}
	timer_free(uc->timer);
	event_free(uc->stagger);
	event_free(uc->step);
	free(uc->tls.ca_file);
	free(uc->session_key);
	free(uc->host);
	free(uc);
}

static void upstream_cache_unanswered(struct upstream_connect *uc);

/* Report the outcome and end the connect: every attempt still in flight is
 * closed. */
static void upstream_connect_finish(struct upstream_connect *uc, struct conn *conn,
				    enum try_outcome failure, const char *reason)
{
	upstream_connect_cb cb = uc->cb;
	void *arg = uc->arg;
	char copy[sizeof(uc->reason)];
	/* every attempt ended before anything reached the network (no
	 * descriptor left, for a connect or for a truncated DNS answer's TCP
	 * retry; a TLS connection the proxy could not set up): the
	 * failure is the proxy's, not the upstream's */
	bool local = conn == NULL &&
		     (failure == TRY_REFUSED || failure == TRY_TLS || failure == TRY_DNS) &&
		     uc->short_failed && !uc->network_failed;

	snprintf(copy, sizeof(copy), "%s", reason);
	/* an answer that led nowhere (the upstream moved: a container came
	 * back on another address) is asked again next time; one that was
	 * never put to the test (no descriptor for it) stays */
	if (conn == NULL && failure != TRY_DNS && !local && uc->proxy->dns_cache != NULL)
		dns_cache_forget(uc->proxy->dns_cache, uc->host);
	else if (conn != NULL)
		upstream_cache_unanswered(uc);
	upstream_connect_free(uc);
	cb(conn, failure, local, copy, arg);
}

static void upstream_start_next(struct upstream_connect *uc);

/* Is a lookup of the name still out? */
static bool upstream_lookup_pending(const struct upstream_connect *uc)
{
	for (size_t i = 0; i < UPSTREAM_LOOKUPS; i++)
		if (!uc->lookups[i].done)
			return true;
	return false;
}

/* One attempt connected (for https: handshake done), or failed. */
static void upstream_event_cb(struct conn *conn, short what, void *arg)
{
	struct upstream_attempt *a = arg;
	struct upstream_connect *uc = a->uc;

	a->conn = NULL;
	uc->in_flight--;
	if (what & CONN_CONNECTED) {
		/* the first to connect wins; the caller's now */
		conn_setcb(conn, NULL, NULL, NULL, NULL);
		upstream_connect_finish(uc, conn, TRY_RESPONSE, "connected");
		return;
	}
	if (what & CONN_HANDSHAKE) {
		bool verify_failed = false;

		tls_failure_reason(conn_ssl(conn), conn_tls_error(conn), &verify_failed, uc->reason,
				   sizeof(uc->reason));
		ERR_clear_error();
		if (!verify_failed && conn_tls_error(conn) == 0 && conn_error(conn) != 0)
			snprintf(uc->reason, sizeof(uc->reason), "TLS handshake failed: %s",
				 evutil_socket_error_to_string(conn_error(conn)));
		conn_free(conn);
		/* the upstream answered with a certificate it cannot prove: no
		 * other address of the name will do better */
		if (verify_failed) {
			upstream_connect_finish(uc, NULL, TRY_TLS_VERIFY, uc->reason);
			return;
		}
		uc->last_failure = TRY_TLS;
		uc->network_failed = true;
	} else {
		int sock_error = conn_error(conn);

		/* refused, unreachable, or reset before the connection was made */
		uc->last_failure = TRY_REFUSED;
		uc->network_failed = true;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 sock_error != 0 ? evutil_socket_error_to_string(sock_error)
					 : "connection closed");
		conn_free(conn);
	}
	/* a failure hands its turn on at once, without waiting out the delay */
	upstream_start_next(uc);
}

/* admin_is_address() for the proxy's admin, in listener_is_address()'s
 * shape. */
static int upstream_is_admin(const struct proxy *proxy, const struct sockaddr *addr, socklen_t len)
{
	return admin_is_address(proxy->admin, addr, len);
}

/* The proxy's own places, where it connects for no one: its admin
 * endpoint (kept from other hosts by its loopback address), and its
 * listeners (a CONNECT to itself would nest a tunnel for every CONNECT
 * head behind it, all from one client connection). */
static const struct {
	int (*is)(const struct proxy *proxy, const struct sockaddr *addr, socklen_t len);
	const char *why;
} upstream_own_places[] = {
	{ upstream_is_admin, "the proxy's own admin endpoint is not reached through it" },
	{ listener_is_address, "the proxy's own listener is not reached through it (a loop)" },
};

/* Whether address is one of the proxy's own places: 1 with *why, 0, or -1
 * with *err when it cannot be told for want of a descriptor to look at
 * this host's addresses with, even after idle pooled connections gave some
 * back, as for a connect's socket. */
static int upstream_own_address(struct proxy *proxy, const struct evutil_addrinfo *address,
				const char **why, int *err)
{
	socklen_t len = (socklen_t)address->ai_addrlen;
	bool untold = false;

	for (size_t i = 0; i < sizeof(upstream_own_places) / sizeof(upstream_own_places[0]); i++) {
		int told = upstream_own_places[i].is(proxy, address->ai_addr, len);

		if (told < 0 && conn_loop_fd_shortage(proxy->loop, errno))
			told = upstream_own_places[i].is(proxy, address->ai_addr, len);
		if (told > 0) {
			*why = upstream_own_places[i].why;
			return 1;
		}
		if (told < 0) {
			*err = errno;
			untold = true;
		}
	}
	return untold ? -1 : 0;
}

/* Start the next address's attempt beside those in flight, or, with none
 * left to start and none in flight, report the last failure. */
static void upstream_start_next(struct upstream_connect *uc)
{
	struct upstream_attempt *a;
	const char *forbidden = NULL;
	int own, look_err = EMFILE;
	SSL *ssl = NULL;

	if (uc->started == uc->count) {
		/* every address failed; a lookup still out may bring others (the
		 * AAAA answer came first and IPv6 is unreachable here) */
		if (uc->in_flight == 0 && !upstream_lookup_pending(uc))
			upstream_connect_finish(uc, NULL, uc->last_failure, uc->reason);
		return;
	}
	a = uc->attempts[uc->started++];
	own = upstream_own_address(uc->proxy, a->address, &forbidden, &look_err);
	if (own < 0) {
		/* the proxy's own shortage, as a connect whose socket it had
		 * no descriptor for: nothing was sent, nothing is to blame */
		uc->last_failure = TRY_REFUSED;
		uc->short_failed = true;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 evutil_socket_error_to_string(look_err));
		event_active(uc->step, 0, 0);
		return;
	}
	if (own > 0) {
		/* never connected to; an address of the name that is another
		 * may still be, so this one counts as one that failed, and a
		 * failure of the upstream's own at another address is the one
		 * reported: the try is forbidden only when every address is */
		if (!uc->network_failed) {
			uc->last_failure = TRY_FORBIDDEN;
			snprintf(uc->reason, sizeof(uc->reason), "%s", forbidden);
		}
		event_active(uc->step, 0, 0);
		return;
	}
	if (uc->endpoint.tls) {
		char err[UPSTREAM_REASON_MAX];

		ssl = tls_client_new(uc->proxy->tls, &uc->tls, uc->host, uc->session_key, err,
				     sizeof(err));
		if (ssl == NULL) {
			/* the proxy's own TLS set-up (no memory, a trust store it
			 * cannot load): nothing reached the upstream */
			uc->short_failed = true;
			upstream_connect_finish(uc, NULL, TRY_TLS, err);
			return;
		}
	}
	a->conn = conn_connect(uc->proxy->loop, a->address->ai_addr,
			       (socklen_t)a->address->ai_addrlen, ssl);
	if (a->conn == NULL) {
		int err = errno;

		uc->last_failure = TRY_REFUSED;
		if (conn_error_is_local_shortage(err))
			uc->short_failed = true;
		else
			uc->network_failed = true;
		snprintf(uc->reason, sizeof(uc->reason), "%s", evutil_socket_error_to_string(err));
		/* the connect may fail at once (e.g. no fds left); go on from the
		 * loop, not from inside the caller's stack */
		event_active(uc->step, 0, 0);
		return;
	}
	uc->in_flight++;
	conn_setcb(a->conn, NULL, NULL, upstream_event_cb, a);
	/* an address that silently drops SYNs neither connects nor fails: after
	 * the delay the next starts beside it (RFC 8305 section 5) */
	if (uc->started < uc->count) {
		struct timeval tv = timeval_from_ms(uc->attempt_delay_ms);

		evtimer_add(uc->stagger, &tv);
	} else
		evtimer_del(uc->stagger);
}

/* Put the addresses of the lookups that answered, and were not taken yet,
 * among the attempts still to start, in happy_eyeballs_order: before
 * connecting begins, the first answer's family first and the order turned
 * round by address_shift; once it has begun, the new family first (the
 * other has had its turn) and alternating with what is left. */
static void upstream_take_answers(struct upstream_connect *uc)
{
	/* the first answer leads, else the first asked */
	struct upstream_lookup *lead =
		uc->first_answer != NULL ? uc->first_answer : &uc->lookups[0];
	struct upstream_lookup *by_turn[UPSTREAM_LOOKUPS] = {
		lead,
		&uc->lookups[lead == &uc->lookups[0] ? 1 : 0],
	};
	struct upstream_lookup *fresh[UPSTREAM_LOOKUPS];
	size_t n_fresh = 0;
	size_t left = uc->count - uc->started;
	size_t total = left;
	struct upstream_attempt **candidates;
	int *families;
	size_t *order;
	size_t i, k;

	for (i = 0; i < UPSTREAM_LOOKUPS; i++) {
		struct upstream_lookup *l = by_turn[i];
		struct evutil_addrinfo *ai;

		if (!l->done || l->taken)
			continue;
		l->taken = true;
		for (ai = l->addresses; ai != NULL; ai = ai->ai_next)
			l->count++;
		if (l->count == 0)
			continue;
		l->attempts = xcalloc(l->count, sizeof(*l->attempts));
		for (ai = l->addresses, k = 0; ai != NULL; ai = ai->ai_next, k++) {
			l->attempts[k].uc = uc;
			l->attempts[k].address = ai;
		}
		fresh[n_fresh++] = l;
		total += l->count;
	}
	if (total == left)
		return;
	candidates = xcalloc(total, sizeof(*candidates));
	families = xcalloc(total, sizeof(*families));
	order = xcalloc(total, sizeof(*order));
	k = 0;
	for (i = 0; i < n_fresh; i++)
		for (size_t j = 0; j < fresh[i]->count; j++)
			candidates[k++] = &fresh[i]->attempts[j];
	for (i = uc->started; i < uc->count; i++)
		candidates[k++] = uc->attempts[i];
	for (i = 0; i < total; i++)
		families[i] = candidates[i]->address->ai_family;
	happy_eyeballs_order(families, total, uc->resolved ? 0 : uc->address_shift, order);
	uc->attempts = xrealloc(uc->attempts, (uc->started + total) * sizeof(*uc->attempts));
	for (i = 0; i < total; i++)
		uc->attempts[uc->started + i] = candidates[order[i]];
	uc->count = uc->started + total;
	free(order);
	free(families);
	free(candidates);
}

/* The failure to report when neither lookup gave an address. */
static void upstream_dns_failed(struct upstream_connect *uc)
{
	const struct upstream_lookup *v4 = &uc->lookups[UPSTREAM_LOOKUP_V4];
	const struct upstream_lookup *v6 = &uc->lookups[UPSTREAM_LOOKUP_V6];
	char reason[UPSTREAM_REASON_MAX];

	snprintf(reason, sizeof(reason), "cannot resolve %s: %s", uc->host,
		 name_lookup_failure(v4->error, v6->error));
	/* a TCP retry the proxy had no descriptor for: its shortage, as for
	 * an attempt's socket */
	if (name_lookup_failure_local(v4->error, v6->error))
		uc->short_failed = true;
	upstream_connect_finish(uc, NULL, TRY_DNS, reason);
}

/* Before the first attempt: begin connecting once the answers allow it
 * (RFC 8305 section 3): at once with IPv6 addresses, with IPv4 ones when
 * the AAAA lookup has ended or the resolution delay has passed; report the
 * DNS failure once both lookups ended with no address. */
static void upstream_resolution_step(struct upstream_connect *uc)
{
	const struct upstream_lookup *v4 = &uc->lookups[UPSTREAM_LOOKUP_V4];
	const struct upstream_lookup *v6 = &uc->lookups[UPSTREAM_LOOKUP_V6];
	bool have_v4 = v4->done && v4->addresses != NULL;
	bool have_v6 = v6->done && v6->addresses != NULL;

	if (have_v6 || (have_v4 && (v6->done || uc->resolution_delay_over))) {
		evtimer_del(uc->stagger);
		upstream_take_answers(uc);
		uc->resolved = true;
		uc->last_failure = TRY_REFUSED;
		upstream_start_next(uc);
		return;
	}
	if (have_v4) {
		struct timeval tv = timeval_from_ms(UPSTREAM_RESOLUTION_DELAY_MS);

		if (!evtimer_pending(uc->stagger, NULL))
			evtimer_add(uc->stagger, &tv);
		return;
	}
	if (v4->done && v6->done)
		upstream_dns_failed(uc);
}

/* Keep the answers of the lookups that ended for limits.dns_cache, or
 * their records' TTL when shorter (a TTL of 0 is not kept; the cache owns
 * their addresses from then on): addresses, or none of a family when the
 * other family has some. A name with no record of a family counts as a
 * failure, as SERVFAIL or a timeout do, so a failure counts as "none"
 * only beside the other family's addresses, where connecting goes on
 * without it anyway; a name that failed whole is asked again next time. */
static void upstream_cache_answers(struct upstream_connect *uc)
{
	uint64_t keep_ms = uc->proxy->config->limits.dns_cache_ms;
	bool any_addresses = false;

	if (keep_ms == 0 || uc->literal || uc->proxy->dns_cache == NULL)
		return;
	for (size_t i = 0; i < UPSTREAM_LOOKUPS; i++)
		any_addresses = any_addresses || uc->lookups[i].addresses != NULL;
	for (size_t i = 0; i < UPSTREAM_LOOKUPS; i++) {
		struct upstream_lookup *l = &uc->lookups[i];

		uint64_t keep = keep_ms < l->ttl_ms ? keep_ms : l->ttl_ms;

		if (!l->done || l->cached != NULL || (l->error != 0 && !any_addresses) || keep == 0)
			continue;
		l->cached = dns_cache_put(uc->proxy->dns_cache, uc->host, uc->endpoint.port,
					  uc->endpoint.absolute, upstream_lookup_family[i],
					  l->addresses, timeval_now_coarse_ms() + keep);
	}
}

/* Connected through one family's addresses while the other's lookup had
 * not answered within the resolution delay: that family is kept as none,
 * so that the next connects within dns_cache do not wait the delay again
 * for a resolver that drops its queries (AAAA, mostly). */
static void upstream_cache_unanswered(struct upstream_connect *uc)
{
	if (!uc->resolution_delay_over)
		return;
	for (size_t i = 0; i < UPSTREAM_LOOKUPS; i++) {
		struct upstream_lookup *l = &uc->lookups[i];

		if (!l->done) {
			l->done = true;
			l->error = DNS_ERR_TIMEOUT;
		}
	}
	upstream_cache_answers(uc);
}

/* A kept answer for the lookup's name and family, taken as if it had just
 * come (synchronously, as the hosts file's does); false when none is kept. */
static bool upstream_cached_answer(struct upstream_connect *uc, struct upstream_lookup *l)
{
	struct dns_cache_entry *e;

	if (uc->proxy->config->limits.dns_cache_ms == 0 || uc->proxy->dns_cache == NULL)
		return false;
	e = dns_cache_find(uc->proxy->dns_cache, uc->host, uc->endpoint.port, uc->endpoint.absolute,
			   upstream_lookup_family[l - uc->lookups], timeval_now_coarse_ms());
	if (e == NULL)
		return false;
	l->cached = e;
	l->done = true;
	l->addresses = dns_cache_addresses(e);
	l->error = l->addresses != NULL ? DNS_ERR_NONE : DNS_ERR_NODATA;
	if (uc->first_answer == NULL && l->addresses != NULL)
		uc->first_answer = l;
	event_active(uc->step, 0, 0);
	return true;
}

/* A lookup ended (done, with its addresses or error set): connecting may
 * begin, or the new addresses join those still to try. */
static void upstream_lookup_answered(struct upstream_lookup *l)
{
	struct upstream_connect *uc = l->uc;

	upstream_cache_answers(uc);
	if (uc->first_answer == NULL && l->addresses != NULL)
		uc->first_answer = l;
	if (uc->resolving_inline) {
		event_active(uc->step, 0, 0);
		return;
	}
	if (!uc->resolved) {
		upstream_resolution_step(uc);
		return;
	}
	/* a late answer: its addresses join those still to start, the next
	 * of them after the delay the latest attempt has alone, or at once
	 * when every attempt so far has failed (which also ends the connect
	 * when this answer brought nothing) */
	upstream_take_answers(uc);
	if (uc->in_flight == 0) {
		upstream_start_next(uc);
	} else if (uc->started < uc->count && !evtimer_pending(uc->stagger, NULL)) {
		struct timeval tv = timeval_from_ms(uc->attempt_delay_ms);

		evtimer_add(uc->stagger, &tv);
	}
}

/* The lookup's answer (name_lookup.c): its addresses, with the endpoint's
 * port, or its error, and how long it may be kept. */
static void upstream_lookup_cb(struct evutil_addrinfo *addresses, int error, uint64_t ttl_ms,
			       void *arg)
{
	struct upstream_lookup *l = arg;

	l->request = NULL;
	l->done = true;
	l->addresses = addresses;
	l->error = error;
	l->ttl_ms = ttl_ms;
	upstream_lookup_answered(l);
}

/* Continue from the loop after a synchronous result. */
static void upstream_step_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_connect *uc = arg;

	if (!uc->resolved)
		upstream_resolution_step(uc);
	else
		upstream_start_next(uc);
}

/* Has an attempt made its TCP connection, and is it in its TLS handshake? */
static bool upstream_handshaking(const struct upstream_connect *uc)
{
	for (size_t i = 0; i < uc->started; i++)
		if (uc->attempts[i]->conn != NULL && !conn_connect_pending(uc->attempts[i]->conn))
			return true;
	return false;
}

/* The latest attempt had the delay to itself and is still going; before
 * the first attempt, the AAAA answer did not come within the resolution
 * delay. */
static void upstream_stagger_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_connect *uc = arg;

	if (!uc->resolved) {
		uc->resolution_delay_over = true;
		upstream_resolution_step(uc);
		return;
	}
	/* the delay is for an address that does not answer: one that made its
	 * TCP connection and is in its TLS handshake did, and a slow handshake
	 * gets no second one beside it (a failure still starts the next at
	 * once, and connect_timeout bounds the wait) */
	if (upstream_handshaking(uc))
		return;
	upstream_start_next(uc);
}

static void upstream_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_connect *uc = arg;
	char reason[UPSTREAM_REASON_MAX];

	if (!uc->resolved) {
		/* the name never resolved: the failure is DNS's, not a connect's */
		snprintf(reason, sizeof(reason),
			 "no answer for %s from DNS within the connect timeout", uc->host);
		upstream_connect_finish(uc, NULL, TRY_DNS, reason);
		return;
	}
	if (uc->in_flight == 0 && uc->started == uc->count) {
		/* every address failed; only a lookup was still awaited */
		upstream_connect_finish(uc, NULL, uc->last_failure, uc->reason);
		return;
	}
	/* a TCP connection made says the address answered: what did not end
	 * in time is its TLS handshake */
	if (upstream_handshaking(uc)) {
		snprintf(reason, sizeof(reason),
			 "TLS handshake with %s:%u not done within the connect timeout", uc->host,
			 uc->endpoint.port);
		upstream_connect_finish(uc, NULL, TRY_CONNECT_TIMEOUT, reason);
		return;
	}
	if (uc->count > 1)
		snprintf(reason, sizeof(reason),
			 "no connection to %s:%u within the connect timeout (%zu of its %zu "
			 "addresses tried)",
			 uc->host, uc->endpoint.port, uc->started, uc->count);
	else
		snprintf(reason, sizeof(reason),
			 "no connection to %s:%u within the connect timeout", uc->host,
			 uc->endpoint.port);
	upstream_connect_finish(uc, NULL, TRY_CONNECT_TIMEOUT, reason);
}

/* The family of an address literal, AF_UNSPEC for a name: a literal is
 * no question for DNS, and the other family's lookup would send it one. */
static int upstream_literal_family(const char *host)
{
	unsigned char addr[sizeof(struct in6_addr)];

	if (inet_pton(AF_INET, host, addr) == 1)
		return AF_INET;
	if (inet_pton(AF_INET6, host, addr) == 1)
		return AF_INET6;
	return AF_UNSPEC;
}

/* Answer a lookup for an address literal of its family: no question for
 * DNS; taken from the loop, as the hosts file's answer is. */
static void upstream_answer_address(struct upstream_connect *uc, struct upstream_lookup *l,
				    const char *text)
{
	int family = upstream_lookup_family[l - uc->lookups];
	unsigned char ip[sizeof(struct in6_addr)];

	inet_pton(family, text, ip);
	l->done = true;
	l->error = DNS_ERR_NONE;
	l->addresses = dns_addresses_add_ip(NULL, family, ip, uc->endpoint.port);
	if (uc->first_answer == NULL)
		uc->first_answer = l;
	event_active(uc->step, 0, 0);
}

struct upstream_connect *upstream_connect_start(struct proxy *proxy,
						const struct upstream_endpoint *endpoint,
						const struct tls_policy *tls,
						const char *session_key, uint64_t now_ms,
						uint64_t timeout_ms, unsigned address_shift,
						upstream_connect_cb cb, void *arg)
{
	struct upstream_connect *uc = xcalloc(1, sizeof(*uc));
	struct name_resolver resolver = proxy_name_resolver(proxy);
	int literal;

	uc->proxy = proxy;
	uc->host = xstrdup(endpoint->host);
	uc->endpoint = *endpoint;
	uc->endpoint.host = uc->host;
	uc->tls.ca_file = tls->ca_file != NULL ? xstrdup(tls->ca_file) : NULL;
	uc->tls.verify = tls->verify;
	uc->session_key = xstrdup(session_key);
	uc->address_shift = address_shift;
	uc->attempt_delay_ms = happy_eyeballs_delay_ms(timeout_ms);
	uc->cb = cb;
	uc->arg = arg;
	uc->timer = timer_new(proxy->base, upstream_timeout_cb, uc);
	uc->stagger = evtimer_new(proxy->base, upstream_stagger_cb, uc);
	uc->step = event_new(proxy->base, -1, 0, upstream_step_cb, uc);
	timer_start(uc->timer, now_ms, timeout_ms);

	literal = upstream_literal_family(uc->host);
	uc->literal = literal != AF_UNSPEC;
	for (size_t i = 0; i < UPSTREAM_LOOKUPS; i++) {
		struct upstream_lookup *l = &uc->lookups[i];
		int family = upstream_lookup_family[i];

		l->uc = uc;
		l->ttl_ms = UINT64_MAX;
		if (literal != AF_UNSPEC) {
			if (literal == family) {
				upstream_answer_address(uc, l, uc->host);
			} else {
				l->done = true;
				l->error = DNS_ERR_NODATA;
			}
			continue;
		}
		if (upstream_cached_answer(uc, l))
			continue;
		/* an answer had at once (the hosts file's, a localhost name's
		 * loopback) is taken from the loop */
		uc->resolving_inline = true;
		l->request = name_lookup_start(&resolver, uc->host, endpoint->absolute, family,
					       endpoint->port, upstream_lookup_cb, l);
		uc->resolving_inline = false;
	}
	return uc;
}

void upstream_connect_cancel(struct upstream_connect *uc)
{
	if (uc != NULL)
		upstream_connect_free(uc);
}
