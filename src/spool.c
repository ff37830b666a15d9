#include "spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "xmalloc.h"

/* Buffer pieces per pwritev: what one client read brings is a few. */
#define SPOOL_WRITE_IOVECS 16

struct spool {
	int fd;
	uint64_t length;	   /* bytes written; the next write goes here */
	uint64_t claim;		   /* bytes counted before they are written (spool_claim()) */
	uint64_t reserved;	   /* disk taken from its start (spool_reserve()) */
	bool failed;		   /* a write failed: the file holds a prefix of the body */
	struct spool_usage *usage; /* where its bytes are counted, or NULL */
};

/* What the file counts in its usage: its bytes, or its claim while larger. */
static uint64_t spool_counted(const struct spool *spool)
{
	return spool->length > spool->claim ? spool->length : spool->claim;
}

int spool_create_named(const char *dir)
{
	static const char name[] = "/retryproxy-spool.XXXXXX";
	size_t dir_len = strlen(dir);
	char *path = xmalloc(dir_len + sizeof(name));
	mode_t old_mask;
	int fd, saved;

	memcpy(path, dir, dir_len);
	memcpy(path + dir_len, name, sizeof(name));
	/* mkstemp makes it 0600 already; the mask cannot widen that */
	old_mask = umask(077);
	fd = mkstemp(path);
	umask(old_mask);
	if (fd >= 0) {
		/* nameless from here on: nothing to clean up after a crash */
		if (unlink(path) < 0) {
			saved = errno;
			close(fd);
			fd = -1;
			errno = saved;
		} else if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
			saved = errno;
			close(fd);
			fd = -1;
			errno = saved;
		}
	}
	free(path);
	return fd;
}

struct spool *spool_open(const char *dir)
{
	struct spool *spool;
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	/* the file system (or an old kernel) has no O_TMPFILE */
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL))
		fd = spool_create_named(dir);
	if (fd < 0)
		return NULL;
	spool = xcalloc(1, sizeof(*spool));
	spool->fd = fd;
	return spool;
}

int spool_write(struct spool *spool, struct evbuffer *buf)
{
	if (spool->failed) {
		errno = EIO;
		return -1;
	}
	while (evbuffer_get_length(buf) > 0) {
		struct evbuffer_iovec vec[SPOOL_WRITE_IOVECS];
		struct iovec iov[SPOOL_WRITE_IOVECS];
		int count = evbuffer_peek(buf, -1, NULL, vec, SPOOL_WRITE_IOVECS);
		uint64_t before;
		ssize_t n;
		int i;

		if (count > SPOOL_WRITE_IOVECS)
			count = SPOOL_WRITE_IOVECS;
		for (i = 0; i < count; i++) {
			iov[i].iov_base = vec[i].iov_base;
			iov[i].iov_len = vec[i].iov_len;
		}
		n = pwritev(spool->fd, iov, count, (off_t)spool->length);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* a short write followed by one that writes nothing: the
			 * disk is full or the file size limit reached */
			if (n == 0)
				errno = ENOSPC;
			spool->failed = true;
			return -1;
		}
		evbuffer_drain(buf, (size_t)n);
		before = spool_counted(spool);
		spool->length += (uint64_t)n;
		if (spool->usage != NULL)
			spool->usage->bytes += spool_counted(spool) - before;
	}
	return 0;
}

uint64_t spool_length(const struct spool *spool)
{
	return spool->length;
}

ssize_t spool_read(struct spool *spool, struct evbuffer *out, uint64_t offset, size_t max)
{
	struct evbuffer_iovec vec;
	ssize_t n;

	if (offset >= spool->length)
		return 0;
	if (max > spool->length - offset)
		max = (size_t)(spool->length - offset);
	if (evbuffer_reserve_space(out, (ev_ssize_t)max, &vec, 1) < 1) {
		errno = ENOMEM;
		return -1;
	}
	do
		n = pread(spool->fd, vec.iov_base, max, (off_t)offset);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		/* the file is ours alone: shorter than written means it broke */
		if (n == 0)
			errno = EIO;
		return -1;
	}
	vec.iov_len = (size_t)n;
	evbuffer_commit_space(out, &vec, 1);
	return n;
}

void spool_close(struct spool *spool)
{
	if (spool == NULL)
		return;
	if (spool->usage != NULL)
		spool->usage->bytes -= spool_counted(spool);
	close(spool->fd);
	free(spool);
}

void spool_count_in(struct spool *spool, struct spool_usage *usage)
{
	if (spool->usage == usage)
		return;
	if (spool->usage != NULL)
		spool->usage->bytes -= spool_counted(spool);
	spool->usage = usage;
	if (usage != NULL)
		usage->bytes += spool_counted(spool);
}

int spool_reserve(struct spool *spool, uint64_t bytes)
{
	struct statfs fs;
	int r;

	if (bytes <= spool->reserved)
		return 0;
	/* tmpfs reserves by allocating and zeroing memory pages, all in the
	 * one call (some 250 ms per GiB, the loop stalled), and gives them
	 * back as slowly: there only what is free is checked, so a body that
	 * cannot fit still goes at once */
	if (fstatfs(spool->fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
		if (fs.f_blocks != 0 && bytes > spool->length &&
		    (uint64_t)fs.f_bavail * fs.f_bsize < bytes - spool->length) {
			errno = ENOSPC;
			return -1;
		}
		return 0;
	}
	do
		r = fallocate(spool->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		spool->reserved = bytes;
		return 0;
	}
	/* not posix_fallocate: where the file system cannot reserve, glibc
	 * writes the whole length instead, blocking the loop */
	if (errno == EOPNOTSUPP || errno == ENOSYS)
		return 0;
	return -1;
}

/* Give back the disk reserved past the bytes written once the claim no
 * longer counts it in spool_total. */
static void spool_unreserve(struct spool *spool)
{
	off_t end = (off_t)spool->length;

	if (spool->reserved <= spool->length || spool->claim > spool->length)
		return;
	/* shortening a file gives back every block past its new end, those
	 * reserved too; punching a hole past the end does nothing on ext4,
	 * and truncating to the same length nothing on tmpfs. Reads stop at
	 * the length written whatever happens here. */
	if (ftruncate(spool->fd, end + 1) == 0 && ftruncate(spool->fd, end) == 0)
		spool->reserved = spool->length;
}

void spool_claim(struct spool *spool, uint64_t bytes)
{
	uint64_t before = spool_counted(spool);

	spool->claim = bytes;
	if (spool->usage != NULL)
		spool->usage->bytes = spool->usage->bytes - before + spool_counted(spool);
	spool_unreserve(spool);
}

uint64_t spool_growth(const struct spool *spool, uint64_t more)
{
	uint64_t counted = spool_counted(spool);

	return spool->length + more > counted ? spool->length + more - counted : 0;
}

bool spool_usage_allows(const struct spool_usage *usage, uint64_t cap, uint64_t more)
{
	/* written so that no sum can wrap */
	return cap == 0 || (usage->bytes <= cap && more <= cap - usage->bytes);
}

int spool_check_dir(const char *dir)
{
	struct spool *spool = spool_open(dir);
	ssize_t n;
	int saved;

	if (spool == NULL)
		return -1;
	/* a byte too: a full disk (or a file size limit of 0) lets a file be
	 * made, an empty one, and fails only at its first write */
	do
		n = pwrite(spool->fd, "", 1, 0);
	while (n < 0 && errno == EINTR);
	saved = n == 0 ? ENOSPC : errno;
	spool_close(spool);
	if (n == 1)
		return 0;
	errno = saved;
	return -1;
}

/* A closed file still to be given back: its descriptor, what it holds, and
 * where that is counted until given back (spool_total caps the disk). */
struct spool_release {
	int fd;
	uint64_t length;
	struct spool_usage *usage; /* or NULL */
};

/* The file gives back bytes of the disk: they leave its usage. */
static void spool_release_gave(struct spool_release *file, uint64_t bytes)
{
	if (file->usage != NULL)
		file->usage->bytes -= bytes;
	file->length -= bytes;
}

/* The files waiting, first in first out: a ring of room places, count of
 * them from first on. */
struct spool_reaper {
	struct event *step; /* a timer of 0: the next step, on the next pass */
	struct spool_release *files;
	size_t first, count, room;
};

static struct spool_release *spool_reaper_file(struct spool_reaper *reaper, size_t i)
{
	return &reaper->files[(reaper->first + i) % reaper->room];
}

/* One step for the first file: shortened by SPOOL_RELEASE_STEP, or closed
 * once that much or less is left, the next one handed over then first (in
 * the order they came, so that none waits behind files that ended after
 * it). A file that cannot be shortened is closed whole, as spool_close()
 * would. Then the next pass, while any is left: a burst of ends cannot
 * make one pass long. */
static void spool_reaper_step(evutil_socket_t fd, short what, void *arg)
{
	struct spool_reaper *reaper = arg;
	struct spool_release *file = spool_reaper_file(reaper, 0);

	if (file->length > SPOOL_RELEASE_STEP &&
	    ftruncate(file->fd, (off_t)(file->length - SPOOL_RELEASE_STEP)) == 0) {
		spool_release_gave(file, SPOOL_RELEASE_STEP);
	} else {
		close(file->fd);
		spool_release_gave(file, file->length);
		reaper->first = (reaper->first + 1) % reaper->room;
		reaper->count--;
	}
	if (reaper->count > 0)
		event_add(reaper->step, &(struct timeval){ 0, 0 });
}

struct spool_reaper *spool_reaper_new(struct event_base *base)
{
	struct spool_reaper *reaper = xcalloc(1, sizeof(*reaper));

	reaper->step = evtimer_new(base, spool_reaper_step, reaper);
	return reaper;
}

void spool_reaper_free(struct spool_reaper *reaper)
{
	if (reaper == NULL)
		return;
	for (size_t i = 0; i < reaper->count; i++) {
		struct spool_release *file = spool_reaper_file(reaper, i);

		close(file->fd);
		spool_release_gave(file, file->length);
	}
	event_free(reaper->step);
	free(reaper->files);
	free(reaper);
}

void spool_close_in_steps(struct spool *spool, struct spool_reaper *reaper)
{
	if (spool == NULL || reaper == NULL || spool->length <= SPOOL_RELEASE_STEP) {
		spool_close(spool);
		return;
	}
	/* what it holds stays counted until given back: a reaper behind a
	 * burst of large ends must not let new files take the disk past
	 * spool_total; a claim past its bytes (and the disk reserved for
	 * it) comes free now */
	spool_claim(spool, 0);
	if (reaper->count == reaper->room) {
		/* a larger ring, its files in order from its start */
		size_t room = reaper->room > 0 ? reaper->room * 2 : 8;
		struct spool_release *files = xmalloc(room * sizeof(*files));

		for (size_t i = 0; i < reaper->count; i++)
			files[i] = *spool_reaper_file(reaper, i);
		free(reaper->files);
		reaper->files = files;
		reaper->room = room;
		reaper->first = 0;
	}
	reaper->count++;
	*spool_reaper_file(reaper, reaper->count - 1) =
		(struct spool_release){ spool->fd, spool->length, spool->usage };
	if (!evtimer_pending(reaper->step, NULL))
		event_add(reaper->step, &(struct timeval){ 0, 0 });
	free(spool);
}
