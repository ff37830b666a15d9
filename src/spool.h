#ifndef RETRYPROXY_SPOOL_H
#define RETRYPROXY_SPOOL_H

/*
 * A request body kept on disk (limits.spool_max): an unlinked temporary file
 * in spool_dir, written as the body arrives and read back piece by piece on
 * every try. The file has no name from the moment it exists, so it goes
 * away with its descriptor: when the exchange ends, and with the process
 * whatever way it ends.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct evbuffer;
struct event_base;
struct spool;

/* What all the spool files of a process hold now, for limits.spool_total:
 * a file counted in it adds what it writes (or its claim, while larger),
 * and gives all of it back when it is closed. One, in struct proxy,
 * whatever the config. */
struct spool_usage {
	uint64_t bytes; /* in spool files now */
};

/* A new empty spool file in dir: O_TMPFILE where the file system has it,
 * else a named file unlinked at once. NULL with errno set when neither can
 * be made. */
struct spool *spool_open(const char *dir);

/* The fallback alone: mkstemp in dir and unlink. The descriptor, or -1 with
 * errno set. For file systems without O_TMPFILE, and for tests. */
int spool_create_named(const char *dir);

/* Append what buf holds to the file, draining what was written. Returns 0,
 * or -1 with errno set (ENOSPC, EFBIG, EIO...) and the bytes not written
 * left in buf; after a failure the spool takes no more. */
int spool_write(struct spool *spool, struct evbuffer *buf);

/* Bytes in the file. */
uint64_t spool_length(const struct spool *spool);

/* Add up to max bytes of the file from offset to out, read now (no
 * mapping: a disk error is an error, not a signal). Returns the bytes
 * added, or -1 with errno set. */
ssize_t spool_read(struct spool *spool, struct evbuffer *out, uint64_t offset, size_t max);

/* Close the file, which removes it (and its bytes from its usage). NULL is
 * allowed. */
void spool_close(struct spool *spool);

/* Closing a file gives all its blocks and cached pages back in that one
 * call: on a local disk some 50 ms per GiB still in the page cache, and
 * several times that for what was written out already. A file larger than
 * this is given back this much at a time instead, a step per pass of the
 * event loop (spool_close_in_steps()). */
#define SPOOL_RELEASE_STEP (16 * 1024 * 1024)

/* The files closed in steps that still hold blocks: one per process, on its
 * event loop. */
struct spool_reaper;

struct spool_reaper *spool_reaper_new(struct event_base *base);

/* Close at once every file still held (the process is ending). */
void spool_reaper_free(struct spool_reaper *reaper);

/* spool_close(), for the event loop: a file over SPOOL_RELEASE_STEP is
 * shortened by that much on each pass of reaper's loop and closed once that
 * is left, so that no pass stalls for the whole file. Its bytes leave its
 * usage as they leave the disk (a claim past them at once); the usage must
 * outlive the reaper. NULL is allowed. */
void spool_close_in_steps(struct spool *spool, struct spool_reaper *reaper);

/* Count the file's bytes in usage (NULL: nowhere) from now on, those
 * written already included. Counting it again in the same usage changes
 * nothing. */
void spool_count_in(struct spool *spool, struct spool_usage *usage);

/* Count the file as at least bytes long from now on (a body's announced
 * length, so that bodies arriving side by side cannot together pass a cap
 * each fits in alone); 0 drops the claim, leaving the bytes written. */
void spool_claim(struct spool *spool, uint64_t bytes);

/* Take bytes of disk for the file from its start now, its length
 * unchanged (fallocate, FALLOC_FL_KEEP_SIZE): a body of known length that
 * the disk cannot hold is known at once, not written until the disk is
 * full. 0, also where the file system cannot reserve (its writes then find
 * a full disk as before) and on tmpfs, where only its free space is checked
 * (reserving there zeroes memory in one call), or -1 with errno set
 * (ENOSPC, EDQUOT, EFBIG...).
 * What is not written comes free when a smaller claim is made
 * (spool_claim()) and when the file is closed. */
int spool_reserve(struct spool *spool, uint64_t bytes);

/* How much writing more bytes would add to what the file counts: what
 * goes past its claim. */
uint64_t spool_growth(const struct spool *spool, uint64_t more);

/* May more bytes go to spool files without passing cap (0: no cap)? */
bool spool_usage_allows(const struct spool_usage *usage, uint64_t cap, uint64_t more);

/* Can a spool file be made in dir now, and a byte written to it? 0, or -1
 * with errno set. */
int spool_check_dir(const char *dir);

#endif
