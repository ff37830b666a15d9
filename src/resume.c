#include "resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_date.h"
#include "xmalloc.h"

/*
 * The pure side of Range resume: read what a 200 offers, write the Range
 * and If-Range of the resume request, and judge its answer. Only a 206 that
 * continues the very same representation from the very byte asked for is
 * ever spliced onto what the client has.
 */

const char *resume_answer_text(enum resume_answer answer)
{
	switch (answer) {
	case RESUME_ANSWER_SPLICE:
		return "resumed";
	case RESUME_ANSWER_NOT_PARTIAL:
		return "resume answered without 206: the download changed or the range was refused";
	case RESUME_ANSWER_OTHER_RANGE:
		return "resume answered with another Content-Range";
	case RESUME_ANSWER_CHANGED:
		return "resume answered with another validator";
	case RESUME_ANSWER_NO_ETAG:
		return "resume answered 206 without the ETag (validator)";
	case RESUME_ANSWER_BAD_LENGTH:
		return "resume answered 206 whose length is not the rest";
	case RESUME_ANSWER_OTHER_CODING:
		return "resume answered in another Content-Encoding";
	case RESUME_ANSWER_MULTIPART:
		return "resume answered with multipart/byteranges";
	}
	return "resume failed";
}

/* Does s (n bytes) equal lower, ignoring the case of ASCII letters? For
 * field names and range units, whose other bytes ('-') have the 0x20 bit
 * set already, and in which no other token byte turns into a letter. */
static inline bool resume_equals_lower(const char *s, const char *lower, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((s[i] | 0x20) != lower[i])
			return false;
	return true;
}

static inline uint64_t resume_load8(const char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint32_t resume_load4(const char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* resume_equals_lower() for the 13-byte names, a word at a time (two
 * overlapping loads): every GET 200 on a route with resume on looks at its
 * fields' names. */
static inline bool resume_name13(const char *s, const char *lower)
{
	const uint64_t fold = 0x2020202020202020u;

	return (resume_load8(s) | fold) == resume_load8(lower) &&
	       (resume_load8(s + 5) | fold) == resume_load8(lower + 5);
}

/* Is the comma-separated list in value one that names the bytes unit? Range
 * units compare case-insensitively (RFC 9110 section 14.1). */
static bool resume_lists_bytes(const char *value, size_t len)
{
	size_t i = 0;

	if (len == 5)
		return resume_equals_lower(value, "bytes", 5);

	while (i < len) {
		size_t start, end;

		while (i < len && (value[i] == ' ' || value[i] == '\t' || value[i] == ','))
			i++;
		start = i;
		while (i < len && value[i] != ',')
			i++;
		end = i;
		while (end > start && (value[end - 1] == ' ' || value[end - 1] == '\t'))
			end--;
		if (http1_name_equals(value + start, end - start, "bytes"))
			return true;
	}
	return false;
}

/* A strong entity-tag: DQUOTE *etagc DQUOTE, no W/ in front (RFC 9110
 * section 8.8.3). The parser let no control byte into a value; a space
 * inside would be malformed but harmless, since If-Range repeats the tag
 * byte for byte and the 206's is compared byte for byte. */
static bool resume_strong_etag(const char *value, size_t len)
{
	return len >= 2 && value[0] == '"' && value[len - 1] == '"' &&
	       memchr(value + 1, '"', len - 2) == NULL;
}

/* Whether a Last-Modified may stand in If-Range: only a strong validator
 * may (RFC 9110 section 13.1.5), and a date is strong only when the
 * response's Date is at least a second after it (section 8.8.2.2): within
 * the same second the content may have changed again under the same date,
 * and a resume would splice two versions together. */
static bool resume_strong_date(const struct http1_field *modified, const struct http1_field *date)
{
	int64_t modified_at, date_at;
	time_t now;

	if (modified == NULL || date == NULL)
		return false;
	now = time(NULL);
	return http_date_parse(modified->value, modified->value_len, now, &modified_at) == 0 &&
	       http_date_parse(date->value, date->value_len, now, &date_at) == 0 &&
	       date_at >= modified_at + 1;
}

bool resume_read_offer(struct resume **block, const struct http1_head *head,
		       uint64_t content_length)
{
	const struct http1_field *etag = NULL, *modified = NULL, *date = NULL, *validator;
	const struct http1_field *coding = NULL;
	bool ranges = false, dates_repeated = false;
	struct resume *resume;

	/* one pass, names told apart by length first: this runs for every
	 * GET 200 on a route with resume on */
	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (f->name_len == 4 &&
		    (resume_load4(f->name) | 0x20202020u) == resume_load4("etag")) {
			if (etag != NULL)
				return false; /* two: which one would If-Range name? */
			etag = f;
		} else if (f->name_len == 4 &&
			   (resume_load4(f->name) | 0x20202020u) == resume_load4("date")) {
			dates_repeated = dates_repeated || date != NULL;
			date = f;
		} else if (f->name_len == 13) {
			if (resume_name13(f->name, "accept-ranges")) {
				ranges = ranges || resume_lists_bytes(f->value, f->value_len);
			} else if (resume_name13(f->name, "last-modified")) {
				dates_repeated = dates_repeated || modified != NULL;
				modified = f;
			}
		} else if (f->name_len == 16 &&
			   http1_name_equals(f->name, 16, "content-encoding")) {
			if (coding != NULL)
				return false; /* codings in two fields: not worth comparing */
			coding = f;
		}
	}
	if (!ranges)
		return false;
	if (etag != NULL && !resume_strong_etag(etag->value, etag->value_len))
		return false; /* a weak ETag: equal content is not promised byte for byte */
	/* without an ETag the dates decide: two of either, and which would
	 * If-Range name, or prove the date strong? */
	if (etag == NULL && (dates_repeated || !resume_strong_date(modified, date)))
		return false;
	validator = etag != NULL ? etag : modified;
	if (validator == NULL || validator->value_len == 0 ||
	    validator->value_len > RESUME_VALIDATOR_MAX)
		return false;
	if (coding != NULL && coding->value_len > RESUME_CODING_MAX)
		return false;
	if (*block == NULL)
		*block = xmalloc(sizeof(**block));
	resume = *block;
	resume->length = content_length;
	resume->at = 0;
	resume->pending = false;
	resume->etag = etag != NULL;
	resume->validator_len = validator->value_len;
	memcpy(resume->validator, validator->value, validator->value_len);
	resume->coding_len = coding != NULL ? coding->value_len : 0;
	if (coding != NULL)
		memcpy(resume->coding, coding->value, coding->value_len);
	resume->lines_len = 0;
	resume->note[0] = '\0';
	return true;
}

void resume_free(struct resume *resume)
{
	free(resume);
}

bool resume_request_has_range(const char *head, size_t len)
{
	const char *p = head, *end = head + len;

	/* every field line starts after a CRLF; names have no whitespace */
	while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		size_t left;

		p++;
		left = (size_t)(end - p);
		if ((left > 6 && http1_name_equals(p, 6, "Range:")) ||
		    (left > 9 && http1_name_equals(p, 9, "If-Range:")))
			return true;
	}
	return false;
}

void resume_prepare(struct resume *resume, uint64_t at)
{
	int n = sprintf(resume->lines, "Range: bytes=%llu-\r\nIf-Range: ", (unsigned long long)at);
	char *p = resume->lines + n;

	memcpy(p, resume->validator, resume->validator_len);
	p += resume->validator_len;
	memcpy(p, "\r\n\r\n", 4);
	resume->lines_len = (size_t)(p + 4 - resume->lines);
	resume->at = at;
}

/* Digits at *p up to a byte that is not one, as a number; -1 when there
 * are none or too many to be a length. */
static int resume_parse_number(const char **p, const char *end, uint64_t *out)
{
	const char *start = *p;
	uint64_t v = 0;

	while (*p < end && **p >= '0' && **p <= '9') {
		if (*p - start >= 19)
			return -1;
		v = v * 10 + (uint64_t)(**p - '0');
		(*p)++;
	}
	if (*p == start)
		return -1;
	*out = v;
	return 0;
}

/* Is value exactly "bytes first-last/complete" with these three numbers? */
static bool resume_content_range_is(const char *value, size_t len, uint64_t first, uint64_t last,
				    uint64_t complete)
{
	const char *p, *end = value + len;
	uint64_t a, b, c;

	if (len < 6 || !http1_name_equals(value, 5, "bytes") || value[5] != ' ')
		return false;
	p = value + 6;
	if (resume_parse_number(&p, end, &a) < 0 || p == end || *p++ != '-' ||
	    resume_parse_number(&p, end, &b) < 0 || p == end || *p++ != '/' ||
	    resume_parse_number(&p, end, &c) < 0 || p != end)
		return false;
	return a == first && b == last && c == complete;
}

/* The one field of this name, or NULL; *repeated when there are more. */
static const struct http1_field *resume_only_field(const struct http1_head *head, const char *name,
						   bool *repeated)
{
	const struct http1_field *found = NULL;
	size_t len = strlen(name);

	*repeated = false;
	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (f->name_len == len && http1_name_equals(f->name, len, name)) {
			if (found != NULL)
				*repeated = true;
			found = f;
		}
	}
	return found;
}

/* Is a Content-Type value the media type multipart/byteranges (any case,
 * whatever its parameters)? */
static bool resume_is_multipart_byteranges(const char *value, size_t len)
{
	static const char type[] = "multipart/byteranges";
	size_t n = sizeof(type) - 1;

	return len >= n && strncasecmp(value, type, n) == 0 &&
	       (len == n || value[n] == ';' || value[n] == ' ' || value[n] == '\t');
}

/* Does any Content-Type field of the head name multipart/byteranges? */
static bool resume_any_multipart_byteranges(const struct http1_head *head)
{
	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (f->name_len == sizeof("Content-Type") - 1 &&
		    http1_name_equals(f->name, f->name_len, "Content-Type") &&
		    resume_is_multipart_byteranges(f->value, f->value_len))
			return true;
	}
	return false;
}

enum resume_answer resume_check_answer(const struct resume *resume, const struct http1_head *head,
				       const struct http1_framing *framing)
{
	const struct http1_field *range, *validator, *coding;
	bool repeated;

	if (head->status != 206)
		return RESUME_ANSWER_NOT_PARTIAL;
	range = resume_only_field(head, "Content-Range", &repeated);
	if (range == NULL || repeated ||
	    !resume_content_range_is(range->value, range->value_len, resume->at, resume->length - 1,
				     resume->length))
		return RESUME_ANSWER_OTHER_RANGE;
	/* a multipart 206 has no top-level Content-Range (RFC 9110 section
	 * 14.6); one that says it has sent parts and boundaries, which spliced
	 * would become bytes of the download, in any of its Content-Type
	 * fields: with two, no one can tell which the body follows */
	if (resume_any_multipart_byteranges(head))
		return RESUME_ANSWER_MULTIPART;
	/* the 206 names its representation with the same kind of validator
	 * the 200 had; when it does, it must be the same one. A 206 must carry
	 * the ETag a 200 to the same request would (RFC 9110 section 15.3.7):
	 * one without it proves no representation, maybe a changed one from
	 * an origin that ignored If-Range. A Last-Modified it may leave out. */
	validator = resume_only_field(head, resume->etag ? "ETag" : "Last-Modified", &repeated);
	if (validator == NULL && resume->etag)
		return RESUME_ANSWER_NO_ETAG;
	if (repeated || (validator != NULL &&
			 (validator->value_len != resume->validator_len ||
			  memcmp(validator->value, resume->validator, resume->validator_len) != 0)))
		return RESUME_ANSWER_CHANGED;
	if (framing->body != HTTP1_BODY_LENGTH ||
	    framing->content_length != resume->length - resume->at)
		return RESUME_ANSWER_BAD_LENGTH;
	/* a 206 of another coding would splice gzip onto identity bytes: a
	 * strong ETag should differ between codings (RFC 9110 section
	 * 8.8.3), but a Last-Modified cannot, and some origins get it wrong;
	 * codings are tokens, compared without case. A 206 to If-Range
	 * should carry no representation fields but ETag and a few others
	 * (RFC 9110 section 15.3.7): one without Content-Encoding that names
	 * the 200's strong ETag (checked above) is that same representation,
	 * coding and all */
	coding = resume_only_field(head, "Content-Encoding", &repeated);
	if (repeated || (coding == NULL ? resume->coding_len != 0 && !resume->etag
					: coding->value_len != resume->coding_len ||
						  strncasecmp(coding->value, resume->coding,
							      resume->coding_len) != 0))
		return RESUME_ANSWER_OTHER_CODING;
	return RESUME_ANSWER_SPLICE;
}
