#ifndef RETRYPROXY_IDEMPOTENCY_H
#define RETRYPROXY_IDEMPOTENCY_H

/*
 * Is a request safe to repeat, by its route's idempotency map (SPEC
 * "Configuration": routes[].idempotent)? Pure: the head decision never
 * allocates; only the JSON body check does, inside jansson. Where a request
 * could be read two ways, the answer is "not present": a false "safe" could
 * repeat a write, a false "unsafe" only costs a retry.
 */

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "http1.h"

/* JSON bodies larger than this are not parsed: the condition is "absent". */
#define IDEMPOTENCY_JSON_MAX_BYTES (16u * 1024 * 1024)
/* Nesting deeper than this is not parsed either; real request bodies are
 * shallow, and it keeps a hostile body from costing much. */
#define IDEMPOTENCY_JSON_MAX_DEPTH 64

enum idempotency_verdict {
	IDEMPOTENCY_YES, /* safe to repeat */
	IDEMPOTENCY_NO,	 /* not safe to repeat */
	IDEMPOTENCY_NEEDS_BODY, /* only a json_field condition could make it safe: ask again with the body */
};

/* Why the decision came out as it did: the one list of reasons the proxy
 * and --explain share. idempotency_reason_format() words them from one
 * table, so a new reason is a member here and a word there. */
enum idempotency_reason {
	IDEMPOTENCY_REASON_NONE,	 /* not safe to repeat, or not decided yet (NEEDS_BODY) */
	IDEMPOTENCY_REASON_METHOD,	 /* the method is in the map's methods */
	IDEMPOTENCY_REASON_WHEN_PRESENT, /* a when_present condition is met: decision.condition */
};

/* A verdict with its reason. */
struct idempotency_decision {
	enum idempotency_verdict verdict;
	enum idempotency_reason reason;
	const struct when_present *condition; /* the condition met, with REASON_WHEN_PRESENT */
};

/* Is the method one of those the map lists (exact, case-sensitive)? */
bool idempotency_method_listed(const struct idempotency *idem, const char *method,
			       size_t method_len);

/* Decide from the request head: the method is in idem->methods (exact,
 * case-sensitive), or a query or header when_present condition is present.
 * query/query_len is the request target's query, after the '?' and without
 * it (may be empty). A query parameter is present with or without '=' and a
 * value; its name compares after percent-decoding, with exact case, and a
 * name with a '+' or a malformed %-escape matches nothing (form decoding
 * would read '+' as a space, plain RFC 3986 as a plus). Header names compare
 * case-insensitively; a header is present even with an empty value; head
 * may be NULL for no headers. NEEDS_BODY only when no condition matched, a
 * json_field condition exists and has_body is true. Never allocates. */
enum idempotency_verdict idempotency_check_head(const struct idempotency *idem, const char *method,
						size_t method_len, const char *query,
						size_t query_len, const struct http1_head *head,
						bool has_body);

/* idempotency_check_head() with the reason: which method or condition made
 * the request safe to repeat. */
struct idempotency_decision idempotency_decide_head(const struct idempotency *idem,
						    const char *method, size_t method_len,
						    const char *query, size_t query_len,
						    const struct http1_head *head, bool has_body);

/* idempotency_check_json_body() with the reason: YES naming the json_field
 * condition the body meets, else NO. */
struct idempotency_decision idempotency_decide_json_body(const struct idempotency *idem,
							 const char *body, size_t len);

/* The reason in words, as --explain prints it inside "yes (...)": "method",
 * "query NAME", "header NAME", "json_field NAME"; "" for
 * IDEMPOTENCY_REASON_NONE. Truncated to size bytes. */
void idempotency_reason_format(const struct idempotency_decision *decision, char *buf, size_t size);

/* With the decoded request body: true when it is a JSON object with a
 * top-level member named by a json_field condition whose value is not null
 * (many APIs read null as "not given"). Parsed with jansson, rejecting
 * duplicate keys (parsers disagree on which one wins) and bodies over
 * IDEMPOTENCY_JSON_MAX_BYTES or nested deeper than
 * IDEMPOTENCY_JSON_MAX_DEPTH; any failure gives false. */
bool idempotency_check_json_body(const struct idempotency *idem, const char *body, size_t len);

/* True when the map has a json_field condition at all, so a caller can
 * tell whether keeping a body for idempotency_check_json_body is worth it. */
bool idempotency_has_json_field(const struct idempotency *idem);

#endif
