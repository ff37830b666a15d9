#ifndef RETRYPROXY_CONFIG_H
#define RETRYPROXY_CONFIG_H

/*
 * The validated configuration (SPEC "Configuration"). Loading walks the YAML
 * node tree with a table of keys and reports every error as
 * file:line:column: key: message. A loaded config is immutable and reference
 * counted: exchanges hold the config they started with across a reload.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "log.h"

/* An http:// or https:// upstream. */
struct upstream_url {
	bool tls;	 /* https */
	char *host;	 /* without brackets for IPv6 literals */
	uint16_t port;	 /* explicit, or 80/443 */
	char *authority; /* host[:port] as it goes into Host: (brackets kept, default port omitted) */
	char *text;	 /* as written in the config */
};

struct tls_policy {
	char *ca_file; /* absolute path, or NULL for OpenSSL's default paths */
	bool verify;   /* false only when the config says so */
};

/* retry.on condition flags; explicit status codes are in retry_policy.on_codes. */
enum retry_on {
	RETRY_ON_5XX = 1 << 0, /* any 500..599 */
	RETRY_ON_CONNECT_FAILURE =
		1 << 1,		 /* refused, DNS failure, TLS handshake failure, connect timeout */
	RETRY_ON_RESET = 1 << 2, /* closed or reset before the whole response head */
	RETRY_ON_TIMEOUT = 1 << 3, /* no response head within try_timeout */
};

struct retry_budget {
	double ratio;	       /* retries at most ratio x requests in the window */
	double min_per_second; /* plus this many per second of window */
	uint64_t window_ms;
};

/* The retries a window allows whatever the ratio: min_per_second x the
 * window's seconds. The config refuses a floor above 0 and below 1 (it
 * would allow no retry), so it is computed in one place for both. */
static inline double retry_budget_floor(const struct retry_budget *budget)
{
	return budget->min_per_second * (double)budget->window_ms / 1000.0;
}

/* retry.hedge: another try while one is slow (SPEC "More retry controls"). */
struct hedge_policy {
	uint64_t after_ms; /* no response head after this: one more try; 0: no hedging */
	unsigned max;	   /* extra tries in flight at most, 1..3 */
};

/* retry.idempotency_key (SPEC "More retry controls"). */
enum idempotency_key_mode {
	IDEMPOTENCY_KEY_NONE,	/* Idempotency-Key counts only if when_present names it */
	IDEMPOTENCY_KEY_INJECT, /* an unsafe method gets a key and is retried with it */
};

/* retry.mode. */
enum retry_mode {
	RETRY_MODE_ENFORCE, /* retry as the policy says */
	RETRY_MODE_OBSERVE, /* retry nothing; count and log what would have been retried */
};

struct retry_policy {
	unsigned on;		   /* enum retry_on flags */
	uint8_t on_codes[600 / 8]; /* bit per explicit status code 100..599 */
	unsigned max_attempts;	   /* total tries, first included; >= 1 */
	uint64_t initial_backoff_ms;
	double multiplier; /* >= 1 */
	uint64_t max_backoff_ms;
	bool jitter_full;     /* jitter: full */
	uint64_t jitter_ms;   /* when not full */
	uint64_t deadline_ms; /* from the first try */
	bool honor_retry_after;
	struct retry_budget budget;
	uint64_t try_timeout_ms;   /* one try, until its response head: the route's own, else
				      defaults.retry's, else limits.try_timeout; never 0 */
	struct hedge_policy hedge; /* inherited key by key, like budget */
	bool resume;		   /* continue a broken GET download with a Range request */
	bool attempt_header;	   /* tries after the first carry Retry-Attempt: N */
	enum idempotency_key_mode idempotency_key;
	enum retry_mode mode;
};

enum when_present_kind {
	WHEN_PRESENT_QUERY,	 /* a query parameter with this name */
	WHEN_PRESENT_HEADER,	 /* a header field with this name (case-insensitive) */
	WHEN_PRESENT_JSON_FIELD, /* a top-level member of a JSON request body */
};

struct when_present {
	enum when_present_kind kind;
	char *name;
};

struct idempotency {
	char **methods; /* upper case as written */
	size_t method_count;
	struct when_present *when_present;
	size_t when_present_count;
};

struct metrics_route;
struct retry_budget_state;

struct route {
	char *name;
	char *match_host;	 /* exact or *.suffix, lower case; NULL matches any */
	char *match_path_prefix; /* NULL matches any */
	char **match_methods;	 /* NULL/0 matches any */
	size_t match_method_count;
	struct upstream_url *upstream; /* NULL: the listener's, or the absolute URI's */
	struct tls_policy tls;	       /* the global tls: unless the route has its own */
	bool tls_overridden;	       /* the route has its own tls: section */
	struct retry_policy retry;     /* defaults with the route's keys over them */
	struct idempotency idempotent;
	struct retry_budget_state *budget; /* the proxy's, while the config is in use */
	struct metrics_route *series;	   /* the proxy's counters for this route name */
};

struct listener_config {
	char *address; /* as written, host:port or [v6]:port */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	struct upstream_url *upstream; /* sidecar default upstream, or NULL */
	/* where address is in the config file, for a bind's error; 0: not
	 * written there (the default listener) */
	unsigned line, column;
};

struct cidr {
	struct sockaddr_storage addr; /* network address, AF_INET or AF_INET6 */
	unsigned prefix_len;
};

struct limits {
	unsigned max_connections;
	size_t max_header_bytes;
	size_t max_uri_bytes;
	uint64_t max_body_bytes; /* 0: no limit */
	size_t replay_buffer;
	uint64_t client_timeout_ms;
	size_t retry_response_buffer;
	uint64_t retry_memory; /* bytes all kept bodies and responses may hold at once; 0: no cap */
	uint64_t connect_timeout_ms;
	uint64_t try_timeout_ms;
	uint64_t drain_timeout_ms;
	unsigned pool_max_idle;	       /* idle upstream connections kept per (scheme, host, port) */
	uint64_t pool_idle_timeout_ms; /* an idle pooled connection older than this is closed */
	uint64_t tunnel_idle_timeout_ms; /* a CONNECT tunnel with no traffic this long is closed */
	uint64_t dns_cache_ms; /* how long an upstream name's answer is kept; 0: asked every time */
	unsigned max_pending_retries; /* exchanges waiting in backoff at once, with their buffers */
	uint64_t spool_max; /* request bodies over replay_buffer up to this go to a file; 0: off */
	char *spool_dir;    /* where those files are made, absolute */
	uint64_t spool_total;		   /* bytes all spool files may hold at once; 0: no cap */
	unsigned max_upstream_connections; /* open (and opening) connections per upstream; beyond,
					    * requests wait for one in arrival order */
};

/* health: per upstream, shared by every route (SPEC "Upstream health"). */
struct health_policy {
	unsigned down_after; /* consecutive connect failures that mark an upstream down; 0: off */
	uint64_t probe_interval_ms; /* while down, one connect attempt per interval */
	bool hold; /* while down, requests wait (within their deadline); false: 502 at once */
};

struct ca;

/* intercept.server_first_after's default: an HTTP or TLS client sends its
 * first bytes one round trip after the 200 */
#define INTERCEPT_SERVER_FIRST_AFTER_MS 2000

/* intercept: HTTPS interception in forward mode (SPEC). */
struct intercept_config {
	char **hosts; /* patterns: exact or *.suffix (matched at a dot), any port */
	size_t host_count;
	char *ca_cert; /* absolute paths, resolved against the config file */
	char *ca_key;
	struct ca *ca; /* loaded when the config is; NULL when intercept: is absent */
	/* a tunnel whose client sent nothing this long after the 200 speaks a
	 * protocol whose server talks first (SMTP): tunnelled blind. 0: never */
	uint64_t server_first_after_ms;
};

/* fleet: route budgets shared through Redis (SPEC "Fleet budget"). */
struct fleet_config {
	char *redis;	  /* as written: host:port or unix:/path; NULL: no fleet */
	char *redis_host; /* name or address, without brackets; NULL for a socket */
	uint16_t redis_port;
	char *redis_socket; /* unix socket path, or NULL */
	char *name;	    /* proxies with the same name share a budget per route */
	uint64_t sync_interval_ms;
	char *username;	     /* Redis 6 ACL user for AUTH; NULL: the default user */
	char *password_file; /* absolute; NULL: no AUTH */
	char *password;	     /* read from password_file when the config loads */
};

struct config {
	unsigned refs;				     /* config_hold / config_release */
	void (*on_free)(struct config *, void *arg); /* config_on_free() */
	void *on_free_arg;
	char *source; /* file path, or "<embedded>" */
	struct listener_config *listeners;
	size_t listener_count;
	char *admin_address; /* NULL: no admin listener */
	struct sockaddr_storage admin_addr;
	socklen_t admin_addr_len;
	unsigned admin_line, admin_column; /* where admin: is, for a bind's error */
	enum log_level log_level;
	enum log_format log_format;
	struct cidr *allow_clients;
	size_t allow_client_count;
	char **allow_hosts; /* lower case patterns; "*" allows any */
	size_t allow_host_count;
	bool admin_remote;
	struct tls_policy tls;
	struct limits limits;
	struct health_policy health;
	struct route default_route; /* named "default": the defaults, for unmatched requests */
	struct route *routes;
	size_t route_count;
	struct intercept_config intercept;
	struct fleet_config fleet;
};

/* The embedded default configuration's YAML text. */
extern const char config_embedded_default[];

/* Receives one line of a failed load's errors, "file:line:col: key:
 * message", without its newline. */
typedef void (*config_report_cb)(const char *line, void *arg);

/* The config file to use when none was named: ./conf/retryproxy.yaml, then
 * /etc/retryproxy/retryproxy.yaml (a symlink to a missing file counts); NULL
 * when neither exists, for the embedded default. */
const char *config_default_path(void);

/* What config_load may read: at start (and for --check, --explain) any
 * file, a FIFO such as -c <(make-config) included, however long it takes;
 * at a reload, from the event loop, only a regular file, since waiting on
 * a FIFO nobody writes to, or reading /dev/zero, would stop the proxy. */
enum config_source { CONFIG_SOURCE_ANY, CONFIG_SOURCE_REGULAR };

/* Load and validate path, or the embedded default when path is NULL. On
 * error calls report once per error line, in order, and returns NULL. */
struct config *config_load(const char *path, enum config_source source, config_report_cb report,
			   void *arg);

/* Load and validate a config file. On error prints every error to errors, one
 * per line as "file:line:col: key: message", and returns NULL. */
struct config *config_load_file(const char *path, FILE *errors);

/* The same from text in memory; name stands for the file in messages. */
struct config *config_load_text(const char *text, size_t len, const char *name, FILE *errors);

struct config *config_hold(struct config *config);
void config_release(struct config *config);

/* Call warn(text, arg) for each TLS verification opt-out, which SPEC has
 * warned about naming the route, text the warning's words: first for the
 * top-level tls.verify: false (what a route without a tls: section
 * inherits), then for each route, the default one first, whose upstream
 * certificates go unchecked. */
void config_tls_opt_outs(const struct config *config, void (*warn)(const char *text, void *arg),
			 void *arg);

/* Have freed(config, arg) told once, as the last release frees config:
 * the proxy lets go of what it keeps for the config's routes. */
void config_on_free(struct config *config, void (*freed)(struct config *, void *arg), void *arg);

/* A config's routes in order, then its default route, for i from 0 to
 * config_route_total() - 1: what the proxy keeps per route (metrics series,
 * budget states) is attached to each of them. */
size_t config_route_total(const struct config *config);
struct route *config_route_at(struct config *config, size_t i);

#endif
