/* file_read_all(): a whole file, or its first max bytes, NUL-terminated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "file_read.h"

/* A file of n bytes, each its offset modulo 251, rewound. */
static FILE *file_of(size_t n)
{
	FILE *f = tmpfile();

	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(fputc((int)(i % 251), f), (int)(i % 251));
	rewind(f);
	return f;
}

static void expect_prefix(const char *text, size_t len, size_t n)
{
	assert_int_equal(len, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal((unsigned char)text[i], i % 251);
	assert_int_equal(text[n], '\0');
}

/* Every size around the buffer's growth steps reads whole. */
static void test_whole(void **state)
{
	static const size_t sizes[] = { 0, 1, 8190, 8191, 8192, 8193, 16383, 16384, 100000 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		FILE *f = file_of(sizes[i]);
		size_t len = 1;
		char *text = file_read_all(f, SIZE_MAX, &len);

		assert_non_null(text);
		expect_prefix(text, len, sizes[i]);
		free(text);
		fclose(f);
	}
}

/* At most max bytes are read, the rest left. */
static void test_max(void **state)
{
	FILE *f = file_of(20000);
	size_t len;
	char *text = file_read_all(f, 10000, &len);

	assert_non_null(text);
	expect_prefix(text, len, 10000);
	free(text);
	fclose(f);
	f = file_of(5);
	text = file_read_all(f, 10000, &len);
	expect_prefix(text, len, 5);
	free(text);
	fclose(f);
}

/* A read that fails gives NULL. */
static void test_failed_read(void **state)
{
	FILE *f = fopen("/proc/self/mem", "rb");
	size_t len;

	if (f == NULL)
		skip();
	assert_null(file_read_all(f, SIZE_MAX, &len));
	fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole),
		cmocka_unit_test(test_max),
		cmocka_unit_test(test_failed_read),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
