#ifndef RETRYPROXY_EXPLAIN_H
#define RETRYPROXY_EXPLAIN_H

/*
 * retryproxy --explain (SPEC "Command line"): what the proxy would do with
 * one request, printed as key: value lines. The answer comes from the code
 * the proxy itself runs: the request head is parsed by http1.c, the route and
 * the upstream chosen by route_destination(), idempotency decided by
 * idempotency.c, the waits computed by retry_wait_range() and bounded by
 * retry_within_deadline(). Nothing listens, sends or resolves.
 */

#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* The request to explain, as given on the command line. */
struct explain_request {
	const char *method;
	const char *url;	    /* absolute http:// or https:// */
	const char *const *headers; /* "Name: value", as given to -H */
	size_t header_count;
	const char *body_path; /* --body FILE: the body's content; NULL for no body */
};

/* Print what the proxy would do with request under config to out: route,
 * upstream, idempotent, retry_on, max_attempts, deadline, waits. Notes on how
 * the request was seen go to err. Returns 0, or -1 after writing to err why
 * the request description is bad (method, URL, header line, body file) or why
 * the proxy would refuse the request outright. */
int explain_run(const struct config *config, const struct explain_request *request, FILE *out,
		FILE *err);

#endif
