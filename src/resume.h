#ifndef RETRYPROXY_RESUME_H
#define RETRYPROXY_RESUME_H

/*
 * Range resume of a broken download (SPEC "Broken downloads and large
 * bodies"), the pure part: whether a 200 response offers a resume (Accept-
 * Ranges: bytes, a strong ETag or else a Last-Modified), the Range and
 * If-Range lines that ask for the rest from byte K, and whether the answer
 * continues the body exactly (a 206 with Content-Range bytes K-(L-1)/L, the
 * same validator, and the rest's length). No I/O: exchange_resume.c acts on
 * the answers.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

/* Longer validators are not kept: such a response is not resumed. */
#define RESUME_VALIDATOR_MAX 512
/* A Content-Encoding longer than this offers no resume. */
#define RESUME_CODING_MAX 64

/* What a resumable 200 response offered, and the resume under way. Shared
 * by resume.c and exchange_resume.c. Made once and reused (an exchange
 * keeps it with a spare), so that reading an offer allocates nothing. */
struct resume {
	uint64_t length; /* the 200's Content-Length: the whole body */
	uint64_t at;	 /* K: the body byte the latest resume asked from */
	bool pending;	 /* a resume was asked for: the next response head must
			  * continue the body, and the client has a partial one */
	bool etag;	 /* the validator is the ETag, else the Last-Modified */
	size_t validator_len;
	char validator[RESUME_VALIDATOR_MAX]; /* as the 200 gave it, not NUL-terminated */
	size_t coding_len;		      /* 0: the 200 had no Content-Encoding */
	char coding[RESUME_CODING_MAX];	      /* its Content-Encoding, not NUL-terminated */
	size_t lines_len;
	/* "Range: bytes=" K "-" CRLF "If-Range: " validator CRLF CRLF */
	char lines[13 + 20 + 1 + 2 + 10 + RESUME_VALIDATOR_MAX + 4];
	char note[192]; /* why the latest resume failed, for the access log */
};

/* How the answer to a resume request fits the body the client has. */
enum resume_answer {
	RESUME_ANSWER_SPLICE,	    /* a 206 that continues the body exactly */
	RESUME_ANSWER_NOT_PARTIAL,  /* not a 206 (a 200 means the validator changed) */
	RESUME_ANSWER_OTHER_RANGE,  /* Content-Range absent, malformed, or not bytes K-(L-1)/L */
	RESUME_ANSWER_CHANGED,	    /* a 206 whose validator differs from the 200's */
	RESUME_ANSWER_NO_ETAG,	    /* a 206 without the ETag that the 200 had */
	RESUME_ANSWER_BAD_LENGTH,   /* a 206 whose body is not Content-Length L-K */
	RESUME_ANSWER_OTHER_CODING, /* a 206 in another Content-Encoding than the 200 */
	RESUME_ANSWER_MULTIPART,    /* a 206 of multipart/byteranges: parts, not the bytes */
};

/* The access-log note for an answer that is not spliced. */
const char *resume_answer_text(enum resume_answer answer);

/* Does a 200 response head of content_length bytes offer a resume? It
 * must say Accept-Ranges: bytes and carry one strong ETag, or, without an
 * ETag, a Last-Modified (a weak or repeated ETag: no resume). If so, the
 * offer is read into *block, made on first use (free it with
 * resume_free()), and true is returned. */
bool resume_read_offer(struct resume **block, const struct http1_head *head,
		       uint64_t content_length);

void resume_free(struct resume *resume);

/* Does a request head (as text, request line first) carry a Range or an
 * If-Range field of its own? Such a request is not resumed. */
bool resume_request_has_range(const char *head, size_t len);

/* Ask for the rest from body byte at: resume->lines become the Range and
 * If-Range fields and the blank line that ends the head. */
void resume_prepare(struct resume *resume, uint64_t at);

/* Does this response head (and its framing) to the resume request continue
 * the body exactly from resume->at? */
enum resume_answer resume_check_answer(const struct resume *resume, const struct http1_head *head,
				       const struct http1_framing *framing);

#endif
