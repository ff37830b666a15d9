/* Unit tests for max_forwards.c: the value a TRACE or OPTIONS carries, by
 * table. What goes on is the value less one, and RFC 9110 section 7.6.2
 * wants the lesser of that and the most the proxy holds: a value past
 * LONG_MAX reads as LONG_MAX, never as a smaller number. */

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"
#include "max_forwards.h"

static struct http1_head head;

static void test_values(void **state)
{
	static const struct {
		const char *request;
		long want;
	} cases[] = {
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\n\r\n", 0 },
		{ "OPTIONS * HTTP/1.1\r\nHost: a\r\nmax-forwards: 0005\r\n\r\n", 5 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\n\r\n", -1 },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0, 5\r\n\r\n", -1 },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\nMax-Forwards: 5\r\n\r\n", -1 },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: +1\r\n\r\n", -1 },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 1000000000000000000\r\n\r\n",
		  1000000000000000000L },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 9223372036854775806\r\n\r\n",
		  LONG_MAX - 1 },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 9223372036854775807\r\n\r\n",
		  LONG_MAX },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 9223372036854775808\r\n\r\n",
		  LONG_MAX },
		{ "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 99999999999999999999\r\n\r\n",
		  LONG_MAX },
		{ "OPTIONS / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 00009300000000000000000\r\n\r\n",
		  LONG_MAX },
	};
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum http1_error error;
		long got;

		if (http1_parse_request_head(cases[i].request, strlen(cases[i].request), &limits,
					     &head, &error) != HTTP1_PARSE_DONE)
			fail_msg("case %zu does not parse", i);
		got = max_forwards_of(&head, NULL);
		if (got != cases[i].want)
			fail_msg("case %zu: got %ld, want %ld", i, got, cases[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
