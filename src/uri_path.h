#ifndef RETRYPROXY_URI_PATH_H
#define RETRYPROXY_URI_PATH_H

/*
 * A request path in the form routes match it by, the resource origins
 * serve for it: RFC 3986 section 6.2.2's normalisation, which changes the
 * spelling but not the resource, plus the merging of doubled slashes that
 * nginx and Apache do by default. Percent-encoded unreserved characters are
 * decoded (/v1/%63harges is /v1/charges), the hex digits of the other
 * escapes are put in upper case (%2f is %2F), empty segments are merged
 * (/v1//charges is /v1/charges), and "." and ".." segments are removed
 * (section 5.2.4: /v1/x/../charges is /v1/charges). Left as they are: the
 * query, from the first '?'; a path that does not start with "/"; an
 * escaped '/' (%2F), which is data in
 * APIs that put names with slashes in one segment (Cloud Storage objects);
 * and ';' parameters, which only some servers strip. Pure: no I/O, no
 * allocation.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Is path (with its query) already normal? Most are; the check is a scan
 * for '%' and one for each '/'. Any '%' before the query sends a path to
 * uri_path_normalize. */
bool uri_path_is_normal(const char *path, size_t len);

/* What makes a path's normal form unfit to route on. */
enum uri_path_trouble {
	URI_PATH_FINE,
	URI_PATH_BAD_ESCAPE, /* a '%' not followed by two hex digits: origins
			      * refuse it (nginx, Go) or read it each their own way */
	URI_PATH_AMBIGUOUS,  /* a ".." that removes an empty segment (/a//..):
			      * another resource whether empty segments are merged
			      * first (nginx) or not (RFC 3986, Node, Envoy) */
};

/* Write the normal form of path (with its query) into out, which has room
 * for len bytes (it never grows), and return its length; *trouble (may be
 * NULL) says whether it is fit to route on. out may not overlap path. */
size_t uri_path_normalize(const char *path, size_t len, char *out, enum uri_path_trouble *trouble);

/* A route's path prefix in the form request paths are matched in, into out
 * (room for len bytes): as uri_path_normalize, except that its last
 * segment may be cut short, so one that reads "." or ".." (the start of
 * "/.env") is kept. Returns the length, or -1 for a prefix that cannot be
 * meant as written: one with a '%' not followed by two hex digits, or a "."
 * or ".." segment before its end. */
ssize_t uri_path_normalize_prefix(const char *prefix, size_t len, char *out);

/* The value of one hex digit of a percent-escape, or -1. */
int uri_path_hex(char c);

#endif
