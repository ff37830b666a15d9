/* The chunked decoder fed in random pieces. The first two input bytes pick
 * the piece sizes and the trailer limit; the rest is the body. Fed whole or in
 * pieces it must classify every byte alike, each run of data bytes must be
 * exactly as long as the chunk-size before it says, no chunk-size line over
 * 4 KiB (CRLF included) is taken, one refused as too long ran past it, and
 * a body is said to carry a chunk extension just when a size line had one. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The decoder's bound on a chunk-size line, CRLF included. */
#define FUZZ_MAX_LINE 4096

enum fuzz_class {
	FUZZ_UNSEEN,  /* not consumed */
	FUZZ_FRAMING, /* consumed as framing */
	FUZZ_DATA,    /* consumed as chunk data */
};

/* How one feeding ended. */
struct fuzz_outcome {
	enum http1_chunk_step last; /* DONE, ERROR, or the last step when input ran out */
	enum http1_error error;
	size_t consumed;
	bool extended; /* http1_chunked_has_extension() at the end */
};

/* A small xorshift generator, so the pieces depend only on the input. */
static uint32_t fuzz_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Feed body in pieces (all at once when seed is 0), marking each byte's class. */
static void fuzz_decode(const char *body, size_t len, uint32_t seed, size_t max_trailer,
			unsigned char *classes, struct fuzz_outcome *out)
{
	struct http1_chunked dec;
	size_t off = 0;

	http1_chunked_init(&dec, max_trailer);
	memset(classes, FUZZ_UNSEEN, len);
	out->last = HTTP1_CHUNK_FRAMING;
	out->error = HTTP1_ERR_NONE;
	while (off < len) {
		size_t piece = len - off;
		size_t n = 0;
		enum http1_chunk_step step;

		if (seed != 0) {
			uint32_t r = fuzz_next(&seed);
			size_t want = (r & 7) == 0 ? r >> 8 : 1 + (r >> 8) % 16;

			if (want > 0 && want < piece)
				piece = want;
		}
		step = http1_chunked_step(&dec, body + off, piece, &n, &out->error);
		out->last = step;
		if (step == HTTP1_CHUNK_ERROR) {
			const char *text = http1_error_text(out->error);

			/* an error code the decoder learns needs a text of its own */
			if (out->error == HTTP1_ERR_NONE || http1_chunked_done(&dec) ||
			    strcmp(text, "unknown error") == 0)
				abort();
			break;
		}
		if (out->error != HTTP1_ERR_NONE || n == 0 || n > piece)
			abort();
		memset(classes + off, step == HTTP1_CHUNK_DATA ? FUZZ_DATA : FUZZ_FRAMING, n);
		off += n;
		if (step == HTTP1_CHUNK_DONE) {
			if (!http1_chunked_done(&dec))
				abort();
			/* The body ends with the empty line after the last chunk. */
			if (off < 5 || memcmp(body + off - 4, "\r\n\r\n", 4) != 0)
				abort();
			break;
		}
		if (http1_chunked_done(&dec))
			abort();
	}
	out->consumed = off;
	out->extended = http1_chunked_has_extension(&dec);
}

/* A body taken whole has an extension only if a ';' was among its framing
 * bytes (a size line's, or a trailer value's), and has one when a size line
 * held one: every ';' before the last chunk's line ends is an extension's. */
static void fuzz_check_extended(const char *body, const unsigned char *classes,
				const struct fuzz_outcome *out)
{
	bool semicolon = false;
	bool in_size_line = false;
	size_t i;

	if (out->last != HTTP1_CHUNK_DONE)
		return;
	for (i = 0; i < out->consumed; i++) {
		if (classes[i] != FUZZ_FRAMING)
			continue;
		if (body[i] == ';')
			semicolon = true;
	}
	/* the first size line, and each after a data run's CRLF */
	for (i = 0; i < out->consumed; i++) {
		if (i == 0 || (classes[i] == FUZZ_FRAMING && i >= 3 &&
			       classes[i - 3] == FUZZ_DATA && classes[i - 2] == FUZZ_FRAMING))
			in_size_line = true;
		if (in_size_line && body[i] == '\n')
			in_size_line = false;
		if (in_size_line && body[i] == ';' && !out->extended)
			abort();
	}
	if (out->extended && !semicolon)
		abort();
}

/* The chunk-size at the start of a size line, which the decoder accepted. */
static uint64_t fuzz_chunk_size(const char *p, const char *end)
{
	uint64_t size = 0;

	for (; p < end; p++) {
		unsigned d;

		if (*p >= '0' && *p <= '9')
			d = (unsigned)(*p - '0');
		else if ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f')
			d = (unsigned)((*p | 0x20) - 'a' + 10);
		else
			break;
		if (size > (UINT64_C(1) << 62) >> 4)
			abort();
		size = size << 4 | d;
	}
	if (size > UINT64_C(1) << 62)
		abort();
	return size;
}

/* A chunk-size line too long is one that had more than FUZZ_MAX_LINE bytes
 * with no LF among them, after the CRLF of the last chunk data (or from the
 * start): the decoder says so only there. */
static void fuzz_check_line_too_long(const char *body, size_t len, const unsigned char *classes,
				     const struct fuzz_outcome *out)
{
	size_t line = 0;

	if (out->last != HTTP1_CHUNK_ERROR || out->error != HTTP1_ERR_CHUNK_LINE_TOO_LONG)
		return;
	for (size_t i = out->consumed; i > 0; i--)
		if (classes[i - 1] == FUZZ_DATA) {
			line = i + 2;
			break;
		}
	if (line > len || len - line <= FUZZ_MAX_LINE ||
	    memchr(body + line, '\n', FUZZ_MAX_LINE) != NULL)
		abort();
}

/* Each data run must match the chunk-size on the framing line before it. */
static void fuzz_check_runs(const char *body, const unsigned char *classes,
			    const struct fuzz_outcome *out)
{
	size_t i = 0;

	while (i < out->consumed) {
		size_t framing = i;
		size_t data;
		size_t line;
		uint64_t size;

		while (i < out->consumed && classes[i] == FUZZ_FRAMING)
			i++;
		if (i == out->consumed)
			break;
		data = i;
		while (i < out->consumed && classes[i] == FUZZ_DATA)
			i++;
		/* The framing before data is the CRLF ending the previous chunk's
		 * data, if any, and one chunk-size line. */
		line = framing == 0 ? 0 : framing + 2;
		if (line >= data)
			abort();
		/* a size line, leading zeros and CRLF included, is 4 KiB at most */
		if (data - line > FUZZ_MAX_LINE)
			abort();
		size = fuzz_chunk_size(body + line, body + data);
		if (size == 0 || i - data > size)
			abort();
		if (i - data != size && !(i == out->consumed && out->last == HTTP1_CHUNK_DATA))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *body = (const char *)data + 2;
	size_t len;
	unsigned char *whole_classes;
	unsigned char *split_classes;
	struct fuzz_outcome whole;
	struct fuzz_outcome split;
	size_t max_trailer;

	if (size < 3)
		return 0;
	len = size - 2;
	max_trailer = (size_t)data[1] * 8;
	whole_classes = malloc(len);
	split_classes = malloc(len);
	if (whole_classes == NULL || split_classes == NULL)
		abort();

	fuzz_decode(body, len, 0, max_trailer, whole_classes, &whole);
	fuzz_decode(body, len, 0x9e3779b9u ^ data[0], max_trailer, split_classes, &split);
	if (whole.last == HTTP1_CHUNK_DONE || whole.last == HTTP1_CHUNK_ERROR) {
		if (split.last != whole.last || split.error != whole.error)
			abort();
		/* where the pieces fall does not change what the body carried */
		if (whole.last == HTTP1_CHUNK_DONE && split.extended != whole.extended)
			abort();
	} else if (split.last == HTTP1_CHUNK_DONE || split.last == HTTP1_CHUNK_ERROR) {
		abort();
	}
	/* An error step reports no bytes, so pieces before it are seen as
	 * framing by one feeding and not the other; compare what both saw. */
	if (whole.last != HTTP1_CHUNK_ERROR && split.consumed != whole.consumed)
		abort();
	if (memcmp(split_classes, whole_classes,
		   split.consumed < whole.consumed ? split.consumed : whole.consumed) != 0)
		abort();
	fuzz_check_runs(body, whole_classes, &whole);
	fuzz_check_line_too_long(body, len, whole_classes, &whole);
	fuzz_check_extended(body, whole_classes, &whole);

	free(whole_classes);
	free(split_classes);
	return 0;
}
