/* Unit tests for retry_budget.c: the sliding-window retry budget, peeked
 * with retry_budget_allows and spent with retry_budget_spend. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "retry_budget.h"

static const struct retry_budget ten_percent = {
	.ratio = 0.1,
	.min_per_second = 1,
	.window_ms = 10000,
};

/* Spend retries at now while the budget allows them; return how many. */
static unsigned take_all(struct retry_budget_state *s, const struct retry_budget *b, uint64_t now)
{
	unsigned n = 0;

	while (retry_budget_allows(s, b, now)) {
		retry_budget_spend(s, now);
		n++;
	}
	return n;
}

static void test_floor_without_requests(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);

	/* min_per_second 1 over a 10 s window: 10 retries with no requests */
	assert_int_equal(take_all(s, &ten_percent, 100000), 10);
	retry_budget_book_free(book);
}

static void test_ratio_of_requests(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);
	unsigned i;

	for (i = 0; i < 1000; i++)
		retry_budget_note_request(s, 100000 + i);
	/* 0.1 x 1000 + 1 x 10 */
	assert_int_equal(take_all(s, &ten_percent, 101000), 110);
	retry_budget_book_free(book);
}

/* A bound that is whole in decimals is whole here too, though binary
 * misses it: 0.58 x 50 is 28.999999999999996 in a double; 0.29/s over
 * 100 s is 28.999999999999996 too. */
static void test_decimal_bound_is_exact(void **state)
{
	static const struct retry_budget ratio_only = { .ratio = 0.58, .window_ms = 60000 };
	static const struct retry_budget floor_only = { .min_per_second = 0.29,
							.window_ms = 100000 };
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "ratio", &ratio_only);
	unsigned i;

	for (i = 0; i < 50; i++)
		retry_budget_note_request(s, 100000 + i);
	assert_int_equal(take_all(s, &ratio_only, 100100), 29);
	s = retry_budget_for(book, "floor", &floor_only);
	assert_int_equal(take_all(s, &floor_only, 100000), 29);
	retry_budget_book_free(book);
}

static void test_window_slides(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);

	assert_int_equal(take_all(s, &ten_percent, 100000), 10);
	/* half a window later the old retries still count */
	assert_int_equal(take_all(s, &ten_percent, 105000), 0);
	/* a whole window later they have slid out */
	assert_int_equal(take_all(s, &ten_percent, 110500), 10);
	retry_budget_book_free(book);
}

static void test_window_is_never_short(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);

	/* retries late in a bucket still count 9.9 s later, when the bucket
	 * they are in has almost left the window */
	assert_int_equal(take_all(s, &ten_percent, 100400), 10);
	assert_int_equal(take_all(s, &ten_percent, 110300), 0);
	retry_budget_book_free(book);
}

/* A window that is not a whole number of 20 ms buckets (250ms, or 30ms,
 * where window / 20 rounds down to 1 ms) still counts back a whole window:
 * a retry spent late in its bucket is there until the window has passed. */
static void test_odd_window_is_never_short(void **state)
{
	static const struct retry_budget windows[] = {
		/* one retry a window: min_per_second x window = 1.02, 1.25 */
		{ .ratio = 0, .min_per_second = 34, .window_ms = 30 },
		{ .ratio = 0, .min_per_second = 5, .window_ms = 250 },
	};

	for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
		const struct retry_budget *b = &windows[i];
		struct retry_budget_book *book = retry_budget_book_new();
		struct retry_budget_state *s = retry_budget_for(book, "r", b);
		uint64_t spent = 100000 + b->window_ms / 20 - 1;

		assert_int_equal(take_all(s, b, spent), 1);
		for (uint64_t later = spent; later < spent + b->window_ms; later++)
			assert_false(retry_budget_allows(s, b, later));
		assert_int_equal(take_all(s, b, spent + 3 * b->window_ms), 1);
		retry_budget_book_free(book);
	}
}

static void test_routes_and_windows_are_separate(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget other = ten_percent;
	struct retry_budget_state *a = retry_budget_for(book, "a", &ten_percent);
	struct retry_budget_state *b = retry_budget_for(book, "b", &ten_percent);

	assert_ptr_equal(a, retry_budget_for(book, "a", &ten_percent));
	assert_ptr_not_equal(a, b);
	other.window_ms = 2000;
	assert_ptr_not_equal(a, retry_budget_for(book, "a", &other));
	assert_int_equal(take_all(a, &ten_percent, 50000), 10);
	assert_int_equal(take_all(b, &ten_percent, 50000), 10);
	retry_budget_book_free(book);
}

static void test_zero_budget_refuses(void **state)
{
	struct retry_budget none = { .ratio = 0, .min_per_second = 0, .window_ms = 1000 };
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &none);

	retry_budget_note_request(s, 5000);
	assert_false(retry_budget_allows(s, &none, 5000));
	retry_budget_book_free(book);
}

static void test_allows_counts_nothing(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);
	unsigned i;

	/* asking any number of times spends nothing: all 10 are still there */
	for (i = 0; i < 100; i++)
		assert_true(retry_budget_allows(s, &ten_percent, 100000));
	assert_int_equal(take_all(s, &ten_percent, 100000), 10);
	retry_budget_book_free(book);
}

static void test_spend_counts_one(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);
	unsigned i;

	/* 0.1 x 20 + 1 x 10: 12 retries */
	for (i = 0; i < 20; i++)
		retry_budget_note_request(s, 100000);
	for (i = 0; i < 11; i++)
		retry_budget_spend(s, 100000);
	assert_true(retry_budget_allows(s, &ten_percent, 100000));
	retry_budget_spend(s, 100000);
	assert_false(retry_budget_allows(s, &ten_percent, 100000));
	/* a spend counts even past the budget: 10 more requests make room for
	 * a 13th retry, and the 13th is already spent */
	retry_budget_spend(s, 100000);
	for (i = 0; i < 10; i++)
		retry_budget_note_request(s, 100000);
	assert_false(retry_budget_allows(s, &ten_percent, 100000));
	retry_budget_note_request(s, 100000);
	assert_int_equal(take_all(s, &ten_percent, 100000), 0);
	for (i = 0; i < 9; i++)
		retry_budget_note_request(s, 100000);
	assert_int_equal(take_all(s, &ten_percent, 100000), 1);
	retry_budget_book_free(book);
}

static void test_allows_leaves_old_buckets(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s = retry_budget_for(book, "r", &ten_percent);

	assert_int_equal(take_all(s, &ten_percent, 100000), 10);
	/* a whole window later the slot of those retries comes round again;
	 * a peek there must not empty it: seen from half a window after them
	 * they still count */
	assert_true(retry_budget_allows(s, &ten_percent, 110500));
	assert_false(retry_budget_allows(s, &ten_percent, 105000));
	retry_budget_book_free(book);
}

/* A config with the routes named in names (comma-separated), each with a
 * budget of window seconds. */
static struct config *config_with_routes(const char *names, unsigned window)
{
	char text[1024];
	size_t len = (size_t)snprintf(
		text, sizeof(text),
		"defaults:\n  retry:\n    budget: { ratio: 0.1, min_per_second: 1, window: %us }\n"
		"routes:\n",
		window);
	char copy[256];

	snprintf(copy, sizeof(copy), "%s", names);
	for (char *name = strtok(copy, ","); name != NULL; name = strtok(NULL, ","))
		len += (size_t)snprintf(text + len, sizeof(text) - len,
					"  - name: %s\n    match: { path_prefix: /%s }\n", name,
					name);
	return config_load_text(text, len, "t.yaml", stderr);
}

/* Every route of a config that goes live gets its state; a reload keeps
 * the counts of a route it keeps, and the state of a route no config holds
 * any more is freed: a route of that name later starts from nothing. */
static void test_attach_detach(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct config *old = config_with_routes("kept,renamed", 10);
	struct config *reloaded = config_with_routes("kept,other", 10);
	struct config *later;
	unsigned i;

	(void)state;
	assert_non_null(old);
	assert_non_null(reloaded);
	retry_budget_book_attach(book, old);
	assert_non_null(old->default_route.budget);
	assert_ptr_equal(old->routes[0].budget,
			 retry_budget_for(book, "kept", &old->routes[0].retry.budget));
	/* spend all the floor allows (10 x 1/s) on both routes */
	assert_int_equal(take_all(old->routes[0].budget, &old->routes[0].retry.budget, 100000), 10);
	assert_int_equal(take_all(old->routes[1].budget, &old->routes[1].retry.budget, 100000), 10);

	retry_budget_book_attach(book, reloaded);
	assert_ptr_equal(reloaded->routes[0].budget, old->routes[0].budget);
	assert_ptr_equal(reloaded->default_route.budget, old->default_route.budget);
	retry_budget_book_detach(book, old);
	assert_null(old->routes[0].budget);
	/* the kept route's spent budget carries over the reload */
	assert_false(retry_budget_allows(reloaded->routes[0].budget,
					 &reloaded->routes[0].retry.budget, 100000));

	/* "renamed" went with the old config: back, it has its whole floor */
	later = config_with_routes("renamed", 10);
	assert_non_null(later);
	retry_budget_book_attach(book, later);
	assert_int_equal(take_all(later->routes[0].budget, &later->routes[0].retry.budget, 100000),
			 10);
	for (i = 0; i < 3; i++)
		retry_budget_note_request(reloaded->routes[1].budget, 100000);

	retry_budget_book_detach(book, later);
	retry_budget_book_detach(book, reloaded);
	config_release(old);
	config_release(reloaded);
	config_release(later);
	retry_budget_book_free(book);
}

/* A route whose window changes is a new state; the old one goes with the
 * config that had it. */
static void test_window_change_is_new_state(void **state)
{
	struct retry_budget_book *book = retry_budget_book_new();
	struct config *a = config_with_routes("r", 10);
	struct config *b = config_with_routes("r", 20);

	(void)state;
	retry_budget_book_attach(book, a);
	retry_budget_book_attach(book, b);
	assert_ptr_not_equal(a->routes[0].budget, b->routes[0].budget);
	retry_budget_book_detach(book, a);
	retry_budget_note_request(b->routes[0].budget, 100000);
	retry_budget_book_detach(book, b);
	config_release(a);
	config_release(b);
	retry_budget_book_free(book);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_floor_without_requests),
		cmocka_unit_test(test_ratio_of_requests),
		cmocka_unit_test(test_decimal_bound_is_exact),
		cmocka_unit_test(test_window_slides),
		cmocka_unit_test(test_window_is_never_short),
		cmocka_unit_test(test_odd_window_is_never_short),
		cmocka_unit_test(test_routes_and_windows_are_separate),
		cmocka_unit_test(test_zero_budget_refuses),
		cmocka_unit_test(test_allows_counts_nothing),
		cmocka_unit_test(test_spend_counts_one),
		cmocka_unit_test(test_allows_leaves_old_buckets),
		cmocka_unit_test(test_attach_detach),
		cmocka_unit_test(test_window_change_is_new_state),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
