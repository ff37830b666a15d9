/*
 * Unit tests for happy_eyeballs.c: the connection attempt delay against
 * connect timeouts, and the order addresses are tried in, by table: the
 * families alternate from the resolver's first, and a shift turns the
 * order round.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sys/socket.h>

#include "happy_eyeballs.h"

#define V6 AF_INET6
#define V4 AF_INET
#define TEST_HE_MAX 8 /* addresses in a row of the table */

/* The delay for a connect timeout. */
struct test_he_delay {
	uint64_t connect_timeout_ms;
	uint64_t delay_ms;
};

static const struct test_he_delay test_he_delays[] = {
	{ 5000, 250 }, /* the default connect_timeout: the RFC's 250 ms */
	{ 500, 250 },  /* exactly half */
	{ 300, 150 },  /* half, so the next address gets the other half */
	{ 21, 10 },    /* half, rounded down */
	{ 15, 10 },    /* never below the RFC's floor */
	{ 1, 10 },
};

static void test_delay(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(test_he_delays) / sizeof(test_he_delays[0]); i++)
		assert_int_equal(happy_eyeballs_delay_ms(test_he_delays[i].connect_timeout_ms),
				 test_he_delays[i].delay_ms);
}

/* Families in the resolver's order, a shift, and the resolver indices in
 * the order they must be tried. */
struct test_he_order {
	const char *name;
	size_t n;
	int families[TEST_HE_MAX];
	unsigned shift;
	size_t order[TEST_HE_MAX];
};

static const struct test_he_order test_he_orders[] = {
	{ "one address", 1, { V4 }, 0, { 0 } },
	{ "one address, any shift", 1, { V4 }, 7, { 0 } },
	{ "one family keeps the resolver's order", 3, { V4, V4, V4 }, 0, { 0, 1, 2 } },
	{ "one family, shift 1", 3, { V4, V4, V4 }, 1, { 1, 2, 0 } },
	{ "one family, shift past the end goes round", 3, { V4, V4, V4 }, 5, { 2, 0, 1 } },
	{ "already alternating", 4, { V6, V4, V6, V4 }, 0, { 0, 1, 2, 3 } },
	{ "IPv6 first, grouped: alternated", 4, { V6, V6, V4, V4 }, 0, { 0, 2, 1, 3 } },
	{ "IPv4 first: IPv4 leads", 4, { V4, V4, V6, V6 }, 0, { 0, 2, 1, 3 } },
	{ "more of the first family: the rest at the end",
	  4,
	  { V6, V6, V6, V4 },
	  0,
	  { 0, 3, 1, 2 } },
	{ "more of the other family: the rest at the end",
	  4,
	  { V6, V4, V4, V4 },
	  0,
	  { 0, 1, 2, 3 } },
	{ "alternated, then shifted by 1", 4, { V6, V6, V4, V4 }, 1, { 2, 1, 3, 0 } },
	{ "alternated, then shifted by 2", 4, { V6, V6, V4, V4 }, 2, { 1, 3, 0, 2 } },
	{ "localhost (::1, 127.0.0.1), a hedge's shift", 2, { V6, V4 }, 1, { 1, 0 } },
};

static void test_order(void **state)
{
	size_t i;
	size_t k;

	(void)state;
	for (i = 0; i < sizeof(test_he_orders) / sizeof(test_he_orders[0]); i++) {
		const struct test_he_order *row = &test_he_orders[i];
		size_t order[TEST_HE_MAX];

		happy_eyeballs_order(row->families, row->n, row->shift, order);
		for (k = 0; k < row->n; k++)
			if (order[k] != row->order[k])
				fail_msg("%s: place %zu holds address %zu, not %zu", row->name, k,
					 order[k], row->order[k]);
	}
}

/* No addresses: nothing is written. */
static void test_order_empty(void **state)
{
	size_t order[1] = { 42 };

	(void)state;
	happy_eyeballs_order(NULL, 0, 3, order);
	assert_int_equal(order[0], 42);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_delay),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_order_empty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
