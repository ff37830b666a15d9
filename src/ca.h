#ifndef RETRYPROXY_CA_H
#define RETRYPROXY_CA_H

/*
 * The local certificate authority of HTTPS interception (SPEC "HTTPS
 * interception"): made once by `retryproxy --make-ca DIR`, loaded with the
 * config, and issuing on first use a leaf certificate for each intercepted
 * host, kept in a bounded cache. The CA key is read once and stays in this
 * process's memory: nothing here logs, returns or writes it after ca_make.
 */

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

struct ca; /* a loaded local CA, and the leaf certificates it issued (cached) */

#define CA_LEAF_CACHE 1024 /* leaves kept per CA, least recently used dropped */
#define CA_LEAF_DAYS 30	   /* a leaf's validity */

/* Create dir (0755, if missing) with ca.pem (certificate, mode 0644) and
 * ca-key.pem (EC P-256 private key, PEM, mode 0600): self-signed, X.509 v3,
 * basicConstraints critical CA:TRUE, keyUsage critical keyCertSign and cRLSign,
 * subjectKeyIdentifier, subject O=retryproxy, CN=retryproxy local CA (<hostname>),
 * valid 10 years from now (backdated one hour for clock skew), random 128-bit
 * serial. Refuses, changing nothing, when either file exists (O_EXCL). Returns
 * 0, or -1 with a reason in err. */
int ca_make(const char *dir, char *err, size_t err_len);

enum ca_load_failure {
	CA_LOAD_OK,   /* loaded */
	CA_LOAD_CERT, /* the certificate file is to blame */
	CA_LOAD_KEY,  /* the key file is to blame */
};

/* Load a CA from its certificate and key files. Refuses: a certificate that does
 * not load or is not a CA (basicConstraints CA:TRUE, keyUsage keyCertSign when
 * keyUsage is present), or is expired or not yet valid now (the reason names
 * the file and the date); a key file readable by group or others (checked with
 * stat before reading it: "readable by group or others (mode 0644): chmod 600
 * it"); a key that does not load; a key that does not match the certificate.
 * Returns NULL with a reason in err, and *failure says which file to blame. The
 * key is read once and kept in memory only; nothing logs or returns it. Before
 * reading it the process is made non-dumpable for good (prctl
 * PR_SET_DUMPABLE 0): no core dump holds the key, and no process of the same
 * user can read it with ptrace or /proc/PID/mem. */
struct ca *ca_load(const char *cert_path, const char *key_path, enum ca_load_failure *failure,
		   char *err, size_t err_len);

/* Reference counted: configs hold it. */
struct ca *ca_hold(struct ca *ca);
void ca_release(struct ca *ca);

/* Can a leaf name host (an address literal, or a DNS name of valid
 * labels whose last is not all digits)? ca_leaf() fails for one that
 * cannot, as a client's mistake, not the CA's. */
bool ca_host_valid(const char *host, size_t host_len);

/* The leaf certificate and key for host (a DNS name, or an IPv4/IPv6 literal
 * without brackets), made on first use and cached. Every leaf of a loaded CA
 * has the same EC P-256 key pair, made by ca_load (so once per start or
 * reload): a new host costs one signature, not a key generation. X.509 v3,
 * signed by the CA with SHA-256, subjectAltName DNS:host or IP:host (CN =
 * host too), keyUsage digitalSignature, extendedKeyUsage serverAuth,
 * authorityKeyIdentifier, valid from one hour ago for CA_LEAF_DAYS days, and
 * always within the CA's own validity (never before its notBefore nor past its
 * notAfter); a cached leaf with less than a third of its validity left at now
 * is replaced, unless it ends with the CA (a new one could not last longer).
 * Hosts compare case-insensitively. Returns 0 with borrowed pointers valid
 * until the next ca_leaf() call on this CA or its release (callers take their
 * own reference, e.g. SSL_use_certificate), or -1 with a reason. */
int ca_leaf(struct ca *ca, const char *host, size_t host_len, time_t now, X509 **cert,
	    EVP_PKEY **key, char *err, size_t err_len);

/* Can the CA issue a leaf at now: not expired, and now not before its
 * validity (the clock went back)? -1 with the reason ca_leaf() would give. */
int ca_usable(const struct ca *ca, time_t now, char *err, size_t err_len);

/* Leaves made so far (a test checks that a host's second request makes none). */
unsigned long ca_leaves_made(const struct ca *ca);

/* The certificates each leaf is sent with: the CA when it is not a root,
 * and the ca_cert file's further certificates that are not roots (an
 * intermediate's issuers); empty for a root CA alone. Borrowed. */
STACK_OF(X509) * ca_chain(const struct ca *ca);

#endif
