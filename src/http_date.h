#ifndef RETRYPROXY_HTTP_DATE_H
#define RETRYPROXY_HTTP_DATE_H

/*
 * HTTP-dates (RFC 9110 section 5.6.7): Retry-After's date form, and the
 * Date and Last-Modified a resume compares.
 */

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Parse an HTTP-date in any of its three formats (IMF-fixdate, RFC 850,
 * asctime) into seconds since the epoch; -1 when it is not one. now places
 * an RFC 850 two-digit year. The weekday is read but not checked against
 * the date. */
int http_date_parse(const char *s, size_t len, time_t now, int64_t *when);

#endif
