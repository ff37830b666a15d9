#ifndef RETRYPROXY_HASH_H
#define RETRYPROXY_HASH_H

/*
 * FNV-1a over a NUL-terminated string: the hash tables keyed by a host
 * and the fleet's set of reasons already warned about. Not for keys an
 * attacker may choose freely in bulk (pool.c hashes its keys by words).
 */

#include <stdint.h>

static inline uint64_t hash_string(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return h;
}

#endif
