#ifndef RETRYPROXY_ADMIN_H
#define RETRYPROXY_ADMIN_H

/*
 * The admin listener (SPEC "Admin endpoint"), served by libevent's evhttp:
 * GET / (the status page, status_page.c), /healthz, /metrics (Prometheus
 * text), /config (the effective config as YAML) and /upstreams. It is separate from the proxy listeners and stays up while the
 * proxy drains, so a health check can watch the drain. Only loopback
 * addresses unless access.admin_remote; config loading enforces that.
 */

#include <stdbool.h>
#include <sys/socket.h>

struct config;
struct proxy;
struct admin;

/* Make the admin listener what config says: start it, move it to a new
 * address (binding the new one before closing the old), or stop it when the
 * admin key is gone. Returns 0, or -1 after logging why the address cannot
 * be bound, with the admin listener as it was. */
int admin_apply(struct proxy *proxy, const struct config *config);

/* Stop the admin listener and its open connections. */
void admin_close(struct proxy *proxy);

/* Is addr where the admin listener is (an IPv4-mapped IPv6 address
 * included, which reaches it too)? The proxy connects to it for no
 * request: forwarded or tunnelled there, a client would read what the
 * admin's loopback-only address keeps from it. 1, 0, or -1 with errno when
 * it cannot be told now (config_values_connect_reaches()). */
int admin_is_address(const struct admin *admin, const struct sockaddr *addr, socklen_t len);

#endif
