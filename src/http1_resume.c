#include "http1_resume.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "http1_chars.h"

/* Where the scan is in a line, after the last byte it looked at. */
enum http1_resume_at {
	HTTP1_AT_LINE_START, /* after a CRLF, or at the buffer's start */
	HTTP1_AT_LINE,	     /* inside a line with content */
	HTTP1_AT_CR,	     /* after a CR that ends a line with content */
	HTTP1_AT_EMPTY_CR,   /* after a CR at the start of a line */
};

/* Which part of which line the scan is in (HTTP1_AT_LINE). */
enum http1_resume_part {
	HTTP1_PART_METHOD,	 /* request line: the method */
	HTTP1_PART_TARGET,	 /* request line: the request-target */
	HTTP1_PART_VERSION,	 /* request line: the version, from part_start */
	HTTP1_PART_VERSION_WORD, /* request line: a word after the target that is no version,
				  * read to its end (http1_parse_version_word) */
	HTTP1_PART_FIELD_NAME,	 /* a field line, before the colon */
	HTTP1_PART_FIELD_VALUE,	 /* a field line, after it */
};

static const char http1_resume_version[] = "HTTP/1.";

/* Look at the new bytes [from, end) and stop at the first one after which
 * the parser could say something new: the end of the head, of the request
 * line or of its version, or a byte that breaks the grammar where it is.
 * Returns its offset, or end when there is none. With replay, only follow
 * the bytes (which the parser found valid) to know where the scan is. */
static size_t http1_resume_scan(struct http1_resume *resume, const char *buf, size_t from,
				size_t end, bool replay)
{
	unsigned char at = resume->at;
	unsigned char part = resume->part;
	size_t i;

	for (i = from; i < end; i++) {
		unsigned char c = (unsigned char)buf[i];
		bool bad = false;

		/* The common case, one test: a field value's byte. */
		if (c > ' ' && c != 0x7f && at == HTTP1_AT_LINE && part == HTTP1_PART_FIELD_VALUE)
			continue;
		switch (at) {
		case HTTP1_AT_LINE_START:
			if (c == '\r') {
				/* before the request line, the parser counts empty
				 * lines as they begin */
				at = HTTP1_AT_EMPTY_CR;
				bad = !resume->line_ended;
				break;
			}
			at = HTTP1_AT_LINE;
			if (!resume->line_ended) {
				part = HTTP1_PART_METHOD;
			} else {
				part = HTTP1_PART_FIELD_NAME;
				bad = ++resume->fields > HTTP1_MAX_FIELDS;
			}
			/* whitespace here is obs-fold, or a request line without
			 * method: the first byte is checked as its part's */
			bad = bad || !HTTP1_IS(c, HTTP1_C_TCHAR);
			break;
		case HTTP1_AT_LINE:
			switch (part) {
			case HTTP1_PART_METHOD:
				if (c == ' ') {
					part = HTTP1_PART_TARGET;
					resume->target_start = resume->part_start = i + 1;
				} else {
					bad = !HTTP1_IS(c, HTTP1_C_TCHAR);
				}
				break;
			case HTTP1_PART_TARGET:
				if (c == ' ' && i > resume->part_start) {
					part = HTTP1_PART_VERSION;
					resume->part_start = i + 1;
				} else {
					bad = !HTTP1_IS(c, HTTP1_C_TARGET);
				}
				break;
			case HTTP1_PART_VERSION:
				/* also at the dot after the major version, where the
				 * parser tells another one (505) */
				if (i - resume->part_start < sizeof("HTTP/") - 1 &&
				    c != (unsigned char)
						    http1_resume_version[i - resume->part_start]) {
					part = HTTP1_PART_VERSION_WORD;
					bad = HTTP1_VERSION_WORD_END(c);
				} else if (i - resume->part_start <
					   sizeof(http1_resume_version) - 1)
					bad = c != (unsigned char)http1_resume_version
							      [i - resume->part_start] ||
					      i - resume->part_start == sizeof("HTTP/1") - 1;
				else if (i - resume->part_start == sizeof(http1_resume_version) - 1)
					/* complete: the parser checks the target now */
					bad = true;
				else if (c == '\r')
					at = HTTP1_AT_CR;
				else
					bad = true;
				break;
			case HTTP1_PART_VERSION_WORD:
				bad = HTTP1_VERSION_WORD_END(c);
				break;
			case HTTP1_PART_FIELD_NAME:
				if (c == ':')
					part = HTTP1_PART_FIELD_VALUE;
				else
					bad = !HTTP1_IS(c, HTTP1_C_TCHAR);
				break;
			case HTTP1_PART_FIELD_VALUE:
				if (c == '\r')
					at = HTTP1_AT_CR;
				else
					bad = !HTTP1_IS(c, HTTP1_C_VALUE);
				break;
			}
			break;
		case HTTP1_AT_CR:
			bad = c != '\n';
			at = HTTP1_AT_LINE_START;
			if (!resume->line_ended) {
				/* the request line ended: the parser checks it whole */
				resume->line_ended = true;
				bad = true;
			}
			break;
		case HTTP1_AT_EMPTY_CR:
			/* the end of the head, an empty line before the request
			 * line, or a bare CR: the parser tells which */
			at = HTTP1_AT_LINE_START;
			bad = true;
			break;
		}
		if (bad && !replay)
			break;
	}
	resume->at = at;
	resume->part = part;
	return i;
}

/* Where the scan is at the end of [0, len), which the parser found valid so
 * far, after the request line if line_ended: followed from the start of the
 * last line, the only one not whole. */
static void http1_resume_follow(struct http1_resume *resume, const char *buf, size_t len,
				const struct http1_head *head)
{
	const char *lf = len > 0 ? memrchr(buf, '\n', len) : NULL;
	size_t line = lf != NULL ? (size_t)(lf - buf) + 1 : 0;

	resume->line_ended = head->target != NULL && lf != NULL && lf > head->target;
	resume->fields = (unsigned)head->field_count;
	resume->at = HTTP1_AT_LINE_START;
	resume->part = HTTP1_PART_METHOD;
	resume->part_start = line;
	http1_resume_scan(resume, buf, line, len, true);
	resume->examined += (len - line) + (lf != NULL ? len - (size_t)(lf - buf) : len);
}

/* The window of buf the parser looks at: as in http1.c. */
static size_t http1_resume_window(size_t len, const struct http1_limits *limits)
{
	size_t window = len < limits->max_head_bytes ? len : limits->max_head_bytes;

	return window < UINT32_MAX ? window : UINT32_MAX;
}

/* What the whole-head parser said, kept for the next read. */
static enum http1_parse http1_resume_parsed(struct http1_resume *resume, enum http1_parse r,
					    const char *buf, size_t len,
					    const struct http1_limits *limits,
					    const struct http1_head *head)
{
	size_t window = http1_resume_window(len, limits);

	if (r != HTTP1_PARSE_MORE) {
		resume->examined += r == HTTP1_PARSE_DONE ? head->head_len : window;
		memset(resume, 0, offsetof(struct http1_resume, examined));
		return r;
	}
	resume->examined += window;
	resume->scanned = window;
	resume->max_head_bytes = limits->max_head_bytes;
	resume->max_target_bytes = limits->max_target_bytes;
	http1_resume_follow(resume, buf, window, head);
	return r;
}

/* A later read of a head: look at the new bytes, and parse the whole head
 * again only if they may decide it. */
static enum http1_parse http1_resume_more(struct http1_resume *resume, const char *buf, size_t len,
					  const struct http1_limits *limits,
					  struct http1_head *head, enum http1_error *error)
{
	size_t window = http1_resume_window(len, limits);

	if (resume->scanned > window || resume->max_head_bytes != limits->max_head_bytes ||
	    resume->max_target_bytes != limits->max_target_bytes) {
		/* not the buffer the last call saw, or other limits (a reload):
		 * start over */
		memset(resume, 0, offsetof(struct http1_resume, examined));
	} else if (len <= limits->max_head_bytes) {
		/* (a head over the limit goes to the parser, which says 431) */
		size_t stop = http1_resume_scan(resume, buf, resume->scanned, window, false);
		size_t target_end = resume->target_start + limits->max_target_bytes;

		resume->examined += (stop < window ? stop + 1 : stop) - resume->scanned;
		/* unless the request line now runs past the longest target, where
		 * the parser says 414 */
		if (stop == window && !(!resume->line_ended && resume->target_start > 0 &&
					resume->scanned <= target_end && window > target_end)) {
			resume->scanned = window;
			*error = HTTP1_ERR_NONE;
			return HTTP1_PARSE_MORE;
		}
	}
	return http1_resume_parsed(resume, http1_parse_request_head(buf, len, limits, head, error),
				   buf, len, limits, head);
}

enum http1_parse http1_resume_request_head(struct http1_resume *resume, const char *buf, size_t len,
					   const struct http1_limits *limits,
					   struct http1_head *head, enum http1_error *error)
{
	enum http1_parse r;

	if (resume->scanned != 0)
		return http1_resume_more(resume, buf, len, limits, head, error);
	/* the first look at a head: what arrives whole costs one parse and
	 * leaves nothing to reset */
	r = http1_parse_request_head(buf, len, limits, head, error);
	if (r == HTTP1_PARSE_DONE) {
		resume->examined += head->head_len;
		return r;
	}
	return http1_resume_parsed(resume, r, buf, len, limits, head);
}
