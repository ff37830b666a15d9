/* Unit tests for name_index.c: the table a config's routes are looked up
 * in at a start or a reload. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "name_index.h"

/* A name and a number are one key: the same name under another number
 * (a route's budget of another window) is another entry. */
static void test_name_and_number(void **state)
{
	struct name_index *index = name_index_new(4);
	int a = 1, b = 2, c = 3;

	(void)state;
	assert_null(name_index_find(index, "api", 0));
	name_index_add(index, "api", 10000, &a);
	name_index_add(index, "api", 20000, &b);
	name_index_add(index, "apis", 10000, &c);
	assert_ptr_equal(name_index_find(index, "api", 10000), &a);
	assert_ptr_equal(name_index_find(index, "api", 20000), &b);
	assert_ptr_equal(name_index_find(index, "apis", 10000), &c);
	assert_null(name_index_find(index, "api", 30000));
	assert_null(name_index_find(index, "ap", 10000));
	assert_null(name_index_find(index, "", 10000));
	name_index_free(index);
}

/* Sized for one, it grows: many thousand entries are all found again,
 * each as itself, and names never added are not. */
static void test_grows_past_expected(void **state)
{
	enum { COUNT = 20000 };
	static char names[COUNT][24];
	struct name_index *index = name_index_new(1);

	(void)state;
	for (unsigned i = 0; i < COUNT; i++) {
		snprintf(names[i], sizeof(names[i]), "route-number-%u", i);
		name_index_add(index, names[i], i % 3, names[i]);
	}
	for (unsigned i = 0; i < COUNT; i++) {
		char other[24];

		assert_ptr_equal(name_index_find(index, names[i], i % 3), names[i]);
		assert_null(name_index_find(index, names[i], i % 3 + 1));
		snprintf(other, sizeof(other), "route-number-%u", i + COUNT);
		assert_null(name_index_find(index, other, i % 3));
	}
	name_index_free(index);
}

/* Entries taken out are not found, and every other one still is, however
 * the runs of the table were laid out (the ones after a removed entry move
 * back); a pair taken out can be added again, and taking out a pair not
 * there changes nothing. */
static void test_remove(void **state)
{
	enum { COUNT = 5000 };
	static char names[COUNT][24];
	struct name_index *index = name_index_new(COUNT / 4);

	(void)state;
	for (unsigned i = 0; i < COUNT; i++) {
		snprintf(names[i], sizeof(names[i]), "r%u", i);
		name_index_add(index, names[i], 7, names[i]);
	}
	for (unsigned i = 0; i < COUNT; i += 3)
		name_index_remove(index, names[i], 7);
	name_index_remove(index, "never-added", 7);
	name_index_remove(index, names[1], 8);
	for (unsigned i = 0; i < COUNT; i++) {
		if (i % 3 == 0)
			assert_null(name_index_find(index, names[i], 7));
		else
			assert_ptr_equal(name_index_find(index, names[i], 7), names[i]);
	}
	for (unsigned i = 0; i < COUNT; i += 3)
		name_index_add(index, names[i], 7, names[i]);
	for (unsigned i = 0; i < COUNT; i++) {
		name_index_remove(index, names[i], 7);
		assert_null(name_index_find(index, names[i], 7));
		if (i + 1 < COUNT)
			assert_ptr_equal(name_index_find(index, names[i + 1], 7), names[i + 1]);
	}
	name_index_free(index);
}

/* NULL is freed as nothing, as free() does. */
static void test_free_null(void **state)
{
	(void)state;
	name_index_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_name_and_number),
		cmocka_unit_test(test_grows_past_expected),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_free_null),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
