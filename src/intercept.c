#include "intercept.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "access_log.h"
#include "ca.h"
#include "config.h"
#include "conn.h"
#include "log.h"
#include "proxy.h"
#include "reply.h"
#include "retry_budget.h"
#include "route.h"
#include "tls.h"
#include "xmalloc.h"

struct intercept {
	char *host;		      /* the CONNECT host, no brackets */
	char *prefix;		      /* "https://" and the CONNECT authority */
	struct upstream_url upstream; /* https://host:port */
	struct access_record *log;    /* the CONNECT's line, until the tunnel ends */
	uint64_t opened_ms;	      /* when it was intercepted (monotonic) */
	uint64_t base;		      /* bytes the client conn had written before */
	uint64_t bytes;		      /* ... and since, as last counted */
};

bool intercept_wanted(const struct config *config, const struct listener_config *listen,
		      const struct http1_head *head)
{
	const struct http1_target *target = &head->parsed_target;

	return target->form == HTTP1_TARGET_AUTHORITY && listen->upstream == NULL &&
	       route_host_intercepted(config, target->host, target->host_len);
}

/* The Host sent upstream, as a sidecar whose upstream is
 * https://host:port sends it: no trailing dot, no port when it is 443.
 * Clients that sign Host (AWS's SigV4) sign it so; "host:443" fails them. */
static char *intercept_authority(const struct http1_target *target)
{
	size_t len = target->host_len;
	bool v6 = memchr(target->host, ':', len) != NULL;
	size_t size = len + sizeof("[]:65535");
	char *authority = xmalloc(size);
	int n;

	if (!v6 && len > 1 && target->host[len - 1] == '.')
		len--;
	n = snprintf(authority, size, v6 ? "[%.*s]" : "%.*s", (int)len, target->host);
	if (target->port != 443)
		snprintf(authority + n, size - (size_t)n, ":%u", (unsigned)target->port);
	return authority;
}

/* The tunnel's context: its host, the log prefix and its upstream. */
static struct intercept *intercept_new(const struct http1_target *target)
{
	struct intercept *ic = xcalloc(1, sizeof(*ic));
	size_t prefix_len = 8 + target->authority_len;

	ic->host = xstrndup(target->host, target->host_len);
	ic->prefix = xmalloc(prefix_len + 1);
	snprintf(ic->prefix, prefix_len + 1, "https://%.*s", (int)target->authority_len,
		 target->authority);
	ic->upstream.tls = true;
	ic->upstream.host = xstrdup(ic->host);
	ic->upstream.port = target->port;
	ic->upstream.authority = intercept_authority(target);
	ic->upstream.text = xstrdup(ic->prefix);
	return ic;
}

void intercept_log_at_end(struct intercept *ic, const struct access_record *record,
			  const struct conn *conn)
{
	ic->log = access_record_dup(record);
	ic->opened_ms = retry_budget_now_ms();
	ic->base = conn_bytes_written(conn) + conn_output_length(conn);
}

void intercept_count(struct intercept *ic, const struct conn *conn)
{
	if (ic != NULL && conn != NULL && conn_bytes_written(conn) > ic->base)
		ic->bytes = conn_bytes_written(conn) - ic->base;
}

void intercept_end(struct intercept *ic, const struct conn *conn)
{
	uint64_t now = retry_budget_now_ms();

	if (ic == NULL || ic->log == NULL)
		return;
	intercept_count(ic, conn);
	ic->log->bytes = ic->bytes;
	ic->log->duration_ms += now > ic->opened_ms ? now - ic->opened_ms : 0;
	access_log_write(ic->log);
	access_record_free(ic->log);
	ic->log = NULL;
}

void intercept_free(struct intercept *ic)
{
	if (ic == NULL)
		return;
	intercept_end(ic, NULL);
	free(ic->host);
	free(ic->prefix);
	free(ic->upstream.host);
	free(ic->upstream.authority);
	free(ic->upstream.text);
	free(ic);
}

struct intercept *intercept_start(struct proxy *proxy, const struct config *config,
				  struct conn *conn, const struct http1_head *head, int *status,
				  char *reason, size_t reason_len)
{
	const struct http1_target *target = &head->parsed_target;
	struct intercept *ic;
	X509 *cert;
	EVP_PKEY *key;
	SSL *ssl;
	char err[256];

	/* a name no certificate can hold (an empty label, one over 63 bytes)
	 * names no host either: the client's mistake, not the proxy's */
	if (!ca_host_valid(target->host, target->host_len)) {
		*status = 400;
		snprintf(reason, reason_len, "not a valid host name");
		return NULL;
	}
	*status = 502;
	if (ca_leaf(config->intercept.ca, target->host, target->host_len, time(NULL), &cert, &key,
		    err, sizeof(err)) < 0) {
		log_error("intercept: no certificate for %.*s: %s", (int)target->host_len,
			  target->host, err);
		snprintf(reason, reason_len, "cannot make a certificate for this host");
		return NULL;
	}
	ssl = tls_server_new(proxy->tls, cert, key, ca_chain(config->intercept.ca), err,
			     sizeof(err));
	if (ssl == NULL) {
		log_error("intercept: %s", err);
		snprintf(reason, reason_len, "cannot set up TLS for this host");
		return NULL;
	}
	/* copied before the head leaves the input: it points into it */
	ic = intercept_new(target);
	reply_connect_established(conn_output(conn));
	evbuffer_drain(conn_input(conn), head->head_len);
	if (conn_start_tls_server(conn, ssl) < 0) {
		/* the 200 could not go out at once: the connection is unusable */
		intercept_free(ic);
		*status = 0;
		snprintf(reason, reason_len, "the answer to the CONNECT could not be written");
		return NULL;
	}
	return ic;
}

const char *intercept_host(const struct intercept *ic)
{
	return ic->host;
}

const char *intercept_prefix(const struct intercept *ic)
{
	return ic->prefix;
}

const struct upstream_url *intercept_upstream(const struct intercept *ic)
{
	return &ic->upstream;
}
