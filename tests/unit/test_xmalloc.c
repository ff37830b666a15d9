/* Unit tests for xmalloc.c's allocator for libevent: a freed block of a
 * buffer's size is handed out again for that size, other sizes are not
 * kept, the kept bytes are bounded, and trimming gives them all back. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <malloc.h>

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

/* Allocate count blocks of size, free them all, then allocate count blocks
 * of again_size: how many of those are blocks from the first round. */
static unsigned reused_after_free(size_t size, size_t again_size, unsigned count)
{
	void *blocks[40];
	unsigned reused = 0;
	unsigned i, j;

	assert_true(count <= 40);
	xmalloc_event_trim(); /* whatever an earlier test kept */
	for (i = 0; i < count; i++)
		blocks[i] = xmalloc_event(size);
	for (i = 0; i < count; i++)
		xmalloc_event_free(blocks[i]);
	for (i = 0; i < count; i++) {
		void *again = xmalloc_event(again_size);

		for (j = 0; j < count; j++)
			if (again == blocks[j])
				reused++;
		blocks[i] = again;
	}
	for (i = 0; i < count; i++)
		xmalloc_event_free(blocks[i]);
	xmalloc_event_trim();
	return reused;
}

static void test_kept_bytes_bounded(void **state)
{
	/* 40 blocks of 256 KiB: more than the 2 MiB kept */
	unsigned reused = reused_after_free(256 * 1024, 256 * 1024, 40);

	(void)state;
	assert_true(reused >= 1);
	assert_true(reused <= 8);
}

/* A block far larger than the largest size kept goes back to malloc: kept,
 * it would be handed out for 256 KiB and hold megabytes for nothing. */
static void test_large_blocks_not_kept(void **state)
{
	void *big = xmalloc_event(4 * 1024 * 1024);
	void *again;

	(void)state;
	xmalloc_event_free(big);
	again = xmalloc_event(256 * 1024);
	assert_true(malloc_usable_size(again) < 512 * 1024);
	xmalloc_event_free(again);
	xmalloc_event_trim();
}

/* The bound counts what blocks really hold, not the size they serve:
 * blocks of 384 KiB serve 256 KiB, and only five fit in 2 MiB. */
static void test_kept_bytes_count_real_size(void **state)
{
	unsigned reused = reused_after_free(384 * 1024, 256 * 1024, 8);

	(void)state;
	assert_true(reused >= 1);
	assert_true(reused <= 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffer_block_reused),
		cmocka_unit_test(test_small_blocks_not_kept),
		cmocka_unit_test(test_kept_bytes_bounded),
		cmocka_unit_test(test_kept_bytes_count_real_size),
		cmocka_unit_test(test_large_blocks_not_kept),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
