#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "exchange_private.h"
#include "log.h"
#include "xmalloc.h"

/*
 * A kept chunked request body sent with Content-Length to an upstream that
 * answered in HTTP/1.0, or that no answer came from yet. RFC 9112 section
 * 6.1: a client must not send Transfer-Encoding unless it knows the server
 * handles HTTP/1.1, as from the version of a response it received. Once an
 * answer came in HTTP/1.0 (or before any came), the tries take the chunk
 * framing off the body the replay buffer holds whole, and send its length
 * instead. A trailer section has no place without chunked framing and is
 * left out (RFC 9112 section 7.1.2 lets a recipient that removes the
 * chunked coding discard it), and with it the Trailer field that announced
 * it; to an upstream not heard from, which most likely speaks HTTP/1.1, a
 * body with one goes chunked rather than lose it, and so does a body with
 * chunk extensions (per-chunk metadata, a signature or a hash: RFC 9112
 * section 7.1.1), which have no place without chunked framing either.
 */

#define EXCHANGE_TE_NAME "Transfer-Encoding:"
#define EXCHANGE_TRAILER_NAME "Trailer:"

/* Whether the head line at p (n bytes) is a field named name (with its
 * colon): the head is the proxy's own, a name followed at once by it. */
static bool exchange_line_is(const char *p, size_t n, const char *name, size_t name_len)
{
	return n >= name_len && strncasecmp(p, name, name_len) == 0;
}

struct evbuffer *exchange_replay_decoded(struct exchange *ex)
{
	struct evbuffer *copy = evbuffer_new();
	struct evbuffer *decoded = evbuffer_new();
	struct body_relay relay;
	enum http1_error error;
	int moved;

	/* a reference copy: the replay buffer keeps its bytes to re-send */
	evbuffer_add_buffer_reference(copy, ex->replay);
	body_relay_init(&relay, BODY_MODE_CHUNKED_DECODE, 0, ex->config->limits.max_header_bytes);
	moved = body_relay_move(&relay, copy, decoded, &error);
	evbuffer_free(copy);
	if (moved < 0) {
		evbuffer_free(decoded);
		return NULL;
	}
	return decoded;
}

/* The request head with its Transfer-Encoding line(s) replaced by
 * Content-Length: length, before the blank line that ends it, and without
 * its Trailer line(s): no trailer section follows a body by length. */
static void exchange_reframe_head(struct exchange *ex, uint64_t length)
{
	const char *p = ex->request_head;
	const char *end = ex->request_head + ex->request_head_len - 2; /* the blank line */
	char line[48];
	int line_len = snprintf(line, sizeof(line), "Content-Length: %llu\r\n",
				(unsigned long long)length);
	char *text = xmalloc(ex->request_head_len + (size_t)line_len);
	char *q = text;
	char *head;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)(eol - p) + 1;

		/* the head is the proxy's own: lines end in CRLF */
		if (!exchange_line_is(p, n, EXCHANGE_TE_NAME, sizeof(EXCHANGE_TE_NAME) - 1) &&
		    !exchange_line_is(p, n, EXCHANGE_TRAILER_NAME,
				      sizeof(EXCHANGE_TRAILER_NAME) - 1))
			q = exchange_put(q, p, n);
		p += n;
	}
	q = exchange_put(q, line, (size_t)line_len);
	q = EXCHANGE_PUT_LITERAL(q, "\r\n");
	ex->request_head_len = (size_t)(q - text);
	head = exchange_block(&ex->request_head, &ex->request_head_room, ex->request_head_len);
	memcpy(head, text, ex->request_head_len);
	free(text);
}

/* Whether the body is kept chunked and whole in the replay buffer, not yet
 * reframed: a body in the spool, or one that goes once, is sent only as it
 * came (retry_decide(): body_chunked_only, body_streamed). */
static bool exchange_reframable(const struct exchange *ex)
{
	return !ex->body_reframed && ex->request_body.mode == BODY_MODE_CHUNKED &&
	       ex->request_body.done && ex->replay != NULL && ex->spool == NULL && !ex->body_once;
}

/* Send the kept chunked body with Content-Length from now on; why says so
 * in the debug log. */
static void exchange_reframe_by_length(struct exchange *ex, const char *why)
{
	struct evbuffer *decoded, *whole;
	struct evbuffer_iovec vec;
	size_t length;

	decoded = exchange_replay_decoded(ex);
	if (decoded == NULL)
		return; /* read whole and checked as it came: cannot happen */
	/* the data alone, in chains of its own: the replay buffer is sent by
	 * reference, which a buffer of references cannot be */
	length = evbuffer_get_length(decoded);
	whole = evbuffer_new();
	if (length > 0 && evbuffer_reserve_space(whole, (ev_ssize_t)length, &vec, 1) == 1) {
		evbuffer_copyout(decoded, vec.iov_base, length);
		vec.iov_len = length;
		evbuffer_commit_space(whole, &vec, 1);
	}
	evbuffer_free(decoded);
	if (evbuffer_get_length(whole) != length) {
		evbuffer_free(whole);
		return;
	}
	evbuffer_free(ex->replay);
	ex->replay = whole;
	exchange_memory_recount(ex);
	exchange_reframe_head(ex, length);
	ex->body_reframed = true;
	log_debug("%.*s %.*s: %s: the body goes with Content-Length %zu, not chunked",
		  (int)ex->method_len, ex->method, (int)ex->target_len, ex->target, why, length);
}

void exchange_reframe_for_http10(struct exchange *ex)
{
	if (ex->upstream_http10 && exchange_reframable(ex))
		exchange_reframe_by_length(ex, "the upstream answered HTTP/1.0");
}

void exchange_reframe_for_unheard(struct exchange *ex)
{
	const struct http1_chunked *dec = &ex->request_body.chunked;

	if (exchange_reframable(ex) && !http1_chunked_has_trailer(dec) &&
	    !http1_chunked_has_extension(dec))
		exchange_reframe_by_length(ex, "no answer from the upstream yet told its version");
}
