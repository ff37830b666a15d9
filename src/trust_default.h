#ifndef RETRYPROXY_TRUST_DEFAULT_H
#define RETRYPROXY_TRUST_DEFAULT_H

#include <stddef.h>

#include <openssl/x509.h>

/* OpenSSL's default trust store (SSL_CERT_FILE and SSL_CERT_DIR, or the
 * built-in paths), read again only when one of its files or directories
 * changed: reading it parses every CA of the system bundle, tens of
 * milliseconds in which the event loop would stand still at each reload. */
struct trust_default;

struct trust_default *trust_default_new(void);
void trust_default_free(struct trust_default *trust);

/* The store as its files are now: the one read before when nothing changed
 * (size, modification time, device and inode of each path), else read
 * again. Borrowed: a context keeps it with SSL_CTX_set1_cert_store(). NULL
 * with a reason in err when it cannot be read. */
X509_STORE *trust_default_get(struct trust_default *trust, char *err, size_t err_len);

#endif
