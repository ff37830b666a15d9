#include "trust_default.h"

#include <sys/stat.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "xmalloc.h"

/* The trust file and up to this many directories of a colon-separated
 * SSL_CERT_DIR are watched; a longer list is read again every time. */
#define TRUST_DEFAULT_MAX_PATHS 8

/* What a path looked like: a change in any of these means new content. */
struct trust_path_mark {
	bool present;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct trust_marks {
	struct trust_path_mark paths[TRUST_DEFAULT_MAX_PATHS];
	size_t count;
	bool complete; /* false: more paths than are watched */
};

struct trust_default {
	X509_STORE *store; /* NULL until first read */
	struct trust_marks marks;
};

struct trust_default *trust_default_new(void)
{
	return xcalloc(1, sizeof(struct trust_default));
}

void trust_default_free(struct trust_default *trust)
{
	if (trust == NULL)
		return;
	X509_STORE_free(trust->store);
	free(trust);
}

static void trust_mark_path(struct trust_marks *marks, const char *path, size_t len)
{
	struct trust_path_mark *m;
	char name[4096];
	struct stat st;

	if (marks->count == TRUST_DEFAULT_MAX_PATHS || len >= sizeof(name)) {
		marks->complete = false;
		return;
	}
	m = &marks->paths[marks->count++];
	memset(m, 0, sizeof(*m));
	memcpy(name, path, len);
	name[len] = '\0';
	/* stat follows links: a bundle replaced behind its symlink is seen */
	if (stat(name, &st) != 0)
		return;
	m->present = true;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->size = st.st_size;
	m->mtime = st.st_mtim;
}

/* The paths OpenSSL reads its defaults from, as it picks them. */
static void trust_marks_now(struct trust_marks *marks)
{
	const char *file = getenv(X509_get_default_cert_file_env());
	const char *dirs = getenv(X509_get_default_cert_dir_env());
	const char *p;

	memset(marks, 0, sizeof(*marks));
	marks->complete = true;
	if (file == NULL)
		file = X509_get_default_cert_file();
	if (dirs == NULL)
		dirs = X509_get_default_cert_dir();
	trust_mark_path(marks, file, strlen(file));
	for (p = dirs;;) {
		const char *end = strchr(p, ':');
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p);

		if (len > 0)
			trust_mark_path(marks, p, len);
		if (end == NULL)
			break;
		p = end + 1;
	}
}

static bool trust_marks_same(const struct trust_marks *a, const struct trust_marks *b)
{
	size_t i;

	if (!a->complete || !b->complete || a->count != b->count)
		return false;
	for (i = 0; i < a->count; i++) {
		const struct trust_path_mark *x = &a->paths[i], *y = &b->paths[i];

		if (x->present != y->present || x->dev != y->dev || x->ino != y->ino ||
		    x->size != y->size || x->mtime.tv_sec != y->mtime.tv_sec ||
		    x->mtime.tv_nsec != y->mtime.tv_nsec)
			return false;
	}
	return true;
}

X509_STORE *trust_default_get(struct trust_default *trust, char *err, size_t err_len)
{
	struct trust_marks now;
	X509_STORE *store;

	trust_marks_now(&now);
	if (trust->store != NULL && trust_marks_same(&trust->marks, &now))
		return trust->store;
	store = X509_STORE_new();
	if (store == NULL || X509_STORE_set_default_paths(store) != 1) {
		unsigned long e = ERR_get_error();
		char detail[256] = "";

		if (e != 0)
			ERR_error_string_n(e, detail, sizeof(detail));
		snprintf(err, err_len, "cannot load the default trust store%s%s",
			 e != 0 ? ": " : "", detail);
		ERR_clear_error();
		X509_STORE_free(store);
		return NULL;
	}
	/* contexts made from the old store keep it while they live */
	X509_STORE_free(trust->store);
	trust->store = store;
	trust->marks = now;
	return store;
}
