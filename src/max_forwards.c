#include "max_forwards.h"

#include <limits.h>
#include <string.h>

#include "http_date.h"

/* Is the method TRACE or OPTIONS, the two Max-Forwards applies to? */
static bool max_forwards_applies(const struct http1_head *head)
{
	return (head->method_len == 5 && memcmp(head->method, "TRACE", 5) == 0) ||
	       (head->method_len == 7 && memcmp(head->method, "OPTIONS", 7) == 0);
}

/* The index of the first Max-Forwards field at or after from, or count. */
static size_t max_forwards_next(const struct http1_head *head, size_t from)
{
	while (from < head->field_count &&
	       !http1_name_equals(head->fields[from].name, head->fields[from].name_len,
				  "max-forwards"))
		from++;
	return from;
}

long max_forwards_find(const struct http1_head *head, size_t *index)
{
	size_t i;
	const struct http1_field *f;
	long value = 0;

	if (!max_forwards_applies(head))
		return -1;
	i = max_forwards_next(head, 0);
	if (i == head->field_count)
		return -1;
	/* Two field lines are one list (RFC 9110 section 5.3), "5, 0", which
	 * is no 1*DIGIT either: acting on the first alone would answer or
	 * decrement a value the next hop reads otherwise. */
	if (max_forwards_next(head, i + 1) != head->field_count)
		return -1;
	f = &head->fields[i];
	if (f->value_len == 0)
		return -1;
	for (size_t j = 0; j < f->value_len; j++) {
		int digit = f->value[j] - '0';

		if (digit < 0 || digit > 9)
			return -1;
		/* past LONG_MAX, LONG_MAX: what goes on is then the lesser of
		 * the value less one and the most the proxy holds (RFC 9110
		 * section 7.6.2), never a shorter number */
		value = value > (LONG_MAX - digit) / 10 ? LONG_MAX : value * 10 + digit;
	}
	if (index != NULL)
		*index = i;
	return value;
}

/* Fields a TRACE's echo leaves out: they carry credentials (RFC 9110
 * section 9.3.8). */
static bool max_forwards_sensitive(const struct http1_field *f)
{
	return http1_name_equals(f->name, f->name_len, "authorization") ||
	       http1_name_equals(f->name, f->name_len, "proxy-authorization") ||
	       http1_name_equals(f->name, f->name_len, "cookie");
}

size_t max_forwards_answer(struct evbuffer *out, const struct http1_head *head)
{
	static const char allow[] = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE";
	struct evbuffer *echo;
	size_t len;

	if (head->method_len == 7) {
		evbuffer_add_printf(
			out,
			"HTTP/1.1 200 OK\r\nDate: %s\r\nAllow: %s\r\nContent-Length: 0\r\n"
			"Retry-Attempts: 0\r\nVia: 1.1 retryproxy\r\n"
			"Connection: close\r\n\r\n",
			http_date_now(), allow);
		return 0;
	}
	echo = evbuffer_new();
	evbuffer_add_printf(echo, "%.*s %.*s HTTP/1.%d\r\n", (int)head->method_len, head->method,
			    (int)head->target_len, head->target, head->version_minor);
	for (size_t i = 0; i < head->field_count; i++)
		if (!max_forwards_sensitive(&head->fields[i]))
			evbuffer_add(echo, head->fields[i].line, head->fields[i].line_len);
	evbuffer_add(echo, "\r\n", 2);
	evbuffer_add_printf(out,
			    "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: message/http\r\n"
			    "Content-Length: %zu\r\nRetry-Attempts: 0\r\nVia: 1.1 retryproxy\r\n"
			    "Connection: close\r\n\r\n",
			    http_date_now(), evbuffer_get_length(echo));
	len = evbuffer_get_length(echo);
	evbuffer_add_buffer(out, echo);
	evbuffer_free(echo);
	return len;
}
