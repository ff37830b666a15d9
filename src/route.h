#ifndef RETRYPROXY_ROUTE_H
#define RETRYPROXY_ROUTE_H

/* Match a request to a route: the first route whose host, path prefix and
 * methods all match wins; no match is the default route. */

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* host is without the port; compared case-insensitively. */
const struct route *route_match(const struct config *config, const char *host, size_t host_len,
				const char *path, size_t path_len, const char *method,
				size_t method_len);

/* "*" matches any host, "*.example.com" any subdomain of example.com (not
 * example.com itself), anything else the host exactly, ignoring case. */
bool route_host_pattern_matches(const char *pattern, const char *host, size_t host_len);

#endif
