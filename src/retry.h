#ifndef RETRYPROXY_RETRY_H
#define RETRYPROXY_RETRY_H

/*
 * Pure retry policy (SPEC "Retry semantics"): which failures retry.on covers,
 * how long to wait before the next try (backoff with jitter) and what a
 * Retry-After field asks for. No I/O and no clock reads: the caller passes
 * the random generator and the current time, so every function is tested by
 * tables.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "config.h"

/* A Retry-After wait is capped at one day, whether given in seconds or as a
 * date: it keeps the arithmetic far from overflow, and any deadline shorter
 * than that still turns such a wait into an immediate answer. */
#define RETRY_AFTER_MAX_SECONDS 86400

/* xoshiro256** state: fast, good enough for jitter, seeded from the OS. */
struct retry_rng {
	uint64_t s[4];
};

/* Seed from getrandom(); falls back to time^pid^address if that fails. */
void retry_rng_seed(struct retry_rng *rng);

/* Seed deterministically (for tests) by splitmix64 expansion of seed. */
void retry_rng_seed_with(struct retry_rng *rng, uint64_t seed);

/* The next raw 64 random bits. */
uint64_t retry_rng_next(struct retry_rng *rng);

/* Uniform in [0, max], inclusive, without modulo bias. */
uint64_t retry_rng_uniform(struct retry_rng *rng, uint64_t max);

/* The backoff before jitter, initial_backoff * multiplier^n rounded to the
 * nearest millisecond and capped at max_backoff; never overflows. */
uint64_t retry_backoff_base_ms(const struct retry_policy *policy, unsigned n);

/* The wait before the next try, n = 0 for the first wait (SPEC):
 * jitter as a duration: min(initial_backoff * multiplier^n + uniform(0, jitter), max_backoff)
 * jitter full: uniform(0, min(initial_backoff * multiplier^n, max_backoff)).
 * Saturates at max_backoff for huge n or multipliers. */
uint64_t retry_backoff_ms(const struct retry_policy *policy, unsigned n, struct retry_rng *rng);

enum retry_cause {
	RETRY_CAUSE_STATUS,  /* a response status in retry.on */
	RETRY_CAUSE_CONNECT, /* refused, DNS, TLS handshake, connect timeout */
	RETRY_CAUSE_RESET,   /* closed or reset before the whole response head */
	RETRY_CAUSE_TIMEOUT, /* no response head within try_timeout */
};

/* "status", "connect", "reset", "timeout": the metric label values. */
const char *retry_cause_name(enum retry_cause cause);

/* Is this status in retry.on (5xx flag or an explicit code)? */
bool retry_on_status(const struct retry_policy *policy, int status);

/* Is this failure kind in retry.on (connect-failure / reset / timeout)?
 * RETRY_CAUSE_STATUS gives false: statuses go through retry_on_status. */
bool retry_on_failure(const struct retry_policy *policy, enum retry_cause cause);

/* Parse a Retry-After value (RFC 9110 section 10.2.3): delta-seconds, or an
 * HTTP-date in any of the three formats of section 5.6.7 (IMF-fixdate,
 * RFC 850 with its two-digit-year rule, asctime), with optional surrounding
 * SP/HTAB. Names are matched with their exact case; a weekday that does not
 * fit the date is accepted (it is redundant), an impossible date (Feb 30) is
 * not. *wait_ms is the wait from now, 0 for a date not in the future, capped
 * at RETRY_AFTER_MAX_SECONDS. Returns 0, or -1 with *wait_ms untouched. */
int retry_after_parse(const char *value, size_t len, time_t now, uint64_t *wait_ms);

#endif
