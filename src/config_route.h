#ifndef RETRYPROXY_CONFIG_ROUTE_H
#define RETRYPROXY_CONFIG_ROUTE_H

/*
 * The route half of the configuration, for config.c: the keys of defaults:
 * and of each routes[] item, and how a route inherits. A route starts from
 * the defaults and the global tls: and overrides only the keys it names
 * (retry.budget, retry.hedge and tls: key by key too); retry.on,
 * idempotent.methods and idempotent.when_present replace the inherited list
 * when named. retry.try_timeout falls back to limits.try_timeout.
 */

#include "config.h"
#include "config_walk.h"

/* defaults: read into the default route. */
extern const struct config_walk_key config_route_defaults_keys[];

/* tls: read into a struct tls_policy, global or a route's. */
extern const struct config_walk_key config_route_tls_keys[];

/* routes: read into the struct config given to config_walk_new, after its
 * defaults and tls, which every route starts from. */
extern const struct config_walk_type config_route_list;

/* The default policy (SPEC "defaults:") into a zeroed route. */
void config_route_set_defaults(struct route *route);

/* After the whole file is read: fill retry.try_timeout, in the defaults and
 * in every route that did not set it, from limits.try_timeout. */
void config_route_resolve(struct config *config);

/* Free what a route owns, not the route itself. */
void config_route_free(struct route *route);

#endif
