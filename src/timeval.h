#ifndef RETRYPROXY_TIMEVAL_H
#define RETRYPROXY_TIMEVAL_H

/* Milliseconds from the config into the struct timeval libevent wants. */

#include <stdint.h>
#include <sys/time.h>

static inline struct timeval timeval_from_ms(uint64_t ms)
{
	struct timeval tv = {
		.tv_sec = (time_t)(ms / 1000),
		.tv_usec = (suseconds_t)(ms % 1000) * 1000,
	};

	return tv;
}

#endif
