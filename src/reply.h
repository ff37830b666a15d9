#ifndef RETRYPROXY_REPLY_H
#define RETRYPROXY_REPLY_H

/* The proxy's own responses: a refused request, an upstream that could not
 * be reached, a deadline that passed. */

#include <stdbool.h>

struct evbuffer;

/* Queue a response with a one-line text body, Retry-Attempts and Via, and
 * Connection: close when close is set. */
void reply_error(struct evbuffer *out, int status, const char *text, unsigned attempts, bool close);

#endif
