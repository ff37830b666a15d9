#ifndef RETRYPROXY_TLS_H
#define RETRYPROXY_TLS_H

/*
 * TLS origination: one SSL_CTX per trust policy (CA file, verify on/off),
 * client sessions kept per upstream for resumption, and plain-words reasons
 * for handshake failures.
 */

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

#include "config.h"

struct tls_store;

struct tls_store *tls_store_new(void);
void tls_store_free(struct tls_store *store);

/* A reload: contexts are built again from their CA files as the new
 * config prepares them (a file's content may have changed), while the
 * running ones stay until the reload ends. Applied, the old contexts go
 * (connections made with them keep them: OpenSSL counts references) and
 * so do the saved sessions, verified under the old trust; not applied,
 * the new ones go and nothing changed. */
void tls_store_reload_begin(struct tls_store *store);
void tls_store_reload_end(struct tls_store *store, bool applied);

/* Was ssl made with a context of the running trust (not one a reload has
 * replaced since)? */
bool tls_store_current(const struct tls_store *store, const SSL *ssl);

/* Make sure a policy's context can be built (CA file loads). Returns 0, or -1
 * with a reason in err. */
int tls_store_prepare(struct tls_store *store, const struct tls_policy *policy, char *err,
		      size_t err_len);

/* A new client SSL for host under policy: SNI (for names, not IP literals),
 * host name or IP verification, ALPN http/1.1; session_key names the
 * upstream whose saved sessions it may offer once its handshake begins
 * (tls_client_begin). NULL with a reason in err. */
SSL *tls_client_new(struct tls_store *store, const struct tls_policy *policy, const char *host,
		    const char *session_key, char *err, size_t err_len);

/* A client SSL from tls_client_new is about to send its ClientHello (its
 * TCP connection is made): it takes the saved session for its upstream
 * when there is one, a TLS 1.3 ticket out of the store (offered by this
 * connection only), a TLS 1.2 session as a copy; none past its lifetime.
 * An SSL that never gets
 * here (its connect refused, or dropped for another address's) used up
 * nothing. Does nothing for an SSL made otherwise. */
void tls_client_begin(SSL *ssl);

/* How many upstreams have a session or ticket kept to offer (at most
 * 1,024): one whose last ticket was taken or whose session expired is not
 * counted, nor kept. */
size_t tls_store_sessions_kept(const struct tls_store *store);

/* A server SSL for an intercepted tunnel, presenting cert and key (the
 * leaf made for the CONNECT host) with chain behind it (may be NULL): TLS 1.2 or newer, ALPN http/1.1 only,
 * session tickets for resumption, a close without close_notify taken as an
 * EOF. NULL with a reason in err. */
SSL *tls_server_new(struct tls_store *store, X509 *cert, EVP_PKEY *key, STACK_OF(X509) * chain,
		    char *err, size_t err_len);

/* Did a handshake end only because the peer closed or reset the connection
 * (ssl_error as conn_tls_error gives it: none, or an unexpected EOF), rather
 * than by anything said over TLS (an alert such as bad_certificate, bytes
 * that are not TLS, no common version or cipher)? */
bool tls_failure_is_close(unsigned long ssl_error);

/* Has the server side of a handshake sent its certificate (the client
 * could have judged it), whether or not the handshake went on? Never in a
 * resumed handshake. */
bool tls_server_certificate_sent(const SSL *ssl);

/* A TLS error that ended a connection after its handshake (an alert from
 * the peer, a record that does not decrypt), in words: false when
 * ssl_error (as conn_tls_error gives it) names none: 0, a socket's error,
 * or a close without close_notify. */
bool tls_error_text(unsigned long ssl_error, char *buf, size_t len);

/* May the server of a client SSL whose handshake is done still refuse it?
 * In TLS 1.3, one that asked for a client certificate (the proxy sends
 * none) judges the client's side only after the client's handshake has
 * ended: its refusal, if any, comes with the first read. Never in a
 * resumed handshake, in which a TLS 1.3 server asks for no certificate. */
bool tls_client_may_be_refused(const SSL *ssl);

/* Is ssl_error a fatal alert by which the peer refused the handshake
 * (handshake_failure, a certificate alert, access_denied,
 * certificate_required)? In TLS 1.3 a server judges the client's side of
 * the handshake only after the client's side has ended, so its refusal is
 * read where the response should be: the request never reached the
 * application, as when the handshake fails outright. */
bool tls_error_is_handshake_refusal(unsigned long ssl_error);

/* Why a handshake failed: the certificate verification result when that was
 * the cause (*verify_failed set), else OpenSSL's error queue. */
void tls_failure_reason(SSL *ssl, unsigned long ssl_error, bool *verify_failed, char *buf,
			size_t len);

#endif
