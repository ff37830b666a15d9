/* Unit tests for utf8.c: the length of each well-formed character, and 0
 * for every form RFC 3629 rules out, by table. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "utf8.h"

struct utf8_case {
	const char *bytes;
	size_t len;
	size_t want;
};

static void test_char_lengths(void **state)
{
	static const struct utf8_case cases[] = {
		{ "a", 1, 1 },
		{ "\x7f", 1, 1 },
		{ "\xc3\xa9", 2, 2 },	      /* é */
		{ "\xe2\x82\xac", 3, 3 },     /* € */
		{ "\xf0\x9f\x98\x80", 4, 4 }, /* an emoji */
		{ "\xf4\x8f\xbf\xbf", 4, 4 }, /* U+10FFFF, the last */
		{ "\xed\x9f\xbf", 3, 3 },     /* U+D7FF, just below the surrogates */
		{ "\xe9", 1, 0 },	      /* Latin-1 é alone */
		{ "\xe9t", 2, 0 },	      /* ... followed by ASCII */
		{ "\x80", 1, 0 },	      /* a continuation byte first */
		{ "\xc0\xaf", 2, 0 },	      /* overlong '/' */
		{ "\xc1\xbf", 2, 0 },	      /* overlong */
		{ "\xe0\x9f\xbf", 3, 0 },     /* overlong three-byte form */
		{ "\xf0\x8f\xbf\xbf", 4, 0 }, /* overlong four-byte form */
		{ "\xed\xa0\x80", 3, 0 },     /* a surrogate, U+D800 */
		{ "\xf4\x90\x80\x80", 4, 0 }, /* U+110000, past the last */
		{ "\xf5\x80\x80\x80", 4, 0 }, /* no such lead byte */
		{ "\xff", 1, 0 },
		{ "\xe2\x82", 2, 0 },	      /* cut short */
		{ "\xe2\x82\xac", 2, 0 },     /* cut short by len */
		{ "\xe2\x28\xac", 3, 0 },     /* a bad second byte */
		{ "\xf0\x9f\x98\x28", 4, 0 }, /* a bad last byte */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t got = utf8_char_length((const unsigned char *)cases[i].bytes, cases[i].len);

		if (got != cases[i].want)
			fail_msg("case %zu: got %zu, want %zu", i, got, cases[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_char_lengths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
