/*
 * Unit tests for idempotency_key.c: the UUID version 4 layout over known
 * bytes, fresh keys that differ and keep that layout, and whether a
 * request head as it goes upstream carries a key.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "idempotency_key.h"

/* Is key a lower case version 4, RFC 4122 variant UUID? */
static bool test_is_uuid4(const char *key)
{
	if (strlen(key) != IDEMPOTENCY_KEY_LEN)
		return false;
	for (size_t i = 0; i < IDEMPOTENCY_KEY_LEN; i++) {
		char c = key[i];

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return false;
		}
	}
	return key[14] == '4' && strchr("89ab", key[19]) != NULL;
}

static void test_format_known_bytes(void **state)
{
	static const uint8_t zeros[16] = { 0 };
	static const uint8_t ones[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t counting[16] = { 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
					      0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff };
	char key[IDEMPOTENCY_KEY_LEN + 1];

	idempotency_key_format(zeros, key);
	assert_string_equal(key, "00000000-0000-4000-8000-000000000000");
	idempotency_key_format(ones, key);
	assert_string_equal(key, "ffffffff-ffff-4fff-bfff-ffffffffffff");
	idempotency_key_format(counting, key);
	assert_string_equal(key, "00112233-4455-4677-8899-aabbccddeeff");
	assert_true(test_is_uuid4(key));
}

static void test_new_keys_differ(void **state)
{
	struct retry_rng rng;
	char keys[64][IDEMPOTENCY_KEY_LEN + 1];

	retry_rng_seed_with(&rng, 7);
	for (size_t i = 0; i < 64; i++) {
		idempotency_key_new(&rng, keys[i]);
		if (!test_is_uuid4(keys[i]))
			fail_msg("not a version 4 UUID: %s", keys[i]);
		for (size_t j = 0; j < i; j++)
			if (strcmp(keys[i], keys[j]) == 0)
				fail_msg("key %zu repeats key %zu: %s", i, j, keys[i]);
	}
}

/* A field line named Idempotency-Key, in any case, whatever its value; not
 * the name inside another field's name or value, nor the request line. */
static void test_key_sent(void **state)
{
	static const struct {
		const char *head;
		bool sent;
	} rows[] = {
		{ "GET / HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k1\r\nVia: 1.1 retryproxy\r\n\r\n",
		  true },
		{ "GET / HTTP/1.1\r\nHost: a\r\nidempotency-key: k1\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nHost: a\r\nIDEMPOTENCY-KEY:\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 retryproxy\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX-Idempotency-Key: k1\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: a\r\nIdempotency-Keys: k1\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX-Note: Idempotency-Key: k1\r\n\r\n", false },
		{ "GET /Idempotency-Key: HTTP/1.1\r\nHost: a\r\n\r\n", false },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (idempotency_key_sent(rows[i].head, strlen(rows[i].head)) != rows[i].sent)
			fail_msg("row %zu: expected %s", i, rows[i].sent ? "a key" : "none");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_known_bytes),
		cmocka_unit_test(test_new_keys_differ),
		cmocka_unit_test(test_key_sent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
