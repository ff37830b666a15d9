#ifndef RETRYPROXY_XMALLOC_H
#define RETRYPROXY_XMALLOC_H

#include <stddef.h>

/* Allocation that cannot fail: running out of memory aborts with a message. */
void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* libevent's allocator (event_set_mem_functions): xmalloc, except that the
 * power-of-two blocks of 1 KiB and up that its buffers are made of are kept
 * when freed and handed out again, within a bound. */
void *xmalloc_event(size_t size);
void xmalloc_event_free(void *ptr);

/* Give the kept blocks back to malloc (at exit). */
void xmalloc_event_trim(void);

#endif
