/* The body relay (body.c) passing on a chunked body with its framing, its
 * trailer section filtered, fed in random pieces, each piece a buffer chain
 * of its own. The first two input bytes pick the piece sizes and the trailer
 * limit; the rest is the body, maybe with bytes of a next message behind it.
 * Fed whole or in pieces, the relay must pass on the same bytes, stop at the
 * same place (what follows the body stays in the source) and fail alike;
 * and what it passed on, moved through a fresh relay, comes out unchanged:
 * a trailer section it let through holds nothing it would drop. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* How one feeding ended. */
struct fuzz_outcome {
	bool failed;
	bool done;
	enum http1_error error;
	size_t consumed; /* bytes of the input taken from the source */
	struct evbuffer *out;
};

/* A small xorshift generator, so the pieces depend only on the input. */
static uint32_t fuzz_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void fuzz_free_piece(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* Feed body in pieces (all at once when seed is 0) until the relay is done
 * or fails. */
static void fuzz_relay(const char *body, size_t len, uint32_t seed, size_t max_trailer,
		       struct fuzz_outcome *out)
{
	struct body_relay relay;
	struct evbuffer *src = evbuffer_new();
	size_t fed = 0;

	body_relay_init(&relay, BODY_MODE_CHUNKED, 0, max_trailer);
	memset(out, 0, sizeof(*out));
	out->out = evbuffer_new();
	while (fed < len && !out->done && !out->failed) {
		size_t piece = len - fed;
		char *copy;

		if (seed != 0) {
			uint32_t r = fuzz_next(&seed);
			size_t want = (r & 7) == 0 ? r >> 8 : 1 + (r >> 8) % 16;

			if (want > 0 && want < piece)
				piece = want;
		}
		copy = malloc(piece);
		if (copy == NULL)
			abort();
		memcpy(copy, body + fed, piece);
		evbuffer_add_reference(src, copy, piece, fuzz_free_piece, NULL);
		fed += piece;
		out->failed = body_relay_move(&relay, src, out->out, &out->error) < 0;
		out->done = relay.done;
	}
	out->consumed = fed - evbuffer_get_length(src);
	body_relay_release(&relay);
	evbuffer_free(src);
}

static bool fuzz_same_output(struct evbuffer *a, struct evbuffer *b)
{
	size_t len = evbuffer_get_length(a);

	return len == evbuffer_get_length(b) &&
	       (len == 0 || memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_outcome whole;
	struct fuzz_outcome pieces;
	uint32_t seed;
	size_t max_trailer;
	const char *body;
	size_t len;

	if (size < 2)
		return 0;
	seed = (uint32_t)data[0] * 2654435761u + 1;
	/* small limits reach the trailer bound; 0 means none held at all */
	max_trailer = (size_t)data[1] * 4;
	body = (const char *)data + 2;
	len = size - 2;

	fuzz_relay(body, len, 0, max_trailer, &whole);
	fuzz_relay(body, len, seed, max_trailer, &pieces);
	if (whole.failed != pieces.failed || whole.done != pieces.done)
		abort();
	if (whole.failed && whole.error != pieces.error)
		abort();
	if (!whole.failed) {
		if (whole.consumed != pieces.consumed || !fuzz_same_output(whole.out, pieces.out))
			abort();
		/* nothing is invented: the relay passes on at most what it took */
		if (evbuffer_get_length(whole.out) > whole.consumed)
			abort();
	}
	if (whole.done) {
		size_t out_len = evbuffer_get_length(whole.out);
		struct fuzz_outcome again;

		/* what went on is a whole body that passes through unchanged */
		fuzz_relay((const char *)evbuffer_pullup(whole.out, -1), out_len, 0, max_trailer,
			   &again);
		if (again.failed || !again.done || again.consumed != out_len ||
		    !fuzz_same_output(again.out, whole.out))
			abort();
		evbuffer_free(again.out);
	}
	evbuffer_free(whole.out);
	evbuffer_free(pieces.out);
	return 0;
}
