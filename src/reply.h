#ifndef RETRYPROXY_REPLY_H
#define RETRYPROXY_REPLY_H

/* The proxy's own responses: a refused request, an upstream that could not
 * be reached, a deadline that passed. */

#include <stdbool.h>
#include <stddef.h>

struct evbuffer;

/* How a reply's connection goes on: closed after it, kept (HTTP/1.1's
 * default), or kept for an HTTP/1.0 client, which must be told so. */
#include <stdbool.h>

enum reply_connection { REPLY_KEEP, REPLY_KEEP_HTTP10, REPLY_CLOSE };

/* Queue a response with a one-line text body, Retry-Attempts and Via, and
 * the Connection field that connection needs. To a HEAD request the same
 * head goes without the body (RFC 9110 section 9.3.2): on a kept
 * connection a body there would be read as the next response. Returns the
 * body's size, for the access log. */
size_t reply_error(struct evbuffer *out, int status, const char *text, unsigned attempts,
		   enum reply_connection connection, bool head_request);

/* Queue the 200 that opens a CONNECT tunnel: Date (the proxy answers it,
 * RFC 9110 section 6.6.1) and Via, no framing fields (section 9.3.6). */
void reply_connect_established(struct evbuffer *out);

#endif
