#ifndef RETRYPROXY_TEST_CONFIG_FIXTURES_H
#define RETRYPROXY_TEST_CONFIG_FIXTURES_H

/*
 * The config fixtures as the tests load them: a copy of tests/config/good and
 * tests/config/bad in a scratch directory, which becomes the working
 * directory, beside the CA files the intercept fixtures name. No key is
 * committed and git keeps no 0600 or 0644, so they are made here:
 *   ca/        ca_make: a good CA
 *   ca-open/   ca_make, then the key chmod 0644
 *   ca-other/  ca_make: a second CA, whose key matches no other certificate
 *   leaf/      cert.pem and key.pem (0600): a certificate ca/ issued, no CA
 * Fixtures are still named "good/NAME.yaml" and "bad/NAME.yaml", so the file
 * names in messages are the same as from the source tree.
 */

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/pem.h>

#include "ca.h"

static char test_fixtures_dir[64];

/* Copy every regular file of from/name into name/ under the working
 * directory. */
static void test_fixtures_copy_dir(const char *from, const char *name)
{
	char src[PATH_MAX], dst[PATH_MAX], buf[8192];
	DIR *d;
	struct dirent *e;

	assert_true(snprintf(src, sizeof(src), "%s/%s", from, name) < (int)sizeof(src));
	assert_int_equal(mkdir(name, 0755), 0);
	d = opendir(src);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		FILE *in, *out;
		size_t n;

		assert_true(snprintf(src, sizeof(src), "%s/%s/%s", from, name, e->d_name) <
			    (int)sizeof(src));
		if (stat(src, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		assert_true(snprintf(dst, sizeof(dst), "%s/%s", name, e->d_name) <
			    (int)sizeof(dst));
		in = fopen(src, "rb");
		out = fopen(dst, "wb");
		assert_non_null(in);
		assert_non_null(out);
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			assert_int_equal(fwrite(buf, 1, n, out), n);
		fclose(in);
		assert_int_equal(fclose(out), 0);
	}
	closedir(d);
}

/* ca_make into the working directory's dir. */
static void test_fixtures_make_ca(const char *dir)
{
	char err[256];

	if (ca_make(dir, err, sizeof(err)) != 0)
		fail_msg("ca_make %s: %s", dir, err);
}

/* leaf/: a certificate and key that ca/ issued, which are no CA. */
static void test_fixtures_make_leaf(void)
{
	char err[256];
	enum ca_load_failure failure;
	struct ca *ca = ca_load("ca/ca.pem", "ca/ca-key.pem", &failure, err, sizeof(err));
	X509 *cert;
	EVP_PKEY *key;
	FILE *f;

	if (ca == NULL)
		fail_msg("ca_load ca/: %s", err);
	assert_int_equal(
		ca_leaf(ca, "leaf.example.com", 16, time(NULL), &cert, &key, err, sizeof(err)), 0);
	assert_int_equal(mkdir("leaf", 0755), 0);
	f = fopen("leaf/cert.pem", "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, cert), 1);
	assert_int_equal(fclose(f), 0);
	f = fopen("leaf/key.pem", "w");
	assert_non_null(f);
	assert_int_equal(chmod("leaf/key.pem", 0600), 0);
	assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	assert_int_equal(fclose(f), 0);
	ca_release(ca);
}

/* Build the scratch copy from $CONFIG_FIXTURES and go there. */
static void test_fixtures_enter(void)
{
	const char *from = getenv("CONFIG_FIXTURES");
	char source[PATH_MAX];

	assert_non_null(from);
	/* the copy is made from the scratch directory: the source must be
	 * absolute */
	assert_non_null(realpath(from, source));
	snprintf(test_fixtures_dir, sizeof(test_fixtures_dir), "/tmp/test_config.XXXXXX");
	assert_non_null(mkdtemp(test_fixtures_dir));
	assert_int_equal(chdir(test_fixtures_dir), 0);
	test_fixtures_copy_dir(source, "good");
	test_fixtures_copy_dir(source, "bad");
	test_fixtures_make_ca("ca");
	test_fixtures_make_ca("ca-open");
	assert_int_equal(chmod("ca-open/ca-key.pem", 0644), 0);
	test_fixtures_make_ca("ca-other");
	test_fixtures_make_leaf();
}

static int test_fixtures_remove_one(const char *path, const struct stat *st, int flag,
				    struct FTW *ftw)
{
	return remove(path);
}

/* Leave the scratch copy and remove it. */
static void test_fixtures_leave(void)
{
	assert_int_equal(chdir("/"), 0);
	nftw(test_fixtures_dir, test_fixtures_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
