#ifndef RETRYPROXY_FLEET_LEASE_H
#define RETRYPROXY_FLEET_LEASE_H

/*
 * The arithmetic of the fleet budget (SPEC "Fleet budget"), both halves:
 * how many retry tokens a proxy asks for at each sync (pure, here), and how
 * Redis decides how many to grant (the Lua script, run atomically there).
 * The README's "Fleet budget" section derives the bound they keep.
 */

#include <stdint.h>

/* The Lua script each sync runs with EVALSHA, once per route:
 *   KEYS[1] the route's hash, "retryproxy:{<fleet>}:<route>:<window ms>"
 *   ARGV    requests since the last sync, tokens wanted, ratio,
 *           min_per_second, window in ms, tokens handed back, the bucket
 *           they were granted in, retries owed
 * It takes the tokens handed back off the bucket that granted them (never
 * below 0), adds the requests to the current time bucket (Redis's own
 * clock, so every proxy counts in the same buckets), and the retries owed
 * to it as spent (tokens a proxy spent after handing them back, while its
 * sync was out, beyond what the reply granted), grants at most what
 * the window has left under ratio x requests + min_per_second x seconds,
 * counts the grant as retries in the bucket, and returns {granted,
 * requests in the window, retries granted in the window, the bucket}. */
extern const char fleet_lease_script[];

/* The lease to ask for at a sync, given the route's ratio, the requests
 * the proxy saw since the previous sync and the retries it made or was
 * refused in that time. Each sync hands back the tokens still held and
 * asks for a new lease, so a token lives one sync interval and a lease
 * follows the traffic of now, never of a past peak. It aims to hold what it
 * may spend before the next sync: twice its share (ratio x requests) or
 * twice the retries it was asked for, whichever is more, so that the lease
 * also covers a busier next interval and a storm of failures is not held to
 * the share of its requests while the fleet's floor (min_per_second) is
 * unspent; and at least one token, so that a quiet proxy's first failure
 * can be retried. Redis grants no more than the fleet's window has left;
 * what a proxy holds unspent is all the fleet can overspend. */
uint64_t fleet_lease_target(double ratio, uint64_t requests, uint64_t asked);

#endif
