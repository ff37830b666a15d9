#include "retry_budget.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "name_index.h"
#include "xmalloc.h"

/* A window is cut into this many buckets: the window slides in steps of
 * window / RETRY_BUDGET_BUCKETS. One more bucket is kept than a window
 * holds, so the counted span (the current, partly gone bucket and the whole
 * ones before it) always covers at least a full window: the budget errs on
 * the strict side. */
#define RETRY_BUDGET_BUCKETS 20
#define RETRY_BUDGET_SLOTS (RETRY_BUDGET_BUCKETS + 1)

/* Relative slack on the allowed count: see retry_budget_allows(). */
#define RETRY_BUDGET_SLACK 1e-12

struct retry_budget_state {
	char *route;
	uint64_t window_ms;
	uint64_t bucket_ms;
	uint64_t epoch[RETRY_BUDGET_SLOTS]; /* which bucket-sized slice of time each holds */
	uint32_t requests[RETRY_BUDGET_SLOTS];
	uint32_t retries[RETRY_BUDGET_SLOTS];
	struct fleet_route *fleet; /* the route's lease when a fleet shares it, else NULL */
	unsigned holds;		   /* routes of configs not freed yet that use it */
	bool let_go;		   /* its last hold went: unlinked and freed */
	struct retry_budget_book *book;
	struct retry_budget_state *next;
};

struct retry_budget_book {
	struct retry_budget_state *states;
	struct fleet *fleet; /* NULL: every budget is local */
};

struct retry_budget_book *retry_budget_book_new(void)
{
	return xcalloc(1, sizeof(struct retry_budget_book));
}

void retry_budget_book_free(struct retry_budget_book *book)
{
	if (book == NULL)
		return;
	while (book->states != NULL) {
		struct retry_budget_state *s = book->states;

		book->states = s->next;
		free(s->route);
		free(s);
	}
	free(book);
}

/* A new state for a route's budget, first in the book's list. */
static struct retry_budget_state *retry_budget_state_new(struct retry_budget_book *book,
							 const char *route,
							 const struct retry_budget *budget)
{
	struct retry_budget_state *s = xcalloc(1, sizeof(*s));

	s->route = xstrdup(route);
	s->window_ms = budget->window_ms;
	/* rounded up: the buckets a window holds must span all of it (a 250ms
	 * window in 12 ms buckets would count back only 240 ms to 252 ms) */
	s->bucket_ms = budget->window_ms / RETRY_BUDGET_BUCKETS +
		       (budget->window_ms % RETRY_BUDGET_BUCKETS != 0);
	if (s->bucket_ms == 0)
		s->bucket_ms = 1;
	s->fleet = book->fleet != NULL ? fleet_route_find(book->fleet, route, s->window_ms) : NULL;
	s->book = book;
	s->next = book->states;
	book->states = s;
	return s;
}

struct retry_budget_state *retry_budget_for(struct retry_budget_book *book, const char *route,
					    const struct retry_budget *budget)
{
	for (struct retry_budget_state *s = book->states; s != NULL; s = s->next)
		if (s->window_ms == budget->window_ms && strcmp(s->route, route) == 0)
			return s;
	return retry_budget_state_new(book, route, budget);
}

void retry_budget_book_attach(struct retry_budget_book *book, struct config *config)
{
	/* the states kept from before, each found by its route and window
	 * rather than by a walk of the list for every route */
	struct name_index *states = name_index_new(config_route_total(config));

	for (struct retry_budget_state *s = book->states; s != NULL; s = s->next)
		name_index_add(states, s->route, s->window_ms, s);
	for (size_t i = 0; i < config_route_total(config); i++) {
		struct route *route = config_route_at(config, i);
		const struct retry_budget *budget = &route->retry.budget;

		route->budget = name_index_find(states, route->name, budget->window_ms);
		if (route->budget == NULL) {
			route->budget = retry_budget_state_new(book, route->name, budget);
			name_index_add(states, route->budget->route, budget->window_ms,
				       route->budget);
		}
		route->budget->holds++;
	}
	name_index_free(states);
}

void retry_budget_book_detach(struct retry_budget_book *book, struct config *config)
{
	for (size_t i = 0; i < config_route_total(config); i++) {
		struct route *route = config_route_at(config, i);

		/* attached to another book: not this one's to let go */
		if (route->budget == NULL || route->budget->book != book)
			continue;
		if (--route->budget->holds == 0)
			route->budget->let_go = true;
		route->budget = NULL;
	}
	/* one pass over the list for all the states let go */
	for (struct retry_budget_state **link = &book->states; *link != NULL;) {
		struct retry_budget_state *s = *link;

		if (!s->let_go) {
			link = &s->next;
			continue;
		}
		*link = s->next;
		free(s->route);
		free(s);
	}
}

void retry_budget_book_set_fleet(struct retry_budget_book *book, struct fleet *fleet)
{
	book->fleet = fleet;
	for (struct retry_budget_state *s = book->states; s != NULL; s = s->next)
		s->fleet = fleet != NULL ? fleet_route_find(fleet, s->route, s->window_ms) : NULL;
}

/* The bucket for now, emptied first if it holds an older slice of time. */
static unsigned retry_budget_bucket(struct retry_budget_state *s, uint64_t now_ms)
{
	uint64_t epoch = now_ms / s->bucket_ms;
	unsigned i = (unsigned)(epoch % RETRY_BUDGET_SLOTS);

	if (s->epoch[i] != epoch) {
		s->epoch[i] = epoch;
		s->requests[i] = 0;
		s->retries[i] = 0;
	}
	return i;
}

void retry_budget_note_request(struct retry_budget_state *state, uint64_t now_ms)
{
	state->requests[retry_budget_bucket(state, now_ms)]++;
	if (state->fleet != NULL)
		fleet_route_note_request(state->fleet);
}

bool retry_budget_allows(const struct retry_budget_state *state, const struct retry_budget *budget,
			 uint64_t now_ms)
{
	uint64_t now_epoch = now_ms / state->bucket_ms;
	uint64_t requests = 0;
	uint64_t retries = 0;
	double allowed;
	unsigned i;

	/* while the fleet's Redis answers, a retry needs a leased token; the
	 * local counts go on, for when it does not */
	if (state->fleet != NULL && fleet_route_active(state->fleet))
		return fleet_route_allows(state->fleet);
	for (i = 0; i < RETRY_BUDGET_SLOTS; i++) {
		/* only the slices inside the window count; a slot holding an older
		 * slice is skipped here rather than emptied, so peeking changes
		 * nothing (a later slice wraps to a huge difference and is skipped
		 * too) */
		if (now_epoch - state->epoch[i] <= RETRY_BUDGET_BUCKETS) {
			requests += state->requests[i];
			retries += state->retries[i];
		}
	}
	allowed = budget->ratio * (double)requests + retry_budget_floor(budget);
	/* the config's decimals are not exact in binary: 0.58 x 50 comes out
	 * as 28.999999999999996, and the SPEC's bound is 29. The products'
	 * rounding errors are a few parts in 1e16; a slack of 1e-12 takes
	 * them back, and only a ratio written with a dozen significant digits
	 * could fall short of a whole number by less */
	return (double)(retries + 1) <=
	       allowed + RETRY_BUDGET_SLACK * (allowed > 1.0 ? allowed : 1.0);
}

void retry_budget_note_refused(struct retry_budget_state *state)
{
	if (state->fleet != NULL)
		fleet_route_note_refused(state->fleet);
}

void retry_budget_spend(struct retry_budget_state *state, uint64_t now_ms)
{
	state->retries[retry_budget_bucket(state, now_ms)]++;
	if (state->fleet != NULL)
		fleet_route_spend(state->fleet);
}
