/* The idempotency map's json_field conditions on a request body:
 * idempotency_json_body_field(), its bracket pre-scan that keeps a deep
 * body away from jansson, and the member lookup. The reference parses the
 * body with jansson directly (no pre-scan), measures the nesting on the
 * tree it got, refuses one deeper than IDEMPOTENCY_JSON_MAX_DEPTH, and
 * walks the top-level object's members itself, comparing each key whole
 * with each condition's name in the map's order (a key that is the name
 * but for case, to Go's decoder, makes it not given). So a pre-scan that lets a
 * deep body through or stops a shallow one (a string's brackets, an
 * escaped quote, a stray closing bracket), or a lookup that takes a null,
 * an empty string or a member not at the top as given, shows as a
 * difference.
 *
 * The first input byte: bit 0 picks the map (three json_field names among
 * the other kinds, or one with no json_field at all); with bit 1 the rest
 * is put as a value k arrays deep (k the top six bits, 0 to 63) into an
 * object that has "etag", {"etag":1,"w":[[...rest...]]}, so that whatever
 * the rest is, its nesting decides at the limit and a bracket the
 * pre-scan miscounts in it shows; without, the rest is the body. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idempotency.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_etag[] = "etag";
static char fuzz_generation[] = "ifGenerationMatch";
static char fuzz_spaced[] = "a b";
static char fuzz_unicode[] = "\xc3\xa9t\xc3\xa9";
static char fuzz_header[] = "If-Match";

static struct when_present fuzz_three[] = {
	{ WHEN_PRESENT_HEADER, fuzz_header },	   { WHEN_PRESENT_JSON_FIELD, fuzz_etag },
	{ WHEN_PRESENT_QUERY, fuzz_generation },   { WHEN_PRESENT_JSON_FIELD, fuzz_spaced },
	{ WHEN_PRESENT_JSON_FIELD, fuzz_unicode },
};
static struct when_present fuzz_none[] = {
	{ WHEN_PRESENT_HEADER, fuzz_etag },
	{ WHEN_PRESENT_QUERY, fuzz_etag },
};
static const struct idempotency fuzz_maps[] = {
	{ NULL, 0, fuzz_three, sizeof(fuzz_three) / sizeof(fuzz_three[0]) },
	{ NULL, 0, fuzz_none, sizeof(fuzz_none) / sizeof(fuzz_none[0]) },
};

/* How deep the value nests: a scalar 0, an object or array one more than
 * its deepest member. */
static unsigned fuzz_depth(json_t *value)
{
	unsigned deepest = 0;

	if (json_is_object(value)) {
		const char *key;
		json_t *member;

		json_object_foreach(value, key, member)
		{
			unsigned d = fuzz_depth(member);

			if (d > deepest)
				deepest = d;
		}
		return deepest + 1;
	}
	if (json_is_array(value)) {
		size_t i;
		json_t *member;

		json_array_foreach(value, i, member)
		{
			unsigned d = fuzz_depth(member);

			if (d > deepest)
				deepest = d;
		}
		return deepest + 1;
	}
	return 0;
}

/* s with ASCII letters lowered and the two letters Go folds into ASCII
 * ones (U+017F, long s; U+212A, the Kelvin sign) written as those, into a
 * buffer of its own. */
static char *fuzz_folded(const char *s)
{
	char *out = malloc(strlen(s) + 1);
	size_t n = 0;

	if (out == NULL)
		abort();
	while (*s != '\0') {
		if (strncmp(s, "\xc5\xbf", 2) == 0) {
			out[n++] = 's';
			s += 2;
		} else if (strncmp(s, "\xe2\x84\xaa", 3) == 0) {
			out[n++] = 'k';
			s += 3;
		} else {
			out[n++] = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
			s++;
		}
	}
	out[n] = '\0';
	return out;
}

/* Is key another spelling of name to a decoder that matches member names
 * without regard to case (Go's, ASP.NET Core's)? */
static bool fuzz_same_but_case(const char *key, const char *name)
{
	char *a = fuzz_folded(key), *b = fuzz_folded(name);
	bool same = strcmp(key, name) != 0 && strcmp(a, b) == 0;

	free(a);
	free(b);
	return same;
}

/* Does the object have a member named name, not null and not "", and none
 * named as name but for case (such a decoder reads the last of them)? */
static bool fuzz_given(json_t *object, const char *name)
{
	const char *key;
	json_t *member;
	bool given = false;

	json_object_foreach(object, key, member)
	{
		if (fuzz_same_but_case(key, name))
			return false;
		if (strcmp(key, name) == 0)
			given = !json_is_null(member) &&
				!(json_is_string(member) && json_string_length(member) == 0);
	}
	return given;
}

static const char *fuzz_ref(const struct idempotency *idem, const char *body, size_t len)
{
	json_error_t error;
	json_t *root;
	const char *found = NULL;

	if (len == 0 || len > IDEMPOTENCY_JSON_MAX_BYTES)
		return NULL;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &error);
	if (root == NULL)
		return NULL;
	if (json_is_object(root) && fuzz_depth(root) <= IDEMPOTENCY_JSON_MAX_DEPTH)
		for (size_t i = 0; i < idem->when_present_count && found == NULL; i++)
			if (idem->when_present[i].kind == WHEN_PRESENT_JSON_FIELD &&
			    fuzz_given(root, idem->when_present[i].name))
				found = idem->when_present[i].name;
	json_decref(root);
	return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct idempotency *idem;
	const char *got, *want;
	char *body;
	size_t len;

	if (size < 1)
		return 0;
	idem = &fuzz_maps[data[0] & 1];
	if ((data[0] & 2) != 0) {
		static const char open[] = "{\"etag\":1,\"w\":";
		size_t k = data[0] >> 2;

		len = sizeof(open) - 1 + k + (size - 1) + k + 1;
		body = malloc(len);
		if (body == NULL)
			abort();
		memcpy(body, open, sizeof(open) - 1);
		memset(body + sizeof(open) - 1, '[', k);
		memcpy(body + sizeof(open) - 1 + k, data + 1, size - 1);
		memset(body + len - 1 - k, ']', k);
		body[len - 1] = '}';
	} else {
		/* a copy of exactly its size, so a read past the end is caught */
		len = size - 1;
		body = malloc(len + (len == 0));
		if (body == NULL)
			abort();
		memcpy(body, data + 1, len);
	}
	got = idempotency_json_body_field(idem, body, len);
	want = fuzz_ref(idem, body, len);
	/* the name as the config has it: the same pointer */
	if (got != want || idempotency_check_json_body(idem, body, len) != (want != NULL) ||
	    idempotency_has_json_field(idem) != (idem == &fuzz_maps[0]))
		abort();
	free(body);
	return 0;
}
