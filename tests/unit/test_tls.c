/* Unit tests for tls.c: the server side of an intercepted tunnel, which
 * handshake failures are only a peer that went away, whether the client
 * could have seen the certificate, and the sessions kept for upstreams. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls.h"

/* A self-signed certificate for key. */
static X509 *self_signed(EVP_PKEY *key)
{
	X509 *x = X509_new();
	X509_NAME *name = X509_get_subject_name(x);

	assert_non_null(x);
	X509_set_version(x, X509_VERSION_3);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"test", -1, -1,
				   0);
	X509_set_issuer_name(x, name);
	X509_set_pubkey(x, key);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	return x;
}

/* The server side takes a client's FIN without close_notify as an EOF, not a
 * protocol error, refuses renegotiation and anything older than TLS 1.2. */
static void test_server_options(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char err[256] = "";
	SSL *ssl = tls_server_new(store, cert, key, NULL, err, sizeof(err));

	assert_non_null(ssl);
	assert_true(SSL_get_options(ssl) & SSL_OP_IGNORE_UNEXPECTED_EOF);
	assert_true(SSL_get_options(ssl) & SSL_OP_NO_RENEGOTIATION);
	assert_int_equal(SSL_get_min_proto_version(ssl), TLS1_2_VERSION);
	SSL_free(ssl);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* Join client and server by a pair of memory BIOs. */
static void tls_pair(SSL *client, SSL *server)
{
	BIO *c, *s;

	assert_int_equal(BIO_new_bio_pair(&c, 0, &s, 0), 1);
	SSL_set_bio(client, c, c);
	SSL_set_connect_state(client);
	SSL_set_bio(server, s, s);
	SSL_set_accept_state(server);
}

/* Run a paired handshake to its end, then let the client read what came
 * after it (the TLS 1.3 tickets). */
static void tls_handshake(SSL *client, SSL *server)
{
	int done = 0;
	char byte;

	for (int i = 0; i < 20 && done != 3; i++) {
		if (SSL_do_handshake(client) == 1)
			done |= 1;
		if (SSL_do_handshake(server) == 1)
			done |= 2;
	}
	assert_int_equal(done, 3);
	assert_int_equal(SSL_read(client, &byte, 1), -1);
	assert_int_equal(SSL_get_error(client, -1), SSL_ERROR_WANT_READ);
}

/* Until the whole ClientHello is in, the server has sent nothing the client
 * could judge; once it is, its certificate is on its way. */
static void test_certificate_sent(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char err[256] = "", hello[4096];
	SSL *server = tls_server_new(store, cert, key, NULL, err, sizeof(err));
	SSL_CTX *client_ctx = SSL_CTX_new(TLS_client_method());
	SSL *client = SSL_new(client_ctx);
	BIO *to_server = BIO_new(BIO_s_mem()), *to_client = BIO_new(BIO_s_mem());
	BIO *server_in = BIO_new(BIO_s_mem()), *server_out = BIO_new(BIO_s_mem());
	int hello_len;

	assert_non_null(server);
	SSL_set_bio(client, to_client, to_server);
	SSL_set_connect_state(client);
	SSL_set_bio(server, server_in, server_out);
	SSL_set_accept_state(server);
	assert_int_equal(SSL_do_handshake(client), -1);
	hello_len = BIO_read(to_server, hello, sizeof(hello));
	assert_true(hello_len > 30);
	assert_false(tls_server_certificate_sent(server));
	/* part of the ClientHello: still reading it */
	BIO_write(server_in, hello, 30);
	assert_int_equal(SSL_do_handshake(server), -1);
	assert_false(tls_server_certificate_sent(server));
	/* the rest: the server answers with its flight, certificate included */
	BIO_write(server_in, hello + 30, hello_len - 30);
	assert_int_equal(SSL_do_handshake(server), -1);
	assert_true(BIO_ctrl_pending(server_out) > 0);
	assert_true(tls_server_certificate_sent(server));
	ERR_clear_error();
	SSL_free(client);
	SSL_CTX_free(client_ctx);
	SSL_free(server);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* A resumed handshake sends no certificate: a client that hangs up in it
 * has refused none. */
static void test_certificate_not_sent_resumed(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char err[256] = "";
	SSL_CTX *client_ctx = SSL_CTX_new(TLS_client_method());
	SSL *client = SSL_new(client_ctx);
	SSL *server = tls_server_new(store, cert, key, NULL, err, sizeof(err));
	SSL_SESSION *session;

	tls_pair(client, server);
	tls_handshake(client, server);
	assert_false(SSL_session_reused(server));
	assert_true(tls_server_certificate_sent(server));
	/* a copy: freed without a close_notify, the client's own session is
	 * marked not resumable */
	session = SSL_SESSION_dup(SSL_get0_session(client));
	assert_non_null(session);
	SSL_free(client);
	SSL_free(server);
	client = SSL_new(client_ctx);
	server = tls_server_new(store, cert, key, NULL, err, sizeof(err));
	SSL_set_session(client, session);
	tls_pair(client, server);
	/* the ClientHello, then the server's flight: no certificate in it */
	assert_int_equal(SSL_do_handshake(client), -1);
	assert_int_equal(SSL_do_handshake(server), -1);
	assert_true(SSL_session_reused(server));
	assert_false(tls_server_certificate_sent(server));
	ERR_clear_error();
	SSL_SESSION_free(session);
	SSL_free(client);
	SSL_free(server);
	SSL_CTX_free(client_ctx);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* A handshake that ended with the peer's EOF or reset is a close; an alert or
 * bytes that are not TLS are failures. */
static void test_failure_is_close(void **state)
{
	assert_true(tls_failure_is_close(0));
	assert_true(
		tls_failure_is_close(ERR_PACK(ERR_LIB_SSL, 0, SSL_R_UNEXPECTED_EOF_WHILE_READING)));
	assert_false(tls_failure_is_close(ERR_PACK(ERR_LIB_SSL, 0, SSL_R_TLSV1_ALERT_UNKNOWN_CA)));
	assert_false(
		tls_failure_is_close(ERR_PACK(ERR_LIB_SSL, 0, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE)));
	assert_false(tls_failure_is_close(ERR_PACK(ERR_LIB_SSL, 0, SSL_R_HTTP_REQUEST)));
	assert_false(tls_failure_is_close(ERR_PACK(ERR_LIB_SSL, 0, SSL_R_WRONG_VERSION_NUMBER)));
}

/* Write cert as PEM to path, or the text when cert is NULL. */
static void write_ca_file(const char *path, X509 *cert, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	if (cert != NULL)
		assert_int_equal(PEM_write_X509(f, cert), 1);
	else
		fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* A CA file must hold a certificate to trust: one holding only a CRL would
 * start, pass --check, and then fail every handshake. */
static void test_ca_file_needs_certificate(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	X509_CRL *crl = X509_CRL_new();
	ASN1_TIME *now, *later;
	char path[] = "/tmp/test_tls_crl.XXXXXX";
	struct tls_policy policy = { path, true };
	char err[256] = "";
	int fd = mkstemp(path);
	FILE *f;

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	assert_non_null(crl);
	X509_CRL_set_version(crl, X509_CRL_VERSION_2);
	X509_CRL_set_issuer_name(crl, X509_get_subject_name(cert));
	now = X509_gmtime_adj(NULL, 0);
	later = X509_gmtime_adj(NULL, 3600);
	X509_CRL_set1_lastUpdate(crl, now);
	X509_CRL_set1_nextUpdate(crl, later);
	ASN1_TIME_free(now);
	ASN1_TIME_free(later);
	assert_true(X509_CRL_sign(crl, key, EVP_sha256()) > 0);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509_CRL(f, crl), 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cannot load CA file"));
	/* a certificate beside the CRL is what the file is for */
	f = fopen(path, "a");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, cert), 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	unlink(path);
	X509_CRL_free(crl);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* A reload reads CA files again; one that fails keeps the contexts that
 * ran, built from the file as it was (not again from the broken one). */
static void test_reload_contexts(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char path[] = "/tmp/test_tls_ca.XXXXXX";
	struct tls_policy policy = { path, true };
	char err[256] = "";
	SSL *ssl, *made;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	write_ca_file(path, cert, NULL);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	/* the same bytes: a reload takes the running context over, one not
	 * applied gives it back, one applied keeps it current */
	made = tls_client_new(store, &policy, "example.com", "k", err, sizeof(err));
	assert_non_null(made);
	tls_store_reload_begin(store);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	tls_store_reload_end(store, false);
	assert_true(tls_store_current(store, made));
	tls_store_reload_begin(store);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	tls_store_reload_end(store, true);
	assert_true(tls_store_current(store, made));
	/* the file breaks; a reload finds out and is not applied */
	write_ca_file(path, NULL, "not a certificate\n");
	tls_store_reload_begin(store);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cannot load CA file"));
	tls_store_reload_end(store, false);
	ssl = tls_client_new(store, &policy, "example.com", "k", err, sizeof(err));
	assert_non_null(ssl);
	assert_true(SSL_get_SSL_CTX(ssl) == SSL_get_SSL_CTX(made));
	SSL_free(ssl);
	/* an applied reload reads the file as it is now */
	tls_store_reload_begin(store);
	tls_store_reload_end(store, true);
	assert_false(tls_store_current(store, made));
	assert_null(tls_client_new(store, &policy, "example.com", "k", err, sizeof(err)));
	assert_non_null(strstr(err, "cannot load CA file"));
	SSL_free(made);
	unlink(path);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* How many of n new connections to upstream "k" got a session to offer
 * when their handshakes began (each checked against the others: never the
 * same one twice). */
static int tls_sessions_offered(struct tls_store *store, const struct tls_policy *policy, int n)
{
	SSL *ssl[8];
	int offered = 0;
	char err[256];

	assert_true(n <= 8);
	for (int i = 0; i < n; i++) {
		ssl[i] = tls_client_new(store, policy, "localhost", "k", err, sizeof(err));
		assert_non_null(ssl[i]);
		assert_null(SSL_get0_session(ssl[i]));
		tls_client_begin(ssl[i]);
		if (SSL_get0_session(ssl[i]) != NULL)
			offered++;
	}
	for (int i = 0; i < n; i++)
		SSL_free(ssl[i]);
	return offered;
}

/* The lifetime the server gives the tickets it sends (see
 * tls_upstream_handshake). */
static long server_ticket_lifetime;

static int server_lifetime_cb(SSL *ssl, void *arg)
{
	return SSL_SESSION_set_timeout(SSL_get_session(ssl), server_ticket_lifetime);
}

/* A full handshake of a new connection to upstream "k", at most
 * max_version, with a server whose tickets have lifetime seconds to live
 * (-1: OpenSSL's default). */
static void tls_upstream_handshake(struct tls_store *store, const struct tls_policy *policy,
				   X509 *cert, EVP_PKEY *key, int max_version, long lifetime)
{
	char err[256] = "";
	SSL *client = tls_client_new(store, policy, "localhost", "k", err, sizeof(err));
	SSL *server = tls_server_new(store, cert, key, NULL, err, sizeof(err));

	assert_non_null(client);
	assert_non_null(server);
	SSL_set_max_proto_version(client, max_version);
	if (lifetime >= 0) {
		server_ticket_lifetime = lifetime;
		SSL_CTX_set_session_ticket_cb(SSL_get_SSL_CTX(server), server_lifetime_cb, NULL,
					      NULL);
	}
	tls_pair(client, server);
	tls_handshake(client, server);
	assert_false(SSL_session_reused(client));
	SSL_free(client);
	SSL_free(server);
}

/* A TLS 1.3 ticket is handed to one new connection only (RFC 8446
 * appendix C.4), when its handshake begins, at most 4 kept; a TLS 1.2
 * session to every one; a reload forgets them when the trust changed. */
static void test_client_tickets(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char path[] = "/tmp/test_tls_ca.XXXXXX";
	struct tls_policy policy = { path, false };
	char err[256] = "";
	int fd = mkstemp(path);
	FILE *f;

	assert_true(fd >= 0);
	close(fd);
	write_ca_file(path, cert, NULL);
	assert_int_equal(tls_sessions_offered(store, &policy, 1), 0);
	/* OpenSSL's server sends 2 tickets after a full handshake */
	tls_upstream_handshake(store, &policy, cert, key, TLS1_3_VERSION, -1);
	assert_int_equal(tls_store_sessions_kept(store), 1);
	/* connections whose handshakes never began (a connect refused, or
	 * another address's attempt won) take none */
	for (int i = 0; i < 3; i++)
		SSL_free(tls_client_new(store, &policy, "localhost", "k", err, sizeof(err)));
	assert_int_equal(tls_sessions_offered(store, &policy, 3), 2);
	/* with its last ticket taken the upstream keeps no place */
	assert_int_equal(tls_store_sessions_kept(store), 0);
	assert_int_equal(tls_sessions_offered(store, &policy, 1), 0);
	for (int i = 0; i < 3; i++)
		tls_upstream_handshake(store, &policy, cert, key, TLS1_3_VERSION, -1);
	assert_int_equal(tls_sessions_offered(store, &policy, 6), 4);
	/* TLS 1.2: one session, offered by each */
	tls_upstream_handshake(store, &policy, cert, key, TLS1_2_VERSION, -1);
	assert_int_equal(tls_sessions_offered(store, &policy, 3), 3);
	/* a reload that finds the CA file's bytes as they were keeps it */
	tls_store_reload_begin(store);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	tls_store_reload_end(store, true);
	assert_int_equal(tls_sessions_offered(store, &policy, 2), 2);
	/* one that finds new bytes (the same certificate, a comment added)
	 * forgets it: it was verified under the trust before */
	write_ca_file(path, cert, NULL);
	f = fopen(path, "a");
	assert_non_null(f);
	fputs("# rotated\n", f);
	assert_int_equal(fclose(f), 0);
	tls_store_reload_begin(store);
	assert_int_equal(tls_store_prepare(store, &policy, err, sizeof(err)), 0);
	tls_store_reload_end(store, true);
	assert_int_equal(tls_sessions_offered(store, &policy, 1), 0);
	assert_int_equal(tls_store_sessions_kept(store), 0);
	ERR_clear_error();
	unlink(path);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

/* A TLS 1.3 ticket past its lifetime is not offered (RFC 8446 section
 * 4.6.1), though OpenSSL, which counts ages in whole seconds, would still
 * send it for a second more. (A lifetime of 0, to be discarded at once, is
 * the same rule; OpenSSL's server cannot send one.) Nor is a TLS 1.2
 * session past its ticket's lifetime hint (RFC 5077 section 3.3), and the
 * upstream left with nothing keeps no place. */
static void test_client_ticket_lifetime(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char path[] = "/tmp/test_tls_ca.XXXXXX";
	struct tls_policy policy = { path, false };
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	write_ca_file(path, cert, NULL);
	tls_upstream_handshake(store, &policy, cert, key, TLS1_3_VERSION, 1);
	sleep(2);
	assert_int_equal(tls_sessions_offered(store, &policy, 2), 0);
	assert_int_equal(tls_store_sessions_kept(store), 0);
	tls_upstream_handshake(store, &policy, cert, key, TLS1_2_VERSION, 1);
	assert_int_equal(tls_sessions_offered(store, &policy, 2), 2);
	sleep(2);
	assert_int_equal(tls_sessions_offered(store, &policy, 2), 0);
	assert_int_equal(tls_store_sessions_kept(store), 0);
	ERR_clear_error();
	unlink(path);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

static int accept_any(int ok, X509_STORE_CTX *ctx)
{
	return 1;
}

/* Only a full TLS 1.3 handshake whose server asked for a client
 * certificate may still be refused after the client's side ended. */
static void test_client_may_be_refused(void **state)
{
	struct tls_store *store = tls_store_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = self_signed(key);
	char path[] = "/tmp/test_tls_ca.XXXXXX";
	struct tls_policy policy = { path, false };
	char err[256] = "";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	write_ca_file(path, cert, NULL);
	for (int asks = 0; asks < 2; asks++) {
		for (int version = TLS1_2_VERSION; version <= TLS1_3_VERSION; version++) {
			SSL *client =
				tls_client_new(store, &policy, "localhost", "k", err, sizeof(err));
			SSL *server = tls_server_new(store, cert, key, NULL, err, sizeof(err));

			if (asks)
				SSL_set_verify(server, SSL_VERIFY_PEER, accept_any);
			SSL_set_max_proto_version(client, version);
			tls_pair(client, server);
			tls_handshake(client, server);
			assert_int_equal(tls_client_may_be_refused(client),
					 asks && version == TLS1_3_VERSION);
			SSL_free(client);
			SSL_free(server);
		}
	}
	ERR_clear_error();
	unlink(path);
	X509_free(cert);
	EVP_PKEY_free(key);
	tls_store_free(store);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_server_options),
		cmocka_unit_test(test_failure_is_close),
		cmocka_unit_test(test_certificate_sent),
		cmocka_unit_test(test_certificate_not_sent_resumed),
		cmocka_unit_test(test_reload_contexts),
		cmocka_unit_test(test_ca_file_needs_certificate),
		cmocka_unit_test(test_client_tickets),
		cmocka_unit_test(test_client_ticket_lifetime),
		cmocka_unit_test(test_client_may_be_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
