#include "uri_path.h"

#include <string.h>

/* The end of the path: the first '?', or len. */
static size_t uri_path_end(const char *path, size_t len)
{
	const char *query = memchr(path, '?', len);

	return query != NULL ? (size_t)(query - path) : len;
}

/* Does the segment at path[at] (just past a '/') read "." or ".."? It ends
 * at a '/', a '?' or end. Returns the dots, or 0. */
static size_t uri_path_dot_segment(const char *path, size_t at, size_t end)
{
	size_t dots = 0;

	while (at + dots < end && dots < 3 && path[at + dots] == '.')
		dots++;
	if (dots == 0 || dots == 3 ||
	    (at + dots < end && path[at + dots] != '/' && path[at + dots] != '?'))
		return 0;
	return dots;
}

bool uri_path_is_normal(const char *path, size_t len)
{
	const char *percent;
	/* where the query starts, looked for only when something before it
	 * might matter: most targets have neither */
	size_t end = len;
	bool end_known = false;

	if (len == 0 || path[0] != '/')
		return true;
	percent = memchr(path, '%', len);
	if (percent != NULL) {
		end = uri_path_end(path, len);
		end_known = true;
		if ((size_t)(percent - path) < end)
			return false;
	}
	for (const char *slash = path; slash != NULL;
	     slash = memchr(slash + 1, '/', len - (size_t)(slash + 1 - path))) {
		size_t at = (size_t)(slash - path) + 1;

		if (at >= end)
			break;
		if (path[at] != '/' && path[at] != '.')
			continue;
		if (!end_known) {
			end = uri_path_end(path, len);
			end_known = true;
			if (at >= end)
				break;
		}
		if (path[at] == '/' || uri_path_dot_segment(path, at, end) != 0)
			return false;
	}
	return true;
}

int uri_path_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* RFC 3986 section 2.3: ALPHA / DIGIT / "-" / "." / "_" / "~" */
static bool uri_path_unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/* Copy path[0..end) into out with the unreserved escapes decoded and the
 * others in upper case; returns the length written. A '%' that is not an
 * escape is copied, and *bad_escape set. */
static size_t uri_path_decode(const char *path, size_t end, char *out, bool *bad_escape)
{
	static const char upper[] = "0123456789ABCDEF";
	size_t w = 0;

	for (size_t r = 0; r < end; r++) {
		int high, low;

		if (path[r] != '%') {
			out[w++] = path[r];
			continue;
		}
		if (r + 2 >= end || (high = uri_path_hex(path[r + 1])) < 0 ||
		    (low = uri_path_hex(path[r + 2])) < 0) {
			*bad_escape = true;
			out[w++] = path[r];
			continue;
		}
		if (uri_path_unreserved((unsigned char)(high * 16 + low))) {
			out[w++] = (char)(high * 16 + low);
		} else {
			out[w++] = '%';
			out[w++] = upper[high];
			out[w++] = upper[low];
		}
		r += 2;
	}
	return w;
}

/* Remove the "." and ".." segments of out[0..len), which starts with '/',
 * in place (RFC 3986 section 5.2.4), then merge its empty segments (as
 * nginx and Apache do); returns the new length. A dot segment at the end
 * leaves the '/' before it (/a/. is /a/, /a/.. is /), unless keep_last:
 * then it is kept as a segment. *ambiguous is set when a ".." removes an
 * empty segment (/a//..): whether the empty segments are merged first
 * (nginx) or not (RFC 3986, Node, Envoy), the path names another
 * resource. */
static size_t uri_path_remove_dots(char *out, size_t len, bool keep_last, bool *ambiguous)
{
	size_t r = 0;
	size_t w = 0;
	size_t merged = 0;

	while (r < len) {
		/* out[r] is a '/': the segment runs to the next one */
		size_t start = r + 1;
		const char *slash = memchr(out + start, '/', len - start);
		size_t next = slash != NULL ? (size_t)(slash - out) : len;
		size_t dots = next == len && keep_last ? 0 : uri_path_dot_segment(out, start, next);

		if (dots == 2) {
			/* drop the last segment written and the '/' before it */
			if (w > 0 && out[w - 1] == '/')
				*ambiguous = true;
			while (w > 0 && out[w - 1] != '/')
				w--;
			if (w > 0)
				w--;
		}
		if (dots != 0) {
			if (next == len)
				out[w++] = '/';
		} else {
			memmove(out + w, out + r, next - r);
			w += next - r;
		}
		r = next;
	}
	for (size_t i = 0; i < w; i++)
		if (out[i] != '/' || merged == 0 || out[merged - 1] != '/')
			out[merged++] = out[i];
	return merged;
}

size_t uri_path_normalize(const char *path, size_t len, char *out, enum uri_path_trouble *trouble)
{
	size_t end = uri_path_end(path, len);
	bool bad_escape = false;
	bool ambiguous = false;
	size_t w;

	if (trouble != NULL)
		*trouble = URI_PATH_FINE;
	if (end == 0 || path[0] != '/') {
		memcpy(out, path, len);
		return len;
	}
	w = uri_path_decode(path, end, out, &bad_escape);
	w = uri_path_remove_dots(out, w, false, &ambiguous);
	memcpy(out + w, path + end, len - end);
	if (trouble != NULL && bad_escape)
		*trouble = URI_PATH_BAD_ESCAPE;
	else if (trouble != NULL && ambiguous)
		*trouble = URI_PATH_AMBIGUOUS;
	return w + len - end;
}

ssize_t uri_path_normalize_prefix(const char *prefix, size_t len, char *out)
{
	size_t end = uri_path_end(prefix, len);
	bool bad_escape = false;
	bool ambiguous = false;
	size_t n = uri_path_decode(prefix, end, out, &bad_escape);

	if (bad_escape)
		return -1;
	/* a dot segment the prefix goes on past: refused, not quietly
	 * removed (/v1/charges/../ would be a route for all of /v1/) */
	for (size_t i = 0; i + 1 < n; i++)
		if (out[i] == '/') {
			size_t dots = uri_path_dot_segment(out, i + 1, n);

			if (dots != 0 && i + 1 + dots < n)
				return -1;
		}
	if (end == 0 || prefix[0] != '/') {
		memcpy(out, prefix, len);
		return (ssize_t)len;
	}
	/* what is left to do is merge empty segments; a last one of dots is
	 * the start of a name */
	n = uri_path_remove_dots(out, n, true, &ambiguous);
	memcpy(out + n, prefix + end, len - end);
	return (ssize_t)(n + len - end);
}
