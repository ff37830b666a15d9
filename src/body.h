#ifndef RETRYPROXY_BODY_H
#define RETRYPROXY_BODY_H

/*
 * Moves one message body from a source buffer to a destination buffer as
 * bytes arrive, following the message's framing, without copying where
 * libevent can move buffer chains. Knows where the body ends, so bytes of a
 * pipelined next message stay in the source.
 */

#include <stdbool.h>
#include <stdint.h>

#include "http1.h"

struct evbuffer;

enum body_mode {
	BODY_MODE_LENGTH,	  /* exactly a Content-Length of bytes */
	BODY_MODE_CHUNKED,	  /* chunked, passed on with its framing */
	BODY_MODE_CHUNKED_DECODE, /* chunked, only the data passed on (for HTTP/1.0 peers) */
	BODY_MODE_UNTIL_CLOSE,	  /* everything until the sender closes */
};

struct body_relay {
	enum body_mode mode;
	uint64_t remaining;	/* LENGTH: bytes still to come */
	uint64_t payload_bytes; /* body data bytes seen so far, framing excluded */
	bool done;		/* the whole body has been moved */
	struct http1_chunked chunked;
	size_t trailer_held; /* CHUNKED: bytes of a trailer section at the source's front,
			      * left there until it ends */
	char *trailer_named; /* the fields the head's Connection names, a list from
			      * http1_trailer_named() ending in NUL; NULL when none */
};

/* Set up a relay for a body of the given framing (one given trailer_named
 * before must have been released). */
void body_relay_init(struct body_relay *relay, enum body_mode mode, uint64_t content_length,
		     size_t max_trailer);

/* Set up a relay for the body a parsed head's framing describes; with
 * decode_chunked a chunked body passes on its data only. */
void body_relay_init_framing(struct body_relay *relay, const struct http1_framing *framing,
			     bool decode_chunked, size_t max_trailer);

/* For a chunked body passed on with its framing: the fields head's
 * Connection names are dropped from its trailer section too. Only needed
 * when the head's framing says connection_options; the relay must then be
 * released with body_relay_release() before it is set up again or goes. */
void body_relay_trailer_named(struct body_relay *relay, const struct http1_head *head);

/* Free what body_relay_trailer_named() gave the relay. */
void body_relay_release(struct body_relay *relay);

/* Move as much of the body as src holds into dst (NULL: discard it).
 * A chunked body's trailer section, passed on with its framing, is held in
 * src until its final empty line came, then goes on without the fields
 * http1_trailer_field_passes() refuses. Returns 0, or -1 on invalid
 * chunked framing with *error set. */
int body_relay_move(struct body_relay *relay, struct evbuffer *src, struct evbuffer *dst,
		    enum http1_error *error);

/* Check, without moving anything, that the body bytes src holds from
 * offset on are valid for the relay's framing so far. Returns 0, or -1 with
 * *error set. Lets a response whose body is already known to be broken be
 * refused before its head is passed on. */
int body_relay_check(const struct body_relay *relay, struct evbuffer *src, size_t offset,
		     enum http1_error *error);

#endif
