#ifndef RETRYPROXY_URI_PATH_H
#define RETRYPROXY_URI_PATH_H

/*
 * A request path in the form routes match it by: the syntax-based
 * normalisation of RFC 3986 section 6.2.2, which changes the spelling but
 * not the resource an origin sees. Percent-encoded unreserved characters are
 * decoded (/v1/%63harges is /v1/charges), the hex digits of the other
 * escapes are put in upper case (%2f is %2F), and "." and ".." segments are
 * removed (section 5.2.4: /v1/x/../charges is /v1/charges). The query, from
 * the first '?', is left as it is, and so are a path that does not start
 * with "/" and an escape that is not '%' and two hex digits. Empty segments
 * stay (//a is not /a): origins differ on them. Pure: no I/O, no allocation.
 */

#include <stdbool.h>
#include <stddef.h>

/* Is path (with its query) already normal? Most are; the check is two scans
 * for '%' and '.', and may say no for a path that is normal but has a '%' or
 * something like a dot segment in its query. */
bool uri_path_is_normal(const char *path, size_t len);

/* The value of one hex digit of a percent-escape, or -1. */
int uri_path_hex(char c);

/* Write the normal form of path (with its query) into out, which has room
 * for len bytes (it never grows), and return its length. out may not
 * overlap path. */
size_t uri_path_normalize(const char *path, size_t len, char *out);

#endif
