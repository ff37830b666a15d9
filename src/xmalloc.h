#ifndef RETRYPROXY_XMALLOC_H
#define RETRYPROXY_XMALLOC_H

#include <stddef.h>

/* Allocation that cannot fail: running out of memory aborts with a message. */
void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif
