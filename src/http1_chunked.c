#include "http1.h"

#include <string.h>

#include "http1_chars.h"

/* The chunked transfer coding (RFC 9112 section 7.1) as a streaming,
 * byte-wise state machine over the framing; chunk data is only counted. */

#define HTTP1_CHUNK_MAX_LINE 4096		 /* longest chunk-size line, CRLF included */
#define HTTP1_CHUNK_MAX_SIZE (UINT64_C(1) << 62) /* largest chunk-size accepted */

/* Chunked decoder states; dec->state holds one, or HTTP1_CS_ERROR plus the
 * error code once it failed. */
enum http1_chunk_state {
	HTTP1_CS_SIZE_START,	/* start of a chunk-size line, no digit yet */
	HTTP1_CS_SIZE,		/* in chunk-size digits */
	HTTP1_CS_EXT_SEMI,	/* whitespace after the size or an extension, ';' must come */
	HTTP1_CS_EXT_NAME0,	/* after ';', before the extension name */
	HTTP1_CS_EXT_NAME,	/* in an extension name */
	HTTP1_CS_EXT_NAME_WS,	/* whitespace after a name: '=' or ';' must come */
	HTTP1_CS_EXT_VALUE0,	/* after '=', before the value */
	HTTP1_CS_EXT_TOKEN,	/* in a token value */
	HTTP1_CS_EXT_QUOTED,	/* in a quoted-string value */
	HTTP1_CS_EXT_QPAIR,	/* after a backslash in a quoted-string */
	HTTP1_CS_EXT_QEND,	/* after the closing quote */
	HTTP1_CS_SIZE_LF,	/* CR of the size line seen */
	HTTP1_CS_DATA,		/* in chunk data, dec->remaining bytes left */
	HTTP1_CS_DATA_CR,	/* chunk data over, CR must come */
	HTTP1_CS_DATA_LF,	/* chunk data over and CR seen, LF must come */
	HTTP1_CS_TRAILER0,	/* start of a trailer line or of the final empty line */
	HTTP1_CS_TRAILER_NAME,	/* in a trailer field name */
	HTTP1_CS_TRAILER_VALUE, /* in a trailer field value */
	HTTP1_CS_TRAILER_LF,	/* CR of a trailer line seen */
	HTTP1_CS_END_LF,	/* CR of the final empty line seen */
	HTTP1_CS_DONE,		/* the body is complete */
	HTTP1_CS_ERROR,		/* failed; the error code is added to this */
};

void http1_chunked_init(struct http1_chunked *dec, size_t max_trailer)
{
	memset(dec, 0, sizeof(*dec));
	dec->state = HTTP1_CS_SIZE_START;
	dec->max_line = HTTP1_CHUNK_MAX_LINE;
	dec->max_trailer = max_trailer;
}

bool http1_chunked_done(const struct http1_chunked *dec)
{
	return dec->state == HTTP1_CS_DONE;
}

bool http1_chunked_past_last_chunk(const struct http1_chunked *dec)
{
	/* an invalid trailer section is met only after the last chunk: the
	 * receiver has that chunk as surely as after a cut */
	return (dec->state >= HTTP1_CS_TRAILER0 && dec->state < HTTP1_CS_ERROR) ||
	       dec->state == HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
}

/* The error state for a byte that does not belong in a chunk-size line. */
static int http1_chunk_line_error(int state, char c)
{
	if (c == '\n' && state != HTTP1_CS_SIZE_START)
		return HTTP1_CS_ERROR + HTTP1_ERR_BAD_LINE_ENDING;
	if (state <= HTTP1_CS_SIZE)
		return HTTP1_CS_ERROR + HTTP1_ERR_BAD_CHUNK_SIZE;
	return HTTP1_CS_ERROR + HTTP1_ERR_BAD_CHUNK_EXT;
}

/* Move the decoder over one framing byte: the next state, or HTTP1_CS_ERROR
 * plus an error code. */
static int http1_chunk_byte(struct http1_chunked *dec, char c)
{
	int s = dec->state;

	switch (s) {
	case HTTP1_CS_SIZE_START:
	case HTTP1_CS_SIZE:
		if (HTTP1_IS(c, HTTP1_C_HEX)) {
			unsigned digit = HTTP1_IS_DIGIT(c) ? (unsigned)(c - '0')
							   : (unsigned)((c | 0x20) - 'a' + 10);

			/* Checked before shifting, so the value never wraps. */
			if (dec->size > HTTP1_CHUNK_MAX_SIZE >> 4 ||
			    (dec->size << 4 | digit) > HTTP1_CHUNK_MAX_SIZE)
				return HTTP1_CS_ERROR + HTTP1_ERR_CHUNK_SIZE_OVERFLOW;
			dec->size = dec->size << 4 | digit;
			return HTTP1_CS_SIZE;
		}
		if (s == HTTP1_CS_SIZE_START)
			break;
		if (c == '\r')
			return HTTP1_CS_SIZE_LF;
		if (c == ';')
			return HTTP1_CS_EXT_NAME0;
		if (HTTP1_IS_WS(c))
			return HTTP1_CS_EXT_SEMI;
		break;
	case HTTP1_CS_EXT_SEMI:
		if (c == ';')
			return HTTP1_CS_EXT_NAME0;
		if (HTTP1_IS_WS(c))
			return s;
		break;
	case HTTP1_CS_EXT_NAME0:
		if (HTTP1_IS_WS(c))
			return s;
		if (HTTP1_IS(c, HTTP1_C_TCHAR)) {
			/* every extension's name begins here */
			dec->extended = true;
			return HTTP1_CS_EXT_NAME;
		}
		break;
	case HTTP1_CS_EXT_NAME:
	case HTTP1_CS_EXT_NAME_WS:
		if (c == '=')
			return HTTP1_CS_EXT_VALUE0;
		if (c == ';')
			return HTTP1_CS_EXT_NAME0;
		if (HTTP1_IS_WS(c))
			return HTTP1_CS_EXT_NAME_WS;
		if (s == HTTP1_CS_EXT_NAME && HTTP1_IS(c, HTTP1_C_TCHAR))
			return s;
		if (s == HTTP1_CS_EXT_NAME && c == '\r')
			return HTTP1_CS_SIZE_LF;
		break;
	case HTTP1_CS_EXT_VALUE0:
		if (HTTP1_IS_WS(c))
			return s;
		if (c == '"')
			return HTTP1_CS_EXT_QUOTED;
		if (HTTP1_IS(c, HTTP1_C_TCHAR))
			return HTTP1_CS_EXT_TOKEN;
		break;
	case HTTP1_CS_EXT_TOKEN:
	case HTTP1_CS_EXT_QEND:
		if (s == HTTP1_CS_EXT_TOKEN && HTTP1_IS(c, HTTP1_C_TCHAR))
			return s;
		if (c == ';')
			return HTTP1_CS_EXT_NAME0;
		if (HTTP1_IS_WS(c))
			return HTTP1_CS_EXT_SEMI;
		if (c == '\r')
			return HTTP1_CS_SIZE_LF;
		break;
	case HTTP1_CS_EXT_QUOTED:
		if (c == '"')
			return HTTP1_CS_EXT_QEND;
		if (c == '\\')
			return HTTP1_CS_EXT_QPAIR;
		if (HTTP1_IS(c, HTTP1_C_QDTEXT))
			return s;
		break;
	case HTTP1_CS_EXT_QPAIR:
		if (HTTP1_IS(c, HTTP1_C_VALUE))
			return HTTP1_CS_EXT_QUOTED;
		break;
	case HTTP1_CS_SIZE_LF:
		if (c != '\n')
			return HTTP1_CS_ERROR + HTTP1_ERR_BAD_LINE_ENDING;
		if (dec->size == 0)
			return HTTP1_CS_TRAILER0;
		dec->remaining = dec->size;
		return HTTP1_CS_DATA;
	case HTTP1_CS_DATA_CR:
		return c == '\r' ? HTTP1_CS_DATA_LF : HTTP1_CS_ERROR + HTTP1_ERR_BAD_CHUNK_END;
	case HTTP1_CS_DATA_LF:
		return c == '\n' ? HTTP1_CS_SIZE_START : HTTP1_CS_ERROR + HTTP1_ERR_BAD_CHUNK_END;
	case HTTP1_CS_TRAILER0:
		if (c == '\r')
			return HTTP1_CS_END_LF;
		if (HTTP1_IS(c, HTTP1_C_TCHAR))
			return HTTP1_CS_TRAILER_NAME;
		return HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
	case HTTP1_CS_TRAILER_NAME:
		if (c == ':')
			return HTTP1_CS_TRAILER_VALUE;
		if (HTTP1_IS(c, HTTP1_C_TCHAR))
			return s;
		return HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
	case HTTP1_CS_TRAILER_VALUE:
		if (c == '\r')
			return HTTP1_CS_TRAILER_LF;
		if (HTTP1_IS(c, HTTP1_C_VALUE))
			return s;
		return HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
	case HTTP1_CS_TRAILER_LF:
		return c == '\n' ? HTTP1_CS_TRAILER0 : HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
	case HTTP1_CS_END_LF:
		return c == '\n' ? HTTP1_CS_DONE : HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
	}
	return http1_chunk_line_error(s, c);
}

/* Count a byte against the line and trailer limits; an error state or s.
 * A trailer line, a field line as a header's is, has no limit of its own:
 * the section's, max_trailer, bounds it as max_header_bytes bounds a head. */
static int http1_chunk_count(struct http1_chunked *dec, int before, int s)
{
	if (before == HTTP1_CS_DATA_CR || before == HTTP1_CS_DATA_LF)
		return s;
	if (before >= HTTP1_CS_TRAILER0) {
		/* The final empty line is not part of the trailer fields' size. */
		if (s != HTTP1_CS_END_LF && s != HTTP1_CS_DONE &&
		    ++dec->trailer_bytes > dec->max_trailer)
			return HTTP1_CS_ERROR + HTTP1_ERR_BAD_TRAILER;
		return s;
	}
	/* every byte of the line counts, leading zeros too (RFC 9112 allows
	 * any number of them; a bound on the line is what keeps one from
	 * being framing without end), and going over is said as it is */
	if (++dec->line_len > dec->max_line)
		return HTTP1_CS_ERROR + HTTP1_ERR_CHUNK_LINE_TOO_LONG;
	return s;
}

enum http1_chunk_step http1_chunked_step(struct http1_chunked *dec, const char *buf, size_t len,
					 size_t *n, enum http1_error *error)
{
	size_t i = 0;

	*n = 0;
	*error = HTTP1_ERR_NONE;
	if (dec->state >= HTTP1_CS_ERROR) {
		*error = (enum http1_error)(dec->state - HTTP1_CS_ERROR);
		return HTTP1_CHUNK_ERROR;
	}
	if (dec->state == HTTP1_CS_DONE)
		return HTTP1_CHUNK_DONE;
	if (dec->state == HTTP1_CS_DATA) {
		/* Data is not looked at: the caller moves it as it is. */
		*n = dec->remaining < len ? (size_t)dec->remaining : len;
		dec->remaining -= *n;
		if (dec->remaining == 0)
			dec->state = HTTP1_CS_DATA_CR;
		return HTTP1_CHUNK_DATA;
	}
	while (i < len) {
		int before = dec->state;
		int s = http1_chunk_byte(dec, buf[i]);

		if (s < HTTP1_CS_ERROR)
			s = http1_chunk_count(dec, before, s);
		dec->state = s;
		if (s >= HTTP1_CS_ERROR) {
			*error = (enum http1_error)(s - HTTP1_CS_ERROR);
			return HTTP1_CHUNK_ERROR;
		}
		i++;
		if (s == HTTP1_CS_SIZE_START) {
			dec->line_len = 0;
			dec->size = 0;
		} else if (s == HTTP1_CS_TRAILER0) {
			dec->line_len = 0;
			dec->size = 0;
			/* after the last chunk, a field line starts a trailer
			 * section: a step of its own, so that the caller can
			 * hold it (an empty line ends the body at once) */
			if (before == HTTP1_CS_SIZE_LF && i < len && buf[i] != '\r')
				break;
		} else if (s == HTTP1_CS_DATA) {
			break;
		} else if (s == HTTP1_CS_DONE) {
			*n = i;
			return HTTP1_CHUNK_DONE;
		}
	}
	*n = i;
	return dec->trailer_bytes > 0 ? HTTP1_CHUNK_TRAILER : HTTP1_CHUNK_FRAMING;
}
