/* Unit tests for xmalloc.c's allocator for libevent: a freed block of a
 * buffer's size is handed out again for that size, other sizes are not
 * kept, the kept bytes are bounded, and trimming gives them all back. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "xmalloc.h"

static void test_buffer_block_reused(void **state)
{
	void *a = xmalloc_event(4096);
	void *b;

	(void)state;
	memset(a, 'a', 4096);
	xmalloc_event_free(a);
	b = xmalloc_event(4096);
	assert_ptr_equal(b, a);
	/* a kept block serves only its own size */
	xmalloc_event_free(b);
	b = xmalloc_event(2048);
	assert_ptr_not_equal(b, a);
	xmalloc_event_free(b);
	xmalloc_event_trim();
}

static void test_small_blocks_not_kept(void **state)
{
	void *a = xmalloc_event(200);

	(void)state;
	xmalloc_event_free(a);
	xmalloc_event_free(NULL);
	/* nothing of 1 KiB or more is kept: a new block */
	a = xmalloc_event(1024);
	assert_non_null(a);
	xmalloc_event_free(a);
	xmalloc_event_trim();
}

static void test_kept_bytes_bounded(void **state)
{
	enum { COUNT = 40 };
	void *blocks[COUNT];
	unsigned reused = 0;
	unsigned i, j;

	(void)state;
	/* 40 blocks of 256 KiB: more than the 2 MiB kept */
	for (i = 0; i < COUNT; i++)
		blocks[i] = xmalloc_event(256 * 1024);
	for (i = 0; i < COUNT; i++)
		xmalloc_event_free(blocks[i]);
	for (i = 0; i < COUNT; i++) {
		void *again = xmalloc_event(256 * 1024);

		for (j = 0; j < COUNT; j++)
			if (again == blocks[j])
				reused++;
		blocks[i] = again;
	}
	assert_true(reused >= 1);
	assert_true(reused <= 8);
	for (i = 0; i < COUNT; i++)
		xmalloc_event_free(blocks[i]);
	xmalloc_event_trim();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffer_block_reused),
		cmocka_unit_test(test_small_blocks_not_kept),
		cmocka_unit_test(test_kept_bytes_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
