#include "upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/err.h>

#include "log.h"
#include "proxy.h"
#include "tls.h"
#include "xmalloc.h"
#include "timeval.h"

#define UPSTREAM_REASON_MAX 320 /* longest failure reason passed on */

struct upstream_connect {
	struct proxy *proxy;
	struct upstream_endpoint endpoint;
	char *host;                      /* owned copy behind endpoint.host */
	struct tls_policy tls;
	char *session_key;
	upstream_connect_cb cb;
	void *arg;
	struct evdns_getaddrinfo_request *dns_request;
	struct evutil_addrinfo *addresses; /* from the resolver */
	struct evutil_addrinfo *next_address;
	struct bufferevent *bev;         /* the connection being made */
	struct event *timer;             /* connect_timeout for the whole attempt */
	struct event *step;              /* defers results that arrive synchronously */
	enum upstream_failure last_failure;
	char reason[UPSTREAM_REASON_MAX];
	bool resolving_inline;           /* inside evdns_getaddrinfo() */
	bool resolved;
};

const char *upstream_failure_name(enum upstream_failure failure)
{
	switch (failure) {
	case UPSTREAM_OK:
		return "ok";
	case UPSTREAM_FAIL_DNS:
		return "DNS failure";
	case UPSTREAM_FAIL_REFUSED:
		return "connection refused";
	case UPSTREAM_FAIL_CONNECT_TIMEOUT:
		return "connect timeout";
	case UPSTREAM_FAIL_TLS_HANDSHAKE:
		return "TLS handshake failure";
	case UPSTREAM_FAIL_TLS_VERIFY:
		return "certificate verify failure";
	}
	return "unknown";
}

void upstream_pool_key(const struct upstream_endpoint *endpoint, const struct tls_policy *tls,
		       char *buf, size_t len)
{
	if (endpoint->tls)
		snprintf(buf, len, "https://%s:%u|%s|%d", endpoint->host, endpoint->port,
			 tls->ca_file != NULL ? tls->ca_file : "", tls->verify);
	else
		snprintf(buf, len, "http://%s:%u", endpoint->host, endpoint->port);
}

/* Free everything the attempt holds, except what was handed to the caller. */
static void upstream_connect_free(struct upstream_connect *uc)
{
	if (uc->dns_request != NULL)
		evdns_getaddrinfo_cancel(uc->dns_request);
	if (uc->addresses != NULL)
		evutil_freeaddrinfo(uc->addresses);
	if (uc->bev != NULL) {
		bufferevent_free(uc->bev);
		uc->proxy->upstream_count--;
	}
	event_free(uc->timer);
	event_free(uc->step);
	free(uc->tls.ca_file);
	free(uc->session_key);
	free(uc->host);
	free(uc);
}

/* Report the outcome and end the attempt. */
static void upstream_connect_finish(struct upstream_connect *uc, struct bufferevent *bev,
				    enum upstream_failure failure, const char *reason)
{
	upstream_connect_cb cb = uc->cb;
	void *arg = uc->arg;
	char copy[sizeof(uc->reason)];

	snprintf(copy, sizeof(copy), "%s", reason);
	if (bev != NULL)
		uc->bev = NULL; /* the caller's now */
	upstream_connect_free(uc);
	cb(bev, failure, copy, arg);
}

static void upstream_try_next_address(struct upstream_connect *uc);

/* Connected (for https: handshake done), or failed. */
static void upstream_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct upstream_connect *uc = arg;

	if (what & BEV_EVENT_CONNECTED) {
		int one = 1;

		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
		upstream_connect_finish(uc, bev, UPSTREAM_OK, "connected");
		return;
	}
	if (uc->endpoint.tls) {
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		unsigned long ssl_error = bufferevent_get_openssl_error(bev);
		int sock_error = EVUTIL_SOCKET_ERROR();
		bool verify_failed = false;

		/* A TCP-level failure before the handshake started is a connect
		 * failure; anything once TLS bytes flowed is the handshake's. */
		if (ssl_error == 0 && (what & BEV_EVENT_ERROR) && sock_error != 0 &&
		    SSL_get_state(ssl) == TLS_ST_BEFORE) {
			uc->last_failure = UPSTREAM_FAIL_REFUSED;
			snprintf(uc->reason, sizeof(uc->reason), "%s",
				 evutil_socket_error_to_string(sock_error));
		} else {
			tls_failure_reason(ssl, ssl_error, &verify_failed, uc->reason,
					   sizeof(uc->reason));
			ERR_clear_error();
			if (verify_failed) {
				upstream_connect_finish(uc, NULL, UPSTREAM_FAIL_TLS_VERIFY,
							uc->reason);
				return;
			}
			uc->last_failure = UPSTREAM_FAIL_TLS_HANDSHAKE;
		}
	} else {
		int sock_error = EVUTIL_SOCKET_ERROR();

		uc->last_failure = UPSTREAM_FAIL_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 sock_error != 0 ? evutil_socket_error_to_string(sock_error)
					 : "connection closed");
	}
	bufferevent_free(uc->bev);
	uc->bev = NULL;
	uc->proxy->upstream_count--;
	upstream_try_next_address(uc);
}

/* Start a connection to the next resolved address, or report the last failure. */
static void upstream_try_next_address(struct upstream_connect *uc)
{
	struct evutil_addrinfo *ai = uc->next_address;
	struct event_base *base = uc->proxy->base;
	int options = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;

	if (ai == NULL) {
		upstream_connect_finish(uc, NULL, uc->last_failure, uc->reason);
		return;
	}
	uc->next_address = ai->ai_next;
	if (uc->endpoint.tls) {
		char err[UPSTREAM_REASON_MAX];
		SSL *ssl = tls_client_new(uc->proxy->tls, &uc->tls, uc->host, uc->session_key,
					  err, sizeof(err));

		if (ssl == NULL) {
			upstream_connect_finish(uc, NULL, UPSTREAM_FAIL_TLS_HANDSHAKE, err);
			return;
		}
		uc->bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
							 options);
		if (uc->bev == NULL) {
			SSL_free(ssl);
			upstream_connect_finish(uc, NULL, UPSTREAM_FAIL_REFUSED,
						"cannot create a connection");
			return;
		}
		/* Many servers close without close_notify; the framing of each
		 * response, not the TLS close, says whether a body is whole. */
		bufferevent_openssl_set_allow_dirty_shutdown(uc->bev, 1);
	} else {
		uc->bev = bufferevent_socket_new(base, -1, options);
	}
	uc->proxy->upstream_count++;
	bufferevent_setcb(uc->bev, NULL, NULL, upstream_event_cb, uc);
	if (bufferevent_socket_connect(uc->bev, ai->ai_addr, (int)ai->ai_addrlen) < 0) {
		int sock_error = EVUTIL_SOCKET_ERROR();

		uc->last_failure = UPSTREAM_FAIL_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "%s",
			 evutil_socket_error_to_string(sock_error));
		bufferevent_free(uc->bev);
		uc->bev = NULL;
		uc->proxy->upstream_count--;
		/* bufferevent_socket_connect may fail at once (e.g. no fds left);
		 * go on from the loop, not from inside the caller's stack */
		event_active(uc->step, 0, 0);
	}
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
		uc->last_failure = UPSTREAM_FAIL_DNS;
		snprintf(uc->reason, sizeof(uc->reason), "cannot resolve %s: %s", uc->host,
			 evutil_gai_strerror(result));
		uc->addresses = NULL;
	} else {
		uc->addresses = res;
		uc->last_failure = UPSTREAM_FAIL_REFUSED;
		snprintf(uc->reason, sizeof(uc->reason), "no address for %s", uc->host);
	}
	uc->next_address = uc->addresses;
	if (uc->resolving_inline)
		event_active(uc->step, 0, 0);
	else
		upstream_try_next_address(uc);
}

/* Continue from the loop after a synchronous result. */
static void upstream_step_cb(evutil_socket_t fd, short what, void *arg)
{
	upstream_try_next_address(arg);
}

static void upstream_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_connect *uc = arg;
	char reason[UPSTREAM_REASON_MAX];

	snprintf(reason, sizeof(reason), "no connection to %s:%u within the connect timeout",
		 uc->host, uc->endpoint.port);
	upstream_connect_finish(uc, NULL, UPSTREAM_FAIL_CONNECT_TIMEOUT, reason);
}

struct upstream_connect *upstream_connect_start(struct proxy *proxy,
						const struct upstream_endpoint *endpoint,
						const struct tls_policy *tls,
						const char *session_key, uint64_t timeout_ms,
						upstream_connect_cb cb, void *arg)
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
	uc->cb = cb;
	uc->arg = arg;
	uc->timer = evtimer_new(proxy->base, upstream_timeout_cb, uc);
	uc->step = event_new(proxy->base, -1, 0, upstream_step_cb, uc);
	evtimer_add(uc->timer, &tv);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	snprintf(port, sizeof(port), "%u", endpoint->port);
	uc->resolving_inline = true;
	req = evdns_getaddrinfo(proxy->dns, uc->host, port, &hints, upstream_dns_cb, uc);
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
