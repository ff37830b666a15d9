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
			fail_msg("n=%u: wait %llu outside [%llu, %llu]", n, (unsigned long long)wait,
				 (unsigned long long)lo, (unsigned long long)hi);
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
		{ 100, 2, 1, 30000, 1000 },   /* n 0..8 uncapped, 9 and 10 at the cap */
		{ 1000, 2, 1, 20000, 5000 },  /* n 4 cut by the cap, 5.. at it */
		{ 1024, 3, 2, 60000, 250 },   /* 1.5: 1024 * 1.5^10 = 59049, never capped */
		{ 500, 1, 1, 10000, 0 },      /* no jitter: exactly the base */
		{ 1000, 2, 1, 32000, 0 },     /* no jitter, doubling up to the cap */
		{ 0, 2, 1, 1000, 300 },       /* no backoff: jitter alone */
		{ 1000, 3, 1, 1000, 500 },    /* initial == max: always max */
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
		{ 100, 2, 1, 30000 },
		{ 1000, 3, 1, 50000 },
		{ 1024, 3, 2, 60000 },
		{ 1, 2, 1, 300000 }, /* n = 0: uniform over {0, 1} */
		{ 0, 2, 1, 1000 },   /* always 0 */
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
		{ 1000, 2, 32000, 64, 32000 },        /* 2^64 would wrap a uint64_t */
		{ 1000, 2, 32000, 1100, 32000 },      /* 2^1100 is +inf in double */
		{ 1000, 2, 32000, UINT_MAX, 32000 },
		{ 1000, 1e300, 32000, 2, 32000 },
		{ 1000, DBL_MAX, 32000, 1, 32000 },
		{ 1000, 1, 32000, UINT_MAX, 1000 },   /* 1^n stays 1 */
		{ 1000, 1.1, 32000, 1, 1100 },        /* 1100.0000000000002 rounds to 1100 */
		{ 1000, 1.5, 32000, 3, 3375 },
		{ 3, 1.5, 100, 1, 5 },                /* 4.5 rounds half up */
		{ 0, 1e300, 1000, UINT_MAX, 0 },      /* 0 x inf is not NaN here */
		{ 1000, NAN, 32000, 3, 1000 },        /* cannot come from config; read as 1 */
		{ 1000, 0.5, 32000, 3, 1000 },        /* below 1: read as 1 */
		{ UINT64_MAX, 2, UINT64_MAX, 3, UINT64_MAX },
		{ UINT64_MAX - 10, 1, UINT64_MAX, 0, UINT64_MAX },
		{ (uint64_t)1 << 62, 2, UINT64_MAX, 1, (uint64_t)1 << 63 },
		{ (uint64_t)1 << 62, 2, UINT64_MAX, 2, UINT64_MAX },
		{ 5000, 2, 1000, 0, 1000 },           /* initial over max: max */
	};
	struct retry_rng rng;

	retry_rng_seed_with(&rng, 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct retry_policy policy = test_backoff_policy(cases[i].initial, cases[i].multiplier,
								 cases[i].max, false, 0);
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
		{ 500, true, true },  { 501, true, false }, { 502, true, true },
		{ 503, true, true },  { 504, true, true },  { 599, true, false },
		{ 404, false, true }, { 408, true, false }, { 429, true, true },
		{ 200, false, false }, { 204, false, false }, { 301, false, false },
		{ 400, false, false }, { 499, false, false }, { 100, false, false },
		{ 600, false, false }, { 99, false, false }, { 0, false, false },
		{ -1, false, false }, { 1000, false, false }, { INT_MAX, false, false },
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
		{ RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT, true, true,
		  true },
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
#define TEST_DAY_MS ((uint64_t)RETRY_AFTER_MAX_SECONDS * 1000)

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
		{ "86400", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "86401", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "4294967296", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "99999999999999999999999999999999", TEST_NOW_2023, 0, TEST_DAY_MS },
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
		{ "Fri, 31 Dec 9999 23:59:59 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "Wed, 15 Nov 2023 22:13:20 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "Wed, 15 Nov 2023 22:13:21 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "Wed, 15 Nov 2023 22:13:19 GMT", TEST_NOW_2023, 0, TEST_DAY_MS - 1000 },

		/* the two-digit year: more than 50 years ahead means a century back */
		{ "Sunday, 06-Nov-94 08:49:37 GMT", TEST_NOW_2023, 0, 0 },
		{ "Sunday, 01-Jan-73 00:00:00 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
		{ "Monday, 01-Jan-74 00:00:00 GMT", TEST_NOW_2023, 0, 0 },
		{ "Wednesday, 15-Nov-23 22:13:19 GMT", TEST_NOW_2023, 0, TEST_DAY_MS - 1000 },
		{ "Saturday, 01-Jan-00 00:00:00 GMT", (time_t)4102444800 - 120, 0, 120000 }, /* 2100 */
		{ "Friday, 31-Dec-99 23:58:00 GMT", (time_t)4102444800 - 60, 0, 0 },       /* 2099 */
		{ "Sunday, 01-Jan-50 00:00:00 GMT", (time_t)4102444800, 0, TEST_DAY_MS },   /* 2150 */
		{ "Sunday, 01-Jan-51 00:00:00 GMT", (time_t)4102444800, 0, 0 },             /* 2051 */
		{ "Sunday, 01-Jan-50 00:00:00 GMT", (time_t)4102444800 - 1, 0, 0 },         /* 2050 */
		{ "Sunday, 01-Jan-49 00:00:00 GMT", (time_t)4102444800 - 1, 0, TEST_DAY_MS }, /* 2149 */

		/* the weekday is redundant: a wrong one is accepted */
		{ "Mon, 14 Nov 2023 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Friday, 14-Nov-23 22:15:20 GMT", TEST_NOW_2023, 0, 120000 },
		{ "Sat Nov 14 22:15:20 2023", TEST_NOW_2023, 0, 120000 },

		/* calendar checks */
		{ "Thu, 29 Feb 2024 00:00:00 GMT", TEST_NOW_2023, 0, TEST_DAY_MS },
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
		int rc = retry_after_parse(cases[i].value, strlen(cases[i].value), cases[i].now, &ms);

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
	assert_int_equal(retry_after_parse("12345", 2, TEST_NOW_2023, &ms), 0);
	assert_true(ms == 12000);
	assert_int_equal(retry_after_parse("12\0", 3, TEST_NOW_2023, &ms), -1);
	assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:15:20 GMTxyz", 29, TEST_NOW_2023,
					   &ms),
			 0);
	assert_true(ms == 120000);
	assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:15:20 GM", 28, TEST_NOW_2023, &ms),
			 -1);
	assert_int_equal(retry_after_parse(NULL, 0, TEST_NOW_2023, &ms), -1);
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
	if (retry_after_parse(text, strlen(text), t - 5000, &ms) != 0 || ms != 5000000)
		fail_msg("\"%s\" (t=%lld): got %llu ms", text, (long long)t, (unsigned long long)ms);
}

static void test_retry_after_calendar(void **state)
{
	static const time_t fixed[] = {
		5000,        /* 1970-01-01 01:23:20 */
		951782400,   /* 2000-02-29 00:00:00 */
		951868799,   /* 2000-02-29 23:59:59 */
		1078012800,  /* 2004-02-29 */
		1704067199,  /* 2023-12-31 23:59:59 */
		1704067200,  /* 2024-01-01 00:00:00 */
		4107542400,  /* 2100-03-01 00:00:00, after a non-leap Feb */
		4102444800,  /* 2100-01-01 */
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
		cmocka_unit_test(test_retry_on_status),
		cmocka_unit_test(test_retry_on_failure),
		cmocka_unit_test(test_cause_names),
		cmocka_unit_test(test_retry_after_table),
		cmocka_unit_test(test_retry_after_counted),
		cmocka_unit_test(test_retry_after_calendar),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
