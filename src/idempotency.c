#include "idempotency.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "http1_chars.h"
#include "http_date.h"
#include "uri_path.h"

/* Does the raw, still percent-encoded, parameter name equal name once
 * decoded? Decoding goes byte by byte against name, so nothing is copied. */
static bool idempotency_query_name_equals(const char *raw, size_t raw_len, const char *name)
{
	size_t i = 0;
	size_t j = 0;

	while (i < raw_len) {
		char c = raw[i];

		if (c == '+')
			return false; /* a space to a form decoder, a plus to others */
		if (c == '%') {
			int hi;
			int lo;

			if (raw_len - i < 3)
				return false;
			hi = uri_path_hex(raw[i + 1]);
			lo = uri_path_hex(raw[i + 2]);
			if (hi < 0 || lo < 0)
				return false; /* servers differ on malformed escapes */
			c = (char)(hi * 16 + lo);
			i += 3;
		} else {
			i++;
		}
		/* name[j] is '\0' past its end, and a decoded NUL must not match it */
		if (name[j] == '\0' || c != name[j])
			return false;
		j++;
	}
	return name[j] == '\0';
}

/* Does every server read this name=value pair? Go's net/url drops a pair
 * that holds a malformed escape (%zz, a % too near the end) or a semicolon,
 * as Tomcat drops one it cannot decode, while others read it as it is: a
 * precondition some servers never see makes nothing safe. */
static bool idempotency_query_pair_read(const char *pair, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (pair[i] == ';')
			return false;
		if (pair[i] == '%') {
			if (len - i < 3 || uri_path_hex(pair[i + 1]) < 0 ||
			    uri_path_hex(pair[i + 2]) < 0)
				return false;
			i += 2;
		}
	}
	return true;
}

/* Is a parameter with this name and a value in the query, and none with
 * the name alone? A bare name or an empty value is no precondition to many
 * servers (they cannot tell it from an absent one), and of a name given
 * twice, some read the first, some the last: one empty copy makes nothing
 * safe, nor does one that some servers drop. */
static bool idempotency_query_has(const char *query, size_t query_len, const char *name)
{
	const char *p = query;
	const char *end = query + query_len;
	bool valued = false;

	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *param_end = amp != NULL ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(param_end - p));
		const char *name_end = eq != NULL ? eq : param_end;

		if (name_end > p &&
		    idempotency_query_name_equals(p, (size_t)(name_end - p), name)) {
			if (eq == NULL || eq + 1 == param_end ||
			    !idempotency_query_pair_read(p, (size_t)(param_end - p)))
				return false;
			valued = true;
		}
		p = param_end + (amp != NULL);
	}
	return valued;
}

/* Is a field value empty as a list: nothing but commas and whitespace?
 * "If-Match:" or "If-Match: ," holds no entity-tag, and a server may read
 * it as no condition at all. */
static bool idempotency_value_empty(const char *value, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (value[i] != ',' && !HTTP1_IS_WS(value[i]))
			return false;
	return true;
}

/* Does this If-Match field hold "*" as a member? "*" holds for any current
 * version (RFC 9110 section 13.1.1): a repeat after a try that succeeded
 * passes it again. The grammar has it only alone, but field lines combine
 * into one list, and a server reading the list (Go's net/http) takes a "*"
 * anywhere in it as a match: "*, \"a\"", or "*" and "\"a\"" on two
 * lines, holds as "*" does. Commas inside an entity-tag are not separators. */
static bool idempotency_if_match_any(const struct http1_field *f)
{
	bool quoted = false;
	bool member_start = true;

	for (size_t i = 0; i < f->value_len; i++) {
		char c = f->value[i];

		if (quoted) {
			quoted = c != '"';
		} else if (c == ',') {
			member_start = true;
		} else if (!HTTP1_IS_WS(c)) {
			if (member_start && c == '*')
				return true;
			quoted = c == '"';
			member_start = false;
		}
	}
	return false;
}

/* Does this If-None-Match field hold anything but "*" members? Only "*"
 * guards a write (RFC 9110 section 13.1.2: the request fails once the
 * resource exists, so a repeat after a try that succeeded fails); an
 * entity-tag list holds for every version but those listed, the one a
 * write that succeeded made among them, so a repeat passes it again. */
static bool idempotency_if_none_match_tags(const struct http1_field *f)
{
	size_t i = 0;

	while (i < f->value_len) {
		size_t start;

		while (i < f->value_len && (f->value[i] == ',' || HTTP1_IS_WS(f->value[i])))
			i++;
		start = i;
		while (i < f->value_len && f->value[i] != ',' && !HTTP1_IS_WS(f->value[i]))
			i++;
		/* "*" alone; an entity-tag, quoted, never is (a comma in one
		 * only makes more members, none of them "*") */
		if (i > start && !(i - start == 1 && f->value[start] == '*'))
			return true;
	}
	return false;
}

/* Does this If-Unmodified-Since field guard nothing? Either an origin must
 * ignore it (RFC 9110 section 13.1.4): its value not one HTTP-date
 * ("yesterday", a number, two dates on one line); or its date is not before
 * the current second: a write a try made sets the resource's Last-Modified
 * to the write's time, at or after now, so a date before now fails the
 * next try's condition (412), as a guard must, while one at or after now
 * (a client that sends the time of sending) still holds after that write.
 * Clocks are taken to be in step with the origin's. A repeated line and an
 * If-Match beside it are the caller's to see. */
static bool idempotency_unmodified_since_void(const struct http1_field *f)
{
	time_t now = http_date_clock();
	int64_t when;

	/* now places an RFC 850 two-digit year too, as the origin places it:
	 * "-49" is 2049 today, not 1949 */
	return http_date_parse(f->value, f->value_len, now, &when) < 0 || when >= (int64_t)now;
}

enum idempotency_field idempotency_forwarded_field(const struct http1_head *head, const char *name)
{
	enum idempotency_field found = IDEMPOTENCY_FIELD_ABSENT;
	size_t name_len = strlen(name);
	bool if_match = http1_name_equals(name, name_len, "If-Match");
	bool if_none_match = http1_name_equals(name, name_len, "If-None-Match");
	bool if_unmodified_since = http1_name_equals(name, name_len, "If-Unmodified-Since");
	bool hop[HTTP1_MAX_FIELDS];
	bool marked = false;

	for (size_t i = 0; head != NULL && i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (!http1_name_equals(f->name, f->name_len, name))
			continue;
		/* the marks are made only when the name is there at all */
		if (!marked) {
			http1_hop_by_hop_marks(head, hop);
			marked = true;
		}
		if (hop[i])
			continue;
		/* on any line, whatever the others say: an empty copy too, as
		 * for a query parameter, since a server may read that one alone
		 * (Go's Header.Get reads the first) and see no condition */
		if (idempotency_value_empty(f->value, f->value_len) ||
		    (if_match && idempotency_if_match_any(f)) ||
		    (if_none_match && idempotency_if_none_match_tags(f)) ||
		    (if_unmodified_since && idempotency_unmodified_since_void(f)))
			return IDEMPOTENCY_FIELD_EMPTY;
		/* a second If-Unmodified-Since is a second member, which makes
		 * the origin ignore the field */
		if (found == IDEMPOTENCY_FIELD_VALUE && if_unmodified_since)
			return IDEMPOTENCY_FIELD_EMPTY;
		found = IDEMPOTENCY_FIELD_VALUE;
	}
	/* an origin evaluates If-Match instead, when the request has one
	 * (RFC 9110 section 13.1.4); one that guards the write counts by
	 * itself when the map names it */
	if (found == IDEMPOTENCY_FIELD_VALUE && if_unmodified_since &&
	    idempotency_forwarded_field(head, "If-Match") != IDEMPOTENCY_FIELD_ABSENT)
		return IDEMPOTENCY_FIELD_EMPTY;
	return found;
}

/* Could the body be JSON by its Content-Type? None at all is taken as
 * maybe (many clients send JSON without one); one naming another media
 * type (text/plain, a form) is not read as JSON, and neither are two. */
static bool idempotency_body_may_be_json(const struct http1_head *head)
{
	const struct http1_field *type = NULL;
	const char *v;
	size_t len;

	for (size_t i = 0; head != NULL && i < head->field_count; i++) {
		if (!http1_name_equals(head->fields[i].name, head->fields[i].name_len,
				       "content-type"))
			continue;
		if (type != NULL)
			return false;
		type = &head->fields[i];
	}
	if (type == NULL)
		return true;
	v = type->value;
	len = type->value_len;
	for (size_t i = 0; i < len; i++)
		if (v[i] == ';' || HTTP1_IS_WS(v[i])) {
			len = i;
			break;
		}
	/* application/json, or a structured syntax suffix (RFC 6839):
	 * application/merge-patch+json, application/problem+json */
	return http1_equal_nocase(v, len, "application/json", 16) ||
	       (len > 5 && http1_equal_nocase(v + len - 5, 5, "+json", 5));
}

bool idempotency_method_listed(const struct idempotency *idem, const char *method,
			       size_t method_len)
{
	for (size_t i = 0; i < idem->method_count; i++) {
		const char *listed = idem->methods[i];

		if (strlen(listed) == method_len && memcmp(listed, method, method_len) == 0)
			return true;
	}
	return false;
}

enum idempotency_verdict idempotency_decide_head(const struct idempotency *idem,
						 enum idempotency_key_mode key_mode,
						 const char *method, size_t method_len,
						 const char *query, size_t query_len,
						 const struct http1_head *head, bool has_body,
						 struct idempotency_why *why)
{
	struct idempotency_why scratch;
	bool json_field = false;

	if (why == NULL)
		why = &scratch;
	why->reason = IDEMPOTENCY_REASON_NONE;
	why->name = NULL;
	if (idempotency_method_listed(idem, method, method_len)) {
		why->reason = IDEMPOTENCY_REASON_METHOD;
		return IDEMPOTENCY_YES;
	}
	for (size_t i = 0; i < idem->when_present_count; i++) {
		const struct when_present *cond = &idem->when_present[i];

		switch (cond->kind) {
		case WHEN_PRESENT_QUERY:
			if (query != NULL && idempotency_query_has(query, query_len, cond->name)) {
				why->reason = IDEMPOTENCY_REASON_QUERY;
				why->name = cond->name;
				return IDEMPOTENCY_YES;
			}
			break;
		case WHEN_PRESENT_HEADER:
			if (idempotency_forwarded_field(head, cond->name) ==
			    IDEMPOTENCY_FIELD_VALUE) {
				why->reason = IDEMPOTENCY_REASON_HEADER;
				why->name = cond->name;
				return IDEMPOTENCY_YES;
			}
			break;
		case WHEN_PRESENT_JSON_FIELD:
			json_field = true;
			break;
		}
	}
	/* the key the request carries, or the one it will get, makes any
	 * repeat of it one the upstream can recognise; an empty one it carries
	 * lets the upstream recognise nothing, and the proxy adds no second */
	if (key_mode == IDEMPOTENCY_KEY_INJECT &&
	    idempotency_forwarded_field(head, IDEMPOTENCY_KEY_HEADER) != IDEMPOTENCY_FIELD_EMPTY) {
		why->reason = IDEMPOTENCY_REASON_KEY;
		return IDEMPOTENCY_YES;
	}
	return json_field && has_body && idempotency_body_may_be_json(head) ? IDEMPOTENCY_NEEDS_BODY
									    : IDEMPOTENCY_NO;
}

enum idempotency_verdict idempotency_check_head(const struct idempotency *idem, const char *method,
						size_t method_len, const char *query,
						size_t query_len, const struct http1_head *head,
						bool has_body)
{
	return idempotency_decide_head(idem, IDEMPOTENCY_KEY_NONE, method, method_len, query,
				       query_len, head, has_body, NULL);
}

void idempotency_why_text(const struct idempotency_why *why, char *buf, size_t len)
{
	const char *name = why->name != NULL ? why->name : "";

	switch (why->reason) {
	case IDEMPOTENCY_REASON_METHOD:
		snprintf(buf, len, "yes (method)");
		return;
	case IDEMPOTENCY_REASON_QUERY:
		snprintf(buf, len, "yes (query %s)", name);
		return;
	case IDEMPOTENCY_REASON_HEADER:
		snprintf(buf, len, "yes (header %s)", name);
		return;
	case IDEMPOTENCY_REASON_JSON_FIELD:
		snprintf(buf, len, "yes (json_field %s)", name);
		return;
	case IDEMPOTENCY_REASON_KEY:
		snprintf(buf, len, "yes (idempotency_key)");
		return;
	case IDEMPOTENCY_REASON_NONE:
		break;
	}
	snprintf(buf, len, "no");
}

bool idempotency_has_json_field(const struct idempotency *idem)
{
	for (size_t i = 0; i < idem->when_present_count; i++)
		if (idem->when_present[i].kind == WHEN_PRESENT_JSON_FIELD)
			return true;
	return false;
}

/* Is the nesting of brackets outside strings at most max? A cheap pass
 * before jansson so a hostile body cannot make it recurse deeply; anything
 * malformed is left for jansson to reject. */
static bool idempotency_json_depth_ok(const char *body, size_t len, unsigned max)
{
	unsigned depth = 0;
	bool in_string = false;

	for (size_t i = 0; i < len; i++) {
		char c = body[i];

		if (in_string) {
			if (c == '\\')
				i++; /* the escaped byte cannot end the string */
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (c == '{' || c == '[') {
			if (++depth > max)
				return false;
		} else if ((c == '}' || c == ']') && depth > 0) {
			depth--;
		}
	}
	return true;
}

/* Is key name in another case, to a decoder that matches member names
 * without regard to case, as Go's encoding/json and ASP.NET Core's do: an
 * ASCII letter in either case, or one of the two non-ASCII letters that
 * fold into ASCII ones (U+017F, long s; U+212A, the Kelvin sign)? */
static bool idempotency_json_name_folds(const char *key, const char *name)
{
	for (; *name != '\0'; name++) {
		char lower = *name >= 'A' && *name <= 'Z' ? (char)(*name + ('a' - 'A')) : *name;
		char upper = *name >= 'a' && *name <= 'z' ? (char)(*name - ('a' - 'A')) : *name;

		if (*key == lower || *key == upper)
			key++;
		else if (lower == 's' && strncmp(key, "\xc5\xbf", 2) == 0)
			key += 2;
		else if (lower == 'k' && strncmp(key, "\xe2\x84\xaa", 3) == 0)
			key += 3;
		else
			return false;
	}
	return *key == '\0';
}

/* Has the object a member named as name but for case? Such a decoder takes
 * it for the same member, and reads the one that comes last, which may be
 * empty: as with a name given twice, the field guards nothing then. */
static bool idempotency_json_name_doubled(json_t *object, const char *name)
{
	const char *key;
	json_t *value;

	json_object_foreach(object, key, value)
	{
		if (strcmp(key, name) != 0 && idempotency_json_name_folds(key, name))
			return true;
	}
	return false;
}

const char *idempotency_json_body_field(const struct idempotency *idem, const char *body,
					size_t len)
{
	json_error_t error;
	json_t *root;
	const char *found = NULL;

	if (!idempotency_has_json_field(idem) || len == 0 || len > IDEMPOTENCY_JSON_MAX_BYTES)
		return NULL;
	if (!idempotency_json_depth_ok(body, len, IDEMPOTENCY_JSON_MAX_DEPTH))
		return NULL;
	/* Without JSON_DECODE_ANY only an object or array parses, and only an
	 * object can have members. */
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &error);
	if (root == NULL)
		return NULL;
	if (json_is_object(root)) {
		for (size_t i = 0; i < idem->when_present_count && found == NULL; i++) {
			const struct when_present *cond = &idem->when_present[i];
			json_t *member;

			if (cond->kind != WHEN_PRESENT_JSON_FIELD)
				continue;
			member = json_object_get(root, cond->name);
			/* null and "" are "not given" to many APIs */
			if (member != NULL && !json_is_null(member) &&
			    !(json_is_string(member) && json_string_length(member) == 0) &&
			    !idempotency_json_name_doubled(root, cond->name))
				found = cond->name;
		}
	}
	json_decref(root);
	return found;
}

bool idempotency_check_json_body(const struct idempotency *idem, const char *body, size_t len)
{
	return idempotency_json_body_field(idem, body, len) != NULL;
}
