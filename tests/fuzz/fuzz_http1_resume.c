/* Request heads read in pieces: the first byte of the input picks how the
 * rest is cut into reads; at every read the resumed parse must say what the
 * one-shot parse of the same bytes says (result, error, head length), and
 * look at a bounded number of bytes in all. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"
#include "http1_resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http1_limits limits = { .max_head_bytes = 4096, .max_target_bytes = 1024 };
	struct http1_resume resume = { 0 };
	enum http1_error want_error, error = HTTP1_ERR_NONE;
	enum http1_parse want, r = HTTP1_PARSE_MORE;
	size_t want_len, step, n = 0;
	char *buf;

	if (size < 2)
		return 0;
	step = (size_t)data[0] % 16 + 1; /* bytes a read; 16: one byte, then the rest */
	data++;
	size--;
	buf = malloc(size);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	want = http1_parse_request_head(buf, size, &limits, &fuzz_head, &want_error);
	want_len = fuzz_head.head_len;
	while (r == HTTP1_PARSE_MORE && n < size) {
		n = step == 16 ? (n == 0 ? 1 : size) : (n + step < size ? n + step : size);
		r = http1_resume_request_head(&resume, buf, n, &limits, &fuzz_head, &error);
		/* a prefix is DONE only where the whole is DONE at the same end */
		if (r == HTTP1_PARSE_DONE &&
		    (want != HTTP1_PARSE_DONE || fuzz_head.head_len != want_len))
			abort();
		/* on small inputs, at every read: what the one-shot parse of the
		 * same bytes says */
		if (size <= 512) {
			enum http1_error e;
			size_t head_len = fuzz_head.head_len;

			if (http1_parse_request_head(buf, n, &limits, &fuzz_head, &e) != r ||
			    e != error || (r == HTTP1_PARSE_DONE && fuzz_head.head_len != head_len))
				abort();
		}
	}
	if (r != want || error != want_error)
		abort();
	/* the scan once, the request line and each deciding parse: far from
	 * the quadratic n * n / 2 of starting over */
	if (resume.examined > 4 * size + 64 * (size / step + 1) && size > 256)
		abort();
	free(buf);
	return 0;
}
