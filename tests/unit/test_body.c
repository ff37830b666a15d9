/* Unit tests for body.c: moving Content-Length, chunked and close-delimited
 * bodies between evbuffers, and leaving the next message's bytes behind. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "body.h"

/* Feed input to a relay in pieces of step bytes; return what came out. */
static char *relay_in_steps(enum body_mode mode, uint64_t length, const char *input, size_t step,
			    int *done, int *failed, size_t *left)
{
	struct body_relay relay;
	struct evbuffer *src = evbuffer_new();
	struct evbuffer *dst = evbuffer_new();
	size_t len = strlen(input);
	size_t off;
	char *out;
	size_t out_len;

	body_relay_init(&relay, mode, length, 1024);
	*failed = 0;
	for (off = 0; off < len; off += step) {
		enum http1_error error;
		size_t n = len - off < step ? len - off : step;

		evbuffer_add(src, input + off, n);
		if (body_relay_move(&relay, src, dst, &error) < 0) {
			*failed = 1;
			break;
		}
	}
	*done = relay.done;
	*left = evbuffer_get_length(src);
	out_len = evbuffer_get_length(dst);
	out = calloc(1, out_len + 1);
	evbuffer_remove(dst, out, out_len);
	evbuffer_free(src);
	evbuffer_free(dst);
	return out;
}

static void test_length_body_stops_at_length(void **state)
{
	int done, failed;
	size_t left, step;

	for (step = 1; step <= 20; step++) {
		char *out = relay_in_steps(BODY_MODE_LENGTH, 5, "helloGET / HTTP/1.1\r\n", step,
					   &done, &failed, &left);

		assert_string_equal(out, "hello");
		assert_true(done);
		assert_false(failed);
		/* the next request's bytes stay in the source */
		assert_int_equal(left, strlen("helloGET / HTTP/1.1\r\n") - 5);
		free(out);
	}
}

static void test_chunked_pass_and_decode(void **state)
{
	const char *body = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: x\r\n\r\nNEXT";
	int done, failed;
	size_t left, step;

	for (step = 1; step <= strlen(body); step++) {
		char *raw = relay_in_steps(BODY_MODE_CHUNKED, 0, body, step, &done, &failed, &left);
		char *decoded;

		assert_false(failed);
		assert_true(done);
		assert_int_equal(left, 4);
		assert_int_equal(strlen(raw), strlen(body) - 4);
		assert_memory_equal(raw, body, strlen(body) - 4);
		free(raw);
		decoded = relay_in_steps(BODY_MODE_CHUNKED_DECODE, 0, body, step, &done, &failed,
					 &left);
		assert_string_equal(decoded, "hello world");
		assert_true(done);
		free(decoded);
	}
}

/* A trailer section is held until it ends, then goes on without the fields
 * that must not (fixed ones, and those the head's Connection names),
 * however it arrives; nothing of it before its end. */
static void test_chunked_trailer_filtered(void **state)
{
	static const char raw_head[] = "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\n\r\n";
	static const char body[] = "5\r\nhello\r\n0\r\nContent-Length: 9\r\nX-Sum: 1\r\n"
				   "x-hop: s\r\nTrailer: a\r\nX-Other: 2\r\nHost: h\r\n\r\nNEXT";
	static const char want[] = "5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n";
	static struct http1_head head;
	enum http1_error error;
	size_t len = strlen(body);
	size_t step;

	assert_int_equal(http1_parse_response_head(raw_head, strlen(raw_head), 4096, &head, &error),
			 HTTP1_PARSE_DONE);
	for (step = 1; step <= len; step++) {
		struct body_relay relay;
		struct evbuffer *src = evbuffer_new();
		struct evbuffer *dst = evbuffer_new();
		size_t off;

		body_relay_init(&relay, BODY_MODE_CHUNKED, 0, 1024);
		body_relay_trailer_named(&relay, &head);
		for (off = 0; off < len; off += step) {
			size_t n = len - off < step ? len - off : step;

			evbuffer_add(src, body + off, n);
			assert_int_equal(body_relay_move(&relay, src, dst, &error), 0);
			/* nothing of the trailer section before its end */
			if (!relay.done)
				assert_true(evbuffer_get_length(dst) <=
					    strlen("5\r\nhello\r\n0\r\n"));
		}
		assert_true(relay.done);
		assert_int_equal(evbuffer_get_length(src), 4);
		assert_int_equal(evbuffer_get_length(dst), strlen(want));
		assert_memory_equal(evbuffer_pullup(dst, -1), want, strlen(want));
		body_relay_release(&relay);
		evbuffer_free(src);
		evbuffer_free(dst);
	}
}

static void test_chunked_bad_framing_fails(void **state)
{
	static const char *const bad[] = {
		"zz\r\nhello\r\n0\r\n\r\n",
		"5\r\nhelloXX0\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n",
		"ffffffffffffffffff\r\n",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int done, failed;
		size_t left;
		char *out = relay_in_steps(BODY_MODE_CHUNKED, 0, bad[i], 3, &done, &failed, &left);

		if (!failed)
			fail_msg("accepted %s", bad[i]);
		free(out);
	}
}

static void test_until_close_takes_everything(void **state)
{
	int done, failed;
	size_t left;
	char *out = relay_in_steps(BODY_MODE_UNTIL_CLOSE, 0, "all of it, however long", 4, &done,
				   &failed, &left);

	assert_string_equal(out, "all of it, however long");
	assert_false(done); /* only the close ends it */
	assert_int_equal(left, 0);
	free(out);
}

static void test_discard_counts_payload(void **state)
{
	struct body_relay relay;
	struct evbuffer *src = evbuffer_new();
	enum http1_error error;

	body_relay_init(&relay, BODY_MODE_LENGTH, 10, 0);
	evbuffer_add(src, "0123456789extra", 15);
	assert_int_equal(body_relay_move(&relay, src, NULL, &error), 0);
	assert_true(relay.done);
	assert_int_equal(relay.payload_bytes, 10);
	assert_int_equal(evbuffer_get_length(src), 5);
	evbuffer_free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_length_body_stops_at_length),
		cmocka_unit_test(test_chunked_pass_and_decode),
		cmocka_unit_test(test_chunked_trailer_filtered),
		cmocka_unit_test(test_chunked_bad_framing_fails),
		cmocka_unit_test(test_until_close_takes_everything),
		cmocka_unit_test(test_discard_counts_payload),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
