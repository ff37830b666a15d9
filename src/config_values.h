#ifndef RETRYPROXY_CONFIG_VALUES_H
#define RETRYPROXY_CONFIG_VALUES_H

/*
 * The scalar values of the configuration, parsed from text alone: no tree, no
 * key, no I/O. config.c puts a key path and a position around the reasons
 * these give.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

/* Parse "250ms", "1.5s", "5m", "1h" into milliseconds; -1 when invalid. */
int config_values_duration(const char *text, uint64_t *ms);

/* Parse "1024", "64KiB", "8MiB", "1GiB" into bytes; -1 when invalid. */
int config_values_size(const char *text, uint64_t *bytes);

/* Parse "http(s)://host[:port]" with no path (a lone "/" is allowed); on
 * error *why says what is wrong with it. */
int config_values_url(const char *text, struct upstream_url *url, const char **why);

/* Free what config_values_url allocated, not the struct itself. */
void config_values_url_free(struct upstream_url *url);

/* Parse "host:port", "[v6]:port" or "localhost:port" with numeric hosts only. */
int config_values_address(const char *text, struct sockaddr_storage *addr, socklen_t *len,
			  const char **why);

/* Parse "a.b.c.d/n", "v6/n" or a bare address; host bits are cleared. */
int config_values_cidr(const char *text, struct cidr *cidr, const char **why);

/* A DNS host name: dot-separated labels of 1 to 63 letters, digits, '-'
 * and '_' (container and service names use it), none starting or ending
 * with '-'; 253 bytes at most, no trailing dot. */
bool config_values_is_host_name(const char *s, size_t len);

/* Why config_values_host_resolvable() refused a host. */
#define CONFIG_VALUES_BAD_IPV4                                                           \
	"invalid IPv4 address: write four numbers from 0 to 255 without leading zeros, " \
	"like 10.0.0.1 (a name's last label is never all digits)"

/* Whether a host of name syntax (host_len bytes, maybe with a trailing dot)
 * can be reached: a name whose last label is not all digits, or an IPv4
 * address written exactly. No top-level domain is all digits, so the
 * resolver would only be asked for 127.1, 10.0.0.256 or 127.0.0.1., and
 * fail every time. */
bool config_values_host_resolvable(const char *host, size_t host_len);

/* Check a host pattern ("*", "*.example.com", a name or an address) and
 * return it lower case, without brackets or a trailing dot. */
int config_values_host_pattern(const char *text, char **pattern, const char **why);

/* An HTTP token (RFC 9110 section 5.6.2), as methods and field names are. */
bool config_values_is_token(const char *text);

/* A decimal integer from 0 to max. */
int config_values_unsigned(const char *text, uint64_t max, uint64_t *value);

/* A non-negative decimal number such as 2 or 0.25. */
int config_values_number(const char *text, double *value);

/* true or false (also True, TRUE, False, FALSE). */
int config_values_bool(const char *text, bool *value);

/* Whether an address is a loopback one: 127.0.0.0/8, ::1 or ::ffff:127.x. */
bool config_values_is_loopback(const struct sockaddr_storage *addr);

/* Whether an address is the unspecified one, 0.0.0.0 or ::: bound, every
 * address of the host; connected to, its loopback. */
bool config_values_is_wildcard(const struct sockaddr_storage *addr);

/* An IPv4 or IPv6 address's port, in network order. */
uint16_t config_values_addr_port(const struct sockaddr_storage *addr);

/* Whether two socket addresses name the same address and port. */
bool config_values_same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* addr (len bytes) into out, an IPv4-mapped [::ffff:a.b.c.d] as the IPv4
 * address it is on the wire (a dual-stack socket bound to it takes the
 * IPv4 connects, and a connect to it goes out over IPv4); false when it
 * does not fit. */
bool config_values_unmapped(const struct sockaddr *addr, socklen_t len,
			    struct sockaddr_storage *out);

/* Whether a connect to addr (len bytes) reaches a socket bound to bound:
 * the same address and port, an IPv4-mapped IPv6 address (on either side)
 * as its IPv4 one,
 * 0.0.0.0 and :: as this host's loopback, and when bound is a wildcard
 * every loopback address and every address of this host's interfaces
 * (no traffic) with its port, of the families it takes: both for [::],
 * IPv4 alone for 0.0.0.0. 1 when it does, 0 when it does not, -1 with errno
 * when the host's addresses could not be looked at (no descriptor for the
 * look: EMFILE, ENFILE, ENOBUFS, ENOMEM), which tells neither. */
int config_values_connect_reaches(const struct sockaddr_storage *bound, const struct sockaddr *addr,
				  socklen_t len);

/* Whether two listening sockets could not both be bound: the same port and
 * the same address, or a wildcard of one covering the other (0.0.0.0 takes
 * every IPv4 address; [::] every IPv6 one and, dual-stack as the proxy
 * binds it, every IPv4 one too). */
bool config_values_addresses_clash(const struct sockaddr_storage *a,
				   const struct sockaddr_storage *b);

/* Write a duration the way a config would: "32s", "250ms", "5m". */
void config_values_format_ms(uint64_t ms, char *buf, size_t size);

#endif
