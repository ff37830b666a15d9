/* Unit tests for registry.c: every registered connection is reached by a
 * shutdown, a drain and a reload, each through its own operations, and an
 * entry that closes leaves the list without upsetting the walk. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "registry.h"

/* A registered stand-in for a client connection or a tunnel. */
struct fake {
	struct registry_entry entry;
	bool open;
	bool idle;
	bool waiting; /* a request waits for its next try */
	bool answered;
	int config_changes;
	const char *closed_for;
};

static void fake_close(void *self, const char *reason)
{
	struct fake *f = self;

	f->open = false;
	f->closed_for = reason;
	registry_remove(&f->entry);
}

static void fake_drain_begins(void *self)
{
	struct fake *f = self;

	if (f->idle)
		fake_close(f, "draining");
}

/* A waiting request is answered; the connection stays to write it. */
static void fake_drain_answer(void *self)
{
	struct fake *f = self;

	if (f->waiting)
		f->answered = true;
}

static void fake_config_changed(void *self)
{
	struct fake *f = self;

	f->config_changes++;
}

static const struct registry_ops client_like = {
	.close = fake_close,
	.drain_begins = fake_drain_begins,
	.drain_answer = fake_drain_answer,
	.config_changed = fake_config_changed,
};

/* Only close: like a tunnel. */
static const struct registry_ops tunnel_like = {
	.close = fake_close,
};

static void add(struct registry *r, struct fake *f, const struct registry_ops *ops, bool idle)
{
	memset(f, 0, sizeof(*f));
	f->open = true;
	f->idle = idle;
	registry_add(r, &f->entry, ops, f);
}

static void test_close_all(void **state)
{
	struct registry r;
	struct fake f[4];

	registry_init(&r);
	add(&r, &f[0], &client_like, true);
	add(&r, &f[1], &tunnel_like, false);
	add(&r, &f[2], &client_like, false);
	add(&r, &f[3], &tunnel_like, false);
	registry_close_all(&r, "shutdown");
	for (int i = 0; i < 4; i++) {
		assert_false(f[i].open);
		assert_string_equal(f[i].closed_for, "shutdown");
	}
	assert_true(LIST_EMPTY(&r.entries));
}

/* A drain closes the idle client connections only; the walk survives each
 * close removing the entry it is on, first, middle or last. */
static void test_drain_begins(void **state)
{
	struct registry r;
	struct fake f[5];
	bool idle[5] = { true, false, true, false, true };

	registry_init(&r);
	for (int i = 0; i < 5; i++)
		add(&r, &f[i], i == 3 ? &tunnel_like : &client_like, idle[i]);
	registry_drain_begins(&r);
	for (int i = 0; i < 5; i++)
		assert_int_equal(f[i].open, !idle[i]);
	registry_close_all(&r, "drain_timeout");
	assert_string_equal(f[1].closed_for, "drain_timeout");
	assert_string_equal(f[3].closed_for, "drain_timeout");
}

/* At the drain's answer time a connection whose request waits for a try
 * answers it, first, middle or last in the list; nothing closes, a tunnel
 * neither: what is in flight has until drain_timeout. */
static void test_drain_answer(void **state)
{
	struct registry r;
	struct fake f[5];
	bool waiting[5] = { true, false, false, false, true };

	registry_init(&r);
	for (int i = 0; i < 5; i++) {
		add(&r, &f[i], i == 2 ? &tunnel_like : &client_like, false);
		f[i].waiting = waiting[i];
	}
	registry_drain_answer(&r);
	for (int i = 0; i < 5; i++) {
		assert_true(f[i].open);
		assert_int_equal(f[i].answered, waiting[i]);
	}
	registry_close_all(&r, "drain_timeout");
	assert_true(LIST_EMPTY(&r.entries));
}

/* A reload reaches every connection that takes a config, once. */
static void test_config_changed(void **state)
{
	struct registry r;
	struct fake f[3];

	registry_init(&r);
	add(&r, &f[0], &client_like, false);
	add(&r, &f[1], &tunnel_like, false);
	add(&r, &f[2], &client_like, true);
	registry_config_changed(&r);
	assert_int_equal(f[0].config_changes, 1);
	assert_int_equal(f[1].config_changes, 0);
	assert_int_equal(f[2].config_changes, 1);
	registry_close_all(&r, "shutdown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_close_all),
		cmocka_unit_test(test_drain_begins),
		cmocka_unit_test(test_drain_answer),
		cmocka_unit_test(test_config_changed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
