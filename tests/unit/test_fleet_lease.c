/* Unit tests for fleet_lease.c: how many retry tokens a proxy asks for at a
 * sync, by table, and the script's text being what Redis is sent. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "fleet_lease.h"

struct target_case {
	double ratio;
	uint64_t requests; /* since the last sync */
	uint64_t asked;	   /* retries made or refused since the last sync */
	uint64_t target;
};

static void test_target_table(void **state)
{
	static const struct target_case cases[] = {
		/* a quiet proxy holds one token, so its first failure can retry */
		{ 0.2, 0, 0, 1 },
		/* twice its share: 2 x 0.2 x 10 */
		{ 0.2, 10, 0, 4 },
		/* a share below one token rounds up to one */
		{ 0.2, 1, 0, 1 },
		{ 0.2, 3, 0, 2 },
		/* ratio 0: only the one token of the floor */
		{ 0.0, 1000, 0, 1 },
		{ 1.0, 50, 0, 100 },
		/* a storm: twice the retries asked for, when more than the share */
		{ 0.2, 20, 19, 38 },
		{ 0.0, 1000, 5, 10 },
		{ 1.0, 50, 10, 100 },
		{ 0.2, 0, UINT64_MAX, UINT64_MAX - 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct target_case *c = &cases[i];
		uint64_t got = fleet_lease_target(c->ratio, c->requests, c->asked);

		if (got != c->target)
			fail_msg("case %zu: ratio %g, %llu requests: target %llu, got %llu", i,
				 c->ratio, (unsigned long long)c->requests,
				 (unsigned long long)c->target, (unsigned long long)got);
	}
}

/* The script reads its clock from Redis, keeps to one key (KEYS[1]), and
 * gives every key an expiry. */
static void test_script_shape(void **state)
{
	const char *time_call = strstr(fleet_lease_script, "redis.call('TIME')");
	const char *replicate = strstr(fleet_lease_script, "if redis.replicate_commands then "
							   "redis.replicate_commands() end");

	assert_non_null(time_call);
	/* before TIME, or Redis 3.2/4.0 refuse the writes after it */
	assert_non_null(replicate);
	assert_true(replicate < time_call);
	assert_non_null(strstr(fleet_lease_script, "PEXPIRE', KEYS[1]"));
	assert_null(strstr(fleet_lease_script, "KEYS[2]"));
	assert_non_null(strstr(fleet_lease_script, "return {grant, q, r + grant, epoch}"));
	/* tokens handed back never take a bucket below 0 */
	assert_non_null(strstr(fleet_lease_script, "back = math.min(back,"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target_table),
		cmocka_unit_test(test_script_shape),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
