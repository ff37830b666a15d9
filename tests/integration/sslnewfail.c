/* Preloaded into the proxy by test_tls_handshake_failures.py: while the file
 * named by RETRYPROXY_SSLNEWFAIL_FILE exists, SSL_new fails as it does when
 * the proxy is out of memory, so a TLS connection cannot be set up for
 * reasons of the proxy's own. */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/ssl.h>

typedef SSL *ssl_new_fn(SSL_CTX *);

SSL *SSL_new(SSL_CTX *ctx)
{
	static ssl_new_fn *real;
	const char *file = getenv("RETRYPROXY_SSLNEWFAIL_FILE");

	if (file != NULL && access(file, F_OK) == 0)
		return NULL;
	if (real == NULL)
		real = (ssl_new_fn *)dlsym(RTLD_NEXT, "SSL_new");
	return real(ctx);
}
