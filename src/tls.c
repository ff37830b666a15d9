#include "tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "file_read.h"
#include "trust_default.h"
#include "xmalloc.h"

#define TLS_MAX_SESSIONS 1024 /* upstreams remembered for resumption */

/* What a context's trust was made from, so that a reload can tell whether
 * it changed: the CA file's SHA-256, or the default store it took. A store
 * the default trust replaced stays alive (and its address taken) while a
 * context made from it does, so an equal pointer is the same store. */
struct tls_trust_source {
	unsigned char digest[SHA256_DIGEST_LENGTH];
	bool digested; /* false: the file could not be read; never the same */
	X509_STORE *default_store;
};

struct tls_context {
	char *ca_file; /* NULL: default paths */
	bool verify;
	bool kept; /* taken over from the contexts before the reload under way */
	struct tls_trust_source source;
	SSL_CTX *ctx;
	struct tls_context *next;
};

#define TLS_MAX_TICKETS 4			/* TLS 1.3 tickets kept per upstream */
#define TLS_TICKET_MAX_LIFETIME (7 * 24 * 3600) /* seconds, RFC 8446 section 4.6.1 */

/* What an upstream's new connections may resume. A TLS 1.2 session (an id
 * or a ticket) is offered by each of them; a TLS 1.3 ticket by one only,
 * taken out when that connection's handshake begins (an attempt refused,
 * or dropped while its TCP connect is under way, sends none and uses up
 * none): a ticket offered twice would let an observer tie the
 * connections together (RFC 8446 appendix C.4). */
struct tls_session {
	char *key;
	const SSL_CTX *ctx;		       /* the context whose connections saved these */
	SSL_SESSION *shared;		       /* TLS 1.2 */
	SSL_SESSION *tickets[TLS_MAX_TICKETS]; /* TLS 1.3, oldest first */
	size_t ticket_count;
	struct tls_session *next;
};

struct tls_store {
	struct tls_context *contexts;
	struct tls_context *running; /* during a reload: the contexts before it */
	bool reloading;
	SSL_CTX *server;	      /* intercepted tunnels; made on first use */
	struct tls_session *sessions; /* most recently saved first */
	size_t session_count;
	struct trust_default *default_trust; /* for policies with no ca_file */
};

/* Indexes of the ex_data slots that tie an SSL to its store and session
 * key, and mark a client SSL whose server asked for a certificate. */
static int tls_ex_store = -1;
static int tls_ex_key = -1;
static int tls_ex_cert_asked = -1;

/* The session key is a copy owned by the SSL: freed with it. */
static void tls_free_key(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			 void *argp)
{
	free(ptr);
}

struct tls_store *tls_store_new(void)
{
	struct tls_store *store;

	if (tls_ex_store < 0) {
		tls_ex_store = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
		tls_ex_key = SSL_get_ex_new_index(0, NULL, NULL, NULL, tls_free_key);
		tls_ex_cert_asked = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	}
	store = xcalloc(1, sizeof(struct tls_store));
	store->default_trust = trust_default_new();
	return store;
}

static void tls_contexts_free(struct tls_context *c)
{
	while (c != NULL) {
		struct tls_context *next = c->next;

		SSL_CTX_free(c->ctx);
		free(c->ca_file);
		free(c);
		c = next;
	}
}

static void tls_session_clear(struct tls_session *s)
{
	SSL_SESSION_free(s->shared);
	s->shared = NULL;
	while (s->ticket_count > 0)
		SSL_SESSION_free(s->tickets[--s->ticket_count]);
}

static void tls_session_free(struct tls_session *s)
{
	tls_session_clear(s);
	free(s->key);
	free(s);
}

static void tls_sessions_free(struct tls_store *store)
{
	while (store->sessions != NULL) {
		struct tls_session *s = store->sessions;

		store->sessions = s->next;
		tls_session_free(s);
	}
	store->session_count = 0;
}

void tls_store_reload_begin(struct tls_store *store)
{
	store->running = store->contexts;
	store->contexts = NULL;
	store->reloading = true;
}

/* Is ctx one of the store's contexts now? A connection made before a
 * reload may get its ticket after it: verified under the old trust, it is
 * not kept. */
static bool tls_context_current(const struct tls_store *store, const SSL_CTX *ctx)
{
	for (const struct tls_context *c = store->contexts; c != NULL; c = c->next)
		if (c->ctx == ctx)
			return true;
	return false;
}

/* Forget the sessions saved under a context the reload did not keep. */
static void tls_sessions_drop_stale(struct tls_store *store)
{
	struct tls_session **link = &store->sessions;

	while (*link != NULL) {
		struct tls_session *s = *link;

		if (tls_context_current(store, s->ctx)) {
			link = &s->next;
			continue;
		}
		*link = s->next;
		tls_session_free(s);
		store->session_count--;
	}
}

void tls_store_reload_end(struct tls_store *store, bool applied)
{
	struct tls_context *c, *next, *fresh = NULL;

	if (!store->reloading)
		return;
	store->reloading = false;
	if (applied) {
		tls_contexts_free(store->running);
		for (c = store->contexts; c != NULL; c = c->next)
			c->kept = false;
		tls_sessions_drop_stale(store);
	} else {
		/* the contexts the reload took over go back to the running
		 * config, which still uses them; those it made go */
		for (c = store->contexts; c != NULL; c = next) {
			next = c->next;
			if (c->kept) {
				c->kept = false;
				c->next = store->running;
				store->running = c;
			} else {
				c->next = fresh;
				fresh = c;
			}
		}
		tls_contexts_free(fresh);
		store->contexts = store->running;
	}
	store->running = NULL;
}

void tls_store_free(struct tls_store *store)
{
	if (store == NULL)
		return;
	tls_contexts_free(store->contexts);
	tls_contexts_free(store->running);
	tls_sessions_free(store);
	if (store->server != NULL)
		SSL_CTX_free(store->server);
	trust_default_free(store->default_trust);
	free(store);
}

bool tls_store_current(const struct tls_store *store, const SSL *ssl)
{
	return tls_context_current(store, SSL_get_SSL_CTX(ssl));
}

/* Has a TLS 1.3 ticket outlived its lifetime, 0 meaning at once, or the 7
 * days a client may keep one whatever its lifetime (RFC 8446 section
 * 4.6.1)? Its time is when it came; a clock set back makes no ticket
 * younger than new. */
static bool tls_ticket_expired(const SSL_SESSION *ticket, time_t now)
{
	uint64_t lifetime = SSL_SESSION_get_ticket_lifetime_hint(ticket);
	long age = (long)now - (long)SSL_SESSION_get_time(ticket);

	if (lifetime > TLS_TICKET_MAX_LIFETIME)
		lifetime = TLS_TICKET_MAX_LIFETIME;
	return (uint64_t)(age > 0 ? age : 0) >= lifetime;
}

/* Has a TLS 1.2 session outlived the time it may be resumed in: the
 * session's timeout, or a ticket's lifetime hint when the server gave one
 * (RFC 5077 section 3.3: 0 leaves it unspecified)? An expired one would
 * only be refused for a full handshake. */
static bool tls_shared_expired(const SSL_SESSION *session, time_t now)
{
	uint64_t lifetime = (uint64_t)SSL_SESSION_get_timeout(session);
	uint64_t hint = SSL_SESSION_get_ticket_lifetime_hint(session);
	long age = (long)now - (long)SSL_SESSION_get_time(session);

	if (hint > 0 && hint < lifetime)
		lifetime = hint;
	return (uint64_t)(age > 0 ? age : 0) >= lifetime;
}

/* Keep a session for this SSL's upstream; OpenSSL calls this when a server
 * issues a ticket, which in TLS 1.3 is after the handshake, often two at
 * once. A TLS 1.3 ticket joins those kept (the oldest goes past
 * TLS_MAX_TICKETS); a TLS 1.2 session replaces what was kept. A copy is
 * kept: OpenSSL marks a connection's own session not resumable when the
 * connection is freed without a close_notify, as upstreams' often are. */
static int tls_new_session_cb(SSL *ssl, SSL_SESSION *ticket)
{
	struct tls_store *store = SSL_get_ex_data(ssl, tls_ex_store);
	const char *key = SSL_get_ex_data(ssl, tls_ex_key);
	struct tls_session **link;
	struct tls_session *s = NULL;
	SSL_SESSION *session;

	if (store == NULL || key == NULL || !tls_context_current(store, SSL_get_SSL_CTX(ssl)))
		return 0;
	/* a TLS 1.3 ticket of lifetime 0 is to be discarded at once */
	if (SSL_SESSION_get_protocol_version(ticket) >= TLS1_3_VERSION &&
	    tls_ticket_expired(ticket, time(NULL)))
		return 0;
	session = SSL_SESSION_dup(ticket);
	if (session == NULL)
		return 0;
	for (link = &store->sessions; *link != NULL; link = &(*link)->next) {
		if (strcmp((*link)->key, key) == 0) {
			s = *link;
			*link = s->next;
			break;
		}
	}
	if (s == NULL) {
		s = xcalloc(1, sizeof(*s));
		s->key = xstrdup(key);
		if (++store->session_count > TLS_MAX_SESSIONS) {
			/* drop the oldest: the tail of the list */
			for (link = &store->sessions; (*link)->next != NULL; link = &(*link)->next)
				;
			tls_session_free(*link);
			*link = NULL;
			store->session_count--;
		}
	}
	if (s->ctx != SSL_get_SSL_CTX(ssl)) {
		/* the upstream's trust was made anew: what was saved under the
		 * old one is not offered under the new */
		tls_session_clear(s);
		s->ctx = SSL_get_SSL_CTX(ssl);
	}
	s->next = store->sessions;
	store->sessions = s;
	if (SSL_SESSION_get_protocol_version(session) < TLS1_3_VERSION) {
		tls_session_clear(s);
		s->shared = session;
		return 0; /* OpenSSL keeps its reference to the ticket: we hold a copy */
	}
	SSL_SESSION_free(s->shared);
	s->shared = NULL;
	if (s->ticket_count == TLS_MAX_TICKETS) {
		SSL_SESSION_free(s->tickets[0]);
		memmove(s->tickets, s->tickets + 1, (TLS_MAX_TICKETS - 1) * sizeof(s->tickets[0]));
		s->ticket_count--;
	}
	s->tickets[s->ticket_count++] = session;
	return 0;
}

/* The server asked for a client certificate: the proxy has none to give
 * (an empty Certificate goes), and notes that it was asked. */
static int tls_client_cert_cb(SSL *ssl, X509 **cert, EVP_PKEY **key)
{
	SSL_set_ex_data(ssl, tls_ex_cert_asked, ssl);
	return 0;
}

bool tls_client_may_be_refused(const SSL *ssl)
{
	return SSL_version(ssl) == TLS1_3_VERSION && !SSL_session_reused(ssl) &&
	       SSL_get_ex_data(ssl, tls_ex_cert_asked) != NULL;
}

/* Describe the first queued OpenSSL error after what went wrong. */
static void tls_error_string(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_get_error();
	char detail[256] = "";

	if (e != 0)
		ERR_error_string_n(e, detail, sizeof(detail));
	snprintf(buf, len, "%s%s%s", what, e != 0 ? ": " : "", detail);
	ERR_clear_error();
}

/* Is c the context for policy's trust settings (its file by name)? */
static bool tls_context_for(const struct tls_context *c, const struct tls_policy *policy)
{
	return c->verify == policy->verify && ((c->ca_file == NULL && policy->ca_file == NULL) ||
					       (c->ca_file != NULL && policy->ca_file != NULL &&
						strcmp(c->ca_file, policy->ca_file) == 0));
}

/* A CA file's bytes, read whole (NULL when it cannot be read): they are
 * both digested and loaded, so that the digest a context keeps is always
 * that of the certificates it trusts, whatever writes the file meanwhile. */
static char *tls_file_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data;

	if (f == NULL)
		return NULL;
	data = file_read_all(f, SIZE_MAX, len);
	fclose(f);
	return data;
}

/* Trust every certificate (and CRL) of a CA file's PEM bytes, as
 * SSL_CTX_load_verify_locations() does from the file; false when there is
 * no certificate (CRLs alone trust nothing: every handshake would fail) or
 * one does not parse. */
static bool tls_trust_pem(SSL_CTX *ctx, const char *data, size_t len)
{
	BIO *bio = len <= INT_MAX ? BIO_new_mem_buf(data, (int)len) : NULL;
	STACK_OF(X509_INFO) *infos =
		bio != NULL ? PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL) : NULL;
	X509_STORE *trust = SSL_CTX_get_cert_store(ctx);
	bool ok = infos != NULL;
	int certificates = 0;

	for (int i = 0; ok && i < sk_X509_INFO_num(infos); i++) {
		X509_INFO *info = sk_X509_INFO_value(infos, i);

		if (info->x509 != NULL) {
			ok = X509_STORE_add_cert(trust, info->x509) == 1;
			certificates++;
		}
		if (ok && info->crl != NULL)
			ok = X509_STORE_add_crl(trust, info->crl) == 1;
	}
	sk_X509_INFO_pop_free(infos, X509_INFO_free);
	BIO_free(bio);
	return ok && certificates > 0;
}

/* During a reload: the running config's context for policy when the trust
 * it was made from has not changed (the CA file holds the same bytes, the
 * default store was not read again), moved into the new contexts. Its
 * pooled connections and saved sessions then stay usable. */
static struct tls_context *tls_context_keep(struct tls_store *store,
					    const struct tls_policy *policy,
					    const struct tls_trust_source *now, char *err,
					    size_t err_len)
{
	struct tls_context **link, *c;

	for (link = &store->running; *link != NULL; link = &(*link)->next)
		if (tls_context_for(*link, policy))
			break;
	c = *link;
	if (c == NULL)
		return NULL;
	if (policy->ca_file != NULL) {
		if (!c->source.digested || !now->digested ||
		    memcmp(now->digest, c->source.digest, sizeof(now->digest)) != 0)
			return NULL;
	} else if (trust_default_get(store->default_trust, err, err_len) !=
		   c->source.default_store) {
		return NULL;
	}
	*link = c->next;
	c->kept = true;
	c->next = store->contexts;
	store->contexts = c;
	return c;
}

/* Find or build the context for a policy (during a reload, take over the
 * running one whose trust did not change). */
static struct tls_context *tls_context_get(struct tls_store *store, const struct tls_policy *policy,
					   char *err, size_t err_len)
{
	static const unsigned char alpn[] = "\x08http/1.1";
	struct tls_trust_source source = { 0 };
	struct tls_context *c;
	char *pem = NULL;
	size_t pem_len = 0;
	SSL_CTX *ctx;

	for (c = store->contexts; c != NULL; c = c->next)
		if (tls_context_for(c, policy))
			return c;
	if (policy->ca_file != NULL && (pem = tls_file_read(policy->ca_file, &pem_len)) != NULL)
		source.digested =
			EVP_Digest(pem, pem_len, source.digest, NULL, EVP_sha256(), NULL) == 1;
	if (store->reloading &&
	    (c = tls_context_keep(store, policy, &source, err, err_len)) != NULL) {
		free(pem);
		return c;
	}
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL) {
		tls_error_string(err, err_len, "cannot create a TLS context");
		free(pem);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, policy->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	if (policy->ca_file != NULL) {
		bool readable = pem != NULL;
		bool loaded = readable && tls_trust_pem(ctx, pem, pem_len);

		free(pem);
		if (!loaded) {
			char what[512];

			snprintf(what, sizeof(what), "cannot load CA file %s%s", policy->ca_file,
				 readable ? "" : ": cannot read it");
			tls_error_string(err, err_len, what);
			SSL_CTX_free(ctx);
			return NULL;
		}
		/* every certificate the user put in the file is trusted as
		 * such, an intermediate CA as well as a root, as curl, Go and
		 * Java take a CA file: OpenSSL alone would want the chain to
		 * reach a self-signed root in it */
		X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
	} else {
		X509_STORE *trust = trust_default_get(store->default_trust, err, err_len);

		if (trust == NULL) {
			SSL_CTX_free(ctx);
			return NULL;
		}
		SSL_CTX_set1_cert_store(ctx, trust);
		source.default_store = trust;
	}
	SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
	SSL_CTX_set_session_cache_mode(ctx,
				       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, tls_new_session_cb);
	SSL_CTX_set_client_cert_cb(ctx, tls_client_cert_cb);
	c = xcalloc(1, sizeof(*c));
	c->ca_file = policy->ca_file != NULL ? xstrdup(policy->ca_file) : NULL;
	c->verify = policy->verify;
	c->source = source;
	c->ctx = ctx;
	c->next = store->contexts;
	store->contexts = c;
	return c;
}

int tls_store_prepare(struct tls_store *store, const struct tls_policy *policy, char *err,
		      size_t err_len)
{
	return tls_context_get(store, policy, err, err_len) != NULL ? 0 : -1;
}

SSL *tls_client_new(struct tls_store *store, const struct tls_policy *policy, const char *host,
		    const char *session_key, char *err, size_t err_len)
{
	struct tls_context *c = tls_context_get(store, policy, err, err_len);
	struct in6_addr addr;
	bool is_ip;
	SSL *ssl;

	if (c == NULL)
		return NULL;
	ssl = SSL_new(c->ctx);
	if (ssl == NULL) {
		tls_error_string(err, err_len, "cannot create a TLS connection");
		return NULL;
	}
	is_ip = inet_pton(AF_INET, host, &addr) == 1 || inet_pton(AF_INET6, host, &addr) == 1;
	/* SNI carries names only (RFC 6066 section 3); IP literals are verified
	 * against the certificate's IP addresses instead. */
	if (!is_ip)
		SSL_set_tlsext_host_name(ssl, host);
	if (policy->verify) {
		X509_VERIFY_PARAM *param = SSL_get0_param(ssl);

		if (is_ip) {
			X509_VERIFY_PARAM_set1_ip_asc(param, host);
		} else {
			/* RFC 9525 section 6.3: a wildcard is a whole left-most
			 * label, and a subject CN names no host */
			X509_VERIFY_PARAM_set_hostflags(
				param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
					       X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
			SSL_set1_host(ssl, host);
		}
	}
	SSL_set_ex_data(ssl, tls_ex_store, store);
	SSL_set_ex_data(ssl, tls_ex_key, xstrdup(session_key));
	return ssl;
}

void tls_client_begin(SSL *ssl)
{
	struct tls_store *store = SSL_get_ex_data(ssl, tls_ex_store);
	const char *key = SSL_get_ex_data(ssl, tls_ex_key);
	time_t now = time(NULL);
	struct tls_session **link;
	struct tls_session *s;

	/* a connection made under a trust a reload replaced offers nothing
	 * kept since, nor one under the new trust what the old one kept */
	if (store == NULL || key == NULL || !tls_context_current(store, SSL_get_SSL_CTX(ssl)))
		return;
	for (link = &store->sessions; *link != NULL; link = &(*link)->next)
		if (strcmp((*link)->key, key) == 0 && (*link)->ctx == SSL_get_SSL_CTX(ssl))
			break;
	s = *link;
	if (s == NULL)
		return;
	if (s->ticket_count > 0) {
		size_t kept = 0;

		/* tickets past their lifetime are not offered: dropped */
		for (size_t i = 0; i < s->ticket_count; i++) {
			if (tls_ticket_expired(s->tickets[i], now))
				SSL_SESSION_free(s->tickets[i]);
			else
				s->tickets[kept++] = s->tickets[i];
		}
		s->ticket_count = kept;
	}
	if (s->shared != NULL && tls_shared_expired(s->shared, now)) {
		SSL_SESSION_free(s->shared);
		s->shared = NULL;
	}
	if (s->ticket_count > 0) {
		/* the newest ticket, the likeliest to be taken still, is this
		 * connection's alone: with none left the next does a full
		 * handshake */
		SSL_SESSION *ticket = s->tickets[--s->ticket_count];

		SSL_set_session(ssl, ticket);
		SSL_SESSION_free(ticket);
	} else if (s->shared != NULL) {
		SSL_SESSION *copy = SSL_SESSION_dup(s->shared);

		/* a copy again: this connection must not spoil the stored
		 * session for the next ones */
		if (copy != NULL) {
			SSL_set_session(ssl, copy);
			SSL_SESSION_free(copy);
		}
	}
	/* an upstream with nothing left to offer gives its place among those
	 * remembered to another; its next tickets bring it back */
	if (s->ticket_count == 0 && s->shared == NULL) {
		*link = s->next;
		tls_session_free(s);
		store->session_count--;
	}
}

size_t tls_store_sessions_kept(const struct tls_store *store)
{
	return store->session_count;
}

/* ALPN: http/1.1 when the client offers it, else http/1.0 (the proxy
 * speaks both). A client that offers only other protocols (h2 alone: a
 * gRPC client) gets the fatal
 * no_application_protocol alert, as RFC 7301 section 3.2 says: its
 * handshake fails naming the cause, and the proxy logs and counts it as
 * such, rather than the client hanging up later on a certificate it had
 * no quarrel with, or sending an HTTP/2 preface. A client that offers no
 * ALPN at all gets none. */
static int tls_select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			   const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char ours[] = "\x08http/1.1\x08http/1.0";
	unsigned char *selected;

	if (SSL_select_next_proto(&selected, outlen, ours, sizeof(ours) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	*out = selected;
	return SSL_TLSEXT_ERR_OK;
}

/* A ticket resumes only a session made under the same leaf: one context
 * serves every intercepted host, and without this a ticket from a tunnel
 * to one host would resume in a tunnel to another, whose certificate the
 * client was never shown, or, after a reload swapped the CA, skip the new
 * CA's leaf. The leaf's fingerprint (cached by OpenSSL) is the session id
 * context OpenSSL compares on resumption. */
static int tls_server_bind_sessions(SSL *ssl, X509 *cert)
{
	unsigned char id[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (X509_digest(cert, EVP_sha1(), id, &len) != 1 || len > SSL_MAX_SID_CTX_LENGTH)
		return -1;
	return SSL_set_session_id_context(ssl, id, len) == 1 ? 0 : -1;
}

SSL *tls_server_new(struct tls_store *store, X509 *cert, EVP_PKEY *key, STACK_OF(X509) * chain,
		    char *err, size_t err_len)
{
	SSL *ssl;

	if (store->server == NULL) {
		SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

		if (ctx == NULL) {
			tls_error_string(err, err_len, "cannot create a TLS server context");
			return NULL;
		}
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_alpn_select_cb(ctx, tls_select_alpn, NULL);
		/* a client that reconnects resumes with a ticket: no key
		 * exchange, no certificate sent again */
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
		/* a client that closes without close_notify has closed, not
		 * failed: its FIN is an EOF like any other */
		SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
						 SSL_OP_IGNORE_UNEXPECTED_EOF);
		store->server = ctx;
	}
	ssl = SSL_new(store->server);
	if (ssl == NULL || SSL_use_certificate(ssl, cert) != 1 ||
	    SSL_use_PrivateKey(ssl, key) != 1 ||
	    (chain != NULL && sk_X509_num(chain) > 0 && SSL_set1_chain(ssl, chain) != 1) ||
	    tls_server_bind_sessions(ssl, cert) < 0) {
		tls_error_string(err, err_len, "cannot set up the TLS server side");
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

bool tls_server_certificate_sent(const SSL *ssl)
{
	OSSL_HANDSHAKE_STATE state = SSL_get_state(ssl);

	/* until the whole ClientHello is read nothing has been sent; a
	 * resumed handshake sends no certificate: the client judged it in the
	 * handshake that made the session */
	return state != TLS_ST_BEFORE && state != TLS_ST_SR_CLNT_HELLO && !SSL_session_reused(ssl);
}

bool tls_failure_is_close(unsigned long ssl_error)
{
	/* nothing from OpenSSL: the socket said EOF or reset (SSL_ERROR_SYSCALL) */
	return ssl_error == 0 || (ERR_GET_LIB(ssl_error) == ERR_LIB_SSL &&
				  ERR_GET_REASON(ssl_error) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
}

bool tls_error_text(unsigned long ssl_error, char *buf, size_t len)
{
	if (ERR_GET_LIB(ssl_error) != ERR_LIB_SSL || tls_failure_is_close(ssl_error))
		return false;
	ERR_error_string_n(ssl_error, buf, len);
	return true;
}

bool tls_error_is_handshake_refusal(unsigned long ssl_error)
{
	if (ERR_GET_LIB(ssl_error) != ERR_LIB_SSL)
		return false;
	/* a received alert's reason is its description plus this offset */
	switch (ERR_GET_REASON(ssl_error) - SSL_AD_REASON_OFFSET) {
	case SSL_AD_HANDSHAKE_FAILURE:
	case SSL_AD_BAD_CERTIFICATE:
	case SSL_AD_UNSUPPORTED_CERTIFICATE:
	case SSL_AD_CERTIFICATE_REVOKED:
	case SSL_AD_CERTIFICATE_EXPIRED:
	case SSL_AD_CERTIFICATE_UNKNOWN:
	case SSL_AD_UNKNOWN_CA:
	case SSL_AD_ACCESS_DENIED:
	case SSL_AD_CERTIFICATE_REQUIRED:
		return true;
	default:
		return false;
	}
}

void tls_failure_reason(SSL *ssl, unsigned long ssl_error, bool *verify_failed, char *buf,
			size_t len)
{
	/* OpenSSL checks the chain with verification off too, and keeps its
	 * result: then it says nothing of why the handshake failed */
	long verify = ssl != NULL && SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE
			      ? SSL_get_verify_result(ssl)
			      : X509_V_OK;

	if (verify != X509_V_OK) {
		*verify_failed = true;
		snprintf(buf, len, "certificate verify failed: %s",
			 X509_verify_cert_error_string(verify));
		return;
	}
	*verify_failed = false;
	if (ssl_error != 0) {
		char detail[256];

		ERR_error_string_n(ssl_error, detail, sizeof(detail));
		snprintf(buf, len, "TLS handshake failed: %s", detail);
	} else {
		snprintf(buf, len, "TLS handshake failed");
	}
}
