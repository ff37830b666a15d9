/* Unit tests for tls.c: the server side of an intercepted tunnel, and which
 * handshake failures are only a peer that went away. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/evp.h>
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
	SSL *ssl = tls_server_new(store, cert, key, err, sizeof(err));

	assert_non_null(ssl);
	assert_true(SSL_get_options(ssl) & SSL_OP_IGNORE_UNEXPECTED_EOF);
	assert_true(SSL_get_options(ssl) & SSL_OP_NO_RENEGOTIATION);
	assert_int_equal(SSL_get_min_proto_version(ssl), TLS1_2_VERSION);
	SSL_free(ssl);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_server_options),
		cmocka_unit_test(test_failure_is_close),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
