#include "reply.h"

#include <string.h>

#include <event2/buffer.h>

#include "http_date.h"

/* The reason phrase of each status the proxy answers with. */
static const char *reply_reason_phrase(int status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 417:
		return "Expectation Failed";
	case 421:
		return "Misdirected Request";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}

size_t reply_error(struct evbuffer *out, int status, const char *text, unsigned attempts,
		   enum reply_connection connection, bool head_request)
{
	static const char *const fields[] = {
		[REPLY_KEEP] = "",
		[REPLY_KEEP_HTTP10] = "Connection: keep-alive\r\n",
		[REPLY_CLOSE] = "Connection: close\r\n",
	};
	size_t text_len = strlen(text);

	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: text/plain\r\n"
			    "Content-Length: %zu\r\nRetry-Attempts: %u\r\nVia: 1.1 retryproxy\r\n"
			    "%s\r\n",
			    status, reply_reason_phrase(status), http_date_now(), text_len + 1,
			    attempts, fields[connection]);
	if (!head_request)
		evbuffer_add_printf(out, "%s\n", text);
	return head_request ? 0 : text_len + 1;
}

void reply_connect_established(struct evbuffer *out)
{
	evbuffer_add_printf(out,
			    "HTTP/1.1 200 Connection established\r\nDate: %s\r\n"
			    "Via: 1.1 retryproxy\r\n\r\n",
			    http_date_now());
}
