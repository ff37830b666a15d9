/* Is a request safe to repeat? The client's head, through the strict
 * parser, then the route's idempotency map (idempotency.h), against a
 * reference written from the documented rules, the slow way: a query
 * parameter's name decoded into a buffer of its own and compared whole;
 * each forwarded field line read as a list of members; the verdict put
 * together in the map's order. A false "safe" repeats a client's write, so
 * every YES must have its reason in the request, and the reason's name
 * must be the one the reference finds first.
 *
 * The first input byte picks the map (all conditions, or only
 * If-Unmodified-Since and one query parameter, so that the date rules
 * decide), retry.idempotency_key (none or inject) and whether the request
 * has a body; the rest is the request head. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http1.h"
#include "http_date.h"
#include "idempotency.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;

static char fuzz_get[] = "GET";
static char fuzz_head_method[] = "HEAD";
static char fuzz_put[] = "PUT";
static char fuzz_delete[] = "DELETE";
static char fuzz_generation[] = "ifGenerationMatch";
static char fuzz_space[] = "a b";
static char fuzz_plus[] = "x+y";
static char fuzz_if_match[] = "If-Match";
static char fuzz_if_none_match[] = "If-None-Match";
static char fuzz_unmodified[] = "If-Unmodified-Since";
static char fuzz_goog[] = "x-goog-if-generation-match";
static char fuzz_etag[] = "etag";

static char *fuzz_methods[] = { fuzz_get, fuzz_head_method, fuzz_put, fuzz_delete };
static struct when_present fuzz_all_when[] = {
	{ WHEN_PRESENT_QUERY, fuzz_generation }, { WHEN_PRESENT_HEADER, fuzz_if_match },
	{ WHEN_PRESENT_QUERY, fuzz_space },	 { WHEN_PRESENT_HEADER, fuzz_if_none_match },
	{ WHEN_PRESENT_JSON_FIELD, fuzz_etag },	 { WHEN_PRESENT_QUERY, fuzz_plus },
	{ WHEN_PRESENT_HEADER, fuzz_goog },	 { WHEN_PRESENT_HEADER, fuzz_unmodified },
};
static struct when_present fuzz_date_when[] = {
	{ WHEN_PRESENT_HEADER, fuzz_unmodified },
	{ WHEN_PRESENT_QUERY, fuzz_generation },
};
static const struct idempotency fuzz_maps[] = {
	{ fuzz_methods, 4, fuzz_all_when, sizeof(fuzz_all_when) / sizeof(fuzz_all_when[0]) },
	{ NULL, 0, fuzz_date_when, sizeof(fuzz_date_when) / sizeof(fuzz_date_when[0]) },
};

/* The value of a hex digit, or -1. */
static int fuzz_hex(char c)
{
	static const char digits[] = "0123456789abcdef";
	const char *at;

	if (c >= 'A' && c <= 'F')
		c = (char)(c - 'A' + 'a');
	at = c != '\0' ? strchr(digits, c) : NULL;
	return at != NULL ? (int)(at - digits) : -1;
}

/* Does a server that drops what it cannot read (Go's net/url) drop this
 * name=value pair? One with a ';', or a '%' without two hex digits after
 * it, anywhere in it. */
static bool fuzz_ref_pair_dropped(const char *pair, size_t len)
{
	for (size_t k = 0; k < len; k++) {
		if (pair[k] == ';')
			return true;
		if (pair[k] == '%' &&
		    (k + 2 >= len || fuzz_hex(pair[k + 1]) < 0 || fuzz_hex(pair[k + 2]) < 0))
			return true;
	}
	return false;
}

/* The reference query check: each '&'-separated parameter's name decoded
 * into a buffer (a '+' or a '%' not followed by two hex digits makes it
 * no name at all), compared with name whole; a match without '=', with an
 * empty value, or that some server drops, spoils every other. */
static bool fuzz_ref_query_has(const char *query, size_t len, const char *name)
{
	char *decoded = malloc(len + 1);
	bool valued = false;
	bool spoiled = false;
	size_t start = 0;

	if (decoded == NULL)
		abort();
	for (size_t i = 0; i <= len; i++) {
		size_t n = 0, name_end;
		const char *eq;
		bool ok = true;

		if (i < len && query[i] != '&')
			continue;
		eq = memchr(query + start, '=', i - start);
		name_end = eq != NULL ? (size_t)(eq - query) : i;
		for (size_t j = start; j < name_end && ok; j++) {
			if (query[j] == '+') {
				ok = false;
			} else if (query[j] != '%') {
				decoded[n++] = query[j];
			} else if (j + 2 < name_end && fuzz_hex(query[j + 1]) >= 0 &&
				   fuzz_hex(query[j + 2]) >= 0) {
				decoded[n++] = (char)(fuzz_hex(query[j + 1]) * 16 +
						      fuzz_hex(query[j + 2]));
				j += 2;
			} else {
				ok = false;
			}
		}
		if (ok && name_end > start && n == strlen(name) && memcmp(decoded, name, n) == 0) {
			if (eq == NULL || (size_t)(eq - query) + 1 == i ||
			    fuzz_ref_pair_dropped(query + start, i - start))
				spoiled = true;
			else
				valued = true;
		}
		start = i + 1;
	}
	free(decoded);
	return valued && !spoiled;
}

/* Is value[0..len) nothing but commas, SP and HTAB? */
static bool fuzz_list_empty(const char *value, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (value[i] != ',' && value[i] != ' ' && value[i] != '\t')
			return false;
	return true;
}

/* If-Match: does a member (commas inside quotes do not separate) start
 * with '*'? */
static bool fuzz_if_match_star(const char *value, size_t len)
{
	bool quoted = false;
	bool seen = false; /* a byte of the member other than whitespace */

	for (size_t i = 0; i < len; i++) {
		char c = value[i];

		if (quoted) {
			quoted = c != '"';
			continue;
		}
		if (c == ',') {
			seen = false;
		} else if (c != ' ' && c != '\t') {
			if (!seen && c == '*')
				return true;
			seen = true;
			quoted = c == '"';
		}
	}
	return false;
}

/* If-None-Match: is any word (split at commas and whitespace) other than
 * "*"? */
static bool fuzz_if_none_match_tag(const char *value, size_t len)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && value[i] != ',' && value[i] != ' ' && value[i] != '\t')
			continue;
		if (i > start && !(i - start == 1 && value[start] == '*'))
			return true;
		start = i + 1;
	}
	return false;
}

static bool fuzz_named(const struct http1_field *f, const char *name)
{
	return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

/* The reference for idempotency_forwarded_field(). */
static enum idempotency_field fuzz_ref_field(const struct http1_head *head, const bool *hop,
					     const char *name, time_t now)
{
	bool unmodified = strcasecmp(name, "If-Unmodified-Since") == 0;
	size_t lines = 0;

	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];
		int64_t when;

		if (hop[i] || !fuzz_named(f, name))
			continue;
		lines++;
		if (fuzz_list_empty(f->value, f->value_len))
			return IDEMPOTENCY_FIELD_EMPTY;
		if (strcasecmp(name, "If-Match") == 0 && fuzz_if_match_star(f->value, f->value_len))
			return IDEMPOTENCY_FIELD_EMPTY;
		if (strcasecmp(name, "If-None-Match") == 0 &&
		    fuzz_if_none_match_tag(f->value, f->value_len))
			return IDEMPOTENCY_FIELD_EMPTY;
		if (unmodified && (http_date_parse(f->value, f->value_len, now, &when) < 0 ||
				   when >= (int64_t)now))
			return IDEMPOTENCY_FIELD_EMPTY;
	}
	if (lines == 0)
		return IDEMPOTENCY_FIELD_ABSENT;
	/* two dates, or an If-Match an origin evaluates instead */
	if (unmodified &&
	    (lines > 1 || fuzz_ref_field(head, hop, "If-Match", now) != IDEMPOTENCY_FIELD_ABSENT))
		return IDEMPOTENCY_FIELD_EMPTY;
	return IDEMPOTENCY_FIELD_VALUE;
}

/* Could the body be JSON by its one Content-Type, or none? */
static bool fuzz_ref_maybe_json(const struct http1_head *head)
{
	const struct http1_field *type = NULL;
	size_t len;

	for (size_t i = 0; i < head->field_count; i++) {
		if (!fuzz_named(&head->fields[i], "Content-Type"))
			continue;
		if (type != NULL)
			return false;
		type = &head->fields[i];
	}
	if (type == NULL)
		return true;
	for (len = 0; len < type->value_len; len++)
		if (type->value[len] == ';' || type->value[len] == ' ' || type->value[len] == '\t')
			break;
	return (len == 16 && strncasecmp(type->value, "application/json", 16) == 0) ||
	       (len > 5 && strncasecmp(type->value + len - 5, "+json", 5) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };
	struct http1_framing framing;
	enum http1_error error;
	const struct idempotency *idem;
	enum idempotency_key_mode key_mode;
	enum idempotency_verdict verdict, want = IDEMPOTENCY_NO;
	struct idempotency_why why, want_why = { IDEMPOTENCY_REASON_NONE, NULL };
	bool has_body, json = false;
	bool hop[HTTP1_MAX_FIELDS];
	const struct http1_target *t;
	const char *query = NULL;
	size_t query_len = 0;
	time_t now;

	if (size < 1)
		return 0;
	idem = &fuzz_maps[data[0] & 1];
	key_mode = (data[0] & 2) != 0 ? IDEMPOTENCY_KEY_INJECT : IDEMPOTENCY_KEY_NONE;
	has_body = (data[0] & 4) != 0;
	if (http1_parse_request_head((const char *)data + 1, size - 1, &limits, &fuzz_head,
				     &error) != HTTP1_PARSE_DONE ||
	    http1_request_framing(&fuzz_head, &framing, &error) < 0)
		return 0;
	/* as the exchange takes it: the path's query, after the '?' */
	t = &fuzz_head.parsed_target;
	if (t->path_len > 0 && memchr(t->path, '?', t->path_len) != NULL) {
		query = (const char *)memchr(t->path, '?', t->path_len) + 1;
		query_len = t->path_len - (size_t)(query - t->path);
	}

	now = time(NULL);
	verdict = idempotency_decide_head(idem, key_mode, fuzz_head.method, fuzz_head.method_len,
					  query, query_len, &fuzz_head, has_body, &why);
	if (time(NULL) != now)
		return 0; /* a date at the current second reads either way */

	http1_hop_by_hop_marks(&fuzz_head, hop);
	for (size_t i = 0; i < idem->method_count && want == IDEMPOTENCY_NO; i++)
		if (strlen(idem->methods[i]) == fuzz_head.method_len &&
		    memcmp(idem->methods[i], fuzz_head.method, fuzz_head.method_len) == 0) {
			want = IDEMPOTENCY_YES;
			want_why.reason = IDEMPOTENCY_REASON_METHOD;
		}
	for (size_t i = 0; i < idem->when_present_count && want == IDEMPOTENCY_NO; i++) {
		const struct when_present *cond = &idem->when_present[i];

		if (cond->kind == WHEN_PRESENT_QUERY && query != NULL &&
		    fuzz_ref_query_has(query, query_len, cond->name)) {
			want = IDEMPOTENCY_YES;
			want_why = (struct idempotency_why){ IDEMPOTENCY_REASON_QUERY, cond->name };
		} else if (cond->kind == WHEN_PRESENT_HEADER &&
			   fuzz_ref_field(&fuzz_head, hop, cond->name, now) ==
				   IDEMPOTENCY_FIELD_VALUE) {
			want = IDEMPOTENCY_YES;
			want_why =
				(struct idempotency_why){ IDEMPOTENCY_REASON_HEADER, cond->name };
		} else if (cond->kind == WHEN_PRESENT_JSON_FIELD) {
			json = true;
		}
	}
	if (want == IDEMPOTENCY_NO && key_mode == IDEMPOTENCY_KEY_INJECT &&
	    fuzz_ref_field(&fuzz_head, hop, "Idempotency-Key", now) != IDEMPOTENCY_FIELD_EMPTY) {
		want = IDEMPOTENCY_YES;
		want_why.reason = IDEMPOTENCY_REASON_KEY;
	}
	if (want == IDEMPOTENCY_NO && json && has_body && fuzz_ref_maybe_json(&fuzz_head))
		want = IDEMPOTENCY_NEEDS_BODY;

	if (verdict != want || why.reason != want_why.reason || why.name != want_why.name)
		abort();
	return 0;
}
