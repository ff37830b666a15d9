#include "route.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "uri_path.h"
#include "xmalloc.h"

/* A path that needs normalising before it is matched is written here when
 * it fits, else into an allocation of its own. */
#define ROUTE_PATH_STACK 2048

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
	size_t pattern_len;

	if (pattern[0] == '*' && pattern[1] == '\0')
		return true;
	if (host == NULL)
		return false;
	pattern_len = strlen(pattern);
	route_host_normalize(&host, &host_len);
	if (pattern_len >= 2 && pattern[0] == '*' && pattern[1] == '.') {
		/* ".example.com" at the end, with at least one byte of label
		 * before it: example.com itself is not a subdomain. */
		size_t suffix_len = pattern_len - 1;

		return host_len > suffix_len &&
		       strncasecmp(host + host_len - suffix_len, pattern + 1, suffix_len) == 0;
	}
	if (host_len == pattern_len && strncasecmp(host, pattern, host_len) == 0)
		return true;
	/* an IPv6 literal has many spellings (::1, 0::1): compared as addresses */
	return memchr(pattern, ':', pattern_len) != NULL && memchr(host, ':', host_len) != NULL &&
	       route_same_host(pattern, pattern_len, host, host_len);
}

/* Whether the route's match: accepts the request; absent fields accept all.
 * The path prefix is checked first: a memcmp that fails at once, where the
 * host needs normalising and a case-insensitive compare. With slash, the
 * path goes upstream with a "/" before it (an absolute-form target with no
 * path, RFC 9112 section 3.2.1), and is matched so. */
static bool route_accepts(const struct route *route, const char *host, size_t host_len, bool slash,
			  const char *path, size_t path_len, const char *method, size_t method_len)
{
	if (route->match_path_prefix != NULL) {
		/* every prefix starts with "/" (config_route.c) */
		const char *prefix = route->match_path_prefix + slash;
		size_t prefix_len = strlen(prefix);

		if (path == NULL || path_len < prefix_len || memcmp(path, prefix, prefix_len) != 0)
			return false;
	}
	if (route->match_host != NULL &&
	    !route_host_pattern_matches(route->match_host, host, host_len))
		return false;
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

/* route_match(), for a path that goes upstream with a "/" before it when
 * slash is set. Prefixes are matched against the path's normal form
 * (uri_path.h), the resource the origin will see, so that /v1/%63harges or
 * /v1/x/../charges cannot slip past a route for /v1/charges; the path goes
 * upstream as the client wrote it. *trouble (may be NULL) says when the
 * path has no one normal form to route on. */
static const struct route *route_match_path(const struct config *config, const char *host,
					    size_t host_len, bool slash, const char *path,
					    size_t path_len, const char *method, size_t method_len,
					    enum uri_path_trouble *trouble)
{
	const struct route *found = &config->default_route;
	char stack[ROUTE_PATH_STACK];
	char *normal = NULL;

	if (trouble != NULL)
		*trouble = URI_PATH_FINE;
	if (path != NULL && !uri_path_is_normal(path, path_len)) {
		normal = path_len <= sizeof(stack) ? stack : xmalloc(path_len);
		path_len = uri_path_normalize(path, path_len, normal, trouble);
		path = normal;
	}
	for (size_t i = 0; i < config->route_count; i++) {
		const struct route *route = &config->routes[i];

		if (route_accepts(route, host, host_len, slash, path, path_len, method,
				  method_len)) {
			found = route;
			break;
		}
	}
	if (normal != stack)
		free(normal);
	return found;
}

const struct route *route_match(const struct config *config, const char *host, size_t host_len,
				const char *path, size_t path_len, const char *method,
				size_t method_len)
{
	return route_match_path(config, host, host_len, false, path, path_len, method, method_len,
				NULL);
}

/* Is host allowed by access.allow_hosts? */
static bool route_host_allowed(const struct config *config, const char *host, size_t host_len)
{
	for (size_t i = 0; i < config->allow_host_count; i++)
		if (route_host_pattern_matches(config->allow_hosts[i], host, host_len))
			return true;
	return false;
}

int route_destination(const struct config *config, const struct upstream_url *listener_upstream,
		      const struct http1_target *target, const char *host, size_t host_len,
		      const char *method, size_t method_len, struct route_destination *dest,
		      char *reason, size_t reason_len)
{
	bool origin = target->form == HTTP1_TARGET_ORIGIN || target->form == HTTP1_TARGET_ASTERISK;
	const struct upstream_url *upstream = NULL;
	enum uri_path_trouble trouble;

	memset(dest, 0, sizeof(*dest));
	/* match.host is the host the client asked for: the target's when it
	 * names one, else the Host field's */
	if (!origin) {
		host = target->host;
		host_len = target->host_len;
	}
	/* an absolute-form target with no path goes upstream as "/" and its
	 * query (RFC 9112 section 3.2.1), and is routed so, as is one inside
	 * an intercepted tunnel passed here as origin-form (a client's
	 * origin-form path starts with "/"); a CONNECT has none */
	dest->route =
		route_match_path(config, host, host_len,
				 target->form != HTTP1_TARGET_AUTHORITY &&
					 (target->path_len == 0 || target->path[0] == '?'),
				 target->path, target->path_len, method, method_len, &trouble);
	/* a path origins read each their own way cannot be routed as the
	 * origin will read it: refused, like a backslash in the target */
	if (trouble == URI_PATH_BAD_ESCAPE) {
		snprintf(reason, reason_len, "a %% in the path not followed by two hex digits");
		return 400;
	}
	if (trouble == URI_PATH_AMBIGUOUS) {
		snprintf(reason, reason_len,
			 "a .. segment after an empty one in the path (origins that merge "
			 "slashes and those that do not read it as different paths)");
		return 400;
	}
	/* a tunnel goes where the client asked; other requests to the route's
	 * upstream, else the listener's (sidecar), else the absolute URI's */
	if (target->form != HTTP1_TARGET_AUTHORITY)
		upstream = dest->route->upstream;
	if (upstream == NULL && origin)
		upstream = listener_upstream;
	if (upstream != NULL) {
		dest->tls = upstream->tls;
		dest->port = upstream->port;
		dest->host = upstream->host;
		dest->host_len = strlen(upstream->host);
		dest->authority = upstream->authority;
		dest->authority_len = strlen(upstream->authority);
		return 0;
	}
	if (origin) {
		/* OPTIONS * asks about a server, but names none: no origin-form
		 * request, and the answer says so */
		if (target->form == HTTP1_TARGET_ASTERISK)
			snprintf(
				reason, reason_len,
				"OPTIONS * (asterisk-form) on a listener with no upstream (this is "
				"a forward proxy: send OPTIONS with an absolute-form target, "
				"http://host:port, for a server's options)");
		else
			snprintf(reason, reason_len,
				 "origin-form request on a listener with no upstream (this is a "
				 "forward proxy: send absolute-form)");
		return 400;
	}
	dest->tls = target->tls;
	dest->port = target->port;
	dest->host = target->host;
	dest->host_len = target->host_len;
	dest->authority = target->authority;
	dest->authority_len = target->authority_len;
	/* "host:" names the default port; the upstream's Host omits the colon,
	 * as RFC 3986 section 3.2.3 asks of whoever produces a URI */
	if (dest->authority[dest->authority_len - 1] == ':')
		dest->authority_len--;
	/* the client chose this host: checked before any DNS is asked */
	if (!route_host_allowed(config, host, host_len)) {
		snprintf(reason, reason_len, "host %.*s not allowed by access.allow_hosts",
			 (int)(host_len > 200 ? 200 : host_len), host);
		return 403;
	}
	return 0;
}

bool route_host_intercepted(const struct config *config, const char *host, size_t host_len)
{
	const struct intercept_config *ic = &config->intercept;

	if (ic->ca == NULL)
		return false;
	for (size_t i = 0; i < ic->host_count; i++)
		if (route_host_pattern_matches(ic->hosts[i], host, host_len))
			return true;
	return false;
}

int route_check_tunnel_host(const struct config *config, const char *tunnel_host, char *reason,
			    size_t reason_len)
{
	size_t len = strlen(tunnel_host);
	int shown = (int)(len > 200 ? 200 : len);

	if (!route_host_allowed(config, tunnel_host, len)) {
		snprintf(reason, reason_len,
			 "host %.*s no longer allowed by access.allow_hosts (config reloaded)",
			 shown, tunnel_host);
		return 403;
	}
	if (!route_host_intercepted(config, tunnel_host, len)) {
		snprintf(reason, reason_len, "host %.*s no longer intercepted (config reloaded)",
			 shown, tunnel_host);
		return 403;
	}
	return 0;
}

/* host as an IP literal (brackets already gone) into addr: AF_INET,
 * AF_INET6, or 0 when it is a name. */
static int route_host_address(const char *host, size_t len, unsigned char *addr)
{
	char buf[64];

	if (len == 0 || len >= sizeof(buf))
		return 0;
	memcpy(buf, host, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, addr) == 1)
		return AF_INET;
	if (inet_pton(AF_INET6, buf, addr) == 1)
		return AF_INET6;
	return 0;
}

bool route_same_host(const char *a, size_t a_len, const char *b, size_t b_len)
{
	unsigned char a_addr[16], b_addr[16];
	int a_family, b_family;

	route_host_normalize(&a, &a_len);
	route_host_normalize(&b, &b_len);
	/* every request in a tunnel comes here: the same spelling needs no
	 * address parsing */
	if (a_len == b_len && strncasecmp(a, b, a_len) == 0)
		return true;
	/* spelled differently, they are the same only as one address in two
	 * spellings (::1, 0:0::1) */
	a_family = route_host_address(a, a_len, a_addr);
	b_family = route_host_address(b, b_len, b_addr);
	return a_family != 0 && a_family == b_family &&
	       memcmp(a_addr, b_addr, a_family == AF_INET ? 4 : 16) == 0;
}

int route_check_tunnel(const char *tunnel_host, uint16_t tunnel_port, bool tls,
		       const struct http1_head *head, const struct http1_framing *framing,
		       char *reason, size_t reason_len)
{
	const struct http1_target *target = &head->parsed_target;
	size_t len = strlen(tunnel_host);
	int shown = (int)(len > 200 ? 200 : len);
	bool v6 = memchr(tunnel_host, ':', len) != NULL; /* the reason writes [host]:port */
	/* a Host without a port names the scheme's default */
	uint16_t port = framing->host_port != 0 ? framing->host_port : tls ? 443 : 80;
	const char *scheme = tls ? "https://" : "http://";

	if (target->form == HTTP1_TARGET_AUTHORITY) {
		snprintf(reason, reason_len,
			 "a CONNECT inside the intercepted tunnel to %s%.*s%s:%u", v6 ? "[" : "",
			 shown, tunnel_host, v6 ? "]" : "", tunnel_port);
		return 400;
	}
	/* An absolute-form target names its origin itself (RFC 9112 section
	 * 3.2.2): this tunnel's, or one this connection does not serve, which
	 * 421 tells the client to ask over another (RFC 9110 section 7.4). */
	if (target->form == HTTP1_TARGET_ABSOLUTE &&
	    (target->tls != tls || target->port != tunnel_port ||
	     !route_same_host(target->host, target->host_len, tunnel_host, len))) {
		size_t origin_len =
			(size_t)(target->authority + target->authority_len - head->target);

		snprintf(reason, reason_len,
			 "%.*s is not the origin of the intercepted tunnel to "
			 "%s%s%.*s%s:%u",
			 (int)(origin_len > 200 ? 200 : origin_len), head->target, scheme,
			 v6 ? "[" : "", shown, tunnel_host, v6 ? "]" : "", tunnel_port);
		return 421;
	}
	/* the Host is checked in every form: one that disagrees with an
	 * absolute-form target is refused, not ignored (RFC 9112 section 3.2
	 * has the client send them identical) */
	if (framing->host_name != NULL &&
	    (!route_same_host(framing->host_name, framing->host_name_len, tunnel_host, len) ||
	     port != tunnel_port)) {
		snprintf(reason, reason_len, "Host %.*s is not the tunnel's %s%.*s%s:%u",
			 (int)(framing->host_len > 200 ? 200 : framing->host_len), framing->host,
			 v6 ? "[" : "", shown, tunnel_host, v6 ? "]" : "", tunnel_port);
		return 400;
	}
	return 0;
}
