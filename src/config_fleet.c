#include "config_fleet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "config_values.h"
#include "xmalloc.h"

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
		/* hiredis copies the path into sun_path, cutting what does not
		 * fit with its NUL: it would connect to another path */
		if (strlen(text + 5) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
			*why = "a unix socket path may have at most 107 bytes";
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
		/* a trailing dot makes the name absolute (asked without the
		 * search list), as for an upstream */
		if (!config_values_is_host_name(host, host_len > 1 && host[host_len - 1] == '.'
							      ? host_len - 1
							      : host_len)) {
			*why = "expected a host name or an address before the port";
			return -1;
		}
		if (!config_values_host_resolvable(host, host_len)) {
			*why = CONFIG_VALUES_BAD_IPV4;
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
		config_walk_bad_duration(walk, node, "a duration like 100ms");
		return;
	}
	if (ms < CONFIG_FLEET_SYNC_MIN_MS || ms > CONFIG_FLEET_SYNC_MAX_MS) {
		char quoted[128];

		config_walk_error(walk, node, "expected a duration from 10ms to 10s, got %s",
				  config_walk_quote(node, quoted, sizeof(quoted)));
		return;
	}
	*(uint64_t *)field = ms;
}

static const struct config_walk_type config_fleet_sync_interval = {
	YAML_TREE_SCALAR, "a duration like 100ms", config_fleet_set_sync_interval
};

/* fleet.username: an ACL user name goes into AUTH as one argument; kept to
 * visible characters so that log lines and /config show it as it is. */
static void config_fleet_set_username(struct config_walk *walk, const struct yaml_tree_node *node,
				      void *field)
{
	size_t i;

	for (i = 0; i < node->text_len; i++)
		if ((unsigned char)node->text[i] <= ' ' || (unsigned char)node->text[i] >= 0x7f)
			break;
	if (node->text_len == 0 || node->text_len > 256 || i < node->text_len) {
		config_walk_bad_value(walk, node, "a user name of 1 to 256 visible characters");
		return;
	}
	*(char **)field = xstrdup(node->text);
}

static const struct config_walk_type config_fleet_username = { YAML_TREE_SCALAR,
							       "a user name like retryproxy",
							       config_fleet_set_username };

/* Up to size bytes of the file at path: the count, or -1 with errno set.
 * read(2), not stdio: no buffer of the library's keeps a copy of the secret,
 * and a read error is told as one. */
static ssize_t config_fleet_read_secret(const char *path, char *buf, size_t size)
{
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while (n < size) {
		ssize_t got = read(fd, buf + n, size - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int error = errno;

			close(fd);
			errno = error;
			return -1;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	return (ssize_t)n;
}

/* fleet.password_file: a file whose first line is the password, read now,
 * so that a missing or empty secret fails the load (or the reload) rather
 * than every connect. The password itself never goes into the config's
 * text, /config or a log line. */
static void config_fleet_set_password_file(struct config_walk *walk,
					   const struct yaml_tree_node *node, void *field)
{
	struct fleet_config *fleet =
		(struct fleet_config *)((char *)field -
					offsetof(struct fleet_config, password_file));
	char buf[CONFIG_FLEET_PASSWORD_MAX + 2];
	const char *newline;
	size_t n, len;
	ssize_t got;

	config_walk_file_required.handler(walk, node, field);
	if (fleet->password_file == NULL)
		return;
	got = config_fleet_read_secret(fleet->password_file, buf, sizeof(buf) - 1);
	if (got < 0) {
		int err = errno;
		char *quoted = config_walk_quote_path(fleet->password_file);

		config_walk_error(walk, node, "cannot read %s: %s", quoted, strerror(err));
		free(quoted);
		explicit_bzero(buf, sizeof(buf));
		return;
	}
	n = (size_t)got;
	/* the first line, without its LF or CRLF; a NUL in it is refused, not
	 * taken for its end */
	newline = memchr(buf, '\n', n);
	len = newline != NULL ? (size_t)(newline - buf) : n;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	if (len == 0 || len > CONFIG_FLEET_PASSWORD_MAX || memchr(buf, '\0', len) != NULL) {
		char *quoted = config_walk_quote_path(fleet->password_file);

		config_walk_error(walk, node,
				  "%s must hold a password of 1 to %d bytes on its first line",
				  quoted, CONFIG_FLEET_PASSWORD_MAX);
		free(quoted);
	} else {
		fleet->password = xstrdup(buf);
	}
	explicit_bzero(buf, sizeof(buf));
}

static const struct config_walk_type config_fleet_password_file = {
	YAML_TREE_SCALAR, "a file path", config_fleet_set_password_file
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
	{ .name = "username",
	  .type = &config_fleet_username,
	  .offset = offsetof(struct fleet_config, username) },
	{ .name = "password_file",
	  .type = &config_fleet_password_file,
	  .offset = offsetof(struct fleet_config, password_file) },
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
	/* a password_file that failed has said so already */
	if (fleet->username != NULL && yaml_tree_find(node, "password_file") == NULL)
		config_walk_error(walk, node, "username needs password_file: AUTH sends both");
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
	free(fleet->username);
	free(fleet->password_file);
	if (fleet->password != NULL) {
		explicit_bzero(fleet->password, strlen(fleet->password));
		free(fleet->password);
	}
	memset(fleet, 0, sizeof(*fleet));
}
