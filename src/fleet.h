#ifndef RETRYPROXY_FLEET_H
#define RETRYPROXY_FLEET_H

/*
 * The fleet budget (SPEC "Fleet budget"): the route budgets of every proxy
 * with the same fleet name, shared through one Redis. A proxy reports its
 * request counts and leases retry tokens in batches every sync_interval, on
 * the event loop (hiredis with its libevent adapter); a retry spends a token
 * it already holds, so no request ever waits for Redis. While Redis cannot
 * be reached or is slow to answer, the local budget (retry_budget.c)
 * decides, and the proxy reconnects with backoff.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct event_base;
struct name_resolver;
struct fleet;
struct fleet_route; /* one route's lease: by route name and window */

/* Start syncing with the Redis the config's fleet: section names; the
 * connection is made in the background. A host name is resolved as an
 * upstream's is (name_lookup.h), with resolver (copied; NULL for a fleet
 * that resolves no name): its hosts file, then as a localhost name, then
 * with its DNS, without the search list when written with a trailing
 * dot. */
struct fleet *fleet_new(struct event_base *base, const struct name_resolver *resolver,
			const struct fleet_config *config);

/* Disconnect and free; every fleet_route of it goes too. */
void fleet_free(struct fleet *fleet);

/* Whether a reload to config can keep this fleet and its connection (same
 * Redis, name and sync_interval). */
bool fleet_same(const struct fleet *fleet, const struct fleet_config *config);

/* Take the routes and their budgets from config: a route is synced only
 * while the config running has it. Leases of routes kept are kept. */
void fleet_set_routes(struct fleet *fleet, const struct config *config);

/* The leases kept: the running config's routes, and dropped ones whose
 * sync reply is still out. For tests. */
size_t fleet_routes_kept(const struct fleet *fleet);

/* 1 while Redis answers and leases are in use: not while the latest sync
 * round could not queue a route's sync (its budget is local then). */
bool fleet_connected(const struct fleet *fleet);

/* The lease of a route the running config has, for this window; NULL
 * otherwise (the local budget alone decides). */
struct fleet_route *fleet_route_find(struct fleet *fleet, const char *route, uint64_t window_ms);

/* Whether the fleet decides this route's retries now: Redis is reachable
 * and has granted the route a lease (a route a reload added has the local
 * budget until its first sync answers, at most a sync interval). */
bool fleet_route_active(const struct fleet_route *fr);

/* Whether a token is held for one more retry. */
bool fleet_route_allows(const struct fleet_route *fr);

/* A retry was given up for want of a token: demand the next lease asks
 * for (counted only for a retry that would otherwise have been made, not
 * for every look at the budget). */
void fleet_route_note_refused(struct fleet_route *fr);

/* A request arrived on the route: reported at the next sync. */
void fleet_route_note_request(struct fleet_route *fr);

/* A retry happened: while Redis answers, spend a held token, or, with
 * none (a route not leased yet), owe it to Redis's count. */
void fleet_route_spend(struct fleet_route *fr);

#endif
