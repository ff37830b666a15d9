/* The path normal form against a second, literal reading of RFC 3986: the
 * escapes decoded by a byte loop of its own, runs of '/' made one, then the
 * dot segments removed with section 5.2.4's five rules as the RFC writes
 * them, on an input and an output buffer. Both must agree; the normal form must never be longer than
 * the path, keep the query as it was, be its own normal form where every
 * escape is well formed, and a path uri_path_is_normal() lets through must
 * come out unchanged. A route prefix is refused or comes out as its own
 * normal form. */

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
static size_t fuzz_reference(const char *path, size_t len, char *out)
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
	/* doubled slashes merged first, as nginx does */
	for (size_t i = 0, w = 0;; i++) {
		if (i == d) {
			d = w;
			break;
		}
		if (!(decoded[i] == '/' && w > 0 && decoded[w - 1] == '/'))
			decoded[w++] = decoded[i];
	}
	o = fuzz_remove_dots(decoded, d, out);
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
	const char *q = memchr(path, '?', size);

	if (normal == NULL || again == NULL || reference == NULL)
		abort();
	n = uri_path_normalize(path, size, normal);
	if (n > size)
		abort();
	r = fuzz_reference(path, size, reference);
	if (r != n || memcmp(reference, normal, n) != 0)
		abort();
	m = uri_path_normalize(normal, n, again);
	if (fuzz_escapes_valid(path, q != NULL ? (size_t)(q - path) : size) &&
	    (m != n || memcmp(again, normal, n) != 0))
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
