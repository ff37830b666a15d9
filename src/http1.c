#include "http1.h"

#include <string.h>

#include "http1_chars.h"
#include "http1_target.h"
#include "word_scan.h"

/* Indexed by byte value; the unit tests check every entry against the RFC
 * grammar through the public functions. */
const unsigned char http1_ctype[256] = {
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 00 */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 10 */
	0x22, 0x2f, 0x06, 0x27, 0x2f, 0x2f, 0x2f, 0x2f,
	0x2e, 0x2e, 0x2f, 0x2f, 0x2e, 0x6f, 0x6f, 0x26, /* 20 */
	0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f,
	0x7f, 0x7f, 0x26, 0x2e, 0x26, 0x2e, 0x26, 0x26, /* 30 */
	0x26, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x6f,
	0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, /* 40 */
	0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f,
	0x6f, 0x6f, 0x6f, 0x26, 0x02, 0x26, 0x27, 0x6f, /* 50 */
	0x27, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x6f,
	0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, /* 60 */
	0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f, 0x6f,
	0x6f, 0x6f, 0x6f, 0x26, 0x27, 0x26, 0x6f, 0x00, /* 70 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* 80 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* 90 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* a0 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* b0 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* c0 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* d0 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* e0 */
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
	0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* f0 */
};

/* Longest run of leading empty lines skipped before a request line. They also
 * count toward the head size; this just stops a stream of CRLFs early. */
#define HTTP1_MAX_EMPTY_LINES 8

#define HTTP1_CONTENT_LENGTH_DIGITS 18 /* keeps any Content-Length below 10^18 */

static const char http1_version_prefix[] = "HTTP/1.";

bool http1_equal_nocase(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (http1_lower((unsigned char)a[i]) != http1_lower((unsigned char)b[i]))
			return false;
	return true;
}

/* The offset of the first byte flagged in a word from WORD_HAS_LESS or
 * WORD_HAS_ZERO (not 0). Their false flags only ever sit above a true one, so
 * on a little-endian machine the lowest flag is exact; elsewhere the bytes are
 * looked at again one by one, less than eight. */
static size_t http1_first_flagged(const char *p, uint64_t flags, unsigned char below,
				  unsigned char also)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	(void)p;
	(void)below;
	(void)also;
	return (size_t)__builtin_ctzll(flags) >> 3;
#else
	size_t i = 0;

	(void)flags;
	while ((unsigned char)p[i] >= below && (unsigned char)p[i] != also)
		i++;
	return i;
#endif
}

/* Skip bytes allowed in a field value or reason phrase; returns the first byte
 * that is not one, or end. */
static const char *http1_skip_value(const char *p, const char *end)
{
	while (end - p >= 8) {
		uint64_t x, stops;

		memcpy(&x, p, 8);
		/* Control bytes and DEL stop the scan; of them only HTAB is a
		 * value byte, and rare enough to be stepped over one at a time. */
		stops = WORD_HAS_LESS(x, 0x20) | WORD_HAS_ZERO(x ^ (WORD_ONES * 0x7f));
		if (stops == 0) {
			p += 8;
			continue;
		}
		p += http1_first_flagged(p, stops, 0x20, 0x7f);
		if (*p != '\t')
			return p;
		p++;
	}
	for (; p < end; p++)
		if (!HTTP1_IS(*p, HTTP1_C_VALUE))
			return p;
	return p;
}

/* Skip request-target bytes (0x21..0x7e but backslash); returns the first other
 * byte, or end. */
static const char *http1_skip_target(const char *p, const char *end)
{
	while (p < end) {
		const char *stop;

		if (end - p >= 8) {
			uint64_t x;

			memcpy(&x, p, 8);
			if ((WORD_HAS_LESS(x, 0x21) | WORD_HAS_ZERO(x ^ (WORD_ONES * 0x7f)) |
			     WORD_HAS_ZERO(x ^ (WORD_ONES * '\\')) | (x & WORD_HIGHS)) == 0) {
				p += 8;
				continue;
			}
			stop = p + 8;
		} else {
			stop = end;
		}
		for (; p < stop; p++)
			if (!HTTP1_IS(*p, HTTP1_C_TARGET))
				return p;
	}
	return p;
}

/* Skip token characters; returns the first other byte, or end. */
static const char *http1_skip_token(const char *p, const char *end)
{
	/* Four bytes a step while four remain: one end test for four bytes. */
	for (; end - p >= 4; p += 4) {
		if (!HTTP1_IS(p[0], HTTP1_C_TCHAR))
			return p;
		if (!HTTP1_IS(p[1], HTTP1_C_TCHAR))
			return p + 1;
		if (!HTTP1_IS(p[2], HTTP1_C_TCHAR))
			return p + 2;
		if (!HTTP1_IS(p[3], HTTP1_C_TCHAR))
			return p + 3;
	}
	while (p < end && HTTP1_IS(*p, HTTP1_C_TCHAR))
		p++;
	return p;
}

/* True when s is a non-empty token. */
static bool http1_is_token(const char *s, size_t len)
{
	return len > 0 && http1_skip_token(s, s + len) == s + len;
}

/* Check a CRLF at p: DONE with p moved past it, MORE if cut short, or ERROR
 * (bare CR, or anything else where the CR must be) with *error set to
 * other_error unless the byte is a CR or LF out of place. */
static enum http1_parse http1_expect_crlf(const char **pp, const char *end,
					  enum http1_error other_error, enum http1_error *error)
{
	const char *p = *pp;

	if (p == end)
		return HTTP1_PARSE_MORE;
	if (*p != '\r') {
		*error = *p == '\n' ? HTTP1_ERR_BAD_LINE_ENDING : other_error;
		return HTTP1_PARSE_ERROR;
	}
	if (p + 1 == end)
		return HTTP1_PARSE_MORE;
	if (p[1] != '\n') {
		*error = HTTP1_ERR_BAD_LINE_ENDING;
		return HTTP1_PARSE_ERROR;
	}
	*pp = p + 2;
	return HTTP1_PARSE_DONE;
}

/* Check "HTTP/1." and a digit at p, as far as the buffer goes (RFC 9112
 * section 2.3). A minor version above 1 is read as 1.1, as a recipient
 * SHOULD read one higher than its own; *minor keeps the digit, which only
 * Via shows. Another major version is one this proxy does not speak, said
 * (505, RFC 9110 section 15.6.6) as soon as the dot after it is in. */
static enum http1_parse http1_parse_version(const char **pp, const char *end, int *minor,
					    enum http1_error *error)
{
	const char *p = *pp;
	size_t avail = (size_t)(end - p);
	size_t plen = sizeof(http1_version_prefix) - 1;
	size_t major_at = sizeof("HTTP/") - 1;

	if (memcmp(p, http1_version_prefix, avail < plen ? avail : plen) != 0) {
		/* "HTTP/" DIGIT "." of another major version (its dot tells it
		 * from "HTTP/01.1", which is no version at all) */
		if (avail > major_at && memcmp(p, "HTTP/", major_at) == 0 &&
		    HTTP1_IS_DIGIT(p[major_at]) && p[major_at] != '1') {
			if (avail == major_at + 1)
				return HTTP1_PARSE_MORE;
			if (p[major_at + 1] == '.') {
				*error = HTTP1_ERR_VERSION_NOT_SUPPORTED;
				return HTTP1_PARSE_ERROR;
			}
		}
		*error = HTTP1_ERR_BAD_VERSION;
		return HTTP1_PARSE_ERROR;
	}
	if (avail <= plen)
		return HTTP1_PARSE_MORE;
	if (!HTTP1_IS_DIGIT(p[plen])) {
		*error = HTTP1_ERR_BAD_VERSION;
		return HTTP1_PARSE_ERROR;
	}
	*minor = p[plen] - '0';
	*pp = p + plen + 1;
	return HTTP1_PARSE_DONE;
}

/* A version refused at p (HTTP1_ERR_BAD_VERSION in *error): a word that
 * does not even begin "HTTP/" is most often the rest of a target with a
 * space in it ("GET /a b HTTP/1.1"), and is read to its end to tell the
 * client which (RFC 9112 section 3.2: no whitespace in the target). Off the
 * path of a valid request line. */
static enum http1_parse http1_parse_version_word(const char *p, const char *end,
						 enum http1_error *error)
{
	size_t avail = (size_t)(end - p);
	size_t plen = sizeof("HTTP/") - 1;
	const char *q = p;

	if (memcmp(p, "HTTP/", avail < plen ? avail : plen) == 0)
		return HTTP1_PARSE_ERROR;
	while (q < end && !HTTP1_VERSION_WORD_END(*q))
		q++;
	if (q == end) {
		*error = HTTP1_ERR_NONE;
		return HTTP1_PARSE_MORE;
	}
	/* a second space right after the target is one too many, as after
	 * the method */
	*error = *q != ' ' ? HTTP1_ERR_BAD_VERSION
		 : q == p  ? HTTP1_ERR_BAD_REQUEST_LINE
			   : HTTP1_ERR_SPACE_IN_TARGET;
	return HTTP1_PARSE_ERROR;
}

/* Parse the request line at *pp, after any empty lines. */
static enum http1_parse http1_parse_request_line(const char **pp, const char *end,
						 const struct http1_limits *limits,
						 struct http1_head *head, enum http1_error *error)
{
	const char *p = *pp;
	const char *target;
	enum http1_parse r;

	p = http1_skip_token(p, end);
	if (p == end)
		return HTTP1_PARSE_MORE;
	if (*p != ' ' || p == *pp) {
		*error = p != *pp && (*p == '\r' || *p == '\n') ? HTTP1_ERR_BAD_REQUEST_LINE
								: HTTP1_ERR_BAD_METHOD;
		return HTTP1_PARSE_ERROR;
	}
	head->method = *pp;
	head->method_len = (size_t)(p - *pp);

	target = ++p;
	p = http1_skip_target(p, end);
	if ((size_t)(p - target) > limits->max_target_bytes) {
		/* what a log may show of it: as much as a target may have */
		head->target = target;
		head->target_len = limits->max_target_bytes;
		*error = HTTP1_ERR_URI_TOO_LONG;
		return HTTP1_PARSE_ERROR;
	}
	if (p == end)
		return HTTP1_PARSE_MORE;
	if (p == target && (*p == ' ' || *p == '\r' || *p == '\n')) {
		*error = HTTP1_ERR_BAD_REQUEST_LINE;
		return HTTP1_PARSE_ERROR;
	}
	head->target = target;
	if (*p != ' ') {
		/* A line ending right after the target is HTTP/0.9. */
		*error = *p == '\r' || *p == '\n' ? HTTP1_ERR_BAD_VERSION
			 : *p == '\t'		  ? HTTP1_ERR_SPACE_IN_TARGET
						  : HTTP1_ERR_BAD_TARGET;
		/* the target as read, up to the byte refused in it */
		head->target_len = (size_t)(p - target) + (*p != '\r' && *p != '\n');
		return HTTP1_PARSE_ERROR;
	}
	head->target_len = (size_t)(p - target);

	p++;
	r = http1_parse_version(&p, end, &head->version_minor, error);
	if (r == HTTP1_PARSE_ERROR && *error == HTTP1_ERR_BAD_VERSION)
		r = http1_parse_version_word(p, end, error);
	if (r != HTTP1_PARSE_DONE)
		return r;
	/* Checked only now so that "PRI * HTTP/2.0" reads as a version error. */
	if (!http1_target_parse(head)) {
		*error = HTTP1_ERR_BAD_TARGET;
		return HTTP1_PARSE_ERROR;
	}
	r = http1_expect_crlf(&p, end,
			      p < end && HTTP1_IS_DIGIT(*p) ? HTTP1_ERR_BAD_VERSION
							    : HTTP1_ERR_BAD_REQUEST_LINE,
			      error);
	if (r != HTTP1_PARSE_DONE)
		return r;
	*pp = p;
	return HTTP1_PARSE_DONE;
}

/* Parse the status line at *pp. */
static enum http1_parse http1_parse_status_line(const char **pp, const char *end,
						struct http1_head *head, enum http1_error *error)
{
	const char *p = *pp;
	size_t avail = (size_t)(end - p);
	enum http1_parse r;
	int status = 0;

	/* Anything not starting "HTTP/" is not a status line at all; after
	 * it, a version other than 1.0 or 1.1 is a version error. */
	if (memcmp(p, "HTTP/", avail < 5 ? avail : 5) != 0) {
		*error = HTTP1_ERR_BAD_STATUS_LINE;
		return HTTP1_PARSE_ERROR;
	}
	r = http1_parse_version(&p, end, &head->version_minor, error);
	if (r != HTTP1_PARSE_DONE)
		return r;
	for (int i = 0; i < 5; i++, p++) {
		if (p == end)
			return HTTP1_PARSE_MORE;
		/* "HTTP/1.1 200" with no space and no reason before the CRLF is
		 * out of grammar but unambiguous, and real servers send it:
		 * refusing it would only turn their answers into 502s */
		if (i == 4 && *p == '\r')
			break;
		if (i == 0 || i == 4 ? *p != ' ' : !HTTP1_IS_DIGIT(*p)) {
			/* A digit right after "HTTP/1.x" makes a longer version. */
			*error = i == 0 && HTTP1_IS_DIGIT(*p) ? HTTP1_ERR_BAD_VERSION
							      : HTTP1_ERR_BAD_STATUS_LINE;
			return HTTP1_PARSE_ERROR;
		}
		if (i >= 1 && i <= 3)
			status = status * 10 + (*p - '0');
		if (i == 3 && (status < 100 || status > 599)) {
			*error = HTTP1_ERR_BAD_STATUS_LINE;
			return HTTP1_PARSE_ERROR;
		}
	}
	head->status = status;
	head->reason = p;
	p = http1_skip_value(p, end);
	head->reason_len = (size_t)(p - head->reason);
	r = http1_expect_crlf(&p, end, HTTP1_ERR_BAD_STATUS_LINE, error);
	if (r != HTTP1_PARSE_DONE)
		return r;
	*pp = p;
	return HTTP1_PARSE_DONE;
}

/* Case-insensitive equality of a field name or part of a field value with a
 * literal of lower-case letters, digits and '-' as long as it. Setting bit
 * 0x20 lower-cases a letter and turns no other byte allowed there into one
 * of the literal's (only control bytes but HTAB would), so a word compares
 * eight bytes at once. */
static bool http1_fold_equal(const char *name, const char *lit, size_t len)
{
	if (len >= 8) {
		uint64_t x, y;

		for (size_t i = 0; i + 8 < len; i += 8) {
			memcpy(&x, name + i, 8);
			memcpy(&y, lit + i, 8);
			if ((x | (WORD_ONES * 0x20)) != y)
				return false;
		}
		/* the last eight bytes, overlapping the words before */
		memcpy(&x, name + len - 8, 8);
		memcpy(&y, lit + len - 8, 8);
		return (x | (WORD_ONES * 0x20)) == y;
	}
	if (len >= 4) {
		uint32_t x, y, u, v;

		memcpy(&x, name, 4);
		memcpy(&y, lit, 4);
		memcpy(&u, name + len - 4, 4);
		memcpy(&v, lit + len - 4, 4);
		return ((x | 0x20202020u) == y) & ((u | 0x20202020u) == v);
	}
	for (size_t i = 0; i < len; i++)
		if ((name[i] | 0x20) != lit[i])
			return false;
	return true;
}

/* The same for a string known to be as long as the literal. */
#define HTTP1_TOKEN_IS(name, lit) http1_fold_equal(name, lit, sizeof(lit) - 1)

/* http1_fold_equal for a counted string of any length. */
#define HTTP1_FOLD_IS(s, len, lit) ((len) == sizeof(lit) - 1 && HTTP1_TOKEN_IS(s, lit))

/* True when name, with each '_' read as '-', is the lower-case literal lit
 * though it differs from it: a framing field's name with '_' for '-', which
 * an origin mapping '_' to '-' (as CGI-style servers do) would read as a second
 * framing field. Host and Connection have no '-' for a '_' to stand in for. */
static bool http1_is_underscored(const char *name, size_t len, const char *lit)
{
	bool underscore = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = http1_lower((unsigned char)name[i]);

		if (c == '_') {
			underscore = true;
			c = '-';
		}
		if (c != (unsigned char)lit[i])
			return false;
	}
	return underscore;
}

/* Which of the names that matter to framing and forwarding a field name is;
 * its length rules out most names before any byte is compared. */
static uint32_t http1_field_name_of(const char *name, size_t len)
{
	switch (len) {
	case 2:
		return HTTP1_TOKEN_IS(name, "te") ? HTTP1_FIELD_TE : HTTP1_FIELD_OTHER;
	case 4:
		if (HTTP1_TOKEN_IS(name, "host"))
			return HTTP1_FIELD_HOST;
		return HTTP1_TOKEN_IS(name, "date") ? HTTP1_FIELD_DATE : HTTP1_FIELD_OTHER;
	case 6:
		return HTTP1_TOKEN_IS(name, "expect") ? HTTP1_FIELD_EXPECT : HTTP1_FIELD_OTHER;
	case 7:
		return HTTP1_TOKEN_IS(name, "upgrade") ? HTTP1_FIELD_UPGRADE : HTTP1_FIELD_OTHER;
	case 10:
		if (HTTP1_TOKEN_IS(name, "connection"))
			return HTTP1_FIELD_CONNECTION;
		return HTTP1_TOKEN_IS(name, "keep-alive") ? HTTP1_FIELD_KEEP_ALIVE
							  : HTTP1_FIELD_OTHER;
	case 14:
		if (HTTP1_TOKEN_IS(name, "content-length"))
			return HTTP1_FIELD_CONTENT_LENGTH;
		if (HTTP1_TOKEN_IS(name, "retry-attempts"))
			return HTTP1_FIELD_RETRY_ATTEMPTS;
		return http1_is_underscored(name, len, "content-length")
			       ? HTTP1_FIELD_UNDERSCORED_FRAMING
			       : HTTP1_FIELD_OTHER;
	case 16:
		return HTTP1_TOKEN_IS(name, "proxy-connection") ? HTTP1_FIELD_PROXY_CONNECTION
								: HTTP1_FIELD_OTHER;
	case 17:
		if (HTTP1_TOKEN_IS(name, "transfer-encoding"))
			return HTTP1_FIELD_TRANSFER_ENCODING;
		return http1_is_underscored(name, len, "transfer-encoding")
			       ? HTTP1_FIELD_UNDERSCORED_FRAMING
			       : HTTP1_FIELD_OTHER;
	case 19:
		return HTTP1_TOKEN_IS(name, "proxy-authorization") ? HTTP1_FIELD_PROXY_AUTHORIZATION
								   : HTTP1_FIELD_OTHER;
	}
	return HTTP1_FIELD_OTHER;
}

/* Parse one field line at *pp into f. */
static enum http1_parse http1_parse_field(const char **pp, const char *end, struct http1_field *f,
					  enum http1_error *error)
{
	const char *line = *pp;
	const char *p = http1_skip_token(line, end);
	const char *value;
	const char *value_end;
	enum http1_parse r;

	if (p == end)
		return HTTP1_PARSE_MORE;
	if (*p != ':' || p == line) {
		*error = HTTP1_IS_WS(*p) && p != line ? HTTP1_ERR_SPACE_BEFORE_COLON
						      : HTTP1_ERR_BAD_FIELD_NAME;
		return HTTP1_PARSE_ERROR;
	}
	f->name = line;
	f->name_len = (uint32_t)(p - line);
	f->known = http1_field_name_of(line, f->name_len);
	p++;
	while (p < end && HTTP1_IS_WS(*p))
		p++;
	value = p;
	p = http1_skip_value(p, end);
	value_end = p;
	r = http1_expect_crlf(&p, end, HTTP1_ERR_BAD_FIELD_VALUE, error);
	if (r != HTTP1_PARSE_DONE)
		return r;
	while (value_end > value && HTTP1_IS_WS(value_end[-1]))
		value_end--;
	f->value = value;
	f->value_len = (uint32_t)(value_end - value);
	f->line = line;
	f->line_len = (uint32_t)(p - line);
	*pp = p;
	return HTTP1_PARSE_DONE;
}

/* Parse field lines and the empty line ending the head. */
static enum http1_parse http1_parse_fields(const char **pp, const char *end,
					   struct http1_head *head, enum http1_error *error)
{
	const char *p = *pp;

	for (;;) {
		enum http1_parse r;

		if (p == end)
			return HTTP1_PARSE_MORE;
		if (*p == '\r' || *p == '\n') {
			r = http1_expect_crlf(&p, end, HTTP1_ERR_BAD_LINE_ENDING, error);
			if (r == HTTP1_PARSE_DONE)
				*pp = p;
			return r;
		}
		/* Also whitespace before the first field (RFC 9112 section 2.2):
		 * it is refused the same way. */
		if (HTTP1_IS_WS(*p)) {
			*error = HTTP1_ERR_OBS_FOLD;
			return HTTP1_PARSE_ERROR;
		}
		if (head->field_count == HTTP1_MAX_FIELDS) {
			*error = HTTP1_ERR_TOO_MANY_FIELDS;
			return HTTP1_PARSE_ERROR;
		}
		r = http1_parse_field(&p, end, &head->fields[head->field_count], error);
		if (r != HTTP1_PARSE_DONE)
			return r;
		head->field_count++;
	}
}

/* Reset what a parse fills in; the field array is left alone, it is only
 * valid up to field_count. */
static void http1_head_reset(struct http1_head *head)
{
	head->method = NULL;
	head->target = NULL;
	head->reason = NULL;
	head->method_len = 0;
	head->target_len = 0;
	memset(&head->parsed_target, 0, sizeof(head->parsed_target));
	head->reason_len = 0;
	head->status = 0;
	head->version_minor = 0;
	head->head_len = 0;
	head->field_count = 0;
}

/* The bytes a head may span: no more than the limit, and no more than a
 * field's 32-bit line length can describe. */
static size_t http1_head_window(size_t len, size_t max_head_bytes)
{
	size_t lim = max_head_bytes < UINT32_MAX ? max_head_bytes : UINT32_MAX;

	return len < lim ? len : lim;
}

enum http1_parse http1_parse_request_head(const char *buf, size_t len,
					  const struct http1_limits *limits,
					  struct http1_head *head, enum http1_error *error)
{
	const char *p = buf;
	const char *end = buf + http1_head_window(len, limits->max_head_bytes);
	enum http1_parse r;
	int empty = 0;

	*error = HTTP1_ERR_NONE;
	http1_head_reset(head);
	while (p < end && (*p == '\r' || *p == '\n')) {
		if (++empty > HTTP1_MAX_EMPTY_LINES) {
			*error = HTTP1_ERR_BAD_REQUEST_LINE;
			return HTTP1_PARSE_ERROR;
		}
		r = http1_expect_crlf(&p, end, HTTP1_ERR_BAD_LINE_ENDING, error);
		if (r == HTTP1_PARSE_ERROR)
			return r;
		if (r == HTTP1_PARSE_MORE)
			goto more;
	}
	if (p == end)
		goto more;
	r = http1_parse_request_line(&p, end, limits, head, error);
	if (r == HTTP1_PARSE_DONE)
		r = http1_parse_fields(&p, end, head, error);
	if (r == HTTP1_PARSE_ERROR)
		return r;
	if (r == HTTP1_PARSE_DONE) {
		head->head_len = (size_t)(p - buf);
		return r;
	}
more:
	/* Only the first max_head_bytes were looked at: more than that
	 * without a whole head will never do. */
	if (len > limits->max_head_bytes || len >= UINT32_MAX) {
		*error = HTTP1_ERR_HEAD_TOO_LARGE;
		return HTTP1_PARSE_ERROR;
	}
	return HTTP1_PARSE_MORE;
}

enum http1_parse http1_parse_response_head(const char *buf, size_t len, size_t max_head_bytes,
					   struct http1_head *head, enum http1_error *error)
{
	const char *p = buf;
	const char *end = buf + http1_head_window(len, max_head_bytes);
	enum http1_parse r = HTTP1_PARSE_MORE;

	*error = HTTP1_ERR_NONE;
	http1_head_reset(head);
	if (p < end)
		r = http1_parse_status_line(&p, end, head, error);
	if (r == HTTP1_PARSE_DONE)
		r = http1_parse_fields(&p, end, head, error);
	if (r == HTTP1_PARSE_DONE) {
		head->head_len = (size_t)(p - buf);
		return r;
	}
	if (r == HTTP1_PARSE_MORE && (len > max_head_bytes || len >= UINT32_MAX)) {
		*error = HTTP1_ERR_HEAD_TOO_LARGE;
		return HTTP1_PARSE_ERROR;
	}
	return r;
}

/* http1_list_next(), inlined where every head's fields pass */
static inline bool http1_list_step(const char **pp, const char *end, const char **elem,
				   size_t *elem_len)
{
	const char *p = *pp;
	const char *e;

	if (p == NULL)
		return false;
	while (p < end && HTTP1_IS_WS(*p))
		p++;
	*elem = p;
	while (p < end && *p != ',')
		p++;
	e = p;
	while (e > *elem && HTTP1_IS_WS(e[-1]))
		e--;
	*elem_len = (size_t)(e - *elem);
	/* NULL marks "no more": a trailing comma still yields one empty element. */
	*pp = p < end ? p + 1 : NULL;
	return true;
}

bool http1_list_next(const char **pp, const char *end, const char **elem, size_t *elem_len)
{
	return http1_list_step(pp, end, elem, elem_len);
}

/* What a head's fields say about framing, gathered in one pass. */
struct http1_scan {
	const struct http1_field *host; /* the Host field, if any */
	int host_count;			/* number of Host fields */
	bool has_length;		/* a Content-Length was seen */
	bool has_te;			/* a Transfer-Encoding was seen */
	bool close;			/* Connection: close */
	bool keep_alive;		/* Connection: keep-alive */
	bool upgrade_option;		/* Connection: upgrade */
	bool other_option;		/* Connection: any other option */
	bool has_upgrade;		/* an Upgrade field naming something not h2c */
	bool expect_continue;		/* Expect: 100-continue */
	bool expect_other;		/* another expectation */
	bool length_leading_zero;	/* a Content-Length value like 007 */
	bool length_repeated;		/* ... listed, or in more than one field */
	bool underscore_framing;	/* Content_Length or Transfer_Encoding */
	uint64_t length;		/* the Content-Length value */
};

/* Add one Content-Length field's values, which must all equal any seen before. */
static int http1_scan_content_length(const struct http1_field *f, struct http1_scan *scan,
				     enum http1_error *error)
{
	const char *p = f->value;
	const char *end = f->value + f->value_len;
	const char *elem;
	size_t elem_len;

	if (f->value_len == 0) {
		*error = HTTP1_ERR_BAD_CONTENT_LENGTH;
		return -1;
	}
	/* RFC 9110 section 8.6 allows a list only of one value repeated. */
	while (http1_list_step(&p, end, &elem, &elem_len)) {
		uint64_t v = 0;

		if (elem_len == 0 || elem_len > HTTP1_CONTENT_LENGTH_DIGITS) {
			*error = HTTP1_ERR_BAD_CONTENT_LENGTH;
			return -1;
		}
		for (size_t i = 0; i < elem_len; i++) {
			if (!HTTP1_IS_DIGIT(elem[i])) {
				*error = HTTP1_ERR_BAD_CONTENT_LENGTH;
				return -1;
			}
			v = v * 10 + (uint64_t)(elem[i] - '0');
		}
		if (elem_len > 1 && elem[0] == '0')
			scan->length_leading_zero = true;
		if (scan->has_length && v != scan->length) {
			*error = HTTP1_ERR_DIFFERING_CONTENT_LENGTH;
			return -1;
		}
		scan->length_repeated = scan->length_repeated || scan->has_length;
		scan->has_length = true;
		scan->length = v;
	}
	return 0;
}

/* Note the options of one Connection field. */
static void http1_scan_connection(const struct http1_field *f, struct http1_scan *scan)
{
	const char *p = f->value;
	const char *elem;
	size_t elem_len;

	while (http1_list_step(&p, f->value + f->value_len, &elem, &elem_len)) {
		if (HTTP1_FOLD_IS(elem, elem_len, "close"))
			scan->close = true;
		else if (HTTP1_FOLD_IS(elem, elem_len, "keep-alive"))
			scan->keep_alive = true;
		else if (HTTP1_FOLD_IS(elem, elem_len, "upgrade"))
			scan->upgrade_option = true;
		else if (elem_len > 0)
			scan->other_option = true;
	}
}

bool http1_upgrade_is_h2c(const char *elem, size_t len)
{
	const char *slash = memchr(elem, '/', len);

	if (slash != NULL)
		len = (size_t)(slash - elem);
	return HTTP1_FOLD_IS(elem, len, "h2c");
}

/* Note whether one Upgrade field names a protocol the proxy may offer. */
static void http1_scan_upgrade(const struct http1_field *f, struct http1_scan *scan)
{
	const char *p = f->value;
	const char *elem;
	size_t elem_len;

	while (!scan->has_upgrade && http1_list_step(&p, f->value + f->value_len, &elem, &elem_len))
		scan->has_upgrade = elem_len > 0 && !http1_upgrade_is_h2c(elem, elem_len);
}

/* Note the expectations of one Expect field. */
static void http1_scan_expect(const struct http1_field *f, struct http1_scan *scan)
{
	const char *p = f->value;
	const char *elem;
	size_t elem_len;

	while (http1_list_step(&p, f->value + f->value_len, &elem, &elem_len)) {
		if (elem_len == 0)
			continue;
		if (HTTP1_FOLD_IS(elem, elem_len, "100-continue"))
			scan->expect_continue = true;
		else
			scan->expect_other = true;
	}
}

/* Go through the fields once, checking Content-Length and noting the rest. */
static int http1_scan_fields(const struct http1_head *head, struct http1_scan *scan,
			     enum http1_error *error)
{
	memset(scan, 0, sizeof(*scan));
	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		switch (f->known) {
		case HTTP1_FIELD_HOST:
			scan->host = f;
			scan->host_count++;
			break;
		case HTTP1_FIELD_EXPECT:
			http1_scan_expect(f, scan);
			break;
		case HTTP1_FIELD_CONNECTION:
			http1_scan_connection(f, scan);
			break;
		case HTTP1_FIELD_CONTENT_LENGTH:
			if (http1_scan_content_length(f, scan, error) < 0)
				return -1;
			break;
		case HTTP1_FIELD_TRANSFER_ENCODING:
			scan->has_te = true;
			break;
		case HTTP1_FIELD_UNDERSCORED_FRAMING:
			scan->underscore_framing = true;
			break;
		case HTTP1_FIELD_UPGRADE:
			http1_scan_upgrade(f, scan);
			break;
		}
	}
	return 0;
}

/* Check that all Transfer-Encoding fields together list codings ending in a
 * single chunked (RFC 9112 section 6.1), and note whether any other coding
 * comes before it. Parameters are refused: nothing here needs them and they
 * only widen what must be understood alike by every hop. */
static int http1_check_transfer_encoding(const struct http1_head *head,
					 struct http1_framing *framing, enum http1_error *error)
{
	bool chunked_seen = false;
	bool chunked_last = false;
	size_t codings = 0;

	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];
		const char *p = f->value;
		const char *elem;
		size_t elem_len;

		if (f->known != HTTP1_FIELD_TRANSFER_ENCODING)
			continue;
		while (http1_list_step(&p, f->value + f->value_len, &elem, &elem_len)) {
			/* RFC 9110 section 5.6.1 lets a recipient skip empty elements,
			 * but the field goes upstream as it came, and a next hop that
			 * reads "chunked," differently would frame the body
			 * differently: refuse them here. */
			if (!http1_is_token(elem, elem_len))
				goto bad;
			codings++;
			chunked_last = HTTP1_FOLD_IS(elem, elem_len, "chunked");
			if (chunked_last) {
				if (chunked_seen)
					goto bad;
				chunked_seen = true;
			}
		}
	}
	if (chunked_last) {
		framing->coded_before_chunked = codings > 1;
		return 0;
	}
bad:
	*error = HTTP1_ERR_BAD_TRANSFER_ENCODING;
	return -1;
}

/* Decide CHUNKED or LENGTH or neither from the scan, for either direction. */
static int http1_body_framing(const struct http1_head *head, const struct http1_scan *scan,
			      struct http1_framing *framing, enum http1_error *error)
{
	if (scan->has_te) {
		/* RFC 9112 section 6.1: TE in HTTP/1.0 means faulty framing. */
		if (head->version_minor == 0) {
			*error = HTTP1_ERR_TE_IN_HTTP10;
			return -1;
		}
		if (scan->has_length) {
			*error = HTTP1_ERR_CL_AND_TE;
			return -1;
		}
		if (http1_check_transfer_encoding(head, framing, error) < 0)
			return -1;
		framing->body = HTTP1_BODY_CHUNKED;
	} else if (scan->has_length && scan->length > 0) {
		framing->body = HTTP1_BODY_LENGTH;
		framing->content_length = scan->length;
	}
	return 0;
}

/* Keep-alive by version and Connection options (RFC 9112 section 9.3). */
static bool http1_keep_alive(const struct http1_head *head, const struct http1_scan *scan)
{
	if (scan->close)
		return false;
	return head->version_minor >= 1 || scan->keep_alive;
}

int http1_request_framing(const struct http1_head *head, struct http1_framing *framing,
			  enum http1_error *error)
{
	struct http1_scan scan;
	uint16_t port = 0;
	bool host_routable = true;

	memset(framing, 0, sizeof(*framing));
	*error = HTTP1_ERR_NONE;
	if (http1_scan_fields(head, &scan, error) < 0)
		return -1;
	/* Refused in requests only: a request is what an origin behind the
	 * proxy could read otherwise than the proxy did. */
	if (scan.underscore_framing) {
		*error = HTTP1_ERR_UNDERSCORE_FRAMING;
		return -1;
	}
	if (scan.length_leading_zero) {
		*error = HTTP1_ERR_BAD_CONTENT_LENGTH;
		return -1;
	}
	if (scan.host_count > 1) {
		*error = HTTP1_ERR_BAD_HOST;
		return -1;
	}
	/* An empty Host is valid only for a target without authority (RFC 9110
	 * section 7.2), which a proxy cannot forward anywhere: refused too. */
	if (scan.host != NULL &&
	    !http1_target_authority(scan.host->value, scan.host->value_len, &framing->host_name,
				    &framing->host_name_len, &port, &host_routable)) {
		*error = HTTP1_ERR_BAD_HOST;
		return -1;
	}
	framing->host_port = port;
	if (scan.host == NULL && head->version_minor >= 1) {
		*error = HTTP1_ERR_MISSING_HOST;
		return -1;
	}
	if (http1_body_framing(head, &scan, framing, error) < 0)
		return -1;
	/* A coding before chunked (gzip, chunked) is one the proxy cannot
	 * decode, and an origin that does not know it either may take the
	 * body for no body and its bytes for the next request: refused, as
	 * RFC 9112 section 6.1 has a server do with a coding it does not
	 * understand. */
	if (framing->coded_before_chunked) {
		*error = HTTP1_ERR_CODING_NOT_IMPLEMENTED;
		return -1;
	}
	/* A CONNECT has no content (RFC 9110 section 9.3.6): what follows its
	 * head is the tunnel's, where a hop that read a body first would start
	 * the tunnel at another byte. "Content-Length: 0" frames nothing. */
	if (framing->body != HTTP1_BODY_NONE &&
	    head->parsed_target.form == HTTP1_TARGET_AUTHORITY) {
		*error = HTTP1_ERR_CONNECT_CONTENT;
		return -1;
	}
	if (scan.expect_other) {
		*error = HTTP1_ERR_BAD_EXPECT;
		return -1;
	}
	/* 100-continue means nothing in HTTP/1.0 (RFC 9110 section 10.1.1),
	 * nor without content to wait for. */
	framing->expect_continue = scan.expect_continue && head->version_minor >= 1 &&
				   framing->body != HTTP1_BODY_NONE;
	framing->keep_alive = http1_keep_alive(head, &scan);
	framing->length_repeated = scan.length_repeated;
	framing->connection_options = scan.other_option;
	/* Upgrade in HTTP/1.0 is to be ignored (RFC 9110 section 7.8). With
	 * content, the switch would come after a body the proxy may be
	 * replaying: such a request goes on without Upgrade, a choice RFC
	 * 9110 leaves to every hop. A CONNECT has its own switch. */
	framing->upgrade = scan.has_upgrade && scan.upgrade_option && head->version_minor >= 1 &&
			   framing->body == HTTP1_BODY_NONE &&
			   head->parsed_target.form != HTTP1_TARGET_AUTHORITY;
	if (scan.host != NULL) {
		framing->host = scan.host->value;
		framing->host_len = scan.host->value_len;
	}
	/* Without authority in the target, routes match on Host, so it must be
	 * a host the proxy can route on, as a target's host must. Checked last:
	 * a request with a framing fault as well gets that fault's status. */
	if (!host_routable && (head->parsed_target.form == HTTP1_TARGET_ORIGIN ||
			       head->parsed_target.form == HTTP1_TARGET_ASTERISK)) {
		*error = HTTP1_ERR_BAD_HOST;
		return -1;
	}
	return 0;
}

int http1_response_framing(const struct http1_head *head, bool request_was_head,
			   struct http1_framing *framing, enum http1_error *error)
{
	struct http1_scan scan;

	memset(framing, 0, sizeof(*framing));
	*error = HTTP1_ERR_NONE;
	if (http1_scan_fields(head, &scan, error) < 0)
		return -1;
	/* RFC 9112 section 6.3 rule 3, also for an answer without content: a
	 * HEAD's or 304's Transfer-Encoding goes on, and a hop may not forward
	 * Content-Length beside it. Handled as the error it may be, as when a
	 * body follows. */
	if (scan.has_te && scan.has_length) {
		*error = HTTP1_ERR_CL_AND_TE;
		return -1;
	}
	framing->keep_alive = http1_keep_alive(head, &scan);
	framing->length_repeated = scan.length_repeated;
	framing->connection_options = scan.other_option;
	/* RFC 9112 section 6.3 rule 1: these never have content, whatever
	 * their fields say; Content-Length was still checked above. */
	if (request_was_head || head->status < 200 || head->status == 204 || head->status == 304) {
		/* RFC 9112 section 6.1: Transfer-Encoding from HTTP/1.0 is
		 * faulty framing, content or not: close after this one */
		if (scan.has_te && head->version_minor == 0)
			framing->keep_alive = false;
		return 0;
	}
	if (http1_body_framing(head, &scan, framing, error) < 0)
		return -1;
	if (!scan.has_te && !scan.has_length) {
		framing->body = HTTP1_BODY_UNTIL_CLOSE;
		framing->keep_alive = false;
	}
	return 0;
}

/* By field name: 1 for a name that is always hop-by-hop, -1 for
 * Content-Length, which never is, 0 for a name only the Connection field can
 * make hop-by-hop. Content-Length is never dropped because Connection names
 * it: the body is forwarded, and without its length the next hop would read
 * it as the start of another message. Proxy-Authorization is the client's
 * credentials for this proxy, which asks for none: they never go on to an
 * origin (RFC 9110 section 11.7.2). */
static const signed char http1_fixed_hop[HTTP1_FIELD_NAME_COUNT] = {
	[HTTP1_FIELD_CONNECTION] = 1,
	[HTTP1_FIELD_CONTENT_LENGTH] = -1,
	[HTTP1_FIELD_TRANSFER_ENCODING] = 1,
	[HTTP1_FIELD_TE] = 1,
	[HTTP1_FIELD_UPGRADE] = 1,
	[HTTP1_FIELD_KEEP_ALIVE] = 1,
	[HTTP1_FIELD_PROXY_CONNECTION] = 1,
	[HTTP1_FIELD_UNDERSCORED_FRAMING] = 0,
	[HTTP1_FIELD_PROXY_AUTHORIZATION] = 1,
	[HTTP1_FIELD_RETRY_ATTEMPTS] = 0,
	[HTTP1_FIELD_DATE] = 0,
};

void http1_hop_by_hop_marks(const struct http1_head *head, bool *hop)
{
	size_t first = head->field_count; /* the first Connection field */
	size_t i, j;

	for (i = 0; i < head->field_count; i++) {
		uint32_t known = head->fields[i].known;

		hop[i] = http1_fixed_hop[known] > 0;
		if (known == HTTP1_FIELD_CONNECTION && first == head->field_count)
			first = i;
	}
	/* one walk over each Connection element, not one per field */
	for (i = first; i < head->field_count; i++) {
		const struct http1_field *c = &head->fields[i];
		const char *p = c->value;
		const char *elem;
		size_t elem_len;

		if (c->known != HTTP1_FIELD_CONNECTION)
			continue;
		while (http1_list_step(&p, c->value + c->value_len, &elem, &elem_len)) {
			/* "keep-alive" and the like name fields marked already */
			if (http1_fixed_hop[http1_field_name_of(elem, elem_len)] != 0)
				continue;
			for (j = 0; j < head->field_count; j++) {
				const struct http1_field *f = &head->fields[j];

				if (http1_fixed_hop[f->known] == 0 && !hop[j] &&
				    f->name_len == elem_len &&
				    http1_equal_nocase(elem, elem_len, f->name, f->name_len))
					hop[j] = true;
			}
		}
	}
}

/* Fields a trailer section never passes on besides the hop-by-hop ones
 * (http1_fixed_hop), lower case: those RFC 9110 section 6.5.1 says cannot
 * be processed after the content (framing, routing, authentication,
 * request modifiers, content format, response controls), as other
 * implementations list them; and Retry-Attempts, which the proxy sets
 * itself in the head. */
static const char *const http1_trailer_never[] = {
	"content-length",
	"trailer",
	"host",
	"authorization",
	"proxy-authorization",
	"www-authenticate",
	"proxy-authenticate",
	"expect",
	"max-forwards",
	"range",
	"content-type",
	"content-encoding",
	"content-range",
	"cache-control",
	"pragma",
	"retry-attempts",
};

/* Is name hop-by-hop, or one of http1_trailer_never? */
static bool http1_trailer_never_passes(const char *name, size_t len)
{
	if (http1_fixed_hop[http1_field_name_of(name, len)] > 0)
		return true;
	for (size_t i = 0; i < sizeof(http1_trailer_never) / sizeof(http1_trailer_never[0]); i++)
		if (http1_name_equals(name, len, http1_trailer_never[i]))
			return true;
	return false;
}

size_t http1_trailer_named(const struct http1_head *head, char *out, size_t room)
{
	size_t len = 0;

	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *c = &head->fields[i];
		const char *p = c->value;
		const char *elem;
		size_t elem_len;

		if (c->known != HTTP1_FIELD_CONNECTION)
			continue;
		while (http1_list_step(&p, c->value + c->value_len, &elem, &elem_len)) {
			if (elem_len == 0 || http1_name_equals(elem, elem_len, "close") ||
			    http1_trailer_never_passes(elem, elem_len))
				continue;
			if (len + elem_len + 1 <= room) {
				memcpy(out + len, elem, elem_len);
				out[len + elem_len] = ',';
			}
			len += elem_len + 1;
		}
	}
	return len;
}

bool http1_trailer_field_passes(const char *name, size_t len, const char *named, size_t named_len)
{
	if (http1_trailer_never_passes(name, len))
		return false;
	/* each name in the list ends in a comma */
	while (named_len > 0) {
		const char *comma = memchr(named, ',', named_len);
		size_t elem_len = (size_t)(comma - named);

		if (http1_equal_nocase(name, len, named, elem_len))
			return false;
		named += elem_len + 1;
		named_len -= elem_len + 1;
	}
	return true;
}

const struct http1_field *http1_find_field(const struct http1_head *head, const char *name)
{
	size_t len = strlen(name);

	for (size_t i = 0; i < head->field_count; i++)
		if (http1_equal_nocase(head->fields[i].name, head->fields[i].name_len, name, len))
			return &head->fields[i];
	return NULL;
}

int http1_error_status(enum http1_error error)
{
	switch (error) {
	case HTTP1_ERR_URI_TOO_LONG:
		return 414;
	case HTTP1_ERR_HEAD_TOO_LARGE:
	case HTTP1_ERR_TOO_MANY_FIELDS:
		return 431;
	case HTTP1_ERR_BAD_EXPECT:
		return 417;
	case HTTP1_ERR_VERSION_NOT_SUPPORTED:
		return 505;
	case HTTP1_ERR_CODING_NOT_IMPLEMENTED:
		return 501;
	default:
		return 400;
	}
}

const char *http1_error_text(enum http1_error error)
{
	static const char *const texts[HTTP1_ERR_COUNT] = {
		[HTTP1_ERR_NONE] = "no error",
		[HTTP1_ERR_BAD_REQUEST_LINE] = "invalid request line",
		[HTTP1_ERR_BAD_METHOD] = "invalid method",
		[HTTP1_ERR_BAD_TARGET] = "invalid request target",
		[HTTP1_ERR_SPACE_IN_TARGET] = "whitespace in the request target",
		[HTTP1_ERR_BAD_VERSION] = "invalid http version",
		[HTTP1_ERR_VERSION_NOT_SUPPORTED] = "http version not supported: http/1.x only",
		[HTTP1_ERR_URI_TOO_LONG] = "request target too long",
		[HTTP1_ERR_HEAD_TOO_LARGE] = "header section too large",
		[HTTP1_ERR_TOO_MANY_FIELDS] = "too many header fields",
		[HTTP1_ERR_BAD_LINE_ENDING] = "bare cr or lf",
		[HTTP1_ERR_BAD_FIELD_NAME] = "invalid header field name",
		[HTTP1_ERR_SPACE_BEFORE_COLON] = "whitespace before colon",
		[HTTP1_ERR_OBS_FOLD] = "obsolete line folding",
		[HTTP1_ERR_BAD_FIELD_VALUE] = "invalid header field value",
		[HTTP1_ERR_BAD_STATUS_LINE] = "invalid status line",
		[HTTP1_ERR_CL_AND_TE] = "both content-length and transfer-encoding",
		[HTTP1_ERR_BAD_CONTENT_LENGTH] = "invalid content-length",
		[HTTP1_ERR_DIFFERING_CONTENT_LENGTH] = "differing content-length values",
		[HTTP1_ERR_BAD_TRANSFER_ENCODING] = "unsupported transfer-encoding",
		[HTTP1_ERR_TE_IN_HTTP10] = "transfer-encoding in http/1.0",
		[HTTP1_ERR_MISSING_HOST] = "missing host",
		[HTTP1_ERR_BAD_HOST] = "invalid host",
		[HTTP1_ERR_BAD_EXPECT] = "unsupported expectation",
		[HTTP1_ERR_BAD_CHUNK_SIZE] = "invalid chunk size",
		[HTTP1_ERR_CHUNK_SIZE_OVERFLOW] = "chunk size too large",
		[HTTP1_ERR_BAD_CHUNK_EXT] = "invalid chunk extension",
		[HTTP1_ERR_CHUNK_LINE_TOO_LONG] = "chunk-size line too long",
		[HTTP1_ERR_BAD_CHUNK_END] = "chunk data not followed by crlf",
		[HTTP1_ERR_BAD_TRAILER] = "invalid trailer section",
		[HTTP1_ERR_UNDERSCORE_FRAMING] = "framing header name with underscore",
		[HTTP1_ERR_CONNECT_CONTENT] = "connect request with content",
		[HTTP1_ERR_CODING_NOT_IMPLEMENTED] =
			"transfer coding not implemented: chunked only",
	};

	if ((size_t)error >= sizeof(texts) / sizeof(texts[0]) || texts[error] == NULL)
		return "unknown error";
	return texts[error];
}
