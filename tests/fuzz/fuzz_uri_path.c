/* The path normal form against a second, literal reading of RFC 3986: the
 * escapes decoded by a byte loop of its own, the dot segments removed with
 * section 5.2.4's five rules as the RFC writes them, on an input and an
 * output buffer, then runs of '/' made one. Both must agree, and where the
 * proxy sees no trouble, merging the slashes first (as nginx does) must give
 * the same path; a stray '%' must be the trouble exactly when there is one.
 * The normal form is never longer than the path, keeps the query as it was
 * and, without trouble, is its own normal form; a path uri_path_is_normal()
 * lets through comes out unchanged. A route prefix is refused or comes out
 * as its own normal form. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "uri_path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Does s[0..len) start with prefix? */
static bool fuzz_starts(const char *s, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);

	return len >= n && memcmp(s, prefix, n) == 0;
}

/* Is s[0..len) exactly whole? */
static bool fuzz_is(const char *s, size_t len, const char *whole)
{
	return len == strlen(whole) && memcmp(s, whole, len) == 0;
}

/* Section 5.2.4, rule by rule; in holds the decoded path and is consumed. */
static size_t fuzz_remove_dots(char *in, size_t len, char *out)
{
	size_t o = 0;

	while (len > 0) {
		if (fuzz_starts(in, len, "../")) {
			in += 3, len -= 3;
		} else if (fuzz_starts(in, len, "./")) {
			in += 2, len -= 2;
		} else if (fuzz_starts(in, len, "/./")) {
			in += 2, len -= 2;
		} else if (fuzz_is(in, len, "/.")) {
			in[1] = '/', in += 1, len -= 1;
		} else if (fuzz_starts(in, len, "/../") || fuzz_is(in, len, "/..")) {
			if (len == 3)
				in[2] = '/', in += 2, len -= 2;
			else
				in += 3, len -= 3;
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		} else if (fuzz_is(in, len, ".") || fuzz_is(in, len, "..")) {
			len = 0;
		} else {
			size_t n = 1;

			while (n < len && in[n] != '/')
				n++;
			memcpy(out + o, in, n);
			o += n, in += n, len -= n;
		}
	}
	return o;
}

/* The value of a hex digit, or -1 (written apart from uri_path_hex). */
static int fuzz_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Is every '%' in path[0..end) followed by two hex digits? Only then is the
 * normal form its own: a stray '%' before a decoded "%31" makes a new escape
 * ("%%31" is "%1", then U+0001), as it would for an origin decoding twice. */
static bool fuzz_escapes_valid(const char *path, size_t end)
{
	for (size_t i = 0; i < end; i++)
		if (path[i] == '%' &&
		    (i + 2 >= end || fuzz_hex(path[i + 1]) < 0 || fuzz_hex(path[i + 2]) < 0))
			return false;
	return true;
}

/* The reference normal form: decode, remove dots, query as it was. */
/* Make each run of '/' in s[0..len) one; returns the new length. */
static size_t fuzz_merge_slashes(char *s, size_t len)
{
	size_t w = 0;

	for (size_t i = 0; i < len; i++)
		if (!(s[i] == '/' && w > 0 && s[w - 1] == '/'))
			s[w++] = s[i];
	return w;
}

static size_t fuzz_reference(const char *path, size_t len, char *out, bool merge_first)
{
	const char *q = memchr(path, '?', len);
	size_t end = q != NULL ? (size_t)(q - path) : len;
	char *decoded = malloc(end + 1);
	size_t d = 0;
	size_t o;

	if (decoded == NULL)
		abort();
	for (size_t i = 0; i < end; i++) {
		int hi = i + 2 < end && path[i] == '%' ? fuzz_hex(path[i + 1]) : -1;
		int lo = hi >= 0 ? fuzz_hex(path[i + 2]) : -1;
		char c;

		if (lo < 0) {
			decoded[d++] = path[i];
			continue;
		}
		c = (char)(hi * 16 + lo);
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    (c != '\0' && strchr("-._~", c) != NULL)) {
			decoded[d++] = c;
		} else {
			decoded[d++] = '%';
			decoded[d++] = "0123456789ABCDEF"[hi];
			decoded[d++] = "0123456789ABCDEF"[lo];
		}
		i += 2;
	}
	if (end == 0 || path[0] != '/') {
		memcpy(out, path, len);
		free(decoded);
		return len;
	}
	/* runs of '/' made one before the dots are removed (nginx), or after
	 * (the proxy's normal form) */
	if (merge_first)
		d = fuzz_merge_slashes(decoded, d);
	o = fuzz_remove_dots(decoded, d, out);
	if (!merge_first)
		o = fuzz_merge_slashes(out, o);
	free(decoded);
	memcpy(out + o, path + end, len - end);
	return o + len - end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = (const char *)data;
	char *normal = malloc(size + 1);
	char *again = malloc(size + 1);
	char *reference = malloc(size + 1);
	size_t n, m, r;
	enum uri_path_trouble trouble;
	const char *q = memchr(path, '?', size);

	if (normal == NULL || again == NULL || reference == NULL)
		abort();
	n = uri_path_normalize(path, size, normal, &trouble);
	if (n > size)
		abort();
	r = fuzz_reference(path, size, reference, false);
	if (r != n || memcmp(reference, normal, n) != 0)
		abort();
	/* without trouble, merging first (as nginx) reads the same path */
	if (trouble == URI_PATH_FINE) {
		r = fuzz_reference(path, size, reference, true);
		if (r != n || memcmp(reference, normal, n) != 0)
			abort();
	}
	/* a path that does not start with '/' is left as it is */
	if (size > 0 && path[0] == '/' &&
	    (trouble == URI_PATH_BAD_ESCAPE) !=
		    !fuzz_escapes_valid(path, q != NULL ? (size_t)(q - path) : size))
		abort();
	m = uri_path_normalize(normal, n, again, NULL);
	if (trouble == URI_PATH_FINE && (m != n || memcmp(again, normal, n) != 0))
		abort();
	if (uri_path_is_normal(path, size) && (n != size || memcmp(normal, path, size) != 0))
		abort();
	if (q != NULL) {
		size_t query_len = size - (size_t)(q - path);

		if (n < query_len || memcmp(normal + n - query_len, q, query_len) != 0)
			abort();
	}
	/* as a route prefix: refused, or no longer and its own normal form */
	{
		ssize_t p = uri_path_normalize_prefix(path, size, normal);

		if (p > (ssize_t)size)
			abort();
		if (p >= 0) {
			ssize_t p2 = uri_path_normalize_prefix(normal, (size_t)p, again);

			if (p2 != p || memcmp(again, normal, (size_t)p) != 0)
				abort();
		}
	}
	free(normal);
	free(again);
	free(reference);
	return 0;
}
