#ifndef RETRYPROXY_CONFIG_FLEET_H
#define RETRYPROXY_CONFIG_FLEET_H

/*
 * The fleet: section (SPEC "Fleet budget"): where the shared Redis is, the
 * fleet's name and how often a proxy syncs with it. config.c reads it with
 * config_fleet_type; the address parser is pure, for the unit tests.
 */

#include "config.h"
#include "config_walk.h"

/* Shortest and longest sync_interval: below the shortest a fleet of sidecars
 * would keep Redis busy for nothing; above the longest leases and counts
 * would be too stale to bound a window of seconds. */
#define CONFIG_FLEET_SYNC_MIN_MS 10
#define CONFIG_FLEET_SYNC_MAX_MS 10000

/* The longest password password_file may hold (Redis takes any length;
 * a longer first line is more likely the wrong file). */
#define CONFIG_FLEET_PASSWORD_MAX 4096

/* The default sync_interval. */
#define CONFIG_FLEET_SYNC_DEFAULT_MS 100

/* Parse "host:port", "[v6]:port" or "unix:/path" into fleet's redis_host and
 * redis_port, or redis_socket; on error *why says what is wrong. A host may
 * be a name: it is resolved without blocking when the proxy connects. */
int config_fleet_redis_address(const char *text, struct fleet_config *fleet, const char **why);

/* Free what the section allocated and clear it. */
void config_fleet_free(struct fleet_config *fleet);

/* fleet: a mapping, or a null for no fleet. */
extern const struct config_walk_type config_fleet_type;

#endif
