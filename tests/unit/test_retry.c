/*
 * Unit tests for retry.c: the random generator, backoff bounds and caps over
 * many draws, retry.on lookups, and Retry-After parsing by table (checked
 * against the C library's own UTC calendar for dates).
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http_date.h"
#include "retry.h"

#define TEST_DRAWS 10000

/* A policy with only the backoff fields set. */
static struct retry_policy test_backoff_policy(uint64_t initial, double multiplier, uint64_t max,
					       bool full, uint64_t jitter)
{
	struct retry_policy policy;

	memset(&policy, 0, sizeof(policy));
	policy.initial_backoff_ms = initial;
	policy.multiplier = multiplier;
	policy.max_backoff_ms = max;
	policy.jitter_full = full;
	policy.jitter_ms = jitter;
	policy.max_attempts = 5;
	return policy;
}

/* Mark an explicit status code in retry.on, as the config loader does. */
static void test_on_code(struct retry_policy *policy, int code)
{
	policy->on_codes[code / 8] |= (uint8_t)(1u << (code % 8));
}

static void test_rng_determinism(void **state)
{
	struct retry_rng a;
	struct retry_rng b;
	struct retry_rng c;
	bool differ = false;

	retry_rng_seed_with(&a, 42);
	retry_rng_seed_with(&b, 42);
	retry_rng_seed_with(&c, 43);
	for (int i = 0; i < 100; i++) {
		uint64_t x = retry_rng_next(&a);

		assert_true(x == retry_rng_next(&b));
		if (x != retry_rng_next(&c))
			differ = true;
	}
	assert_true(differ);

	/* seeding from the OS: two generators agreeing on 256 bits is not chance */
	retry_rng_seed(&a);
	retry_rng_seed(&b);
	assert_memory_not_equal(a.s, b.s, sizeof(a.s));
	assert_true((a.s[0] | a.s[1] | a.s[2] | a.s[3]) != 0);

	/* seed 0 still gives a usable, non-zero state */
	retry_rng_seed_with(&a, 0);
	assert_true((a.s[0] | a.s[1] | a.s[2] | a.s[3]) != 0);
}

static void test_rng_uniform_bounds(void **state)
{
	static const uint64_t maxes[] = {
		0, 1, 2, 9, 1000, UINT64_MAX / 3, UINT64_MAX / 2, UINT64_MAX - 1, UINT64_MAX,
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 1);
	for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
		uint64_t max = maxes[i];
		uint64_t low = UINT64_MAX;
		uint64_t high = 0;
		size_t upper_half = 0;

		for (int d = 0; d < TEST_DRAWS; d++) {
			uint64_t x = retry_rng_uniform(&rng, max);

			assert_true(x <= max);
			low = x < low ? x : low;
			high = x > high ? x : high;
			upper_half += x > max / 2;
		}
		if (max == 0) {
			assert_true(high == 0);
			continue;
		}
		assert_true(low < high);
		/* about half the draws land above the middle, for every range */
		if (max >= 1000) {
			assert_in_range(upper_half, TEST_DRAWS * 45 / 100, TEST_DRAWS * 55 / 100);
		}
	}
}

static void test_rng_uniform_small_ranges(void **state)
{
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 7);
	for (uint64_t max = 1; max <= 9; max++) {
		unsigned counts[10] = { 0 };
		unsigned expected = (unsigned)(60000 / (max + 1));

		for (int d = 0; d < 60000; d++)
			counts[retry_rng_uniform(&rng, max)]++;
		/* every value in [0, max] appears about equally often */
		for (uint64_t v = 0; v <= max; v++)
			assert_in_range(counts[v], expected * 9 / 10, expected * 11 / 10);
	}
}

/* The exact un-jittered backoff for an integer or half-integer multiplier,
 * computed the slow way: base * num / den, n times, saturating at max. */
static uint64_t test_expected_base(uint64_t initial, unsigned num, unsigned den, uint64_t max,
				   unsigned n)
{
	uint64_t base = initial;

	for (unsigned i = 0; i < n && base < max; i++)
		base = base * num / den;
	return base < max ? base : max;
}

/* Draw TEST_DRAWS waits for (policy, n) and check them against [lo, hi]. When
 * the interval is not cut by max_backoff the draws must be spread over it:
 * both ends approached and the mean near the middle. */
static void test_draws(const struct retry_policy *policy, unsigned n, uint64_t lo, uint64_t hi,
		       bool capped, struct retry_rng *rng)
{
	uint64_t low = UINT64_MAX;
	uint64_t high = 0;
	size_t at_max = 0;
	double sum = 0;

	for (int d = 0; d < TEST_DRAWS; d++) {
		uint64_t wait = retry_backoff_ms(policy, n, rng);

		if (wait < lo || wait > hi)
			fail_msg("n=%u: wait %llu outside [%llu, %llu]", n,
				 (unsigned long long)wait, (unsigned long long)lo,
				 (unsigned long long)hi);
		low = wait < low ? wait : low;
		high = wait > high ? wait : high;
		at_max += wait == policy->max_backoff_ms;
		sum += (double)wait;
	}
	if (lo == hi) {
		assert_true(low == lo && high == lo);
		return;
	}
	assert_true(low < high);
	if (capped) {
		/* max_backoff cuts the interval: many draws sit at it, some under */
		assert_true(at_max > 0 && at_max < TEST_DRAWS);
		return;
	}
	double range = (double)(hi - lo);
	double mean = sum / TEST_DRAWS;

	assert_true((double)low < (double)lo + range / 10);
	assert_true((double)high > (double)hi - range / 10);
	if (mean < (double)lo + range * 0.45 || mean > (double)lo + range * 0.55)
		fail_msg("n=%u: mean %f not near the middle of [%llu, %llu]", n, mean,
			 (unsigned long long)lo, (unsigned long long)hi);
}

static void test_backoff_jitter_duration(void **state)
{
	static const struct {
		uint64_t initial;
		unsigned num; /* multiplier = num / den */
		unsigned den;
		uint64_t max;
		uint64_t jitter;
	} cases[] = {
		{ 100, 2, 1, 30000, 1000 },  /* n 0..8 uncapped, 9 and 10 at the cap */
		{ 1000, 2, 1, 20000, 5000 }, /* n 4 cut by the cap, 5.. at it */
		{ 1024, 3, 2, 60000, 250 },  /* 1.5: 1024 * 1.5^10 = 59049, never capped */
		{ 500, 1, 1, 10000, 0 },     /* no jitter: exactly the base */
		{ 1000, 2, 1, 32000, 0 },    /* no jitter, doubling up to the cap */
		{ 0, 2, 1, 1000, 300 },	     /* no backoff: jitter alone */
		{ 1000, 3, 1, 1000, 500 },   /* initial == max: always max */
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 2024);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct retry_policy policy =
			test_backoff_policy(cases[i].initial, (double)cases[i].num / cases[i].den,
					    cases[i].max, false, cases[i].jitter);

		for (unsigned n = 0; n <= 10; n++) {
			uint64_t base = test_expected_base(cases[i].initial, cases[i].num,
							   cases[i].den, cases[i].max, n);
			uint64_t hi = base + cases[i].jitter;
			bool capped = hi > cases[i].max && base < cases[i].max;

			assert_true(retry_backoff_base_ms(&policy, n) == base);
			if (hi > cases[i].max)
				hi = cases[i].max;
			test_draws(&policy, n, base, hi, capped, &rng);
		}
	}
}

static void test_backoff_full_jitter(void **state)
{
	static const struct {
		uint64_t initial;
		unsigned num;
		unsigned den;
		uint64_t max;
	} cases[] = {
		{ 100, 2, 1, 30000 },  { 1000, 3, 1, 50000 },
		{ 1024, 3, 2, 60000 }, { 1, 2, 1, 300000 }, /* n = 0: uniform over {0, 1} */
		{ 0, 2, 1, 1000 },			    /* always 0 */
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 99);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* jitter_ms is ignored with full jitter */
		struct retry_policy policy =
			test_backoff_policy(cases[i].initial, (double)cases[i].num / cases[i].den,
					    cases[i].max, true, 123456);

		for (unsigned n = 0; n <= 10; n++) {
			uint64_t base = test_expected_base(cases[i].initial, cases[i].num,
							   cases[i].den, cases[i].max, n);

			test_draws(&policy, n, 0, base, false, &rng);
		}
	}
}

static void test_backoff_saturation(void **state)
{
	static const struct {
		uint64_t initial;
		double multiplier;
		uint64_t max;
		unsigned n;
		uint64_t base; /* expected retry_backoff_base_ms */
	} cases[] = {
		{ 1000, 2, 32000, 5, 32000 },
		{ 1000, 2, 32000, 6, 32000 },
		{ 1000, 2, 32000, 64, 32000 },	 /* 2^64 would wrap a uint64_t */
		{ 1000, 2, 32000, 1100, 32000 }, /* 2^1100 is +inf in double */
		{ 1000, 2, 32000, UINT_MAX, 32000 },
		{ 1000, 1e300, 32000, 2, 32000 },
		{ 1000, DBL_MAX, 32000, 1, 32000 },
		{ 1000, 1, 32000, UINT_MAX, 1000 }, /* 1^n stays 1 */
		{ 1000, 1.1, 32000, 1, 1100 },	    /* 1100.0000000000002 rounds to 1100 */
		{ 1000, 1.5, 32000, 3, 3375 },
		{ 3, 1.5, 100, 1, 5 },		 /* 4.5 rounds half up */
		{ 0, 1e300, 1000, UINT_MAX, 0 }, /* 0 x inf is not NaN here */
		{ 1000, NAN, 32000, 3, 1000 },	 /* cannot come from config; read as 1 */
		{ 1000, 0.5, 32000, 3, 1000 },	 /* below 1: read as 1 */
		{ UINT64_MAX, 2, UINT64_MAX, 3, UINT64_MAX },
		{ UINT64_MAX - 10, 1, UINT64_MAX, 0, UINT64_MAX },
		{ (uint64_t)1 << 62, 2, UINT64_MAX, 1, (uint64_t)1 << 63 },
		{ (uint64_t)1 << 62, 2, UINT64_MAX, 2, UINT64_MAX },
		{ 5000, 2, 1000, 0, 1000 }, /* initial over max: max */
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct retry_policy policy = test_backoff_policy(
			cases[i].initial, cases[i].multiplier, cases[i].max, false, 0);
		uint64_t base = retry_backoff_base_ms(&policy, cases[i].n);

		if (base != cases[i].base)
			fail_msg("case %zu: base %llu, expected %llu", i, (unsigned long long)base,
				 (unsigned long long)cases[i].base);
		assert_true(retry_backoff_ms(&policy, cases[i].n, &rng) == cases[i].base);
		policy.jitter_ms = UINT64_MAX;
		assert_true(retry_backoff_ms(&policy, cases[i].n, &rng) >= cases[i].base);
		assert_true(retry_backoff_ms(&policy, cases[i].n, &rng) <= cases[i].max);
		policy.jitter_full = true;
		assert_true(retry_backoff_ms(&policy, cases[i].n, &rng) <= cases[i].base);
	}
}

static void test_backoff_jitter_wraps(void **state)
{
	/* base + jitter past 2^64 must saturate, not wrap to a short wait */
	struct retry_policy policy =
		test_backoff_policy((uint64_t)1 << 62, 1, UINT64_MAX, false, UINT64_MAX);
	struct retry_rng rng;
	size_t saturated = 0;

	retry_rng_seed_with(&rng, 11);
	for (int d = 0; d < TEST_DRAWS; d++) {
		uint64_t wait = retry_backoff_ms(&policy, 0, &rng);

		assert_true(wait >= (uint64_t)1 << 62);
		saturated += wait == UINT64_MAX;
	}
	/* a quarter of uniform(0, 2^64 - 1) is past 2^64 - 2^62 and overflows */
	assert_in_range(saturated, TEST_DRAWS * 20 / 100, TEST_DRAWS * 30 / 100);
}

static void test_wait_range_table(void **state)
{
	static const struct {
		uint64_t initial;
		double multiplier;
		uint64_t max;
		bool full;
		uint64_t jitter;
		unsigned n;
		uint64_t lo, hi, spread; /* expected retry_wait_range */
	} cases[] = {
		{ 1000, 2, 32000, false, 1000, 0, 1000, 2000, 1000 },	/* SPEC: 1s-2s */
		{ 1000, 2, 32000, false, 1000, 3, 8000, 9000, 1000 },	/* 8s-9s */
		{ 1000, 2, 32000, false, 1000, 4, 16000, 17000, 1000 }, /* 16s-17s */
		{ 1000, 2, 32000, false, 1000, 5, 32000, 32000, 0 },	/* at the cap: fixed */
		{ 1000, 2, 32000, false, 1000, 40, 32000, 32000, 0 },
		{ 1000, 2, 64000, false, 1000, 5, 32000, 33000, 1000 },
		{ 1000, 3, 10000, false, 2000, 2, 9000, 10000, 2000 }, /* the cap cuts hi */
		{ 1500, 2, 32000, false, 250, 1, 3000, 3250, 250 },
		{ 1000, 2, 32000, false, 0, 2, 4000, 4000, 0 },	  /* no jitter */
		{ 0, 2, 32000, false, 500, 7, 0, 500, 500 },	  /* jitter alone */
		{ 1000, 2, 32000, true, 1000, 0, 0, 1000, 1000 }, /* full: 0-backoff */
		{ 1000, 2, 32000, true, 1000, 4, 0, 16000, 16000 },
		{ 1000, 2, 32000, true, 1000, 9, 0, 32000, 32000 }, /* full, capped */
		{ 5000, 2, 1000, true, 0, 0, 0, 1000, 1000 },	    /* initial over max */
		{ (uint64_t)1 << 62, 1, UINT64_MAX, false, UINT64_MAX, 0, (uint64_t)1 << 62,
		  UINT64_MAX, UINT64_MAX }, /* base + jitter saturates */
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 7);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct retry_policy policy =
			test_backoff_policy(cases[i].initial, cases[i].multiplier, cases[i].max,
					    cases[i].full, cases[i].jitter);
		struct retry_wait_range r = retry_wait_range(&policy, cases[i].n);

		if (r.lo_ms != cases[i].lo || r.hi_ms != cases[i].hi ||
		    r.spread_ms != cases[i].spread)
			fail_msg("case %zu: [%llu, %llu] spread %llu, expected [%llu, %llu] "
				 "spread %llu",
				 i, (unsigned long long)r.lo_ms, (unsigned long long)r.hi_ms,
				 (unsigned long long)r.spread_ms, (unsigned long long)cases[i].lo,
				 (unsigned long long)cases[i].hi,
				 (unsigned long long)cases[i].spread);
		/* every wait the proxy draws lies inside the range */
		for (int d = 0; d < 1000; d++) {
			uint64_t wait = retry_backoff_ms(&policy, cases[i].n, &rng);

			if (wait < r.lo_ms || wait > r.hi_ms)
				fail_msg("case %zu: drew %llu outside [%llu, %llu]", i,
					 (unsigned long long)wait, (unsigned long long)r.lo_ms,
					 (unsigned long long)r.hi_ms);
		}
	}
}

static void test_wait_range_ends_reached(void **state)
{
	/* the range is tight: draws reach both of its ends (jitter of 3ms, so
	 * each of its 4 values comes up in a few hundred draws) */
	struct retry_policy policy = test_backoff_policy(1000, 2, 32000, false, 3);
	struct retry_policy full = test_backoff_policy(2, 2, 32000, true, 0);
	struct retry_wait_range r = retry_wait_range(&policy, 1);
	struct retry_wait_range f = retry_wait_range(&full, 0);
	bool lo = false, hi = false, flo = false, fhi = false;
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 3);
	for (int d = 0; d < 1000; d++) {
		uint64_t wait = retry_backoff_ms(&policy, 1, &rng);
		uint64_t fwait = retry_backoff_ms(&full, 0, &rng);

		lo |= wait == r.lo_ms;
		hi |= wait == r.hi_ms;
		flo |= fwait == f.lo_ms;
		fhi |= fwait == f.hi_ms;
	}
	assert_true(lo && hi && flo && fhi);
}

static void test_retry_on_status(void **state)
{
	struct retry_policy defaults; /* [5xx, 408, 429, connect-failure, reset, timeout] */
	struct retry_policy explicit; /* [500, 502, 503, 504, 404, 429] */
	struct retry_policy none;     /* [] */
	static const struct {
		int status;
		bool defaults;
		bool explicit;
	} cases[] = {
		{ 500, true, true },	   { 501, true, false },   { 502, true, true },
		{ 503, true, true },	   { 504, true, true },	   { 599, true, false },
		{ 404, false, true },	   { 408, true, false },   { 429, true, true },
		{ 200, false, false },	   { 204, false, false },  { 301, false, false },
		{ 400, false, false },	   { 499, false, false },  { 100, false, false },
		{ 600, false, false },	   { 99, false, false },   { 0, false, false },
		{ -1, false, false },	   { 1000, false, false }, { INT_MAX, false, false },
		{ INT_MIN, false, false },
	};

	memset(&defaults, 0, sizeof(defaults));
	defaults.on = RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT;
	test_on_code(&defaults, 408);
	test_on_code(&defaults, 429);
	memset(&explicit, 0, sizeof(explicit));
	explicit.on = RETRY_ON_CONNECT_FAILURE;
	test_on_code(&explicit, 500);
	test_on_code(&explicit, 502);
	test_on_code(&explicit, 503);
	test_on_code(&explicit, 504);
	test_on_code(&explicit, 404);
	test_on_code(&explicit, 429);
	memset(&none, 0, sizeof(none));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (retry_on_status(&defaults, cases[i].status) != cases[i].defaults ||
		    retry_on_status(&explicit, cases[i].status) != cases[i].explicit ||
		    retry_on_status(&none, cases[i].status))
			fail_msg("status %d", cases[i].status);
	}
}

static void test_retry_on_failure(void **state)
{
	static const struct {
		unsigned on;
		bool connect;
		bool reset;
		bool timeout;
	} cases[] = {
		{ 0, false, false, false },
		{ RETRY_ON_5XX, false, false, false },
		{ RETRY_ON_CONNECT_FAILURE, true, false, false },
		{ RETRY_ON_RESET, false, true, false },
		{ RETRY_ON_TIMEOUT, false, false, true },
		{ RETRY_ON_CONNECT_FAILURE | RETRY_ON_TIMEOUT, true, false, true },
		{ RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT, true,
		  true, true },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct retry_policy policy;

		memset(&policy, 0, sizeof(policy));
		policy.on = cases[i].on;
		test_on_code(&policy, 503);
		assert_true(retry_on_failure(&policy, RETRY_CAUSE_CONNECT) == cases[i].connect);
		assert_true(retry_on_failure(&policy, RETRY_CAUSE_RESET) == cases[i].reset);
		assert_true(retry_on_failure(&policy, RETRY_CAUSE_TIMEOUT) == cases[i].timeout);
		/* statuses are retry_on_status's business */
		assert_false(retry_on_failure(&policy, RETRY_CAUSE_STATUS));
	}
}

static void test_cause_names(void **state)
{
	assert_string_equal(retry_cause_name(RETRY_CAUSE_STATUS), "status");
	assert_string_equal(retry_cause_name(RETRY_CAUSE_CONNECT), "connect");
	assert_string_equal(retry_cause_name(RETRY_CAUSE_RESET), "reset");
	assert_string_equal(retry_cause_name(RETRY_CAUSE_TIMEOUT), "timeout");
}

#define TEST_NOW_2023 ((time_t)1700000000) /* Tue, 14 Nov 2023 22:13:20 GMT */
#define TEST_NOW_1994 ((time_t)784111657)  /* Sun, 06 Nov 1994 08:47:37 GMT */
#define TEST_DAY_MS ((uint64_t)86400 * 1000)

static void test_retry_after_table(void **state)
{
	static const struct {
		const char *value;
		time_t now;
		int rc;
		uint64_t ms;
	} cases[] = {
		/* delta-seconds */
		{ "0", TEST_NOW_2023, 0, 0 },
		{ "120", TEST_NOW_2023, 0, 120000 },
		{ "007", TEST_NOW_2023, 0, 7000 },
		{ " 30", TEST_NOW_2023, 0, 30000 },
		{ "30 \t ", TEST_NOW_2023, 0, 30000 },
		{ "\t30\t", TEST_NOW_2023, 0, 30000 },
		/* exact however long: only the deadline bounds the wait */
		{ "86400", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "86401", TEST_NOW_2023, 0, TEST_DAY_MS + 1000 },
		{ "259200", TEST_NOW_2023, 0, 3 * TEST_DAY_MS },
		{ "4294967296", TEST_NOW_2023, 0, 4294967296000 },
		{ "18446744073709551", TEST_NOW_2023, 0, 18446744073709551000u },
		{ "18446744073709552", TEST_NOW_2023, 0, RETRY_AFTER_SATURATED_MS },
		{ "99999999999999999999999999999999", TEST_NOW_2023, 0, RETRY_AFTER_SATURATED_MS },
		{ "", TEST_NOW_2023, -1, 0 },
		{ "   ", TEST_NOW_2023, -1, 0 },
		{ "-1", TEST_NOW_2023, -1, 0 },
		{ "+5", TEST_NOW_2023, -1, 0 },
		{ "1.5", TEST_NOW_2023, -1, 0 },
		{ "5s", TEST_NOW_2023, -1, 0 },
		{ "1 2", TEST_NOW_2023, -1, 0 },
		{ "0x10", TEST_NOW_2023, -1, 0 },
		{ "soon", TEST_NOW_2023, -1, 0 },
		{ "99999999999999999999999999999999x", TEST_NOW_2023, -1, 0 },
		{ "\r\n5", TEST_NOW_2023, -1, 0 },

		/* the three formats, 120 s after now */
		{ "Sun, 06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, 0, 120000 },
		{ "Sunday, 06-Nov-94 08:49:37 GMT", TEST_NOW_1994, 0, 120000 },
		{ "Sun Nov  6 08:49:37 1994", TEST_NOW_1994, 0, 120000 },
		{ "Sun Nov 06 08:49:37 1994", TEST_NOW_1994, 0, 120000 },
		{ "Tue, 14 Nov 2023 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Tuesday, 14-Nov-23 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Tue Nov 14 22:15:20 2023", TEST_NOW_2023, 0, 120000 },
		{ "  Tue, 14 Nov 2023 22:15:20 GMT\t", TEST_NOW_2023, 0, 120000 },
		{ "Tue, 14 Nov 2023 22:13:21 GMT", TEST_NOW_2023, 0, 1000 },

		/* now, the past, and far ahead */
		{ "Tue, 14 Nov 2023 22:13:20 GMT", TEST_NOW_2023, 0, 0 },
		{ "Tue, 14 Nov 2023 22:13:19 GMT", TEST_NOW_2023, 0, 0 },
		{ "Sun, 06 Nov 1994 08:49:37 GMT", TEST_NOW_2023, 0, 0 },
		{ "Thu, 01 Jan 1970 00:00:00 GMT", TEST_NOW_2023, 0, 0 },
		{ "Sat, 01 Jan 0000 00:00:00 GMT", TEST_NOW_2023, 0, 0 },
		{ "Fri, 31 Dec 9999 23:59:59 GMT", TEST_NOW_2023, 0, 251702300799000 },
		{ "Fri, 17 Nov 2023 22:13:20 GMT", TEST_NOW_2023, 0, 3 * TEST_DAY_MS },
		{ "Wed, 15 Nov 2023 22:13:20 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "Wed, 15 Nov 2023 22:13:21 GMT", TEST_NOW_2023, 0, TEST_DAY_MS + 1000 },
		{ "Wed, 15 Nov 2023 22:13:19 GMT", TEST_NOW_2023, 0, TEST_DAY_MS - 1000 },

		/* the two-digit year: more than 50 years ahead means a century back */
		{ "Sunday, 06-Nov-94 08:49:37 GMT", TEST_NOW_2023, 0, 0 },
		{ "Sunday, 01-Jan-73 00:00:00 GMT", TEST_NOW_2023, 0, 1550454400000 },
		{ "Monday, 01-Jan-74 00:00:00 GMT", TEST_NOW_2023, 0, 0 },
		{ "Wednesday, 15-Nov-23 22:13:19 GMT", TEST_NOW_2023, 0, TEST_DAY_MS - 1000 },
		{ "Saturday, 01-Jan-00 00:00:00 GMT", (time_t)4102444800 - 120, 0,
		  120000 },							     /* 2100 */
		{ "Friday, 31-Dec-99 23:58:00 GMT", (time_t)4102444800 - 60, 0, 0 }, /* 2099 */
		{ "Sunday, 01-Jan-50 00:00:00 GMT", (time_t)4102444800, 0,
		  1577836800000 },						    /* 2150 */
		{ "Sunday, 01-Jan-51 00:00:00 GMT", (time_t)4102444800, 0, 0 },	    /* 2051 */
		{ "Sunday, 01-Jan-50 00:00:00 GMT", (time_t)4102444800 - 1, 0, 0 }, /* 2050 */
		{ "Sunday, 01-Jan-49 00:00:00 GMT", (time_t)4102444800 - 1, 0,
		  1546300801000 }, /* 2149 */

		/* the weekday is redundant: a wrong one is accepted */
		{ "Mon, 14 Nov 2023 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Friday, 14-Nov-23 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Sat Nov 14 22:15:20 2023", TEST_NOW_2023, 0, 120000 },

		/* calendar checks */
		{ "Thu, 29 Feb 2024 00:00:00 GMT", TEST_NOW_2023, 0, 9164800000 },
		{ "Tue, 29 Feb 2000 00:00:00 GMT", TEST_NOW_2023, 0, 0 },
		{ "Wed, 29 Feb 2023 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Mon, 29 Feb 2100 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Fri, 30 Feb 2024 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 31 Apr 2024 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 00 Nov 2024 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 32 Dec 2024 00:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 06 Nov 2024 24:00:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 06 Nov 2024 23:60:00 GMT", TEST_NOW_2023, -1, 0 },
		{ "Sun, 06 Nov 2024 23:59:61 GMT", TEST_NOW_2023, -1, 0 },
		{ "Tue, 14 Nov 2023 22:13:60 GMT", TEST_NOW_2023, 0, 40000 }, /* leap second */

		/* names and layout */
		{ "Sum, 06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "sun, 06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "SUN, 06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nox 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 November 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sunday, 06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06-Nov-94 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sund, 06-Nov-94 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sunday Nov  6 08:49:37 1994", TEST_NOW_1994, -1, 0 },
		{ "Sun, 6 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun,  06 Nov 1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 94 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 08:49:37 UTC", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 08:49:37 gmt", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 08:49:37", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 08:49:37 GMT x", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 8:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun, 06 Nov 1994 08.49.37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sunday, 06-Nov-1994 08:49:37 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sunday, 06-Nov-94 08:49:37", TEST_NOW_1994, -1, 0 },
		{ "Sun Nov 6 08:49:37 1994", TEST_NOW_1994, -1, 0 },
		{ "Sun Nov  06 08:49:37 1994", TEST_NOW_1994, -1, 0 },
		{ "Sun Nov  6 08:49:37 94", TEST_NOW_1994, -1, 0 },
		{ "Sun Nov  6 08:49:37 1994 GMT", TEST_NOW_1994, -1, 0 },
		{ "Sun", TEST_NOW_1994, -1, 0 },
		{ "Sun,", TEST_NOW_1994, -1, 0 },
		{ "Sun Nov", TEST_NOW_1994, -1, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ms = 0xdeadbeef;
		int rc = retry_after_parse(cases[i].value, strlen(cases[i].value),
					   (int64_t)cases[i].now * 1000, &ms);

		if (rc != cases[i].rc)
			fail_msg("\"%s\": rc %d, expected %d", cases[i].value, rc, cases[i].rc);
		if (rc == 0 && ms != cases[i].ms)
			fail_msg("\"%s\": %llu ms, expected %llu", cases[i].value,
				 (unsigned long long)ms, (unsigned long long)cases[i].ms);
		if (rc != 0 && ms != 0xdeadbeef)
			fail_msg("\"%s\": *wait_ms written on failure", cases[i].value);
	}
}

static void test_retry_after_counted(void **state)
{
	uint64_t ms = 0;

	/* only len bytes are read; a NUL inside is not a digit */
	assert_int_equal(retry_after_parse("12345", 2, TEST_NOW_2023 * 1000, &ms), 0);
	assert_true(ms == 12000);
	assert_int_equal(retry_after_parse("12\0", 3, TEST_NOW_2023 * 1000, &ms), -1);
	assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:15:20 GMTxyz", 29,
					   TEST_NOW_2023 * 1000, &ms),
			 0);
	assert_true(ms == 120000);
	assert_int_equal(
		retry_after_parse("Tue, 14 Nov 2023 22:15:20 GM", 28, TEST_NOW_2023 * 1000, &ms),
		-1);
	assert_int_equal(retry_after_parse(NULL, 0, TEST_NOW_2023 * 1000, &ms), -1);
	/* a date is its whole second, and now is not rounded down to one: 400 ms
	 * into a second, a date 3 s on is 2.6 s away, the second begun is past */
	assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:23 GMT", 29,
					   TEST_NOW_2023 * 1000 + 400, &ms),
			 0);
	assert_true(ms == 2600);
	assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:20 GMT", 29,
					   TEST_NOW_2023 * 1000 + 400, &ms),
			 0);
	assert_true(ms == 0);
	/* delta-seconds count from now, whatever its milliseconds */
	assert_int_equal(retry_after_parse("3", 1, TEST_NOW_2023 * 1000 + 400, &ms), 0);
	assert_true(ms == 3000);
}

/* Format t with strftime in UTC, parse it back with now = t - 5000 s, and
 * expect exactly 5000 s: the date arithmetic agrees with the C library's. */
static void test_round_trip(time_t t, const char *format)
{
	char text[64];
	struct tm tm;
	uint64_t ms = 0;

	assert_non_null(gmtime_r(&t, &tm));
	assert_true(strftime(text, sizeof(text), format, &tm) > 0);
	if (retry_after_parse(text, strlen(text), ((int64_t)t - 5000) * 1000, &ms) != 0 ||
	    ms != 5000000)
		fail_msg("\"%s\" (t=%lld): got %llu ms", text, (long long)t,
			 (unsigned long long)ms);
}

/* The Date the proxy adds: an IMF-fixdate of the second given, which reads
 * back as that second. */
static void test_http_date_format(void **state)
{
	static const time_t seconds[] = { 0, 784111777, 951782400, 1709164800, 4102444799 };
	char text[HTTP_DATE_LEN + 1];
	int64_t back;

	(void)state;
	http_date_format(784111777, text);
	assert_string_equal(text, "Sun, 06 Nov 1994 08:49:37 GMT");
	for (size_t i = 0; i < sizeof(seconds) / sizeof(seconds[0]); i++) {
		http_date_format(seconds[i], text);
		assert_int_equal(strlen(text), HTTP_DATE_LEN);
		assert_int_equal(http_date_parse(text, HTTP_DATE_LEN, seconds[i], &back), 0);
		assert_int_equal(back, (int64_t)seconds[i]);
	}
	assert_int_equal(strlen(http_date_now()), HTTP_DATE_LEN);
}

/* The second the proxy dates a response with is never behind a precise
 * reading of the wall clock taken just before it, not even in the first
 * milliseconds of a second, where the kernel's coarse clock (time()) still
 * shows the last one: a client that noted the time before its request saw
 * its response dated a second earlier. Watched across a second's turn. */
static void test_http_date_clock_not_behind(void **state)
{
	struct timespec before;
	time_t turned;
	long checks = 0;

	(void)state;
	/* a test preempted across the whole window (a loaded machine) saw
	 * nothing of that turn: it watches the next one */
	for (int turns = 0; turns < 10 && checks == 0; turns++) {
		clock_gettime(CLOCK_REALTIME, &before);
		turned = before.tv_sec + 1;
		do
			clock_gettime(CLOCK_REALTIME, &before);
		while (before.tv_sec < turned);
		/* the first 20 ms of the new second, a few ticks of the
		 * coarse clock */
		while (before.tv_sec == turned && before.tv_nsec < 20 * 1000 * 1000) {
			time_t dated = http_date_clock();

			if (dated < before.tv_sec)
				fail_msg("dated %lld, %ld ns into second %lld (check %ld)",
					 (long long)dated, before.tv_nsec, (long long)before.tv_sec,
					 checks);
			checks++;
			clock_gettime(CLOCK_REALTIME, &before);
		}
	}
	assert_true(checks > 0);
}

static void test_retry_after_calendar(void **state)
{
	static const time_t fixed[] = {
		5000,		      /* 1970-01-01 01:23:20 */
		951782400,	      /* 2000-02-29 00:00:00 */
		951868799,	      /* 2000-02-29 23:59:59 */
		1078012800,	      /* 2004-02-29 */
		1704067199,	      /* 2023-12-31 23:59:59 */
		1704067200,	      /* 2024-01-01 00:00:00 */
		4107542400,	      /* 2100-03-01 00:00:00, after a non-leap Feb */
		4102444800,	      /* 2100-01-01 */
		253402300799 - 86400, /* 9999-12-30 23:59:59 */
	};
	struct retry_rng rng;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		test_round_trip(fixed[i], "%a, %d %b %Y %H:%M:%S GMT");
		test_round_trip(fixed[i], "%a %b %e %H:%M:%S %Y");
		test_round_trip(fixed[i], "%A, %d-%b-%y %H:%M:%S GMT");
	}
	retry_rng_seed_with(&rng, 1994);
	for (int i = 0; i < 3000; i++) {
		time_t t = (time_t)(5000 + retry_rng_uniform(&rng, 253402300799 - 86400 - 5000));

		test_round_trip(t, "%a, %d %b %Y %H:%M:%S GMT");
		test_round_trip(t, "%a %b %e %H:%M:%S %Y");
		test_round_trip(t, "%A, %d-%b-%y %H:%M:%S GMT");
	}
}

static void test_outcome_names(void **state)
{
	static const struct {
		enum try_outcome outcome;
		const char *name;
		const char *kind;
		enum retry_cause cause;
	} cases[] = {
		{ TRY_RESPONSE, "response", NULL, RETRY_CAUSE_STATUS },
		{ TRY_DNS, "dns", "dns", RETRY_CAUSE_CONNECT },
		{ TRY_REFUSED, "refused", "connect", RETRY_CAUSE_CONNECT },
		{ TRY_CONNECT_TIMEOUT, "connect-timeout", "connect", RETRY_CAUSE_CONNECT },
		{ TRY_TLS, "tls", "tls", RETRY_CAUSE_CONNECT },
		{ TRY_TLS_VERIFY, "tls-verify", "tls", RETRY_CAUSE_CONNECT },
		{ TRY_STALE, "stale", "reset", RETRY_CAUSE_RESET },
		{ TRY_RESET, "reset", "reset", RETRY_CAUSE_RESET },
		{ TRY_TIMEOUT, "timeout", "timeout", RETRY_CAUSE_TIMEOUT },
		{ TRY_MALFORMED, "malformed", "malformed", RETRY_CAUSE_RESET },
		/* refused by the proxy itself: no upstream error */
		{ TRY_FORBIDDEN, "forbidden", NULL, RETRY_CAUSE_CONNECT },
	};

	assert_int_equal(sizeof(cases) / sizeof(cases[0]), TRY_OUTCOME_COUNT);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_string_equal(try_outcome_name(cases[i].outcome), cases[i].name);
		if (cases[i].kind == NULL)
			assert_null(try_outcome_error_kind(cases[i].outcome));
		else
			assert_string_equal(try_outcome_error_kind(cases[i].outcome),
					    cases[i].kind);
		assert_int_equal(try_outcome_cause(cases[i].outcome), cases[i].cause);
	}
}

static void test_give_up_names(void **state)
{
	/* the SPEC's label values, in the order /metrics lists them */
	static const char *const names[] = {
		NULL,	       "attempts", "deadline",	    "not_idempotent", "body_too_large",
		"client_gone", "budget",   "upstream_busy", "upstream_down",  "upstream_http10",
	};

	assert_int_equal(sizeof(names) / sizeof(names[0]), RETRY_GIVE_UP_COUNT);
	assert_null(retry_give_up_name(RETRY_GIVE_UP_NONE));
	for (int r = RETRY_GIVE_UP_ATTEMPTS; r < RETRY_GIVE_UP_COUNT; r++)
		assert_string_equal(retry_give_up_name((enum retry_give_up)r), names[r]);
}

/* The policies the decision table runs under. */
enum test_policy {
	TEST_POLICY_DEFAULT,	  /* 5xx, connect-failure, reset, timeout; honor Retry-After */
	TEST_POLICY_NO_RESET,	  /* 5xx, connect-failure, timeout */
	TEST_POLICY_NO_TIMEOUT,	  /* 5xx, connect-failure, reset */
	TEST_POLICY_NO_CONNECT,	  /* 5xx, reset, timeout */
	TEST_POLICY_CODES,	  /* 429, 503 and connect-failure: no 5xx flag */
	TEST_POLICY_5XX_AND_429,  /* 5xx, 429 */
	TEST_POLICY_IGNORE_AFTER, /* the default with retry_after: ignore */
	TEST_POLICY_ONCE,	  /* the default with max_attempts 1 */
};

#define TEST_DEADLINE_MS 10000
#define TEST_MAX_PENDING 100

/* A policy of the decision table: backoff 100, 200, 400 ms... up to 1 s
 * with no jitter, so waits are exact; deadline 10 s. */
static struct retry_policy test_decide_policy(enum test_policy kind)
{
	struct retry_policy policy = test_backoff_policy(100, 2, 1000, false, 0);

	policy.max_attempts = 3;
	policy.deadline_ms = TEST_DEADLINE_MS;
	policy.honor_retry_after = true;
	policy.on = RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT;
	switch (kind) {
	case TEST_POLICY_DEFAULT:
		break;
	case TEST_POLICY_NO_RESET:
		policy.on &= ~(unsigned)RETRY_ON_RESET;
		break;
	case TEST_POLICY_NO_TIMEOUT:
		policy.on &= ~(unsigned)RETRY_ON_TIMEOUT;
		break;
	case TEST_POLICY_NO_CONNECT:
		policy.on &= ~(unsigned)RETRY_ON_CONNECT_FAILURE;
		break;
	case TEST_POLICY_CODES:
		policy.on = RETRY_ON_CONNECT_FAILURE;
		test_on_code(&policy, 429);
		test_on_code(&policy, 503);
		break;
	case TEST_POLICY_5XX_AND_429:
		policy.on = RETRY_ON_5XX;
		test_on_code(&policy, 429);
		break;
	case TEST_POLICY_IGNORE_AFTER:
		policy.honor_retry_after = false;
		break;
	case TEST_POLICY_ONCE:
		policy.max_attempts = 1;
		break;
	}
	return policy;
}

/* One row of the decision table. Every field left out has the value of a
 * first try of an idempotent request, early, with room everywhere. */
struct test_decide_row {
	const char *name;
	enum test_policy policy;
	enum try_outcome outcome;
	int status;
	bool unsafe; /* not idempotent */
	bool connecting;
	bool is_connect;
	bool body_streamed;
	bool body_too_large;
	bool body_unread;  /* only a json_field condition could tell, in a body not kept */
	bool chunked_only; /* an HTTP/1.0 answer, and the body kept only chunked */
	bool response_started;
	bool response_too_large;
	unsigned attempts; /* 0: 1 */
	unsigned unwaited; /* of them, hedges and stale connections' replacements */
	uint64_t elapsed_ms;
	uint64_t retry_after_ms;
	bool pending_full; /* TEST_MAX_PENDING others pending; else one less */
	bool budget_refuses;
	bool upstream_down;
	bool hold;
	enum retry_should should; /* the response's x-should-retry */
	/* the verdict */
	enum retry_verdict_kind kind;
	enum retry_give_up reason;
	uint64_t wait_ms;
	bool immediate;
	bool too_large;
	bool asked; /* RETRY with the wait the response asked for, not the backoff */
};

#define FINAL RETRY_VERDICT_FINAL
#define RETRY RETRY_VERDICT_RETRY
#define GIVE_UP RETRY_VERDICT_GIVE_UP
#define HOLD RETRY_VERDICT_HOLD

static const struct test_decide_row test_decide_rows[] = {
	/* statuses: only those in retry.on are retried; the rest pass on as final */
	{ "200 passes on", .outcome = TRY_RESPONSE, .status = 200, .kind = FINAL },
	{ "404 not in retry.on passes on", .outcome = TRY_RESPONSE, .status = 404, .kind = FINAL },
	{ "429 is not 5xx", .outcome = TRY_RESPONSE, .status = 429, .kind = FINAL },
	{ "503 under 5xx", .outcome = TRY_RESPONSE, .status = 503, .kind = RETRY, .wait_ms = 100 },
	{ "500 under 5xx", .outcome = TRY_RESPONSE, .status = 500, .kind = RETRY, .wait_ms = 100 },
	{ "599 under 5xx", .outcome = TRY_RESPONSE, .status = 599, .kind = RETRY, .wait_ms = 100 },
	{ "600 is no status", .outcome = TRY_RESPONSE, .status = 600, .kind = FINAL },
	{ "explicit 503", .policy = TEST_POLICY_CODES, .outcome = TRY_RESPONSE, .status = 503,
	  .kind = RETRY, .wait_ms = 100 },
	{ "explicit 429", .policy = TEST_POLICY_CODES, .outcome = TRY_RESPONSE, .status = 429,
	  .kind = RETRY, .wait_ms = 100 },
	{ "500 without 5xx", .policy = TEST_POLICY_CODES, .outcome = TRY_RESPONSE, .status = 500,
	  .kind = FINAL },
	{ "502 without 5xx", .policy = TEST_POLICY_CODES, .outcome = TRY_RESPONSE, .status = 502,
	  .kind = FINAL },
	{ "5xx and 429: 429", .policy = TEST_POLICY_5XX_AND_429, .outcome = TRY_RESPONSE,
	  .status = 429, .kind = RETRY, .wait_ms = 100 },
	{ "5xx and 429: 502", .policy = TEST_POLICY_5XX_AND_429, .outcome = TRY_RESPONSE,
	  .status = 502, .kind = RETRY, .wait_ms = 100 },
	{ "5xx and 429: 404", .policy = TEST_POLICY_5XX_AND_429, .outcome = TRY_RESPONSE,
	  .status = 404, .kind = FINAL },
	/* a status not in retry.on is final whatever else holds (callers rely on
	 * that to skip gathering the other facts) */
	{ "404 whatever else holds", .outcome = TRY_RESPONSE, .status = 404, .unsafe = true,
	  .body_streamed = true, .body_too_large = true, .response_too_large = true, .attempts = 9,
	  .elapsed_ms = 50000, .pending_full = true, .budget_refuses = true, .upstream_down = true,
	  .hold = true, .kind = FINAL },

	/* idempotent requests retry every failure in retry.on */
	{ "dns", .outcome = TRY_DNS, .kind = RETRY, .wait_ms = 100 },
	{ "refused", .outcome = TRY_REFUSED, .kind = RETRY, .wait_ms = 100 },
	{ "connect timeout", .outcome = TRY_CONNECT_TIMEOUT, .kind = RETRY, .wait_ms = 100 },
	{ "tls handshake", .outcome = TRY_TLS, .kind = RETRY, .wait_ms = 100 },
	{ "reset", .outcome = TRY_RESET, .kind = RETRY, .wait_ms = 100 },
	{ "timeout after connect", .outcome = TRY_TIMEOUT, .kind = RETRY, .wait_ms = 100 },
	{ "timeout while connecting", .outcome = TRY_TIMEOUT, .connecting = true, .kind = RETRY,
	  .wait_ms = 100 },
	{ "malformed", .outcome = TRY_MALFORMED, .kind = RETRY, .wait_ms = 100 },

	/* a request that is not idempotent: never once it may have been sent... */
	{ "unsafe reset", .unsafe = true, .outcome = TRY_RESET, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "unsafe timeout after connect", .unsafe = true, .outcome = TRY_TIMEOUT, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "unsafe malformed", .unsafe = true, .outcome = TRY_MALFORMED, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "unsafe 503", .unsafe = true, .outcome = TRY_RESPONSE, .status = 503, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "unsafe stale", .unsafe = true, .outcome = TRY_STALE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	/* ... but always when it provably never reached the upstream */
	{ "unsafe dns", .unsafe = true, .outcome = TRY_DNS, .kind = RETRY, .wait_ms = 100 },
	{ "unsafe refused", .unsafe = true, .outcome = TRY_REFUSED, .kind = RETRY, .wait_ms = 100 },
	{ "unsafe connect timeout", .unsafe = true, .outcome = TRY_CONNECT_TIMEOUT, .kind = RETRY,
	  .wait_ms = 100 },
	{ "unsafe tls handshake", .unsafe = true, .outcome = TRY_TLS, .kind = RETRY,
	  .wait_ms = 100 },
	{ "unsafe timeout while connecting", .unsafe = true, .outcome = TRY_TIMEOUT,
	  .connecting = true, .kind = RETRY, .wait_ms = 100 },
	{ "unsafe 404 passes on", .unsafe = true, .outcome = TRY_RESPONSE, .status = 404,
	  .kind = FINAL },

	/* a certificate that fails verification: never, whatever else holds */
	{ "tls verify", .outcome = TRY_TLS_VERIFY, .kind = FINAL },
	{ "unsafe tls verify", .unsafe = true, .outcome = TRY_TLS_VERIFY, .kind = FINAL },
	{ "tls verify while connecting", .outcome = TRY_TLS_VERIFY, .connecting = true,
	  .kind = FINAL },

	/* failures not in retry.on are final, before any give-up reason */
	{ "reset not in retry.on", .policy = TEST_POLICY_NO_RESET, .outcome = TRY_RESET,
	  .kind = FINAL },
	{ "malformed not in retry.on", .policy = TEST_POLICY_NO_RESET, .outcome = TRY_MALFORMED,
	  .kind = FINAL },
	{ "unsafe reset not in retry.on", .policy = TEST_POLICY_NO_RESET, .unsafe = true,
	  .outcome = TRY_RESET, .kind = FINAL },
	{ "timeout still in retry.on", .policy = TEST_POLICY_NO_RESET, .outcome = TRY_TIMEOUT,
	  .kind = RETRY, .wait_ms = 100 },
	{ "timeout not in retry.on", .policy = TEST_POLICY_NO_TIMEOUT, .outcome = TRY_TIMEOUT,
	  .kind = FINAL },
	{ "connecting timeout not in retry.on", .policy = TEST_POLICY_NO_TIMEOUT,
	  .outcome = TRY_TIMEOUT, .connecting = true, .kind = FINAL },
	{ "dns not in retry.on", .policy = TEST_POLICY_NO_CONNECT, .outcome = TRY_DNS,
	  .kind = FINAL },
	{ "refused not in retry.on", .policy = TEST_POLICY_NO_CONNECT, .outcome = TRY_REFUSED,
	  .kind = FINAL },
	{ "connect timeout not in retry.on", .policy = TEST_POLICY_NO_CONNECT,
	  .outcome = TRY_CONNECT_TIMEOUT, .kind = FINAL },
	{ "tls not in retry.on", .policy = TEST_POLICY_NO_CONNECT, .outcome = TRY_TLS,
	  .kind = FINAL },
	{ "only statuses in retry.on", .policy = TEST_POLICY_5XX_AND_429, .outcome = TRY_REFUSED,
	  .kind = FINAL },

	/* CONNECT tunnels are never retried */
	{ "connect refused", .is_connect = true, .outcome = TRY_REFUSED, .kind = FINAL },
	{ "connect dns", .is_connect = true, .outcome = TRY_DNS, .kind = FINAL },
	{ "connect timeout while connecting", .is_connect = true, .outcome = TRY_TIMEOUT,
	  .connecting = true, .kind = FINAL },

	/* nothing is retried once the client saw bytes of a response */
	{ "reset mid-response", .response_started = true, .outcome = TRY_RESET, .kind = FINAL },
	{ "timeout mid-response", .response_started = true, .outcome = TRY_TIMEOUT, .kind = FINAL },

	/* a retryable response too large to keep passes on, noted */
	{ "503 too large to keep", .outcome = TRY_RESPONSE, .status = 503,
	  .response_too_large = true, .kind = FINAL, .too_large = true },
	{ "404 large is just final", .outcome = TRY_RESPONSE, .status = 404,
	  .response_too_large = true, .kind = FINAL },
	/* ... but only one that would have been retried: one that would not
	 * says why, as a small one does */
	{ "unsafe 503 too large", .unsafe = true, .outcome = TRY_RESPONSE, .status = 503,
	  .response_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "last 503 too large", .attempts = 3, .outcome = TRY_RESPONSE, .status = 503,
	  .response_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "503 too large past the deadline", .elapsed_ms = TEST_DEADLINE_MS,
	  .outcome = TRY_RESPONSE, .status = 503, .response_too_large = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },
	{ "503 too large, budget spent", .budget_refuses = true, .outcome = TRY_RESPONSE,
	  .status = 503, .response_too_large = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BUDGET },
	{ "503 too large, pending retries full", .pending_full = true, .outcome = TRY_RESPONSE,
	  .status = 503, .response_too_large = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BUDGET },
	{ "503 too large, upstream down, budget spent", .upstream_down = true, .hold = true,
	  .budget_refuses = true, .outcome = TRY_RESPONSE, .status = 503,
	  .response_too_large = true, .kind = FINAL, .too_large = true },
	{ "503 too large, upstream down", .upstream_down = true, .hold = true,
	  .outcome = TRY_RESPONSE, .status = 503, .response_too_large = true, .kind = FINAL,
	  .too_large = true },

	/* a streamed request body cannot be sent again */
	{ "body over replay_buffer", .outcome = TRY_RESET, .body_streamed = true,
	  .body_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "body streamed otherwise", .outcome = TRY_RESET, .body_streamed = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "503 after a body over replay_buffer", .outcome = TRY_RESPONSE, .status = 503,
	  .body_streamed = true, .body_too_large = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "never sent, but the body is gone", .unsafe = true, .outcome = TRY_DNS,
	  .body_streamed = true, .body_too_large = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "not idempotent comes first", .unsafe = true, .outcome = TRY_RESET, .body_streamed = true,
	  .body_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	/* one whose safety only its body could show (json_field), too large to
	 * keep and read: the size stopped it, not the method */
	{ "503, body too large to read", .unsafe = true, .outcome = TRY_RESPONSE, .status = 503,
	  .body_streamed = true, .body_too_large = true, .body_unread = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "reset, body too large to read", .unsafe = true, .outcome = TRY_RESET,
	  .body_streamed = true, .body_too_large = true, .body_unread = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "refused, body too large to read, not yet sent", .unsafe = true, .outcome = TRY_REFUSED,
	  .body_too_large = true, .body_unread = true, .kind = RETRY, .wait_ms = 100 },
	{ "max_attempts 1, body too large to read", .policy = TEST_POLICY_ONCE, .unsafe = true,
	  .outcome = TRY_RESPONSE, .status = 503, .body_streamed = true, .body_too_large = true,
	  .body_unread = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },

	/* an HTTP/1.0 upstream, and a body that could go again only chunked: not
	 * sent again, after the reasons that stop any retry */
	{ "503 from HTTP/1.0, body only chunked", .outcome = TRY_RESPONSE, .status = 503,
	  .chunked_only = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_UPSTREAM_HTTP10 },
	{ "reset after HTTP/1.0, body only chunked", .attempts = 2, .outcome = TRY_RESET,
	  .chunked_only = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_UPSTREAM_HTTP10 },
	{ "HTTP/1.0, body only chunked, last try", .attempts = 3, .outcome = TRY_RESPONSE,
	  .status = 503, .chunked_only = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "HTTP/1.0, body only chunked, past the deadline", .elapsed_ms = TEST_DEADLINE_MS,
	  .outcome = TRY_RESPONSE, .status = 503, .chunked_only = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },
	{ "HTTP/1.0, body only chunked, budget spent", .budget_refuses = true,
	  .outcome = TRY_RESPONSE, .status = 503, .chunked_only = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_UPSTREAM_HTTP10 },
	{ "stale after HTTP/1.0, body only chunked: not replaced at once", .attempts = 2,
	  .outcome = TRY_STALE, .chunked_only = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_UPSTREAM_HTTP10 },
	{ "HTTP/1.0, body only chunked, upstream down", .upstream_down = true, .hold = true,
	  .outcome = TRY_REFUSED, .chunked_only = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_UPSTREAM_HTTP10 },

	/* max_attempts, then the backoff for the try after this one */
	{ "second try failed", .attempts = 2, .outcome = TRY_RESET, .kind = RETRY, .wait_ms = 200 },
	/* n counts waits, not tries: a hedge or a stale connection's replacement
	 * came after no wait, so after it the first wait is still backoff_0 */
	{ "first try and its hedge failed", .attempts = 2, .unwaited = 1, .outcome = TRY_RESET,
	  .kind = RETRY, .wait_ms = 100 },
	{ "stale, its replacement got 503", .attempts = 2, .unwaited = 1, .outcome = TRY_RESPONSE,
	  .status = 503, .kind = RETRY, .wait_ms = 100 },
	{ "a hedge, then a retry failed", .attempts = 3, .unwaited = 1, .elapsed_ms = 100,
	  .outcome = TRY_RESET, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "last try failed", .attempts = 3, .outcome = TRY_RESET, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "last try got 503", .attempts = 3, .outcome = TRY_RESPONSE, .status = 503,
	  .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "past max_attempts", .attempts = 7, .outcome = TRY_DNS, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "attempts before deadline", .attempts = 3, .elapsed_ms = 20000, .outcome = TRY_RESET,
	  .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "body before attempts", .attempts = 3, .outcome = TRY_RESET, .body_streamed = true,
	  .body_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "a body streamed since no retry could follow: attempts", .attempts = 3,
	  .outcome = TRY_RESPONSE, .status = 503, .body_streamed = true, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_ATTEMPTS },

	/* the next try must start within the deadline */
	{ "starts right at the deadline", .elapsed_ms = 9900, .outcome = TRY_RESET, .kind = RETRY,
	  .wait_ms = 100 },
	{ "would start after the deadline", .elapsed_ms = 9901, .outcome = TRY_RESET,
	  .kind = GIVE_UP, .reason = RETRY_GIVE_UP_DEADLINE },
	{ "longer backoff past the deadline", .attempts = 2, .elapsed_ms = 9801,
	  .outcome = TRY_TIMEOUT, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_DEADLINE },
	{ "deadline long gone", .elapsed_ms = 50000, .outcome = TRY_DNS, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },

	/* Retry-After sets the wait to at least that long */
	{ "Retry-After longer than backoff", .outcome = TRY_RESPONSE, .status = 503,
	  .retry_after_ms = 5000, .kind = RETRY, .wait_ms = 5000, .asked = true },
	{ "Retry-After shorter than backoff", .outcome = TRY_RESPONSE, .status = 503,
	  .retry_after_ms = 50, .kind = RETRY, .wait_ms = 100 },
	{ "Retry-After up to the deadline", .outcome = TRY_RESPONSE, .status = 503,
	  .retry_after_ms = 10000, .kind = RETRY, .wait_ms = 10000, .asked = true },
	{ "Retry-After past the deadline: answer now", .outcome = TRY_RESPONSE, .status = 503,
	  .retry_after_ms = 20000, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_DEADLINE },
	{ "Retry-After past what is left", .elapsed_ms = 6000, .outcome = TRY_RESPONSE,
	  .status = 429, .policy = TEST_POLICY_5XX_AND_429, .retry_after_ms = 4001, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },
	{ "Retry-After past 64 bits of milliseconds: answer now", .outcome = TRY_RESPONSE,
	  .status = 503, .retry_after_ms = RETRY_AFTER_SATURATED_MS, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },
	{ "retry_after: ignore", .policy = TEST_POLICY_IGNORE_AFTER, .outcome = TRY_RESPONSE,
	  .status = 503, .retry_after_ms = 20000, .kind = RETRY, .wait_ms = 100 },
	{ "Retry-After counts for responses only", .outcome = TRY_RESET, .retry_after_ms = 5000,
	  .kind = RETRY, .wait_ms = 100 },

	/* holding for a down upstream still respects attempts and deadline */
	{ "hold while down", .upstream_down = true, .hold = true, .outcome = TRY_REFUSED,
	  .kind = HOLD },
	{ "down without hold: no backoff before the 502", .upstream_down = true,
	  .outcome = TRY_REFUSED, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_UPSTREAM_DOWN },
	{ "down without hold, Retry-After: answered now", .upstream_down = true,
	  .outcome = TRY_RESPONSE, .status = 503, .retry_after_ms = 2000, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_UPSTREAM_DOWN },
	{ "down without hold, last try: attempts", .attempts = 3, .upstream_down = true,
	  .outcome = TRY_REFUSED, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "hold set, upstream up", .hold = true, .outcome = TRY_REFUSED, .kind = RETRY,
	  .wait_ms = 100 },
	{ "hold after the last try", .attempts = 3, .upstream_down = true, .hold = true,
	  .outcome = TRY_REFUSED, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "hold past the deadline", .elapsed_ms = 9950, .upstream_down = true, .hold = true,
	  .outcome = TRY_REFUSED, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_DEADLINE },
	{ "Retry-After longer than the backoff while down: waited, not held", .upstream_down = true,
	  .hold = true, .outcome = TRY_RESPONSE, .status = 503, .retry_after_ms = 2000,
	  .kind = RETRY, .wait_ms = 2000, .asked = true },
	{ "Retry-After shorter than the backoff while down: held", .upstream_down = true,
	  .hold = true, .outcome = TRY_RESPONSE, .status = 503, .retry_after_ms = 50,
	  .kind = HOLD },
	{ "hold needs no budget", .upstream_down = true, .hold = true, .pending_full = true,
	  .budget_refuses = true, .outcome = TRY_DNS, .kind = HOLD },
	{ "unsafe and sent: no hold", .unsafe = true, .upstream_down = true, .hold = true,
	  .outcome = TRY_RESET, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },

	/* the pending-retries cap and the route's budget, last */
	{ "pending retries at the cap", .pending_full = true, .outcome = TRY_RESET, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BUDGET },
	{ "budget spent", .budget_refuses = true, .outcome = TRY_RESET, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BUDGET },
	{ "budget spent on a 503", .budget_refuses = true, .outcome = TRY_RESPONSE, .status = 503,
	  .kind = GIVE_UP, .reason = RETRY_GIVE_UP_BUDGET },
	{ "deadline before budget", .elapsed_ms = 9950, .budget_refuses = true,
	  .pending_full = true, .outcome = TRY_RESET, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },

	/* a stale pooled connection: again at once on a new one, outside
	 * retry.on, backoff and budget... */
	{ "stale", .outcome = TRY_STALE, .kind = RETRY, .immediate = true },
	{ "stale on the second try", .attempts = 2, .outcome = TRY_STALE, .kind = RETRY,
	  .immediate = true },
	{ "stale with no budget left", .pending_full = true, .budget_refuses = true,
	  .outcome = TRY_STALE, .kind = RETRY, .immediate = true },
	{ "stale with reset not in retry.on", .policy = TEST_POLICY_NO_RESET, .outcome = TRY_STALE,
	  .kind = RETRY, .immediate = true },
	{ "stale just before the deadline", .elapsed_ms = 9999, .outcome = TRY_STALE, .kind = RETRY,
	  .immediate = true },
	/* ... unless it may not: then it is a reset like any other */
	{ "stale at the deadline", .elapsed_ms = 10000, .outcome = TRY_STALE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_DEADLINE },
	{ "stale on the last try", .attempts = 3, .outcome = TRY_STALE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "stale on the last try, reset not in retry.on", .attempts = 3,
	  .policy = TEST_POLICY_NO_RESET, .outcome = TRY_STALE, .kind = FINAL },
	{ "stale with the body over replay_buffer", .outcome = TRY_STALE, .body_streamed = true,
	  .body_too_large = true, .kind = GIVE_UP, .reason = RETRY_GIVE_UP_BODY_TOO_LARGE },
	{ "stale with a streamed body", .outcome = TRY_STALE, .body_streamed = true,
	  .kind = GIVE_UP, .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "stale in a tunnel", .is_connect = true, .outcome = TRY_STALE, .kind = FINAL },
	{ "stale after response bytes", .response_started = true, .outcome = TRY_STALE,
	  .kind = FINAL },

	/* x-should-retry: false stops a status in retry.on, true adds an error
	 * status retry.on leaves out */
	{ "503 with x-should-retry: false", .outcome = TRY_RESPONSE, .status = 503,
	  .should = RETRY_SHOULD_FALSE, .kind = FINAL },
	{ "503 with x-should-retry: true", .outcome = TRY_RESPONSE, .status = 503,
	  .should = RETRY_SHOULD_TRUE, .kind = RETRY, .wait_ms = 100 },
	{ "409 with x-should-retry: true", .outcome = TRY_RESPONSE, .status = 409,
	  .should = RETRY_SHOULD_TRUE, .kind = RETRY, .wait_ms = 100 },
	{ "429 not in retry.on, x-should-retry: true", .outcome = TRY_RESPONSE, .status = 429,
	  .should = RETRY_SHOULD_TRUE, .retry_after_ms = 700, .kind = RETRY, .wait_ms = 700,
	  .asked = true },
	{ "200 with x-should-retry: true is an answer", .outcome = TRY_RESPONSE, .status = 200,
	  .should = RETRY_SHOULD_TRUE, .kind = FINAL },
	{ "304 with x-should-retry: true is an answer", .outcome = TRY_RESPONSE, .status = 304,
	  .should = RETRY_SHOULD_TRUE, .kind = FINAL },
	{ "409 with x-should-retry: true, unsafe request", .outcome = TRY_RESPONSE, .status = 409,
	  .unsafe = true, .should = RETRY_SHOULD_TRUE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_NOT_IDEMPOTENT },
	{ "409 with x-should-retry: true, last try", .outcome = TRY_RESPONSE, .status = 409,
	  .attempts = 3, .should = RETRY_SHOULD_TRUE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_ATTEMPTS },
	{ "409 with x-should-retry: true, budget spent", .outcome = TRY_RESPONSE, .status = 409,
	  .budget_refuses = true, .should = RETRY_SHOULD_TRUE, .kind = GIVE_UP,
	  .reason = RETRY_GIVE_UP_BUDGET },
	{ "x-should-retry: false on a 503 whatever else holds", .outcome = TRY_RESPONSE,
	  .status = 503, .should = RETRY_SHOULD_FALSE, .attempts = 9, .budget_refuses = true,
	  .upstream_down = true, .hold = true, .kind = FINAL },
	{ "x-should-retry: false says nothing of a reset", .outcome = TRY_RESET,
	  .should = RETRY_SHOULD_FALSE, .kind = RETRY, .wait_ms = 100 },
};

#undef FINAL
#undef RETRY
#undef GIVE_UP
#undef HOLD

/* The facts a row stands for. */
static struct retry_facts test_decide_facts(const struct test_decide_row *row)
{
	struct retry_facts facts;

	memset(&facts, 0, sizeof(facts));
	facts.outcome = row->outcome;
	facts.status = row->status;
	facts.connecting = row->connecting;
	facts.is_connect = row->is_connect;
	facts.idempotent = !row->unsafe;
	facts.body_streamed = row->body_streamed;
	facts.body_too_large = row->body_too_large;
	facts.body_unread = row->body_unread;
	facts.body_chunked_only = row->chunked_only;
	facts.response_started = row->response_started;
	facts.response_too_large = row->response_too_large;
	facts.attempts = row->attempts != 0 ? row->attempts : 1;
	facts.unwaited = row->unwaited;
	facts.elapsed_ms = row->elapsed_ms;
	facts.retry_after_ms = row->retry_after_ms;
	facts.max_pending_retries = TEST_MAX_PENDING;
	facts.pending_retries = row->pending_full ? TEST_MAX_PENDING : TEST_MAX_PENDING - 1;
	facts.budget_allows = !row->budget_refuses;
	facts.upstream_down = row->upstream_down;
	facts.hold_when_down = row->hold;
	facts.should_retry = row->should;
	return facts;
}

/* Did the decision get as far as drawing the backoff? */
static bool test_decide_drew(const struct retry_verdict *v)
{
	if (v->kind == RETRY_VERDICT_RETRY)
		return !v->immediate;
	return v->kind == RETRY_VERDICT_HOLD || (v->kind == RETRY_VERDICT_FINAL && v->too_large) ||
	       (v->kind == RETRY_VERDICT_GIVE_UP &&
		(v->reason == RETRY_GIVE_UP_DEADLINE || v->reason == RETRY_GIVE_UP_BUDGET));
}

static void test_decide_table(void **state)
{
	for (size_t i = 0; i < sizeof(test_decide_rows) / sizeof(test_decide_rows[0]); i++) {
		const struct test_decide_row *row = &test_decide_rows[i];
		struct retry_policy policy = test_decide_policy(row->policy);
		struct retry_facts facts = test_decide_facts(row);
		struct retry_rng rng;
		struct retry_rng twin;
		struct retry_verdict v;

		retry_rng_seed_with(&rng, 1000 + i);
		twin = rng;
		v = retry_decide(&policy, &facts, &rng);
		if (v.kind != row->kind || v.reason != row->reason || v.wait_ms != row->wait_ms ||
		    v.immediate != row->immediate || v.too_large != row->too_large ||
		    v.cause != try_outcome_cause(row->outcome))
			fail_msg("%s: got kind %d reason %d wait %llu immediate %d too_large %d "
				 "cause %d",
				 row->name, (int)v.kind, (int)v.reason,
				 (unsigned long long)v.wait_ms, (int)v.immediate, (int)v.too_large,
				 (int)v.cause);
		/* a RETRY says which wait it chose: the response's, or the
		 * backoff (100 ms in every row's policy) */
		if (v.kind == RETRY_VERDICT_RETRY && !v.immediate &&
		    (v.asked != row->asked || v.backoff_ms > v.wait_ms ||
		     v.wait_ms != (v.asked ? row->retry_after_ms : v.backoff_ms)))
			fail_msg("%s: asked %d, backoff %llu, wait %llu", row->name, (int)v.asked,
				 (unsigned long long)v.backoff_ms, (unsigned long long)v.wait_ms);
		/* the generator moves exactly as one backoff draw, or not at all */
		if (test_decide_drew(&v))
			retry_backoff_ms(&policy, facts.attempts - facts.unwaited - 1, &twin);
		if (memcmp(rng.s, twin.s, sizeof(rng.s)) != 0)
			fail_msg("%s: random generator used differently", row->name);
	}
}

static void test_decide_seeded_wait(void **state)
{
	struct retry_policy policy = test_decide_policy(TEST_POLICY_DEFAULT);
	struct retry_facts facts;
	struct retry_rng rng;
	struct retry_rng twin;
	/* pinned: seed 42 gives these waits for tries 1..4 under 100 ms x 2^n
	 * plus up to 250 ms of jitter, capped at 1 s */
	static const uint64_t expected[] = { 245, 383, 599, 1000 };
	unsigned attempts;

	policy.jitter_ms = 250;
	policy.max_attempts = 5;
	policy.deadline_ms = 60000;
	memset(&facts, 0, sizeof(facts));
	facts.outcome = TRY_RESET;
	facts.idempotent = true;
	facts.max_pending_retries = 1;
	facts.budget_allows = true;
	retry_rng_seed_with(&rng, 42);
	retry_rng_seed_with(&twin, 42);
	for (attempts = 1; attempts <= 4; attempts++) {
		struct retry_verdict v;

		facts.attempts = attempts;
		v = retry_decide(&policy, &facts, &rng);
		assert_int_equal(v.kind, RETRY_VERDICT_RETRY);
		assert_false(v.immediate);
		assert_int_equal(v.cause, RETRY_CAUSE_RESET);
		/* the same draw as the backoff alone: seeded sequences keep their numbers */
		assert_int_equal(v.wait_ms, retry_backoff_ms(&policy, attempts - 1, &twin));
		assert_int_equal(v.wait_ms, expected[attempts - 1]);
	}
	/* a stale connection draws nothing */
	facts.outcome = TRY_STALE;
	facts.attempts = 1;
	assert_true(retry_decide(&policy, &facts, &rng).immediate);
	assert_int_equal(retry_rng_next(&rng), retry_rng_next(&twin));
}

static void test_within_deadline(void **state)
{
	struct retry_policy policy = test_decide_policy(TEST_POLICY_DEFAULT);

	assert_true(retry_within_deadline(&policy, 0, 0));
	assert_true(retry_within_deadline(&policy, 9900, 100));
	assert_false(retry_within_deadline(&policy, 9901, 100));
	assert_true(retry_within_deadline(&policy, 10000, 0));
	assert_false(retry_within_deadline(&policy, 10001, 0));
	assert_false(retry_within_deadline(&policy, 0, 10001));
	/* no wrap-around into a short sum */
	assert_false(retry_within_deadline(&policy, 1, UINT64_MAX));
	assert_false(retry_within_deadline(&policy, UINT64_MAX, 1));
	policy.deadline_ms = UINT64_MAX;
	assert_true(retry_within_deadline(&policy, UINT64_MAX - 5, 5));
	assert_false(retry_within_deadline(&policy, UINT64_MAX - 5, 6));
}

#define TEST_HEDGE_MAX_ATTEMPTS 5

/* One row of the hedge table. Every field left out has the value of a GET
 * idempotent by its method, with one try in flight for a while and room
 * everywhere, under hedge after 300 ms, max 1: a hedge is allowed. */
struct test_hedge_row {
	const char *name;
	const char *method; /* NULL: "GET" */
	size_t method_len;  /* 0: strlen(method) */
	bool unsafe;	    /* not idempotent by the route's map */
	bool conditional;   /* retryable only by when_present or a key */
	bool body;
	bool keyed;	    /* carries an Idempotency-Key upstream */
	unsigned attempts;  /* 0: 1 */
	unsigned in_flight; /* 0: 1 */
	bool head_seen;
	bool response_started;
	uint64_t elapsed_ms; /* 0: 300 */
	bool budget_refuses;
	bool no_hedge; /* hedge.after 0: not configured */
	unsigned max;  /* 0: 1 */
	bool allowed;
};

static const struct test_hedge_row test_hedge_rows[] = {
	/* only GET and HEAD, exact case */
	{ "GET", .allowed = true },
	{ "HEAD", .method = "HEAD", .allowed = true },
	{ "POST", .method = "POST" },
	{ "PUT, idempotent by the map", .method = "PUT" },
	{ "DELETE, idempotent by the map", .method = "DELETE" },
	{ "OPTIONS", .method = "OPTIONS" },
	{ "lower-case get", .method = "get" },
	{ "Head", .method = "Head" },
	{ "GE", .method = "GE" },
	{ "GETS", .method = "GETS" },
	{ "HEADER", .method = "HEADER" },
	{ "empty method", .method = "" },
	{ "GET as the first 3 bytes of a longer buffer", .method = "GET /x", .method_len = 3,
	  .allowed = true },
	{ "HEAD cut short", .method = "HEAD", .method_len = 3 },
	/* idempotent by the route's method map, not by a condition */
	{ "GET not in the map", .unsafe = true },
	{ "GET retryable only by when_present", .conditional = true },
	{ "HEAD retryable only by when_present", .method = "HEAD", .conditional = true },
	{ "GET with an Idempotency-Key", .keyed = true },
	{ "HEAD with an Idempotency-Key", .method = "HEAD", .keyed = true },
	{ "POST retryable by when_present", .method = "POST", .conditional = true },
	/* never with a body */
	{ "GET with a body", .body = true },
	{ "HEAD with a body", .method = "HEAD", .body = true },
	/* only when configured */
	{ "no hedge configured", .no_hedge = true },
	/* only while nothing has answered */
	{ "a head was seen", .head_seen = true },
	{ "a response reached the client", .response_started = true },
	/* extra tries in flight: at most max */
	{ "max 1, the first in flight", .in_flight = 1, .attempts = 1, .allowed = true },
	{ "max 1, one hedge in flight", .in_flight = 2, .attempts = 2 },
	{ "max 1, one hedge in flight after a failed try", .in_flight = 2, .attempts = 3 },
	{ "max 1, the first failed, its retry in flight", .in_flight = 1, .attempts = 2,
	  .allowed = true },
	{ "max 3, two hedges in flight", .max = 3, .in_flight = 3, .attempts = 3, .allowed = true },
	{ "max 3, three hedges in flight", .max = 3, .in_flight = 4, .attempts = 4 },
	{ "max 2, two hedges in flight", .max = 2, .in_flight = 3, .attempts = 3 },
	/* max_attempts counts every hedge */
	{ "one try left", .max = 3, .in_flight = 2, .attempts = TEST_HEDGE_MAX_ATTEMPTS - 1,
	  .allowed = true },
	{ "max_attempts reached", .max = 3, .in_flight = 2, .attempts = TEST_HEDGE_MAX_ATTEMPTS },
	{ "past max_attempts", .max = 3, .in_flight = 1, .attempts = TEST_HEDGE_MAX_ATTEMPTS + 1 },
	/* the deadline */
	{ "just before the deadline", .elapsed_ms = TEST_DEADLINE_MS - 1, .allowed = true },
	{ "at the deadline", .elapsed_ms = TEST_DEADLINE_MS },
	{ "past the deadline", .elapsed_ms = UINT64_MAX },
	/* the budget */
	{ "budget spent", .budget_refuses = true },
	{ "budget spent on a HEAD", .method = "HEAD", .budget_refuses = true },
	/* everything at once */
	{ "everything refuses", .method = "POST", .unsafe = true, .conditional = true, .body = true,
	  .attempts = 9, .in_flight = 9, .head_seen = true, .response_started = true,
	  .elapsed_ms = 50000, .budget_refuses = true, .no_hedge = true },
};

static void test_hedge_table(void **state)
{
	struct retry_policy policy = test_decide_policy(TEST_POLICY_DEFAULT);

	policy.max_attempts = TEST_HEDGE_MAX_ATTEMPTS;
	for (size_t i = 0; i < sizeof(test_hedge_rows) / sizeof(test_hedge_rows[0]); i++) {
		const struct test_hedge_row *row = &test_hedge_rows[i];
		struct hedge_policy hedge = { row->no_hedge ? 0 : 300,
					      row->max != 0 ? row->max : 1 };
		struct hedge_facts facts;

		memset(&facts, 0, sizeof(facts));
		facts.method = row->method != NULL ? row->method : "GET";
		facts.method_len = row->method_len != 0 ? row->method_len : strlen(facts.method);
		facts.idempotent = !row->unsafe;
		facts.conditional = row->conditional;
		facts.body = row->body;
		facts.keyed = row->keyed;
		facts.attempts = row->attempts != 0 ? row->attempts : 1;
		facts.in_flight = row->in_flight != 0 ? row->in_flight : 1;
		facts.head_seen = row->head_seen;
		facts.response_started = row->response_started;
		facts.elapsed_ms = row->elapsed_ms != 0 ? row->elapsed_ms : 300;
		facts.budget_allows = !row->budget_refuses;
		if (retry_hedge_allowed(&policy, &hedge, &facts) != row->allowed)
			fail_msg("%s: expected %s", row->name, row->allowed ? "a hedge" : "none");
	}
}

/* A method given as NULL with length 0 is no method at all, and hedge.after
 * of 1 ms is as configured as any. */
static void test_hedge_edges(void **state)
{
	struct retry_policy policy = test_decide_policy(TEST_POLICY_DEFAULT);
	struct hedge_policy hedge = { 1, 1 };
	struct hedge_facts facts;

	memset(&facts, 0, sizeof(facts));
	facts.idempotent = true;
	facts.attempts = 1;
	facts.in_flight = 1;
	facts.budget_allows = true;
	assert_false(retry_hedge_allowed(&policy, &hedge, &facts));
	facts.method = "HEAD";
	facts.method_len = 4;
	assert_true(retry_hedge_allowed(&policy, &hedge, &facts));
	/* a policy with max_attempts 1 never hedges */
	policy.max_attempts = 1;
	assert_false(retry_hedge_allowed(&policy, &hedge, &facts));
}

static void test_should_parse(void **state)
{
	static const struct {
		const char *value;
		enum retry_should want;
	} cases[] = {
		{ "true", RETRY_SHOULD_TRUE },
		{ "false", RETRY_SHOULD_FALSE },
		{ "TRUE", RETRY_SHOULD_TRUE },
		{ "False", RETRY_SHOULD_FALSE },
		{ " \ttrue\t ", RETRY_SHOULD_TRUE },
		{ "", RETRY_SHOULD_UNSET },
		{ "   ", RETRY_SHOULD_UNSET },
		{ "yes", RETRY_SHOULD_UNSET },
		{ "1", RETRY_SHOULD_UNSET },
		{ "0", RETRY_SHOULD_UNSET },
		{ "truee", RETRY_SHOULD_UNSET },
		{ "tru", RETRY_SHOULD_UNSET },
		{ "\"true\"", RETRY_SHOULD_UNSET },
		/* a list is that many copies: a false wins, unknown ones are
		 * ignored */
		{ "true, false", RETRY_SHOULD_FALSE },
		{ "false,true", RETRY_SHOULD_FALSE },
		{ "true, true", RETRY_SHOULD_TRUE },
		{ "yes, TRUE", RETRY_SHOULD_TRUE },
		{ ",true,", RETRY_SHOULD_TRUE },
		{ "yes, no", RETRY_SHOULD_UNSET },
		{ " , ", RETRY_SHOULD_UNSET },
		{ "true false", RETRY_SHOULD_UNSET },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (retry_should_parse(cases[i].value, strlen(cases[i].value)) != cases[i].want)
			fail_msg("x-should-retry \"%s\": not %d", cases[i].value,
				 (int)cases[i].want);
	/* only the given length counts */
	assert_int_equal(retry_should_parse("truex", 4), RETRY_SHOULD_TRUE);
	assert_int_equal(retry_should_parse(NULL, 0), RETRY_SHOULD_UNSET);
}

static void test_after_ms_parse(void **state)
{
	static const struct {
		const char *value;
		int rc;
		uint64_t ms;
	} cases[] = {
		{ "0", 0, 0 },
		{ "1500", 0, 1500 },
		{ " 250 ", 0, 250 },
		{ "\t7\t", 0, 7 },
		{ "1500.0", 0, 1500 },
		{ "1500.000", 0, 1500 },
		{ "1500.2", 0, 1501 }, /* at least that long */
		{ "0.001", 0, 1 },
		{ "86400000", 0, 86400000 },
		{ "86400001", 0, 86400001 }, /* exact: only the deadline bounds it */
		{ "259200000", 0, 259200000 },
		{ "18446744073709551615", 0, RETRY_AFTER_SATURATED_MS },
		{ "18446744073709551614.5", 0, RETRY_AFTER_SATURATED_MS },
		{ "18446744073709551616", 0, RETRY_AFTER_SATURATED_MS },
		{ "99999999999999999999999999", 0, RETRY_AFTER_SATURATED_MS },
		{ "99999999999999999999999999.5", 0, RETRY_AFTER_SATURATED_MS },
		{ "", -1, 0 },
		{ " ", -1, 0 },
		{ "-5", -1, 0 },
		{ "+5", -1, 0 },
		{ "5s", -1, 0 },
		{ "1 500", -1, 0 },
		{ "1500.", -1, 0 },
		{ ".5", -1, 0 },
		{ "1.5.2", -1, 0 },
		{ "1e3", -1, 0 },
		{ "0x10", -1, 0 },
		{ "Tue, 14 Nov 2023 22:15:20 GMT", -1, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ms = 424242;
		int rc = retry_after_ms_parse(cases[i].value, strlen(cases[i].value), &ms);

		if (rc != cases[i].rc)
			fail_msg("retry-after-ms \"%s\": rc %d, want %d", cases[i].value, rc,
				 cases[i].rc);
		if (rc == 0 && ms != cases[i].ms)
			fail_msg("retry-after-ms \"%s\": %llu ms, want %llu", cases[i].value,
				 (unsigned long long)ms, (unsigned long long)cases[i].ms);
		if (rc < 0 && ms != 424242)
			fail_msg("retry-after-ms \"%s\": result touched on error", cases[i].value);
	}
	{
		uint64_t ms = 0;

		assert_int_equal(retry_after_ms_parse("12345", 2, &ms), 0);
		assert_int_equal(ms, 12);
	}
}

static void test_response_retryable(void **state)
{
	struct retry_policy policy = test_decide_policy(TEST_POLICY_CODES); /* 429, 503 */
	static const struct {
		int status;
		enum retry_should should;
		bool want;
	} cases[] = {
		{ 503, RETRY_SHOULD_UNSET, true },  { 503, RETRY_SHOULD_TRUE, true },
		{ 503, RETRY_SHOULD_FALSE, false }, { 429, RETRY_SHOULD_FALSE, false },
		{ 500, RETRY_SHOULD_UNSET, false }, { 500, RETRY_SHOULD_TRUE, true },
		{ 400, RETRY_SHOULD_TRUE, true },   { 409, RETRY_SHOULD_TRUE, true },
		{ 599, RETRY_SHOULD_TRUE, true },   { 399, RETRY_SHOULD_TRUE, false },
		{ 200, RETRY_SHOULD_TRUE, false },  { 204, RETRY_SHOULD_TRUE, false },
		{ 301, RETRY_SHOULD_TRUE, false },  { 600, RETRY_SHOULD_TRUE, false },
		{ 200, RETRY_SHOULD_UNSET, false }, { 404, RETRY_SHOULD_FALSE, false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (retry_response_retryable(&policy, cases[i].status, cases[i].should) !=
		    cases[i].want)
			fail_msg("status %d, x-should-retry %d: not %d", cases[i].status,
				 (int)cases[i].should, (int)cases[i].want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rng_determinism),
		cmocka_unit_test(test_rng_uniform_bounds),
		cmocka_unit_test(test_rng_uniform_small_ranges),
		cmocka_unit_test(test_backoff_jitter_duration),
		cmocka_unit_test(test_backoff_full_jitter),
		cmocka_unit_test(test_backoff_saturation),
		cmocka_unit_test(test_backoff_jitter_wraps),
		cmocka_unit_test(test_wait_range_table),
		cmocka_unit_test(test_wait_range_ends_reached),
		cmocka_unit_test(test_retry_on_status),
		cmocka_unit_test(test_retry_on_failure),
		cmocka_unit_test(test_cause_names),
		cmocka_unit_test(test_retry_after_table),
		cmocka_unit_test(test_retry_after_counted),
		cmocka_unit_test(test_retry_after_calendar),
		cmocka_unit_test(test_http_date_format),
		cmocka_unit_test(test_http_date_clock_not_behind),
		cmocka_unit_test(test_outcome_names),
		cmocka_unit_test(test_give_up_names),
		cmocka_unit_test(test_decide_table),
		cmocka_unit_test(test_decide_seeded_wait),
		cmocka_unit_test(test_within_deadline),
		cmocka_unit_test(test_hedge_table),
		cmocka_unit_test(test_hedge_edges),
		cmocka_unit_test(test_should_parse),
		cmocka_unit_test(test_after_ms_parse),
		cmocka_unit_test(test_response_retryable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
