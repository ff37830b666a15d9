/* resume_request_has_range(): does a request head, as text, carry a Range
 * or an If-Range of its own (then a broken response is not resumed with
 * the proxy's own Range)? It scans bytes; the reference is the strict
 * parser's field list, each name compared whole, case-insensitively, with
 * "Range" and "If-Range". Checked on the head as the client sent it and on
 * the head as the exchange sends it upstream (request line, Host, the
 * fields less Host and the hop-by-hop ones, Via: what the function is given), each
 * in a buffer of its exact size so that a read past the end is caught.
 *
 * The whole input is the request head. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http1.h"
#include "resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;

static bool fuzz_is_range(const struct http1_field *f)
{
	return (f->name_len == 5 && strncasecmp(f->name, "Range", 5) == 0) ||
	       (f->name_len == 8 && strncasecmp(f->name, "If-Range", 8) == 0);
}

/* The function on a copy of text[0..len) that ends where it ends. */
static bool fuzz_has_range(const char *text, size_t len)
{
	char *copy = malloc(len + (len == 0));
	bool has;

	if (copy == NULL)
		abort();
	memcpy(copy, text, len);
	has = resume_request_has_range(copy, len);
	free(copy);
	return has;
}

static char *fuzz_put(char *p, const char *s, size_t len)
{
	memcpy(p, s, len);
	return p + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char version_host[] = " HTTP/1.1\r\nHost: a\r\n";
	static const char via[] = "Via: 1.1 retryproxy\r\n\r\n";
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };
	bool hop[HTTP1_MAX_FIELDS];
	enum http1_error error;
	bool want = false, want_sent = false;
	char *sent, *p;

	if (http1_parse_request_head((const char *)data, size, &limits, &fuzz_head, &error) !=
	    HTTP1_PARSE_DONE)
		return 0;
	http1_hop_by_hop_marks(&fuzz_head, hop);
	for (size_t i = 0; i < fuzz_head.field_count; i++)
		if (fuzz_is_range(&fuzz_head.fields[i])) {
			want = true;
			want_sent = want_sent || !hop[i];
		}
	if (fuzz_has_range((const char *)data, fuzz_head.head_len) != want)
		abort();

	/* as exchange_build_request_head() writes it */
	sent = malloc(fuzz_head.method_len + 1 + fuzz_head.target_len + sizeof(version_host) +
		      fuzz_head.head_len + sizeof(via));
	if (sent == NULL)
		abort();
	p = fuzz_put(sent, fuzz_head.method, fuzz_head.method_len);
	*p++ = ' ';
	p = fuzz_put(p, fuzz_head.target, fuzz_head.target_len);
	p = fuzz_put(p, version_host, sizeof(version_host) - 1);
	for (size_t i = 0; i < fuzz_head.field_count; i++)
		if (!hop[i] && !(fuzz_head.fields[i].name_len == 4 &&
				 strncasecmp(fuzz_head.fields[i].name, "Host", 4) == 0))
			p = fuzz_put(p, fuzz_head.fields[i].line, fuzz_head.fields[i].line_len);
	p = fuzz_put(p, via, sizeof(via) - 1);
	if (fuzz_has_range(sent, (size_t)(p - sent)) != want_sent)
		abort();
	free(sent);
	return 0;
}
