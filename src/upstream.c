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
#include "happy_eyeballs.h"
#include "log.h"
#include "proxy.h"
#include "tls.h"
#include "xmalloc.h"
#include "timeval.h"

#define UPSTREAM_REASON_MAX 320 /* longest failure reason passed on */

/* One address's connection attempt. */
struct upstream_attempt {
	struct upstream_connect *uc;
	struct evutil_addrinfo *address;
	struct conn *conn; /* while it has neither connected nor failed */
};

struct upstream_connect {
	struct proxy *proxy;
	struct upstream_endpoint endpoint;
	char *host; /* owned copy behind endpoint.host */
	struct tls_policy tls;
	char *session_key;
	upstream_connect_cb cb;
	void *arg;
	struct evdns_getaddrinfo_request *dns_request;
	struct evutil_addrinfo *addresses; /* from the resolver */
	struct upstream_attempt *attempts; /* one per address, in the order they are tried */
	size_t count;			   /* addresses */
	size_t started;			   /* attempts started so far, in order */
	size_t in_flight;		   /* attempts started that neither connected nor failed */
	unsigned address_shift;		   /* start this many addresses into the order */
	uint64_t attempt_delay_ms;	   /* how long one attempt has alone */
	struct event *timer;		   /* connect_timeout for everything */
	struct event *stagger;		   /* attempt_delay_ms after the latest attempt started */
	struct event *step;		   /* defers results that arrive synchronously */
	enum try_outcome last_failure;
	char reason[UPSTREAM_REASON_MAX];
	bool resolving_inline; /* inside evdns_getaddrinfo() */
	bool resolved;
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

	if (uc->dns_request != NULL)
		evdns_getaddrinfo_cancel(uc->dns_request);
	for (i = 0; i < uc->started; i++)
		if (uc->attempts[i].conn != NULL)
			conn_free(uc->attempts[i].conn);
	free(uc->attempts);
	if (uc->addresses != NULL)
		evutil_freeaddrinfo(uc->addresses);
	event_free(uc->timer);
	event_free(uc->stagger);
	event_free(uc->step);
	free(uc->tls.ca_file);
	free(uc->session_key);
	free(uc->host);
	free(uc);
}

/* Report the outcome and end the connect: every attempt still in flight is
 * closed. */
static void upstream_connect_finish(struct upstream_connect *uc, struct conn *conn,
				    enum try_outcome failure, const char *reason)
{
	upstream_connect_cb cb = uc->cb;
	void *arg = uc->arg;
	char copy[sizeof(uc->reason)];

	snprintf(copy, sizeof(copy), "%s", reason);
	upstream_connect_free(uc);
	cb(conn, failure, copy, arg);
}

static void upstream_start_next(struct upstream_connect *uc);

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
	} else {
		int sock_error = conn_error(conn);

		/* refused, unreachable, or reset before the connection was made */
		uc->last_failure = TRY_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 sock_error != 0 ? evutil_socket_error_to_string(sock_error)
					 : "connection closed");
		conn_free(conn);
	}
	/* a failure hands its turn on at once, without waiting out the delay */
	upstream_start_next(uc);
}

/* Start the next address's attempt beside those in flight, or, with none
 * left to start and none in flight, report the last failure. */
static void upstream_start_next(struct upstream_connect *uc)
{
	struct upstream_attempt *a;
	SSL *ssl = NULL;

	if (uc->started == uc->count) {
		if (uc->in_flight == 0)
			upstream_connect_finish(uc, NULL, uc->last_failure, uc->reason);
		return;
	}
	a = &uc->attempts[uc->started++];
	if (admin_is_address(uc->proxy->admin, a->address->ai_addr,
			     (socklen_t)a->address->ai_addrlen)) {
		/* never connected to; an address of the name that is another
		 * may still be, so this one counts as one that failed */
		uc->last_failure = TRY_FORBIDDEN;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 "the proxy's own admin endpoint is not reached through it");
		event_active(uc->step, 0, 0);
		return;
	}
	if (uc->endpoint.tls) {
		char err[UPSTREAM_REASON_MAX];

		ssl = tls_client_new(uc->proxy->tls, &uc->tls, uc->host, uc->session_key, err,
				     sizeof(err));
		if (ssl == NULL) {
			upstream_connect_finish(uc, NULL, TRY_TLS, err);
			return;
		}
	}
	a->conn = conn_connect(uc->proxy->loop, a->address->ai_addr,
			       (socklen_t)a->address->ai_addrlen, ssl);
	if (a->conn == NULL) {
		uc->last_failure = TRY_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 evutil_socket_error_to_string(errno));
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

/* Lay out one attempt per resolved address, in the order to try them. */
static void upstream_order_addresses(struct upstream_connect *uc)
{
	struct evutil_addrinfo *ai;
	struct evutil_addrinfo **resolved;
	int *families;
	size_t *order;
	size_t i = 0;

	for (ai = uc->addresses; ai != NULL; ai = ai->ai_next)
		uc->count++;
	if (uc->count == 0)
		return;
	resolved = xcalloc(uc->count, sizeof(*resolved));
	families = xcalloc(uc->count, sizeof(*families));
	order = xcalloc(uc->count, sizeof(*order));
	for (ai = uc->addresses; ai != NULL; ai = ai->ai_next, i++) {
		resolved[i] = ai;
		families[i] = ai->ai_family;
	}
	happy_eyeballs_order(families, uc->count, uc->address_shift, order);
	uc->attempts = xcalloc(uc->count, sizeof(*uc->attempts));
	for (i = 0; i < uc->count; i++) {
		uc->attempts[i].uc = uc;
		uc->attempts[i].address = resolved[order[i]];
	}
	free(order);
	free(families);
	free(resolved);
}

static void upstream_dns_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct upstream_connect *uc = arg;

	/* evdns_getaddrinfo_cancel() calls back with this while uc is being freed */
	if (result == EVUTIL_EAI_CANCEL)
		return;
	uc->dns_request = NULL;
	uc->resolved = true;
	if (result != 0) {
		uc->last_failure = TRY_DNS;
		snprintf(uc->reason, sizeof(uc->reason), "cannot resolve %s: %s", uc->host,
			 evutil_gai_strerror(result));
	} else {
		uc->addresses = res;
		uc->last_failure = TRY_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "no address for %s", uc->host);
		upstream_order_addresses(uc);
	}
	if (uc->resolving_inline)
		event_active(uc->step, 0, 0);
	else
		upstream_start_next(uc);
}

/* Continue from the loop after a synchronous result. */
static void upstream_step_cb(evutil_socket_t fd, short what, void *arg)
{
	upstream_start_next(arg);
}

/* The latest attempt had the delay to itself and is still going. */
static void upstream_stagger_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_connect *uc = arg;
	size_t i;

	/* the delay is for an address that does not answer: one that made its
	 * TCP connection and is in its TLS handshake did, and a slow handshake
	 * gets no second one beside it (a failure still starts the next at
	 * once, and connect_timeout bounds the wait) */
	for (i = 0; i < uc->started; i++)
		if (uc->attempts[i].conn != NULL && !conn_connect_pending(uc->attempts[i].conn))
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

struct upstream_connect *upstream_connect_start(struct proxy *proxy,
						const struct upstream_endpoint *endpoint,
						const struct tls_policy *tls,
						const char *session_key, uint64_t timeout_ms,
						unsigned address_shift, upstream_connect_cb cb,
						void *arg)
{
	struct upstream_connect *uc = xcalloc(1, sizeof(*uc));
	struct evutil_addrinfo hints;
	char port[8];
	struct timeval tv = timeval_from_ms(timeout_ms);
	struct evdns_getaddrinfo_request *req;

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
	uc->timer = evtimer_new(proxy->base, upstream_timeout_cb, uc);
	uc->stagger = evtimer_new(proxy->base, upstream_stagger_cb, uc);
	uc->step = event_new(proxy->base, -1, 0, upstream_step_cb, uc);
	evtimer_add(uc->timer, &tv);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	snprintf(port, sizeof(port), "%u", endpoint->port);
	uc->resolving_inline = true;
	req = evdns_getaddrinfo(endpoint->absolute ? proxy->dns_absolute : proxy->dns, uc->host,
				port, &hints, upstream_dns_cb, uc);
	uc->resolving_inline = false;
	if (!uc->resolved)
		uc->dns_request = req;
	return uc;
}

void upstream_connect_cancel(struct upstream_connect *uc)
{
	if (uc != NULL)
		upstream_connect_free(uc);
}
