/* Unit tests for spool.c: nameless 0600 files, written from evbuffers and
 * read back in pieces, what a write that cannot finish leaves, and large
 * files given back a step per event loop pass when closed. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>
#include <linux/magic.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "spool.h"

static char test_dir[PATH_MAX];

static int test_setup(void **state)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/test_spool.XXXXXX");
	assert_non_null(mkdtemp(test_dir));
	return 0;
}

static int test_teardown(void **state)
{
	assert_int_equal(rmdir(test_dir), 0);
	return 0;
}

/* Names in the test directory. */
static size_t test_dir_entries(void)
{
	DIR *d = opendir(test_dir);
	struct dirent *e;
	size_t n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* This process's open files in dir; the last one's status in *st. */
static size_t test_open_files_in(const char *dir, struct stat *st)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	size_t n = 0, dir_len = strlen(dir);

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX], link[PATH_MAX];
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (strncmp(link, dir, dir_len) == 0 && link[dir_len] == '/') {
			n++;
			assert_int_equal(stat(path, st), 0);
		}
	}
	closedir(d);
	return n;
}

/* This process's open files in the test directory. */
static size_t test_open_files(struct stat *st)
{
	return test_open_files_in(test_dir, st);
}

/* bytes of a pattern that shows a shifted or repeated piece */
static void test_pattern(unsigned char *p, size_t n, size_t from)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((from + i) * 7 + (from + i) / 251);
}

static void test_write_and_read_back(void **state)
{
	enum { TOTAL = 300 * 1000 };
	static unsigned char data[TOTAL];
	struct spool *spool = spool_open(test_dir);
	struct evbuffer *in = evbuffer_new();
	struct evbuffer *out = evbuffer_new();
	struct stat st;
	uint64_t offset = 0;

	assert_non_null(spool);
	test_pattern(data, TOTAL, 0);
	/* in several writes, each from several buffer pieces */
	for (size_t at = 0; at < TOTAL; at += 50 * 1000) {
		evbuffer_add(in, data + at, 20 * 1000);
		evbuffer_add(in, data + at + 20 * 1000, 30 * 1000);
		assert_int_equal(spool_write(spool, in), 0);
		assert_int_equal(evbuffer_get_length(in), 0);
	}
	assert_int_equal(spool_length(spool), TOTAL);
	/* one open file, no name, owner-only */
	assert_int_equal(test_dir_entries(), 0);
	assert_int_equal(test_open_files(&st), 1);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_nlink, 0);
	assert_int_equal(st.st_size, TOTAL);
	/* back in pieces that do not divide it */
	while (offset < TOTAL) {
		ssize_t n = spool_read(spool, out, offset, 64 * 1024);

		assert_true(n > 0);
		offset += (uint64_t)n;
	}
	assert_int_equal(spool_read(spool, out, offset, 64 * 1024), 0);
	assert_int_equal(evbuffer_get_length(out), TOTAL);
	assert_memory_equal(evbuffer_pullup(out, -1), data, TOTAL);
	/* from the middle, as often as asked */
	evbuffer_drain(out, TOTAL);
	assert_int_equal(spool_read(spool, out, 1000, 10), 10);
	assert_int_equal(spool_read(spool, out, TOTAL - 5, 10), 5);
	assert_memory_equal(evbuffer_pullup(out, 10), data + 1000, 10);
	assert_memory_equal(evbuffer_pullup(out, -1) + 10, data + TOTAL - 5, 5);
	spool_close(spool);
	assert_int_equal(test_open_files(&st), 0);
	evbuffer_free(in);
	evbuffer_free(out);
}

/* The fallback for file systems without O_TMPFILE leaves no name either. */
static void test_named_fallback(void **state)
{
	struct stat st;
	int fd = spool_create_named(test_dir);

	assert_true(fd >= 0);
	assert_int_equal(test_dir_entries(), 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_nlink, 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
}

/* A file size limit stops a write part way: what was written stays, the
 * rest stays in the buffer, and the spool takes nothing more. */
static void test_write_failure(void **state)
{
	struct spool *spool = spool_open(test_dir);
	struct evbuffer *in = evbuffer_new();
	struct evbuffer *out = evbuffer_new();
	struct rlimit before, small;
	static unsigned char data[4000];
	void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
	int rc, error;

	assert_non_null(spool);
	test_pattern(data, sizeof(data), 0);
	evbuffer_add(in, data, sizeof(data));
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &before), 0);
	small = before;
	small.rlim_cur = 1000;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	rc = spool_write(spool, in);
	error = errno;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &before), 0);
	signal(SIGXFSZ, old);
	assert_int_equal(rc, -1);
	assert_int_equal(error, EFBIG);
	assert_int_equal(spool_length(spool), 1000);
	assert_int_equal(evbuffer_get_length(in), 3000);
	assert_memory_equal(evbuffer_pullup(in, -1), data + 1000, 3000);
	/* no more, even with room again: the file holds a prefix only */
	assert_int_equal(spool_write(spool, in), -1);
	assert_int_equal(spool_length(spool), 1000);
	assert_int_equal(spool_read(spool, out, 0, 4000), 1000);
	assert_memory_equal(evbuffer_pullup(out, -1), data, 1000);
	spool_close(spool);
	evbuffer_free(in);
	evbuffer_free(out);
}

/* spool_usage: what counted files hold, added as they are written (a
 * write that stops part way counts what it wrote), taken back whole when
 * each is closed; files not counted in it change nothing. */
static void test_usage(void **state)
{
	struct spool_usage usage = { 0 };
	struct spool *a = spool_open(test_dir);
	struct spool *b = spool_open(test_dir);
	struct spool *loose = spool_open(test_dir);
	struct evbuffer *in = evbuffer_new();
	static unsigned char data[5000];
	struct rlimit before, small;
	void (*old)(int);

	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(loose);
	test_pattern(data, sizeof(data), 0);

	/* bytes written before the file is counted come in with it */
	evbuffer_add(in, data, 300);
	assert_int_equal(spool_write(a, in), 0);
	spool_count_in(a, &usage);
	assert_int_equal(usage.bytes, 300);
	spool_count_in(a, &usage); /* again: nothing more */
	assert_int_equal(usage.bytes, 300);
	evbuffer_add(in, data, 1200);
	assert_int_equal(spool_write(a, in), 0);
	assert_int_equal(usage.bytes, 1500);

	spool_count_in(b, &usage);
	evbuffer_add(in, data, 2000);
	assert_int_equal(spool_write(b, in), 0);
	assert_int_equal(usage.bytes, 3500);
	evbuffer_add(in, data, 700);
	assert_int_equal(spool_write(loose, in), 0);
	assert_int_equal(usage.bytes, 3500);

	/* a write cut short by a file size limit counts what reached the file */
	old = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &before), 0);
	small = before;
	small.rlim_cur = 2500;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	evbuffer_add(in, data, 1000);
	assert_int_equal(spool_write(b, in), -1);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &before), 0);
	signal(SIGXFSZ, old);
	assert_int_equal(spool_length(b), 2500);
	assert_int_equal(usage.bytes, 4000);
	evbuffer_drain(in, evbuffer_get_length(in));

	/* the cap: 0 is none; more fits while the sum stays within it */
	assert_true(spool_usage_allows(&usage, 0, UINT64_MAX));
	assert_true(spool_usage_allows(&usage, 5000, 1000));
	assert_false(spool_usage_allows(&usage, 5000, 1001));
	assert_true(spool_usage_allows(&usage, 4000, 0));
	assert_false(spool_usage_allows(&usage, 3999, 0));
	assert_false(spool_usage_allows(&usage, 5000, UINT64_MAX)); /* no wrap */

	/* closing gives a file's bytes back, all of them */
	spool_close(a);
	assert_int_equal(usage.bytes, 2500);
	spool_close(loose);
	assert_int_equal(usage.bytes, 2500);
	spool_close(b);
	assert_int_equal(usage.bytes, 0);
	assert_true(spool_usage_allows(&usage, 1, 1));
	evbuffer_free(in);
}

static void test_check_dir(void **state)
{
	char missing[PATH_MAX + 16];

	assert_int_equal(spool_check_dir(test_dir), 0);
	assert_int_equal(test_dir_entries(), 0);
	snprintf(missing, sizeof(missing), "%s/missing", test_dir);
	errno = 0;
	assert_int_equal(spool_check_dir(missing), -1);
	assert_int_equal(errno, ENOENT);
	assert_null(spool_open(missing));
	spool_close(NULL);
}

/* A spool of n bytes (zeros, in 1 MiB writes), counted in usage. */
static struct spool *test_spool_of(uint64_t n, struct spool_usage *usage)
{
	static const char zeros[1024 * 1024];
	struct spool *spool = spool_open(test_dir);
	struct evbuffer *in = evbuffer_new();

	assert_non_null(spool);
	spool_count_in(spool, usage);
	while (n > 0) {
		size_t piece = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);

		evbuffer_add_reference(in, zeros, piece, NULL, NULL);
		assert_int_equal(spool_write(spool, in), 0);
		n -= piece;
	}
	evbuffer_free(in);
	return spool;
}

/* A file over SPOOL_RELEASE_STEP closed in steps: the closing call frees
 * none of its blocks; each pass of the loop shortens it by one step at
 * most, and the last one closes it. Its usage counts what it still holds
 * on the disk (spool_total caps that): a claim past its bytes comes free at
 * once, each step's bytes as the step gives them back. One of a step or
 * less is closed at once. */
static void test_close_in_steps(void **state)
{
	const uint64_t total = 2 * (uint64_t)SPOOL_RELEASE_STEP + 4096;
	struct event_base *base = event_base_new();
	struct spool_reaper *reaper = spool_reaper_new(base);
	struct spool_usage usage = { 0 };
	struct spool *spool = test_spool_of(total, &usage);
	struct stat st;
	uint64_t size = total;
	unsigned passes = 0;

	assert_int_equal(usage.bytes, total);
	/* a claim past the bytes written comes free with the close */
	spool_claim(spool, total + 4096);
	assert_int_equal(usage.bytes, total + 4096);
	spool_close_in_steps(spool, reaper);
	assert_int_equal(usage.bytes, total);
	assert_int_equal(test_open_files(&st), 1);
	assert_int_equal((uint64_t)st.st_size, total);
	while (test_open_files(&st) == 1) {
		assert_true(passes++ < 10);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		if (test_open_files(&st) == 1) {
			assert_true((uint64_t)st.st_size < size);
			assert_true(size - (uint64_t)st.st_size <= SPOOL_RELEASE_STEP);
			size = (uint64_t)st.st_size;
			assert_int_equal(usage.bytes, size);
		}
	}
	assert_int_equal(usage.bytes, 0);
	assert_true(size <= SPOOL_RELEASE_STEP);
	assert_int_equal(passes, 3);
	/* a step or less: closed in the call */
	spool = test_spool_of(SPOOL_RELEASE_STEP, &usage);
	spool_close_in_steps(spool, reaper);
	assert_int_equal(test_open_files(&st), 0);
	assert_int_equal(usage.bytes, 0);
	spool_close_in_steps(NULL, reaper);
	/* two at once: one step per pass in all, the first handed over first */
	spool_close_in_steps(test_spool_of(total, &usage), reaper);
	spool_close_in_steps(test_spool_of(total, &usage), reaper);
	assert_int_equal(usage.bytes, 2 * total);
	for (passes = 0; test_open_files(&st) > 0; passes++) {
		assert_true(passes < 10);
		if (passes < 3)
			assert_int_equal(test_open_files(&st), 2);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		assert_int_equal(usage.bytes,
				 passes < 2   ? 2 * total - (passes + 1) * SPOOL_RELEASE_STEP
				 : passes < 5 ? total - (passes - 2) * SPOOL_RELEASE_STEP
					      : 0);
	}
	assert_int_equal(passes, 6);
	/* the reaper's end closes what it still holds, and uncounts it */
	spool = test_spool_of(total, &usage);
	spool_close_in_steps(spool, reaper);
	assert_int_equal(test_open_files(&st), 1);
	assert_int_equal(usage.bytes, total);
	spool_reaper_free(reaper);
	assert_int_equal(test_open_files(&st), 0);
	assert_int_equal(usage.bytes, 0);
	event_base_free(base);
}

/* A reservation takes the disk at once without lengthening the file (what
 * is read back is what was written), and what was not written is given
 * back when the claim is dropped. Skipped where the file system cannot
 * reserve (spool_reserve() then does nothing). */
static void test_reserve(void **state)
{
	const uint64_t reserve = 8 * 1024 * 1024;
	struct spool_usage usage = { 0 };
	struct spool *spool = test_spool_of(4096, &usage);
	struct evbuffer *out = evbuffer_new();
	struct stat st;

	spool_claim(spool, reserve);
	assert_int_equal(spool_reserve(spool, reserve), 0);
	assert_int_equal(test_open_files(&st), 1);
	assert_int_equal(st.st_size, 4096);
	if ((uint64_t)st.st_blocks * 512 < reserve) {
		spool_close(spool);
		evbuffer_free(out);
		skip();
	}
	assert_int_equal(usage.bytes, reserve);
	assert_int_equal(spool_length(spool), 4096);
	assert_int_equal(spool_read(spool, out, 0, 2 * reserve), 4096);
	assert_int_equal(spool_read(spool, out, 4096, reserve), 0);
	/* the claim dropped: the disk past what was written comes free */
	spool_claim(spool, 0);
	assert_int_equal(usage.bytes, 4096);
	assert_int_equal(test_open_files(&st), 1);
	assert_int_equal(st.st_size, 4096);
	assert_true((uint64_t)st.st_blocks * 512 < 1024 * 1024);
	spool_close(spool);
	assert_int_equal(usage.bytes, 0);
	evbuffer_free(out);
}

/* On tmpfs a reservation is memory pages, each allocated and zeroed in the
 * one fallocate call (some 250 ms per GiB, the event loop stalled), and
 * given back as slowly: nothing is taken there, the free space is checked
 * instead, so a body that cannot fit is still refused at once. */
static void test_reserve_tmpfs(void **state)
{
	char dir[] = "/dev/shm/test_spool.XXXXXX";
	struct spool_usage usage = { 0 };
	struct statfs fs;
	struct spool *spool;
	struct stat st;
	uint64_t free_bytes, bytes;

	if (statfs("/dev/shm", &fs) < 0 || fs.f_type != TMPFS_MAGIC || fs.f_blocks == 0 ||
	    mkdtemp(dir) == NULL)
		skip();
	free_bytes = (uint64_t)fs.f_bavail * fs.f_bsize;
	bytes = free_bytes / 2 < 512 * 1024 * 1024 ? free_bytes / 2 : 512 * 1024 * 1024;
	spool = spool_open(dir);
	assert_non_null(spool);
	spool_count_in(spool, &usage);
	spool_claim(spool, bytes);
	assert_int_equal(spool_reserve(spool, bytes), 0);
	assert_int_equal(test_open_files_in(dir, &st), 1);
	assert_true((uint64_t)st.st_blocks * 512 < 1024 * 1024);
	/* more than is free: refused, nothing taken */
	errno = 0;
	assert_int_equal(spool_reserve(spool, free_bytes + 64 * 1024 * 1024), -1);
	assert_int_equal(errno, ENOSPC);
	assert_int_equal(test_open_files_in(dir, &st), 1);
	assert_true((uint64_t)st.st_blocks * 512 < 1024 * 1024);
	spool_close(spool);
	assert_int_equal(rmdir(dir), 0);
}

/* Files handed over one after another are given back in that order, the
 * first in first out: a file that ends early does not wait behind those
 * that ended after it, also when more come while some are given back (the
 * reaper's list then grows). Each counts in a usage of its own, so which
 * one a pass shortened shows. */
static void test_close_in_steps_in_order(void **state)
{
	/* two passes each: a step, then the close */
	const uint64_t size = (uint64_t)SPOOL_RELEASE_STEP + 4096;
	struct event_base *base = event_base_new();
	struct spool_reaper *reaper = spool_reaper_new(base);
	struct spool_usage usage[10] = { { 0 } };
	const size_t files = sizeof(usage) / sizeof(usage[0]);
	size_t handed = 0, done = 0;
	unsigned passes = 0;
	struct stat st;

	while (done < files) {
		/* eight at first; the last two once the first is closed */
		while (handed < (done == 0 ? 8 : files))
			spool_close_in_steps(test_spool_of(size, &usage[handed++]), reaper);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		passes++;
		/* the first not done yet is the one shortened; those after it,
		 * handed over later, untouched */
		for (size_t i = 0; i < handed; i++)
			assert_int_equal(usage[i].bytes, i < done     ? 0
							 : i > done   ? size
							 : passes % 2 ? size - SPOOL_RELEASE_STEP
								      : 0);
		if (passes % 2 == 0)
			done++;
		assert_int_equal(test_open_files(&st), handed - done);
	}
	assert_int_equal(passes, 2 * files);
	spool_reaper_free(reaper);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_and_read_back),
		cmocka_unit_test(test_named_fallback),
		cmocka_unit_test(test_write_failure),
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_check_dir),
		cmocka_unit_test(test_close_in_steps),
		cmocka_unit_test(test_close_in_steps_in_order),
		cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_reserve_tmpfs),
	};

	return cmocka_run_group_tests(tests, test_setup, test_teardown);
}
