#include "ca.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "hash.h"
#include "xmalloc.h"

/*
 * Leaves are cached by host in a hash table whose entries also sit on a list
 * from most to least recently used; past CA_LEAF_CACHE the tail goes. Every
 * OpenSSL failure here clears the error queue before returning, so that the
 * TLS code reading the queue after its own calls never sees ours.
 */

#define CA_BUCKETS 2048		  /* a power of two above CA_LEAF_CACHE */
#define CA_HOST_MAX 253		  /* the longest DNS name */
#define CA_FILE_MAX (1024 * 1024) /* a PEM file larger than this is not ours */
#define CA_BACKDATE 3600	  /* seconds before now a certificate starts */
#define CA_YEARS 10		  /* the CA's validity */

struct ca_entry {
	char *host; /* canonical: lower case name, or the address as inet_ntop writes it */
	X509 *cert;
	time_t not_before;
	time_t not_after;
	struct ca_entry *hash_next;
	struct ca_entry *newer; /* towards the most recently used */
	struct ca_entry *older; /* towards the least recently used */
};

struct ca {
	unsigned refs;
	X509 *cert;
	STACK_OF(X509) * chain; /* sent with each leaf (ca_load_cert()) */
	EVP_PKEY *key;		/* the CA's private key; only ever used to sign */
	EVP_PKEY *leaf_key;	/* the key pair of every leaf, made at load */
	time_t not_before;	/* no leaf starts before the CA */
	time_t not_after;	/* no leaf outlives the CA */
	struct ca_entry *buckets[CA_BUCKETS];
	struct ca_entry *newest;
	struct ca_entry *oldest;
	size_t count;
	unsigned long leaves_made;
};

/* Write a reason into err, if the caller gave room for one. */
static void ca_error(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void ca_error(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || err_len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

/* The reason OpenSSL queued last, or fallback, and an empty queue after. */
static const char *ca_openssl_reason(char *buf, size_t size, const char *fallback)
{
	unsigned long e = ERR_peek_last_error();
	const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

	snprintf(buf, size, "%s", reason != NULL ? reason : fallback);
	ERR_clear_error();
	return buf;
}

/* A password callback that never asks: an encrypted key fails to load
 * instead of prompting on the terminal of a daemon. */
static int ca_no_password(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

/* A positive random serial number of 128 bits or fewer. */
static int ca_set_serial(X509 *x)
{
	unsigned char bytes[16];
	BIGNUM *bn;
	int ok;

	if (RAND_bytes(bytes, sizeof(bytes)) != 1)
		return -1;
	/* DER integers are signed: a clear top bit keeps it positive in 16
	 * bytes, and a set second bit keeps it from being zero or short. */
	bytes[0] = (unsigned char)((bytes[0] & 0x7f) | 0x40);
	bn = BN_bin2bn(bytes, sizeof(bytes), NULL);
	ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -1;
}

/* Version 3, a random serial, the validity and the public key. */
static int ca_cert_start(X509 *x, EVP_PKEY *key, time_t not_before, time_t not_after)
{
	if (X509_set_version(x, X509_VERSION_3) != 1 || ca_set_serial(x) < 0)
		return -1;
	if (ASN1_TIME_set(X509_getm_notBefore(x), not_before) == NULL ||
	    ASN1_TIME_set(X509_getm_notAfter(x), not_after) == NULL)
		return -1;
	return X509_set_pubkey(x, key) == 1 ? 0 : -1;
}

/* Add one extension written as in openssl.cnf ("critical,CA:TRUE"). */
static int ca_add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	if (ext == NULL)
		return -1;
	ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -1;
}

/* The digest to sign with: SHA-256, or none for keys that hash themselves. */
static const EVP_MD *ca_digest(EVP_PKEY *key)
{
	if (EVP_PKEY_is_a(key, "ED25519") || EVP_PKEY_is_a(key, "ED448"))
		return NULL;
	return EVP_sha256();
}

/* "retryproxy local CA (host)", cut to the 64 characters a CN may have, with
 * anything but printable ASCII in the host name replaced. */
static void ca_common_name(char *cn, size_t size)
{
	static const char prefix[] = "retryproxy local CA (";
	char host[256];
	size_t room = 64 - (sizeof(prefix) - 1) - 1;

	if (gethostname(host, sizeof(host)) < 0 || host[0] == '\0')
		snprintf(host, sizeof(host), "unknown host");
	host[sizeof(host) - 1] = '\0';
	for (char *p = host; *p != '\0'; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	if (strlen(host) > room)
		host[room] = '\0';
	snprintf(cn, size, "%s%s)", prefix, host);
}

/* The self-signed CA certificate for key. */
static X509 *ca_make_cert(EVP_PKEY *key, time_t now)
{
	X509 *x = X509_new();
	X509_NAME *name = X509_NAME_new();
	struct tm tm;
	time_t not_after;
	char cn[80];

	/* Ten calendar years, as a person would count them. */
	gmtime_r(&now, &tm);
	tm.tm_year += CA_YEARS;
	not_after = timegm(&tm);
	ca_common_name(cn, sizeof(cn));
	if (x == NULL || name == NULL || ca_cert_start(x, key, now - CA_BACKDATE, not_after) < 0)
		goto fail;
	if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
				       (const unsigned char *)"retryproxy", -1, -1, 0) != 1 ||
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
				       0) != 1 ||
	    X509_set_subject_name(x, name) != 1 || X509_set_issuer_name(x, name) != 1)
		goto fail;
	/* The key identifiers let verifiers (OpenSSL's strict mode, Python
	 * 3.13's default) chain leaves to this certificate. */
	if (ca_add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") < 0 ||
	    ca_add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
	    ca_add_ext(x, x, NID_subject_key_identifier, "hash") < 0 ||
	    ca_add_ext(x, x, NID_authority_key_identifier, "keyid:always") < 0)
		goto fail;
	if (X509_sign(x, key, ca_digest(key)) <= 0)
		goto fail;
	X509_NAME_free(name);
	return x;
fail:
	X509_NAME_free(name);
	X509_free(x);
	return NULL;
}

/* dir/name, allocated. */
static char *ca_path(const char *dir, const char *name)
{
	size_t size = strlen(dir) + strlen(name) + 2;
	char *path = xmalloc(size);

	snprintf(path, size, "%s%s%s", dir,
		 dir[0] != '\0' && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
	return path;
}

/* mkdir -p, each new directory 0755. */
static int ca_mkdirs(const char *dir, char *err, size_t err_len)
{
	char *path = xstrdup(dir);
	struct stat st;

	for (char *p = path + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			ca_error(err, err_len, "cannot create directory %s: %s", path,
				 strerror(errno));
			free(path);
			return -1;
		}
		*p = '/';
	}
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		ca_error(err, err_len, "cannot create directory %s: %s", path, strerror(errno));
		free(path);
		return -1;
	}
	free(path);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		ca_error(err, err_len, "%s is not a directory", dir);
		return -1;
	}
	return 0;
}

/* Create path (never replacing a file) with exactly mode, holding the PEM in
 * bio. */
static int ca_write_new(const char *path, mode_t mode, BIO *bio, char *err, size_t err_len)
{
	char *data;
	long len = BIO_get_mem_data(bio, &data);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	size_t done = 0;

	if (fd < 0) {
		ca_error(err, err_len,
			 errno == EEXIST ? "%s already exists; not overwriting it"
					 : "cannot create %s: %s",
			 path, strerror(errno));
		return -1;
	}
	/* The umask may have taken bits away; the modes are part of the
	 * contract (0600 for the key, 0644 for what clients are given). */
	if (fchmod(fd, mode) < 0)
		goto fail;
	while (len > 0 && done < (size_t)len) {
		ssize_t n = write(fd, data + done, (size_t)len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		done += (size_t)n;
	}
	if (fsync(fd) < 0)
		goto fail;
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	return 0;
fail:
	ca_error(err, err_len, "cannot write %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(path);
	return -1;
}

/* Whether path exists; an error (other than not existing) counts as yes,
 * with the reason in err, since nothing should be written then. */
static bool ca_exists(const char *path, char *err, size_t err_len)
{
	struct stat st;

	if (lstat(path, &st) == 0) {
		ca_error(err, err_len, "%s already exists; not overwriting it", path);
		return true;
	}
	if (errno != ENOENT) {
		ca_error(err, err_len, "cannot check %s: %s", path, strerror(errno));
		return true;
	}
	return false;
}

/* Make the key and the self-signed certificate, then write both files new. */
int ca_make(const char *dir, char *err, size_t err_len)
{
	char *cert_path = ca_path(dir, "ca.pem"), *key_path = ca_path(dir, "ca-key.pem");
	EVP_PKEY *key = NULL;
	X509 *cert = NULL;
	BIO *cert_pem = BIO_new(BIO_s_mem()), *key_pem = BIO_new(BIO_s_mem());
	char reason[256];
	int rc = -1;

	if (cert_pem == NULL || key_pem == NULL) {
		ca_error(err, err_len, "out of memory");
		goto done;
	}
	if (dir[0] == '\0') {
		ca_error(err, err_len, "no directory named");
		goto done;
	}
	/* Look before making the directory, so that a refusal changes
	 * nothing; O_EXCL below closes the race. */
	if (ca_exists(cert_path, err, err_len) || ca_exists(key_path, err, err_len))
		goto done;
	key = EVP_EC_gen("P-256");
	if (key == NULL) {
		ca_error(err, err_len, "cannot make an EC P-256 key: %s",
			 ca_openssl_reason(reason, sizeof(reason), "unknown error"));
		goto done;
	}
	cert = ca_make_cert(key, time(NULL));
	if (cert == NULL) {
		ca_error(err, err_len, "cannot make the CA certificate: %s",
			 ca_openssl_reason(reason, sizeof(reason), "unknown error"));
		goto done;
	}
	if (PEM_write_bio_X509(cert_pem, cert) != 1 ||
	    PEM_write_bio_PrivateKey(key_pem, key, NULL, NULL, 0, NULL, NULL) != 1) {
		ca_error(err, err_len, "cannot encode the CA as PEM: %s",
			 ca_openssl_reason(reason, sizeof(reason), "unknown error"));
		goto done;
	}
	if (ca_mkdirs(dir, err, err_len) < 0)
		goto done;
	if (ca_write_new(key_path, 0600, key_pem, err, err_len) < 0)
		goto done;
	if (ca_write_new(cert_path, 0644, cert_pem, err, err_len) < 0) {
		/* ours, made a moment ago: a key without its certificate is
		 * of no use and would block the next --make-ca */
		unlink(key_path);
		goto done;
	}
	rc = 0;
done:
	if (key_pem != NULL) {
		char *data;
		long len = BIO_get_mem_data(key_pem, &data);

		if (len > 0)
			OPENSSL_cleanse(data, (size_t)len);
	}
	BIO_free(key_pem);
	BIO_free(cert_pem);
	X509_free(cert);
	EVP_PKEY_free(key);
	free(cert_path);
	free(key_path);
	ERR_clear_error();
	return rc;
}

/* The whole of a small regular file, already open, into *data. */
static int ca_read_fd(int fd, const struct stat *st, char **data, size_t *len, char *err,
		      size_t err_len)
{
	char *buf;
	size_t done = 0;

	if (!S_ISREG(st->st_mode)) {
		ca_error(err, err_len, "not a regular file");
		return -1;
	}
	if (st->st_size > CA_FILE_MAX) {
		ca_error(err, err_len, "too large for a PEM file (%lld bytes)",
			 (long long)st->st_size);
		return -1;
	}
	buf = xmalloc((size_t)st->st_size + 1);
	while (done < (size_t)st->st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st->st_size - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ca_error(err, err_len, "cannot read: %s", strerror(errno));
			OPENSSL_cleanse(buf, done);
			free(buf);
			return -1;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	buf[done] = '\0';
	*data = buf;
	*len = done;
	return 0;
}

/* Open path for reading, or -1 with the reason in err. */
static int ca_open(const char *path, struct stat *st, char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		ca_error(err, err_len, "cannot read: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, st) < 0) {
		ca_error(err, err_len, "cannot read: %s", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Is x issued by itself (a root: the client's trust anchor, never sent)? */
static bool ca_self_issued(X509 *x)
{
	return X509_check_issued(x, x) == X509_V_OK;
}

/* The first certificate in a PEM file; in *chain (made, perhaps empty) the
 * certificates a leaf it signs is sent with so that clients that trust
 * only a root can build the path: the CA itself unless it is a root, then
 * the file's further certificates that are not roots. */
static X509 *ca_load_cert(const char *path, STACK_OF(X509) * *chain, char *err, size_t err_len)
{
	struct stat st;
	int fd = ca_open(path, &st, err, err_len);
	char *data;
	size_t len;
	BIO *bio;
	X509 *x, *more;

	if (fd < 0)
		return NULL;
	if (ca_read_fd(fd, &st, &data, &len, err, err_len) < 0) {
		close(fd);
		return NULL;
	}
	close(fd);
	bio = BIO_new_mem_buf(data, (int)len);
	x = bio != NULL ? PEM_read_bio_X509(bio, NULL, ca_no_password, NULL) : NULL;
	*chain = sk_X509_new_null();
	if (x != NULL && !ca_self_issued(x) && X509_up_ref(x) == 1)
		sk_X509_push(*chain, x);
	while (x != NULL && (more = PEM_read_bio_X509(bio, NULL, ca_no_password, NULL)) != NULL) {
		if (ca_self_issued(more))
			X509_free(more);
		else
			sk_X509_push(*chain, more);
	}
	BIO_free(bio);
	free(data);
	ERR_clear_error();
	if (x == NULL) {
		ca_error(err, err_len, "not a PEM certificate");
		sk_X509_pop_free(*chain, X509_free);
		*chain = NULL;
	}
	return x;
}

/* Why cert cannot be a CA, or NULL when it can. */
static const char *ca_not_a_ca(X509 *cert)
{
	uint32_t flags = X509_get_extension_flags(cert);

	if (flags & EXFLAG_INVALID)
		return "the certificate has invalid extensions";
	if (!(flags & EXFLAG_CA))
		return "not a CA certificate (basicConstraints CA:TRUE is missing)";
	if ((flags & EXFLAG_KUSAGE) && !(X509_get_key_usage(cert) & KU_KEY_CERT_SIGN))
		return "not a CA certificate (keyUsage lacks keyCertSign)";
	return NULL;
}

/* The private key in a PEM file only its owner may read. */
static EVP_PKEY *ca_load_key(const char *path, char *err, size_t err_len)
{
	struct stat st;
	int fd = ca_open(path, &st, err, err_len);
	char *data = NULL;
	size_t len = 0;
	BIO *bio;
	EVP_PKEY *key;
	bool encrypted;

	if (fd < 0)
		return NULL;
	/* Checked on the open file before a byte is read: a key others can
	 * read is a key others may already have. */
	if (st.st_mode & (S_IRGRP | S_IROTH)) {
		ca_error(err, err_len, "readable by group or others (mode %04o): chmod 600 it",
			 (unsigned)(st.st_mode & 07777));
		close(fd);
		return NULL;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		ca_error(err, err_len, "writable by group or others (mode %04o): chmod 600 it",
			 (unsigned)(st.st_mode & 07777));
		close(fd);
		return NULL;
	}
	/* owner-only, as the README says: any other bit on a key is a slip */
	if (st.st_mode & (S_IXGRP | S_IXOTH)) {
		ca_error(err, err_len,
			 "has group or other permission bits (mode %04o): chmod 600 it",
			 (unsigned)(st.st_mode & 07777));
		close(fd);
		return NULL;
	}
	if (ca_read_fd(fd, &st, &data, &len, err, err_len) < 0) {
		close(fd);
		return NULL;
	}
	close(fd);
	bio = BIO_new_mem_buf(data, (int)len);
	key = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, ca_no_password, NULL) : NULL;
	BIO_free(bio);
	encrypted = strstr(data, "ENCRYPTED") != NULL;
	OPENSSL_cleanse(data, len);
	free(data);
	ERR_clear_error();
	if (key == NULL && encrypted)
		ca_error(err, err_len,
			 "an encrypted key is not supported (openssl pkey -in KEY -out NEW "
			 "decrypts it)");
	else if (key == NULL)
		ca_error(err, err_len, "not a PEM private key");
	return key;
}

/* An ASN1_TIME as seconds since the epoch; false when it cannot be read. */
static bool ca_time(const ASN1_TIME *t, time_t *out)
{
	struct tm tm;

	if (ASN1_TIME_to_tm(t, &tm) != 1)
		return false;
	*out = timegm(&tm);
	return true;
}

/* Make the process non-dumpable before a private key is read: no core file
 * then holds it, and processes of the same user cannot read the memory
 * through ptrace or /proc/PID/mem. It stays so for the life of the process:
 * a key once read may linger in freed memory. */
static int ca_forbid_dumps(char *err, size_t err_len)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		ca_error(err, err_len, "cannot keep the key out of core dumps (prctl: %s)",
			 strerror(errno));
		return -1;
	}
	return 0;
}

/* A time as the errors write it: 2031-05-04 12:00:00 UTC. */
static void ca_format_time(time_t t, char *buf, size_t size)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* Whether cert can sign leaves at now: a CA, with readable dates that hold
 * now. Returns 0, or -1 with the reason in err. */
static int ca_check_cert(X509 *cert, const char *path, time_t now, time_t *not_before,
			 time_t *not_after, char *err, size_t err_len)
{
	const char *why = ca_not_a_ca(cert);
	char when[64];

	if (why == NULL && (!ca_time(X509_get0_notBefore(cert), not_before) ||
			    !ca_time(X509_get0_notAfter(cert), not_after)))
		why = "the certificate's validity dates cannot be read";
	if (why != NULL) {
		ca_error(err, err_len, "%s", why);
		return -1;
	}
	/* a CA that cannot make a leaf clients accept is a config error, found
	 * by --check and a reload rather than by the first CONNECT */
	if (now >= *not_after) {
		ca_format_time(*not_after, when, sizeof(when));
		ca_error(err, err_len,
			 "the CA certificate %s expired on %s: make a new one "
			 "(retryproxy --make-ca DIR)",
			 path, when);
		return -1;
	}
	if (now < *not_before) {
		ca_format_time(*not_before, when, sizeof(when));
		ca_error(err, err_len,
			 "the CA certificate %s is not valid before %s: is this machine's clock "
			 "right?",
			 path, when);
		return -1;
	}
	return 0;
}

/* Load and check a CA's certificate, then its key (its file's mode first). */
struct ca *ca_load(const char *cert_path, const char *key_path, enum ca_load_failure *failure,
		   char *err, size_t err_len)
{
	STACK_OF(X509) *chain = NULL;
	X509 *cert = ca_load_cert(cert_path, &chain, err, err_len);
	EVP_PKEY *key, *leaf_key;
	struct ca *ca;
	time_t not_before, not_after;
	enum ca_load_failure ignored;

	if (failure == NULL)
		failure = &ignored;
	*failure = CA_LOAD_CERT;
	if (cert == NULL)
		return NULL;
	if (ca_check_cert(cert, cert_path, time(NULL), &not_before, &not_after, err, err_len) < 0) {
		X509_free(cert);
		sk_X509_pop_free(chain, X509_free);
		ERR_clear_error();
		return NULL;
	}
	*failure = CA_LOAD_KEY;
	if (ca_forbid_dumps(err, err_len) < 0) {
		X509_free(cert);
		sk_X509_pop_free(chain, X509_free);
		return NULL;
	}
	key = ca_load_key(key_path, err, err_len);
	if (key == NULL) {
		X509_free(cert);
		sk_X509_pop_free(chain, X509_free);
		return NULL;
	}
	if (EVP_PKEY_eq(X509_get0_pubkey(cert), key) != 1) {
		ca_error(err, err_len, "does not match the certificate");
		EVP_PKEY_free(key);
		X509_free(cert);
		sk_X509_pop_free(chain, X509_free);
		ERR_clear_error();
		return NULL;
	}
	/* One key pair for all the leaves: a new host then costs a signature,
	 * not a key generation as well. It is no weaker than a key per host:
	 * it lives in the same memory as the CA key, which can sign a leaf for
	 * any host anyway. */
	leaf_key = EVP_EC_gen("P-256");
	if (leaf_key == NULL) {
		char reason[256];

		ca_error(err, err_len, "cannot make the leaves' EC P-256 key: %s",
			 ca_openssl_reason(reason, sizeof(reason), "unknown error"));
		EVP_PKEY_free(key);
		X509_free(cert);
		sk_X509_pop_free(chain, X509_free);
		return NULL;
	}
	*failure = CA_LOAD_OK;
	ca = xcalloc(1, sizeof(*ca));
	ca->refs = 1;
	ca->cert = cert;
	ca->chain = chain;
	ca->key = key;
	ca->leaf_key = leaf_key;
	ca->not_before = not_before;
	ca->not_after = not_after;
	return ca;
}

/* One more holder. */
struct ca *ca_hold(struct ca *ca)
{
	ca->refs++;
	return ca;
}

/* Free a cached leaf. */
static void ca_entry_free(struct ca_entry *e)
{
	X509_free(e->cert);
	free(e->host);
	free(e);
}

/* One holder fewer; the last frees the leaves, the certificate and the keys. */
void ca_release(struct ca *ca)
{
	struct ca_entry *e, *next;

	if (ca == NULL || --ca->refs > 0)
		return;
	for (e = ca->newest; e != NULL; e = next) {
		next = e->older;
		ca_entry_free(e);
	}
	X509_free(ca->cert);
	sk_X509_pop_free(ca->chain, X509_free);
	EVP_PKEY_free(ca->key);
	EVP_PKEY_free(ca->leaf_key);
	free(ca);
}

/* How many leaves ca_leaf has made, renewals included. */
unsigned long ca_leaves_made(const struct ca *ca)
{
	return ca->leaves_made;
}

STACK_OF(X509) * ca_chain(const struct ca *ca)
{
	return ca->chain;
}

/* What a leaf is for: a name, or an address in network order. */
struct ca_host {
	char text[CA_HOST_MAX + 1]; /* canonical, the cache key */
	int family;		    /* AF_INET, AF_INET6, or 0 for a DNS name */
	unsigned char addr[16];
};

/* Read host as an address literal or a DNS name, in its canonical form, or
 * -1 with a reason. */
static int ca_host_parse(const char *host, size_t len, struct ca_host *out, char *err,
			 size_t err_len)
{
	char buf[CA_HOST_MAX + 2];
	const char *last;

	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		host++;
		len -= 2;
	}
	if (len == 0 || len >= sizeof(buf) || memchr(host, '\0', len) != NULL) {
		ca_error(err, err_len, "invalid host for a certificate");
		return -1;
	}
	memcpy(buf, host, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, out->addr) == 1) {
		out->family = AF_INET;
		inet_ntop(AF_INET, out->addr, out->text, sizeof(out->text));
		return 0;
	}
	if (inet_pton(AF_INET6, buf, out->addr) == 1) {
		out->family = AF_INET6;
		inet_ntop(AF_INET6, out->addr, out->text, sizeof(out->text));
		return 0;
	}
	/* The fully qualified form names the same host. */
	if (len > 1 && buf[len - 1] == '.')
		buf[--len] = '\0';
	if (len > CA_HOST_MAX) {
		ca_error(err, err_len, "host name too long for a certificate");
		return -1;
	}
	for (size_t i = 0, label = 0; i <= len; i++) {
		unsigned char c = (unsigned char)buf[i];

		if (c == '.' || c == '\0') {
			if (label == 0 || label > 63) {
				ca_error(err, err_len, "invalid host name for a certificate");
				return -1;
			}
			label = 0;
			continue;
		}
		/* Underscores are not in host names, but they are in DNS
		 * names people reach (_acme, service records). */
		if (!isalnum(c) && c != '-' && c != '_') {
			ca_error(err, err_len, "invalid host name for a certificate");
			return -1;
		}
		buf[i] = (char)tolower(c);
		label++;
	}
	/* A last label of digits is no DNS name (a top-level domain is never
	 * all-numeric): "127.0.0.1." or "127.1" would get a name where an
	 * address is meant, and the first would share 127.0.0.1's cache key,
	 * handing every later client a leaf without its address in it. */
	last = strrchr(buf, '.');
	last = last != NULL ? last + 1 : buf;
	if (strspn(last, "0123456789") == strlen(last)) {
		ca_error(err, err_len, "invalid host name for a certificate");
		return -1;
	}
	out->family = 0;
	memcpy(out->text, buf, len + 1);
	return 0;
}

bool ca_host_valid(const char *host, size_t host_len)
{
	struct ca_host h;

	return ca_host_parse(host, host_len, &h, NULL, 0) == 0;
}

/* The bucket of a canonical host. */
static size_t ca_hash(const char *host)
{
	return (size_t)(hash_string(host) & (CA_BUCKETS - 1));
}

/* subjectAltName: the one name or address the leaf is for. */
static int ca_add_san(X509 *x, const struct ca_host *host, bool critical)
{
	GENERAL_NAMES *names = GENERAL_NAMES_new();
	GENERAL_NAME *name = GENERAL_NAME_new();
	ASN1_STRING *value = NULL;
	int ok = 0;

	if (names == NULL || name == NULL)
		goto done;
	if (host->family != 0) {
		value = ASN1_OCTET_STRING_new();
		if (value == NULL ||
		    ASN1_OCTET_STRING_set(value, host->addr, host->family == AF_INET ? 4 : 16) != 1)
			goto done;
		GENERAL_NAME_set0_value(name, GEN_IPADD, value);
	} else {
		value = ASN1_IA5STRING_new();
		if (value == NULL || ASN1_STRING_set(value, host->text, -1) != 1)
			goto done;
		GENERAL_NAME_set0_value(name, GEN_DNS, value);
	}
	value = NULL;
	if (sk_GENERAL_NAME_push(names, name) <= 0)
		goto done;
	name = NULL;
	ok = X509_add1_ext_i2d(x, NID_subject_alt_name, names, critical, 0) == 1;
done:
	ASN1_STRING_free(value);
	GENERAL_NAME_free(name);
	GENERAL_NAMES_free(names);
	return ok ? 0 : -1;
}

/* A new leaf for host with the CA's leaf key, valid from not_before to
 * not_after. */
static X509 *ca_make_leaf(struct ca *ca, const struct ca_host *host, time_t not_before,
			  time_t not_after)
{
	X509 *x = X509_new();
	X509_NAME *name = X509_NAME_new();
	/* A CN holds at most 64 characters; a longer name goes in the SAN
	 * alone, which must then be critical since the subject is empty. */
	bool cn = strlen(host->text) <= 64;

	if (x == NULL || name == NULL || ca_cert_start(x, ca->leaf_key, not_before, not_after) < 0)
		goto fail;
	if (cn && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
					     (const unsigned char *)host->text, -1, -1, 0) != 1)
		goto fail;
	if (X509_set_subject_name(x, name) != 1 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) != 1)
		goto fail;
	if (ca_add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    ca_add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") < 0 ||
	    ca_add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") < 0 ||
	    ca_add_san(x, host, !cn) < 0 ||
	    ca_add_ext(x, ca->cert, NID_subject_key_identifier, "hash") < 0 ||
	    /* the CA's key id when it has one, else its name and serial: a CA
	     * made without subjectKeyIdentifier signs leaves too */
	    ca_add_ext(x, ca->cert, NID_authority_key_identifier, "keyid,issuer") < 0)
		goto fail;
	if (X509_sign(x, ca->key, ca_digest(ca->key)) <= 0)
		goto fail;
	X509_NAME_free(name);
	return x;
fail:
	X509_NAME_free(name);
	X509_free(x);
	return NULL;
}

/* Take e off the recency list. */
static void ca_lru_unlink(struct ca *ca, struct ca_entry *e)
{
	if (e->newer != NULL)
		e->newer->older = e->older;
	else
		ca->newest = e->older;
	if (e->older != NULL)
		e->older->newer = e->newer;
	else
		ca->oldest = e->newer;
	e->newer = e->older = NULL;
}

/* Put e first on the recency list. */
static void ca_lru_push(struct ca *ca, struct ca_entry *e)
{
	e->newer = NULL;
	e->older = ca->newest;
	if (ca->newest != NULL)
		ca->newest->newer = e;
	ca->newest = e;
	if (ca->oldest == NULL)
		ca->oldest = e;
}

/* Drop the least recently used leaf. */
static void ca_evict_oldest(struct ca *ca)
{
	struct ca_entry *e = ca->oldest, **link;

	if (e == NULL)
		return;
	for (link = &ca->buckets[ca_hash(e->host)]; *link != e; link = &(*link)->hash_next)
		;
	*link = e->hash_next;
	ca_lru_unlink(ca, e);
	ca->count--;
	ca_entry_free(e);
}

/* Whether a cached leaf is still good at now: started, and with at least a
 * third of its validity left, or cut at the CA's end (a new one could not
 * last longer) and not expired. */
static bool ca_entry_fresh(const struct ca *ca, const struct ca_entry *e, time_t now)
{
	if (now < e->not_before)
		return false;
	if (e->not_after >= ca->not_after)
		return now < e->not_after;
	return (e->not_after - now) * 3 >= e->not_after - e->not_before;
}

int ca_usable(const struct ca *ca, time_t now, char *err, size_t err_len)
{
	if (ca->not_after <= now) {
		ca_error(err, err_len, "the local CA certificate has expired");
		return -1;
	}
	/* the clock went back since the CA loaded: a leaf made now would not
	 * be valid yet, and another would be made on every CONNECT */
	if (now < ca->not_before) {
		ca_error(err, err_len, "the local CA certificate is not valid yet");
		return -1;
	}
	return 0;
}

/* The cached leaf for host if still fresh, else a new one in its place. */
int ca_leaf(struct ca *ca, const char *host, size_t host_len, time_t now, X509 **cert,
	    EVP_PKEY **key, char *err, size_t err_len)
{
	struct ca_host h;
	struct ca_entry *e;
	size_t bucket;
	time_t not_before = now - CA_BACKDATE, not_after;
	X509 *new_cert;
	char reason[256];

	if (ca_host_parse(host, host_len, &h, err, err_len) < 0)
		return -1;
	bucket = ca_hash(h.text);
	for (e = ca->buckets[bucket]; e != NULL; e = e->hash_next)
		if (strcmp(e->host, h.text) == 0)
			break;
	if (e != NULL && ca_entry_fresh(ca, e, now)) {
		ca_lru_unlink(ca, e);
		ca_lru_push(ca, e);
		*cert = e->cert;
		*key = ca->leaf_key;
		return 0;
	}
	not_after = not_before + (time_t)CA_LEAF_DAYS * 24 * 3600;
	/* a leaf lies within its CA's validity, which clients check too */
	if (not_after > ca->not_after)
		not_after = ca->not_after;
	if (not_before < ca->not_before)
		not_before = ca->not_before;
	if (ca_usable(ca, now, err, err_len) < 0)
		return -1;
	new_cert = ca_make_leaf(ca, &h, not_before, not_after);
	if (new_cert == NULL) {
		ca_error(err, err_len, "cannot make a certificate for %s: %s", h.text,
			 ca_openssl_reason(reason, sizeof(reason), "unknown error"));
		return -1;
	}
	ca->leaves_made++;
	if (e != NULL) {
		/* renewed in place */
		X509_free(e->cert);
		ca_lru_unlink(ca, e);
	} else {
		e = xcalloc(1, sizeof(*e));
		e->host = xstrdup(h.text);
		e->hash_next = ca->buckets[bucket];
		ca->buckets[bucket] = e;
		ca->count++;
	}
	e->cert = new_cert;
	e->not_before = not_before;
	e->not_after = not_after;
	ca_lru_push(ca, e);
	if (ca->count > CA_LEAF_CACHE)
		ca_evict_oldest(ca);
	*cert = e->cert;
	*key = ca->leaf_key;
	return 0;
}
