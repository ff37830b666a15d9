#ifndef RETRYPROXY_PROXY_H
#define RETRYPROXY_PROXY_H

/*
 * The one runtime state, built by main and passed down: the services the
 * modules below share (event loop, DNS, TLS contexts, the upstream pool, the
 * live config, metrics, retry budgets, jitter). What a module owns sits here
 * behind its own opaque type (listeners, admin, the connection registry's
 * entries), and nothing below proxy.c calls back into it: connection counts
 * come from the conn loop, shutdown, drain and reload go through the
 * registry.
 */

#include <stdbool.h>
#include <sys/queue.h>

#include "config.h"
#include "registry.h"
#include "retry.h"
#include "spool.h"

struct conn_loop;
struct event_base;
struct evdns_base;
struct resolv_conf;
struct dns_cache;
struct event;
struct timer;
struct log_batch;
struct tls_store;
struct pool;
struct upstreams;
struct listener_set;
struct exchange;
struct metrics;
struct admin;
struct retry_budget_book;
struct fleet;
struct client;

struct proxy {
	struct conn_loop *loop;	 /* the event loop; its passes end with output written */
	struct event_base *base; /* the loop's event base */
	/* the nameservers, asked one search-list candidate at a time
	 * (name_lookup.c walks the list, from resolv_conf) */
	struct evdns_base *dns;
	/* the search list, ndots, timeout and attempts dns was given: a name
	 * written with a trailing dot skips the search list, so that
	 * "api.internal." is asked as it is and never as
	 * "api.internal.<search domain>", whatever ndots says */
	struct resolv_conf *resolv_conf;
	/* the same hosts file, and no nameserver: an upstream name is looked
	 * up in it first (a question it cannot answer is queued, cancelled,
	 * never sent); then a localhost name is loopback (RFC 6761 section
	 * 6.3) and others are asked of dns with evdns_base_resolve_ipv4/6,
	 * which give the error and the TTL */
	struct evdns_base *hosts;
	struct dns_cache
		*dns_cache;    /* upstream names' answers (limits.dns_cache); NULL: none kept */
	struct config *config; /* live config; connections hold the one they started under */
	struct tls_store *tls;
	struct pool *pool;
	struct upstreams *upstreams;	/* every upstream's health and held requests */
	struct listener_set *listeners; /* the open proxy listeners (listener.c) */
	struct admin *admin;		/* the admin listener, or NULL when off */
	struct registry registry;	/* every open client connection and tunnel */
	/* client connections idle between requests, the longest idle first:
	 * closed to make room at max_connections (client.c) */
	TAILQ_HEAD(client_idle_list, client) idle_clients;
	bool draining; /* shutting down: no new requests */
	struct timer *drain_timer;
	uint64_t drain_answer_ms;    /* draining: no try starts after this (timer_now_ms) */
	struct log_batch *log_batch; /* when the buffered log lines are written */
	struct retry_rng rng;	     /* jitter for every backoff */
	struct metrics *metrics;
	struct retry_budget_book *budgets; /* retry.budget state per route */
	struct fleet *fleet;		   /* the budgets shared through Redis, or NULL */
	unsigned backoff_pending;	   /* exchanges waiting on a backoff timer */
	struct exchange *spare_exchanges;  /* freed exchanges kept for reuse */
	unsigned spare_exchange_count;
	struct spool_usage spool_usage; /* bytes in every request body spool file now */
	uint64_t retry_memory_bytes;	/* request bodies and responses kept for retries, in memory
					now (limits.retry_memory) */
	struct spool_reaper *spool_reaper; /* large spool files given back a step at a time */
};

/* Build the runtime for a validated config (the proxy takes the reference)
 * and bind its listeners and the admin listener. NULL after logging why not;
 * *bind_failed tells a runtime failure (exit 2) from a config one (exit 1). */
struct proxy *proxy_new(struct config *config, bool *bind_failed);

/* Tell the service manager the proxy is ready, then run the event loop
 * until shutdown completes. */
void proxy_run(struct proxy *proxy);

void proxy_free(struct proxy *proxy);

/* Load path (NULL: the embedded default) and switch to it: new requests,
 * also on open keep-alive connections, run under it, while requests in
 * flight finish under the config they started with. On any error (logged
 * with file:line:column) the running config stays. Announced to the service
 * manager. Returns 0 or -1. */
int proxy_reload(struct proxy *proxy, const char *path);

/* A reload refused before any config is read (why: the config file found
 * at the start is gone, and no other is): the running config stays. Logged,
 * and announced to the service manager as a failed reload is; while
 * draining, ignored as proxy_reload() ignores a reload then. */
void proxy_reload_refused(struct proxy *proxy, const char *why);

/* Stop accepting, let in-flight requests finish up to drain_timeout, then
 * leave the loop. The admin listener stays up meanwhile. */
void proxy_drain(struct proxy *proxy);

/* Where the proxy looks names up (name_lookup.h): its loop, hosts file,
 * nameservers and resolv.conf. */
struct name_resolver proxy_name_resolver(const struct proxy *proxy);

#endif
