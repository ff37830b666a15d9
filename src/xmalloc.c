#include "xmalloc.h"

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
