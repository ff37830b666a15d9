#include "http1_target.h"

#include <string.h>

#include "http1_chars.h"

/*
 * The request-target (RFC 9112 section 3.2) and uri-host grammar: the head
 * parser splits each target here once, into head->parsed_target, and the
 * framing check reads the Host field with the same rules.
 */

/* Parse 1*5 DIGIT up to 65535 into *port. */
static bool http1_target_port(const char *s, size_t len, uint16_t *port)
{
	unsigned long value = 0;

	if (len == 0 || len > 5)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!HTTP1_IS_DIGIT(s[i]))
			return false;
		value = value * 10 + (unsigned long)(s[i] - '0');
	}
	if (value > 65535)
		return false;
	*port = (uint16_t)value;
	return true;
}

/* Check a dotted-quad IPv4 address whose octets have no leading zeros. */
static bool http1_target_ipv4(const char *s, size_t len)
{
	size_t i = 0;

	for (int octet = 0; octet < 4; octet++) {
		size_t start = i;
		unsigned value = 0;

		if (octet > 0) {
			if (i >= len || s[i] != '.')
				return false;
			start = ++i;
		}
		while (i < len && HTTP1_IS_DIGIT(s[i]) && i - start < 3)
			value = value * 10 + (unsigned)(s[i++] - '0');
		if (i == start || value > 255 || (s[start] == '0' && i - start > 1))
			return false;
	}
	return i == len;
}

/* Check an IPv6address (RFC 3986 section 3.2.2) without the brackets. Zone
 * identifiers and IPvFuture are not accepted. */
static bool http1_target_ipv6(const char *s, size_t len)
{
	size_t i = 0;
	int groups = 0;
	bool compressed = false;

	if (len >= 2 && s[0] == ':' && s[1] == ':') {
		compressed = true;
		i = 2;
	}
	while (i < len) {
		size_t start = i;

		while (i < len && HTTP1_IS(s[i], HTTP1_C_HEX))
			i++;
		if (i < len && s[i] == '.') {
			/* An embedded IPv4 address takes the last two groups. */
			if (!http1_target_ipv4(s + start, len - start))
				return false;
			groups += 2;
			i = len;
			break;
		}
		if (i == start || i - start > 4)
			return false;
		groups++;
		if (i == len)
			break;
		if (s[i] != ':')
			return false;
		if (++i == len)
			return false;
		if (s[i] == ':') {
			if (compressed)
				return false;
			compressed = true;
			i++;
		}
	}
	return compressed ? groups <= 7 : groups == 8;
}

/* Parse uri-host [":" port] (RFC 9110 section 7.2): *host without the
 * brackets of an IPv6 literal, *port 0 when there is none. The host must not
 * be empty: an http URI with an empty host is invalid (section 4.2.1). A
 * port is up to 5 digits; an empty one after the colon is allowed by RFC 3986
 * section 3.2.3 and means the scheme's default, as no port does. *routable says whether the proxy may match, resolve and connect to it:
 * not with sub-delims or percent-encoding, which would let one name pass for
 * another in front of a match pattern or a resolver, nor with port 0. */
bool http1_target_authority(const char *s, size_t len, const char **host, size_t *host_len,
			    uint16_t *port, bool *routable)
{
	size_t i = 0;

	*port = 0;
	*routable = true;
	if (len == 0)
		return false;
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (close == NULL || !http1_target_ipv6(s + 1, (size_t)(close - s) - 1))
			return false;
		*host = s + 1;
		*host_len = (size_t)(close - s) - 1;
		i = *host_len + 2;
	} else {
		while (i < len && HTTP1_IS(s[i], HTTP1_C_REGNAME)) {
			/* plain names are all unreserved: one lookup a byte */
			if (HTTP1_IS(s[i], HTTP1_C_UNRESERVED)) {
				i++;
				continue;
			}
			*routable = false;
			if (s[i] == '%' && (len - i < 3 || !HTTP1_IS(s[i + 1], HTTP1_C_HEX) ||
					    !HTTP1_IS(s[i + 2], HTTP1_C_HEX)))
				return false;
			i += s[i] == '%' ? 3 : 1;
		}
		if (i == 0)
			return false;
		*host = s;
		*host_len = i;
	}
	if (i == len || (i + 1 == len && s[i] == ':'))
		return true;
	if (s[i] != ':' || !http1_target_port(s + i + 1, len - i - 1, port))
		return false;
	if (*port == 0)
		*routable = false;
	return true;
}

/* Parse an absolute-form target "http[s]://authority[/path][?query]" into
 * out. Other schemes are refused: http and https are all the proxy speaks
 * upstream. */
static bool http1_target_absolute(const char *s, size_t len, struct http1_target *out)
{
	size_t i;
	bool routable;

	if (len >= 7 && HTTP1_IS_LIT(s, 7, "http://")) {
		i = 7;
	} else if (len >= 8 && HTTP1_IS_LIT(s, 8, "https://")) {
		i = 8;
		out->tls = true;
	} else {
		return false;
	}
	out->authority = s + i;
	while (i < len && s[i] != '/' && s[i] != '?')
		i++;
	out->authority_len = (size_t)(s + i - out->authority);
	out->path = s + i;
	out->path_len = len - i;
	/* Userinfo ("user@host") is refused by the authority check: '@' is
	 * not a reg-name byte (RFC 9110 section 4.2.4 says to treat it as an
	 * error). */
	if (!http1_target_authority(out->authority, out->authority_len, &out->host, &out->host_len,
				    &out->port, &routable) ||
	    !routable)
		return false;
	if (out->port == 0)
		out->port = out->tls ? 443 : 80;
	return true;
}

/* Split the request-target into head->parsed_target, checking that it has the
 * form its method calls for (RFC 9112 section 3.2): authority-form with
 * CONNECT and only with it, asterisk-form only with OPTIONS. */
bool http1_target_parse(struct http1_head *head)
{
	const char *t = head->target;
	size_t len = head->target_len;
	struct http1_target *out = &head->parsed_target;
	bool routable;

	memset(out, 0, sizeof(*out));
	out->path = t;
	out->path_len = len;
	/* a fragment is never part of a request-target; a next hop that cut it
	 * off or kept it would see a different target than we routed */
	if (memchr(t, '#', len) != NULL)
		return false;
	if (head->method_len == 7 && memcmp(head->method, "CONNECT", 7) == 0) {
		out->form = HTTP1_TARGET_AUTHORITY;
		out->authority = t;
		out->authority_len = len;
		out->path = t + len;
		out->path_len = 0;
		/* a tunnel needs somewhere to go: no default port */
		return http1_target_authority(t, len, &out->host, &out->host_len, &out->port,
					      &routable) &&
		       routable && out->port != 0;
	}
	if (t[0] == '/') {
		out->form = HTTP1_TARGET_ORIGIN;
		return true;
	}
	if (len == 1 && t[0] == '*') {
		out->form = HTTP1_TARGET_ASTERISK;
		return head->method_len == 7 && memcmp(head->method, "OPTIONS", 7) == 0;
	}
	out->form = HTTP1_TARGET_ABSOLUTE;
	return http1_target_absolute(t, len, out);
}
