#ifndef RETRYPROXY_HTTP1_RESUME_H
#define RETRYPROXY_HTTP1_RESUME_H

/*
 * A request head that arrives in pieces, parsed without starting over on
 * every read: between reads only the new bytes are looked at, following the
 * head's grammar byte by byte, and only a byte after which the parser could
 * say something new (the end of the head, of the request line or of its
 * version, a byte that breaks the grammar where it is, one field too many, a
 * target over the limit) calls the whole-head parser (http1.c) again. A
 * head that arrives in one read costs one parse, as without this.
 */

#include <stdbool.h>
#include <stddef.h>

#include "http1.h"

/* Where one connection's head parse stopped. Zeroed before the first read
 * of a connection; a parse that ends (DONE or ERROR) makes it ready for the
 * next head itself. */
struct http1_resume {
	size_t scanned;		 /* bytes from the buffer's start looked at, valid so far; 0: none,
			      * and then the fields up to examined are 0 too */
	size_t target_start;	 /* offset of the request-target once known, else 0 */
	size_t part_start;	 /* offset where the scan's part of its line began (private) */
	unsigned fields;	 /* field lines begun (private) */
	unsigned char at;	 /* where the last scanned byte left the line scan (private) */
	unsigned char part;	 /* ... and which part of the line it is in (private) */
	bool line_ended;	 /* the request line ended in the scanned bytes */
	size_t max_head_bytes;	 /* the limits of the call that scanned (private) */
	size_t max_target_bytes; /* ... a call with others starts over */
	size_t examined;	 /* bytes looked at in all, over every call (for the tests) */
};

/* http1_parse_request_head() over buf, which holds what an earlier call saw
 * plus any bytes read since, looking again only at those: the same result,
 * error and head, as soon as the one-shot parse would give them. */
enum http1_parse http1_resume_request_head(struct http1_resume *resume, const char *buf, size_t len,
					   const struct http1_limits *limits,
					   struct http1_head *head, enum http1_error *error);

#endif
