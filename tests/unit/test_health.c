/*
 * Unit tests for health.c: the upstream health state machine, run through
 * scenarios of timed events, each step checked for its actions and the
 * state after it; then health_hold() and the names by table.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <string.h>

#include "health.h"

/* Expected actions as bits, so a step's row reads as one expression. */
#define DOWN (1u << 0)	  /* went_down */
#define UP (1u << 1)	  /* went_up */
#define CANCEL (1u << 2)  /* cancel_timer */
#define RELEASE (1u << 3) /* release */
#define PROBE (1u << 4)	  /* start_probe */
#define ARM (1u << 5)	  /* arm_timer, at the step's timer_ms */
#define BACK (UP | CANCEL | RELEASE)

#define FAIL HEALTH_CONNECT_FAILED
#define CONN HEALTH_CONNECTED
#define HEAD HEALTH_RESPONSE_HEAD
#define DUE HEALTH_PROBE_DUE
#define P_OK HEALTH_PROBE_CONNECTED
#define P_FAIL HEALTH_PROBE_FAILED
#define P_SHORT HEALTH_PROBE_ABANDONED
#define POLICY HEALTH_POLICY_CHANGED

/* The state after a step; 0 marks the unused steps after a scenario's last. */
enum test_health_state {
	S_UP = 1,
	S_DOWN,
};

#define TEST_HEALTH_MAX_STEPS 16

/* One event and what must follow from it. */
struct test_health_step {
	enum health_event event;
	uint64_t now_ms;
	unsigned actions;
	uint64_t timer_ms; /* with ARM */
	enum test_health_state state;
	bool probing; /* a probe in flight after the step */
	bool off;     /* this step runs under down_after 0 (a reload turned it off) */
};

/* A sequence of steps from a fresh upstream under one policy. */
struct test_health_scenario {
	const char *name;
	unsigned down_after;
	uint64_t probe_interval_ms;
	struct test_health_step steps[TEST_HEALTH_MAX_STEPS];
};

static const struct test_health_scenario test_health_scenarios[] = {
	{ "down after 3 consecutive failures",
	  3,
	  500,
	  {
		  { FAIL, 100, 0, 0, S_UP, false, false },
		  { FAIL, 200, 0, 0, S_UP, false, false },
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  /* a request already connecting when it went down fails too */
		  { FAIL, 1100, 0, 0, S_DOWN, false, false },
	  } },
	{ "down_after 1: the first failure",
	  1,
	  500,
	  {
		  { FAIL, 100, DOWN | ARM, 600, S_DOWN, false, false },
	  } },
	{ "a reload that keeps the interval changes nothing; one that turns health off brings "
	  "it up at once",
	  1,
	  500,
	  {
		  { FAIL, 100, DOWN | ARM, 600, S_DOWN, false, false },
		  { POLICY, 200, 0, 0, S_DOWN, false, false },
		  { POLICY, 300, BACK, 0, S_UP, false, true },
		  { POLICY, 400, 0, 0, S_UP, false, false },
	  } },
	{ "down_after 0: never down",
	  0,
	  500,
	  {
		  { FAIL, 100, 0, 0, S_UP, false, false },
		  { FAIL, 200, 0, 0, S_UP, false, false },
		  { FAIL, 300, 0, 0, S_UP, false, false },
		  { FAIL, 400, 0, 0, S_UP, false, false },
		  { FAIL, 500, 0, 0, S_UP, false, false },
		  { DUE, 600, 0, 0, S_UP, false, false },
	  } },
	{ "a connection between failures resets the count",
	  3,
	  500,
	  {
		  { FAIL, 100, 0, 0, S_UP, false, false },
		  { FAIL, 200, 0, 0, S_UP, false, false },
		  { CONN, 300, 0, 0, S_UP, false, false },
		  { FAIL, 400, 0, 0, S_UP, false, false },
		  { FAIL, 500, 0, 0, S_UP, false, false },
		  { FAIL, 600, DOWN | ARM, 1100, S_DOWN, false, false },
	  } },
	{ "a response head between failures resets the count",
	  3,
	  500,
	  {
		  { FAIL, 100, 0, 0, S_UP, false, false },
		  { FAIL, 200, 0, 0, S_UP, false, false },
		  { HEAD, 300, 0, 0, S_UP, false, false },
		  { FAIL, 400, 0, 0, S_UP, false, false },
		  { FAIL, 500, 0, 0, S_UP, false, false },
		  { HEAD, 550, 0, 0, S_UP, false, false },
		  { FAIL, 600, 0, 0, S_UP, false, false },
	  } },
	{ "probe timing: one per interval from the previous start",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  /* a quick failure waits out the interval */
		  { P_FAIL, 1700, ARM, 2000, S_DOWN, false, false },
		  { DUE, 2000, PROBE, 0, S_DOWN, true, false },
		  /* a probe slower than the interval: the next is due already */
		  { P_FAIL, 2600, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 2700, ARM, 3100, S_DOWN, false, false },
		  /* a late timer starts it at once, counting from then */
		  { DUE, 3300, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 3400, ARM, 3800, S_DOWN, false, false },
		  { DUE, 3800, PROBE, 0, S_DOWN, true, false },
		  { P_OK, 3850, BACK, 0, S_UP, false, false },
	  } },
	{ "a probe the proxy could not make is no verdict: still down, the next when due, and "
	  "no failure counted",
	  2,
	  500,
	  {
		  { FAIL, 900, 0, 0, S_UP, false, false },
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  { P_SHORT, 1501, ARM, 2000, S_DOWN, false, false },
		  { DUE, 2000, PROBE, 0, S_DOWN, true, false },
		  { P_SHORT, 2001, ARM, 2500, S_DOWN, false, false },
		  { DUE, 2500, PROBE, 0, S_DOWN, true, false },
		  { P_OK, 2510, BACK, 0, S_UP, false, false },
		  /* one left over once it is up changes nothing */
		  { P_SHORT, 2600, 0, 0, S_UP, false, false },
		  { FAIL, 2700, 0, 0, S_UP, false, false },
	  } },
	{ "one probe at a time",
	  2,
	  500,
	  {
		  { FAIL, 0, 0, 0, S_UP, false, false },
		  { FAIL, 10, DOWN | ARM, 510, S_DOWN, false, false },
		  { DUE, 510, PROBE, 0, S_DOWN, true, false },
		  /* a stray timer, even past the next due time, starts no second one */
		  { DUE, 1100, 0, 0, S_DOWN, true, false },
		  { DUE, 5000, 0, 0, S_DOWN, true, false },
		  { FAIL, 5100, 0, 0, S_DOWN, true, false },
		  { P_FAIL, 5200, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 5300, ARM, 5700, S_DOWN, false, false },
	  } },
	{ "a timer that fires early is armed again",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1499, ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
	  } },
	{ "the first probe that connects brings it up",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  { P_OK, 1510, BACK, 0, S_UP, false, false },
		  /* and counting starts over */
		  { FAIL, 1600, DOWN | ARM, 2100, S_DOWN, false, false },
	  } },
	{ "a request's own connection brings it up, the probe finishes unheeded",
	  3,
	  500,
	  {
		  { FAIL, 100, 0, 0, S_UP, false, false },
		  { FAIL, 200, 0, 0, S_UP, false, false },
		  { FAIL, 300, DOWN | ARM, 800, S_DOWN, false, false },
		  { DUE, 800, PROBE, 0, S_DOWN, true, false },
		  { CONN, 850, BACK, 0, S_UP, true, false },
		  { P_FAIL, 900, 0, 0, S_UP, false, false },
		  /* the probe's failure did not count */
		  { FAIL, 1000, 0, 0, S_UP, false, false },
		  { FAIL, 1100, 0, 0, S_UP, false, false },
		  { FAIL, 1200, DOWN | ARM, 1700, S_DOWN, false, false },
	  } },
	{ "a response head while down (a connection made before): still down",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { HEAD, 1200, 0, 0, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  { HEAD, 1550, 0, 0, S_DOWN, true, false },
		  { P_OK, 1600, BACK, 0, S_UP, false, false },
	  } },
	{ "a request's own connect while down brings it up",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { CONN, 1200, BACK, 0, S_UP, false, false },
		  /* the cancelled timer, had it fired anyway */
		  { DUE, 1500, 0, 0, S_UP, false, false },
	  } },
	{ "down again with the old probe in flight: its result comes next",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  { CONN, 1600, BACK, 0, S_UP, true, false },
		  { FAIL, 1700, DOWN, 0, S_DOWN, true, false },
		  { P_FAIL, 1800, ARM, 2000, S_DOWN, false, false },
		  { DUE, 2000, PROBE, 0, S_DOWN, true, false },
		  { CONN, 2100, BACK, 0, S_UP, true, false },
		  { FAIL, 2200, DOWN, 0, S_DOWN, true, false },
		  { P_OK, 2300, BACK, 0, S_UP, false, false },
	  } },
	{ "probe results and timers while up change nothing",
	  2,
	  500,
	  {
		  { P_OK, 100, 0, 0, S_UP, false, false },
		  { P_FAIL, 200, 0, 0, S_UP, false, false },
		  { DUE, 300, 0, 0, S_UP, false, false },
		  { FAIL, 400, 0, 0, S_UP, false, false },
		  { P_FAIL, 500, 0, 0, S_UP, false, false },
		  { FAIL, 600, DOWN | ARM, 1100, S_DOWN, false, false },
	  } },
	{ "probe_interval 0: probes back to back",
	  1,
	  0,
	  {
		  { FAIL, 1000, DOWN | PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 1001, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 1001, PROBE, 0, S_DOWN, true, false },
		  { P_OK, 1002, BACK, 0, S_UP, false, false },
	  } },
	{ "times near the end of the clock saturate",
	  1,
	  500,
	  {
		  { FAIL, UINT64_MAX - 100, DOWN | ARM, UINT64_MAX, S_DOWN, false, false },
		  { DUE, UINT64_MAX, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, UINT64_MAX, PROBE, 0, S_DOWN, true, false },
	  } },
	{ "a reload to down_after 0 brings a down upstream up at its next event",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, BACK, 0, S_UP, false, true },
		  { FAIL, 1600, 0, 0, S_UP, false, true },
		  { FAIL, 1700, 0, 0, S_UP, false, true },
	  } },
	{ "a reload to down_after 0 with a probe in flight",
	  1,
	  500,
	  {
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { DUE, 1500, PROBE, 0, S_DOWN, true, false },
		  { P_FAIL, 1600, BACK, 0, S_UP, false, true },
	  } },
	{ "a reload to down_after 0, then a failure",
	  3,
	  500,
	  {
		  { FAIL, 800, 0, 0, S_UP, false, false },
		  { FAIL, 900, 0, 0, S_UP, false, false },
		  { FAIL, 1000, DOWN | ARM, 1500, S_DOWN, false, false },
		  { FAIL, 1100, BACK, 0, S_UP, false, true },
		  /* and on again: the count started over at that failure */
		  { FAIL, 1200, 0, 0, S_UP, false, false },
		  { FAIL, 1300, DOWN | ARM, 1800, S_DOWN, false, false },
	  } },
};

/* The bits for a set of actions. */
static unsigned test_health_bits(const struct health_actions *a)
{
	return (a->went_down ? DOWN : 0) | (a->went_up ? UP : 0) | (a->cancel_timer ? CANCEL : 0) |
	       (a->release ? RELEASE : 0) | (a->start_probe ? PROBE : 0) | (a->arm_timer ? ARM : 0);
}

static void test_health_scenario_table(void **state)
{
	for (size_t i = 0; i < sizeof(test_health_scenarios) / sizeof(test_health_scenarios[0]);
	     i++) {
		const struct test_health_scenario *sc = &test_health_scenarios[i];
		struct health_policy policy = { sc->down_after, sc->probe_interval_ms, true };
		struct health_policy off = { 0, sc->probe_interval_ms, true };
		struct health h;

		health_init(&h);
		for (size_t s = 0; s < TEST_HEALTH_MAX_STEPS; s++) {
			const struct test_health_step *st = &sc->steps[s];
			enum health_state want = st->state == S_UP ? HEALTH_UP : HEALTH_DOWN;
			struct health_actions a;
			unsigned bits;

			if (st->state == 0)
				break;
			a = health_step(&h, st->off ? &off : &policy, st->event, st->now_ms);
			bits = test_health_bits(&a);
			if (bits != st->actions || (bits & ARM && a.timer_ms != st->timer_ms) ||
			    (!(bits & ARM) && a.timer_ms != 0) || h.state != want ||
			    h.probing != st->probing ||
			    health_may_connect(&h) != (want == HEALTH_UP))
				fail_msg("%s, step %zu: got actions %#x timer %llu state %d "
					 "probing %d",
					 sc->name, s + 1, bits, (unsigned long long)a.timer_ms,
					 (int)h.state, (int)h.probing);
		}
	}
}

/* A reload that shortens probe_interval while the upstream is down brings
 * its next probe to one new interval from the reload; a longer one leaves
 * the sooner probe as it was; a probe in flight is left to end. */
static void test_health_policy_interval(void **state)
{
	struct health_policy slow = { 1, 60000, true };
	struct health_policy quick = { 1, 1000, true };
	struct health_actions a;
	struct health h;

	health_init(&h);
	a = health_step(&h, &slow, HEALTH_CONNECT_FAILED, 1000);
	assert_true(a.went_down && a.arm_timer);
	assert_int_equal(a.timer_ms, 61000);
	a = health_step(&h, &quick, HEALTH_POLICY_CHANGED, 5000);
	assert_int_equal(test_health_bits(&a), ARM);
	assert_int_equal(a.timer_ms, 6000);
	a = health_step(&h, &slow, HEALTH_POLICY_CHANGED, 5500);
	assert_int_equal(test_health_bits(&a), 0);
	a = health_step(&h, &quick, HEALTH_PROBE_DUE, 6000);
	assert_int_equal(test_health_bits(&a), PROBE);
	a = health_step(&h, &quick, HEALTH_POLICY_CHANGED, 6100);
	assert_int_equal(test_health_bits(&a), 0);
	assert_true(h.probing);
	a = health_step(&h, &quick, HEALTH_PROBE_FAILED, 6200);
	assert_int_equal(test_health_bits(&a), ARM);
	assert_int_equal(a.timer_ms, 7000);
}

/* A zeroed struct is as good as health_init(), for callers that calloc. */
static void test_health_init(void **state)
{
	struct health zeroed;
	struct health h;

	memset(&zeroed, 0, sizeof(zeroed));
	memset(&h, 0xa5, sizeof(h));
	health_init(&h);
	assert_memory_equal(&h, &zeroed, sizeof(h));
	assert_int_equal(h.state, HEALTH_UP);
	assert_int_equal(h.failures, 0);
	assert_false(h.probing);
	assert_true(health_may_connect(&h));
}

/* The failure count saturates instead of wrapping to 0 (which would look
 * like a fresh start to a large down_after). */
static void test_health_failures_saturate(void **state)
{
	struct health_policy policy = { UINT_MAX, 500, true };
	struct health h;
	struct health_actions a;

	health_init(&h);
	h.failures = UINT_MAX - 2;
	a = health_step(&h, &policy, HEALTH_CONNECT_FAILED, 1);
	assert_int_equal(h.failures, UINT_MAX - 1);
	assert_false(a.went_down);
	a = health_step(&h, &policy, HEALTH_CONNECT_FAILED, 2);
	assert_int_equal(h.failures, UINT_MAX);
	assert_true(a.went_down);
	a = health_step(&h, &policy, HEALTH_CONNECT_FAILED, 3);
	assert_int_equal(h.failures, UINT_MAX);
	assert_int_equal(test_health_bits(&a), 0);
	a = health_step(&h, &policy, HEALTH_RESPONSE_HEAD, 4);
	assert_int_equal(h.failures, 0);
	assert_int_equal(test_health_bits(&a), 0);
	assert_int_equal(h.state, HEALTH_DOWN);
}

static void test_health_hold_table(void **state)
{
	static const struct {
		enum health_state state;
		bool hold;
		bool held; /* health_hold() */
	} rows[] = {
		{ HEALTH_UP, false, false },
		{ HEALTH_UP, true, false },
		{ HEALTH_DOWN, false, false }, /* 502 at once */
		{ HEALTH_DOWN, true, true },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct health_policy policy = { 3, 500, rows[i].hold };
		struct health h;

		health_init(&h);
		h.state = rows[i].state;
		if (health_hold(&h, &policy) != rows[i].held)
			fail_msg("row %zu: state %d hold %d", i, (int)rows[i].state,
				 (int)rows[i].hold);
		assert_true(health_may_connect(&h) == (rows[i].state == HEALTH_UP));
	}
}

/* Held and released as the machine goes: down with hold holds, up releases. */
static void test_health_hold_follows_steps(void **state)
{
	struct health_policy hold = { 1, 500, true };
	struct health_policy no_hold = { 1, 500, false };
	struct health h;

	health_init(&h);
	assert_false(health_hold(&h, &hold));
	health_step(&h, &hold, HEALTH_CONNECT_FAILED, 10);
	assert_true(health_hold(&h, &hold));
	assert_false(health_hold(&h, &no_hold));
	assert_false(health_may_connect(&h));
	assert_true(health_step(&h, &hold, HEALTH_PROBE_DUE, 510).start_probe);
	assert_true(health_step(&h, &hold, HEALTH_PROBE_CONNECTED, 520).release);
	assert_false(health_hold(&h, &hold));
	assert_true(health_may_connect(&h));
}

static void test_health_state_names(void **state)
{
	assert_string_equal(health_state_name(HEALTH_UP), "up");
	assert_string_equal(health_state_name(HEALTH_DOWN), "down");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health_scenario_table),
		cmocka_unit_test(test_health_init),
		cmocka_unit_test(test_health_policy_interval),
		cmocka_unit_test(test_health_failures_saturate),
		cmocka_unit_test(test_health_hold_table),
		cmocka_unit_test(test_health_hold_follows_steps),
		cmocka_unit_test(test_health_state_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
