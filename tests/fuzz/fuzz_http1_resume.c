/* Request heads read in pieces: the first byte of the input picks how the
 * rest is cut into reads; at every read the resumed parse must say what the
 * one-shot parse of the same bytes says (result, error, head length; for a
 * refused head, the method and target it names), and
 * look at a bounded number of bytes in all. With the first byte's top bit
 * set, the second picks small limits, so that the 414 and 431 paths are
 * compared at every read; with the next bit set too, the limits are
 * lowered after the first read, as a reload can while a head arrives. */

#include <stdbool.h>
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
	struct http1_limits lowered;
	struct http1_resume resume = { 0 };
	enum http1_error want_error, error = HTTP1_ERR_NONE;
	enum http1_parse want, r = HTTP1_PARSE_MORE;
	size_t want_len, step, n = 0;
	unsigned reads = 0;
	bool small, reload;
	char *buf;

	if (size < 3)
		return 0;
	step = (size_t)data[0] % 16 + 1; /* bytes a read; 16: one byte, then the rest */
	small = (data[0] & 0x80) != 0;
	reload = small && (data[0] & 0x40) != 0;
	if (small) {
		/* a target of 1 to 64 bytes, a head 16 to 112 bytes longer */
		limits.max_target_bytes = (size_t)data[1] % 64 + 1;
		limits.max_head_bytes = limits.max_target_bytes + (size_t)data[1] / 64 * 32 + 16;
		data++;
		size--;
	}
	lowered = limits;
	if (reload) {
		lowered.max_target_bytes = limits.max_target_bytes / 2 + 1;
		lowered.max_head_bytes = limits.max_head_bytes / 2 + 1;
	}
	data++;
	size--;
	buf = malloc(size);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	/* the limits in force from the second read on decide the whole */
	want = http1_parse_request_head(buf, size, &lowered, &fuzz_head, &want_error);
	want_len = fuzz_head.head_len;
	while (r == HTTP1_PARSE_MORE && n < size) {
		const struct http1_limits *now = reads++ == 0 ? &limits : &lowered;

		n = step == 16 ? (n == 0 ? 1 : size) : (n + step < size ? n + step : size);
		r = http1_resume_request_head(&resume, buf, n, now, &fuzz_head, &error);
		/* a prefix is DONE only where the whole is DONE at the same end
		 * (a first read under the limits before the reload aside) */
		if (r == HTTP1_PARSE_DONE && (now == &lowered || !reload) &&
		    (want != HTTP1_PARSE_DONE || fuzz_head.head_len != want_len))
			abort();
		/* on small inputs, or small limits, at every read: what the
		 * one-shot parse of the same bytes says */
		if (size <= 512 || small) {
			enum http1_error e;
			size_t head_len = fuzz_head.head_len;
			const char *method = fuzz_head.method;
			const char *target = fuzz_head.target;
			size_t target_len = fuzz_head.target_len;

			if (http1_parse_request_head(buf, n, now, &fuzz_head, &e) != r ||
			    e != error || (r == HTTP1_PARSE_DONE && fuzz_head.head_len != head_len))
				abort();
			/* a refused head names the same method and target (the
			 * access log shows them) */
			if (r == HTTP1_PARSE_ERROR &&
			    (fuzz_head.method != method || fuzz_head.target != target ||
			     fuzz_head.target_len != target_len))
				abort();
		}
	}
	/* unless it ended at the first read, under the limits before */
	if ((reads > 1 || !reload) && (r != want || error != want_error))
		abort();
	/* the scan once, the request line and each deciding parse: far from
	 * the quadratic n * n / 2 of starting over */
	if (resume.examined > 4 * size + 64 * (size / step + 1) && size > 256)
		abort();
	free(buf);
	return 0;
}
