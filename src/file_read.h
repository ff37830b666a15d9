#ifndef RETRYPROXY_FILE_READ_H
#define RETRYPROXY_FILE_READ_H

/*
 * A whole file read into memory, for what is read at start and at a reload
 * only (the config, a CA file, resolv.conf): blocking reads, never on a
 * request's path.
 */

#include <stddef.h>
#include <stdio.h>

/* What is left of f, at most max bytes, in a buffer of its own with a NUL
 * after them (not counted in *len); NULL, with errno set, when a read
 * fails. */
char *file_read_all(FILE *f, size_t max, size_t *len);

#endif
