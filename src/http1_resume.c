#include "http1_resume.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Where the line scan is, after the last byte it looked at. */
enum http1_resume_at {
	HTTP1_AT_LINE_START, /* after a CRLF, or at the buffer's start */
	HTTP1_AT_LINE,	     /* inside a line with content */
	HTTP1_AT_CR,	     /* after a CR that ends a line with content */
	HTTP1_AT_EMPTY_CR,   /* after a CR at the start of a line */
};

/* The scan's state after a prefix the parser found valid so far, from its
 * last two bytes: valid means every LF is after a CR, so they tell. */
static unsigned char http1_resume_at_end(const char *buf, size_t len)
{
	if (len == 0 || buf[len - 1] == '\n')
		return HTTP1_AT_LINE_START;
	if (buf[len - 1] != '\r')
		return HTTP1_AT_LINE;
	return len == 1 || buf[len - 2] == '\n' ? HTTP1_AT_EMPTY_CR : HTTP1_AT_CR;
}

/* Look at the new bytes [from, end) and stop at the first one that may
 * decide the parse: the end of the head, the end of the request line, or a
 * byte no head may have there (a control byte, a bare CR or LF, whitespace
 * at the start of a line). Returns its offset, or end when there is none. */
static size_t http1_resume_scan(struct http1_resume *resume, const char *buf, size_t from,
				size_t end)
{
	unsigned char at = resume->at;
	size_t i;

	for (i = from; i < end; i++) {
		unsigned char c = (unsigned char)buf[i];

		/* The common case, one test: a printable byte inside a line. */
		if (c > ' ' && c != 0x7f && at == HTTP1_AT_LINE)
			continue;
		if ((c < ' ' && c != '\t' && c != '\r' && c != '\n') || c == 0x7f)
			break;
		switch (at) {
		case HTTP1_AT_LINE_START:
			if (c == '\n' || c == ' ' || c == '\t')
				goto stop;
			at = c == '\r' ? HTTP1_AT_EMPTY_CR : HTTP1_AT_LINE;
			break;
		case HTTP1_AT_LINE:
			if (c == '\n')
				goto stop;
			if (c == '\r')
				at = HTTP1_AT_CR;
			else if (c == ' ' && !resume->line_ended && resume->target_start == 0)
				resume->target_start = i + 1;
			break;
		case HTTP1_AT_CR:
			if (c != '\n')
				goto stop;
			at = HTTP1_AT_LINE_START;
			if (!resume->line_ended) {
				resume->line_ended = true;
				goto stop;
			}
			break;
		case HTTP1_AT_EMPTY_CR:
			/* the end of the head, an empty line before the request
			 * line, or a bare CR: the parser tells which */
			goto stop;
		}
	}
stop:
	resume->at = at;
	return i;
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
		resume->scanned = 0;
		resume->target_start = 0;
		resume->line_ended = false;
		resume->at = HTTP1_AT_LINE_START;
		return r;
	}
	resume->examined += window;
	resume->scanned = window;
	if (head->method != NULL)
		resume->target_start = (size_t)(head->method - buf) + head->method_len + 1;
	resume->at = http1_resume_at_end(buf, window);
	return r;
}

/* A later read of a head: look at the new bytes, and parse the whole head
 * again only if they may decide it. */
static enum http1_parse http1_resume_more(struct http1_resume *resume, const char *buf, size_t len,
					  const struct http1_limits *limits,
					  struct http1_head *head, enum http1_error *error)
{
	size_t window = http1_resume_window(len, limits);

	if (resume->scanned > window) {
		/* not the buffer the last call saw: start over */
		memset(resume, 0, offsetof(struct http1_resume, examined));
	} else if (len <= limits->max_head_bytes) {
		/* (a head over the limit goes to the parser, which says 431) */
		size_t stop = http1_resume_scan(resume, buf, resume->scanned, window);
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
