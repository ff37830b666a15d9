#include "request_target.h"

#include <string.h>
#include <strings.h>

/* Parse "host[:port]" (host may be "[v6]") into out; port_required for
 * CONNECT, default_port otherwise. */
static int request_target_parse_hostport(const char *s, size_t len, bool port_required,
					 uint16_t default_port, struct request_target *out)
{
	const char *host_end;
	const char *p;
	const char *end = s + len;
	unsigned long port = 0;

	if (len == 0)
		return -1;
	if (memchr(s, '@', len) != NULL)
		return -1; /* userinfo is never accepted: it smuggles credentials and confuses hosts */
	if (s[0] == '[') {
		host_end = memchr(s, ']', len);
		if (host_end == NULL || host_end == s + 1)
			return -1;
		out->host = s + 1;
		out->host_len = (size_t)(host_end - s - 1);
		for (p = out->host; p < host_end; p++)
			if (!(*p == ':' || *p == '.' || (*p >= '0' && *p <= '9') ||
			      (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
				return -1;
		p = host_end + 1;
	} else {
		host_end = memchr(s, ':', len);
		if (host_end == NULL)
			host_end = end;
		if (host_end == s)
			return -1;
		out->host = s;
		out->host_len = (size_t)(host_end - s);
		for (p = s; p < host_end; p++) {
			unsigned char c = (unsigned char)*p;

			/* reg-name letters, digits and the unreserved and sub-delim marks
			 * that DNS names and IPv4 literals use */
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
			      c == '~'))
				return -1;
		}
		p = host_end;
	}
	if (p == end) {
		if (port_required)
			return -1;
		out->port = default_port;
		return 0;
	}
	if (*p != ':' || p + 1 == end || end - p > 6)
		return -1;
	for (p++; p < end; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port == 0 || port > 65535)
		return -1;
	out->port = (uint16_t)port;
	return 0;
}

int request_target_parse_absolute(const char *target, size_t len, struct request_target *out)
{
	const char *rest;
	const char *auth_end;
	const char *end = target + len;
	size_t scheme_len;

	memset(out, 0, sizeof(*out));
	if (len >= 7 && strncasecmp(target, "http://", 7) == 0) {
		scheme_len = 7;
	} else if (len >= 8 && strncasecmp(target, "https://", 8) == 0) {
		scheme_len = 8;
		out->tls = true;
	} else {
		return -1;
	}
	rest = target + scheme_len;
	if (memchr(target, '#', len) != NULL)
		return -1;
	for (auth_end = rest; auth_end < end && *auth_end != '/' && *auth_end != '?'; auth_end++)
		;
	out->authority = rest;
	out->authority_len = (size_t)(auth_end - rest);
	if (request_target_parse_hostport(rest, out->authority_len, false, out->tls ? 443 : 80, out) < 0)
		return -1;
	out->path = auth_end;
	out->path_len = (size_t)(end - auth_end);
	return 0;
}

int request_target_parse_authority(const char *target, size_t len, struct request_target *out)
{
	memset(out, 0, sizeof(*out));
	out->authority = target;
	out->authority_len = len;
	return request_target_parse_hostport(target, len, true, 0, out);
}

int request_target_host_of(const char *value, size_t len, const char **host, size_t *host_len)
{
	struct request_target t;

	memset(&t, 0, sizeof(t));
	if (request_target_parse_hostport(value, len, false, 0, &t) < 0)
		return -1;
	*host = t.host;
	*host_len = t.host_len;
	return 0;
}
