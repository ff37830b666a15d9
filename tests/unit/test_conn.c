/* Unit tests for conn.c: reads, writes at the end of an event's handling,
 * input limits and resuming, a peer that stops reading, timeouts and the
 * deadline, EOF, freeing a conn inside its own callback, replaying a read,
 * connects, and how a TLS connection ends (close_notify). Each test drives a
 * real event loop over a socketpair or a loopback TCP socket. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "conn.h"

/* What the callbacks saw. */
struct seen {
	int reads;
	int writes;
	short events;
	size_t input_at_read;
	bool echo;	   /* write what was read back, from the read callback */
	bool free_in_read; /* free the conn inside its read callback */
	bool drain;	   /* take what was read, counting it in drained */
	size_t drained;
	struct conn *conn;
};

static void seen_read(struct conn *conn, void *arg)
{
	struct seen *s = arg;
	struct evbuffer *in = conn_input(conn);

	s->reads++;
	s->input_at_read = evbuffer_get_length(in);
	if (s->echo)
		evbuffer_add_buffer(conn_output(conn), in);
	if (s->drain) {
		s->drained += evbuffer_get_length(in);
		evbuffer_drain(in, evbuffer_get_length(in));
	}
	if (s->free_in_read) {
		conn_free(conn);
		s->conn = NULL;
	}
}

static void seen_write(struct conn *conn, void *arg)
{
	struct seen *s = arg;

	s->writes++;
}

static void seen_event(struct conn *conn, short what, void *arg)
{
	struct seen *s = arg;

	s->events |= what;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
}

/* Run loop passes until *flag is true (when flag is given) or ms pass. */
static void run_until(struct conn_loop *loop, const bool *flag, uint64_t ms)
{
	struct event *tick = event_new(conn_loop_base(loop), -1, EV_PERSIST, tick_cb, NULL);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 5000 };
	uint64_t end = now_ms() + ms;

	event_add(tick, &tv);
	while (now_ms() < end && (flag == NULL || !*flag)) {
		event_base_loop(conn_loop_base(loop), EVLOOP_ONCE);
		conn_loop_pass_end(loop);
	}
	event_free(tick);
}

/* A conn on one end of a socketpair; *peer gets the other end. */
static struct conn *pair(struct conn_loop *loop, struct seen *s, int *peer)
{
	int fds[2];
	struct conn *c;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	c = conn_new(loop, fds[0]);
	conn_setcb(c, seen_read, seen_write, seen_event, s);
	s->conn = c;
	*peer = fds[1];
	return c;
}

/* Read what the peer end has, waiting up to ms for len bytes. */
static size_t peer_read(int fd, char *buf, size_t len, uint64_t ms)
{
	size_t got = 0;
	uint64_t end = now_ms() + ms;

	fcntl(fd, F_SETFL, O_NONBLOCK);
	while (got < len && now_ms() < end) {
		ssize_t n = read(fd, buf + got, len - got);

		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			break;
		else
			usleep(1000);
	}
	return got;
}

/* Bytes from the peer reach the read callback; what the callback queues
 * goes back when that event's handling ends, without a write event. */
static void test_read_and_echo(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { .echo = true };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	char buf[16] = "";

	conn_read_enable(c, true);
	assert_int_equal(write(peer, "hello", 5), 5);
	run_until(loop, NULL, 30);
	assert_int_equal(s.reads, 1);
	assert_int_equal(s.input_at_read, 5);
	assert_int_equal(peer_read(peer, buf, 5, 500), 5);
	assert_memory_equal(buf, "hello", 5);
	/* everything went out: the write callback said so, nothing is queued */
	assert_true(s.writes >= 1);
	assert_int_equal(conn_output_length(c), 0);
	assert_int_equal(conn_input_length(c), 0);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* Output queued outside any callback goes out at the end of the pass. */
static void test_write_at_pass_end(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	char buf[8];

	evbuffer_add(conn_output(c), "abc", 3);
	assert_int_equal(peer_read(peer, buf, 3, 20), 0);
	conn_loop_pass_end(loop);
	assert_int_equal(peer_read(peer, buf, 3, 500), 3);
	assert_memory_equal(buf, "abc", 3);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* The peer's close is CONN_EOF with CONN_READING, after its last bytes. */
static void test_eof(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);

	conn_read_enable(c, true);
	assert_int_equal(write(peer, "xy", 2), 2);
	close(peer);
	run_until(loop, NULL, 50);
	assert_int_equal(s.reads, 1);
	assert_int_equal(s.input_at_read, 2);
	assert_true(s.events & CONN_EOF);
	assert_true(s.events & CONN_READING);
	conn_free(c);
	conn_loop_free(loop);
}

/* Reading stops at the input limit and resumes once bytes are taken. */
static void test_input_limit(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	char data[4096];

	memset(data, 'z', sizeof(data));
	conn_set_input_limit(c, 1000);
	conn_read_enable(c, true);
	assert_int_equal(write(peer, data, sizeof(data)), (ssize_t)sizeof(data));
	run_until(loop, NULL, 50);
	assert_int_equal(conn_input_length(c), 1000);
	/* the owner takes what it can use: reading goes on */
	evbuffer_drain(conn_input(c), 1000);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 50);
	assert_int_equal(conn_input_length(c), 1000);
	evbuffer_drain(conn_input(c), 1000);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 50);
	evbuffer_drain(conn_input(c), 1000);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 50);
	evbuffer_drain(conn_input(c), 1000);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 50);
	assert_int_equal(conn_input_length(c), 96);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* A peer that does not read: the output waits for the socket to be
 * writable, without the caller doing anything, and the write callback comes
 * once it drained below the low mark. */
static void test_blocked_write(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	size_t total = 4 * 1024 * 1024;
	char *data = malloc(total);
	char *back = malloc(total);

	memset(data, 'q', total);
	conn_set_output_low(c, 0);
	evbuffer_add(conn_output(c), data, total);
	conn_loop_pass_end(loop);
	assert_true(conn_output_length(c) > 0);
	s.writes = 0;
	/* read everything on the peer while the loop runs */
	{
		size_t got = 0;
		uint64_t end = now_ms() + 5000;

		fcntl(peer, F_SETFL, O_NONBLOCK);
		while (got < total && now_ms() < end) {
			ssize_t n = read(peer, back + got, total - got);

			if (n > 0)
				got += (size_t)n;
			run_until(loop, NULL, 1);
		}
		assert_int_equal(got, total);
	}
	run_until(loop, NULL, 20);
	assert_int_equal(conn_output_length(c), 0);
	assert_true(s.writes >= 1);
	assert_memory_equal(back, data, total);
	free(data);
	free(back);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* The deadline fires as CONN_TIMEOUT alone, whatever the traffic; the read
 * timeout as CONN_TIMEOUT | CONN_READING after a silence. */
static void test_deadline_and_read_timeout(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	struct seen t = { 0 };
	int peer, peer2;
	struct conn *c = pair(loop, &s, &peer);
	struct conn *d = pair(loop, &t, &peer2);
	uint64_t start = now_ms();

	conn_read_enable(c, true);
	conn_set_deadline(c, 80);
	conn_read_enable(d, true);
	conn_set_timeouts(d, 80, 0);
	/* traffic on both: the deadline does not move, the read timeout does */
	for (int i = 0; i < 6; i++) {
		assert_int_equal(write(peer, "a", 1), 1);
		assert_int_equal(write(peer2, "a", 1), 1);
		run_until(loop, NULL, 20);
	}
	assert_int_equal(s.events, CONN_TIMEOUT);
	assert_int_equal(t.events, 0);
	run_until(loop, NULL, 200);
	assert_int_equal(t.events, CONN_TIMEOUT | CONN_READING);
	assert_true(now_ms() - start >= 80);
	conn_free(c);
	conn_free(d);
	close(peer);
	close(peer2);
	conn_loop_free(loop);
}

/* A peer that stops reading while output waits: CONN_TIMEOUT | CONN_WRITING. */
static void test_write_timeout(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	size_t total = 4 * 1024 * 1024;
	char *data = calloc(1, total);

	conn_set_timeouts(c, 0, 60);
	evbuffer_add(conn_output(c), data, total);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 300);
	assert_int_equal(s.events, CONN_TIMEOUT | CONN_WRITING);
	free(data);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* Freeing a conn inside its own read callback is safe (ASan checks it). */
static void test_free_in_callback(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { .free_in_read = true, .echo = true };
	int peer;
	struct conn *c = pair(loop, &s, &peer);

	conn_read_enable(c, true);
	assert_int_equal(write(peer, "bye", 3), 3);
	run_until(loop, NULL, 30);
	assert_int_equal(s.reads, 1);
	assert_null(s.conn);
	close(peer);
	conn_loop_free(loop);
}

/* conn_read_again calls the read callback for bytes already held. */
static void test_read_again(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);

	conn_read_enable(c, true);
	assert_int_equal(write(peer, "pipelined", 9), 9);
	run_until(loop, NULL, 30);
	assert_int_equal(s.reads, 1);
	conn_read_again(c);
	assert_int_equal(s.reads, 1); /* never inside the call */
	conn_loop_pass_end(loop);
	assert_int_equal(s.reads, 2);
	assert_int_equal(s.input_at_read, 9);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* FIN goes out after the queued bytes. */
static void test_shutdown_after_output(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int peer;
	struct conn *c = pair(loop, &s, &peer);
	char buf[8];

	evbuffer_add(conn_output(c), "last", 4);
	conn_shutdown_write(c);
	conn_loop_pass_end(loop);
	assert_int_equal(peer_read(peer, buf, sizeof(buf), 500), 4);
	assert_int_equal(read(peer, buf, sizeof(buf)), 0);
	conn_free(c);
	close(peer);
	conn_loop_free(loop);
}

/* A connect to a listener reports CONN_CONNECTED; to a closed port, an
 * error that says the connection was refused. */
static void test_connect(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	struct seen r = { 0 };
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct conn *c;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&addr, &len), 0);
	c = conn_connect(loop, (struct sockaddr *)&addr, sizeof(addr), NULL);
	assert_non_null(c);
	conn_setcb(c, seen_read, seen_write, seen_event, &s);
	run_until(loop, NULL, 100);
	assert_int_equal(s.events, CONN_CONNECTED);
	conn_free(c);

	close(lfd); /* nothing listens there now */
	c = conn_connect(loop, (struct sockaddr *)&addr, sizeof(addr), NULL);
	if (c != NULL) {
		conn_setcb(c, seen_read, seen_write, seen_event, &r);
		run_until(loop, NULL, 100);
		assert_int_equal(r.events, CONN_ERROR);
		assert_int_equal(conn_error(c), ECONNREFUSED);
		conn_free(c);
	} else {
		assert_int_equal(errno, ECONNREFUSED);
	}
	conn_loop_free(loop);
}

/* A loopback TCP pair: returns the client end, *accepted the server end;
 * with listener, the listening socket stays open there (and *addr its
 * address), else it is closed. */
static int tcp_pair(int *accepted, int *listener, struct sockaddr_in *addr_out)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	int cfd = socket(AF_INET, SOCK_STREAM, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&addr, &len), 0);
	assert_int_equal(connect(cfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	*accepted = accept(lfd, NULL, NULL);
	if (listener != NULL) {
		*listener = lfd;
		*addr_out = addr;
	} else {
		close(lfd);
	}
	return cfd;
}

/* The peer sends len bytes and resets at once: the bytes come up, then the
 * reset as CONN_ERROR, whether or not the data filled a read exactly (the
 * kernel reports a reset only once). */
static short reset_after(size_t len, size_t *got)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	struct linger hard = { .l_onoff = 1, .l_linger = 0 };
	int afd;
	int peer = tcp_pair(&afd, NULL, NULL);
	char *data = calloc(1, len);
	struct conn *c = conn_new(loop, afd);

	conn_setcb(c, seen_read, NULL, seen_event, &s);
	assert_int_equal(write(peer, data, len), (ssize_t)len);
	setsockopt(peer, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
	close(peer);
	usleep(20000); /* data and reset are both queued before the first read */
	conn_read_enable(c, true);
	run_until(loop, NULL, 100);
	*got = s.input_at_read;
	conn_free(c);
	conn_loop_free(loop);
	free(data);
	return s.events;
}

static void test_reset_after_data(void **state)
{
	struct evbuffer *b = evbuffer_new();
	struct evbuffer_iovec v;
	size_t first;
	size_t got;

	/* the size of the first read into an empty buffer */
	evbuffer_reserve_space(b, 4096 - 64, &v, 1);
	first = v.iov_len;
	evbuffer_free(b);
	assert_int_equal(reset_after(first - 100, &got), CONN_ERROR | CONN_READING);
	assert_int_equal(got, first - 100);
	assert_int_equal(reset_after(first, &got), CONN_ERROR | CONN_READING);
	assert_int_equal(got, first);
}

/* A conn at its input limit sees no close behind the bytes it has not
 * read until asked: conn_notice_hangup() finds the peer's FIN and reports
 * CONN_EOF when the pass ends. Asked again before then, it still says the
 * peer is gone: a request released in the same pass is not sent for a
 * client whose close was already found. */
static void test_notice_hangup_twice_in_a_pass(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	int afd;
	int peer = tcp_pair(&afd, NULL, NULL);
	struct conn *c = conn_new(loop, afd);
	char data[4096];

	(void)state;
	memset(data, 'z', sizeof(data));
	conn_setcb(c, seen_read, NULL, seen_event, &s);
	conn_set_input_limit(c, 1000);
	conn_read_enable(c, true);
	assert_int_equal(write(peer, data, sizeof(data)), (ssize_t)sizeof(data));
	close(peer);
	usleep(20000); /* the FIN is in behind the bytes */
	run_until(loop, NULL, 50);
	assert_int_equal(conn_input_length(c), 1000);
	assert_int_equal(s.events & CONN_EOF, 0);
	assert_true(conn_notice_hangup(c));
	assert_true(conn_notice_hangup(c));
	assert_int_equal(s.events & CONN_EOF, 0);
	conn_loop_pass_end(loop);
	assert_true(s.events & CONN_EOF);
	conn_free(c);
	conn_loop_free(loop);
}

/* Output and a FIN queued while connecting go out once connected. */
static void test_output_queued_while_connecting(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen s = { 0 };
	struct sockaddr_in addr;
	int afd, lfd;
	int unused = tcp_pair(&afd, &lfd, &addr);
	struct conn *c;
	char buf[16];
	int srv;

	close(unused);
	close(afd);
	c = conn_connect(loop, (struct sockaddr *)&addr, sizeof(addr), NULL);
	assert_non_null(c);
	conn_setcb(c, NULL, NULL, seen_event, &s);
	evbuffer_add(conn_output(c), "hello", 5);
	conn_shutdown_write(c);
	conn_loop_pass_end(loop); /* some other event's handling ends meanwhile */
	run_until(loop, NULL, 100);
	assert_int_equal(s.events, CONN_CONNECTED);
	srv = accept(lfd, NULL, NULL);
	assert_int_equal(peer_read(srv, buf, 5, 500), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(read(srv, buf, sizeof(buf)), 0);
	close(srv);
	close(lfd);
	conn_free(c);
	conn_loop_free(loop);
}

/* A self-signed certificate and its key for the TLS server side. */
static SSL_CTX *tls_server_ctx(void)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *name = X509_get_subject_name(x);

	assert_non_null(ctx);
	assert_non_null(key);
	X509_set_version(x, X509_VERSION_3);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"test", -1, -1,
				   0);
	X509_set_issuer_name(x, name);
	X509_set_pubkey(x, key);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
	X509_free(x);
	EVP_PKEY_free(key);
	return ctx;
}

/* A TLS client conn and the TLS server conn it connected to, both
 * handshaken in loop. The client treats a close without close_notify as the
 * error it is, so that a test sees which one came. */
static void tls_pair(struct conn_loop *loop, struct seen *cs, struct seen *ss, struct conn **client,
		     struct conn **server)
{
	SSL_CTX *client_ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX *server_ctx = tls_server_ctx();
	SSL *client_ssl = SSL_new(client_ctx);
	struct sockaddr_in addr;
	int afd, lfd;
	int unused = tcp_pair(&afd, &lfd, &addr);

	close(unused);
	close(afd);
	*client = conn_connect(loop, (struct sockaddr *)&addr, sizeof(addr), client_ssl);
	assert_non_null(*client);
	SSL_clear_options(client_ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
	conn_setcb(*client, seen_read, NULL, seen_event, cs);
	cs->conn = *client;
	*server = conn_new(loop, accept(lfd, NULL, NULL));
	close(lfd);
	conn_setcb(*server, seen_read, NULL, seen_event, ss);
	ss->conn = *server;
	assert_int_equal(conn_start_tls_server(*server, SSL_new(server_ctx)), 0);
	run_until(loop, NULL, 200);
	assert_int_equal(cs->events, CONN_CONNECTED);
	assert_int_equal(ss->events, CONN_CONNECTED);
	cs->events = ss->events = 0;
	SSL_CTX_free(client_ctx);
	SSL_CTX_free(server_ctx);
}

/* TLS: a shutdown sends close_notify before the FIN, so the peer sees a
 * clean end of what came before it; a peer that closes without one is an
 * EOF, not an error. */
static void test_tls_shutdown(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen cs = { 0 }, ss = { 0 };
	struct conn *client, *server;

	tls_pair(loop, &cs, &ss, &client, &server);
	conn_read_enable(client, true);
	conn_read_enable(server, true);
	evbuffer_add(conn_output(server), "last", 4);
	conn_shutdown_write(server);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 200);
	assert_int_equal(cs.input_at_read, 4);
	assert_int_equal(cs.events, CONN_EOF | CONN_READING);
	assert_true(SSL_get_shutdown(conn_ssl(client)) & SSL_RECEIVED_SHUTDOWN);
	/* the server still reads after its close_notify */
	evbuffer_add(conn_output(client), "more", 4);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 200);
	assert_int_equal(ss.input_at_read, 4);
	assert_int_equal(ss.events, 0);
	/* the client goes without a close_notify of its own */
	conn_free(client);
	run_until(loop, NULL, 200);
	assert_int_equal(ss.events, CONN_EOF | CONN_READING);
	conn_free(server);
	conn_loop_free(loop);
}

/* A filter BIO in front of the socket that answers "try again" to the first
 * writes it is given: a kernel buffer that is full just when the close_notify
 * is to go out. */
static int refused_writes;

static int refusing_write(BIO *b, const char *data, int len)
{
	BIO_clear_retry_flags(b);
	if (refused_writes > 0) {
		refused_writes--;
		BIO_set_retry_write(b);
		return -1;
	}
	return BIO_write(BIO_next(b), data, len);
}

static long refusing_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	return BIO_ctrl(BIO_next(b), cmd, num, ptr);
}

/* A close_notify that the socket cannot take yet waits for it to be
 * writable, and the FIN waits for the close_notify: the peer still sees a
 * clean end, not a cut. */
static void test_tls_close_notify_blocked(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen cs = { 0 }, ss = { 0 };
	struct conn *client, *server;
	BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_FILTER, "refusing");
	BIO *filter = BIO_new(method), *socket_bio;

	tls_pair(loop, &cs, &ss, &client, &server);
	conn_read_enable(client, true);
	conn_read_enable(server, true);
	/* the server's writes go through the filter from now on */
	assert_non_null(filter);
	BIO_meth_set_write(method, refusing_write);
	BIO_meth_set_ctrl(method, refusing_ctrl);
	socket_bio = SSL_get_wbio(conn_ssl(server));
	BIO_up_ref(socket_bio);
	BIO_set_init(filter, 1);
	BIO_push(filter, socket_bio);
	SSL_set0_wbio(conn_ssl(server), filter);
	evbuffer_add(conn_output(server), "last", 4);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 100);
	assert_int_equal(cs.input_at_read, 4);
	refused_writes = 2;
	conn_shutdown_write(server);
	conn_loop_pass_end(loop);
	run_until(loop, NULL, 200);
	assert_int_equal(refused_writes, 0);
	assert_int_equal(cs.events, CONN_EOF | CONN_READING);
	assert_true(SSL_get_shutdown(conn_ssl(client)) & SSL_RECEIVED_SHUTDOWN);
	assert_int_equal(ss.events, 0);
	conn_free(client);
	conn_free(server);
	conn_loop_free(loop);
	BIO_meth_free(method);
}

/* An error another OpenSSL call left in the thread's queue (a failed
 * certificate load, say) must not be taken for the connection's own: a write
 * that fills the kernel's buffer waits for room rather than failing, and
 * everything arrives once the peer reads. */
static void test_tls_stale_error_queue(void **state)
{
	struct conn_loop *loop = conn_loop_new();
	struct seen cs = { 0 }, ss = { .drain = true };
	struct conn *client, *server;
	static char block[1 << 20];
	const size_t total = 8 * sizeof(block);

	tls_pair(loop, &cs, &ss, &client, &server);
	conn_read_enable(client, true);
	for (size_t i = 0; i < total / sizeof(block); i++)
		evbuffer_add(conn_output(client), block, sizeof(block));
	ERR_raise(ERR_LIB_X509, X509_R_CERT_ALREADY_IN_HASH_TABLE);
	conn_loop_pass_end(loop);
	assert_true(evbuffer_get_length(conn_output(client)) > 0);
	run_until(loop, NULL, 50);
	assert_int_equal(cs.events, 0);
	conn_read_enable(server, true);
	run_until(loop, NULL, 2000);
	assert_int_equal(ss.drained, total);
	assert_int_equal(cs.events, 0);
	assert_int_equal(ss.events, 0);
	ERR_clear_error();
	conn_free(client);
	conn_free(server);
	conn_loop_free(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_and_echo),
		cmocka_unit_test(test_write_at_pass_end),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_input_limit),
		cmocka_unit_test(test_blocked_write),
		cmocka_unit_test(test_deadline_and_read_timeout),
		cmocka_unit_test(test_write_timeout),
		cmocka_unit_test(test_free_in_callback),
		cmocka_unit_test(test_read_again),
		cmocka_unit_test(test_shutdown_after_output),
		cmocka_unit_test(test_connect),
		cmocka_unit_test(test_reset_after_data),
		cmocka_unit_test(test_notice_hangup_twice_in_a_pass),
		cmocka_unit_test(test_output_queued_while_connecting),
		cmocka_unit_test(test_tls_shutdown),
		cmocka_unit_test(test_tls_close_notify_blocked),
		cmocka_unit_test(test_tls_stale_error_queue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
