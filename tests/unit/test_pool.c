/* Unit tests for pool.c: idle connections are found again under their own
 * key, among many keys that share long prefixes or differ in one byte
 * anywhere (the hash reads keys a word at a time), most recently idled
 * first, and max_idle and pool_close_one hold; keys left without idle
 * connections are forgotten in bounded time; pool_close_oldest closes those
 * idle longest, whatever their key; one the peer sent bytes on in the same
 * loop pass as a request is closed before that request takes one; one put
 * as answered in HTTP/1.0 is said to be one when taken. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "pool.h"

#define KEYS 48

/* What pool_take() says of the connection it gives. */
static bool http10;

/* A conn on one end of a socketpair; the other end is closed. */
static struct conn *idle_conn(struct conn_loop *loop)
{
	int fds[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	close(fds[1]);
	return conn_new(loop, fds[0]);
}

/* Keys from 1 to 47 bytes, each a prefix of the next or one byte away. */
static void make_key(char *key, size_t size, unsigned i)
{
	static const char base[] = "http://upstream-host.example:8080|/ca/file.pem|1";

	snprintf(key, size, "%.*s", (int)(i % (sizeof(base) - 1)) + 1, base);
	if (i >= sizeof(base) - 1)
		key[i % (sizeof(base) - 1)] = 'X';
}

static void test_keys_found_again(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct conn *conns[KEYS * 2];
	char key[64];
	unsigned i;

	(void)state;
	for (i = 0; i < KEYS * 2; i++) {
		make_key(key, sizeof(key), i);
		conns[i] = idle_conn(loop);
		pool_put(pool, key, conns[i], false, 4, 0);
	}
	for (i = KEYS * 2; i-- > 0;) {
		make_key(key, sizeof(key), i);
		assert_ptr_equal(pool_take(pool, key, &http10), conns[i]);
		assert_null(pool_take(pool, key, &http10));
		conn_free(conns[i]);
	}
	pool_free(pool);
	conn_loop_free(loop);
}

/* A connection put as one whose last response came in HTTP/1.0 is said to be
 * one when taken, and only that one. */
static void test_http10_said_when_taken(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct conn *old = idle_conn(loop);
	struct conn *new = idle_conn(loop);

	(void)state;
	assert_true(pool_put(pool, "http://h:1", old, true, 4, 0));
	assert_true(pool_put(pool, "http://h:1", new, false, 4, 0));
	http10 = true;
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), new);
	assert_false(http10);
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), old);
	assert_true(http10);
	conn_free(old);
	conn_free(new);
	pool_free(pool);
	conn_loop_free(loop);
}

static void test_most_recent_first_and_max_idle(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct conn *a = idle_conn(loop);
	struct conn *b = idle_conn(loop);
	struct conn *c = idle_conn(loop);

	(void)state;
	assert_true(pool_put(pool, "http://h:1", a, false, 2, 0));
	assert_true(pool_put(pool, "http://h:1", b, false, 2, 0));
	/* over max_idle: closed at once, and said so */
	assert_false(pool_put(pool, "http://h:1", c, false, 2, 0));
	assert_int_equal(conn_loop_open(loop, CONN_ACCEPTED), 2);
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), b);
	conn_free(b);
	/* another trust policy for the same upstream makes room */
	assert_true(pool_close_one(pool, "http://h:1|/ca.pem|0"));
	assert_int_equal(conn_loop_open(loop, CONN_ACCEPTED), 0);
	assert_false(pool_close_one(pool, "http://h:1"));
	pool_free(pool);
	conn_loop_free(loop);
}

/* A forward proxy meets a new host with nearly every request: the keys
 * whose connections were taken and not given back are forgotten in time,
 * while keys with idle connections keep them. */
static void test_keys_without_idle_forgotten(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct conn *kept[3];
	char key[64];
	unsigned i, most = 0;

	(void)state;
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "http://kept-%u:80", i);
		kept[i] = idle_conn(loop);
		pool_put(pool, key, kept[i], false, 4, 0);
	}
	for (i = 0; i < 20000; i++) {
		struct conn *conn = idle_conn(loop);

		snprintf(key, sizeof(key), "http://host-%u.example:80", i);
		pool_put(pool, key, conn, false, 4, 0);
		assert_ptr_equal(pool_take(pool, key, &http10), conn);
		conn_free(conn);
		if (pool_key_count(pool) > most)
			most = pool_key_count(pool);
	}
	/* a sweep comes when the entries reach twice those the last one kept
	 * (the 3 kept keys) and 256 more */
	assert_in_range(most, 4, 2 * 3 + 256);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "http://kept-%u:80", i);
		assert_ptr_equal(pool_take(pool, key, &http10), kept[i]);
		conn_free(kept[i]);
	}
	pool_free(pool);
	conn_loop_free(loop);
}

/* Out of descriptors, the connections idle longest go first, across keys;
 * one taken and given back is idle anew. */
static void test_close_oldest_across_keys(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct conn *a = idle_conn(loop);
	struct conn *b = idle_conn(loop);
	struct conn *c = idle_conn(loop);
	struct conn *d = idle_conn(loop);

	(void)state;
	assert_int_equal(pool_close_oldest(pool, 4), 0);
	assert_true(pool_put(pool, "http://h:1", a, false, 4, 0));
	assert_true(pool_put(pool, "http://h:2", b, false, 4, 0));
	assert_true(pool_put(pool, "http://h:1", c, false, 4, 0));
	assert_true(pool_put(pool, "http://h:3", d, false, 4, 0));
	/* a, the oldest, taken and put back: now the most recent */
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), c);
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), a);
	assert_true(pool_put(pool, "http://h:1", a, false, 4, 0));
	assert_true(pool_put(pool, "http://h:1", c, false, 4, 0));
	/* idle order now, oldest first: b, d, a, c */
	assert_int_equal(pool_close_oldest(pool, 2), 2);
	assert_int_equal(conn_loop_open(loop, CONN_ACCEPTED), 2);
	assert_null(pool_take(pool, "http://h:2", &http10));
	assert_null(pool_take(pool, "http://h:3", &http10));
	assert_ptr_equal(pool_take(pool, "http://h:1", &http10), c);
	assert_true(pool_put(pool, "http://h:1", c, false, 4, 0));
	/* more asked for than there are: every one, and says how many */
	assert_int_equal(pool_close_oldest(pool, 16), 2);
	assert_int_equal(conn_loop_open(loop, CONN_ACCEPTED), 0);
	assert_null(pool_take(pool, "http://h:1", &http10));
	pool_free(pool);
	conn_loop_free(loop);
}

/* A client's request: its readiness takes a connection, as a request
 * does. */
struct taker {
	struct pool *pool;
	struct conn *got;
};

static void take_on_request(evutil_socket_t fd, short what, void *arg)
{
	struct taker *taker = arg;
	char byte;

	(void)what;
	assert_int_equal(read(fd, &byte, 1), 1);
	taker->got = pool_take(taker->pool, "http://h:1", &http10);
}

/* A response nobody asked for on the most recent idle connection, and a
 * request, readable in the same pass (the request first): the stray one is
 * closed before the request takes a connection, which gets the older clean
 * one. */
static void test_stray_bytes_never_taken(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct pool *pool = pool_new();
	struct taker taker = { pool, NULL };
	struct conn *clean, *stray;
	struct event *request;
	int clean_fds[2], stray_fds[2], client_fds[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, clean_fds), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, stray_fds), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, client_fds), 0);
	clean = conn_new(loop, clean_fds[0]);
	stray = conn_new(loop, stray_fds[0]);
	pool_put(pool, "http://h:1", clean, false, 4, 0);
	pool_put(pool, "http://h:1", stray, false, 4, 0);
	request = event_new(conn_loop_base(loop), client_fds[0], EV_READ, take_on_request, &taker);
	event_add(request, NULL);
	/* all registered with the kernel first; then the request's readiness
	 * comes before the stray bytes' */
	assert_int_equal(event_base_loop(conn_loop_base(loop), EVLOOP_NONBLOCK), 0);
	assert_int_equal(write(client_fds[1], "G", 1), 1);
	assert_int_equal(write(stray_fds[1], "HTTP/1.1 200 OK\r\n", 17), 17);
	assert_int_equal(event_base_loop(conn_loop_base(loop), EVLOOP_ONCE), 0);
	assert_ptr_equal(taker.got, clean);
	assert_null(pool_take(pool, "http://h:1", &http10)); /* the stray one is gone */
	event_free(request);
	conn_free(clean);
	close(clean_fds[1]);
	close(stray_fds[1]);
	close(client_fds[0]);
	close(client_fds[1]);
	pool_free(pool);
	conn_loop_free(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys_found_again),
		cmocka_unit_test(test_most_recent_first_and_max_idle),
		cmocka_unit_test(test_http10_said_when_taken),
		cmocka_unit_test(test_keys_without_idle_forgotten),
		cmocka_unit_test(test_close_oldest_across_keys),
		cmocka_unit_test(test_stray_bytes_never_taken),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
