#ifndef RETRYPROXY_IDEMPOTENCY_KEY_H
#define RETRYPROXY_IDEMPOTENCY_KEY_H

/*
 * The Idempotency-Key that retry.idempotency_key: inject adds to a request
 * (SPEC "More retry controls"): a random UUID, version 4 (RFC 4122 section
 * 4.4), made once per request and sent unchanged on every try so that the
 * upstream can tell a repeat from a new request.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retry.h"

/* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx": 32 hex digits and 4 dashes. */
#define IDEMPOTENCY_KEY_LEN 36

/* Format 16 random bytes as a version 4 UUID in lower case hex: the
 * version and variant bits are set over them (122 random bits remain).
 * out gets IDEMPOTENCY_KEY_LEN characters and a NUL. */
void idempotency_key_format(const uint8_t random[16], char *out);

/* A new key from getrandom(); from fallback only when the kernel gives no
 * randomness (seccomp, an old kernel). out as for idempotency_key_format. */
void idempotency_key_new(struct retry_rng *fallback, char *out);

/* Does a request head as it goes upstream (text, request line first, a
 * field on each line after it) carry an Idempotency-Key, the client's or
 * an injected one? Two copies of such a request in flight at once race for
 * the key: a server that honours it answers the later one 409 while the
 * first is in progress. */
bool idempotency_key_sent(const char *head, size_t len);

#endif
