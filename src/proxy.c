#include "proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "admin.h"
#include "conn.h"
#include "dns_cache.h"
#include "exchange.h"
#include "fleet.h"
#include "listener.h"
#include "log.h"
#include "log_batch.h"
#include "metrics.h"
#include "name_lookup.h"
#include "notify.h"
#include "retry_budget.h"
#include "pool.h"
#include "resolv_conf.h"
#include "tls.h"
#include "upstreams.h"
#include "xmalloc.h"
#include "timer.h"
#include "timeval.h"

/* Where the resolver's configuration comes from; tests point it at a stub
 * resolver on loopback. */
#define PROXY_RESOLV_CONF_ENV "RETRYPROXY_RESOLV_CONF"
#define PROXY_HOSTS_ENV "RETRYPROXY_HOSTS"

/* Questions the resolver has out at once (libevent's "max-inflight:",
 * which a resolv.conf may still set): RESOLV_CONF_MAX_INFLIGHT, as text.
 * nginx and Squid set no such cap at all. */
#define PROXY_DNS_TEXT(n) #n
#define PROXY_DNS_NUMBER(n) PROXY_DNS_TEXT(n)
#define PROXY_DNS_MAX_INFLIGHT PROXY_DNS_NUMBER(RESOLV_CONF_MAX_INFLIGHT)

static void proxy_warn_unverified(const char *text, void *arg)
{
	(void)arg;
	log_warn("%s", text);
}

/* Warn about every trust opt-out and make sure each CA file loads. */
static int proxy_prepare_tls(struct proxy *proxy, const struct config *config)
{
	char err[512];
	size_t i;

	/* SPEC: warned about naming the route; a route's tls holds what it
	 * inherits when it has no tls: section of its own */
	config_tls_opt_outs(config, proxy_warn_unverified, NULL);
	if (tls_store_prepare(proxy->tls, &config->tls, err, sizeof(err)) < 0) {
		log_error("%s: tls: %s", config->source, err);
		return -1;
	}
	for (i = 0; i < config->route_count; i++) {
		const struct route *r = &config->routes[i];

		if (!r->tls_overridden)
			continue;
		if (tls_store_prepare(proxy->tls, &r->tls, err, sizeof(err)) < 0) {
			log_error("%s: routes %s: tls: %s", config->source, r->name, err);
			return -1;
		}
	}
	return 0;
}

static void proxy_connection_closed(void *arg);

/* Idle pooled connections given back at once when descriptors run out: a
 * few, so that one shortage does not empty the pool, enough that the next
 * accepts and connects find room. */
#define PROXY_SHORTAGE_CLOSE 16

/* Out of file descriptors (an accept or a connect's socket failed): idle
 * pooled connections, oldest first, are the descriptors that can go
 * without failing anyone; a forward proxy meeting many hosts keeps one per
 * host for pool_idle_timeout. */
static bool proxy_fd_shortage(void *arg)
{
	struct proxy *proxy = arg;
	unsigned closed = pool_close_oldest(proxy->pool, PROXY_SHORTAGE_CLOSE);

	if (closed > 0)
		log_warn("out of file descriptors: closed %u idle upstream connection%s", closed,
			 closed == 1 ? "" : "s");
	return closed > 0;
}

/* Share the route budgets through the fleet: section's Redis, keeping the
 * connection when a reload leaves Redis, name and interval as they were;
 * no fleet: section, no connection. */
static void proxy_apply_fleet(struct proxy *proxy, const struct config *config)
{
	if (proxy->fleet != NULL &&
	    (config->fleet.redis == NULL || !fleet_same(proxy->fleet, &config->fleet))) {
		retry_budget_book_set_fleet(proxy->budgets, NULL);
		fleet_free(proxy->fleet);
		proxy->fleet = NULL;
	}
	if (config->fleet.redis == NULL)
		return;
	if (proxy->fleet == NULL) {
		struct name_resolver resolver = proxy_name_resolver(proxy);

		proxy->fleet = fleet_new(proxy->base, &resolver, &config->fleet);
	}
	fleet_set_routes(proxy->fleet, config);
	retry_budget_book_set_fleet(proxy->budgets, proxy->fleet);
}

static void proxy_config_freed(struct config *config, void *arg)
{
	struct proxy *proxy = arg;

	retry_budget_book_detach(proxy->budgets, config);
}

/* A config goes live: its routes get their counters and their budget
 * states, which it lets go of when it is freed, after the last request
 * that used it. */
static void proxy_adopt_config(struct proxy *proxy, struct config *config)
{
	metrics_attach(proxy->metrics, config);
	retry_budget_book_attach(proxy->budgets, config);
	config_on_free(config, proxy_config_freed, proxy);
}

/* Client connections and tunnels open now: what max_connections counts. */
static unsigned proxy_connection_count(const struct proxy *proxy)
{
	return conn_loop_open(proxy->loop, CONN_ACCEPTED);
}

/* Can a reload use the file at path now: readable, and with a line that
 * starts with keyword (any line that is not empty, without one)? A file
 * being rewritten in place (truncated, then filled) fails this, and what it
 * said before stays: read as it is, a resolv.conf without a nameserver
 * line would make libevent ask 127.0.0.1. */
static bool proxy_file_usable(const char *path, const char *keyword)
{
	FILE *f = fopen(path, "r");
	char line[512];
	bool usable = false;

	if (f == NULL)
		return false;
	while (!usable && fgets(line, sizeof(line), f) != NULL) {
		const char *p = line + strspn(line, " \t");

		if (keyword == NULL)
			usable = *p != '\0' && *p != '\n';
		else
			usable = strncmp(p, keyword, strlen(keyword)) == 0 &&
				 (p[strlen(keyword)] == ' ' || p[strlen(keyword)] == '\t');
	}
	fclose(f);
	return usable;
}

/* Read resolv.conf and the hosts file into a resolver; with search false,
 * resolv.conf's search list and domain are left out. What evdns gives no
 * getter for (the search list, ndots, timeout, attempts) is read into conf
 * too, when given. Again (at a reload),
 * what a file said before goes first (nameservers, search list, the options
 * it may leave out; hosts entries), and lookups in flight are sent again to
 * the nameservers read now; a file that cannot be read then, or is caught
 * half rewritten (no nameserver line, an empty hosts file), leaves what it
 * said before in force. With servers false, the hosts file alone: a
 * resolver that never sends a query. */
static void proxy_read_resolver(struct evdns_base *dns, struct resolv_conf *conf, bool servers,
				bool search, bool again)
{
	const char *resolv = getenv(PROXY_RESOLV_CONF_ENV);
	const char *hosts = getenv(PROXY_HOSTS_ENV);
	int options = DNS_OPTIONS_ALL & ~DNS_OPTION_HOSTSFILE;
	int r;

	if (resolv == NULL || resolv[0] == '\0')
		resolv = "/etc/resolv.conf";
	/* named always: given NULL, evdns_base_load_hosts() reads no file at
	 * all, only adds localhost */
	if (hosts == NULL || hosts[0] == '\0')
		hosts = "/etc/hosts";
	if (!search)
		options &= ~DNS_OPTION_SEARCH;
	/* the second resolver reads the same files: the first one warns */
	if (!servers) {
		/* no nameserver: the hosts file answers, or nothing does */
	} else if (again && !proxy_file_usable(resolv, "nameserver")) {
		if (search)
			log_warn("reload: cannot read %s or it names no nameserver; the resolver "
				 "keeps what it read before",
				 resolv);
	} else {
		if (again) {
			evdns_base_clear_nameservers_and_suspend(dns);
			/* ndots back to 1 too */
			if (search)
				evdns_base_search_clear(dns);
			/* libevent's own defaults (evdns_base_new), for a file
			 * that no longer sets them */
			evdns_base_set_option(dns, "timeout:", "5");
			evdns_base_set_option(dns, "attempts:", "3");
		}
		/* before the file, which may set its own */
		evdns_base_set_option(dns, "max-inflight:", PROXY_DNS_MAX_INFLIGHT);
		/* every option but the hosts file, which is loaded below from
		 * the file that was asked for */
		r = evdns_base_resolv_conf_parse(dns, options, resolv);
		if (r != 0 && search)
			log_warn("resolver: cannot use %s (error %d); names other than hosts-file "
				 "ones may not resolve",
				 resolv, r);
		if (conf != NULL)
			resolv_conf_read(conf, resolv);
		if (again)
			evdns_base_resume(dns);
	}
	if (again && !proxy_file_usable(hosts, NULL)) {
		if (search)
			log_warn("reload: cannot read the hosts file %s or it is empty; the "
				 "resolver "
				 "keeps what it read before",
				 hosts);
		return;
	}
	if (again)
		evdns_base_clear_host_addresses(dns);
	if (evdns_base_load_hosts(dns, hosts) != 0 && search)
		log_warn("resolver: cannot read the hosts file %s", hosts);
}

/* Whether the hosts file names a host, asked of a resolver that has no
 * nameserver: a lookup it does not answer at once is queued and never
 * sent. */
static struct evdns_base *proxy_new_hosts_resolver(struct event_base *base)
{
	struct evdns_base *dns = evdns_base_new(base, 0);

	proxy_read_resolver(dns, NULL, false, false, false);
	return dns;
}

/* A non-blocking resolver that reads the hosts file and resolv.conf, whose
 * search list, ndots, timeout and attempts go into conf as well. */
static struct evdns_base *proxy_new_resolver(struct event_base *base, struct resolv_conf *conf)
{
	struct evdns_base *dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);

	proxy_read_resolver(dns, conf, true, true, false);
	return dns;
}

struct name_resolver proxy_name_resolver(const struct proxy *proxy)
{
	struct name_resolver resolver = { proxy->base, proxy->hosts, proxy->dns, proxy->resolv_conf,
					  proxy->loop };

	return resolver;
}

struct proxy *proxy_new(struct config *config, bool *bind_failed)
{
	struct proxy *proxy = xcalloc(1, sizeof(*proxy));

	*bind_failed = false;
	proxy->loop = conn_loop_new();
	if (proxy->loop == NULL) {
		log_error("cannot create the event loop");
		free(proxy);
		config_release(config);
		*bind_failed = true;
		return NULL;
	}
	proxy->base = conn_loop_base(proxy->loop);
	proxy->config = config;
	retry_rng_seed(&proxy->rng);
	proxy->metrics = metrics_new();
	proxy->budgets = retry_budget_book_new();
	proxy_adopt_config(proxy, config);
	proxy->resolv_conf = resolv_conf_new();
	proxy->dns = proxy_new_resolver(proxy->base, proxy->resolv_conf);
	proxy->hosts = proxy_new_hosts_resolver(proxy->base);
	proxy->dns_cache = dns_cache_new();
	proxy->tls = tls_store_new();
	proxy->pool = pool_new();
	proxy->spool_reaper = spool_reaper_new(proxy->base);
	proxy->upstreams = upstreams_new(proxy);
	conn_loop_on_accepted_closed(proxy->loop, proxy_connection_closed, proxy);
	conn_loop_on_fd_shortage(proxy->loop, proxy_fd_shortage, proxy);
	registry_init(&proxy->registry);
	TAILQ_INIT(&proxy->idle_clients);
	proxy->listeners = listener_set_new();
	if (proxy_prepare_tls(proxy, config) < 0) {
		proxy_free(proxy);
		return NULL;
	}
	if (listener_apply(proxy, config) < 0 || admin_apply(proxy, config) < 0) {
		*bind_failed = true;
		proxy_free(proxy);
		return NULL;
	}
	proxy_apply_fleet(proxy, config);
	return proxy;
}

void proxy_free(struct proxy *proxy)
{
	if (proxy == NULL)
		return;
	listener_close_all(proxy);
	listener_set_free(proxy->listeners);
	proxy->listeners = NULL;
	admin_close(proxy);
	registry_close_all(&proxy->registry, "shutdown");
	pool_free(proxy->pool);
	/* after the exchanges, which hold upstreams; before the resolver,
	 * which probes use */
	upstreams_free(proxy->upstreams);
	exchange_free_spares(proxy);
	/* before the resolver and the event base, which it uses */
	retry_budget_book_set_fleet(proxy->budgets, NULL);
	fleet_free(proxy->fleet);
	tls_store_free(proxy->tls);
	timer_free(proxy->drain_timer);
	log_batch_free(proxy->log_batch);
	/* a lookup given up above or before (a fleet reconnecting, an
	 * upstream connect), its question still out, is cancelled now and
	 * freed by its deferred callback, which only a pass of the loop runs:
	 * without it libevent 2.1 leaks the request when the resolver goes
	 * (libevent issue 942); the callbacks see the cancel and touch
	 * nothing */
	name_lookup_cancel_unwaited();
	event_base_loop(proxy->base, EVLOOP_NONBLOCK);
	evdns_base_free(proxy->dns, 1);
	evdns_base_free(proxy->hosts, 1);
	resolv_conf_free(proxy->resolv_conf);
	/* after every connect, whose answers it may hold */
	dns_cache_free(proxy->dns_cache);
	/* the config's last release lets go of its budget states: the other
	 * holders of configs (clients, exchanges, listeners) are gone by now,
	 * so none is left to detach into the freed book; its routes' metrics
	 * series go after it */
	config_release(proxy->config);
	retry_budget_book_free(proxy->budgets);
	metrics_free(proxy->metrics);
	/* after every exchange, whose spool files it may hold; what it still
	 * holds is closed whole, the process ending */
	spool_reaper_free(proxy->spool_reaper);
	conn_loop_free(proxy->loop);
	free(proxy);
}

/* READY=1 for the service manager, with what is serving now. */
static void proxy_notify_ready(const struct proxy *proxy, const char *what)
{
	char status[256];

	snprintf(status, sizeof(status), "%s: %zu listener%s, config %s", what,
		 proxy->config->listener_count, proxy->config->listener_count == 1 ? "" : "s",
		 proxy->config->source);
	notify_ready(status);
}

/* The end of each loop pass, after connections wrote their output. */
static void proxy_pass_end(void *arg)
{
	struct proxy *proxy = arg;

	log_batch_pass_end(proxy->log_batch);
}

void proxy_run(struct proxy *proxy)
{
	proxy_notify_ready(proxy, "serving");
	proxy->log_batch = log_batch_new(proxy->base);
	log_set_buffered(true);
	conn_loop_run(proxy->loop, proxy_pass_end, proxy);
	/* flushes what is left: nothing is lost at exit */
	log_set_buffered(false);
}

/* Log one line of a refused config's errors. */
static void proxy_load_error(const char *line, void *arg)
{
	log_error("reload: %s", line);
}

/* Load path or the embedded default; the errors go through the log one per
 * line (file:line:col: key: message), so that they follow log.format. */
static struct config *proxy_load(const char *path)
{
	return config_load(path, CONFIG_SOURCE_REGULAR, proxy_load_error, NULL);
}

int proxy_reload(struct proxy *proxy, const char *path)
{
	const char *name = path != NULL ? path : "<embedded>";
	struct config *config;

	if (proxy->draining) {
		/* applying listeners now would open what the drain closed */
		log_warn("reload: ignored while draining");
		return -1;
	}
	notify_reloading();
	config = proxy_load(path);
	if (config == NULL) {
		log_error("reload: %s has errors; keeping the running config", name);
		goto fail;
	}
	/* before any listener or client can see it */
	proxy_adopt_config(proxy, config);
	/* the trust is read again: a CA taken out of a file is out now */
	tls_store_reload_begin(proxy->tls);
	if (proxy_prepare_tls(proxy, config) < 0)
		goto fail_apply;
	/* admin first: if the listeners then fail, putting the one admin
	 * socket back is simpler than putting back every listener. A listener
	 * the new config drops may hold the admin's new port (the admin moves
	 * where a listener was): that one is closed first. */
	if (config->admin_address != NULL)
		listener_unbind_port(proxy, config, &config->admin_addr, config->admin_address);
	if (admin_apply(proxy, config) < 0)
		goto fail_rebind;
	if (listener_apply(proxy, config) < 0) {
		/* before the listeners: the admin may hold a port of theirs */
		if (admin_apply(proxy, proxy->config) < 0)
			log_error("reload: the admin listener could not be put back as it was");
		goto fail_rebind;
	}
	tls_store_reload_end(proxy->tls, true);
	pool_close_stale_tls(proxy->pool, proxy->tls);
	pool_apply_limits(
		proxy->pool, config->limits.pool_max_idle, config->limits.pool_idle_timeout_ms,
		config->limits.pool_idle_timeout_ms < proxy->config->limits.pool_idle_timeout_ms);
	config_release(proxy->config);
	proxy->config = config;
	log_configure(config->log_level, config->log_format);
	upstreams_slot_limit(proxy->upstreams, config->limits.max_upstream_connections);
	upstreams_health_policy(proxy->upstreams, &config->health);
	/* resolv.conf and the hosts file are read again (an edited hosts
	 * file, a new nameserver), and the answers kept under the old ones
	 * are forgotten, as they are under an old dns_cache; the questions
	 * nobody waits for go first, or they would be sent again */
	name_lookup_cancel_unwaited();
	proxy_read_resolver(proxy->dns, proxy->resolv_conf, true, true, true);
	proxy_read_resolver(proxy->hosts, NULL, false, false, true);
	dns_cache_clear(proxy->dns_cache);
	/* after the files are read again: a new fleet.redis name is looked up
	 * under the hosts file and nameservers the reload brought */
	proxy_apply_fleet(proxy, config);
	registry_config_changed(&proxy->registry);
	/* a raised limit takes effect now, not when some client leaves */
	listener_check_accepting(proxy);
	log_info("reload: now running %s", config->source);
	metrics_reload(proxy->metrics, true);
	proxy_notify_ready(proxy, "reloaded");
	return 0;
fail_rebind:
	listener_rebind(proxy);
fail_apply:
	tls_store_reload_end(proxy->tls, false);
	log_error("reload: cannot apply %s; keeping the running config", name);
	config_release(config);
fail:
	metrics_reload(proxy->metrics, false);
	/* the manager waits for READY=1 after RELOADING=1, failed or not */
	proxy_notify_ready(proxy, "reload failed, still serving");
	return -1;
}

void proxy_reload_refused(struct proxy *proxy, const char *why)
{
	/* as proxy_reload(): after STOPPING=1 the manager hears nothing more,
	 * least of all READY=1 */
	if (proxy->draining) {
		log_warn("reload: ignored while draining");
		return;
	}
	/* Type=notify-reload waits for RELOADING=1, then READY=1, after its
	 * SIGHUP, whether a config was read or not */
	notify_reloading();
	log_error("reload: %s; keeping the running config", why);
	metrics_reload(proxy->metrics, false);
	proxy_notify_ready(proxy, "reload failed, still serving");
}

/* The end of a drain kept for writing the answers of requests that waited
 * for a try: a tenth of drain_timeout, at most a second. */
static uint64_t proxy_drain_write_ms(const struct config *config)
{
	uint64_t ms = config->limits.drain_timeout_ms / 10;

	return ms < 1000 ? ms : 1000;
}

/* drain_timeout passed: close what is still open. */
static void proxy_drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy *proxy = arg;

	log_warn("drain_timeout passed with %u connections open; closing them",
		 proxy_connection_count(proxy));
	registry_close_all(&proxy->registry, "drain_timeout");
	event_base_loopexit(proxy->base, NULL);
}

/* The drain's answer time, a little before drain_timeout: requests waiting
 * for a try get their answer while there is time left to write it; tries
 * in flight and responses under way go on until drain_timeout. */
static void proxy_drain_answer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy *proxy = arg;

	log_info("draining: %u connections open near drain_timeout; answering the requests "
		 "waiting for a try",
		 proxy_connection_count(proxy));
	registry_drain_answer(&proxy->registry);
	if (proxy_connection_count(proxy) == 0) {
		event_base_loopexit(proxy->base, NULL);
		return;
	}
	/* drain_timeout counts from the drain's start, as the answer time did */
	timer_set_cb(proxy->drain_timer, proxy_drain_timeout_cb, proxy);
	timer_start(proxy->drain_timer, proxy->drain_answer_ms,
		    proxy_drain_write_ms(proxy->config));
}

void proxy_drain(struct proxy *proxy)
{
	uint64_t ms = proxy->config->limits.drain_timeout_ms;
	uint64_t write_ms = proxy_drain_write_ms(proxy->config);
	uint64_t now;

	if (proxy->draining)
		return;
	proxy->draining = true;
	now = timer_now_ms();
	proxy->drain_answer_ms = now + (ms - write_ms);
	notify_stopping();
	log_info("draining: %u connections open, waiting up to %llu ms",
		 proxy_connection_count(proxy), (unsigned long long)ms);
	listener_close_all(proxy);
	registry_drain_begins(&proxy->registry);
	if (proxy_connection_count(proxy) == 0) {
		event_base_loopexit(proxy->base, NULL);
		return;
	}
	proxy->drain_timer = timer_new(proxy->base, proxy_drain_answer_cb, proxy);
	timer_start(proxy->drain_timer, now, ms - write_ms);
}

/* A client connection or tunnel closed: resume accepting below
 * max_connections, finish a drain when the last one is gone. */
static void proxy_connection_closed(void *arg)
{
	struct proxy *proxy = arg;

	listener_check_accepting(proxy);
	if (proxy->draining && proxy_connection_count(proxy) == 0)
		event_base_loopexit(proxy->base, NULL);
}
