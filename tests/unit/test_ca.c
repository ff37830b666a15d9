/*
 * ca: ca_make writes a CA that ca_load takes back, with the file modes and
 * certificate fields --make-ca promises, and never overwrites; ca_load
 * refuses a key others may read, a key of another CA, a certificate that is
 * no CA and files that are not PEM, and makes the process non-dumpable
 * before it reads a key; ca_leaf issues leaves for names and IP literals that
 * OpenSSL's strict verification accepts for that host, all with the one key
 * pair made when the CA loads, caches them by host (case-insensitively),
 * renews one with less than a third of its validity left, never outlives the
 * CA, and keeps at most CA_LEAF_CACHE, dropping the least recently used.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "ca.h"

#define DAY (24 * 3600)

/* A scratch directory for one test, removed by the teardown. */
struct test_dir {
	char path[64];
};

static int test_setup(void **state)
{
	struct test_dir *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	snprintf(d->path, sizeof(d->path), "/tmp/test_ca.XXXXXX");
	assert_non_null(mkdtemp(d->path));
	*state = d;
	return 0;
}

static int test_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int test_teardown(void **state)
{
	struct test_dir *d = *state;

	nftw(d->path, test_remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(d);
	return 0;
}

/* dir/name in buf. */
static const char *test_path(char *buf, const char *dir, const char *name)
{
	int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);

	assert_true(n > 0 && n < PATH_MAX);
	return buf;
}

/* ca_make into dir/name, which must work; returns the directory. */
static const char *test_make(struct test_dir *d, const char *name, char *buf)
{
	char err[256];

	test_path(buf, d->path, name);
	if (ca_make(buf, err, sizeof(err)) != 0)
		fail_msg("ca_make %s: %s", buf, err);
	return buf;
}

/* ca_load of dir/ca.pem and dir/ca-key.pem, which must work. */
static struct ca *test_load(const char *dir)
{
	char cert[PATH_MAX], key[PATH_MAX], err[256];
	enum ca_load_failure failure = CA_LOAD_CERT;
	struct ca *ca = ca_load(test_path(cert, dir, "ca.pem"), test_path(key, dir, "ca-key.pem"),
				&failure, err, sizeof(err));

	if (ca == NULL)
		fail_msg("ca_load %s: %s", dir, err);
	assert_int_equal(failure, CA_LOAD_OK);
	return ca;
}

/* ca_load must fail, blaming that file, with exactly that reason. */
static void test_load_fails(const char *cert, const char *key, enum ca_load_failure blamed,
			    const char *reason)
{
	char err[256] = "";
	enum ca_load_failure failure = CA_LOAD_OK;
	struct ca *ca = ca_load(cert, key, &failure, err, sizeof(err));

	if (ca != NULL)
		fail_msg("%s with %s loaded; expected \"%s\"", cert, key, reason);
	assert_int_equal(failure, blamed);
	assert_string_equal(err, reason);
	/* nothing of ours left for the next OpenSSL caller to misread */
	assert_int_equal(ERR_peek_error(), 0);
}

static X509 *test_read_cert(const char *path)
{
	FILE *f = fopen(path, "r");
	X509 *x;

	assert_non_null(f);
	x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(x);
	return x;
}

static EVP_PKEY *test_read_key(const char *path)
{
	FILE *f = fopen(path, "r");
	EVP_PKEY *key;

	assert_non_null(f);
	key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(key);
	return key;
}

/* The whole of a small file, and its length. */
static char *test_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = calloc(1, 65536);

	assert_non_null(f);
	assert_non_null(buf);
	*len = fread(buf, 1, 65535, f);
	fclose(f);
	return buf;
}

static void test_write(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
}

static time_t test_time(const ASN1_TIME *t)
{
	struct tm tm;

	assert_int_equal(ASN1_TIME_to_tm(t, &tm), 1);
	return timegm(&tm);
}

/* The text of one entry of a name, or "". */
static const char *test_name_entry(X509_NAME *name, int nid, char *buf, size_t size)
{
	buf[0] = '\0';
	X509_NAME_get_text_by_NID(name, nid, buf, (int)size);
	return buf;
}

/* Whether key is an EC key on P-256. */
static bool test_is_p256(EVP_PKEY *key)
{
	char group[64] = "";
	size_t len;

	return EVP_PKEY_is_a(key, "EC") &&
	       EVP_PKEY_get_utf8_string_param(key, "group", group, sizeof(group), &len) == 1 &&
	       strcmp(group, "prime256v1") == 0;
}

/* Whether an extension is present and marked critical. */
static bool test_critical(X509 *x, int nid)
{
	int i = X509_get_ext_by_NID(x, nid, -1);

	return i >= 0 && X509_EXTENSION_get_critical(X509_get_ext(x, i));
}

/* Verify leaf up to ca_cert as a TLS client would, strictly, for host. */
static void test_verify_chain(X509 *ca_cert, X509 *leaf, const char *host, bool ip, time_t now)
{
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_VERIFY_PARAM *param;
	int ok;

	assert_int_equal(X509_STORE_add_cert(store, ca_cert), 1);
	assert_int_equal(X509_STORE_CTX_init(ctx, store, leaf, NULL), 1);
	param = X509_STORE_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
	X509_VERIFY_PARAM_set_time(param, now);
	assert_int_equal(X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER), 1);
	if (ip)
		assert_int_equal(X509_VERIFY_PARAM_set1_ip_asc(param, host), 1);
	else
		assert_int_equal(X509_VERIFY_PARAM_set1_host(param, host, 0), 1);
	ok = X509_verify_cert(ctx);
	if (ok != 1)
		fail_msg("leaf for %s does not verify: %s", host,
			 X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
}

/* --make-ca's files: modes, and every field the CA promises. */
static void test_make_and_load(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], path[PATH_MAX], buf[256];
	time_t now = time(NULL), made, not_before, not_after;
	struct stat st;
	X509 *x;
	EVP_PKEY *key;
	const ASN1_INTEGER *serial;
	BIGNUM *bn;
	struct ca *ca;

	/* a directory that does not exist yet, two levels down */
	test_make(d, "new/ca", dir);
	made = time(NULL);
	assert_int_equal(stat(dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(stat(test_path(path, dir, "ca.pem"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(stat(test_path(path, dir, "ca-key.pem"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	x = test_read_cert(test_path(path, dir, "ca.pem"));
	key = test_read_key(test_path(path, dir, "ca-key.pem"));
	assert_int_equal(X509_get_version(x), X509_VERSION_3);
	assert_true(test_is_p256(key));
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(x), key), 1);
	assert_int_equal(X509_verify(x, key), 1);
	assert_int_equal(X509_check_issued(x, x), X509_V_OK);
	assert_string_equal(
		test_name_entry(X509_get_subject_name(x), NID_organizationName, buf, sizeof(buf)),
		"retryproxy");
	test_name_entry(X509_get_subject_name(x), NID_commonName, buf, sizeof(buf));
	assert_true(strncmp(buf, "retryproxy local CA (", 21) == 0);
	assert_true(buf[strlen(buf) - 1] == ')');
	assert_int_equal(X509_NAME_cmp(X509_get_subject_name(x), X509_get_issuer_name(x)), 0);
	assert_true(X509_get_extension_flags(x) & EXFLAG_CA);
	assert_true(test_critical(x, NID_basic_constraints));
	assert_true(test_critical(x, NID_key_usage));
	assert_int_equal(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	assert_non_null(X509_get0_subject_key_id(x));
	/* backdated an hour, ten years ahead */
	not_before = test_time(X509_get0_notBefore(x));
	not_after = test_time(X509_get0_notAfter(x));
	/* (made between now and made: a second may have begun meanwhile) */
	assert_true(not_before >= now - 3600 && not_before <= made - 3600);
	assert_true(not_after >= now + 3652L * DAY && not_after <= made + 3653L * DAY);
	/* a positive serial of at most 128 bits, and enough of them random */
	serial = X509_get0_serialNumber(x);
	bn = ASN1_INTEGER_to_BN(serial, NULL);
	assert_non_null(bn);
	assert_false(BN_is_negative(bn));
	assert_true(BN_num_bits(bn) <= 128 && BN_num_bits(bn) >= 120);
	BN_free(bn);
	X509_free(x);
	EVP_PKEY_free(key);

	ca = test_load(dir);
	assert_int_equal(ca_leaves_made(ca), 0);
	ca_release(ca);
}

/* Loading a CA makes the process non-dumpable: no core file or same-user
 * ptrace reads the key. */
static void test_load_forbids_dumps(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX];
	struct ca *ca;

	test_make(d, "ca", dir);
	assert_int_equal(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
	assert_int_equal(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 1);
	ca = test_load(dir);
	assert_int_equal(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
	ca_release(ca);
}

/* A second --make-ca, or one finding either file, changes nothing. */
static void test_make_refuses(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], err[256];
	char *cert_before, *key_before, *after;
	size_t cert_len, key_len, len;
	struct stat st;

	test_make(d, "ca", dir);
	test_path(cert, dir, "ca.pem");
	test_path(key, dir, "ca-key.pem");
	cert_before = test_slurp(cert, &cert_len);
	key_before = test_slurp(key, &key_len);
	assert_int_equal(ca_make(dir, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "already exists"));
	after = test_slurp(cert, &len);
	assert_true(len == cert_len && memcmp(after, cert_before, len) == 0);
	free(after);
	after = test_slurp(key, &len);
	assert_true(len == key_len && memcmp(after, key_before, len) == 0);
	free(after);

	/* only the key there: no certificate is made beside it */
	assert_int_equal(unlink(cert), 0);
	assert_int_equal(ca_make(dir, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca-key.pem already exists"));
	assert_int_equal(stat(cert, &st), -1);
	/* only the certificate there: no key is made beside it */
	assert_int_equal(rename(key, cert), 0);
	assert_int_equal(ca_make(dir, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca.pem already exists"));
	assert_int_equal(stat(key, &st), -1);
	/* a path through a file */
	assert_int_equal(ca_make(cert, err, sizeof(err)), -1);
	free(cert_before);
	free(key_before);
}

/* Add an extension written as in openssl.cnf. */
static void test_add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, ctx, nid, value);

	assert_non_null(ext);
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
}

/* A certificate for key, self-signed, with these extensions (NULL: none),
 * valid from not_before to not_after. */
static void test_write_cert_dated(const char *path, EVP_PKEY *key, const char *bcons,
				  const char *usage, time_t not_before, time_t not_after)
{
	X509 *x = X509_new();
	X509_NAME *name = X509_get_subject_name(x);
	X509V3_CTX ctx;
	FILE *f;

	assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
	ASN1_TIME_set(X509_getm_notBefore(x), not_before);
	ASN1_TIME_set(X509_getm_notAfter(x), not_after);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)"test", -1, -1,
				   0);
	X509_set_issuer_name(x, name);
	X509_set_pubkey(x, key);
	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	if (bcons != NULL)
		test_add_ext(x, &ctx, NID_basic_constraints, bcons);
	if (usage != NULL)
		test_add_ext(x, &ctx, NID_key_usage, usage);
	test_add_ext(x, &ctx, NID_subject_key_identifier, "hash");
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	f = fopen(path, "w");
	assert_non_null(f);
	PEM_write_X509(f, x);
	fclose(f);
	X509_free(x);
}

/* The same, valid from a day ago. */
static void test_write_cert(const char *path, EVP_PKEY *key, const char *bcons, const char *usage,
			    time_t not_after)
{
	test_write_cert_dated(path, key, bcons, usage, time(NULL) - DAY, not_after);
}

static void test_write_key(const char *path, EVP_PKEY *key, const EVP_CIPHER *cipher)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(chmod(path, 0600), 0);
	PEM_write_PrivateKey(f, key, cipher, (unsigned char *)"secret", cipher ? 6 : 0, NULL, NULL);
	fclose(f);
}

/* Every refusal names its file and why. */
static void test_load_refusals(void **state)
{
	struct test_dir *d = *state;
	char a[PATH_MAX], b[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], other_key[PATH_MAX];
	char path[PATH_MAX], path2[PATH_MAX];
	EVP_PKEY *ec = EVP_EC_gen("P-256");

	test_make(d, "a", a);
	test_make(d, "b", b);
	test_path(cert, a, "ca.pem");
	test_path(key, a, "ca-key.pem");
	test_path(other_key, b, "ca-key.pem");

	/* the key file's mode, checked before it is read */
	assert_int_equal(chmod(key, 0644), 0);
	test_load_fails(cert, key, CA_LOAD_KEY,
			"readable by group or others (mode 0644): chmod 600 it");
	assert_int_equal(chmod(key, 0640), 0);
	test_load_fails(cert, key, CA_LOAD_KEY,
			"readable by group or others (mode 0640): chmod 600 it");
	assert_int_equal(chmod(key, 0620), 0);
	test_load_fails(cert, key, CA_LOAD_KEY,
			"writable by group or others (mode 0620): chmod 600 it");
	/* owner-only: an execute bit for others is refused too */
	assert_int_equal(chmod(key, 0611), 0);
	test_load_fails(cert, key, CA_LOAD_KEY,
			"has group or other permission bits (mode 0611): chmod 600 it");
	assert_int_equal(chmod(key, 0400), 0);
	ca_release(test_load(a));
	assert_int_equal(chmod(key, 0600), 0);

	/* another CA's key */
	test_load_fails(cert, other_key, CA_LOAD_KEY, "does not match the certificate");

	/* certificates that are no CA: no basicConstraints, CA:FALSE, a
	 * keyUsage without keyCertSign */
	test_path(path2, d->path, "ec-key.pem");
	test_write_key(path2, ec, NULL);
	test_path(path, d->path, "plain.pem");
	test_write_cert(path, ec, NULL, NULL, time(NULL) + DAY);
	test_load_fails(path, path2, CA_LOAD_CERT,
			"not a CA certificate (basicConstraints CA:TRUE is missing)");
	test_write_cert(path, ec, "critical,CA:FALSE", NULL, time(NULL) + DAY);
	test_load_fails(path, path2, CA_LOAD_CERT,
			"not a CA certificate (basicConstraints CA:TRUE is missing)");
	test_write_cert(path, ec, "critical,CA:TRUE", "critical,digitalSignature",
			time(NULL) + DAY);
	test_load_fails(path, path2, CA_LOAD_CERT,
			"not a CA certificate (keyUsage lacks keyCertSign)");
	/* a CA without keyUsage at all is one */
	test_write_cert(path, ec, "critical,CA:TRUE", NULL, time(NULL) + DAY);
	ca_release(ca_load(path, path2, NULL, NULL, 0));
	/* a CA that cannot sign a leaf clients accept now: expired, or not
	 * valid yet; the reason names the file and the date */
	{
		time_t old_end = time(NULL) - DAY, late_start = time(NULL) + DAY;
		char reason[PATH_MAX + 200], when[64];

		test_write_cert_dated(path, ec, "critical,CA:TRUE", NULL, old_end - 10 * DAY,
				      old_end);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&old_end));
		snprintf(reason, sizeof(reason),
			 "the CA certificate %s expired on %s: make a new one (retryproxy "
			 "--make-ca DIR)",
			 path, when);
		test_load_fails(path, path2, CA_LOAD_CERT, reason);
		test_write_cert_dated(path, ec, "critical,CA:TRUE", NULL, late_start,
				      late_start + 10 * DAY);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&late_start));
		snprintf(reason, sizeof(reason),
			 "the CA certificate %s is not valid before %s: is this machine's clock "
			 "right?",
			 path, when);
		test_load_fails(path, path2, CA_LOAD_CERT, reason);
	}

	/* files that are not what they should be */
	test_path(path, d->path, "text.pem");
	test_write(path, "hello\n", 0600);
	test_load_fails(path, key, CA_LOAD_CERT, "not a PEM certificate");
	test_load_fails(cert, path, CA_LOAD_KEY, "not a PEM private key");
	test_load_fails(cert, cert, CA_LOAD_KEY,
			"readable by group or others (mode 0644): chmod 600 it");
	test_path(path, d->path, "missing.pem");
	test_load_fails(path, key, CA_LOAD_CERT, "cannot read: No such file or directory");
	test_load_fails(cert, path, CA_LOAD_KEY, "cannot read: No such file or directory");
	test_load_fails(d->path, key, CA_LOAD_CERT, "not a regular file");
	/* an encrypted key is refused without asking for a password */
	test_path(path, d->path, "encrypted.pem");
	test_write_key(path, ec, EVP_aes_128_cbc());
	test_path(path2, d->path, "ec-cert.pem");
	test_write_cert(path2, ec, "critical,CA:TRUE", NULL, time(NULL) + DAY);
	test_load_fails(path2, path, CA_LOAD_KEY,
			"an encrypted key is not supported (openssl pkey -in KEY -out NEW "
			"decrypts it)");
	EVP_PKEY_free(ec);
}

/* The SAN of a leaf: its one entry's type and value as text. */
static void test_san(X509 *leaf, int *type, char *value, size_t size)
{
	GENERAL_NAMES *names = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
	GENERAL_NAME *name;

	assert_non_null(names);
	assert_int_equal(sk_GENERAL_NAME_num(names), 1);
	name = sk_GENERAL_NAME_value(names, 0);
	*type = name->type;
	if (name->type == GEN_DNS) {
		snprintf(value, size, "%.*s", ASN1_STRING_length(name->d.dNSName),
			 (const char *)ASN1_STRING_get0_data(name->d.dNSName));
	} else {
		const unsigned char *ip = ASN1_STRING_get0_data(name->d.iPAddress);
		int len = ASN1_STRING_length(name->d.iPAddress);

		assert_true(len == 4 || len == 16);
		inet_ntop(len == 4 ? AF_INET : AF_INET6, ip, value, (socklen_t)size);
	}
	GENERAL_NAMES_free(names);
}

/* A leaf as the contract says, for host, whose SAN is san_type:san. */
static void test_check_leaf(X509 *ca_cert, EVP_PKEY *ca_key, X509 *leaf, EVP_PKEY *key,
			    const char *host, int san_type, const char *san, time_t now)
{
	char value[256], cn[256];
	int type;
	time_t not_before = test_time(X509_get0_notBefore(leaf));
	time_t not_after = test_time(X509_get0_notAfter(leaf));
	const ASN1_OCTET_STRING *aki = X509_get0_authority_key_id(leaf);

	assert_int_equal(X509_get_version(leaf), X509_VERSION_3);
	test_san(leaf, &type, value, sizeof(value));
	assert_int_equal(type, san_type);
	assert_string_equal(value, san);
	assert_string_equal(
		test_name_entry(X509_get_subject_name(leaf), NID_commonName, cn, sizeof(cn)), san);
	assert_int_equal(X509_NAME_cmp(X509_get_issuer_name(leaf), X509_get_subject_name(ca_cert)),
			 0);
	assert_int_equal(X509_verify(leaf, ca_key), 1);
	assert_int_equal(X509_get_signature_nid(leaf), NID_ecdsa_with_SHA256);
	assert_int_equal(not_before, now - 3600);
	assert_true(not_after - not_before <= CA_LEAF_DAYS * DAY + 3600);
	assert_true(not_after - now >= (CA_LEAF_DAYS - 1) * DAY);
	assert_true(test_is_p256(key));
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(leaf), key), 1);
	assert_false(X509_get_extension_flags(leaf) & EXFLAG_CA);
	assert_true(X509_get_extended_key_usage(leaf) & XKU_SSL_SERVER);
	assert_int_equal(X509_get_key_usage(leaf), KU_DIGITAL_SIGNATURE);
	assert_non_null(aki);
	assert_int_equal(ASN1_OCTET_STRING_cmp(aki, X509_get0_subject_key_id(ca_cert)), 0);
	test_verify_chain(ca_cert, leaf, host, san_type == GEN_IPADD, now);
}

static void test_leaf_names_and_addresses(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], path[PATH_MAX], err[256];
	struct ca *ca = test_load(test_make(d, "ca", dir));
	X509 *ca_cert = test_read_cert(test_path(path, dir, "ca.pem"));
	EVP_PKEY *ca_key = X509_get_pubkey(ca_cert);
	time_t now = time(NULL);
	X509 *leaf;
	EVP_PKEY *key;

	assert_int_equal(ca_leaf(ca, "api.example.com", 15, now, &leaf, &key, err, sizeof(err)), 0);
	test_check_leaf(ca_cert, ca_key, leaf, key, "api.example.com", GEN_DNS, "api.example.com",
			now);
	/* the name is lower case in the certificate, whatever was asked */
	assert_int_equal(
		ca_leaf(ca, "Storage.GoogleAPIs.com", 22, now, &leaf, &key, err, sizeof(err)), 0);
	test_check_leaf(ca_cert, ca_key, leaf, key, "storage.googleapis.com", GEN_DNS,
			"storage.googleapis.com", now);
	assert_int_equal(ca_leaf(ca, "127.0.0.1", 9, now, &leaf, &key, err, sizeof(err)), 0);
	test_check_leaf(ca_cert, ca_key, leaf, key, "127.0.0.1", GEN_IPADD, "127.0.0.1", now);
	assert_int_equal(ca_leaf(ca, "::1", 3, now, &leaf, &key, err, sizeof(err)), 0);
	test_check_leaf(ca_cert, ca_key, leaf, key, "::1", GEN_IPADD, "::1", now);
	/* host_len counts, not a NUL */
	assert_int_equal(ca_leaf(ca, "example.org:443", 11, now, &leaf, &key, err, sizeof(err)), 0);
	test_check_leaf(ca_cert, ca_key, leaf, key, "example.org", GEN_DNS, "example.org", now);
	assert_int_equal(ca_leaves_made(ca), 5);

	/* what cannot be a certificate's name */
	static const char *const bad[] = {
		"",
		"a..b",
		".a",
		"exa mple.com",
		"a/b",
		"a,DNS:evil.com",
		"fe80::1%eth0",
		"[]",
		/* an address spelled as a name: no DNS name ends in digits */
		"127.0.0.1.",
		"127.1",
		"10",
		"a.b.123",
		"toolonglabel-toolonglabel-toolonglabel-toolonglabel-toolonglabel-1.com",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (ca_leaf(ca, bad[i], strlen(bad[i]), now, &leaf, &key, err, sizeof(err)) == 0)
			fail_msg("\"%s\" should be refused", bad[i]);
	}
	assert_int_equal(ca_leaf(ca, "a\0b", 3, now, &leaf, &key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "invalid host"));
	/* digits inside a name are fine, and the address keeps its own leaf */
	assert_int_equal(ca_leaf(ca, "1.2.3.4.nip.io", 14, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaf(ca, "127.0.0.1", 9, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(X509_check_ip_asc(leaf, "127.0.0.1", 0), 1);

	/* a name longer than a CN may be: the SAN alone, critical */
	char longname[260];
	memset(longname, 'a', 63);
	memcpy(longname + 63, ".example.com", 13);
	assert_int_equal(
		ca_leaf(ca, longname, strlen(longname), now, &leaf, &key, err, sizeof(err)), 0);
	assert_true(test_critical(leaf, NID_subject_alt_name));
	assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(leaf)), 0);
	test_verify_chain(ca_cert, leaf, longname, false, now);

	EVP_PKEY_free(ca_key);
	X509_free(ca_cert);
	ca_release(ca);
}

/* A host's second request makes nothing, however the host is spelled. */
static void test_leaf_cache(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], err[256];
	struct ca *ca = test_load(test_make(d, "ca", dir));
	time_t now = time(NULL);
	X509 *first, *leaf;
	EVP_PKEY *first_key, *key;
	static const char *const same[] = { "api.example.com", "API.Example.COM",
					    "api.example.com." };
	static const char *const same_ip[] = { "::1", "[::1]", "0:0::1", "0000::0001" };

	assert_int_equal(
		ca_leaf(ca, "api.example.com", 15, now, &first, &first_key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 1);
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		assert_int_equal(ca_leaf(ca, same[i], strlen(same[i]), now + 60, &leaf, &key, err,
					 sizeof(err)),
				 0);
		assert_ptr_equal(leaf, first);
		assert_ptr_equal(key, first_key);
	}
	assert_int_equal(ca_leaves_made(ca), 1);
	for (size_t i = 0; i < sizeof(same_ip) / sizeof(same_ip[0]); i++) {
		assert_int_equal(ca_leaf(ca, same_ip[i], strlen(same_ip[i]), now, &leaf, &key, err,
					 sizeof(err)),
				 0);
		if (i == 0)
			first = leaf;
		assert_ptr_equal(leaf, first);
	}
	assert_int_equal(ca_leaves_made(ca), 2);
	/* another host is another leaf */
	assert_int_equal(ca_leaf(ca, "api.example.org", 15, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 3);
	/* a second holder keeps it alive */
	ca_hold(ca);
	ca_release(ca);
	assert_int_equal(ca_leaf(ca, "api.example.org", 15, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 3);
	ca_release(ca);
}

/* One key pair for all the leaves of a loaded CA, so that a new host costs a
 * signature only; a load (a start or a reload) makes a new one. */
static void test_leaf_key_per_ca(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], err[256];
	struct ca *ca = test_load(test_make(d, "ca", dir));
	struct ca *reloaded = test_load(dir);
	time_t now = time(NULL);
	X509 *first, *second, *other;
	EVP_PKEY *first_key, *second_key, *other_key;

	assert_int_equal(
		ca_leaf(ca, "a.example.com", 13, now, &first, &first_key, err, sizeof(err)), 0);
	assert_true(test_is_p256(first_key));
	assert_int_equal(
		ca_leaf(ca, "b.example.com", 13, now, &second, &second_key, err, sizeof(err)), 0);
	assert_ptr_not_equal(first, second);
	assert_ptr_equal(second_key, first_key);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(first), X509_get0_pubkey(second)), 1);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(second), second_key), 1);
	assert_int_equal(
		ca_leaf(reloaded, "a.example.com", 13, now, &other, &other_key, err, sizeof(err)),
		0);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(other), other_key), 1);
	assert_int_not_equal(EVP_PKEY_eq(other_key, first_key), 1);
	ca_release(reloaded);
	ca_release(ca);
}

/* A leaf is replaced once less than a third of its validity is left. */
static void test_leaf_renewal(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], path[PATH_MAX], err[256];
	struct ca *ca = test_load(test_make(d, "ca", dir));
	X509 *ca_cert = test_read_cert(test_path(path, dir, "ca.pem"));
	EVP_PKEY *ca_key = X509_get_pubkey(ca_cert);
	time_t now = time(NULL), later;
	X509 *leaf;
	EVP_PKEY *key;

	assert_int_equal(ca_leaf(ca, "example.com", 11, now, &leaf, &key, err, sizeof(err)), 0);
	/* 30 days from an hour ago: a third is 10 days, reached at 20 days
	 * less an hour from now */
	later = now + 20 * DAY - 3600 - 60;
	assert_int_equal(ca_leaf(ca, "example.com", 11, later, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 1);
	later = now + 20 * DAY;
	assert_int_equal(ca_leaf(ca, "example.com", 11, later, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 2);
	test_check_leaf(ca_cert, ca_key, leaf, key, "example.com", GEN_DNS, "example.com", later);
	/* the renewed one is cached in turn */
	assert_int_equal(ca_leaf(ca, "EXAMPLE.com", 11, later + 1, &leaf, &key, err, sizeof(err)),
			 0);
	assert_int_equal(ca_leaves_made(ca), 2);
	/* a clock set back before the leaf starts gets a new one */
	assert_int_equal(ca_leaf(ca, "example.com", 11, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), 3);
	EVP_PKEY_free(ca_key);
	X509_free(ca_cert);
	ca_release(ca);
}

/* A leaf never outlives its CA nor starts before it; one cut at the CA's end
 * is kept until then; an expired CA issues nothing. */
static void test_leaf_within_ca(void **state)
{
	struct test_dir *d = *state;
	char cert[PATH_MAX], key[PATH_MAX], err[256];
	EVP_PKEY *ec = EVP_EC_gen("P-256");
	time_t now = time(NULL), ca_end = now + 5 * DAY;
	struct ca *ca;
	X509 *leaf, *ca_cert, *first;
	EVP_PKEY *leaf_key;

	test_path(cert, d->path, "short.pem");
	test_path(key, d->path, "short-key.pem");
	test_write_key(key, ec, NULL);
	test_write_cert(cert, ec, "critical,CA:TRUE", "critical,keyCertSign,cRLSign", ca_end);
	ca = ca_load(cert, key, NULL, err, sizeof(err));
	assert_non_null(ca);
	assert_int_equal(ca_leaf(ca, "example.com", 11, now, &leaf, &leaf_key, err, sizeof(err)),
			 0);
	assert_int_equal(test_time(X509_get0_notAfter(leaf)), ca_end);
	ca_cert = test_read_cert(cert);
	test_verify_chain(ca_cert, leaf, "example.com", false, now);
	X509_free(ca_cert);
	assert_int_equal(ca_leaf(ca, "example.org", 11, ca_end, &leaf, &leaf_key, err, sizeof(err)),
			 -1);
	assert_non_null(strstr(err, "expired"));
	assert_int_equal(ERR_peek_error(), 0);
	ca_release(ca);

	/* a CA that began a minute ago and ends in two hours */
	test_write_cert_dated(cert, ec, "critical,CA:TRUE", "critical,keyCertSign,cRLSign",
			      now - 60, now + 7200);
	ca = ca_load(cert, key, NULL, err, sizeof(err));
	assert_non_null(ca);
	assert_int_equal(ca_leaf(ca, "example.com", 11, now, &leaf, &leaf_key, err, sizeof(err)),
			 0);
	assert_int_equal(test_time(X509_get0_notBefore(leaf)), now - 60);
	assert_int_equal(test_time(X509_get0_notAfter(leaf)), now + 7200);
	ca_cert = test_read_cert(cert);
	test_verify_chain(ca_cert, leaf, "example.com", false, now);
	X509_free(ca_cert);
	/* with a tenth of its validity left it is still the one: a new leaf
	 * would end at the same time */
	first = leaf;
	assert_int_equal(
		ca_leaf(ca, "example.com", 11, now + 6500, &leaf, &leaf_key, err, sizeof(err)), 0);
	assert_ptr_equal(leaf, first);
	assert_int_equal(ca_leaves_made(ca), 1);
	/* the clock set back before the CA began: refused, nothing signed */
	assert_int_equal(
		ca_leaf(ca, "example.org", 11, now - 120, &leaf, &leaf_key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not valid yet"));
	assert_int_equal(ca_leaves_made(ca), 1);
	ca_release(ca);
	EVP_PKEY_free(ec);
}

/* CA_LEAF_CACHE + 1 hosts: the least recently used one is dropped and made
 * again when asked for; the others are still there. */
static void test_leaf_lru(void **state)
{
	struct test_dir *d = *state;
	char dir[PATH_MAX], err[256], host[64];
	struct ca *ca = test_load(test_make(d, "ca", dir));
	time_t now = time(NULL);
	X509 *leaf;
	EVP_PKEY *key;

	for (int i = 0; i <= CA_LEAF_CACHE; i++) {
		snprintf(host, sizeof(host), "h%d.example.com", i);
		assert_int_equal(
			ca_leaf(ca, host, strlen(host), now, &leaf, &key, err, sizeof(err)), 0);
	}
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 1);
	/* h0 went when h1024 came; h1..h1024 are all kept, and asking for
	 * them in order leaves h1 the least recently used */
	for (int i = 1; i <= CA_LEAF_CACHE; i++) {
		snprintf(host, sizeof(host), "h%d.example.com", i);
		assert_int_equal(
			ca_leaf(ca, host, strlen(host), now, &leaf, &key, err, sizeof(err)), 0);
	}
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 1);
	assert_int_equal(ca_leaf(ca, "h0.example.com", 14, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 2);
	/* that dropped h1, and only h1 */
	for (int i = 2; i <= CA_LEAF_CACHE; i++) {
		snprintf(host, sizeof(host), "h%d.example.com", i);
		assert_int_equal(
			ca_leaf(ca, host, strlen(host), now, &leaf, &key, err, sizeof(err)), 0);
	}
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 2);
	assert_int_equal(ca_leaf(ca, "h1.example.com", 14, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 3);
	/* h0, used before h2..h1024, was the least recently used then */
	assert_int_equal(ca_leaf(ca, "h2.example.com", 14, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 3);
	assert_int_equal(ca_leaf(ca, "h0.example.com", 14, now, &leaf, &key, err, sizeof(err)), 0);
	assert_int_equal(ca_leaves_made(ca), CA_LEAF_CACHE + 4);
	ca_release(ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_make_and_load, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_load_forbids_dumps, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_make_refuses, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_load_refusals, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_names_and_addresses, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_cache, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_key_per_ca, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_renewal, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_within_ca, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_leaf_lru, test_setup, test_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
