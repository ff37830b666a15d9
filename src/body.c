#include "body.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "xmalloc.h"

void body_relay_init(struct body_relay *relay, enum body_mode mode, uint64_t content_length,
		     size_t max_trailer)
{
	relay->mode = mode;
	relay->remaining = content_length;
	relay->payload_bytes = 0;
	relay->done = mode == BODY_MODE_LENGTH && content_length == 0;
	relay->trailer_named = NULL;
	if (mode == BODY_MODE_CHUNKED || mode == BODY_MODE_CHUNKED_DECODE) {
		http1_chunked_init(&relay->chunked, max_trailer);
		relay->trailer_held = 0;
	}
}

void body_relay_trailer_named(struct body_relay *relay, const struct http1_head *head)
{
	size_t len = http1_trailer_named(head, NULL, 0);

	if (len == 0)
		return;
	relay->trailer_named = xmalloc(len + 1);
	http1_trailer_named(head, relay->trailer_named, len);
	relay->trailer_named[len] = '\0';
}

void body_relay_release(struct body_relay *relay)
{
	free(relay->trailer_named);
	relay->trailer_named = NULL;
}

void body_relay_init_framing(struct body_relay *relay, const struct http1_framing *framing,
			     bool decode_chunked, size_t max_trailer)
{
	switch (framing->body) {
	case HTTP1_BODY_NONE:
		body_relay_init(relay, BODY_MODE_LENGTH, 0, 0);
		break;
	case HTTP1_BODY_LENGTH:
		body_relay_init(relay, BODY_MODE_LENGTH, framing->content_length, 0);
		break;
	case HTTP1_BODY_CHUNKED:
		body_relay_init(relay,
				decode_chunked ? BODY_MODE_CHUNKED_DECODE : BODY_MODE_CHUNKED, 0,
				max_trailer);
		break;
	case HTTP1_BODY_UNTIL_CLOSE:
		body_relay_init(relay, BODY_MODE_UNTIL_CLOSE, 0, 0);
		break;
	}
}

/* Up to this many bytes that lie in one piece of src are copied rather than
 * moved: a moved piece stays a piece of its own behind the head already in
 * dst, and the write then gathers the two into a new block. */
#define BODY_COPY_MAX 1024

/* Move n bytes from src to dst, or drop them when dst is NULL. */
static void body_relay_take(struct evbuffer *src, struct evbuffer *dst, size_t n)
{
	struct evbuffer_iovec first;

	if (dst == NULL) {
		evbuffer_drain(src, n);
		return;
	}
	if (n <= BODY_COPY_MAX && evbuffer_peek(src, -1, NULL, &first, 1) >= 1 &&
	    first.iov_len >= n) {
		evbuffer_add(dst, first.iov_base, n);
		evbuffer_drain(src, n);
		return;
	}
	evbuffer_remove_buffer(src, dst, n);
}

/* The whole trailer section, its final empty line included, is the first
 * relay->trailer_held bytes of src: pass its fields on to dst but those
 * that must not go on, and take it from src. */
static void body_relay_put_trailer(struct body_relay *relay, struct evbuffer *src,
				   struct evbuffer *dst)
{
	size_t len = relay->trailer_held;
	const char *p = (const char *)evbuffer_pullup(src, (ev_ssize_t)len);
	/* the final empty line */
	const char *end = p + len - 2;
	/* where the lines to pass on that are not added yet start */
	const char *keep = p;
	const char *named = relay->trailer_named;
	size_t named_len = named != NULL ? strlen(named) : 0;

	/* the decoder checked every line: a name, ':', a value, CRLF */
	while (p < end) {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		const char *next = (const char *)memchr(colon, '\n', (size_t)(end - colon)) + 1;

		if (!http1_trailer_field_passes(p, (size_t)(colon - p), named, named_len)) {
			if (p > keep)
				evbuffer_add(dst, keep, (size_t)(p - keep));
			keep = next;
		}
		p = next;
	}
	evbuffer_add(dst, keep, (size_t)(end + 2 - keep));
	evbuffer_drain(src, len);
	relay->trailer_held = 0;
	relay->done = true;
}

/* Step over the rest of the trailer section whose first relay->trailer_held
 * bytes src holds; pass it on once it ended. */
static int body_relay_move_trailer(struct body_relay *relay, struct evbuffer *src,
				   struct evbuffer *dst, enum http1_error *error)
{
	while (evbuffer_get_length(src) > relay->trailer_held) {
		struct evbuffer_ptr pos;
		struct evbuffer_iovec vec;
		size_t n = 0;

		if (evbuffer_ptr_set(src, &pos, relay->trailer_held, EVBUFFER_PTR_SET) < 0 ||
		    evbuffer_peek(src, -1, &pos, &vec, 1) < 1 || vec.iov_len == 0)
			break;
		switch (http1_chunked_step(&relay->chunked, vec.iov_base, vec.iov_len, &n, error)) {
		case HTTP1_CHUNK_ERROR:
			return -1;
		case HTTP1_CHUNK_DONE:
			relay->trailer_held += n;
			body_relay_put_trailer(relay, src, dst);
			return 0;
		default: /* TRAILER: it goes on */
			relay->trailer_held += n;
			break;
		}
	}
	return 0;
}

/* Walk chunked framing extent by extent: data moves, framing moves or drops. */
static int body_relay_move_chunked(struct body_relay *relay, struct evbuffer *src,
				   struct evbuffer *dst, enum http1_error *error)
{
	struct evbuffer *framing_dst = relay->mode == BODY_MODE_CHUNKED ? dst : NULL;

	if (relay->trailer_held > 0)
		return body_relay_move_trailer(relay, src, dst, error);
	while (!relay->done && evbuffer_get_length(src) > 0) {
		struct evbuffer_iovec vec;
		size_t n = 0;

		if (evbuffer_peek(src, -1, NULL, &vec, 1) < 1 || vec.iov_len == 0)
			break;
		switch (http1_chunked_step(&relay->chunked, vec.iov_base, vec.iov_len, &n, error)) {
		case HTTP1_CHUNK_DATA:
			relay->payload_bytes += n;
			body_relay_take(src, dst, n);
			break;
		case HTTP1_CHUNK_FRAMING:
			body_relay_take(src, framing_dst, n);
			break;
		case HTTP1_CHUNK_TRAILER:
			if (framing_dst == NULL) {
				body_relay_take(src, NULL, n);
				break;
			}
			relay->trailer_held = n;
			return body_relay_move_trailer(relay, src, framing_dst, error);
		case HTTP1_CHUNK_DONE:
			if (framing_dst != NULL && http1_chunked_has_trailer(&relay->chunked)) {
				relay->trailer_held = n;
				body_relay_put_trailer(relay, src, framing_dst);
				break;
			}
			body_relay_take(src, framing_dst, n);
			relay->done = true;
			break;
		case HTTP1_CHUNK_ERROR:
			return -1;
		}
	}
	return 0;
}

int body_relay_move(struct body_relay *relay, struct evbuffer *src, struct evbuffer *dst,
		    enum http1_error *error)
{
	size_t available = evbuffer_get_length(src);
	size_t n;

	if (relay->done || available == 0)
		return 0;
	switch (relay->mode) {
	case BODY_MODE_LENGTH:
		n = available < relay->remaining ? available : (size_t)relay->remaining;
		body_relay_take(src, dst, n);
		relay->remaining -= n;
		relay->payload_bytes += n;
		relay->done = relay->remaining == 0;
		return 0;
	case BODY_MODE_UNTIL_CLOSE:
		relay->payload_bytes += available;
		if (dst != NULL)
			evbuffer_add_buffer(dst, src);
		else
			evbuffer_drain(src, available);
		return 0;
	case BODY_MODE_CHUNKED:
	case BODY_MODE_CHUNKED_DECODE:
		return body_relay_move_chunked(relay, src, dst, error);
	}
	return 0;
}

int body_relay_check(const struct body_relay *relay, struct evbuffer *src, size_t offset,
		     enum http1_error *error)
{
	struct http1_chunked dec;
	struct evbuffer_ptr pos;

	if (relay->mode != BODY_MODE_CHUNKED && relay->mode != BODY_MODE_CHUNKED_DECODE)
		return 0;
	dec = relay->chunked;
	if (evbuffer_ptr_set(src, &pos, offset, EVBUFFER_PTR_SET) < 0)
		return 0;
	while (!http1_chunked_done(&dec)) {
		struct evbuffer_iovec vec;
		const char *p;
		size_t left;

		if (evbuffer_peek(src, -1, &pos, &vec, 1) < 1 || vec.iov_len == 0)
			return 0;
		for (p = vec.iov_base, left = vec.iov_len; left > 0 && !http1_chunked_done(&dec);) {
			size_t n = 0;

			if (http1_chunked_step(&dec, p, left, &n, error) == HTTP1_CHUNK_ERROR)
				return -1;
			p += n;
			left -= n;
		}
		if (evbuffer_ptr_set(src, &pos, vec.iov_len, EVBUFFER_PTR_ADD) < 0)
			return 0;
	}
	return 0;
}
