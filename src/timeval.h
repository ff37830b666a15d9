#ifndef RETRYPROXY_TIMEVAL_H
#define RETRYPROXY_TIMEVAL_H

/* Milliseconds from the config into the struct timeval libevent wants, and
 * the monotonic clock in milliseconds. */

#include <stdint.h>
#include <sys/time.h>
#include <time.h>

static inline struct timeval timeval_from_ms(uint64_t ms)
{
	struct timeval tv = {
		.tv_sec = (time_t)(ms / 1000),
		.tv_usec = (suseconds_t)(ms % 1000) * 1000,
	};

	return tv;
}

/* Milliseconds on a clock that never jumps; coarse (a few ms) is enough for
 * timeouts and cache lifetimes. */
static inline uint64_t timeval_now_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
