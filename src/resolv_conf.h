#ifndef RETRYPROXY_RESOLV_CONF_H
#define RETRYPROXY_RESOLV_CONF_H

/*
 * What a resolv.conf says to the name lookups that evdns gives no getter
 * for: the search list and ndots (the proxy walks the search list itself,
 * see dns_search.h) and the timeout and attempts (which the TCP retry of a
 * truncated answer keeps to, see dns_tcp.h), and the questions out at
 * once (which name_lookup.c keeps to when it gives one up). Read as libevent 2.1's
 * evdns_base_resolv_conf_parse() reads the file, so that both agree.
 */

#include <stddef.h>
#include <stdint.h>

struct resolv_conf {
	int ndots;	     /* a name with this many dots is asked as it is first */
	char **domains;	     /* the search list, in order; no leading dot */
	size_t domain_count; /* 0: a name is asked as it is only */
	uint64_t timeout_ms; /* one attempt's wait */
	int attempts;	     /* how many times a question is sent */
	int max_inflight;    /* questions sent at once; the rest wait in a queue */
};

/* Questions out at once unless the file says otherwise (its "options
 * max-inflight:"): the proxy's, not libevent's 64, which let 32 names whose
 * questions go unanswered hold every other name's lookup in the queue. */
#define RESOLV_CONF_MAX_INFLIGHT 1024

/* libevent's defaults: ndots 1, no search list, 5 s, 3 attempts; and the
 * proxy's RESOLV_CONF_MAX_INFLIGHT. */
struct resolv_conf *resolv_conf_new(void);
void resolv_conf_free(struct resolv_conf *conf);

/* Take what the file at path says, from the defaults; a file that cannot
 * be read gives the defaults, as to evdns. The host name's domain is the
 * search list when the file gives none. */
void resolv_conf_read(struct resolv_conf *conf, const char *path);

/* The same for a file's text, hostname standing for gethostname()'s. */
void resolv_conf_parse(struct resolv_conf *conf, const char *text, const char *hostname);

#endif
