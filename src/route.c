#include "route.h"

#include <string.h>
#include <strings.h>

/* Drop what does not change which host is meant: the brackets around an
 * IPv6 literal (patterns are stored without them) and the trailing dot of a
 * fully qualified name. */
static void route_host_normalize(const char **host, size_t *len)
{
	if (*len >= 2 && (*host)[0] == '[' && (*host)[*len - 1] == ']') {
		(*host)++;
		*len -= 2;
	} else if (*len >= 2 && (*host)[*len - 1] == '.') {
		(*len)--;
	}
}

/* Match a host against "*", "*.suffix" or an exact name, ignoring case. */
bool route_host_pattern_matches(const char *pattern, const char *host, size_t host_len)
{
	size_t pattern_len = strlen(pattern);

	if (strcmp(pattern, "*") == 0)
		return true;
	if (host == NULL)
		return false;
	route_host_normalize(&host, &host_len);
	if (pattern_len >= 2 && pattern[0] == '*' && pattern[1] == '.') {
		/* ".example.com" at the end, with at least one byte of label
		 * before it: example.com itself is not a subdomain. */
		size_t suffix_len = pattern_len - 1;

		return host_len > suffix_len &&
		       strncasecmp(host + host_len - suffix_len, pattern + 1, suffix_len) == 0;
	}
	return host_len == pattern_len && strncasecmp(host, pattern, host_len) == 0;
}

/* Whether the route's match: accepts the request; absent fields accept all. */
static bool route_accepts(const struct route *route, const char *host, size_t host_len,
			  const char *path, size_t path_len, const char *method, size_t method_len)
{
	if (route->match_host != NULL &&
	    !route_host_pattern_matches(route->match_host, host, host_len))
		return false;
	if (route->match_path_prefix != NULL) {
		size_t prefix_len = strlen(route->match_path_prefix);

		if (path == NULL || path_len < prefix_len ||
		    memcmp(path, route->match_path_prefix, prefix_len) != 0)
			return false;
	}
	if (route->match_method_count > 0) {
		/* Methods are case-sensitive (RFC 9110 section 9.1). */
		for (size_t i = 0; i < route->match_method_count; i++) {
			const char *m = route->match_methods[i];

			if (method != NULL && strlen(m) == method_len &&
			    memcmp(m, method, method_len) == 0)
				return true;
		}
		return false;
	}
	return true;
}

const struct route *route_match(const struct config *config, const char *host, size_t host_len,
				const char *path, size_t path_len, const char *method,
				size_t method_len)
{
	for (size_t i = 0; i < config->route_count; i++) {
		const struct route *route = &config->routes[i];

		if (route_accepts(route, host, host_len, path, path_len, method, method_len))
			return route;
	}
	return &config->default_route;
}
