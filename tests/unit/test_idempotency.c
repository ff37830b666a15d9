/*
 * Unit tests for idempotency.c: the head decision over literal requests
 * parsed by http1.c, and the JSON body check, each by table.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idempotency.h"

static char test_get[] = "GET";
static char test_head[] = "HEAD";
static char test_put[] = "PUT";
static char test_delete[] = "DELETE";
static char test_if_generation_match[] = "ifGenerationMatch";
static char test_if_metageneration_match[] = "ifMetagenerationMatch";
static char test_if_match[] = "If-Match";
static char test_goog_match[] = "x-goog-if-generation-match";
static char test_etag[] = "etag";
static char test_a_space_b[] = "a b";
static char test_x_plus_y[] = "x+y";
static char test_p_semicolon_q[] = "p;q";

static char *test_gcs_methods[] = { test_get, test_head, test_put, test_delete };
static struct when_present test_gcs_when[] = {
	{ WHEN_PRESENT_QUERY, test_if_generation_match },
	{ WHEN_PRESENT_QUERY, test_if_metageneration_match },
	{ WHEN_PRESENT_HEADER, test_if_match },
	{ WHEN_PRESENT_HEADER, test_goog_match },
	{ WHEN_PRESENT_JSON_FIELD, test_etag },
	{ WHEN_PRESENT_QUERY, test_a_space_b },
	{ WHEN_PRESENT_QUERY, test_x_plus_y },
	{ WHEN_PRESENT_QUERY, test_p_semicolon_q },
};
/* The route of SPEC's example, plus names with a space, a plus and a
 * semicolon. */
static const struct idempotency test_gcs = { test_gcs_methods, 4, test_gcs_when, 8 };

static char *test_get_only[] = { test_get };
static struct when_present test_no_json_when[] = {
	{ WHEN_PRESENT_QUERY, test_if_generation_match },
	{ WHEN_PRESENT_HEADER, test_if_match },
};
/* Conditions, but none on the body. */
static const struct idempotency test_no_json = { test_get_only, 1, test_no_json_when, 2 };

static char test_unmodified_since[] = "If-Unmodified-Since";
static struct when_present test_ius_when[] = { { WHEN_PRESENT_HEADER, test_unmodified_since } };
/* Only If-Unmodified-Since makes a write safe. */
static const struct idempotency test_ius = { NULL, 0, test_ius_when, 1 };

static char test_if_none_match[] = "If-None-Match";
static struct when_present test_inm_when[] = { { WHEN_PRESENT_HEADER, test_if_none_match } };
/* Only If-None-Match makes a write safe. */
static const struct idempotency test_inm = { NULL, 0, test_inm_when, 1 };

/* Nothing is idempotent. */
static const struct idempotency test_nothing = { NULL, 0, NULL, 0 };

static struct when_present test_json_only_when[] = { { WHEN_PRESENT_JSON_FIELD, test_etag } };
/* Only a body can make a request retryable. */
static const struct idempotency test_json_only = { NULL, 0, test_json_only_when, 1 };

static char test_mask[] = "mask";
static struct when_present test_json_s_k_when[] = { { WHEN_PRESENT_JSON_FIELD, test_mask } };
/* A body field whose name has the two letters a non-ASCII one folds into. */
static const struct idempotency test_json_s_k = { NULL, 0, test_json_s_k_when, 1 };

/* A parsed request head; head points into text. */
struct test_request {
	char text[1024];
	struct http1_head head;
	const char *query; /* after the '?', NULL without one */
	size_t query_len;
};

/* Parse "METHOD target HTTP/1.1" with extra header lines. */
static void test_parse(struct test_request *r, const char *method, const char *target,
		       const char *headers)
{
	static const struct http1_limits limits = { 65536, 8192 };
	enum http1_error error;
	const char *mark;
	int len;

	len = snprintf(r->text, sizeof(r->text), "%s %s HTTP/1.1\r\nHost: example.com\r\n%s\r\n",
		       method, target, headers);
	assert_true(len > 0 && (size_t)len < sizeof(r->text));
	if (http1_parse_request_head(r->text, (size_t)len, &limits, &r->head, &error) !=
	    HTTP1_PARSE_DONE)
		fail_msg("request does not parse: %s", r->text);
	r->query = NULL;
	r->query_len = 0;
	mark = memchr(r->head.target, '?', r->head.target_len);
	if (mark != NULL) {
		r->query = mark + 1;
		r->query_len = r->head.target_len - (size_t)(r->query - r->head.target);
	}
}

/* Decide from a request made of these parts. */
static enum idempotency_verdict test_decide(const struct idempotency *idem, const char *method,
					    const char *target, const char *headers, bool has_body)
{
	struct test_request r;

	test_parse(&r, method, target, headers);
	return idempotency_check_head(idem, r.head.method, r.head.method_len, r.query, r.query_len,
				      &r.head, has_body);
}

/* The same with retry.idempotency_key, the reason put into words. */
static enum idempotency_verdict test_decide_why(const struct idempotency *idem,
						enum idempotency_key_mode key_mode,
						const char *method, const char *target,
						const char *headers, bool has_body, char *why_text,
						size_t why_len)
{
	struct test_request r;
	struct idempotency_why why;
	enum idempotency_verdict verdict;

	test_parse(&r, method, target, headers);
	verdict = idempotency_decide_head(idem, key_mode, r.head.method, r.head.method_len, r.query,
					  r.query_len, &r.head, has_body, &why);
	idempotency_why_text(&why, why_text, why_len);
	return verdict;
}

static const char *test_verdict_name(enum idempotency_verdict verdict)
{
	switch (verdict) {
	case IDEMPOTENCY_YES:
		return "YES";
	case IDEMPOTENCY_NO:
		return "NO";
	case IDEMPOTENCY_NEEDS_BODY:
		return "NEEDS_BODY";
	}
	return "?";
}

static char test_idempotency_key[] = "Idempotency-Key";
static struct when_present test_key_when[] = { { WHEN_PRESENT_HEADER, test_idempotency_key } };
/* retry.idempotency_key: none, with when_present naming the key header. */
static const struct idempotency test_key_named = { test_get_only, 1, test_key_when, 1 };

/* The reasons --explain prints, and what idempotency_key: inject adds. */
static void test_why_table(void **state)
{
	static const struct {
		const struct idempotency *idem;
		enum idempotency_key_mode key;
		const char *method;
		const char *target;
		const char *headers;
		bool has_body;
		enum idempotency_verdict verdict;
		const char *why;
	} rows[] = {
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "GET", "/", "", false, IDEMPOTENCY_YES,
		  "yes (method)" },
		{ &test_gcs, IDEMPOTENCY_KEY_INJECT, "PUT", "/", "", true, IDEMPOTENCY_YES,
		  "yes (method)" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o?ifGenerationMatch=3", "", true,
		  IDEMPOTENCY_YES, "yes (query ifGenerationMatch)" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o", "If-Match: \"x\"\r\n", true,
		  IDEMPOTENCY_YES, "yes (header If-Match)" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o", "", true, IDEMPOTENCY_NEEDS_BODY,
		  "no" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o", "", false, IDEMPOTENCY_NO, "no" },
		/* inject: the key makes any method safe, after the conditions */
		{ &test_gcs, IDEMPOTENCY_KEY_INJECT, "POST", "/o", "", true, IDEMPOTENCY_YES,
		  "yes (idempotency_key)" },
		{ &test_gcs, IDEMPOTENCY_KEY_INJECT, "POST", "/o?ifMetagenerationMatch=1", "", true,
		  IDEMPOTENCY_YES, "yes (query ifMetagenerationMatch)" },
		{ &test_nothing, IDEMPOTENCY_KEY_INJECT, "PATCH", "/", "", false, IDEMPOTENCY_YES,
		  "yes (idempotency_key)" },
		{ &test_nothing, IDEMPOTENCY_KEY_INJECT, "POST", "/", "Idempotency-Key: abc\r\n",
		  true, IDEMPOTENCY_YES, "yes (idempotency_key)" },
		{ &test_json_only, IDEMPOTENCY_KEY_INJECT, "POST", "/", "", true, IDEMPOTENCY_YES,
		  "yes (idempotency_key)" },
		/* an empty key of the client's lets no upstream tell a repeat: not
		 * safe by it (and no second one is added beside it) */
		{ &test_nothing, IDEMPOTENCY_KEY_INJECT, "POST", "/", "Idempotency-Key:\r\n", true,
		  IDEMPOTENCY_NO, "no" },
		{ &test_nothing, IDEMPOTENCY_KEY_INJECT, "POST", "/",
		  "Idempotency-Key:\r\nIdempotency-Key: k1\r\n", true, IDEMPOTENCY_NO, "no" },
		{ &test_gcs, IDEMPOTENCY_KEY_INJECT, "POST", "/", "Idempotency-Key:  \r\n", true,
		  IDEMPOTENCY_NEEDS_BODY, "no" },
		{ &test_gcs, IDEMPOTENCY_KEY_INJECT, "POST", "/o?ifGenerationMatch=3",
		  "Idempotency-Key:\r\n", true, IDEMPOTENCY_YES, "yes (query ifGenerationMatch)" },
		/* ... one named in Connection is removed: inject adds its own */
		{ &test_nothing, IDEMPOTENCY_KEY_INJECT, "POST", "/",
		  "Connection: Idempotency-Key\r\nIdempotency-Key:\r\n", true, IDEMPOTENCY_YES,
		  "yes (idempotency_key)" },
		/* none: an incoming key counts only if when_present names it */
		{ &test_nothing, IDEMPOTENCY_KEY_NONE, "POST", "/", "Idempotency-Key: abc\r\n",
		  true, IDEMPOTENCY_NO, "no" },
		{ &test_key_named, IDEMPOTENCY_KEY_NONE, "POST", "/", "idempotency-key: abc\r\n",
		  true, IDEMPOTENCY_YES, "yes (header Idempotency-Key)" },
		{ &test_key_named, IDEMPOTENCY_KEY_NONE, "POST", "/", "", true, IDEMPOTENCY_NO,
		  "no" },
		/* a header the client names in Connection is removed on the way:
		 * the upstream never sees it, so it makes nothing safe */
		{ &test_key_named, IDEMPOTENCY_KEY_NONE, "POST", "/",
		  "Connection: Idempotency-Key\r\nIdempotency-Key: abc\r\n", true, IDEMPOTENCY_NO,
		  "no" },
		{ &test_key_named, IDEMPOTENCY_KEY_NONE, "POST", "/",
		  "Idempotency-Key: abc\r\nConnection: keep-alive, idempotency-key\r\n", true,
		  IDEMPOTENCY_NO, "no" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o",
		  "Connection: If-Match\r\nIf-Match: \"x\"\r\n", true, IDEMPOTENCY_NEEDS_BODY,
		  "no" },
		/* ... while another field of the condition is kept */
		{ &test_key_named, IDEMPOTENCY_KEY_NONE, "POST", "/",
		  "Connection: close\r\nIdempotency-Key: abc\r\n", true, IDEMPOTENCY_YES,
		  "yes (header Idempotency-Key)" },
		{ &test_gcs, IDEMPOTENCY_KEY_NONE, "POST", "/o",
		  "Connection: If-Match\r\nIf-Match: \"x\"\r\nx-goog-if-generation-match: 1\r\n",
		  true, IDEMPOTENCY_YES, "yes (header x-goog-if-generation-match)" },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char why[128];
		enum idempotency_verdict got =
			test_decide_why(rows[i].idem, rows[i].key, rows[i].method, rows[i].target,
					rows[i].headers, rows[i].has_body, why, sizeof(why));

		if (got != rows[i].verdict || strcmp(why, rows[i].why) != 0)
			fail_msg("row %zu %s %s: got %s \"%s\", want %s \"%s\"", i, rows[i].method,
				 rows[i].target, test_verdict_name(got), why,
				 test_verdict_name(rows[i].verdict), rows[i].why);
	}
}

/* The json_field reason names the field, and truncation keeps a string. */
static void test_why_json_and_text(void **state)
{
	static const char body[] = "{\"etag\": \"abc\"}";
	struct idempotency_why why = { IDEMPOTENCY_REASON_JSON_FIELD, NULL };
	char text[64];

	why.name = idempotency_json_body_field(&test_gcs, body, sizeof(body) - 1);
	assert_non_null(why.name);
	idempotency_why_text(&why, text, sizeof(text));
	assert_string_equal(text, "yes (json_field etag)");
	assert_null(idempotency_json_body_field(&test_gcs, "{\"etag\":null}", 13));
	assert_null(idempotency_json_body_field(&test_no_json, body, sizeof(body) - 1));
	why.reason = IDEMPOTENCY_REASON_NONE;
	idempotency_why_text(&why, text, sizeof(text));
	assert_string_equal(text, "no");
	why.reason = IDEMPOTENCY_REASON_METHOD;
	idempotency_why_text(&why, text, 6);
	assert_string_equal(text, "yes (");
}

static void test_head_table(void **state)
{
	static const struct {
		const struct idempotency *idem;
		const char *method;
		const char *target;
		const char *headers;
		bool has_body;
		enum idempotency_verdict verdict;
	} cases[] = {
		/* methods: exact and case-sensitive */
		{ &test_gcs, "GET", "/o", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "PUT", "/o", "", true, IDEMPOTENCY_YES },
		{ &test_gcs, "DELETE", "/o", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "get", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "GETS", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "GE", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "PATCH", "/o", "", false, IDEMPOTENCY_NO },

		/* query parameters */
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1", "", false, IDEMPOTENCY_YES },
		/* a bare name or an empty value is no precondition */
		{ &test_gcs, "POST", "/o?a=1&ifGenerationMatch", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=&a=1", "", false, IDEMPOTENCY_NO },
		/* given twice, one copy empty: a server reading that one sees none */
		{ &test_gcs, "POST", "/o?ifGenerationMatch=&ifGenerationMatch=2", "", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=2&ifGenerationMatch", "", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=2&ifGenerationMatch=3", "", false,
		  IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1&a=2", "", true, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?&&ifMetagenerationMatch&&", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?&&ifMetagenerationMatch=0&&", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=a=b", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatchX=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?xifGenerationMatch=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatc=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?IFGENERATIONMATCH=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?a=ifGenerationMatch", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?a=1;ifGenerationMatch=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/ifGenerationMatch", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?=ifGenerationMatch", "", false, IDEMPOTENCY_NO },

		/* percent-decoding of names */
		{ &test_gcs, "POST", "/o?if%47enerationMatch=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?%69%66GenerationMatch=7", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatc%68=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?if%67enerationMatch=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch%3D=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch%00=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatc%6", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatc%", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatc%zz=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?a%20b=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?a+b=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?x%2By=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?x%2by=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?x+y=1", "", false, IDEMPOTENCY_NO },

		/* a value some servers drop whole (Go's net/url: a malformed
		 * escape or a semicolon in the pair) is no precondition to them */
		{ &test_gcs, "POST", "/o?ifGenerationMatch=%", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1%", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1%2", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=%G1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1%zz&a=2", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=1;a=2", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=%3B", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=%31%30", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?ifGenerationMatch=2&ifGenerationMatch=%", "", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?a=%zz&ifGenerationMatch=1", "", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o?p;q=1", "", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?p%3Bq=1", "", false, IDEMPOTENCY_YES },

		/* headers: case-insensitive names, present only with a value */
		{ &test_gcs, "POST", "/o", "If-Match: \"abc\"\r\n", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "if-match: x\r\n", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "IF-MATCH:\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match:   \r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: , ,\r\n", false, IDEMPOTENCY_NO },
		/* one copy empty, on either line: a server reading it sees none */
		{ &test_gcs, "POST", "/o", "If-Match:\r\nIf-Match: \"a\"\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: \"a\"\r\nIf-Match: ,\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: \"a\"\r\nIf-Match: \"b\"\r\n", false,
		  IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "X-Goog-If-Generation-Match: 5\r\n", true,
		  IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "A: 1\r\nB: 2\r\nIf-Match: \"e\"\r\n", false,
		  IDEMPOTENCY_YES },
		/* If-Match: * holds for any version: a repeat passes it again */
		{ &test_gcs, "POST", "/o", "If-Match: *\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "if-match:  * \r\n", false, IDEMPOTENCY_NO },
		/* with other tags, on one line or two, "*" still holds for any */
		{ &test_gcs, "POST", "/o", "If-Match: *\r\nIf-Match: \"a\"\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: \"a\"\r\nIf-Match: *\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: \"a\", *\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Match: W/\"a\",*\r\n", false, IDEMPOTENCY_NO },
		/* a "*" or a comma inside an entity-tag is part of the tag */
		{ &test_gcs, "POST", "/o", "If-Match: \"a, *\"\r\n", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "If-Match: \"*\"\r\n", false, IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "X-Goog-If-Generation-Match: *\r\n", false,
		  IDEMPOTENCY_YES },
		{ &test_gcs, "POST", "/o", "If-None-Match: x\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "If-Matches: x\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "X-If-Match: x\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "ifGenerationMatch: 1\r\n", false, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o?If-Match=1", "", false, IDEMPOTENCY_NO },

		/* a json_field condition: ask for the body, but only if there is one
		 * and its Content-Type, if any, says JSON */
		{ &test_gcs, "POST", "/o", "", true, IDEMPOTENCY_NEEDS_BODY },
		{ &test_gcs, "POST", "/o", "Content-Type: application/json\r\n", true,
		  IDEMPOTENCY_NEEDS_BODY },
		{ &test_gcs, "POST", "/o", "content-type: Application/JSON; charset=utf-8\r\n",
		  true, IDEMPOTENCY_NEEDS_BODY },
		{ &test_gcs, "POST", "/o", "Content-Type: application/merge-patch+json\r\n", true,
		  IDEMPOTENCY_NEEDS_BODY },
		{ &test_gcs, "POST", "/o", "Content-Type: text/plain\r\n", true, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "Content-Type: application/x-www-form-urlencoded\r\n",
		  true, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "Content-Type: application/jsonx\r\n", true,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o", "Content-Type: +json\r\n", true, IDEMPOTENCY_NO },
		{ &test_gcs, "POST", "/o",
		  "Content-Type: application/json\r\nContent-Type: application/json\r\n", true,
		  IDEMPOTENCY_NO },
		{ &test_gcs, "PATCH", "/o?ifGenerationMatchX=1", "If-None-Match: x\r\n", true,
		  IDEMPOTENCY_NEEDS_BODY },
		{ &test_json_only, "POST", "/o", "", true, IDEMPOTENCY_NEEDS_BODY },
		{ &test_json_only, "POST", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_json_only, "GET", "/o", "", false, IDEMPOTENCY_NO },

		/* no json_field condition: a body changes nothing */
		{ &test_no_json, "GET", "/o", "", false, IDEMPOTENCY_YES },
		{ &test_no_json, "HEAD", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_no_json, "POST", "/o", "", true, IDEMPOTENCY_NO },
		{ &test_no_json, "POST", "/o?ifGenerationMatch=0", "", true, IDEMPOTENCY_YES },
		{ &test_no_json, "POST", "/o", "If-Match: x\r\n", true, IDEMPOTENCY_YES },
		{ &test_no_json, "POST", "/o?ifMetagenerationMatch=1", "", true, IDEMPOTENCY_NO },

		/* If-Unmodified-Since as an origin must read it (RFC 9110 section
		 * 13.1.4): one HTTP-date, else ignored, and ignored beside an
		 * If-Match */
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
		  false, IDEMPOTENCY_YES },
		{ &test_ius, "POST", "/o",
		  "if-unmodified-since: Sunday, 06-Nov-94 08:49:37 GMT\r\n", false,
		  IDEMPOTENCY_YES },
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: Sun Nov  6 08:49:37 1994\r\n",
		  false, IDEMPOTENCY_YES },
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: yesterday\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: 784111777\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: Sun, 31 Nov 1994 08:49:37 GMT\r\n",
		  false, IDEMPOTENCY_NO },
		/* a date not before now holds after the write a try made too */
		{ &test_ius, "POST", "/o", "If-Unmodified-Since: Fri, 31 Dec 9999 23:59:59 GMT\r\n",
		  false, IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o",
		  "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 "
		  "08:49:37 GMT\r\n",
		  false, IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o",
		  "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
		  "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
		  false, IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o",
		  "If-Match: *\r\nIf-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_ius, "POST", "/o",
		  "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-Match: \"a\"\r\n",
		  false, IDEMPOTENCY_NO },
		/* an If-Match the client named in Connection does not go upstream */
		{ &test_ius, "POST", "/o",
		  "Connection: If-Match\r\nIf-Match: *\r\n"
		  "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
		  false, IDEMPOTENCY_YES },

		/* If-None-Match guards a write only as "*": an entity-tag holds
		 * again after the write succeeded */
		{ &test_inm, "POST", "/o", "If-None-Match: *\r\n", false, IDEMPOTENCY_YES },
		{ &test_inm, "POST", "/o", "if-none-match:  * , *\r\nIf-None-Match: *\r\n", false,
		  IDEMPOTENCY_YES },
		{ &test_inm, "POST", "/o", "If-None-Match: \"a\"\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: W/\"a\"\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: *, \"a\"\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: \"a\", *\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: *\r\nIf-None-Match: \"a\"\r\n", false,
		  IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: \"*\"\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: \"a,*\"\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match: **\r\n", false, IDEMPOTENCY_NO },
		{ &test_inm, "POST", "/o", "If-None-Match:\r\n", false, IDEMPOTENCY_NO },

		/* an empty map */
		{ &test_nothing, "GET", "/o", "", false, IDEMPOTENCY_NO },
		{ &test_nothing, "POST", "/o?ifGenerationMatch=1", "If-Match: x\r\n", true,
		  IDEMPOTENCY_NO },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum idempotency_verdict verdict =
			test_decide(cases[i].idem, cases[i].method, cases[i].target,
				    cases[i].headers, cases[i].has_body);

		if (verdict != cases[i].verdict)
			fail_msg("case %zu: %s %s [%s] body=%d: %s, expected %s", i,
				 cases[i].method, cases[i].target, cases[i].headers,
				 cases[i].has_body, test_verdict_name(verdict),
				 test_verdict_name(cases[i].verdict));
	}
}

static void test_head_without_parts(void **state)
{
	/* no query and no head at all: only the method can decide */
	assert_int_equal(idempotency_check_head(&test_gcs, "GET", 3, NULL, 0, NULL, false),
			 IDEMPOTENCY_YES);
	assert_int_equal(idempotency_check_head(&test_gcs, "POST", 4, NULL, 0, NULL, false),
			 IDEMPOTENCY_NO);
	assert_int_equal(idempotency_check_head(&test_gcs, "POST", 4, NULL, 0, NULL, true),
			 IDEMPOTENCY_NEEDS_BODY);
	/* counted strings: only method_len and query_len bytes count */
	assert_int_equal(idempotency_check_head(&test_gcs, "GETX", 3, NULL, 0, NULL, false),
			 IDEMPOTENCY_YES);
	assert_int_equal(idempotency_check_head(&test_gcs, "POST", 4, "ifGenerationMatch=1X", 19,
						NULL, false),
			 IDEMPOTENCY_YES);
	assert_int_equal(idempotency_check_head(&test_gcs, "POST", 4, "ifGenerationMatch=1", 18,
						NULL, false),
			 IDEMPOTENCY_NO);
}

/* If-Unmodified-Since in RFC 850 form, t seconds from now: its two-digit
 * year is placed by the current clock, as an origin places it. */
static enum idempotency_verdict test_decide_rfc850(time_t t)
{
	static const char *const days[] = { "Sunday",	"Monday", "Tuesday", "Wednesday",
					    "Thursday", "Friday", "Saturday" };
	char field[96];
	char date[64];
	struct tm tm;

	assert_non_null(gmtime_r(&t, &tm));
	assert_true(strftime(date, sizeof(date), "%d-%b-%y %H:%M:%S GMT", &tm) > 0);
	snprintf(field, sizeof(field), "If-Unmodified-Since: %s, %s\r\n", days[tm.tm_wday], date);
	return test_decide(&test_ius, "POST", "/o", field, false);
}

static void test_head_unmodified_since_rfc850(void **state)
{
	time_t now = time(NULL);

	/* a month ago guards the write; a month ahead holds after it too,
	 * and no longer reads as the same day a century ago */
	assert_int_equal(test_decide_rfc850(now - 30 * 86400), IDEMPOTENCY_YES);
	assert_int_equal(test_decide_rfc850(now + 30 * 86400), IDEMPOTENCY_NO);
}

static void test_has_json_field(void **state)
{
	assert_true(idempotency_has_json_field(&test_gcs));
	assert_true(idempotency_has_json_field(&test_json_only));
	assert_false(idempotency_has_json_field(&test_no_json));
	assert_false(idempotency_has_json_field(&test_nothing));
}

static void test_json_table(void **state)
{
	static const struct {
		const struct idempotency *idem;
		const char *body;
		bool present;
	} cases[] = {
		{ &test_gcs, "{\"etag\":\"abc\"}", true },
		{ &test_gcs, "{\"name\":\"x\",\"etag\":\"CAE=\"}", true },
		{ &test_gcs, " \n{ \"etag\" : 1 }\r\n\t", true },
		{ &test_gcs, "{\"etag\":0}", true },
		{ &test_gcs, "{\"etag\":false}", true },
		{ &test_gcs, "{\"etag\":\"\"}", false },
		{ &test_gcs, "{\"etag\":{}}", true },
		{ &test_gcs, "{\"etag\":[]}", true },
		{ &test_gcs, "{\"et\\u0061g\":\"x\"}", true },
		{ &test_gcs, "{\"etag\":null}", false },
		{ &test_gcs, "{\"ETag\":\"x\"}", false },
		{ &test_gcs, "{\"etags\":\"x\"}", false },
		{ &test_gcs, "{\"meta\":{\"etag\":\"x\"}}", false },
		{ &test_gcs, "{\"list\":[{\"etag\":\"x\"}]}", false },
		{ &test_gcs, "{\"x\":\"etag\"}", false },
		{ &test_gcs, "[{\"etag\":\"x\"}]", false },
		{ &test_gcs, "[\"etag\"]", false },
		{ &test_gcs, "\"etag\"", false },
		{ &test_gcs, "1", false },
		{ &test_gcs, "null", false },
		{ &test_gcs, "{}", false },
		{ &test_gcs, "{\"etag\":\"x\"", false },
		{ &test_gcs, "{\"etag\":\"x\"} x", false },
		{ &test_gcs, "{\"etag\":\"x\"}{}", false },
		{ &test_gcs, "{etag:\"x\"}", false },
		{ &test_gcs, "{'etag':'x'}", false },
		{ &test_gcs, "{\"etag\":1,\"etag\":2}", false },
		{ &test_gcs, "{\"etag\":1,\"et\\u0061g\":2}", false },
		/* a member of the same name but for case is the same member to a
		 * decoder that matches names so (Go's encoding/json, ASP.NET
		 * Core's), and the one it reads last may be empty */
		{ &test_gcs, "{\"etag\":\"x\",\"ETag\":\"\"}", false },
		{ &test_gcs, "{\"ETAG\":null,\"etag\":\"x\"}", false },
		{ &test_gcs, "{\"etag\":\"x\",\"etaG\":\"y\"}", false },
		{ &test_gcs, "{\"etag\":\"x\",\"\\u212atag\":\"\"}", true },
		{ &test_gcs, "{\"etag\":\"x\",\"etags\":\"\",\"tag\":\"\"}", true },
		{ &test_json_s_k, "{\"mask\":\"x\",\"ma\\u017f\\u212a\":\"\"}", false },
		{ &test_json_s_k, "{\"mask\":\"x\",\"MA\\u017fk\":1}", false },
		{ &test_json_s_k, "{\"mask\":\"x\",\"ma\\u017f\":1}", true },
		{ &test_gcs, "{\"a\\u0000\":1,\"etag\":1}", false },
		{ &test_gcs, "\xef\xbb\xbf{\"etag\":1}", false },
		{ &test_gcs, "etag=1", false },
		{ &test_gcs, "", false },
		{ &test_gcs, "   ", false },
		/* brackets inside strings do not count as nesting */
		{ &test_gcs,
		  "{\"etag\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
		  "\","
		  "\"q\":\"\\\"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
		  "\"}",
		  true },
		{ &test_json_only, "{\"etag\":\"x\"}", true },
		{ &test_no_json, "{\"etag\":\"x\"}", false },
		{ &test_nothing, "{\"etag\":\"x\"}", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool present = idempotency_check_json_body(cases[i].idem, cases[i].body,
							   strlen(cases[i].body));

		if (present != cases[i].present)
			fail_msg("case %zu: %s: %d, expected %d", i, cases[i].body, present,
				 cases[i].present);
	}
}

static void test_json_counted(void **state)
{
	static const char body[] = "{\"etag\":1}";

	/* only len bytes are read, and a NUL after the object is trailing junk */
	assert_true(idempotency_check_json_body(&test_gcs, body, sizeof(body) - 1));
	assert_false(idempotency_check_json_body(&test_gcs, body, sizeof(body)));
	assert_false(idempotency_check_json_body(&test_gcs, body, sizeof(body) - 2));
	assert_false(idempotency_check_json_body(&test_gcs, NULL, 0));
}

/* {"etag":1,"deep":[[...]]} with depth levels of nesting in all. */
static char *test_nested(unsigned depth, size_t *len)
{
	const char *head = "{\"etag\":1,\"deep\":";
	size_t head_len = strlen(head);
	unsigned arrays = depth - 1;
	char *body = malloc(head_len + 2 * arrays + 2);
	char *p = body;

	assert_non_null(body);
	memcpy(p, head, head_len);
	p += head_len;
	memset(p, '[', arrays);
	p += arrays;
	memset(p, ']', arrays);
	p += arrays;
	*p++ = '}';
	*p = '\0';
	*len = (size_t)(p - body);
	return body;
}

static void test_json_depth(void **state)
{
	static const struct {
		unsigned depth;
		bool present;
	} cases[] = {
		{ 1 + 1, true },
		{ IDEMPOTENCY_JSON_MAX_DEPTH - 1, true },
		{ IDEMPOTENCY_JSON_MAX_DEPTH, true },
		{ IDEMPOTENCY_JSON_MAX_DEPTH + 1, false },
		{ 5000, false }, /* past jansson's own limit as well */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		char *body = test_nested(cases[i].depth, &len);

		if (idempotency_check_json_body(&test_gcs, body, len) != cases[i].present)
			fail_msg("depth %u: expected %d", cases[i].depth, cases[i].present);
		free(body);
	}
}

static void test_json_size(void **state)
{
	static const char object[] = "{\"etag\":1}";
	size_t len = IDEMPOTENCY_JSON_MAX_BYTES;
	char *body = malloc(len + 1);

	assert_non_null(body);
	/* whitespace padding up to the limit still parses; one byte more is not tried */
	memset(body, ' ', len + 1);
	memcpy(body, object, sizeof(object) - 1);
	assert_true(idempotency_check_json_body(&test_gcs, body, len));
	assert_false(idempotency_check_json_body(&test_gcs, body, len + 1));
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_head_table),
		cmocka_unit_test(test_head_without_parts),
		cmocka_unit_test(test_has_json_field),
		cmocka_unit_test(test_json_table),
		cmocka_unit_test(test_json_counted),
		cmocka_unit_test(test_json_depth),
		cmocka_unit_test(test_json_size),
		cmocka_unit_test(test_why_table),
		cmocka_unit_test(test_why_json_and_text),
		cmocka_unit_test(test_head_unmodified_since_rfc850),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
