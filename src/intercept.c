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
#include "http1_chars.h"
#include "log.h"
#include "proxy.h"
#include "reply.h"
#include "retry_budget.h"
#include "route.h"
#include "timer.h"
#include "tls.h"
#include "upstream.h"
#include "xmalloc.h"

struct intercept {
	char *host;			/* the CONNECT host, no brackets */
	char *prefix;			/* "https://" and the CONNECT authority */
	struct upstream_url upstream;	/* https://host:port */
	char *connect_authority;	/* as the CONNECT named it */
	struct ca *ca;			/* held: the CA whose leaf TLS in the tunnel gets */
	struct tls_store *tls;		/* the proxy's: its TLS server context */
	bool begun;			/* the client's first byte said TLS or plain HTTP */
	const char *blind_why;		/* why it is tunnelled blind, or NULL */
	struct upstream_connect *blind; /* the blind tunnel's connect, under way */
	intercept_blind_cb blind_cb;	/* ... and whom it tells */
	void *blind_arg;
	struct access_record *log; /* the CONNECT's line, until the tunnel ends */
	uint64_t opened_ms;	   /* when it was intercepted (monotonic) */
	uint64_t base;		   /* bytes the client conn had written before */
	uint64_t bytes;		   /* ... and since, as last counted */
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
static char *intercept_authority(const char *host, uint16_t port, uint16_t default_port)
{
	size_t len = strlen(host);
	bool v6 = memchr(host, ':', len) != NULL;
	size_t size = len + sizeof("[]:65535");
	char *authority = xmalloc(size);
	int n;

	if (!v6 && len > 1 && host[len - 1] == '.')
		len--;
	n = snprintf(authority, size, v6 ? "[%.*s]" : "%.*s", (int)len, host);
	if (port != default_port)
		snprintf(authority + n, size - (size_t)n, ":%u", (unsigned)port);
	return authority;
}

/* The tunnel's prefix in the log: the scheme and the CONNECT authority. */
static char *intercept_prefix_of(const char *scheme, const char *connect_authority)
{
	size_t size = strlen(scheme) + strlen(connect_authority) + 1;
	char *prefix = xmalloc(size);

	snprintf(prefix, size, "%s%s", scheme, connect_authority);
	return prefix;
}

/* The tunnel's context: its host, the log prefix and its upstream. */
static struct intercept *intercept_new(const struct http1_target *target)
{
	struct intercept *ic = xcalloc(1, sizeof(*ic));

	ic->host = xstrndup(target->host, target->host_len);
	ic->connect_authority = xstrndup(target->authority, target->authority_len);
	ic->prefix = intercept_prefix_of("https://", ic->connect_authority);
	ic->upstream.tls = true;
	ic->upstream.host = xstrdup(ic->host);
	ic->upstream.port = target->port;
	ic->upstream.authority = intercept_authority(ic->host, target->port, 443);
	ic->upstream.text = xstrdup(ic->prefix);
	return ic;
}

void intercept_log_at_end(struct intercept *ic, const struct access_record *record,
			  const struct conn *conn)
{
	ic->log = access_record_dup(record);
	ic->opened_ms = timer_now_ms();
	ic->base = conn_bytes_mark(conn);
}

void intercept_count(struct intercept *ic, const struct conn *conn)
{
	if (ic != NULL && conn != NULL)
		ic->bytes = conn_bytes_written_since(conn, ic->base);
}

void intercept_end(struct intercept *ic, const struct conn *conn)
{
	uint64_t now = timer_now_ms();

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
	if (ic->blind != NULL)
		upstream_connect_cancel(ic->blind);
	ca_release(ic->ca);
	free(ic->connect_authority);
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
	char err[256];

	/* a name no certificate can hold (an empty label, one over 63 bytes)
	 * names no host either: the client's mistake, not the proxy's */
	if (!ca_host_valid(target->host, target->host_len)) {
		*status = 400;
		snprintf(reason, reason_len, "not a valid host name");
		return NULL;
	}
	/* the leaf waits for TLS, but a CA that can issue none is said now,
	 * while the CONNECT can still get its 502 */
	if (ca_usable(config->intercept.ca, time(NULL), err, sizeof(err)) < 0) {
		log_error("intercept: no certificate for %.*s: %s", (int)target->host_len,
			  target->host, err);
		*status = 502;
		snprintf(reason, reason_len, "cannot make a certificate for this host");
		return NULL;
	}
	/* copied before the head leaves the input: it points into it */
	ic = intercept_new(target);
	/* the leaf waits for the client's first byte: plain HTTP in the
	 * tunnel needs none. The CA is the one this CONNECT was answered
	 * under, whatever a reload brings meanwhile */
	ic->ca = ca_hold(config->intercept.ca);
	ic->tls = proxy->tls;
	reply_connect_established(conn_output(conn));
	evbuffer_drain(conn_input(conn), head->head_len);
	return ic;
}

/* TLS starts in the tunnel: the TLS server side, with the CONNECT host's
 * leaf (made now on first use). NULL, logged, when that cannot be done. */
static SSL *intercept_tls(struct intercept *ic)
{
	unsigned long made = ca_leaves_made(ic->ca);
	X509 *cert;
	EVP_PKEY *key;
	SSL *ssl;
	char err[256];

	if (ca_leaf(ic->ca, ic->host, strlen(ic->host), time(NULL), &cert, &key, err, sizeof(err)) <
	    0) {
		log_error("intercept: no certificate for %s: %s", ic->host, err);
		return NULL;
	}
	if (ca_leaves_made(ic->ca) != made)
		log_debug("intercept: made a certificate for %s", ic->host);
	ssl = tls_server_new(ic->tls, cert, key, ca_chain(ic->ca), err, sizeof(err));
	if (ssl == NULL)
		log_error("intercept: %s", err);
	return ssl;
}

/* Past this many token bytes with no space after them the first bytes are
 * taken for an HTTP request line (methods are short): the parser judges. */
#define INTERCEPT_METHOD_MAX 64
/* The longest scheme an absolute-form target's may be taken for (http,
 * https, ws, wss are what a proxy sees); a longer word is no scheme. */
#define INTERCEPT_SCHEME_MAX 16
/* The bytes looked at: the empty lines a request line may follow (eight
 * CRLFs, as the parser takes), a method, its space, a scheme and "://". */
#define INTERCEPT_PEEK (2 * 8 + INTERCEPT_METHOD_MAX + 1 + INTERCEPT_SCHEME_MAX + 3)

/* What the client's first bytes in the tunnel speak. */
enum intercept_kind {
	INTERCEPT_KIND_MORE,  /* too few bytes to tell */
	INTERCEPT_KIND_TLS,   /* a TLS record */
	INTERCEPT_KIND_HTTP,  /* a request line's method, its space and a target's start */
	INTERCEPT_KIND_OTHER, /* neither: another protocol whose client speaks first */
};

/* An SSH client sends its banner without waiting for the server's:
 * "SSH-2.0-OpenSSH_9.2p1 Debian-2" and CR LF (RFC 4253 section 4.2), whose
 * comment after a space would pass for a method and its space. */
static const char intercept_ssh[] = "SSH-";

static bool intercept_ssh_banner(const unsigned char *p, size_t len)
{
	return len >= sizeof(intercept_ssh) - 1 &&
	       memcmp(p, intercept_ssh, sizeof(intercept_ssh) - 1) == 0;
}

static bool intercept_scheme_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '-' || c == '.';
}

static bool intercept_method_is(const unsigned char *method, size_t len, const char *name)
{
	return len == strlen(name) && memcmp(method, name, len) == 0;
}

/* The bytes after a method and its space: an HTTP request-target begins
 * with '/' (origin-form) or a scheme and "://" (absolute-form); the
 * authority-form is CONNECT's alone, the asterisk-form OPTIONS' (RFC 9112
 * section 3.2). Anything else (memcached's "get foo", a Redis inline
 * "SET k v" or "KEYS *") is a word and a space of another protocol. */
static enum intercept_kind intercept_target_kind(const unsigned char *method, size_t method_len,
						 const unsigned char *p, size_t len)
{
	static const char sep[] = "://";
	size_t i = 1;
	size_t rest;

	if (intercept_method_is(method, method_len, "CONNECT"))
		return INTERCEPT_KIND_HTTP;
	if (len == 0)
		return INTERCEPT_KIND_MORE;
	if (p[0] == '/' || (p[0] == '*' && intercept_method_is(method, method_len, "OPTIONS")))
		return INTERCEPT_KIND_HTTP;
	/* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3986) */
	if (!((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z')))
		return INTERCEPT_KIND_OTHER;
	while (i < len && i <= INTERCEPT_SCHEME_MAX && intercept_scheme_char(p[i]))
		i++;
	if (i > INTERCEPT_SCHEME_MAX)
		return INTERCEPT_KIND_OTHER;
	rest = len - i < sizeof(sep) - 1 ? len - i : sizeof(sep) - 1;
	if (memcmp(p + i, sep, rest) != 0)
		return INTERCEPT_KIND_OTHER;
	return rest < sizeof(sep) - 1 ? INTERCEPT_KIND_MORE : INTERCEPT_KIND_HTTP;
}

static enum intercept_kind intercept_kind_of(const unsigned char *p, size_t len)
{
	size_t ssh = sizeof(intercept_ssh) - 1;
	size_t i = 0;
	size_t start;

	/* a TLS record starts with its content type, a handshake's 0x16; no
	 * HTTP request line starts so */
	if (p[0] == 0x16)
		return INTERCEPT_KIND_TLS;
	if (memcmp(p, intercept_ssh, len < ssh ? len : ssh) == 0)
		return len < ssh ? INTERCEPT_KIND_MORE : INTERCEPT_KIND_OTHER;
	/* the empty lines a request line may follow (RFC 9112 section 2.2) */
	while (i < len && (p[i] == '\r' || p[i] == '\n'))
		i++;
	start = i;
	for (size_t token = 0; i < len; i++, token++) {
		if (HTTP1_IS(p[i], HTTP1_C_TCHAR)) {
			if (token == INTERCEPT_METHOD_MAX)
				return INTERCEPT_KIND_HTTP;
			continue;
		}
		/* a Redis command ("*1" CR LF), a PostgreSQL startup message
		 * (a length, a NUL first) are no method and space */
		if (p[i] != ' ' || token == 0)
			return INTERCEPT_KIND_OTHER;
		return intercept_target_kind(p + start, token, p + i + 1, len - i - 1);
	}
	return INTERCEPT_KIND_MORE;
}

enum intercept_begun intercept_begin(struct intercept *ic, struct conn *conn,
				     enum intercept_look look)
{
	unsigned char start[INTERCEPT_PEEK];
	enum intercept_kind kind;
	ev_ssize_t got;
	SSL *ssl;

	if (ic->begun) /* begun already */
		return ic->blind_why != NULL ? INTERCEPT_BLIND
		       : ic->upstream.tls    ? INTERCEPT_TLS
					     : INTERCEPT_PLAIN;
	got = evbuffer_copyout(conn_input(conn), start, sizeof(start));
	if (got < 1) {
		if (look != INTERCEPT_LOOK_WAITED)
			return INTERCEPT_WAITING;
		ic->begun = true;
		ic->blind_why = "no byte from the client within intercept.server_first_after "
				"(a protocol whose server speaks first): tunnelled blind";
		return INTERCEPT_BLIND;
	}
	kind = intercept_kind_of(start, (size_t)got);
	/* all it looks at and still undecided (many empty lines first): no
	 * more would tell, the parser judges */
	if (kind == INTERCEPT_KIND_MORE && (size_t)got == sizeof(start))
		kind = INTERCEPT_KIND_HTTP;
	if (kind == INTERCEPT_KIND_MORE && look == INTERCEPT_LOOK_NOW)
		return INTERCEPT_WAITING; /* the rest may tell */
	/* no rest comes after the client's half-close: too few bytes for a
	 * request line is no HTTP */
	if (kind == INTERCEPT_KIND_MORE && look == INTERCEPT_LOOK_ENDED)
		kind = INTERCEPT_KIND_OTHER;
	ic->begun = true;
	if (kind == INTERCEPT_KIND_OTHER) {
		ic->blind_why = intercept_ssh_banner(start, (size_t)got)
					? "an SSH banner, not HTTP: tunnelled blind"
					: "neither TLS nor HTTP from the client: tunnelled blind";
		return INTERCEPT_BLIND;
	}
	if (kind == INTERCEPT_KIND_TLS) {
		ssl = intercept_tls(ic);
		if (ssl == NULL)
			return INTERCEPT_FAILED;
		return conn_start_tls_server(conn, ssl) < 0 ? INTERCEPT_FAILED : INTERCEPT_TLS;
	}
	/* plain HTTP in the tunnel (a browser's ws://, curl -p http://): the
	 * requests inside go to http://host:port as a sidecar's would */
	free(ic->prefix);
	free(ic->upstream.authority);
	free(ic->upstream.text);
	ic->prefix = intercept_prefix_of("http://", ic->connect_authority);
	ic->upstream.tls = false;
	ic->upstream.authority = intercept_authority(ic->host, ic->upstream.port, 80);
	ic->upstream.text = xstrdup(ic->prefix);
	return INTERCEPT_PLAIN;
}

bool intercept_begun(const struct intercept *ic)
{
	return ic->begun;
}

uint64_t intercept_age_ms(const struct intercept *ic)
{
	uint64_t now = timer_now_ms();

	return now > ic->opened_ms ? now - ic->opened_ms : 0;
}

const char *intercept_blind_why_text(const struct intercept *ic)
{
	return ic->blind_why != NULL ? ic->blind_why : "";
}

bool intercept_blind(const struct intercept *ic)
{
	return ic->blind != NULL;
}

/* The CONNECT's note: first, then why the tunnel ended so. */
static void intercept_note(struct intercept *ic, const char *first, const char *why)
{
	size_t size;
	char *note;

	if (ic->log == NULL)
		return;
	size = strlen(first) + strlen(why) + sizeof("; ");
	note = xmalloc(size);
	snprintf(note, size, "%s; %s", first, why);
	free((char *)ic->log->note);
	ic->log->note = note;
}

void intercept_blind_refused(struct intercept *ic, const char *reason)
{
	intercept_note(ic, intercept_blind_why_text(ic), reason);
}

void intercept_handshake_ended(struct intercept *ic, const char *why)
{
	intercept_note(ic, "intercepted", why);
}

/* The blind tunnel's connect ended. */
static void intercept_blind_connected(struct conn *conn, enum try_outcome failure, bool local,
				      const char *reason, void *arg)
{
	struct intercept *ic = arg;

	(void)failure;
	(void)local;
	ic->blind = NULL;
	if (conn == NULL)
		intercept_blind_refused(ic, reason);
	ic->blind_cb(conn, reason, ic->blind_arg);
}

void intercept_connect_blind(struct intercept *ic, struct proxy *proxy, const struct config *config,
			     intercept_blind_cb cb, void *arg)
{
	size_t len = strlen(ic->host);
	/* an IPv6 literal may come out of its one spelling longer */
	char *host = xmalloc((len > UPSTREAM_IPV6_TEXT_MAX ? len : UPSTREAM_IPV6_TEXT_MAX) + 1);
	struct upstream_endpoint endpoint = { .tls = false, .port = ic->upstream.port };
	size_t host_len;

	/* the one spelling a blind CONNECT's upstream has */
	memcpy(host, ic->host, len);
	host_len = upstream_host_spelling(host, len, memchr(host, ':', len) != NULL,
					  &endpoint.absolute);
	host[host_len] = '\0';
	endpoint.host = host;
	ic->blind_cb = cb;
	ic->blind_arg = arg;
	ic->blind = upstream_connect_start(proxy, &endpoint, &config->tls, "", timer_now_ms(),
					   config->limits.connect_timeout_ms, 0,
					   intercept_blind_connected, ic);
	free(host);
}

struct access_record *intercept_take_log(struct intercept *ic)
{
	struct access_record *record = ic->log;

	ic->log = NULL;
	if (record == NULL)
		return NULL;
	record->duration_ms += intercept_age_ms(ic);
	record->tunnel = true; /* with bytes_in, as a blind CONNECT's line */
	free((char *)record->note);
	record->note = xstrdup(ic->blind_why);
	return record;
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
