#ifndef RETRYPROXY_MAX_FORWARDS_H
#define RETRYPROXY_MAX_FORWARDS_H

/*
 * Max-Forwards (RFC 9110 section 7.6.2): a TRACE or OPTIONS request that
 * carries it may pass only that many more intermediaries. At 0 the proxy is
 * its final recipient and answers it; above 0 it forwards the request with
 * the value decremented. Other methods ignore the field.
 */

#include <stddef.h>

#include <event2/buffer.h>

#include "http1.h"

/* max_forwards_of() past its first test. */
long max_forwards_find(const struct http1_head *head, size_t *index);

/* The field's value for a TRACE or OPTIONS request, with its index in
 * head->fields in *index (when index is not NULL); -1 for another method,
 * no field, or a value that is not 1*DIGIT, such as the list that two
 * Max-Forwards fields make (then it is passed on as it is).
 * Values past what a long holds are capped there. Every request asks, so
 * the method's length decides inline for nearly all of them. */
static inline long max_forwards_of(const struct http1_head *head, size_t *index)
{
	if (head->method_len != 5 && head->method_len != 7)
		return -1;
	return max_forwards_find(head, index);
}

/* Queue the answer of the final recipient to head, a TRACE or OPTIONS with
 * Max-Forwards: 0, and Connection: close: for TRACE, 200 with the request
 * as received as a message/http body, less the fields that carry
 * credentials (Authorization, Proxy-Authorization, Cookie); for OPTIONS,
 * 200 with the methods the proxy forwards in Allow. Returns the body's
 * size, for the access log. */
size_t max_forwards_answer(struct evbuffer *out, const struct http1_head *head);

#endif
