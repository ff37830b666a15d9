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

/* Why a request is safe to repeat: what --explain prints, and what tells
 * the exchange a request is retryable only by a precondition or a key. */
enum idempotency_reason {
	IDEMPOTENCY_REASON_NONE,       /* not safe (or not known yet: NEEDS_BODY) */
	IDEMPOTENCY_REASON_METHOD,     /* the method is in the map's methods */
	IDEMPOTENCY_REASON_QUERY,      /* a when_present query parameter is in the target */
	IDEMPOTENCY_REASON_HEADER,     /* a when_present header is in the request */
	IDEMPOTENCY_REASON_JSON_FIELD, /* a when_present member is in the JSON body */
	IDEMPOTENCY_REASON_KEY,	       /* idempotency_key: inject, and the request carries an
					* Idempotency-Key or gets one */
};

/* A verdict's reason, and the when_present name it rests on (QUERY, HEADER,
 * JSON_FIELD; NULL otherwise, pointing into the config). */
struct idempotency_why {
	enum idempotency_reason reason;
	const char *name;
};

/* The request header that carries an idempotency key. */
#define IDEMPOTENCY_KEY_HEADER "Idempotency-Key"

/* A request field as it goes upstream: absent (or hop-by-hop: named in
 * the request's Connection field, say, the proxy removes it, so the
 * upstream never sees it), there with an empty value (nothing but commas
 * and whitespace), or there with a value. */
enum idempotency_field {
	IDEMPOTENCY_FIELD_ABSENT,
	IDEMPOTENCY_FIELD_EMPTY,
	IDEMPOTENCY_FIELD_VALUE,
};

/* Whether forwarded fields named name are there with values, or one of them
 * is empty (on any line: a server may read that copy alone), or none is
 * there; an If-Match with "*" among its members, on any line, counts as
 * empty (it holds for any version), so does an If-None-Match with any
 * member but "*" (an entity-tag holds again after the write succeeded),
 * and so does an If-Unmodified-Since an
 * origin must ignore (RFC 9110 section 13.1.4): a value that is not one
 * HTTP-date, a second line, or an If-Match in the request. head may be
 * NULL for no fields. */
enum idempotency_field idempotency_forwarded_field(const struct http1_head *head, const char *name);

/* Is the method one of those the map lists (exact, case-sensitive)? */
bool idempotency_method_listed(const struct idempotency *idem, const char *method,
			       size_t method_len);

/* Decide from the request head: the method is in idem->methods (exact,
 * case-sensitive), or a query or header when_present condition is present.
 * query/query_len is the request target's query, after the '?' and without
 * it (may be empty). A query parameter is present only with '=' and a
 * non-empty value (servers read "?ifGenerationMatch=" as no condition); its
 * name compares after percent-decoding, with exact case, and a name with a
 * '+' or a malformed %-escape matches nothing (form decoding would read '+'
 * as a space, plain RFC 3986 as a plus). Header names compare
 * case-insensitively; a header is present only with a value
 * (IDEMPOTENCY_FIELD_VALUE); head may be NULL for no headers. NEEDS_BODY
 * only when no condition matched, a json_field condition exists, has_body
 * is true and the Content-Type, if any, is application/json or +json.
 * Never allocates. */
enum idempotency_verdict idempotency_check_head(const struct idempotency *idem, const char *method,
						size_t method_len, const char *query,
						size_t query_len, const struct http1_head *head,
						bool has_body);

/* idempotency_check_head() with retry.idempotency_key, saying why (why may
 * be NULL). Checked in order: the method, the query and header conditions,
 * then, with IDEMPOTENCY_KEY_INJECT, the key: a request no earlier check
 * made safe is safe by the Idempotency-Key it carries or the one the proxy
 * adds to it (SPEC "More retry controls"), so NEEDS_BODY never comes with
 * inject; but not by an empty Idempotency-Key of its own, which no upstream
 * can recognise a repeat by. Never allocates. */
enum idempotency_verdict idempotency_decide_head(const struct idempotency *idem,
						 enum idempotency_key_mode key_mode,
						 const char *method, size_t method_len,
						 const char *query, size_t query_len,
						 const struct http1_head *head, bool has_body,
						 struct idempotency_why *why);

/* The reason's words as --explain prints them: "yes (method)", "yes (query
 * NAME)", "yes (header NAME)", "yes (json_field NAME)", "yes
 * (idempotency_key)" or "no", into buf of size len (truncated to fit). */
void idempotency_why_text(const struct idempotency_why *why, char *buf, size_t len);

/* With the decoded request body: the name of the first json_field condition
 * the body satisfies (as idempotency_check_json_body() decides), or NULL. */
const char *idempotency_json_body_field(const struct idempotency *idem, const char *body,
					size_t len);

/* With the decoded request body: true when it is a JSON object with a
 * top-level member named by a json_field condition whose value is not null
 * or "" (many APIs read those as "not given"). Parsed with jansson, rejecting
 * duplicate keys (parsers disagree on which one wins) and bodies over
 * IDEMPOTENCY_JSON_MAX_BYTES or nested deeper than
 * IDEMPOTENCY_JSON_MAX_DEPTH; any failure gives false. */
bool idempotency_check_json_body(const struct idempotency *idem, const char *body, size_t len);

/* True when the map has a json_field condition at all, so a caller can
 * tell whether keeping a body for idempotency_check_json_body is worth it. */
bool idempotency_has_json_field(const struct idempotency *idem);

#endif
