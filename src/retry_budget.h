#ifndef RETRYPROXY_RETRY_BUDGET_H
#define RETRYPROXY_RETRY_BUDGET_H

/*
 * Retry storm protection per route (SPEC retry.budget): over any sliding
 * window, retries may number at most ratio x the route's requests in that
 * window plus min_per_second x the window's seconds. Counts live in time
 * buckets, so checking costs a walk over a few counters, never a list of
 * past requests.
 */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

struct retry_budget_book;
struct retry_budget_state;
struct fleet;

struct retry_budget_book *retry_budget_book_new(void);
void retry_budget_book_free(struct retry_budget_book *book);

/* The state of a route's budget, made on first use. A route whose window
 * changed (reload) starts a new state. A state made here is held by no
 * config: a detach of a config that shares it may free it, so the proxy
 * only ever uses route->budget (tests of a lone book call this). */
struct retry_budget_state *retry_budget_for(struct retry_budget_book *book, const char *route,
					    const struct retry_budget *budget);

/* Give each route of config (the default one too) its state in
 * route->budget, so that a request finds it without a lookup. A reload that
 * keeps a route's name and window keeps its counts. The states stay while
 * config does: retry_budget_book_detach() when it is freed. */
void retry_budget_book_attach(struct retry_budget_book *book, struct config *config);

/* config is going: its routes let go of their states, and a state no
 * config holds any more is freed, so that reloads that rename routes do not
 * pile up states. */
void retry_budget_book_detach(struct retry_budget_book *book, struct config *config);

/* Share the budgets through fleet (NULL: every budget local again): each
 * route the fleet syncs consults its lease while the fleet's Redis answers
 * (SPEC "Fleet budget"). The fleet must outlive the book's use of it. */
void retry_budget_book_set_fleet(struct retry_budget_book *book, struct fleet *fleet);

/* A request arrived on the route at now_ms (timer_now_ms()). */
void retry_budget_note_request(struct retry_budget_state *state, uint64_t now_ms);

/* Would one more retry at now_ms stay within the budget? Counts nothing:
 * retry_decide() is told the answer, and only a retry that happens is spent. */
bool retry_budget_allows(const struct retry_budget_state *state, const struct retry_budget *budget,
			 uint64_t now_ms);

/* A retry happened at now_ms: count it against the budget. */
void retry_budget_spend(struct retry_budget_state *state, uint64_t now_ms);

/* A retry that would have been made was given up for the budget: with a
 * fleet, demand the route's next lease asks for. */
void retry_budget_note_refused(struct retry_budget_state *state);

#endif
