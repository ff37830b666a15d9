#include "xmalloc.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* One place decides what out-of-memory means: a proxy that cannot allocate a
 * request cannot serve it, and limping on risks corrupting other exchanges. */
static void xmalloc_die(size_t size)
{
	/* the log lines of the last moments say what led here */
	log_flush();
	fprintf(stderr, "retryproxy: out of memory allocating %zu bytes\n", size);
	abort();
}

void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p == NULL)
		xmalloc_die(size);
	return p;
}

void *xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);

	if (p == NULL)
		xmalloc_die(count * size);
	return p;
}

void *xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);

	if (p == NULL)
		xmalloc_die(size);
	return p;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* The block sizes kept: libevent makes each buffer chain one allocation of a
 * power of two, 1 KiB at least, and a request allocates and frees about four
 * (a read, a head, a send). malloc keeps no fast cache past 1 KiB, so each
 * of those cost a few hundred instructions there. */
#define XMALLOC_EVENT_MIN_SHIFT 10
#define XMALLOC_EVENT_MAX_SHIFT 18
#define XMALLOC_EVENT_CLASSES (XMALLOC_EVENT_MAX_SHIFT - XMALLOC_EVENT_MIN_SHIFT + 1)
#define XMALLOC_EVENT_KEEP_BYTES (2 * 1024 * 1024) /* kept at most, all sizes together */

struct xmalloc_kept {
	struct xmalloc_kept *next;
	size_t usable; /* what the block really holds, counted against the bound */
};

static struct xmalloc_kept *xmalloc_event_kept[XMALLOC_EVENT_CLASSES];
static size_t xmalloc_event_kept_bytes;

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* a kept block stays poisoned, so a use after free is still caught */
#define XMALLOC_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define XMALLOC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define XMALLOC_POISON(p, n) ((void)(p), (void)(n))
#define XMALLOC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void *xmalloc_event(size_t size)
{
	if (size >= ((size_t)1 << XMALLOC_EVENT_MIN_SHIFT) &&
	    size <= ((size_t)1 << XMALLOC_EVENT_MAX_SHIFT) && (size & (size - 1)) == 0) {
		unsigned shift = (unsigned)__builtin_ctzll(size);
		struct xmalloc_kept *kept = xmalloc_event_kept[shift - XMALLOC_EVENT_MIN_SHIFT];

		if (kept != NULL) {
			XMALLOC_UNPOISON(kept, size);
			xmalloc_event_kept[shift - XMALLOC_EVENT_MIN_SHIFT] = kept->next;
			xmalloc_event_kept_bytes -= kept->usable;
			return kept;
		}
	}
	return xmalloc(size);
}

void xmalloc_event_free(void *ptr)
{
	size_t usable;
	unsigned shift;
	struct xmalloc_kept *kept = ptr;

	if (ptr == NULL)
		return;
	/* malloc knows the size, libevent does not say it: a block serves the
	 * largest power of two it holds. One larger than twice the largest
	 * size kept would be held for less than it is (a pulled-up body of
	 * megabytes), so it goes back to malloc, and the bound counts what
	 * each block really holds. */
	usable = malloc_usable_size(ptr);
	if (usable < ((size_t)1 << XMALLOC_EVENT_MIN_SHIFT) ||
	    usable >= ((size_t)1 << (XMALLOC_EVENT_MAX_SHIFT + 1)) ||
	    xmalloc_event_kept_bytes + usable > XMALLOC_EVENT_KEEP_BYTES) {
		free(ptr);
		return;
	}
	shift = 63u - (unsigned)__builtin_clzll(usable);
	kept->next = xmalloc_event_kept[shift - XMALLOC_EVENT_MIN_SHIFT];
	kept->usable = usable;
	xmalloc_event_kept[shift - XMALLOC_EVENT_MIN_SHIFT] = kept;
	xmalloc_event_kept_bytes += usable;
	XMALLOC_POISON(ptr, usable);
}

void xmalloc_event_trim(void)
{
	unsigned i;

	for (i = 0; i < XMALLOC_EVENT_CLASSES; i++) {
		while (xmalloc_event_kept[i] != NULL) {
			struct xmalloc_kept *kept = xmalloc_event_kept[i];

			XMALLOC_UNPOISON(kept, malloc_usable_size(kept));
			xmalloc_event_kept[i] = kept->next;
			free(kept);
		}
	}
	xmalloc_event_kept_bytes = 0;
}
