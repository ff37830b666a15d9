/* Range resume against a hostile upstream: the 200 that offers a resume
 * and the 206 that answers it are the upstream's bytes, and a 206 judged
 * to continue the body is spliced onto what the client already has. Both
 * heads go through the strict parser; then resume_read_offer() and
 * resume_check_answer() are compared with a reference written from
 * resume.h, the slow way (fields counted by name, lists split and trimmed,
 * Content-Range read number by number); and the Range and If-Range lines
 * resume_prepare() writes must parse, appended to a request head, as
 * exactly those two fields with the validator byte for byte.
 *
 * Input: eight bytes for the body's length L (the top bit of the first:
 * any length up to 2^40, else up to 1000, which the fuzzer can spell), eight
 * for the byte K the resume asks from (below L), then the 200's head and
 * right after it the 206's. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http1.h"
#include "http_date.h"
#include "resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_ok;
static struct http1_head fuzz_partial;
static struct http1_head fuzz_request;

/* The fields named name (any case): how many, and the last. */
static size_t fuzz_fields(const struct http1_head *head, const char *name,
			  const struct http1_field **last)
{
	size_t n = 0;

	*last = NULL;
	for (size_t i = 0; i < head->field_count; i++)
		if (head->fields[i].name_len == strlen(name) &&
		    strncasecmp(head->fields[i].name, name, strlen(name)) == 0) {
			*last = &head->fields[i];
			n++;
		}
	return n;
}

/* Does an Accept-Ranges value list "bytes" (any case) among its elements? */
static bool fuzz_lists_bytes(const char *v, size_t len)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		size_t a = start, b = i;

		if (i < len && v[i] != ',')
			continue;
		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if (b - a == 5 && strncasecmp(v + a, "bytes", 5) == 0)
			return true;
		start = i + 1;
	}
	return false;
}

/* The reference offer: the validator field, or NULL for no resume. */
static const struct http1_field *fuzz_ref_offer(const struct http1_head *h,
						const struct http1_field **coding)
{
	const struct http1_field *etag, *modified, *date;
	size_t etags = fuzz_fields(h, "ETag", &etag);
	size_t dates = fuzz_fields(h, "Date", &date);
	size_t modifieds = fuzz_fields(h, "Last-Modified", &modified);
	bool listed = false;
	int64_t modified_at, date_at;
	time_t now = time(NULL);

	for (size_t i = 0; i < h->field_count; i++) {
		const struct http1_field *f = &h->fields[i];

		if (f->name_len == 13 && strncasecmp(f->name, "Accept-Ranges", 13) == 0 &&
		    fuzz_lists_bytes(f->value, f->value_len))
			listed = true;
	}
	if (etags > 1 || fuzz_fields(h, "Content-Encoding", coding) > 1 || !listed)
		return NULL;
	if (etag != NULL) {
		/* strong: quoted, no quote inside, no W/ */
		if (etag->value_len < 2 || etag->value[0] != '"' ||
		    etag->value[etag->value_len - 1] != '"' ||
		    memchr(etag->value + 1, '"', etag->value_len - 2) != NULL)
			return NULL;
	} else if (dates != 1 || modifieds != 1 ||
		   http_date_parse(modified->value, modified->value_len, now, &modified_at) != 0 ||
		   http_date_parse(date->value, date->value_len, now, &date_at) != 0 ||
		   date_at < modified_at + 1) {
		return NULL;
	}
	etag = etag != NULL ? etag : modified;
	if (etag->value_len == 0 || etag->value_len > RESUME_VALIDATOR_MAX ||
	    (*coding != NULL && (*coding)->value_len > RESUME_CODING_MAX))
		return NULL;
	return etag;
}

/* Read 1 to 19 digits at *p; false without any or with more. */
static bool fuzz_number(const char **p, const char *end, uint64_t *out)
{
	size_t n = 0;

	*out = 0;
	while (*p + n < end && (*p)[n] >= '0' && (*p)[n] <= '9') {
		if (++n > 19)
			return false;
		*out = *out * 10 + (uint64_t)((*p)[n - 1] - '0');
	}
	*p += n;
	return n > 0;
}

/* The reference judgement of the answer to a resume from k of l bytes. */
static enum resume_answer fuzz_ref_answer(const struct http1_head *h,
					  const struct http1_framing *framing, uint64_t k,
					  uint64_t l, const struct http1_field *validator,
					  bool etag, const struct http1_field *coding)
{
	const struct http1_field *f;
	const char *p, *end;
	uint64_t first, last, complete;
	size_t clen;

	if (h->status != 206)
		return RESUME_ANSWER_NOT_PARTIAL;
	if (fuzz_fields(h, "Content-Range", &f) != 1 || f->value_len < 6 ||
	    strncasecmp(f->value, "bytes ", 6) != 0)
		return RESUME_ANSWER_OTHER_RANGE;
	p = f->value + 6;
	end = f->value + f->value_len;
	if (!fuzz_number(&p, end, &first) || p == end || *p++ != '-' ||
	    !fuzz_number(&p, end, &last) || p == end || *p++ != '/' ||
	    !fuzz_number(&p, end, &complete) || p != end || first != k || last != l - 1 ||
	    complete != l)
		return RESUME_ANSWER_OTHER_RANGE;
	for (size_t i = 0; i < h->field_count; i++) {
		f = &h->fields[i];
		if (f->name_len == 12 && strncasecmp(f->name, "Content-Type", 12) == 0 &&
		    f->value_len >= 20 && strncasecmp(f->value, "multipart/byteranges", 20) == 0 &&
		    (f->value_len == 20 || f->value[20] == ';' || f->value[20] == ' ' ||
		     f->value[20] == '\t'))
			return RESUME_ANSWER_MULTIPART;
	}
	if (fuzz_fields(h, etag ? "ETag" : "Last-Modified", &f) == 0) {
		if (etag)
			return RESUME_ANSWER_NO_ETAG;
	} else if (fuzz_fields(h, etag ? "ETag" : "Last-Modified", &f) > 1 ||
		   f->value_len != validator->value_len ||
		   memcmp(f->value, validator->value, f->value_len) != 0) {
		return RESUME_ANSWER_CHANGED;
	}
	if (framing->body != HTTP1_BODY_LENGTH || framing->content_length != l - k)
		return RESUME_ANSWER_BAD_LENGTH;
	if (fuzz_fields(h, "Content-Encoding", &f) > 1)
		return RESUME_ANSWER_OTHER_CODING;
	/* an empty Content-Encoding lists no coding, as none does */
	clen = coding != NULL ? coding->value_len : 0;
	if (f == NULL ? clen != 0 && !etag
		      : f->value_len != clen ||
				(clen > 0 && strncasecmp(f->value, coding->value, clen) != 0))
		return RESUME_ANSWER_OTHER_CODING;
	return RESUME_ANSWER_SPLICE;
}

/* resume_prepare()'s lines, after a request line and Host, must parse as
 * exactly Range and If-Range, the validator as it was. */
static void fuzz_check_lines(const struct resume *resume, uint64_t k,
			     const struct http1_field *validator)
{
	static const char start[] = "GET / HTTP/1.1\r\nHost: a\r\n";
	const struct http1_limits limits = { .max_head_bytes = 4096, .max_target_bytes = 64 };
	char text[sizeof(start) + sizeof(resume->lines)];
	char range[40];
	size_t len = sizeof(start) - 1 + resume->lines_len;
	enum http1_error error;
	const struct http1_field *f;

	if (resume->lines_len > sizeof(resume->lines))
		abort();
	memcpy(text, start, sizeof(start) - 1);
	memcpy(text + sizeof(start) - 1, resume->lines, resume->lines_len);
	snprintf(range, sizeof(range), "bytes=%llu-", (unsigned long long)k);
	if (http1_parse_request_head(text, len, &limits, &fuzz_request, &error) !=
		    HTTP1_PARSE_DONE ||
	    fuzz_request.head_len != len || fuzz_request.field_count != 3)
		abort();
	f = &fuzz_request.fields[1];
	if (f->name_len != 5 || memcmp(f->name, "Range", 5) != 0 || f->value_len != strlen(range) ||
	    memcmp(f->value, range, f->value_len) != 0)
		abort();
	f = &fuzz_request.fields[2];
	if (f->name_len != 8 || memcmp(f->name, "If-Range", 8) != 0 ||
	    f->value_len != validator->value_len ||
	    memcmp(f->value, validator->value, f->value_len) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data + 16;
	size_t len = size - 16;
	struct resume *resume = NULL;
	const struct http1_field *validator, *coding = NULL;
	struct http1_framing framing;
	enum http1_error error;
	uint64_t l, k;
	bool offered;

	if (size < 16)
		return 0;
	memcpy(&l, data, 8);
	memcpy(&k, data + 8, 8);
	l = 1 + ((data[0] & 0x80) != 0 ? l % (UINT64_C(1) << 40) : l % 1000);
	k %= l;
	if (http1_parse_response_head(buf, len, 65536, &fuzz_ok, &error) != HTTP1_PARSE_DONE)
		return 0;

	offered = resume_read_offer(&resume, &fuzz_ok, l);
	validator = fuzz_ref_offer(&fuzz_ok, &coding);
	if (offered != (validator != NULL))
		abort();
	if (!offered)
		return 0;
	if (resume->length != l || resume->etag != (validator->name_len == 4) ||
	    resume->validator_len != validator->value_len ||
	    memcmp(resume->validator, validator->value, validator->value_len) != 0 ||
	    resume->coding_len != (coding != NULL ? coding->value_len : 0) ||
	    (coding != NULL && memcmp(resume->coding, coding->value, coding->value_len) != 0))
		abort();
	resume_prepare(resume, k);
	fuzz_check_lines(resume, k, validator);

	buf += fuzz_ok.head_len;
	len -= fuzz_ok.head_len;
	if (http1_parse_response_head(buf, len, 65536, &fuzz_partial, &error) == HTTP1_PARSE_DONE &&
	    http1_response_framing(&fuzz_partial, false, &framing, &error) == 0 &&
	    resume_check_answer(resume, &fuzz_partial, &framing) !=
		    fuzz_ref_answer(&fuzz_partial, &framing, k, l, validator, resume->etag, coding))
		abort();
	resume_free(resume);
	return 0;
}
