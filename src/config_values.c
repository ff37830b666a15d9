#include "config_values.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xmalloc.h"

/* Longer digit runs overflow or are typos; either way no config needs them. */
#define CONFIG_VALUES_MAX_DIGITS 15

/* A number with that many whole digits stays below this. */
#define CONFIG_VALUES_NUMBER_LIMIT 1e15

/* Read a run of decimal digits; returns how many, 0 when none or too many. */
static size_t config_values_digits(const char *s, uint64_t *value)
{
	size_t n = 0;

	*value = 0;
	while (isdigit((unsigned char)s[n])) {
		if (n == CONFIG_VALUES_MAX_DIGITS)
			return 0;
		*value = *value * 10 + (uint64_t)(s[n] - '0');
		n++;
	}
	return n;
}

/* Read a whole number's digits as config_values_digits() does, except that
 * leading zeros, which add nothing to its value, do not count towards the
 * limit: 0000000000000005 is 5, not a number too large. */
static size_t config_values_whole(const char *s, uint64_t *value)
{
	size_t zeros = strspn(s, "0");
	size_t n = config_values_digits(s + zeros, value);

	if (n == 0 && isdigit((unsigned char)s[zeros]))
		return 0; /* too many digits after the zeros */
	return zeros + n;
}

/* Does config_values_format_ms() write ms with digits this file reads back? */
static bool config_values_format_fits(uint64_t ms)
{
	char buf[32];

	config_values_format_ms(ms, buf, sizeof(buf));
	return strspn(buf, "0123456789") <= CONFIG_VALUES_MAX_DIGITS;
}

/* A number, maybe with a fraction, and a unit: ms, s, m or h. */
int config_values_duration(const char *text, uint64_t *ms)
{
	static const struct {
		const char *name;
		uint64_t ms;
	} units[] = {
		{ "ms", 1 },
		{ "s", 1000 },
		{ "m", 60 * 1000 },
		{ "h", 60 * 60 * 1000 },
	};
	uint64_t whole, frac = 0, scale = 1;
	size_t n = config_values_whole(text, &whole);
	const char *p = text + n;

	if (n == 0)
		return -1;
	if (*p == '.') {
		size_t f = config_values_digits(p + 1, &frac);

		if (f == 0)
			return -1;
		for (size_t i = 0; i < f; i++)
			scale *= 10;
		/* trailing zeros say nothing: 1.7500000000000h is 1.75h, and
		 * kept they would overflow frac * an hour's milliseconds */
		while (scale > 1 && frac % 10 == 0) {
			frac /= 10;
			scale /= 10;
		}
		p += 1 + f;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].name) != 0)
			continue;
		/* Fractions are fine as long as they land on a whole millisecond:
		 * 1.5s is 1500ms, 1.5ms is not a duration a timer can keep. */
		if (frac > UINT64_MAX / units[i].ms || (frac * units[i].ms) % scale != 0)
			return -1;
		if (whole > UINT64_MAX / units[i].ms / 2)
			return -1;
		*ms = whole * units[i].ms + frac * units[i].ms / scale;
		/* /config writes it back in the largest exact unit: a fraction can
		 * make that more digits than this parser takes
		 * (10000000000000.5s is 10000000000000500ms) */
		if (!config_values_format_fits(*ms))
			return -1;
		return 0;
	}
	return -1;
}

/* A whole number of bytes, KiB, MiB or GiB. */
int config_values_size(const char *text, uint64_t *bytes)
{
	static const struct {
		const char *name;
		uint64_t bytes;
	} units[] = {
		{ "", 1 },
		{ "KiB", 1024 },
		{ "MiB", 1024 * 1024 },
		{ "GiB", 1024 * 1024 * 1024 },
	};
	uint64_t value;
	size_t n = config_values_whole(text, &value);

	if (n == 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(text + n, units[i].name) != 0)
			continue;
		if (value > UINT64_MAX / units[i].bytes)
			return -1;
		*bytes = value * units[i].bytes;
		return 0;
	}
	return -1;
}

/* Read a port of 1 to 65535 that makes up the whole string. */
static int config_values_port(const char *text, uint16_t *port)
{
	uint64_t value;
	size_t n = config_values_whole(text, &value);

	if (n == 0 || text[n] != '\0' || value < 1 || value > 65535)
		return -1;
	*port = (uint16_t)value;
	return 0;
}

bool config_values_is_host_name(const char *s, size_t len)
{
	size_t label = 0;

	if (len == 0 || len > 253)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!isalnum(c) && c != '_' && (c != '-' || label == 0))
			return false;
		if (++label > 63)
			return false;
	}
	return label > 0 && s[len - 1] != '-';
}

/* Whether len bytes of s are an IPv6 address. */
static bool config_values_is_ipv6(const char *s, size_t len)
{
	struct in6_addr a;
	char buf[INET6_ADDRSTRLEN + 1];

	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return inet_pton(AF_INET6, buf, &a) == 1;
}

/* Free what config_values_url allocated, not the struct itself. */
void config_values_url_free(struct upstream_url *url)
{
	if (url == NULL)
		return;
	free(url->host);
	free(url->authority);
	free(url->text);
	memset(url, 0, sizeof(*url));
}

bool config_values_host_resolvable(const char *host, size_t host_len)
{
	size_t name_len = host_len > 1 && host[host_len - 1] == '.' ? host_len - 1 : host_len;
	const char *last = host + name_len;
	char buf[INET_ADDRSTRLEN];
	struct in_addr a;

	while (last > host && last[-1] != '.')
		last--;
	for (const char *p = last; p < host + name_len; p++)
		if (!isdigit((unsigned char)*p))
			return true;
	if (host_len != name_len || host_len >= sizeof(buf))
		return false;
	memcpy(buf, host, host_len);
	buf[host_len] = '\0';
	return inet_pton(AF_INET, buf, &a) == 1;
}

/* Split an http(s) URL into scheme, host and port, refusing anything more. */
int config_values_url(const char *text, struct upstream_url *url, const char **why)
{
	const char *p, *end, *host, *port_text = NULL;
	size_t host_len, name_len;
	char *port_buf;
	uint16_t port;
	bool tls;

	if (strncasecmp(text, "http://", 7) == 0) {
		tls = false;
		p = text + 7;
	} else if (strncasecmp(text, "https://", 8) == 0) {
		tls = true;
		p = text + 8;
	} else {
		*why = "the scheme must be http:// or https://";
		return -1;
	}
	end = p + strcspn(p, "/?#");
	if (memchr(p, '@', (size_t)(end - p)) != NULL) {
		*why = "an upstream URL has no user name or password";
		return -1;
	}
	/* A lone trailing slash names the same origin; anything more would be a
	 * path the proxy could not honour, since requests keep their own. */
	if (*end != '\0' && strcmp(end, "/") != 0) {
		*why = strchr(end, '?') != NULL	  ? "an upstream URL has no query"
		       : strchr(end, '#') != NULL ? "an upstream URL has no fragment"
						  : "an upstream URL has no path";
		return -1;
	}
	if (*p == '[') {
		const char *close = memchr(p, ']', (size_t)(end - p));

		if (close == NULL || !config_values_is_ipv6(p + 1, (size_t)(close - p - 1))) {
			*why = "invalid IPv6 address";
			return -1;
		}
		host = p + 1;
		host_len = (size_t)(close - host);
		name_len = host_len;
		if (close + 1 < end && close[1] != ':') {
			*why = "invalid host";
			return -1;
		}
		if (close + 1 < end)
			port_text = close + 2;
	} else {
		const char *colon = memchr(p, ':', (size_t)(end - p));

		host = p;
		host_len = (size_t)((colon != NULL ? colon : end) - p);
		if (colon != NULL)
			port_text = colon + 1;
		if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL) {
			*why = "an IPv6 address goes in brackets, like http://[::1]:8080";
			return -1;
		}
		if (host_len == 0) {
			*why = "the host is missing";
			return -1;
		}
		/* a trailing dot makes the name absolute (resolved without the
		 * search list); it is checked, and sent in Host, without it */
		name_len = host_len > 1 && host[host_len - 1] == '.' ? host_len - 1 : host_len;
		if (!config_values_is_host_name(host, name_len)) {
			*why = "invalid host";
			return -1;
		}
		if (!config_values_host_resolvable(host, host_len)) {
			*why = CONFIG_VALUES_BAD_IPV4;
			return -1;
		}
	}
	port = tls ? 443 : 80;
	if (port_text != NULL) {
		port_buf = xstrndup(port_text, (size_t)(end - port_text));
		if (config_values_port(port_buf, &port) < 0) {
			free(port_buf);
			*why = "the port must be a number from 1 to 65535";
			return -1;
		}
		free(port_buf);
	}
	memset(url, 0, sizeof(*url));
	url->tls = tls;
	url->port = port;
	url->host = xstrndup(host, host_len);
	for (char *c = url->host; *c != '\0'; c++)
		*c = (char)tolower((unsigned char)*c);
	{
		bool v6 = strchr(url->host, ':') != NULL;
		bool default_port = port == (tls ? 443 : 80);
		size_t size = host_len + 16;

		url->authority = xmalloc(size);
		snprintf(url->authority, size, v6 ? "[%.*s]" : "%.*s", (int)name_len, url->host);
		if (!default_port) {
			size_t len = strlen(url->authority);

			snprintf(url->authority + len, size - len, ":%u", (unsigned)port);
		}
	}
	url->text = xstrdup(text);
	return 0;
}

static const char config_values_numeric_only[] =
	"expected a numeric address like 127.0.0.1 or [::1], or localhost; names are not resolved";

/* A listen address into a sockaddr, without DNS. */
int config_values_address(const char *text, struct sockaddr_storage *addr, socklen_t *len,
			  const char **why)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	const char *colon, *port_text;
	char *host;
	uint16_t port;
	int rc;

	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (close == NULL || close[1] != ':') {
			*why = "expected [address]:port";
			return -1;
		}
		host = xstrndup(text + 1, (size_t)(close - text - 1));
		port_text = close + 2;
	} else {
		colon = strrchr(text, ':');
		if (colon == NULL) {
			*why = "expected host:port";
			return -1;
		}
		if (memchr(text, ':', (size_t)(colon - text)) != NULL) {
			*why = "an IPv6 address goes in brackets, like [::1]:3128";
			return -1;
		}
		host = xstrndup(text, (size_t)(colon - text));
		port_text = colon + 1;
	}
	if (config_values_port(port_text, &port) < 0) {
		free(host);
		*why = "the port must be a number from 1 to 65535";
		return -1;
	}
	if (host[0] == '\0') {
		free(host);
		*why = "the host is missing; write 0.0.0.0 or [::] for every address";
		return -1;
	}
	/* The one name allowed, mapped here rather than resolved: a listener
	 * must not depend on DNS or /etc/hosts. */
	if (strcasecmp(host, "localhost") == 0) {
		free(host);
		host = xstrdup("127.0.0.1");
	}
	if (strchr(host, ':') == NULL) {
		struct in_addr a;

		/* getaddrinfo also takes "127.1" and hex; a config should not. */
		if (inet_pton(AF_INET, host, &a) != 1) {
			free(host);
			*why = config_values_numeric_only;
			return -1;
		}
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	rc = getaddrinfo(host, port_text, &hints, &res);
	free(host);
	if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*addr)) {
		if (res != NULL)
			freeaddrinfo(res);
		*why = config_values_numeric_only;
		return -1;
	}
	memset(addr, 0, sizeof(*addr));
	memcpy(addr, res->ai_addr, res->ai_addrlen);
	*len = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* An address or a network into a struct cidr. */
int config_values_cidr(const char *text, struct cidr *cidr, const char **why)
{
	const char *slash = strchr(text, '/');
	size_t addr_len = slash != NULL ? (size_t)(slash - text) : strlen(text);
	char buf[INET6_ADDRSTRLEN + 1];
	unsigned char *bytes;
	unsigned max, prefix;

	memset(cidr, 0, sizeof(*cidr));
	if (addr_len == 0 || addr_len >= sizeof(buf)) {
		*why = "expected an address or a network like 10.0.0.0/8";
		return -1;
	}
	memcpy(buf, text, addr_len);
	buf[addr_len] = '\0';
	if (strchr(buf, ':') != NULL) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&cidr->addr;

		sin6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1) {
			*why = "invalid IPv6 address";
			return -1;
		}
		bytes = sin6->sin6_addr.s6_addr;
		max = 128;
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&cidr->addr;

		sin->sin_family = AF_INET;
		if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1) {
			*why = "invalid IPv4 address";
			return -1;
		}
		bytes = (unsigned char *)&sin->sin_addr.s_addr;
		max = 32;
	}
	prefix = max;
	if (slash != NULL) {
		uint64_t value;
		size_t n = config_values_digits(slash + 1, &value);

		if (n == 0 || n > 3 || slash[1 + n] != '\0' || value > max) {
			*why = max == 32 ? "the prefix length must be from 0 to 32"
					 : "the prefix length must be from 0 to 128";
			return -1;
		}
		prefix = (unsigned)value;
	}
	/* 10.1.2.3/8 plainly means 10.0.0.0/8; clear the host bits so that
	 * matching needs no mask of its own. */
	for (unsigned bit = prefix; bit < max; bit++)
		bytes[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
	cidr->prefix_len = prefix;
	return 0;
}

/* Check and normalize a host pattern. */
int config_values_host_pattern(const char *text, char **pattern, const char **why)
{
	size_t len = strlen(text);
	const char *name = text;
	char *out;

	if (strcmp(text, "*") == 0) {
		*pattern = xstrdup("*");
		return 0;
	}
	if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
		if (!config_values_is_ipv6(text + 1, len - 2)) {
			*why = "invalid IPv6 address";
			return -1;
		}
		name = text + 1;
		len -= 2;
	} else if (strchr(text, ':') != NULL) {
		if (!config_values_is_ipv6(text, len)) {
			*why = "a host pattern has no port";
			return -1;
		}
	} else {
		size_t check_from = 0;

		if (strncmp(text, "*.", 2) == 0)
			check_from = 2;
		/* The fully qualified form names the same host. */
		if (len > check_from + 1 && text[len - 1] == '.')
			len--;
		if (memchr(text + check_from, '*', len - check_from) != NULL) {
			*why = "a wildcard is allowed only as a leading \"*.\"";
			return -1;
		}
		if (!config_values_is_host_name(text + check_from, len - check_from)) {
			*why = "expected a host name, \"*.\" and a domain, or \"*\"";
			return -1;
		}
	}
	out = xstrndup(name, len);
	for (char *c = out; *c != '\0'; c++)
		*c = (char)tolower((unsigned char)*c);
	*pattern = out;
	return 0;
}

/* Whether text is a non-empty run of tchar. */
bool config_values_is_token(const char *text)
{
	if (*text == '\0')
		return false;
	for (const char *p = text; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr("!#$%&'*+-.^_`|~", *p) == NULL)
			return false;
	return true;
}

/* Digits only, up to max. */
int config_values_unsigned(const char *text, uint64_t max, uint64_t *value)
{
	size_t n = config_values_whole(text, value);

	if (n == 0 || text[n] != '\0' || *value > max)
		return -1;
	return 0;
}

/* Digits with an optional fraction, nothing else. */
int config_values_number(const char *text, double *value)
{
	uint64_t unused;
	size_t n = config_values_whole(text, &unused);

	/* strtod alone would also take "inf", "0x10" and " 1"; none is a
	 * number anybody means in a config. */
	if (n == 0)
		return -1;
	if (text[n] == '.') {
		size_t f = config_values_digits(text + n + 1, &unused);

		if (f == 0 || text[n + 1 + f] != '\0')
			return -1;
	} else if (text[n] != '\0') {
		return -1;
	}
	*value = strtod(text, NULL);
	/* 999999999999999.99 rounds to 1e15, which /config could only write
	 * with 16 whole digits, a number this parser refuses on reload */
	return isfinite(*value) && *value < CONFIG_VALUES_NUMBER_LIMIT ? 0 : -1;
}

/* YAML 1.2's booleans only: yes, no, on and off are typos here. */
int config_values_bool(const char *text, bool *value)
{
	if (strcmp(text, "true") == 0 || strcmp(text, "True") == 0 || strcmp(text, "TRUE") == 0) {
		*value = true;
		return 0;
	}
	if (strcmp(text, "false") == 0 || strcmp(text, "False") == 0 ||
	    strcmp(text, "FALSE") == 0) {
		*value = false;
		return 0;
	}
	return -1;
}

/* Whether an address can only be reached from this host. */
bool config_values_is_wildcard(const struct sockaddr_storage *addr)
{
	if (addr->ss_family == AF_INET)
		return ((const struct sockaddr_in *)addr)->sin_addr.s_addr == htonl(INADDR_ANY);
	return addr->ss_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr);
}

uint16_t config_values_addr_port(const struct sockaddr_storage *addr)
{
	if (addr->ss_family == AF_INET6)
		return ((const struct sockaddr_in6 *)addr)->sin6_port;
	return ((const struct sockaddr_in *)addr)->sin_port;
}

bool config_values_is_loopback(const struct sockaddr_storage *addr)
{
	if (addr->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;

		return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
	}
	if (addr->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)addr;

		if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr))
			return true;
		return IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) && sin6->sin6_addr.s6_addr[12] == 127;
	}
	return false;
}

/* Whether two addresses would bind the same socket. */
bool config_values_same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const struct sockaddr_in *)a;
		const struct sockaddr_in *y = (const struct sockaddr_in *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
		const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)b;

		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0 &&
		       x->sin6_scope_id == y->sin6_scope_id;
	}
	return false;
}

/* Is addr a wildcard (0.0.0.0 or [::])? An IPv4-mapped [::ffff:a.b.c.d]
 * gives its IPv4 address in *v4 for the comparison across families. */
static bool config_values_wildcard(const struct sockaddr_storage *addr, bool *mapped, uint32_t *v4)
{
	*mapped = false;
	if (addr->ss_family == AF_INET) {
		*v4 = ((const struct sockaddr_in *)addr)->sin_addr.s_addr;
		return *v4 == htonl(INADDR_ANY);
	}
	if (addr->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			*mapped = true;
			memcpy(v4, &a->s6_addr[12], 4);
		}
		return IN6_IS_ADDR_UNSPECIFIED(a);
	}
	return false;
}

bool config_values_addresses_clash(const struct sockaddr_storage *a,
				   const struct sockaddr_storage *b)
{
	bool a_mapped, b_mapped;
	uint32_t a_v4 = 0, b_v4 = 0;
	bool a_any = config_values_wildcard(a, &a_mapped, &a_v4);
	bool b_any = config_values_wildcard(b, &b_mapped, &b_v4);
	bool a_ipv4 = a->ss_family == AF_INET || a_mapped;
	bool b_ipv4 = b->ss_family == AF_INET || b_mapped;

	if (config_values_addr_port(a) != config_values_addr_port(b))
		return false;
	if (config_values_same_address(a, b))
		return true;
	if (a->ss_family == b->ss_family && (a_any || b_any))
		return true;
	/* [::] listens on IPv4 too; an IPv4-mapped address is its IPv4 one */
	if ((a->ss_family == AF_INET6 && a_any && b_ipv4) ||
	    (b->ss_family == AF_INET6 && b_any && a_ipv4))
		return true;
	return a_ipv4 && b_ipv4 &&
	       (a_v4 == b_v4 || a_v4 == htonl(INADDR_ANY) || b_v4 == htonl(INADDR_ANY));
}

/* The largest unit that divides the duration exactly. */
void config_values_format_ms(uint64_t ms, char *buf, size_t size)
{
	if (ms != 0 && ms % (60 * 60 * 1000) == 0)
		snprintf(buf, size, "%lluh", (unsigned long long)(ms / (60 * 60 * 1000)));
	else if (ms != 0 && ms % (60 * 1000) == 0)
		snprintf(buf, size, "%llum", (unsigned long long)(ms / (60 * 1000)));
	else if (ms % 1000 == 0)
		snprintf(buf, size, "%llus", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, size, "%llums", (unsigned long long)ms);
}

/* Whether one of this host's interfaces has addr (getifaddrs: a request to
 * the kernel, no traffic): 1 or 0, or -1 with errno when the kernel cannot
 * be asked for want of the proxy's own descriptors or memory: the caller
 * then makes no connect, the safe side, and takes it as its own shortage.
 * A kernel that refuses the look otherwise (no netlink socket allowed, as
 * under a unit's RestrictAddressFamilies=) counts as yes: a refusal, the
 * safe side, and no shortage that would never pass. */
static int config_values_on_interface(const struct sockaddr_storage *addr)
{
	struct ifaddrs *list;
	bool found = false;

	if (getifaddrs(&list) < 0)
		return errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM
			       ? -1
			       : 1;
	for (const struct ifaddrs *ifa = list; ifa != NULL && !found; ifa = ifa->ifa_next) {
		const struct sockaddr *a = ifa->ifa_addr;

		if (a == NULL || a->sa_family != addr->ss_family)
			continue;
		if (a->sa_family == AF_INET)
			found = memcmp(&((const struct sockaddr_in *)a)->sin_addr,
				       &((const struct sockaddr_in *)addr)->sin_addr,
				       sizeof(struct in_addr)) == 0;
		else
			found = memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
				       &((const struct sockaddr_in6 *)addr)->sin6_addr,
				       sizeof(struct in6_addr)) == 0;
	}
	freeifaddrs(list);
	return found ? 1 : 0;
}

/* Whether addr is one of this host's own addresses. A bind to it (no port
 * taken) that fails with "no such address" says no at once, the usual
 * answer for an upstream elsewhere; otherwise the interfaces decide, since
 * with net.ipv4.ip_nonlocal_bind on a bind takes any address. */
static int config_values_is_own_address(const struct sockaddr_storage *addr)
{
	struct sockaddr_storage probe = *addr;
	socklen_t len = addr->ss_family == AF_INET ? sizeof(struct sockaddr_in)
						   : sizeof(struct sockaddr_in6);
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	bool elsewhere = false;

	if (fd >= 0) {
#ifdef IP_BIND_ADDRESS_NO_PORT
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
#else
		(void)one;
#endif
		((struct sockaddr_in *)&probe)->sin_port = 0; /* same place in both */
		elsewhere = bind(fd, (const struct sockaddr *)&probe, len) < 0 &&
			    errno == EADDRNOTAVAIL;
		close(fd);
	}
	if (elsewhere)
		return 0;
	/* without a descriptor for the probe, the interfaces' list cannot be
	 * had either: -1, which tells neither */
	return config_values_on_interface(addr);
}

bool config_values_unmapped(const struct sockaddr *addr, socklen_t len,
			    struct sockaddr_storage *out)
{
	const struct sockaddr_in6 *six = (const struct sockaddr_in6 *)addr;
	struct sockaddr_in *four = (struct sockaddr_in *)out;

	if (len > sizeof(*out))
		return false;
	memset(out, 0, sizeof(*out));
	if (addr->sa_family != AF_INET6 || len < sizeof(*six) ||
	    !IN6_IS_ADDR_V4MAPPED(&six->sin6_addr)) {
		memcpy(out, addr, len);
		return true;
	}
	four->sin_family = AF_INET;
	four->sin_port = six->sin6_port;
	memcpy(&four->sin_addr, &six->sin6_addr.s6_addr[12], 4);
	return true;
}

/* The admin endpoint's check, kept here so that --explain makes it too.
 * Both sides are unmapped: a socket bound to [::ffff:127.0.0.1] takes the
 * IPv4 connects to 127.0.0.1, whichever family the target was written in. */
int config_values_connect_reaches(const struct sockaddr_storage *bound, const struct sockaddr *addr,
				  socklen_t len)
{
	struct sockaddr_storage dest, at;

	if (!config_values_unmapped(addr, len, &dest) ||
	    !config_values_unmapped((const struct sockaddr *)bound, sizeof(*bound), &at))
		return 0;
	/* a connect to 0.0.0.0 or :: reaches this host's loopback */
	if (config_values_is_wildcard(&dest)) {
		if (dest.ss_family == AF_INET)
			((struct sockaddr_in *)&dest)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		else
			((struct sockaddr_in6 *)&dest)->sin6_addr = in6addr_loopback;
	}
	if (config_values_same_address(&at, &dest))
		return 1;
	if (config_values_addr_port(&at) != config_values_addr_port(&dest) ||
	    !config_values_is_wildcard(&at))
		return 0;
	/* a socket on every address is on loopback too, and on each of this
	 * host's own addresses, of its family ([::] on the IPv4 ones as well;
	 * 0.0.0.0 on no IPv6 one, [::1] included) */
	if (at.ss_family != dest.ss_family && at.ss_family != AF_INET6)
		return 0;
	return config_values_is_loopback(&dest) ? 1 : config_values_is_own_address(&dest);
}
