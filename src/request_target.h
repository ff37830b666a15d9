#ifndef RETRYPROXY_REQUEST_TARGET_H
#define RETRYPROXY_REQUEST_TARGET_H

/* Split a request-target (RFC 9112 section 3.2) or a Host value into the
 * parts a proxy routes on. Pure; results point into the input.
 *
 * Unused: http1_parse_request_head() now splits the target into struct
 * http1_target and http1_request_framing() gives Host's host, under the same
 * rules. Do not call it; it goes once meson.build and tests/unit/meson.build
 * stop building it with its test. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct request_target {
	bool tls;              /* absolute-form with https */
	const char *host;      /* without brackets around an IPv6 literal */
	size_t host_len;
	uint16_t port;         /* explicit, or the scheme's default */
	const char *authority; /* host[:port] as sent */
	size_t authority_len;
	const char *path;      /* path and query; empty in absolute-form means "/" */
	size_t path_len;
};

/* "http://host[:port][/path][?query]" or https. No userinfo, no fragment. */
int request_target_parse_absolute(const char *target, size_t len, struct request_target *out);

/* CONNECT's "host:port"; the port is required. */
int request_target_parse_authority(const char *target, size_t len, struct request_target *out);

/* A Host field value "host[:port]"; *host_len excludes the port. */
int request_target_host_of(const char *value, size_t len, const char **host, size_t *host_len);

#endif
