#include "config_fleet.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "config_values.h"
#include "xmalloc.h"

/* A DNS name: dot-separated labels of letters, digits and inner hyphens. */
static bool config_fleet_is_host_name(const char *host, size_t len)
{
	size_t label = 0;

	if (len == 0 || len > 253)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = host[i];

		if (c == '.') {
			if (label == 0 || host[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      (c == '-' && label > 0)))
			return false;
		if (++label > 63)
			return false;
	}
	return host[len - 1] != '-';
}

int config_fleet_redis_address(const char *text, struct fleet_config *fleet, const char **why)
{
	const char *colon, *host = text;
	size_t host_len;
	uint64_t port;
	char buf[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;

	if (strncmp(text, "unix:", 5) == 0) {
		if (text[5] != '/') {
			*why = "a unix socket path must be absolute, like "
			       "unix:/run/redis/redis.sock";
			return -1;
		}
		fleet->redis_socket = xstrdup(text + 5);
		return 0;
	}
	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (close == NULL || close[1] != ':') {
			*why = "expected [v6 address]:port";
			return -1;
		}
		host = text + 1;
		host_len = (size_t)(close - host);
		colon = close + 1;
		if (host_len >= sizeof(buf)) {
			*why = "invalid IPv6 address";
			return -1;
		}
		memcpy(buf, host, host_len);
		buf[host_len] = '\0';
		if (inet_pton(AF_INET6, buf, &a6) != 1) {
			*why = "invalid IPv6 address";
			return -1;
		}
	} else {
		colon = strchr(text, ':');
		if (colon == NULL) {
			*why = "expected host:port or unix:/path/to/socket";
			return -1;
		}
		if (strchr(colon + 1, ':') != NULL) {
			*why = "an IPv6 address goes in brackets, like [::1]:6379";
			return -1;
		}
		host_len = (size_t)(colon - text);
		if (host_len == 0) {
			*why = "the host is missing";
			return -1;
		}
		if (!config_fleet_is_host_name(host, host_len)) {
			*why = "expected a host name or an address before the port";
			return -1;
		}
	}
	if (config_values_unsigned(colon + 1, 65535, &port) < 0 || port == 0) {
		*why = "the port must be a number from 1 to 65535";
		return -1;
	}
	fleet->redis_host = xstrndup(host, host_len);
	fleet->redis_port = (uint16_t)port;
	return 0;
}

/* fleet.redis: where the shared Redis listens. */
static void config_fleet_set_redis(struct config_walk *walk, const struct yaml_tree_node *node,
				   void *field)
{
	struct fleet_config *fleet = field;
	struct fleet_config parsed = { 0 };
	const char *why;
	char quoted[128];

	if (config_fleet_redis_address(node->text, &parsed, &why) < 0) {
		config_walk_error(walk, node, "invalid Redis address %s: %s",
				  config_walk_quote(node, quoted, sizeof(quoted)), why);
		return;
	}
	fleet->redis = xstrdup(node->text);
	fleet->redis_host = parsed.redis_host;
	fleet->redis_port = parsed.redis_port;
	fleet->redis_socket = parsed.redis_socket;
}

static const struct config_walk_type config_fleet_redis = {
	YAML_TREE_SCALAR, "an address like 127.0.0.1:6379 or unix:/run/redis/redis.sock",
	config_fleet_set_redis
};

/* fleet.name: part of the Redis keys and of log lines, so kept to a plain
 * word. */
static void config_fleet_set_name(struct config_walk *walk, const struct yaml_tree_node *node,
				  void *field)
{
	char **name = field;
	size_t i;

	for (i = 0; i < node->text_len; i++) {
		char c = node->text[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			break;
	}
	if (node->text_len == 0 || node->text_len > 100 || i < node->text_len) {
		config_walk_bad_value(walk, node,
				      "a name of 1 to 100 letters, digits, '.', '_' or '-'");
		return;
	}
	*name = xstrdup(node->text);
}

static const struct config_walk_type config_fleet_name = { YAML_TREE_SCALAR, "a name like checkout",
							   config_fleet_set_name };

/* fleet.sync_interval: a duration within the bounds above. */
static void config_fleet_set_sync_interval(struct config_walk *walk,
					   const struct yaml_tree_node *node, void *field)
{
	uint64_t ms;

	if (config_values_duration(node->text, &ms) < 0) {
		config_walk_bad_value(walk, node, "a duration like 100ms");
		return;
	}
	if (ms < CONFIG_FLEET_SYNC_MIN_MS || ms > CONFIG_FLEET_SYNC_MAX_MS) {
		config_walk_error(walk, node, "expected a duration from 10ms to 10s, got \"%s\"",
				  node->text);
		return;
	}
	*(uint64_t *)field = ms;
}

static const struct config_walk_type config_fleet_sync_interval = {
	YAML_TREE_SCALAR, "a duration like 100ms", config_fleet_set_sync_interval
};

static const struct config_walk_key config_fleet_keys[] = {
	{ .name = "redis", .type = &config_fleet_redis, .required = true },
	{ .name = "name",
	  .type = &config_fleet_name,
	  .offset = offsetof(struct fleet_config, name),
	  .required = true },
	{ .name = "sync_interval",
	  .type = &config_fleet_sync_interval,
	  .offset = offsetof(struct fleet_config, sync_interval_ms) },
	{ .name = NULL },
};

/* fleet: the keys; a section left empty (all commented out) is no fleet,
 * and so is one with errors, which fail the load anyway. */
static void config_fleet_set(struct config_walk *walk, const struct yaml_tree_node *node,
			     void *field)
{
	struct fleet_config *fleet = field;

	if (yaml_tree_is_null(node))
		return;
	fleet->sync_interval_ms = CONFIG_FLEET_SYNC_DEFAULT_MS;
	config_walk_mapping(walk, node, config_fleet_keys, fleet);
	if (fleet->redis == NULL || fleet->name == NULL)
		config_fleet_free(fleet);
}

const struct config_walk_type config_fleet_type = { YAML_TREE_MAPPING, "a mapping",
						    config_fleet_set };

void config_fleet_free(struct fleet_config *fleet)
{
	free(fleet->redis);
	free(fleet->redis_host);
	free(fleet->redis_socket);
	free(fleet->name);
	memset(fleet, 0, sizeof(*fleet));
}
