/* Unit tests for fleet.c without a Redis: which routes a fleet syncs, and
 * that while it is not connected (here: nothing listens where it points)
 * the local budget decides alone. test_fleet.py covers a real Redis. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "fleet.h"
#include "retry_budget.h"

static const char config_text[] = "fleet:\n"
				  "  redis: 127.0.0.1:1\n"
				  "  name: checkout\n"
				  "defaults:\n"
				  "  retry:\n"
				  "    budget: { ratio: 0.1, min_per_second: 1, window: 10s }\n"
				  "routes:\n"
				  "  - name: a\n"
				  "  - name: b\n"
				  "    retry: { budget: { window: 5s } }\n";

static const char rewindowed_text[] = "fleet:\n"
				      "  redis: 127.0.0.1:1\n"
				      "  name: checkout\n"
				      "routes:\n"
				      "  - name: b\n"
				      "    retry: { budget: { window: 7s } }\n";

static const char reloaded_text[] = "fleet:\n"
				    "  redis: 127.0.0.1:1\n"
				    "  name: checkout\n"
				    "routes:\n"
				    "  - name: b\n"
				    "    retry: { budget: { window: 5s } }\n";

static struct config *load(const char *text)
{
	struct config *config = config_load_text(text, strlen(text), "t.yaml", stderr);

	assert_non_null(config);
	return config;
}

/* Run the loop for ms: the connect fails and a reconnect is scheduled. */
static void run_for(struct event_base *base, unsigned ms)
{
	struct timeval tv = { 0, (suseconds_t)ms * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

static void test_routes_synced(void **state)
{
	struct event_base *base = event_base_new();
	struct config *config = load(config_text);
	struct config *reloaded = load(reloaded_text);
	struct config *rewindowed = load(rewindowed_text);
	struct fleet *fleet = fleet_new(base, NULL, &config->fleet);

	fleet_set_routes(fleet, config);
	assert_non_null(fleet_route_find(fleet, "default", 10000));
	assert_non_null(fleet_route_find(fleet, "a", 10000));
	assert_non_null(fleet_route_find(fleet, "b", 5000));
	/* another window is another budget */
	assert_null(fleet_route_find(fleet, "b", 10000));
	assert_null(fleet_route_find(fleet, "nope", 10000));
	assert_true(fleet_same(fleet, &reloaded->fleet));
	assert_int_equal(fleet_routes_kept(fleet), 3);
	fleet_set_routes(fleet, reloaded);
	assert_null(fleet_route_find(fleet, "a", 10000));
	assert_non_null(fleet_route_find(fleet, "b", 5000));
	/* a dropped route's lease goes at once when no sync of it is out */
	assert_int_equal(fleet_routes_kept(fleet), 2);
	/* and so does one whose window changed, reload after reload */
	for (int i = 0; i < 10; i++) {
		fleet_set_routes(fleet, i % 2 == 0 ? rewindowed : reloaded);
		assert_int_equal(fleet_routes_kept(fleet), 2);
	}
	assert_non_null(fleet_route_find(fleet, "b", 5000));
	assert_null(fleet_route_find(fleet, "b", 7000));
	fleet_free(fleet);
	config_release(config);
	config_release(reloaded);
	config_release(rewindowed);
	event_base_free(base);
}

static void test_local_while_disconnected(void **state)
{
	struct event_base *base = event_base_new();
	struct config *config = load(config_text);
	const struct retry_budget *budget = &config->routes[0].retry.budget;
	struct fleet *fleet = fleet_new(base, NULL, &config->fleet);
	struct retry_budget_book *book = retry_budget_book_new();
	struct retry_budget_state *s;
	unsigned n = 0;

	fleet_set_routes(fleet, config);
	retry_budget_book_set_fleet(book, fleet);
	s = retry_budget_for(book, "a", budget);
	run_for(base, 50);
	assert_false(fleet_connected(fleet));
	assert_false(fleet_route_active(fleet_route_find(fleet, "a", 10000)));
	retry_budget_note_request(s, 100000);
	/* the local floor: 1 per second over 10 s */
	while (retry_budget_allows(s, budget, 100000) && n < 100) {
		retry_budget_spend(s, 100000);
		n++;
	}
	assert_int_equal(n, 10);
	retry_budget_book_set_fleet(book, NULL);
	fleet_free(fleet);
	retry_budget_book_free(book);
	config_release(config);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_routes_synced),
		cmocka_unit_test(test_local_while_disconnected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
