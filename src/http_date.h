#ifndef RETRYPROXY_HTTP_DATE_H
#define RETRYPROXY_HTTP_DATE_H

/*
 * HTTP-dates (RFC 9110 section 5.6.7): Retry-After's date form, the Date
 * and Last-Modified a resume compares, and the Date the proxy sends.
 */

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Parse an HTTP-date in any of its three formats (IMF-fixdate, RFC 850,
 * asctime) into seconds since the epoch; -1 when it is not one. now places
 * an RFC 850 two-digit year. The weekday is read but not checked against
 * the date. */
int http_date_parse(const char *s, size_t len, time_t now, int64_t *when);

/* Bytes of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"). */
#define HTTP_DATE_LEN 29

/* Second t as an IMF-fixdate in out (HTTP_DATE_LEN bytes and a NUL); a
 * time gmtime() cannot place, or past year 9999, leaves out unchanged. */
void http_date_format(time_t t, char *out);

/* The current second of the wall clock, read precisely: time() reads the
 * kernel's coarse clock, up to a tick behind, which can date a response a
 * second before a client's own precise reading taken just before it. */
time_t http_date_clock(void);

/* The current second as an IMF-fixdate, HTTP_DATE_LEN bytes and a NUL, for
 * the Date field the proxy adds (RFC 9110 section 6.6.1); formatted once a
 * second. The buffer is overwritten by the next call in another second. */
const char *http_date_now(void);

#endif
