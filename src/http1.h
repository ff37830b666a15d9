#ifndef RETRYPROXY_HTTP1_H
#define RETRYPROXY_HTTP1_H

/*
 * Strict HTTP/1.1 message parsing (RFC 9112), as pure functions: bytes in,
 * "done after N bytes", "need more" or "bad" out. No I/O, no allocation: the
 * parsed head points into the caller's buffer, which must outlive it.
 * Nothing is repaired; anything ambiguous is an error.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HTTP1_MAX_FIELDS 128 /* more header fields than this is a 431 */

enum http1_parse {
	HTTP1_PARSE_DONE,  /* a whole head was parsed; head_len says how long */
	HTTP1_PARSE_MORE,  /* valid so far, the head is not complete yet */
	HTTP1_PARSE_ERROR, /* invalid; the error code says why */
};

enum http1_error {
	HTTP1_ERR_NONE,
	HTTP1_ERR_BAD_REQUEST_LINE,	    /* not "method SP target SP version CRLF" */
	HTTP1_ERR_BAD_METHOD,		    /* method is not a token */
	HTTP1_ERR_BAD_TARGET,		    /* request-target has invalid bytes, a form its method
					 * does not take, or a host the proxy cannot route on */
	HTTP1_ERR_SPACE_IN_TARGET,	    /* SP or HTAB inside the request-target */
	HTTP1_ERR_BAD_VERSION,		    /* not "HTTP/" DIGIT "." DIGIT */
	HTTP1_ERR_VERSION_NOT_SUPPORTED,    /* a major version other than 1: 505 */
	HTTP1_ERR_URI_TOO_LONG,		    /* request-target over the limit: 414 */
	HTTP1_ERR_HEAD_TOO_LARGE,	    /* head over the limit: 431 */
	HTTP1_ERR_TOO_MANY_FIELDS,	    /* over HTTP1_MAX_FIELDS: 431 */
	HTTP1_ERR_BAD_LINE_ENDING,	    /* bare CR or bare LF where CRLF must be */
	HTTP1_ERR_BAD_FIELD_NAME,	    /* field name is empty or not a token */
	HTTP1_ERR_SPACE_BEFORE_COLON,	    /* whitespace between field name and colon */
	HTTP1_ERR_OBS_FOLD,		    /* a field line starts with SP or HTAB */
	HTTP1_ERR_BAD_FIELD_VALUE,	    /* NUL, CR, LF or another control byte in a value */
	HTTP1_ERR_BAD_STATUS_LINE,	    /* response: not "HTTP/1.x 3DIGIT SP reason CRLF" */
	HTTP1_ERR_CL_AND_TE,		    /* both Content-Length and Transfer-Encoding */
	HTTP1_ERR_BAD_CONTENT_LENGTH,	    /* not 1*DIGIT, too large, or (request) a leading 0 */
	HTTP1_ERR_DIFFERING_CONTENT_LENGTH, /* several Content-Length values that differ */
	HTTP1_ERR_BAD_TRANSFER_ENCODING,    /* a coding list not ending in a single chunked */
	HTTP1_ERR_TE_IN_HTTP10,		    /* Transfer-Encoding in an HTTP/1.0 message */
	HTTP1_ERR_MISSING_HOST,		    /* HTTP/1.1 request without Host */
	HTTP1_ERR_BAD_HOST,		    /* Host not a valid uri-host[:port], or repeated; with a
					 * target without authority, not a host the proxy routes on */
	HTTP1_ERR_BAD_EXPECT,		    /* an expectation other than 100-continue: 417 */
	HTTP1_ERR_BAD_CHUNK_SIZE,	    /* chunk-size not hex digits */
	HTTP1_ERR_CHUNK_SIZE_OVERFLOW,	    /* chunk-size over 2^62 */
	HTTP1_ERR_BAD_CHUNK_EXT,	    /* chunk extension not token[=token|quoted-string] */
	HTTP1_ERR_CHUNK_LINE_TOO_LONG,	    /* chunk-size line (with extensions, leading zeros and
					 * CRLF) over 4 KiB */
	HTTP1_ERR_BAD_CHUNK_END,	    /* chunk data not followed by CRLF */
	HTTP1_ERR_BAD_TRAILER,		    /* trailer field invalid, or trailers too large */
	HTTP1_ERR_UNDERSCORE_FRAMING,	    /* request: Content_Length or Transfer_Encoding */
	HTTP1_ERR_CONNECT_CONTENT,	    /* a CONNECT framed with content to read */
	HTTP1_ERR_CODING_NOT_IMPLEMENTED,   /* request: a transfer coding besides chunked: 501 */
	HTTP1_ERR_COUNT,		    /* how many there are: sizes tables indexed by error */
};

/* The field names framing and forwarding decisions depend on, recognised
 * once while parsing so that later passes over the fields compare no names. */
enum http1_field_name {
	HTTP1_FIELD_OTHER,		 /* any name not listed below */
	HTTP1_FIELD_HOST,		 /* Host */
	HTTP1_FIELD_EXPECT,		 /* Expect */
	HTTP1_FIELD_CONNECTION,		 /* Connection */
	HTTP1_FIELD_CONTENT_LENGTH,	 /* Content-Length */
	HTTP1_FIELD_TRANSFER_ENCODING,	 /* Transfer-Encoding */
	HTTP1_FIELD_TE,			 /* TE */
	HTTP1_FIELD_UPGRADE,		 /* Upgrade */
	HTTP1_FIELD_KEEP_ALIVE,		 /* Keep-Alive */
	HTTP1_FIELD_PROXY_CONNECTION,	 /* Proxy-Connection */
	HTTP1_FIELD_PROXY_AUTHORIZATION, /* Proxy-Authorization */
	HTTP1_FIELD_UNDERSCORED_FRAMING, /* Content_Length or Transfer_Encoding, any '-' as '_' */
	HTTP1_FIELD_RETRY_ATTEMPTS,	 /* Retry-Attempts: the proxy sets its own */
	HTTP1_FIELD_DATE,		 /* Date: one the proxy adds where a response lacks it */
	HTTP1_FIELD_NAME_COUNT,		 /* how many there are: sizes tables indexed by name */
};

/* One field line. Pointers are into the parsed buffer. */
struct http1_field {
	const char *name;  /* field name as sent (case kept) */
	const char *value; /* value without leading and trailing whitespace */
	const char *line;  /* the whole line as sent, from the name to its CRLF included */
	uint32_t name_len;
	uint32_t value_len;
	uint32_t line_len;
	uint32_t known; /* enum http1_field_name: which of the names that matter it is */
};

/* The four forms of request-target (RFC 9112 section 3.2). The parser
 * accepts each only with the methods it belongs to. */
enum http1_target_form {
	HTTP1_TARGET_ORIGIN,	/* "/path?query"; the Host field names the origin */
	HTTP1_TARGET_ABSOLUTE,	/* "http[s]://authority/path?query", sent to a forward proxy */
	HTTP1_TARGET_AUTHORITY, /* "host:port", with CONNECT and only with it */
	HTTP1_TARGET_ASTERISK,	/* "*", only with OPTIONS */
};

/* A request-target split into what a proxy routes on. Pointers are into the
 * parsed buffer. The host fields are set in absolute and authority form
 * only: an origin-form or asterisk-form request names its host in Host. */
struct http1_target {
	enum http1_target_form form;
	bool tls;	  /* absolute-form with https */
	uint16_t port;	  /* absolute and authority form: explicit, or the scheme's default */
	const char *host; /* a DNS name or IP literal, without brackets around IPv6 */
	size_t host_len;
	const char *authority; /* host[:port] as sent */
	size_t authority_len;
	const char *path; /* path and query; the whole target in origin and asterisk form,
				* empty in authority form, and in absolute form empty means "/" */
	size_t path_len;
};

/* A parsed request or response head. Pointers are into the parsed buffer. */
struct http1_head {
	const char *method;		   /* request only */
	const char *target;		   /* request only: the request-target as sent */
	struct http1_target parsed_target; /* request only: target, split */
	const char *reason;		   /* response only: reason phrase, may be empty */
	size_t method_len;
	size_t target_len;
	size_t reason_len;
	int status;	   /* response only: 100..599 */
	int version_minor; /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
	size_t head_len;   /* bytes from the buffer's start to the end of the empty line */
	size_t field_count;
	struct http1_field fields[HTTP1_MAX_FIELDS];
};

struct http1_limits {
	size_t max_head_bytes;	 /* request line and all fields, CRLFs included */
	size_t max_target_bytes; /* request-target alone */
};

/* Parse a request head at the start of buf. Empty lines (CRLF) before the
 * request line are skipped and counted in head_len (RFC 9112 section 2.2).
 * The target is split into head->parsed_target; it is refused unless its form
 * fits the method and, in absolute and authority form, it names an http or
 * https host the proxy can route on (letters, digits, '-', '.', '_', '~', or an
 * IP literal; a port other than 0; CONNECT's port required). A head refused
 * once its method was read still has method set, and target as far as it was
 * read (for the log): up to and including a byte a target may not hold, the
 * first max_target_bytes of one over that limit, NULL when none was. */
enum http1_parse http1_parse_request_head(const char *buf, size_t len,
					  const struct http1_limits *limits,
					  struct http1_head *head, enum http1_error *error);

/* Parse a response head at the start of buf. */
enum http1_parse http1_parse_response_head(const char *buf, size_t len, size_t max_head_bytes,
					   struct http1_head *head, enum http1_error *error);

enum http1_body {
	HTTP1_BODY_NONE,	/* no body at all */
	HTTP1_BODY_LENGTH,	/* content_length bytes follow */
	HTTP1_BODY_CHUNKED,	/* chunked coding follows */
	HTTP1_BODY_UNTIL_CLOSE, /* response only: everything until the connection closes */
};

/* What a head says about the message around it. */
struct http1_framing {
	enum http1_body body;
	uint64_t content_length; /* with HTTP1_BODY_LENGTH */
	bool keep_alive;	 /* the sender allows another message on this connection */
	bool expect_continue;	 /* request: Expect: 100-continue */
	const char *host;	 /* request: the Host value, NULL when absent */
	size_t host_len;
	const char *host_name; /* request: Host's host without port or IPv6 brackets, NULL when
				  * absent; what routes match in origin and asterisk form */
	size_t host_name_len;
	uint16_t host_port;	   /* request: Host's port, 0 when it names none */
	bool length_repeated;	   /* Content-Length as a list or in more than one field: one number
			       * repeated, which goes on as one field (RFC 9110 section 8.6) */
	bool coded_before_chunked; /* Transfer-Encoding lists a coding before the final chunked
				    * (gzip, chunked): undoing chunked alone does not give the
				    * content */
	bool upgrade; /* request: asks to switch protocols (RFC 9110 section 7.8): HTTP/1.1,
		       * an Upgrade field, the upgrade option in Connection, no content */
	bool connection_options; /* Connection names an option besides close, keep-alive and
				  * upgrade: a field its trailer section must not pass on */
};

/* Decide a request's framing, checking Content-Length, Transfer-Encoding
 * (neither may frame content for a CONNECT), Connection, Host (required for
 * HTTP/1.1, at most one; with an origin-form or asterisk-form target, a plain
 * name or IP literal and a port other than 0) and Expect. Returns 0, or -1
 * with *error set. */
int http1_request_framing(const struct http1_head *head, struct http1_framing *framing,
			  enum http1_error *error);

/* Decide a response's framing; a response to HEAD, 1xx, 204 and 304 has no body. */
int http1_response_framing(const struct http1_head *head, bool request_was_head,
			   struct http1_framing *framing, enum http1_error *error);

/* Mark in hop[i] each of head's fields that a proxy must not forward:
 * the hop-by-hop fields (RFC 9110 section 7.6.1: Connection,
 * Proxy-Connection, Keep-Alive, TE, Transfer-Encoding, Upgrade) and any field
 * named in this head's Connection field, except Content-Length: the body it
 * frames is forwarded, so dropping it would let the next hop read that body
 * as another message. Transfer-Encoding is included: callers that forward a
 * chunked body as it is re-add it themselves. hop has room for
 * HTTP1_MAX_FIELDS. */
void http1_hop_by_hop_marks(const struct http1_head *head, bool *hop);

/* Write the options head's Connection fields name, other than close and
 * the names of fields always hop-by-hop, into out (room bytes), each
 * followed by a comma: the fields its trailer section must not pass on
 * (RFC 9110 section 7.6.1). Returns the length they take, which is more
 * than room when they do not fit (out then holds only some of them). */
size_t http1_trailer_named(const struct http1_head *head, char *out, size_t room);

/* May a trailer field of this name go on? Not one named in named (a list
 * from http1_trailer_named()), nor a hop-by-hop field, nor one a trailer
 * must not carry (RFC 9110 section 6.5.1): framing (Content-Length,
 * Transfer-Encoding, Trailer), routing (Host), authentication, request
 * modifiers, content format, response controls (Cache-Control), nor
 * Retry-Attempts, which is this proxy's. */
bool http1_trailer_field_passes(const char *name, size_t len, const char *named, size_t named_len);

/* Take the next element of a comma-separated list (RFC 9110 section 5.6.1)
 * from *pp (the list's start at first), without surrounding whitespace;
 * empty elements are returned too, as length 0. False when the list is used
 * up. */
bool http1_list_next(const char **pp, const char *end, const char **elem, size_t *elem_len);

/* Is this element of an Upgrade list h2c (HTTP/2 over cleartext, with or
 * without a version)? The proxy speaks no HTTP/2, and RFC 9113 section 3.1
 * deprecates the h2c upgrade: it is never offered upstream. */
bool http1_upgrade_is_h2c(const char *elem, size_t len);

/* Case-insensitive equality of two counted strings. */
bool http1_equal_nocase(const char *a, size_t alen, const char *b, size_t blen);

/* Case-insensitive comparison of a counted string with a C string. Inline so
 * that strlen of a literal is folded and most names fail on length alone. */
static inline bool http1_name_equals(const char *s, size_t len, const char *lit)
{
	size_t lit_len = strlen(lit);

	return len == lit_len && http1_equal_nocase(s, len, lit, lit_len);
}

/* Find the first field with this name, or NULL. */
const struct http1_field *http1_find_field(const struct http1_head *head, const char *name);

/* The HTTP status a client should get for a request parse error: 400, 414,
 * 417, 431 or 505. */
int http1_error_status(enum http1_error error);

/* A short human reason for an error, for response bodies and logs. */
const char *http1_error_text(enum http1_error error);

/* Streaming decoder for the chunked coding. It never copies data: it says what
 * the next bytes are, so the caller can move chunk data between buffers and
 * skip or keep framing bytes. */
struct http1_chunked {
	int state;	      /* private to http1.c */
	uint64_t remaining;   /* data bytes left in the current chunk */
	uint64_t size;	      /* chunk-size being read */
	size_t line_len;      /* bytes of the current framing line so far */
	size_t trailer_bytes; /* bytes of trailer section so far */
	size_t max_line;      /* longest chunk-size line accepted */
	size_t max_trailer;   /* largest trailer section accepted */
	bool extended;	      /* a chunk-size line carried a chunk extension */
};

enum http1_chunk_step {
	HTTP1_CHUNK_FRAMING, /* the first *n bytes are framing (size lines, CRLFs) */
	HTTP1_CHUNK_DATA,    /* the first *n bytes are chunk data */
	HTTP1_CHUNK_TRAILER, /* the first *n bytes are of a trailer section that goes on */
	HTTP1_CHUNK_DONE,    /* the first *n bytes are framing and end the body */
	HTTP1_CHUNK_ERROR,   /* invalid framing; *error says why */
};

/* Start decoding a chunked body; trailers up to max_trailer bytes are accepted. */
void http1_chunked_init(struct http1_chunked *dec, size_t max_trailer);

/* Look at the next len (> 0) bytes of the body and classify a prefix of them.
 * FRAMING, DATA and TRAILER consume *n bytes with 0 < *n <= len; call again
 * with the rest. DONE consumes *n bytes and the body is complete. A trailer
 * section (its field lines and the final empty line) never shares a step
 * with the framing before it: it starts a step, TRAILER while it goes on,
 * and its end is DONE, after which http1_chunked_has_trailer() is true. */
enum http1_chunk_step http1_chunked_step(struct http1_chunked *dec, const char *buf, size_t len,
					 size_t *n, enum http1_error *error);

/* True once DONE has been returned. */
bool http1_chunked_done(const struct http1_chunked *dec);

/* True once the last chunk's line (size 0) was stepped over: a recipient
 * that got it takes the body as complete (RFC 9112 section 8), whether the
 * trailer section after it ended, was cut or was found invalid. */
bool http1_chunked_past_last_chunk(const struct http1_chunked *dec);

/* True once a trailer field's first byte was stepped over. */
static inline bool http1_chunked_has_trailer(const struct http1_chunked *dec)
{
	return dec->trailer_bytes > 0;
}

/* True once a chunk extension's name was stepped over (on any chunk-size
 * line, the last chunk's included). */
static inline bool http1_chunked_has_extension(const struct http1_chunked *dec)
{
	return dec->extended;
}

#endif
