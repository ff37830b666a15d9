/* Unit tests for exchange.c, exchange_request.c and exchange_response.c: the
 * exchange state machine on real sockets and the real event loop, without
 * listeners or client.c. The test plays the client on one end of a
 * socketpair (the exchange's owner holds the other end) and the upstream on
 * a loopback listener that answers from a per-test script. Each case checks
 * what the client received, how the exchange ended, and what the upstream
 * saw: a retry after a 503, the last 503 passed on unchanged, a reset POST
 * never sent twice, connect failures retried for any method, a client gone
 * during the backoff, broken and reset response bodies, Retry-After past the
 * deadline, a stale pooled connection, and a pooled connection offered to
 * a waiting request whose deadline passed first. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>

#include "access_log.h"
#include "config.h"
#include "conn.h"
#include "exchange.h"
#include "exchange_private.h"
#include "http1.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "proxy.h"
#include "upstreams.h"
#include "retry_budget.h"
#include "tls.h"
#include "upstream.h"

/* What the upstream does with the request it has just read. */
enum up_action {
	UP_ANSWER,	 /* send the reply; the connection stays open */
	UP_ANSWER_CLOSE, /* send the reply, then close (FIN) */
	UP_ANSWER_RESET, /* send the reply, then reset (RST) a moment later */
	UP_RESET,	 /* reset at once, without a reply */
	UP_HOLD,	 /* send nothing: the test answers (up_send) when it chooses */
};

/* One step of the upstream's script: the nth request gets the nth step, and
 * every request past the end gets the last one. */
struct up_step {
	enum up_action action;
	const char *reply;
};

#define UP_MAX_CONNS 16

struct upstream;

/* A connection the upstream accepted. */
struct up_conn {
	struct upstream *up;
	int fd; /* -1 once closed */
	struct event *read_ev;
	struct event *reset_timer; /* UP_ANSWER_RESET */
	char buf[8192];		   /* request bytes not yet answered */
	size_t len;
};

/* The test's upstream: a loopback listener served from the test's loop. */
struct upstream {
	int lfd;
	uint16_t port;
	struct event *accept_ev;
	const struct up_step *script;
	size_t steps;
	unsigned close_on_accept; /* the first connections are closed at once, unread */
	bool reset_on_accept;	  /* ... with a reset (RST) instead of a FIN */
	unsigned connections;	  /* accepted */
	unsigned requests;	  /* read whole (head and body) */
	char last_request[2048];  /* the last request's head as received */
	struct up_conn *conns[UP_MAX_CONNS];
};

/* Everything one case needs: the hand-built proxy, the owner (the client
 * connection's side of the exchange), the test's end of the client
 * socketpair, the upstream, and what the owner's callbacks saw. */
struct harness {
	struct proxy proxy;
	struct config *config;
	struct exchange_owner owner;
	int client_fd;	      /* the test plays the client here */
	uint16_t target_port; /* where requests go: the upstream's port unless changed */
	struct exchange *ex;  /* NULL before exchange_new and after ended() */
	struct upstream up;
	unsigned ended_count;
	enum exchange_end end;
	char trace[256]; /* the owner's callbacks in order: "watch:on ended:close" */
	/* owner_ended keeps the loop pass busy until then, as a pass with much
	 * to do would: timers due meanwhile wait for the next pass */
	uint64_t ended_busy_until_ms;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void trace_add(struct harness *h, const char *word)
{
	size_t len = strlen(h->trace);

	snprintf(h->trace + len, sizeof(h->trace) - len, "%s%s", len > 0 ? " " : "", word);
}

/* The upstream side. */

/* Close an accepted connection, with a reset (SO_LINGER 0) when asked. */
static void up_conn_close(struct up_conn *c, bool reset)
{
	if (c->fd < 0)
		return;
	if (reset) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	event_free(c->read_ev);
	c->read_ev = NULL;
	if (c->reset_timer != NULL) {
		event_free(c->reset_timer);
		c->reset_timer = NULL;
	}
	close(c->fd);
	c->fd = -1;
}

static void up_reset_cb(evutil_socket_t fd, short what, void *arg)
{
	up_conn_close(arg, true);
}

/* Write a whole (small) reply. */
static void up_send(struct up_conn *c, const char *reply)
{
	size_t len = strlen(reply);

	assert_int_equal(write(c->fd, reply, len), (ssize_t)len);
}

/* Act on the script's step for the request just read. Returns false when the
 * connection is closed or stops reading. */
static bool up_answer(struct up_conn *c)
{
	struct upstream *up = c->up;
	size_t i = up->requests <= up->steps ? up->requests - 1 : up->steps - 1;
	const struct up_step *step = &up->script[i];
	struct timeval pause = { .tv_sec = 0, .tv_usec = 50 * 1000 };

	switch (step->action) {
	case UP_ANSWER:
		up_send(c, step->reply);
		return true;
	case UP_ANSWER_CLOSE:
		up_send(c, step->reply);
		up_conn_close(c, false);
		return false;
	case UP_ANSWER_RESET:
		/* the pause lets the proxy read the reply before the reset */
		up_send(c, step->reply);
		event_del(c->read_ev);
		c->reset_timer = evtimer_new(event_get_base(c->read_ev), up_reset_cb, c);
		evtimer_add(c->reset_timer, &pause);
		return false;
	case UP_RESET:
		up_conn_close(c, true);
		return false;
	case UP_HOLD:
		return true;
	}
	return false;
}

/* Take every whole request (head and Content-Length body) in the buffer. */
static void up_take_requests(struct up_conn *c)
{
	static struct http1_head head;
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };
	struct upstream *up = c->up;

	for (;;) {
		struct http1_framing framing;
		enum http1_error error = HTTP1_ERR_NONE;
		size_t whole;

		switch (http1_parse_request_head(c->buf, c->len, &limits, &head, &error)) {
		case HTTP1_PARSE_MORE:
			return;
		case HTTP1_PARSE_ERROR:
			fail_msg("the upstream got a malformed request: %s",
				 http1_error_text(error));
			return;
		case HTTP1_PARSE_DONE:
			break;
		}
		assert_int_equal(http1_request_framing(&head, &framing, &error), 0);
		whole = head.head_len +
			(framing.body == HTTP1_BODY_LENGTH ? (size_t)framing.content_length : 0);
		if (c->len < whole)
			return;
		up->requests++;
		snprintf(up->last_request, sizeof(up->last_request), "%.*s", (int)head.head_len,
			 c->buf);
		memmove(c->buf, c->buf + whole, c->len - whole);
		c->len -= whole;
		if (!up_answer(c))
			return;
	}
}

/* Bytes, or the proxy's close, on an accepted connection. */
static void up_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct up_conn *c = arg;
	ssize_t n = read(fd, c->buf + c->len, sizeof(c->buf) - c->len);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		up_conn_close(c, false);
		return;
	}
	c->len += (size_t)n;
	up_take_requests(c);
}

/* Accept one connection waiting on the listener. */
static void up_accept(struct upstream *up, struct event_base *base)
{
	int fd = accept(up->lfd, NULL, NULL);
	struct up_conn *c;

	if (fd < 0)
		return;
	assert_true(up->connections < UP_MAX_CONNS);
	c = calloc(1, sizeof(*c));
	c->up = up;
	c->fd = fd;
	up->conns[up->connections++] = c;
	evutil_make_socket_nonblocking(fd);
	c->read_ev = event_new(base, fd, EV_READ | EV_PERSIST, up_read_cb, c);
	event_add(c->read_ev, NULL);
	if (up->connections <= up->close_on_accept)
		up_conn_close(c, up->reset_on_accept);
}

static void up_accept_cb(evutil_socket_t fd, short what, void *arg)
{
	struct harness *h = arg;

	up_accept(&h->up, h->proxy.base);
}

/* A loopback listener on a free port. */
static int listen_loopback(uint16_t *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	*port = ntohs(addr.sin_port);
	return fd;
}

static void upstream_start(struct harness *h, const struct up_step *script, size_t steps)
{
	struct upstream *up = &h->up;

	up->script = script;
	up->steps = steps;
	up->lfd = listen_loopback(&up->port);
	evutil_make_socket_nonblocking(up->lfd);
	up->accept_ev = event_new(h->proxy.base, up->lfd, EV_READ | EV_PERSIST, up_accept_cb, h);
	event_add(up->accept_ev, NULL);
	h->target_port = up->port;
}

static void upstream_stop(struct upstream *up)
{
	for (unsigned i = 0; i < up->connections; i++) {
		up_conn_close(up->conns[i], false);
		free(up->conns[i]);
	}
	event_free(up->accept_ev);
	close(up->lfd);
}

/* The owner's side: what client.c would do, recorded. */

static void owner_watch_body(void *arg, bool on)
{
	trace_add(arg, on ? "watch:on" : "watch:off");
}

static bool owner_closing(void *arg)
{
	return false;
}

static void owner_ended(void *arg, enum exchange_end end, struct conn *tunnel,
			struct access_record *tunnel_log)
{
	static const char *const names[] = {
		[EXCHANGE_END_KEEP_ALIVE] = "ended:keep-alive",
		[EXCHANGE_END_CLOSE] = "ended:close",
		[EXCHANGE_END_BROKEN] = "ended:broken",
		[EXCHANGE_END_RESET] = "ended:reset",
		[EXCHANGE_END_TUNNEL] = "ended:tunnel",
		[EXCHANGE_END_CLIENT_GONE] = "ended:client-gone",
	};
	struct harness *h = arg;

	/* the exchange frees itself after this: forget it */
	h->ex = NULL;
	h->ended_count++;
	h->end = end;
	access_record_free(tunnel_log);
	trace_add(h, names[end]);
	while (now_ms() < h->ended_busy_until_ms) {
		struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000 * 1000 };

		nanosleep(&ms, NULL);
	}
}

static void owner_read_cb(struct conn *conn, void *arg)
{
	struct harness *h = arg;

	/* before the exchange starts, the head waits in the input */
	if (h->ex != NULL)
		exchange_client_readable(h->ex);
}

static void owner_write_cb(struct conn *conn, void *arg)
{
	struct harness *h = arg;

	if (h->ex != NULL)
		exchange_client_drained(h->ex);
}

static void owner_event_cb(struct conn *conn, short what, void *arg)
{
	trace_add(arg, "client-event");
}

/* The proxy, the owner and its socketpair, under config text yaml. */
static void harness_init(struct harness *h, const char *yaml)
{
	int fds[2];

	memset(h, 0, sizeof(*h));
	h->config = config_load_text(yaml, strlen(yaml), "test.yaml", stderr);
	assert_non_null(h->config);
	log_configure(h->config->log_level, h->config->log_format);
	h->proxy.loop = conn_loop_new();
	h->proxy.base = conn_loop_base(h->proxy.loop);
	/* no nameservers: only IP literals are used */
	h->proxy.dns = evdns_base_new(h->proxy.base, 0);
	h->proxy.config = h->config;
	h->proxy.tls = tls_store_new();
	h->proxy.pool = pool_new();
	h->proxy.upstreams = upstreams_new(&h->proxy);
	h->proxy.metrics = metrics_new();
	h->proxy.budgets = retry_budget_book_new();
	/* as the proxy does when a config goes live */
	metrics_attach(h->proxy.metrics, h->config);
	retry_budget_book_attach(h->proxy.budgets, h->config);
	retry_rng_seed_with(&h->proxy.rng, 42);
	registry_init(&h->proxy.registry);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	h->client_fd = fds[1];
	evutil_make_socket_nonblocking(h->client_fd);
	h->owner.conn = conn_new(h->proxy.loop, fds[0]);
	h->owner.config = h->config;
	h->owner.upstream = NULL; /* a forward proxy: requests name their upstream */
	h->owner.peer = "test-client";
	h->owner.watch_body = owner_watch_body;
	h->owner.closing = owner_closing;
	h->owner.ended = owner_ended;
	h->owner.arg = h;
	conn_setcb(h->owner.conn, owner_read_cb, owner_write_cb, owner_event_cb, h);
	conn_read_enable(h->owner.conn, true);
}

/* Free everything, the exchange's spares included, so that LeakSanitizer
 * has nothing to say. */
static void harness_free(struct harness *h)
{
	if (h->ex != NULL)
		exchange_abort(h->ex, "test over");
	conn_free(h->owner.conn);
	close(h->client_fd);
	if (h->up.accept_ev != NULL)
		upstream_stop(&h->up);
	exchange_free_spares(&h->proxy);
	pool_free(h->proxy.pool);
	upstreams_free(h->proxy.upstreams);
	retry_budget_book_detach(h->proxy.budgets, h->config);
	retry_budget_book_free(h->proxy.budgets);
	metrics_free(h->proxy.metrics);
	tls_store_free(h->proxy.tls);
	evdns_base_free(h->proxy.dns, 0);
	config_release(h->config);
	conn_loop_free(h->proxy.loop);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
}

/* Run loop passes until done(h) holds (when done is given) or ms pass. */
static void run_until(struct harness *h, bool (*done)(struct harness *), uint64_t ms)
{
	struct event *tick = event_new(h->proxy.base, -1, EV_PERSIST, tick_cb, NULL);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 5000 };
	uint64_t end = now_ms() + ms;

	event_add(tick, &tv);
	while (now_ms() < end && (done == NULL || !done(h))) {
		event_base_loop(h->proxy.base, EVLOOP_ONCE);
		conn_loop_pass_end(h->proxy.loop);
	}
	event_free(tick);
}

/* Conditions for run_until(). */
static bool ended(struct harness *h)
{
	return h->ended_count > 0;
}

/* Has conn's input a whole request head? */
static bool conn_head_arrived(struct conn *conn)
{
	return evbuffer_search(conn_input(conn), "\r\n\r\n", 4, NULL).pos >= 0;
}

/* Has the owner's input a whole request head? */
static bool head_arrived(struct harness *h)
{
	return conn_head_arrived(h->owner.conn);
}

static bool in_backoff(struct harness *h)
{
	return h->ex != NULL && h->ex->state == EXCHANGE_BACKOFF;
}

/* Run until the exchange ends, and say it did. */
static void run_until_ended(struct harness *h)
{
	run_until(h, ended, 5000);
	assert_int_equal(h->ended_count, 1);
}

/* The client writes a request for http://127.0.0.1:<target_port>path with
 * the field lines fields (each ending in CRLF), and a Content-Length body
 * when body is not NULL. */
static void client_send_fields_on(struct harness *h, int fd, const char *method, const char *path,
				  const char *fields, const char *body)
{
	char req[1024];
	char length[64] = "";
	int n;

	if (body != NULL)
		snprintf(length, sizeof(length), "Content-Length: %zu\r\n", strlen(body));
	n = snprintf(req, sizeof(req),
		     "%s http://127.0.0.1:%u%s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%s%s\r\n%s",
		     method, h->target_port, path, h->target_port, fields, length,
		     body != NULL ? body : "");
	assert_true(n > 0 && (size_t)n < sizeof(req));
	assert_int_equal(write(fd, req, (size_t)n), n);
}

static void client_send_fields(struct harness *h, const char *method, const char *path,
			       const char *fields, const char *body)
{
	client_send_fields_on(h, h->client_fd, method, path, fields, body);
}

static void client_send(struct harness *h, const char *method, const char *path, const char *body)
{
	client_send_fields(h, method, path, "", body);
}

/* Wait for the request head in owner's input and start its exchange (*ex),
 * as client.c's client_read_head does. */
static void exchange_start_for(struct harness *h, struct exchange_owner *owner,
			       struct exchange **ex)
{
	static struct http1_head head;
	struct evbuffer *in = conn_input(owner->conn);
	const struct limits *limits = &h->config->limits;
	struct http1_limits parse_limits = { .max_head_bytes = limits->max_header_bytes,
					     .max_target_bytes = limits->max_uri_bytes };
	struct http1_framing framing;
	enum http1_error error = HTTP1_ERR_NONE;
	size_t len;
	size_t want;
	const char *data;
	int status = 0;
	char reason[256] = "";

	for (uint64_t end = now_ms() + 2000; !conn_head_arrived(owner->conn) && now_ms() < end;)
		run_until(h, NULL, 5);
	len = evbuffer_get_length(in);
	want = len < limits->max_header_bytes + 1 ? len : limits->max_header_bytes + 1;
	data = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
	assert_int_equal(http1_parse_request_head(data, want, &parse_limits, &head, &error),
			 HTTP1_PARSE_DONE);
	assert_int_equal(http1_request_framing(&head, &framing, &error), 0);
	*ex = exchange_new(&h->proxy, owner, &head, &framing, &status, reason, sizeof(reason));
	assert_non_null(*ex);
	evbuffer_drain(in, head.head_len);
	exchange_run(*ex);
}

static void exchange_start(struct harness *h)
{
	exchange_start_for(h, &h->owner, &h->ex);
}

/* Another client of the harness's proxy, for cases with requests from
 * several clients at once; its owner records only how it ended. */
struct other_client {
	struct exchange_owner owner;
	int fd;		     /* the test plays this client here */
	struct exchange *ex; /* NULL before it starts and after it ended */
	unsigned ended_count;
};

static void other_watch_body(void *arg, bool on)
{
}

static void other_ended(void *arg, enum exchange_end end, struct conn *tunnel,
			struct access_record *tunnel_log)
{
	struct other_client *c = arg;

	access_record_free(tunnel_log);
	c->ex = NULL;
	c->ended_count++;
}

static void other_read_cb(struct conn *conn, void *arg)
{
	struct other_client *c = arg;

	if (c->ex != NULL)
		exchange_client_readable(c->ex);
}

static void other_write_cb(struct conn *conn, void *arg)
{
	struct other_client *c = arg;

	if (c->ex != NULL)
		exchange_client_drained(c->ex);
}

static void other_event_cb(struct conn *conn, short what, void *arg)
{
}

static void other_client_init(struct harness *h, struct other_client *c)
{
	int fds[2];

	memset(c, 0, sizeof(*c));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	c->fd = fds[1];
	evutil_make_socket_nonblocking(c->fd);
	c->owner.conn = conn_new(h->proxy.loop, fds[0]);
	c->owner.config = h->config;
	c->owner.peer = "test-client";
	c->owner.watch_body = other_watch_body;
	c->owner.closing = owner_closing;
	c->owner.ended = other_ended;
	c->owner.arg = c;
	conn_setcb(c->owner.conn, other_read_cb, other_write_cb, other_event_cb, c);
	conn_read_enable(c->owner.conn, true);
}

/* Before harness_free(). */
static void other_client_free(struct other_client *c)
{
	if (c->ex != NULL)
		exchange_abort(c->ex, "test over");
	conn_free(c->owner.conn);
	close(c->fd);
}

/* What the client has received so far (NUL-terminated); waits a little
 * while bytes keep coming. */
static size_t client_read_on(struct harness *h, int fd, char *buf, size_t size)
{
	size_t got = 0;
	uint64_t quiet_until = now_ms() + 50;

	while (got < size - 1 && now_ms() < quiet_until) {
		ssize_t n = read(fd, buf + got, size - 1 - got);

		if (n > 0) {
			got += (size_t)n;
			quiet_until = now_ms() + 50;
		} else if (n == 0) {
			break;
		} else {
			run_until(h, NULL, 5);
		}
	}
	buf[got] = '\0';
	return got;
}

static size_t client_read(struct harness *h, char *buf, size_t size)
{
	return client_read_on(h, h->client_fd, buf, size);
}

/* Configs: every case runs under these defaults with small backoffs. */
#define TEST_RETRY_BASE                    \
	"log: {level: error}\n"            \
	"limits:\n"                        \
	"  retry_response_buffer: 64KiB\n" \
	"  connect_timeout: 2s\n"          \
	"  try_timeout: 2s\n"              \
	"defaults:\n"                      \
	"  retry:\n"                       \
	"    max_attempts: 3\n"            \
	"    multiplier: 1\n"              \
	"    jitter: 0ms\n"

static const char test_config_fast[] = TEST_RETRY_BASE "    initial_backoff: 10ms\n"
						       "    max_backoff: 10ms\n"
						       "    deadline: 10s\n";

static const char test_config_slow[] = TEST_RETRY_BASE "    initial_backoff: 500ms\n"
						       "    max_backoff: 500ms\n"
						       "    deadline: 10s\n";

static const char test_config_short_deadline[] = TEST_RETRY_BASE "    initial_backoff: 10ms\n"
								 "    max_backoff: 10ms\n"
								 "    deadline: 1s\n";

/* upstream answers carry a Date, so that the proxy adds none and the heads
 * the client gets can be compared whole */
#define UP_DATE "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
#define REPLY_503 "HTTP/1.1 503 Service Unavailable\r\n" UP_DATE "Content-Length: 4\r\n\r\nbusy"
#define REPLY_200 "HTTP/1.1 200 OK\r\n" UP_DATE "Content-Length: 5\r\n\r\nhello"

/* 1. A 503, then a 200 on the retry: the client gets the 200, saying two
 * tries were made; the 503 is never seen. */
static void test_retry_after_503(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, REPLY_503 },
		{ UP_ANSWER, REPLY_200 },
	};
	struct harness h;
	char got[4096];
	char want[256];

	harness_init(&h, test_config_fast);
	upstream_start(&h, script, 2);
	client_send(&h, "GET", "/a", NULL);
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_string_equal(got, "HTTP/1.1 200 OK\r\n" UP_DATE
				 "Content-Length: 5\r\nVia: 1.1 retryproxy\r\n"
				 "Retry-Attempts: 2\r\n\r\nhello");
	assert_string_equal(h.trace, "ended:keep-alive");
	assert_int_equal(h.up.requests, 2);
	/* the request as it went upstream: origin-form, the upstream's Host, Via */
	snprintf(want, sizeof(want),
		 "GET /a HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nVia: 1.1 retryproxy\r\n\r\n", h.up.port);
	assert_string_equal(h.up.last_request, want);
	harness_free(&h);
}

/* 2. A 503 on every try: after max_attempts the client gets the last one as
 * the upstream sent it, body included. */
static void test_503_exhausted(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, "HTTP/1.1 503 Service Unavailable\r\nX-Try: 1\r\n" UP_DATE
			     "Content-Length: 7\r\n\r\nbusy #1" },
		{ UP_ANSWER, "HTTP/1.1 503 Service Unavailable\r\nX-Try: 2\r\n" UP_DATE
			     "Content-Length: 7\r\n\r\nbusy #2" },
		{ UP_ANSWER, "HTTP/1.1 503 Service Unavailable\r\nX-Try: 3\r\n" UP_DATE
			     "Content-Length: 7\r\n\r\nbusy #3" },
	};
	struct harness h;
	char got[4096];

	harness_init(&h, test_config_fast);
	upstream_start(&h, script, 3);
	client_send(&h, "GET", "/a", NULL);
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_string_equal(got, "HTTP/1.1 503 Service Unavailable\r\nX-Try: 3\r\n" UP_DATE
				 "Content-Length: 7\r\nVia: 1.1 retryproxy\r\n"
				 "Retry-Attempts: 3\r\n\r\nbusy #3");
	assert_string_equal(h.trace, "ended:keep-alive");
	assert_int_equal(h.up.requests, 3);
	harness_free(&h);
}

/* 3. A POST (not idempotent) that the upstream resets after reading it: 502,
 * and the upstream saw it exactly once. */
static void test_post_reset_not_retried(void **state)
{
	static const struct up_step script[] = {
		{ UP_RESET, NULL },
		{ UP_ANSWER, REPLY_200 },
	};
	struct harness h;
	char got[4096];

	harness_init(&h, test_config_fast);
	upstream_start(&h, script, 2);
	client_send(&h, "POST", "/orders", "hello");
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_true(strncmp(got, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0);
	assert_non_null(strstr(got, "\r\nRetry-Attempts: 1\r\n"));
	/* the body was sent whole, in the pass the try took it in (so it was
	 * never watched for a stall): the connection may go on */
	assert_string_equal(h.trace, "ended:keep-alive");
	/* a retry would have come by now */
	run_until(&h, NULL, 100);
	assert_int_equal(h.up.requests, 1);
	assert_int_equal(h.up.connections, 1);
	harness_free(&h);
}

/* 4. A POST to a closed port: nothing was sent, so every connect failure is
 * retried up to max_attempts; then 502. The body never left the client's
 * input, so the connection closes after the answer. */
static void test_post_refused_retried(void **state)
{
	struct harness h;
	char got[4096];
	uint16_t closed_port;

	harness_init(&h, test_config_fast);
	close(listen_loopback(&closed_port));
	h.target_port = closed_port;
	client_send(&h, "POST", "/orders", "hello");
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_true(strncmp(got, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0);
	assert_non_null(strstr(got, "\r\nRetry-Attempts: 3\r\n"));
	assert_non_null(strstr(got, "\r\nConnection: close\r\n"));
	assert_non_null(strstr(got, "(3 attempts)"));
	/* no try took the body in, so it was never watched for a stall: it
	 * waited on the proxy, not on the client */
	assert_string_equal(h.trace, "ended:close");
	harness_free(&h);
}

/* 5. The client goes away during the backoff: the retry is cancelled,
 * nothing more goes upstream, and the owner hears nothing. */
static void test_client_gone_in_backoff(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, REPLY_503 },
		{ UP_ANSWER, REPLY_200 },
	};
	struct harness h;

	harness_init(&h, test_config_slow);
	upstream_start(&h, script, 2);
	client_send(&h, "GET", "/a", NULL);
	exchange_start(&h);
	run_until(&h, in_backoff, 2000);
	assert_true(in_backoff(&h));
	assert_int_equal(h.proxy.backoff_pending, 1);
	exchange_abort(h.ex, "client closed");
	h.ex = NULL;
	assert_int_equal(h.proxy.backoff_pending, 0);
	/* past the 500ms backoff */
	run_until(&h, NULL, 700);
	assert_int_equal(h.up.requests, 1);
	assert_int_equal(h.ended_count, 0);
	assert_string_equal(h.trace, "");
	harness_free(&h);
}

/* 6a. A body shorter than its Content-Length: the client got the head and
 * the bytes that came, no more, and the exchange ends broken. */
static void test_broken_body(void **state)
{
	static char reply[256];
	static char want[256];
	static const struct up_step script[] = {
		{ UP_ANSWER_CLOSE, reply },
	};
	char body[101];
	struct harness h;
	char got[4096];

	memset(body, 'x', 100);
	body[100] = '\0';
	snprintf(reply, sizeof(reply),
		 "HTTP/1.1 200 OK\r\n" UP_DATE "Content-Length: 1000\r\n\r\n%s", body);
	snprintf(want, sizeof(want),
		 "HTTP/1.1 200 OK\r\n" UP_DATE "Content-Length: 1000\r\nVia: 1.1 retryproxy\r\n"
		 "Retry-Attempts: 1\r\n\r\n%s",
		 body);
	harness_init(&h, test_config_fast);
	upstream_start(&h, script, 1);
	client_send(&h, "GET", "/big", NULL);
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_string_equal(got, want);
	assert_string_equal(h.trace, "ended:broken");
	assert_int_equal(h.up.requests, 1);
	harness_free(&h);
}

/* 6b. A close-delimited body cut by a reset: the owner is told to reset, so
 * that the client does not take the cut body for a whole one. */
static void test_reset_close_delimited_body(void **state)
{
	static char reply[256];
	static char want[256];
	static const struct up_step script[] = {
		{ UP_ANSWER_RESET, reply },
	};
	char body[101];
	struct harness h;
	char got[4096];

	memset(body, 'y', 100);
	body[100] = '\0';
	snprintf(reply, sizeof(reply), "HTTP/1.1 200 OK\r\n" UP_DATE "Connection: close\r\n\r\n%s",
		 body);
	/* Connection is hop-by-hop: the proxy's own goes to the client */
	snprintf(want, sizeof(want),
		 "HTTP/1.1 200 OK\r\n" UP_DATE "Via: 1.1 retryproxy\r\nRetry-Attempts: 1\r\n"
		 "Connection: close\r\n\r\n%s",
		 body);
	harness_init(&h, test_config_fast);
	upstream_start(&h, script, 1);
	client_send(&h, "GET", "/stream", NULL);
	exchange_start(&h);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_string_equal(got, want);
	assert_string_equal(h.trace, "ended:reset");
	assert_int_equal(h.up.requests, 1);
	harness_free(&h);
}

/* 7. A 503 whose Retry-After (10s) would start the next try past the
 * deadline (1s): no retry, the 503 goes to the client at once. */
static void test_retry_after_past_deadline(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, "HTTP/1.1 503 Service Unavailable\r\n" UP_DATE "Retry-After: 10\r\n"
			     "Content-Length: 4\r\n\r\nbusy" },
		{ UP_ANSWER, REPLY_200 },
	};
	struct harness h;
	char got[4096];
	uint64_t start = now_ms();

	harness_init(&h, test_config_short_deadline);
	upstream_start(&h, script, 2);
	client_send(&h, "GET", "/a", NULL);
	exchange_start(&h);
	run_until_ended(&h);
	assert_true(now_ms() - start < 500);
	client_read(&h, got, sizeof(got));
	assert_string_equal(got,
			    "HTTP/1.1 503 Service Unavailable\r\n" UP_DATE "Retry-After: 10\r\n"
			    "Content-Length: 4\r\nVia: 1.1 retryproxy\r\n"
			    "Retry-Attempts: 1\r\n\r\nbusy");
	assert_string_equal(h.trace, "ended:keep-alive");
	assert_int_equal(h.up.requests, 1);
	harness_free(&h);
}

/* 8. A pooled connection that the upstream closed while it sat idle: an
 * idempotent GET on it is tried again at once on a new connection, without
 * the route's backoff. */
static void test_stale_pooled_connection(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, REPLY_200 },
	};
	struct upstream_endpoint endpoint = { .tls = false, .host = "127.0.0.1" };
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct harness h;
	char key[128];
	char got[4096];
	uint64_t start;
	int fd;

	harness_init(&h, test_config_slow);
	upstream_start(&h, script, 1);
	h.up.close_on_accept = 1;
	/* the head waits in the owner's input before the pool is filled, so that
	 * no loop pass runs between the upstream's close and the pool_take */
	client_send(&h, "GET", "/a", NULL);
	run_until(&h, head_arrived, 2000);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(h.up.port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	up_accept(&h.up, h.proxy.base);
	assert_int_equal(h.up.connections, 1);
	endpoint.port = h.up.port;
	upstream_pool_key(&endpoint, &h.config->default_route.tls, key, sizeof(key));
	pool_put(h.proxy.pool, key, conn_new(h.proxy.loop, fd), false,
		 h.config->limits.pool_max_idle, h.config->limits.pool_idle_timeout_ms);
	start = now_ms();
	exchange_start(&h);
	run_until_ended(&h);
	/* the route's backoff is 500ms */
	assert_true(now_ms() - start < 400);
	client_read(&h, got, sizeof(got));
	/* the stale try was a try: it is counted */
	assert_string_equal(got, "HTTP/1.1 200 OK\r\n" UP_DATE
				 "Content-Length: 5\r\nVia: 1.1 retryproxy\r\n"
				 "Retry-Attempts: 2\r\n\r\nhello");
	assert_string_equal(h.trace, "ended:keep-alive");
	assert_int_equal(h.up.connections, 2);
	assert_int_equal(h.up.requests, 1);
	harness_free(&h);
}

/* Put a connection to the upstream into the pool that the upstream closes
 * at once, with a reset or a FIN, as client.c's pooling would have left it;
 * no loop pass runs, so the pool cannot notice before the next take. */
static void pool_closed_connection(struct harness *h, bool reset)
{
	struct upstream_endpoint endpoint = { .tls = false, .host = "127.0.0.1" };
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct pollfd pfd = { .events = POLLIN };
	char key[128];
	int fd;

	h->up.close_on_accept = h->up.connections + 1;
	h->up.reset_on_accept = reset;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(h->up.port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	up_accept(&h->up, h->proxy.base);
	pfd.fd = fd;
	/* the close has reached this end (a reset shows as POLLERR) */
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	if (reset)
		assert_true(pfd.revents & (POLLERR | POLLHUP));
	endpoint.port = h->up.port;
	upstream_pool_key(&endpoint, &h->config->default_route.tls, key, sizeof(key));
	pool_put(h->proxy.pool, key, conn_new(h->proxy.loop, fd), false,
		 h->config->limits.pool_max_idle, h->config->limits.pool_idle_timeout_ms);
}

/* 9. Retry-Ambiguous needs a try whose request was written (SPEC: "no
 * response after the request was sent"). A conditional POST (If-Match)
 * takes a pooled connection the upstream has closed; the next try gets 412.
 * Reset while idle, the connection fails the write itself: nothing of the
 * request left, so the 412 is not ambiguous. Closed with a FIN, the write
 * goes through and the upstream might have read it before closing: the
 * 412 carries Retry-Ambiguous: true. */
static void test_ambiguous_needs_written_request(void **state)
{
	static const struct up_step script[] = {
		{ UP_ANSWER, "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 4\r\n\r\nstop" },
	};
	static const char config[] = TEST_RETRY_BASE "    initial_backoff: 500ms\n"
						     "    max_backoff: 500ms\n"
						     "    deadline: 10s\n"
						     "  idempotent:\n"
						     "    methods: [GET]\n"
						     "    when_present: [ { header: If-Match } ]\n";
	for (int reset = 1; reset >= 0; reset--) {
		struct harness h;
		char got[4096];

		harness_init(&h, config);
		upstream_start(&h, script, 1);
		client_send_fields(&h, "POST", "/doc", "If-Match: \"v1\"\r\n", "hello");
		run_until(&h, head_arrived, 2000);
		pool_closed_connection(&h, reset);
		exchange_start(&h);
		/* as after the client's read event in the proxy: the request is
		 * written before the loop looks at the connection again */
		conn_loop_pass_end(h.proxy.loop);
		run_until_ended(&h);
		client_read(&h, got, sizeof(got));
		if (strncmp(got, "HTTP/1.1 412 ", 13) != 0 ||
		    strstr(got, "\r\nRetry-Attempts: 2\r\n") == NULL)
			fail_msg("%s: got %s", reset ? "reset" : "fin", got);
		if ((strstr(got, "\r\nRetry-Ambiguous: true\r\n") != NULL) == (reset == 1))
			fail_msg("%s: Retry-Ambiguous should be %s: %s", reset ? "reset" : "fin",
				 reset ? "absent" : "there", got);
		assert_int_equal(h.up.connections, 2);
		assert_int_equal(h.up.requests, 1);
		harness_free(&h);
	}
}

/* 10. limits.max_upstream_connections 1: X holds the connection, A then B
 * wait for it. X's response ends and its connection goes to the pool, to be
 * offered to A, the oldest; but the loop pass runs on past A's deadline
 * before the offer reaches it (a busy pass: A's timer waits for the next
 * one), so A, released, gets its 504 and takes nothing. The idle
 * connection goes to B at once, not after B's own try_timeout (2s). */
static void test_queue_offer_passes_on(void **state)
{
	static const struct up_step script[] = {
		{ UP_HOLD, NULL },
		{ UP_ANSWER, REPLY_200 },
	};
	static const char config[] = "log: {level: error}\n"
				     "limits:\n"
				     "  max_upstream_connections: 1\n"
				     "  connect_timeout: 2s\n"
				     "  try_timeout: 2s\n"
				     "defaults:\n"
				     "  retry: { max_attempts: 1, deadline: 10s }\n"
				     "routes:\n"
				     "  - name: short\n"
				     "    match: { path_prefix: /short }\n"
				     "    retry: { deadline: 500ms }\n";
	struct other_client a;
	struct other_client b;
	struct harness h;
	char got[4096];
	uint64_t x_ended;
	uint64_t end;

	harness_init(&h, config);
	other_client_init(&h, &a);
	other_client_init(&h, &b);
	upstream_start(&h, script, 2);
	client_send(&h, "GET", "/x", NULL);
	exchange_start(&h);
	for (end = now_ms() + 2000; h.up.requests < 1 && now_ms() < end;)
		run_until(&h, NULL, 5);
	assert_int_equal(h.up.requests, 1);
	client_send_fields_on(&h, a.fd, "GET", "/short/a", "", NULL);
	exchange_start_for(&h, &a.owner, &a.ex);
	client_send_fields_on(&h, b.fd, "GET", "/b", "", NULL);
	exchange_start_for(&h, &b.owner, &b.ex);
	assert_int_equal(upstreams_slot_waiting(h.proxy.upstreams), 2);
	assert_non_null(a.ex);
	/* the pass that ends X starts well before A's deadline (500ms), and
	 * runs on until it is past */
	assert_true(now_ms() < a.ex->first_try_ms + 300);
	h.ended_busy_until_ms = a.ex->first_try_ms + 500 + 5;
	up_send(h.up.conns[0], REPLY_200);
	run_until(&h, ended, 2000);
	assert_int_equal(h.ended_count, 1);
	x_ended = now_ms();
	while ((a.ended_count == 0 || b.ended_count == 0) && now_ms() < x_ended + 3000)
		run_until(&h, NULL, 5);
	assert_int_equal(a.ended_count, 1);
	assert_int_equal(b.ended_count, 1);
	client_read_on(&h, a.fd, got, sizeof(got));
	if (strncmp(got, "HTTP/1.1 504 ", 13) != 0 ||
	    strstr(got, "before the retry deadline") == NULL)
		fail_msg("A: %s", got);
	client_read_on(&h, b.fd, got, sizeof(got));
	if (strncmp(got, "HTTP/1.1 200 OK\r\n", 17) != 0)
		fail_msg("B, %llu ms after X ended: %s", (unsigned long long)(now_ms() - x_ended),
			 got);
	/* on X's connection, from the pool */
	assert_int_equal(h.up.connections, 1);
	assert_int_equal(h.up.requests, 2);
	assert_true(now_ms() - x_ended < 1000);
	other_client_free(&a);
	other_client_free(&b);
	harness_free(&h);
}

static bool two_requests(struct harness *h)
{
	return h->up.requests >= 2;
}

/* A 503 kept while its hedge raced, whose body comes whole only after the
 * other try failed and, meanwhile, the upstream was marked down (other
 * requests' connects failed): as for a retry whose connect would find it
 * down, the request is held for the upstream, not answered with the 503,
 * and goes once the upstream is back. */
static void test_kept_verdict_holds(void **state)
{
	static const struct up_step script[] = {
		{ UP_HOLD, NULL }, /* the first try: no answer; the test resets it */
		{ UP_HOLD, NULL }, /* its hedge: the test sends a 503 in two parts */
		{ UP_ANSWER, REPLY_200 },
	};
	static const char yaml[] =
		TEST_RETRY_BASE "    initial_backoff: 10ms\n"
				"    max_backoff: 10ms\n"
				"    deadline: 10s\n"
				"    hedge: { after: 50ms, max: 1 }\n"
				"health: { down_after: 1, probe_interval: 60s }\n";
	struct harness h;
	struct upstream *u;
	char got[4096];

	harness_init(&h, yaml);
	upstream_start(&h, script, 3);
	client_send(&h, "GET", "/kept", NULL);
	exchange_start(&h);
	run_until(&h, two_requests, 2000);
	assert_int_equal(h.up.requests, 2);
	up_send(h.up.conns[1], "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\nbusy");
	run_until(&h, NULL, 50);
	up_conn_close(h.up.conns[0], true);
	run_until(&h, NULL, 50);
	assert_int_equal(h.ended_count, 0);
	u = h.ex->upstream;
	upstream_connect_end(u, &h.config->health, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(u));
	up_send(h.up.conns[1], "more");
	run_until(&h, NULL, 100);
	assert_int_equal(h.ended_count, 0);
	assert_int_equal(h.ex->state, EXCHANGE_HELD);
	/* back: a connect made says so */
	upstream_connect_end(u, &h.config->health, UPSTREAM_CONNECT_MADE);
	run_until_ended(&h);
	client_read(&h, got, sizeof(got));
	assert_non_null(strstr(got, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(got, "Retry-Attempts: 3\r\n"));
	assert_int_equal(h.up.requests, 3);
	harness_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retry_after_503),
		cmocka_unit_test(test_503_exhausted),
		cmocka_unit_test(test_post_reset_not_retried),
		cmocka_unit_test(test_post_refused_retried),
		cmocka_unit_test(test_client_gone_in_backoff),
		cmocka_unit_test(test_broken_body),
		cmocka_unit_test(test_reset_close_delimited_body),
		cmocka_unit_test(test_retry_after_past_deadline),
		cmocka_unit_test(test_stale_pooled_connection),
		cmocka_unit_test(test_ambiguous_needs_written_request),
		cmocka_unit_test(test_queue_offer_passes_on),
		cmocka_unit_test(test_kept_verdict_holds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
