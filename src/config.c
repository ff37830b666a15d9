#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ca.h"
#include "config_fleet.h"
#include "config_route.h"
#include "config_values.h"
#include "config_walk.h"
#include "spool.h"
#include "xmalloc.h"
#include "yaml_tree.h"

/*
 * Loading is two steps, like h2o: yaml_tree turns the text into nodes that
 * know where they were written, then config_walk reads those nodes with the
 * tables of keys below into a struct config. The top-level table is read in
 * its own order, not the file's, because later sections start from earlier
 * ones: a route from defaults: and tls:, admin: checks access: and listen:.
 */

/* log.level: error, warn, info or debug. */
static void config_set_log_level(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	static const enum log_level levels[] = { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO,
						 LOG_LEVEL_DEBUG };
	int i = config_walk_choice(walk, node, names, 4, "error, warn, info or debug");

	if (i >= 0)
		*(enum log_level *)field = levels[i];
}

static const struct config_walk_type config_type_log_level = { YAML_TREE_SCALAR,
							       "error, warn, info or debug",
							       config_set_log_level };

/* log.format: text or json. */
static void config_set_log_format(struct config_walk *walk, const struct yaml_tree_node *node,
				  void *field)
{
	static const char *const names[] = { "text", "json" };
	int i = config_walk_choice(walk, node, names, 2, "text or json");

	if (i >= 0)
		*(enum log_format *)field = i == 0 ? LOG_FORMAT_TEXT : LOG_FORMAT_JSON;
}

static const struct config_walk_type config_type_log_format = { YAML_TREE_SCALAR, "text or json",
								config_set_log_format };

/* Parse an address into addr; false after an error. */
static bool config_address(struct config_walk *walk, const struct yaml_tree_node *node,
			   struct sockaddr_storage *addr, socklen_t *len)
{
	const char *why;
	char quoted[128];

	if (config_values_address(node->text, addr, len, &why) == 0)
		return true;
	config_walk_error(walk, node, "invalid address %s: %s",
			  config_walk_quote(node, quoted, sizeof(quoted)), why);
	return false;
}

/* admin: loopback unless access.admin_remote, which the table reads first. */
static void config_set_admin(struct config_walk *walk, const struct yaml_tree_node *node,
			     void *field)
{
	struct config *config = field;
	struct sockaddr_storage addr;
	socklen_t len;

	/* admin: ~ (or nothing after the colon) is the key left out: no admin
	 * listener, as a null is no fleet: or intercept: */
	if (yaml_tree_is_null(node))
		return;
	if (!config_address(walk, node, &addr, &len))
		return;
	if (!config->admin_remote && !config_values_is_loopback(&addr)) {
		config_walk_error(
			walk, node,
			"%s is not a loopback address; set access.admin_remote: true to allow it",
			node->text);
		return;
	}
	for (size_t i = 0; i < config->listener_count; i++) {
		/* a refused listener's address was reported already */
		if (config->listeners[i].address == NULL)
			continue;
		if (config_values_addresses_clash(&addr, &config->listeners[i].addr)) {
			config_walk_error(walk, node, "%s is already used by listen[%zu] (%s)",
					  node->text, i, config->listeners[i].address);
			return;
		}
	}
	config->admin_address = xstrdup(node->text);
	config->admin_addr = addr;
	config->admin_addr_len = len;
	config->admin_line = node->line;
	config->admin_column = node->column;
}

static const struct config_walk_type config_type_admin = { YAML_TREE_SCALAR,
							   "an address like 127.0.0.1:9901",
							   config_set_admin };

/* Free an array of strings and the strings. */
static void config_free_strings(char **strings, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(strings[i]);
	free(strings);
}

/* access.allow_clients: networks; replaces the default loopback ones. */
static void config_set_allow_clients(struct config_walk *walk, const struct yaml_tree_node *node,
				     void *field)
{
	struct config *config = field;
	struct cidr *out = xcalloc(node->count, sizeof(*out));
	size_t errors = config_walk_error_count(walk);

	if (node->count == 0)
		config_walk_error(walk, node,
				  "expected at least one network; nobody could use the proxy");
	for (size_t i = 0; i < node->count; i++) {
		size_t mark = config_walk_push_index(walk, i);
		const struct yaml_tree_node *item =
			config_walk_scalar_item(walk, node, i, "a network like 10.0.0.0/8");
		const char *why;
		char quoted[128];

		if (item != NULL && config_values_cidr(item->text, &out[i], &why) < 0)
			config_walk_error(walk, item, "invalid network %s: %s",
					  config_walk_quote(item, quoted, sizeof(quoted)), why);
		config_walk_pop(walk, mark);
	}
	if (config_walk_error_count(walk) > errors) {
		free(out);
		return;
	}
	free(config->allow_clients);
	config->allow_clients = out;
	config->allow_client_count = node->count;
}

static const struct config_walk_type config_type_allow_clients = {
	YAML_TREE_SEQUENCE, "a list of networks like [10.0.0.0/8]", config_set_allow_clients
};

/* A list of host patterns (exact, *.suffix or "*"), lower case, into *hosts
 * and *count in place of what was there; hint follows the complaint about an
 * empty list. */
static void config_host_patterns(struct config_walk *walk, const struct yaml_tree_node *node,
				 const char *hint, char ***hosts, size_t *count)
{
	char **out = xcalloc(node->count, sizeof(*out));
	size_t n = 0, errors = config_walk_error_count(walk);

	if (node->count == 0)
		config_walk_error(walk, node, "expected at least one host pattern; %s", hint);
	for (size_t i = 0; i < node->count; i++) {
		size_t mark = config_walk_push_index(walk, i);
		const struct yaml_tree_node *item =
			config_walk_scalar_item(walk, node, i, "a host pattern");
		const char *why;
		char quoted[128];

		if (item != NULL && config_values_host_pattern(item->text, &out[n], &why) < 0)
			config_walk_error(walk, item, "invalid host pattern %s: %s",
					  config_walk_quote(item, quoted, sizeof(quoted)), why);
		else if (item != NULL)
			n++;
		config_walk_pop(walk, mark);
	}
	if (config_walk_error_count(walk) > errors) {
		config_free_strings(out, n);
		return;
	}
	config_free_strings(*hosts, *count);
	*hosts = out;
	*count = n;
}

/* access.allow_hosts: host patterns; replaces the default "*". */
static void config_set_allow_hosts(struct config_walk *walk, const struct yaml_tree_node *node,
				   void *field)
{
	struct config *config = field;

	config_host_patterns(walk, node, "use \"*\" to allow any", &config->allow_hosts,
			     &config->allow_host_count);
}

static const struct config_walk_type config_type_allow_hosts = {
	YAML_TREE_SEQUENCE, "a list of host patterns like [\"*.example.com\"]",
	config_set_allow_hosts
};

/* listen[].address: numeric, and not one an earlier listener took. */
static void config_set_listen_address(struct config_walk *walk, const struct yaml_tree_node *node,
				      void *field)
{
	const struct config *config = config_walk_data(walk);
	struct listener_config *listener = field;

	if (!config_address(walk, node, &listener->addr, &listener->addr_len))
		return;
	for (size_t i = 0; i < config->listener_count; i++) {
		if (config->listeners[i].address == NULL)
			continue;
		if (config_values_addresses_clash(&listener->addr, &config->listeners[i].addr)) {
			config_walk_error(walk, node, "%s is already used by listen[%zu] (%s)",
					  node->text, i, config->listeners[i].address);
			return;
		}
	}
	listener->address = xstrdup(node->text);
	listener->line = node->line;
	listener->column = node->column;
}

static const struct config_walk_type config_type_listen_address = {
	YAML_TREE_SCALAR, "an address like 127.0.0.1:3128", config_set_listen_address
};

static const struct config_walk_key config_listener_keys[] = {
	{ .name = "address", .type = &config_type_listen_address, .required = true },
	{ .name = "upstream",
	  .type = &config_walk_upstream,
	  .offset = offsetof(struct listener_config, upstream) },
	{ .name = NULL },
};

/* Free the listeners and forget them. */
static void config_free_listeners(struct config *config)
{
	for (size_t i = 0; i < config->listener_count; i++) {
		free(config->listeners[i].address);
		config_values_url_free(config->listeners[i].upstream);
		free(config->listeners[i].upstream);
	}
	free(config->listeners);
	config->listeners = NULL;
	config->listener_count = 0;
}

/* listen: replaces the default listener; an empty list is a mistake, since a
 * proxy that listens nowhere is useless. */
static void config_set_listen(struct config_walk *walk, const struct yaml_tree_node *node,
			      void *field)
{
	struct config *config = field;

	config_free_listeners(config);
	if (node->count == 0) {
		config_walk_error(walk, node, "expected at least one listener");
		return;
	}
	config->listeners = xcalloc(node->count, sizeof(*config->listeners));
	for (size_t i = 0; i < node->count; i++) {
		size_t mark = config_walk_push_index(walk, i);

		config_walk_mapping(walk, node->items[i], config_listener_keys,
				    &config->listeners[i]);
		config->listener_count++;
		config_walk_pop(walk, mark);
	}
}

static const struct config_walk_type config_type_listen = { YAML_TREE_SEQUENCE,
							    "a list of listeners",
							    config_set_listen };

static const struct config_walk_key config_log_keys[] = {
	{ .name = "level",
	  .type = &config_type_log_level,
	  .offset = offsetof(struct config, log_level) },
	{ .name = "format",
	  .type = &config_type_log_format,
	  .offset = offsetof(struct config, log_format) },
	{ .name = NULL },
};

static const struct config_walk_key config_access_keys[] = {
	{ .name = "allow_clients", .type = &config_type_allow_clients },
	{ .name = "allow_hosts", .type = &config_type_allow_hosts },
	{ .name = "admin_remote",
	  .type = &config_walk_bool,
	  .offset = offsetof(struct config, admin_remote) },
	{ .name = NULL },
};

static const struct config_walk_key config_limits_keys[] = {
	{ .name = "max_connections",
	  .type = &config_walk_count_positive,
	  .offset = offsetof(struct limits, max_connections) },
	{ .name = "max_header_bytes",
	  .type = &config_walk_size_positive,
	  .offset = offsetof(struct limits, max_header_bytes) },
	{ .name = "max_uri_bytes",
	  .type = &config_walk_size_positive,
	  .offset = offsetof(struct limits, max_uri_bytes) },
	{ .name = "max_body_bytes",
	  .type = &config_walk_size64,
	  .offset = offsetof(struct limits, max_body_bytes) },
	{ .name = "replay_buffer",
	  .type = &config_walk_size,
	  .offset = offsetof(struct limits, replay_buffer) },
	{ .name = "client_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct limits, client_timeout_ms) },
	{ .name = "retry_response_buffer",
	  .type = &config_walk_size,
	  .offset = offsetof(struct limits, retry_response_buffer) },
	{ .name = "retry_memory",
	  .type = &config_walk_size64,
	  .offset = offsetof(struct limits, retry_memory) },
	{ .name = "connect_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct limits, connect_timeout_ms) },
	{ .name = "try_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct limits, try_timeout_ms) },
	{ .name = "drain_timeout",
	  .type = &config_walk_duration,
	  .offset = offsetof(struct limits, drain_timeout_ms) },
	{ .name = "pool_max_idle",
	  .type = &config_walk_count,
	  .offset = offsetof(struct limits, pool_max_idle) },
	{ .name = "pool_idle_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct limits, pool_idle_timeout_ms) },
	{ .name = "dns_cache",
	  .type = &config_walk_duration,
	  .offset = offsetof(struct limits, dns_cache_ms) },
	{ .name = "tunnel_idle_timeout",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct limits, tunnel_idle_timeout_ms) },
	{ .name = "max_pending_retries",
	  .type = &config_walk_count,
	  .offset = offsetof(struct limits, max_pending_retries) },
	{ .name = "spool_max",
	  .type = &config_walk_size64,
	  .offset = offsetof(struct limits, spool_max) },
	{ .name = "spool_dir",
	  .type = &config_walk_directory,
	  .offset = offsetof(struct limits, spool_dir) },
	{ .name = "spool_total",
	  .type = &config_walk_size64,
	  .offset = offsetof(struct limits, spool_total) },
	{ .name = "max_upstream_connections",
	  .type = &config_walk_count_positive,
	  .offset = offsetof(struct limits, max_upstream_connections) },
	{ .name = NULL },
};

/* limits.spool_total by default: the disk all spool files may take at once. */
#define CONFIG_SPOOL_TOTAL_DEFAULT (1024ull * 1024 * 1024)

/* A cap over many things (key, in *total) must hold the largest one of
 * them on its own (needed, which the limits named in what set): 0 (no
 * cap) or at least needed. Left at its default, it is raised to needed;
 * given, it is an error naming the key. */
static void config_check_total(struct config_walk *walk, const struct yaml_tree_node *node,
			       const char *key, uint64_t *total, uint64_t needed, const char *what)
{
	const struct yaml_tree_entry *blamed = yaml_tree_find(node, key);
	size_t mark;

	if (*total == 0 || needed <= *total)
		return;
	if (blamed == NULL) {
		*total = needed;
		return;
	}
	mark = config_walk_push(walk, key);
	config_walk_error(walk, blamed->value, "must be 0 (no cap) or at least %s (%llu bytes)",
			  what, (unsigned long long)needed);
	config_walk_pop(walk, mark);
}

/* limits.retry_memory by default: the memory all request bodies and
 * responses kept for retries may take at once. */
#define CONFIG_RETRY_MEMORY_DEFAULT (256ull * 1024 * 1024)

/* limits: the keys, then what the spool's keys need of each other: a
 * spool_max above replay_buffer (a smaller body is kept in memory), and a
 * spool_dir the proxy can make its files in, tried now rather than on the
 * first large body. */
static void config_set_limits(struct config_walk *walk, const struct yaml_tree_node *node,
			      void *field)
{
	struct limits *limits = field;
	const struct yaml_tree_entry *blamed;
	size_t mark;
	char *quoted;
	int err;

	config_walk_mapping(walk, node, config_limits_keys, limits);
	if (!config_walk_refused(walk, node, "replay_buffer") &&
	    !config_walk_refused(walk, node, "retry_response_buffer") &&
	    !config_walk_refused(walk, node, "retry_memory"))
		/* a body of replay_buffer and a response of
		 * retry_response_buffer must each fit on its own */
		config_check_total(walk, node, "retry_memory", &limits->retry_memory,
				   limits->replay_buffer > limits->retry_response_buffer
					   ? limits->replay_buffer
					   : limits->retry_response_buffer,
				   "replay_buffer and retry_response_buffer");
	if (limits->spool_max == 0 || config_walk_refused(walk, node, "replay_buffer") ||
	    config_walk_refused(walk, node, "spool_max"))
		return;
	if (limits->spool_max <= limits->replay_buffer) {
		blamed = yaml_tree_find(node, "spool_max");
		mark = config_walk_push(walk, "spool_max");
		config_walk_error(walk, blamed != NULL ? blamed->value : node,
				  "must be 0 (off) or more than replay_buffer (%zu bytes)",
				  limits->replay_buffer);
		config_walk_pop(walk, mark);
		return;
	}
	/* a refused key has left its default: compared, it would say nothing;
	 * another key's error changes neither check */
	if (!config_walk_refused(walk, node, "spool_total"))
		/* a body of spool_max must fit in the spool on its own */
		config_check_total(walk, node, "spool_total", &limits->spool_total,
				   limits->spool_max, "spool_max");
	/* a spool_dir that was refused has left the default in its place */
	if (config_walk_refused(walk, node, "spool_dir") || spool_check_dir(limits->spool_dir) == 0)
		return;
	/* the default directory is blamed on spool_max, which turned it on */
	blamed = yaml_tree_find(node, "spool_dir");
	mark = config_walk_push(walk, blamed != NULL ? "spool_dir" : "spool_max");
	if (blamed == NULL)
		blamed = yaml_tree_find(node, "spool_max");
	err = errno;
	quoted = config_walk_quote_path(limits->spool_dir);
	config_walk_error(walk, blamed != NULL ? blamed->value : node,
			  "cannot make a spool file in %s: %s", quoted, strerror(err));
	free(quoted);
	config_walk_pop(walk, mark);
}

static const struct config_walk_type config_type_limits = { YAML_TREE_MAPPING, "a mapping",
							    config_set_limits };

static const struct config_walk_key config_health_keys[] = {
	{ .name = "down_after",
	  .type = &config_walk_count,
	  .offset = offsetof(struct health_policy, down_after) },
	{ .name = "probe_interval",
	  .type = &config_walk_timeout,
	  .offset = offsetof(struct health_policy, probe_interval_ms) },
	{ .name = "hold",
	  .type = &config_walk_bool,
	  .offset = offsetof(struct health_policy, hold) },
	{ .name = NULL },
};

/* intercept.hosts: the CONNECT hosts whose TLS the proxy terminates. */
static void config_set_intercept_hosts(struct config_walk *walk, const struct yaml_tree_node *node,
				       void *field)
{
	struct intercept_config *intercept = field;

	config_host_patterns(walk, node, "leave intercept: out to intercept nothing",
			     &intercept->hosts, &intercept->host_count);
}

static const struct config_walk_type config_type_intercept_hosts = {
	YAML_TREE_SEQUENCE, "a list of host patterns like [\"api.example.com\"]",
	config_set_intercept_hosts
};

static const struct config_walk_key config_intercept_keys[] = {
	{ .name = "hosts", .type = &config_type_intercept_hosts, .required = true },
	{ .name = "ca_cert",
	  .type = &config_walk_file_required,
	  .offset = offsetof(struct intercept_config, ca_cert),
	  .required = true },
	{ .name = "ca_key",
	  .type = &config_walk_file_required,
	  .offset = offsetof(struct intercept_config, ca_key),
	  .required = true },
	{ .name = "server_first_after",
	  .type = &config_walk_duration,
	  .offset = offsetof(struct intercept_config, server_first_after_ms) },
	{ .name = NULL },
};

/* intercept: the keys, then the CA itself, loaded now so that --check and a
 * reload catch a bad or exposed key; its failure points at the file to
 * blame. A section left empty (all commented out) intercepts nothing. */
static void config_set_intercept(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	struct intercept_config *intercept = field;
	enum ca_load_failure failure;
	const struct yaml_tree_entry *blamed;
	const char *key;
	char why[512];
	size_t mark;

	if (yaml_tree_is_null(node))
		return;
	intercept->server_first_after_ms = INTERCEPT_SERVER_FIRST_AFTER_MS;
	config_walk_mapping(walk, node, config_intercept_keys, intercept);
	if (intercept->ca_cert == NULL || intercept->ca_key == NULL)
		return;
	intercept->ca = ca_load(intercept->ca_cert, intercept->ca_key, &failure, why, sizeof(why));
	if (intercept->ca != NULL)
		return;
	key = failure == CA_LOAD_KEY ? "ca_key" : "ca_cert";
	blamed = yaml_tree_find(node, key);
	mark = config_walk_push(walk, key);
	config_walk_error(walk, blamed != NULL ? blamed->value : node, "%s", why);
	config_walk_pop(walk, mark);
}

static const struct config_walk_type config_type_intercept = { YAML_TREE_MAPPING, "a mapping",
							       config_set_intercept };

/* The order is the reading order: each section may use those before it. */
static const struct config_walk_key config_top_keys[] = {
	{ .name = "log", .section = config_log_keys },
	{ .name = "access", .section = config_access_keys },
	{ .name = "tls", .offset = offsetof(struct config, tls), .section = config_route_tls_keys },
	{ .name = "limits",
	  .offset = offsetof(struct config, limits),
	  .type = &config_type_limits },
	{ .name = "health",
	  .offset = offsetof(struct config, health),
	  .section = config_health_keys },
	{ .name = "defaults",
	  .offset = offsetof(struct config, default_route),
	  .section = config_route_defaults_keys },
	{ .name = "listen", .type = &config_type_listen },
	{ .name = "admin", .type = &config_type_admin },
	{ .name = "routes", .type = &config_route_list },
	{ .name = "intercept",
	  .type = &config_type_intercept,
	  .offset = offsetof(struct config, intercept) },
	{ .name = "fleet", .type = &config_fleet_type, .offset = offsetof(struct config, fleet) },
	{ .name = NULL },
};

/* Everything a config file may leave out (SPEC "Configuration"). */
static void config_set_defaults(struct config *config)
{
	static const char *const clients[] = { "127.0.0.0/8", "::1/128" };
	struct limits *limits = &config->limits;
	const char *why;

	config->listeners = xcalloc(1, sizeof(*config->listeners));
	config->listeners[0].address = xstrdup("127.0.0.1:3128");
	config_values_address(config->listeners[0].address, &config->listeners[0].addr,
			      &config->listeners[0].addr_len, &why);
	config->listener_count = 1;
	config->log_level = LOG_LEVEL_INFO;
	config->log_format = LOG_FORMAT_TEXT;
	config->allow_clients = xcalloc(2, sizeof(*config->allow_clients));
	for (size_t i = 0; i < 2; i++)
		config_values_cidr(clients[i], &config->allow_clients[i], &why);
	config->allow_client_count = 2;
	config->allow_hosts = xcalloc(1, sizeof(*config->allow_hosts));
	config->allow_hosts[0] = xstrdup("*");
	config->allow_host_count = 1;
	config->tls.verify = true;

	limits->max_connections = 10000;
	limits->max_header_bytes = 64 * 1024;
	limits->max_uri_bytes = 8 * 1024;
	limits->max_body_bytes = 0;
	limits->replay_buffer = 8 * 1024 * 1024;
	limits->retry_memory = CONFIG_RETRY_MEMORY_DEFAULT;
	limits->client_timeout_ms = 60 * 1000;
	limits->retry_response_buffer = 1024 * 1024;
	limits->connect_timeout_ms = 5 * 1000;
	limits->try_timeout_ms = 30 * 1000;
	limits->drain_timeout_ms = 30 * 1000;
	limits->pool_max_idle = 32;
	limits->pool_idle_timeout_ms = 60 * 1000;
	limits->tunnel_idle_timeout_ms = 300 * 1000;
	limits->dns_cache_ms = 5 * 1000;
	limits->max_pending_retries = 10000;
	limits->spool_max = 0;
	limits->spool_dir = xstrdup("/var/tmp");
	limits->spool_total = CONFIG_SPOOL_TOTAL_DEFAULT;
	limits->max_upstream_connections = 256;

	config->health.down_after = 3;
	config->health.probe_interval_ms = 500;
	config->health.hold = true;

	config_route_set_defaults(&config->default_route);
}

/* Free a config once nobody holds it. */
static void config_free(struct config *config)
{
	config_free_listeners(config);
	free(config->admin_address);
	free(config->limits.spool_dir);
	free(config->allow_clients);
	config_free_strings(config->allow_hosts, config->allow_host_count);
	free(config->tls.ca_file);
	config_route_free(&config->default_route);
	for (size_t i = 0; i < config->route_count; i++)
		config_route_free(&config->routes[i]);
	free(config->routes);
	config_free_strings(config->intercept.hosts, config->intercept.host_count);
	free(config->intercept.ca_cert);
	free(config->intercept.ca_key);
	ca_release(config->intercept.ca);
	config_fleet_free(&config->fleet);
	free(config->source);
	free(config);
}

/* Keep a config alive across a reload, for an exchange that started under it. */
struct config *config_hold(struct config *config)
{
	config->refs++;
	return config;
}

/* Tell warn the opt-out of route (NULL: the top-level tls.verify) in the
 * words a start logs and --check prints. */
static void config_tls_opt_out_warn(const char *route, void (*warn)(const char *text, void *arg),
				    void *arg)
{
	static const char all[] = "tls.verify is false: upstream certificates are not checked "
				  "for any route without its own tls section";
	static const char one[] = "route %s: tls.verify is false: its upstream certificates are "
				  "not checked";
	size_t size;
	char *text;

	if (route == NULL) {
		warn(all, arg);
		return;
	}
	size = sizeof(one) + strlen(route);
	text = xmalloc(size);
	snprintf(text, size, one, route);
	warn(text, arg);
	free(text);
}

void config_tls_opt_outs(const struct config *config, void (*warn)(const char *text, void *arg),
			 void *arg)
{
	if (!config->tls.verify)
		config_tls_opt_out_warn(NULL, warn, arg);
	if (!config->default_route.tls.verify)
		config_tls_opt_out_warn(config->default_route.name, warn, arg);
	for (size_t i = 0; i < config->route_count; i++)
		if (!config->routes[i].tls.verify)
			config_tls_opt_out_warn(config->routes[i].name, warn, arg);
}

/* Let go of a config; the last holder frees it. */
void config_release(struct config *config)
{
	if (config == NULL || --config->refs > 0)
		return;
	if (config->on_free != NULL)
		config->on_free(config, config->on_free_arg);
	config_free(config);
}

void config_on_free(struct config *config, void (*freed)(struct config *, void *arg), void *arg)
{
	config->on_free = freed;
	config->on_free_arg = arg;
}

size_t config_route_total(const struct config *config)
{
	return config->route_count + 1;
}

struct route *config_route_at(struct config *config, size_t i)
{
	return i < config->route_count ? &config->routes[i] : &config->default_route;
}

/* Walk a parsed tree into a config, or print the errors and return NULL;
 * the tree reader's rule errors (taken over) fail it too, reported among
 * the walk's in the file's order. */
static struct config *config_build(const struct yaml_tree_node *root, const char *source,
				   const char *base_dir, struct yaml_tree_rule_errors *rules,
				   FILE *errors)
{
	struct config *config = xcalloc(1, sizeof(*config));
	struct config_walk *walk = config_walk_new(source, base_dir, config);

	for (size_t i = 0; i < rules->count; i++)
		config_walk_add_error(walk, rules->errors[i].line, rules->errors[i].column,
				      rules->errors[i].text);
	free(rules->errors);
	*rules = (struct yaml_tree_rule_errors){ NULL, 0 };

	config->refs = 1;
	config->source = xstrdup(source);
	config_set_defaults(config);
	config_walk_mapping(walk, root, config_top_keys, config);
	config->default_route.name = xstrdup("default");
	if (config->tls.ca_file != NULL)
		config->default_route.tls.ca_file = xstrdup(config->tls.ca_file);
	config->default_route.tls.verify = config->tls.verify;
	config_route_resolve(config);
	if (config_walk_finish(walk, errors) > 0) {
		config_free(config);
		return NULL;
	}
	return config;
}

/* Load a config held in memory (the embedded default, tests). */
struct config *config_load_text(const char *text, size_t len, const char *name, FILE *errors)
{
	struct yaml_tree_rule_errors rules;
	struct yaml_tree_node *root = yaml_tree_parse_text(text, len, name, errors, &rules);
	struct config *config;

	if (root == NULL)
		return NULL;
	config = config_build(root, name, NULL, &rules, errors);
	yaml_tree_free(root);
	return config;
}

/* Load a config file; relative paths in it are relative to its directory.
 * With regular_only, a FIFO or a device is refused rather than waited on. */
static struct config *config_load_path(const char *path, bool regular_only, FILE *errors)
{
	struct yaml_tree_rule_errors rules;
	struct yaml_tree_node *root = yaml_tree_parse_file(path, regular_only, errors, &rules);
	const char *slash = strrchr(path, '/');
	struct config *config;
	char *dir;

	if (root == NULL)
		return NULL;
	/* Relative ca_file paths are relative to the directory of the file. */
	if (slash == NULL)
		dir = NULL;
	else if (slash == path)
		dir = xstrdup("");
	else
		dir = xstrndup(path, (size_t)(slash - path));
	config = config_build(root, path, dir, &rules, errors);
	free(dir);
	yaml_tree_free(root);
	return config;
}

struct config *config_load_file(const char *path, FILE *errors)
{
	return config_load_path(path, false, errors);
}

/* Files config_default_path tries, in order. */
static const char *const config_default_paths[] = {
	"./conf/retryproxy.yaml",
	"/etc/retryproxy/retryproxy.yaml",
};

/* Is there a config at path, or one missing behind a symlink? A symlink
 * counts even when its target is missing (a volume not mounted yet), and so
 * does a file under a directory that is such a symlink (./conf linked to a
 * shared directory not there yet): loading it then fails naming it, where
 * the embedded default would run a forward proxy the operator never asked
 * for; so does one in a directory the proxy may not search. A plain
 * directory without the file, or none, is no config. */
static bool config_default_present(const char *path)
{
	char dir[64];
	struct stat st;
	char *slash;

	/* one the proxy may not look for (EACCES on ./conf) may be there: the
	 * load then says why it cannot be read */
	if (lstat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR))
		return true;
	if (strlen(path) >= sizeof(dir))
		return false;
	strcpy(dir, path);
	/* the deepest directory above it that is there decides */
	while ((slash = strrchr(dir, '/')) != NULL && slash != dir) {
		*slash = '\0';
		if (lstat(dir, &st) == 0)
			return S_ISLNK(st.st_mode) && stat(dir, &st) < 0;
	}
	return false;
}

/* The first default config file that exists, or NULL for the embedded one. */
const char *config_default_path(void)
{
	for (size_t i = 0; i < sizeof(config_default_paths) / sizeof(config_default_paths[0]); i++)
		if (config_default_present(config_default_paths[i]))
			return config_default_paths[i];
	return NULL;
}

/* Load path or the embedded default, then hand report the errors line by
 * line: the command line prints them, a reload logs them. */
struct config *config_load(const char *path, enum config_source source, config_report_cb report,
			   void *arg)
{
	const char *name = path != NULL ? path : "<embedded>";
	char *errors = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&errors, &len);
	struct config *config;
	char *line, *next;

	if (out == NULL) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s: out of memory", name);
		report(msg, arg);
		return NULL;
	}
	if (path != NULL)
		config = config_load_path(path, source == CONFIG_SOURCE_REGULAR, out);
	else
		config = config_load_text(config_embedded_default, strlen(config_embedded_default),
					  name, out);
	fclose(out);
	/* Split at every newline, as printing the text whole would: a message
	 * quoting a value that holds a newline comes out as two lines. */
	for (line = errors; line != NULL && *line != '\0'; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		report(line, arg);
	}
	free(errors);
	return config;
}
