#include "idempotency_key.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "http1.h"
#include "idempotency.h"

void idempotency_key_format(const uint8_t random[16], char *out)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t b[16];
	char *p = out;

	memcpy(b, random, sizeof(b));
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4: random */
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10: RFC 4122 */
	for (size_t i = 0; i < sizeof(b); i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[b[i] >> 4];
		*p++ = hex[b[i] & 0x0f];
	}
	*p = '\0';
}

void idempotency_key_new(struct retry_rng *fallback, char *out)
{
	uint8_t random[16];
	ssize_t got;

	/* GRND_NONBLOCK: before the pool is ready the event loop must not
	 * wait; the generator seeded at start serves instead */
	do
		got = getrandom(random, sizeof(random), GRND_NONBLOCK);
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof(random)) {
		uint64_t hi = retry_rng_next(fallback);
		uint64_t lo = retry_rng_next(fallback);

		memcpy(random, &hi, 8);
		memcpy(random + 8, &lo, 8);
	}
	idempotency_key_format(random, out);
}

bool idempotency_key_sent(const char *head, size_t len)
{
	static const char name[] = IDEMPOTENCY_KEY_HEADER ":";
	const size_t name_len = sizeof(name) - 1;
	const char *p = head, *end = head + len;

	/* every field line starts after a LF; names have no whitespace */
	while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		p++;
		if ((size_t)(end - p) >= name_len && http1_name_equals(p, name_len, name))
			return true;
	}
	return false;
}
