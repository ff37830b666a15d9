/* The admin endpoint's reading of a request: which page the
 * request-target names, whether its query asks for ?norefresh, and
 * whether the Host passes the DNS-rebinding check (access.admin_remote
 * off). The target goes through evhttp's own URI parser as evhttp parses a
 * request line, then through admin.c's page lookup, admin_query_has() and
 * admin_host_ok(); admin.c is included here, so its static functions are
 * reached without exporting them (the rest links from core_lib).
 *
 * The reference, for an origin-form target (RFC 9112 section 3.2.1),
 * reads the target as text: the path is everything before the first '?'
 * or '#', and only a path equal to a page's names it; the query is what
 * follows '?' up to '#', cut at each '&', a parameter's name what comes
 * before its '=', compared whole with "norefresh"; the host is the Host
 * field's, never anything in the target. A Host is local when it is an
 * IPv4 or IPv6 address (the latter in brackets), localhost or a name under
 * .localhost, with or without a port and one final dot; forms a browser
 * never sends and that name this machine either way ("[127.0.0.1]", an
 * address with a final dot, "::1.localhost") may go either way. For an
 * absolute-form target the host the check passed must be local.
 *
 * The first input byte: bit 0 HTTP/1.0, bit 1 no Host field. Then the
 * target, a newline, the Host value. */

#include "admin.c"

#include <ctype.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct config fuzz_config;
static struct proxy fuzz_proxy = { .config = &fuzz_config };
static struct admin fuzz_admin = { .proxy = &fuzz_proxy };

static const char *const fuzz_pages[] = { "/", "/healthz", "/metrics", "/config", "/upstreams" };

enum fuzz_local { FUZZ_NO, FUZZ_YES, FUZZ_EITHER };

static bool fuzz_ends_nocase(const char *s, size_t len, const char *tail)
{
	size_t n = strlen(tail);

	if (len < n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (tolower((unsigned char)s[len - n + i]) != tolower((unsigned char)tail[i]))
			return false;
	return true;
}

/* Is name[0..len) (no port, no brackets) an address or a localhost name? */
static enum fuzz_local fuzz_ref_name(const char *name, size_t len)
{
	char text[512];
	unsigned char addr[16];
	bool dot;

	if (len == 0)
		return FUZZ_NO;
	if (len > 253)
		return FUZZ_EITHER; /* no DNS name is this long */
	memcpy(text, name, len);
	text[len] = '\0';
	if (inet_pton(AF_INET, text, addr) == 1)
		return FUZZ_YES;
	dot = text[len - 1] == '.';
	if (dot)
		text[--len] = '\0';
	if (inet_pton(AF_INET, text, addr) == 1)
		return FUZZ_EITHER; /* "127.0.0.1." */
	if (fuzz_ends_nocase(text, len, "localhost") &&
	    (len == 9 || (len > 10 && text[len - 10] == '.')))
		return FUZZ_YES;
	return FUZZ_NO;
}

static enum fuzz_local fuzz_ref_host(const char *host)
{
	size_t len = strlen(host);
	const char *colon = strchr(host, ':');
	unsigned char addr[16];
	char text[512];

	if (host[0] == '[') {
		const char *close = strchr(host, ']');
		size_t inner;

		if (close == NULL || (close[1] != '\0' && close[1] != ':'))
			return FUZZ_NO;
		inner = (size_t)(close - host - 1);
		if (inner == 0 || inner >= sizeof(text))
			return FUZZ_NO;
		memcpy(text, host + 1, inner);
		text[inner] = '\0';
		if (inet_pton(AF_INET6, text, addr) == 1)
			return FUZZ_YES;
		/* an IPv4 address or a name in brackets is no IP-literal: no
		 * browser sends it, and it would name this machine */
		return fuzz_ref_name(text, inner) == FUZZ_NO ? FUZZ_NO : FUZZ_EITHER;
	}
	if (colon != NULL && strchr(colon + 1, ':') != NULL) {
		/* an IPv6 address without brackets, as a URI parser may give;
		 * anything else with two colons no browser sends, and one that
		 * is a localhost name names this machine */
		if (len >= sizeof(text))
			return FUZZ_NO;
		if (inet_pton(AF_INET6, host, addr) == 1)
			return FUZZ_YES;
		return fuzz_ref_name(host, len) == FUZZ_NO ? FUZZ_NO : FUZZ_EITHER;
	}
	return fuzz_ref_name(host, colon != NULL ? (size_t)(colon - host) : len);
}

/* Does query[0..len) have a parameter named name, with or without a value? */
static bool fuzz_ref_query_has(const char *query, size_t len, const char *name)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		size_t end;

		if (i < len && query[i] != '&')
			continue;
		end = start;
		while (end < i && query[end] != '=')
			end++;
		if (end - start == strlen(name) && memcmp(query + start, name, end - start) == 0)
			return true;
		start = i + 1;
	}
	return false;
}

static bool fuzz_clean(const char *s, bool space_ok)
{
	for (; *s != '\0'; s++)
		if (*s == '\r' || *s == '\n' || (!space_ok && (*s == ' ' || *s == '\t')))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text, *host;
	struct evhttp_uri *uri;
	struct evhttp_request *req;
	const struct admin_page *page;
	bool host_ok, no_refresh;
	bool host_given;
	size_t hlen;

	if (size < 1 || memchr(data, '\0', size) != NULL)
		return 0;
	text = malloc(size);
	if (text == NULL)
		abort();
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	host = strchr(text, '\n');
	if (host != NULL)
		*host++ = '\0';
	host_given = (data[0] & 2) == 0 && host != NULL;
	hlen = host_given ? strlen(host) : 0;
	/* a target has no whitespace in a request line; evhttp trims a field
	 * value */
	if (text[0] == '\0' || !fuzz_clean(text, false) ||
	    (host_given && (!fuzz_clean(host, true) ||
			    (hlen > 0 && (host[0] == ' ' || host[0] == '\t' ||
					  host[hlen - 1] == ' ' || host[hlen - 1] == '\t'))))) {
		free(text);
		return 0;
	}
	/* as evhttp parses a request line's target */
	uri = evhttp_uri_parse_with_flags(text, EVHTTP_URI_NONCONFORMANT);
	if (uri == NULL) {
		free(text);
		return 0; /* evhttp answers 400 itself */
	}
	req = evhttp_request_new(NULL, NULL);
	req->major = 1;
	req->minor = (data[0] & 1) != 0 ? 0 : 1;
	if (host_given)
		evhttp_add_header(evhttp_request_get_input_headers(req), "Host", host);

	page = admin_page_of(text, uri);
	host_ok = admin_host_ok(&fuzz_admin, req, uri);
	no_refresh = admin_query_has(evhttp_uri_get_query(uri), "norefresh");

	if (text[0] == '/') {
		size_t path_len = strcspn(text, "?#");
		const char *want_page = NULL, *got_page;
		bool want_no_refresh = false;
		enum fuzz_local local = host_given ? fuzz_ref_host(host) : FUZZ_YES;

		for (size_t i = 0; i < sizeof(fuzz_pages) / sizeof(fuzz_pages[0]); i++)
			if (strlen(fuzz_pages[i]) == path_len &&
			    memcmp(text, fuzz_pages[i], path_len) == 0)
				want_page = fuzz_pages[i];
		if (text[path_len] == '?') {
			const char *query = text + path_len + 1;

			want_no_refresh =
				fuzz_ref_query_has(query, strcspn(query, "#"), "norefresh");
		}
		got_page = page != NULL ? page->path : NULL;
		if ((got_page == NULL) != (want_page == NULL) ||
		    (got_page != NULL && strcmp(got_page, want_page) != 0))
			abort();
		if (no_refresh != want_no_refresh)
			abort();
		if (local != FUZZ_EITHER && host_ok != (local == FUZZ_YES))
			abort();
	} else if (host_ok && evhttp_uri_get_scheme(uri) != NULL &&
		   evhttp_uri_get_host(uri) != NULL &&
		   fuzz_ref_host(evhttp_uri_get_host(uri)) == FUZZ_NO) {
		abort();
	}
	evhttp_request_free(req);
	evhttp_uri_free(uri);
	free(text);
	return 0;
}
