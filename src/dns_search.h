#ifndef RETRYPROXY_DNS_SEARCH_H
#define RETRYPROXY_DNS_SEARCH_H

/*
 * The search list walked by the proxy rather than by evdns: evdns goes on
 * to the next candidate after a truncated answer as after NXDOMAIN, so its
 * own walk hides a candidate that exists but answers over 512 bytes, and
 * reports the last candidate's error instead. The proxy asks evdns one
 * candidate at a time (DNS_QUERY_NO_SEARCH), in evdns's order, and retries
 * a truncated one over TCP (dns_tcp.h).
 */

#include <stdbool.h>
#include <stddef.h>

struct resolv_conf;

/* The names a lookup of name (without a trailing dot) asks, in order, as
 * libevent 2.1 orders them: with no search list (conf NULL, or an absolute
 * name) name alone; with ndots or more dots name first, then name.domain
 * for each domain; with fewer, name.domain for each, then name. The list
 * (*names, count returned) is freed by dns_search_free(). */
size_t dns_search_candidates(const struct resolv_conf *conf, const char *name, bool absolute,
			     char ***names);
void dns_search_free(char **names, size_t count);

/* After a candidate's answer with this DNS_ERR_* error, does evdns's walk
 * go on to the next candidate (NXDOMAIN, no data, REFUSED, ...) or end
 * there (a timeout, which a SERVFAIL becomes in libevent 2.1)? */
bool dns_search_goes_on(int error);

#endif
