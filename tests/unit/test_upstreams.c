/*
 * Unit tests for upstreams.c: which requests may open a connection to an
 * upstream (upstream_admit), who waits and in what order they are
 * released, which upstreams are remembered, and what /upstreams and the
 * metrics show. Requests' connects
 * are played by the test (admit, then upstream_connect_end); the probes
 * are real: upstreams.c starts them on the real event loop against a
 * loopback socket the test controls, bound but not listening (refused)
 * until the test calls listen() on it.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "proxy.h"
#include "tls.h"
#include "upstreams.h"

#define TEST_MAX_RELEASED 16

/* The proxy as far as upstreams.c and its probes need it, and a loopback
 * port for the upstream. */
struct harness {
	struct proxy proxy;
	struct config *config;
	struct health_policy policy; /* what every request brings to upstream_admit */
	int sock;		     /* bound to 127.0.0.1:port; refused until listen() */
	uint16_t port;
	struct upstream_endpoint endpoint; /* 127.0.0.1:port, plain */
	int released[TEST_MAX_RELEASED];   /* waiter ids in the order released */
	unsigned released_count;
	struct upstream *rewait_on;	       /* test_rewait_cb waits here again, once */
	const struct upstream_endpoint *touch; /* test_touch_cb asks for it ... */
	struct upstream *touched;	       /* ... and holds it here */
};

/* A request waiting for an upstream; the waiter first, so that the release
 * callback finds the rest. */
struct test_waiter {
	struct upstream_waiter waiter;
	struct harness *h;
	int id;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Record the release, in order. */
static bool test_release_cb(struct upstream_waiter *w)
{
	struct test_waiter *tw = (struct test_waiter *)w;
	struct harness *h = tw->h;

	assert_null(w->upstream);
	assert_true(h->released_count < TEST_MAX_RELEASED);
	h->released[h->released_count++] = tw->id;
	return true;
}

static void test_waiter_init(struct test_waiter *tw, struct harness *h, int id)
{
	memset(tw, 0, sizeof(*tw));
	tw->waiter.release = test_release_cb;
	tw->h = h;
	tw->id = id;
}

/* The proxy with a quiet config, and a port that refuses connects. */
static void harness_init(struct harness *h, unsigned down_after, bool hold)
{
	static const char yaml[] = "log: {level: error}\n"
				   "limits:\n"
				   "  connect_timeout: 1s\n";
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int one = 1;

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
	h->proxy.upstreams = upstreams_new(&h->proxy);
	h->policy.down_after = down_after;
	h->policy.probe_interval_ms = 20;
	h->policy.hold = hold;

	/* bound, not listening: a connect to it is refused at once */
	h->sock = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(h->sock >= 0);
	setsockopt(h->sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(h->sock, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(h->sock, (struct sockaddr *)&sin, &len), 0);
	h->port = ntohs(sin.sin_port);
	h->endpoint.tls = false;
	h->endpoint.host = "127.0.0.1";
	h->endpoint.port = h->port;
}

static void harness_free(struct harness *h)
{
	upstreams_free(h->proxy.upstreams);
	tls_store_free(h->proxy.tls);
	evdns_base_free(h->proxy.dns, 0);
	config_release(h->config);
	conn_loop_free(h->proxy.loop);
	close(h->sock);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
}

/* Run loop passes until done(h, arg) holds (when done is given) or ms pass;
 * says whether it held. */
static bool run_until(struct harness *h, bool (*done)(struct harness *, const void *),
		      const void *arg, uint64_t ms)
{
	struct event *tick = event_new(h->proxy.base, -1, EV_PERSIST, tick_cb, NULL);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 5000 };
	uint64_t end = now_ms() + ms;
	bool held;

	event_add(tick, &tv);
	while (!(held = done != NULL && done(h, arg)) && now_ms() < end) {
		event_base_loop(h->proxy.base, EVLOOP_ONCE);
		conn_loop_pass_end(h->proxy.loop);
	}
	event_free(tick);
	return held;
}

/* upstreams_render() or upstreams_render_metrics() as a string (freed by the
 * caller). */
static char *render(struct harness *h, bool metrics)
{
	struct evbuffer *out = evbuffer_new();
	size_t len;
	char *text;

	if (metrics)
		upstreams_render_metrics(h->proxy.upstreams, out);
	else
		upstreams_render(h->proxy.upstreams, out);
	len = evbuffer_get_length(out);
	text = malloc(len + 1);
	assert_non_null(text);
	evbuffer_remove(out, text, len);
	text[len] = '\0';
	evbuffer_free(out);
	return text;
}

/* Conditions for run_until(): the rendered metrics contain arg. */
static bool metrics_contain(struct harness *h, const void *arg)
{
	char *text = render(h, true);
	bool found = strstr(text, arg) != NULL;

	free(text);
	return found;
}

/* arg (an unsigned) waiters were released. */
static bool released_at_least(struct harness *h, const void *arg)
{
	return h->released_count >= *(const unsigned *)arg;
}

/* The /upstreams page (render) contains line as a whole line. */
static void assert_rendered_line(struct harness *h, const char *line)
{
	char *text = render(h, false);
	char want[256];

	snprintf(want, sizeof(want), "%s\n", line);
	if (strstr(text, want) == NULL)
		fail_msg("/upstreams has no line \"%s\":\n%s", line, text);
	free(text);
}

/* The /upstreams line for the harness's upstream. */
static void assert_upstream_line(struct harness *h, const char *state, unsigned failures,
				 unsigned held)
{
	char line[256];

	snprintf(line, sizeof(line), "http://127.0.0.1:%u %s failures=%u held=%u", h->port, state,
		 failures, held);
	assert_rendered_line(h, line);
}

/* The metrics contain series{upstream="<the harness's upstream>"rest. */
static void assert_metric(struct harness *h, const char *series, const char *rest)
{
	char line[256];

	snprintf(line, sizeof(line), "%s{upstream=\"http://127.0.0.1:%u\"%s\n", series, h->port,
		 rest);
	if (!metrics_contain(h, line)) {
		char *text = render(h, true);

		fail_msg("metrics have no line \"%s\":\n%s", line, text);
		free(text);
	}
}

/* Exactly the waiters ids[0..n) were released, in that order. */
static void assert_released(struct harness *h, const int *ids, unsigned n)
{
	unsigned i;

	assert_int_equal(h->released_count, n);
	for (i = 0; i < n; i++)
		assert_int_equal(h->released[i], ids[i]);
}

/* What the proxy logs, kept in a temporary file: stderr (fd 2) goes there
 * between capture_on() and capture_off() only, so that cmocka's reports of
 * a failed assertion, made outside, are seen. */
struct stderr_capture {
	FILE *file;
	int saved;
};

static void capture_on(struct stderr_capture *c)
{
	if (c->file == NULL)
		c->file = tmpfile();
	assert_non_null(c->file);
	log_flush();
	c->saved = dup(STDERR_FILENO);
	assert_true(c->saved >= 0);
	assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

static void capture_off(struct stderr_capture *c)
{
	log_flush();
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
}

/* Warnings captured that contain text. */
static unsigned capture_warnings(struct stderr_capture *c, const char *text)
{
	char line[1024];
	unsigned n = 0;

	rewind(c->file);
	while (fgets(line, sizeof(line), c->file) != NULL)
		if (strstr(line, " warn ") != NULL && strstr(line, text) != NULL)
			n++;
	fseek(c->file, 0, SEEK_END);
	return n;
}

/* No descriptor can be opened until descriptors_back(): the soft
 * RLIMIT_NOFILE goes down to the lowest free descriptor's number. */
static struct rlimit descriptors_gone(void)
{
	struct rlimit was, low;
	int lowest = dup(STDERR_FILENO);

	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
	low = was;
	low.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	return was;
}

static void descriptors_back(const struct rlimit *was)
{
	assert_int_equal(setrlimit(RLIMIT_NOFILE, was), 0);
}

/* Probes the proxy cannot make (no descriptor: EMFILE) are warned about
 * once a spell. A request's connect that marks the upstream up ends the
 * spell as a probe made would: when it goes down again and its probes
 * again find no descriptor, that is warned about again. */
static void test_upstreams_probe_shortage_each_spell(void **state)
{
	struct stderr_capture capture = { 0 };
	struct rlimit was;
	struct harness h;
	struct upstream *u;
	char line[160];
	bool shortage_seen;

	harness_init(&h, 1, false);
	log_configure(LOG_LEVEL_WARN, LOG_FORMAT_TEXT);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);

	for (unsigned spell = 1; spell <= 2; spell++) {
		/* two requests connecting; the first fails: down, and the
		 * other is still connecting */
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
		capture_on(&capture);
		upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
		capture_off(&capture);
		assert_true(upstream_down(u));

		/* two probes find no descriptor: one warning for the spell */
		snprintf(line, sizeof(line),
			 "retryproxy_probes_total{upstream=\"http://127.0.0.1:%u\","
			 "result=\"local_shortage\"} %u\n",
			 h.port, 2 * spell);
		capture_on(&capture);
		was = descriptors_gone();
		shortage_seen = run_until(&h, metrics_contain, line, 2000);
		descriptors_back(&was);
		capture_off(&capture);
		assert_true(shortage_seen);
		assert_true(upstream_down(u));
		assert_int_equal(capture_warnings(&capture, "probe not made"), spell);

		/* the request still connecting gets through: up, no probe made */
		capture_on(&capture);
		upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
		capture_off(&capture);
		assert_false(upstream_down(u));
	}
	assert_metric(&h, "retryproxy_probes_total", ",result=\"ok\"} 0");
	assert_metric(&h, "retryproxy_probes_total", ",result=\"fail\"} 0");
	fclose(capture.file);
	upstream_release(u);
	harness_free(&h);
}

/* One upstream per scheme, host and port; names with brackets for IPv6. */
static void test_upstreams_hold_and_name(void **state)
{
	struct harness h;
	char host[] = "127.0.0.1";
	struct upstream_endpoint a = { .tls = false, .host = host, .port = 8080 };
	struct upstream_endpoint a2 = { .tls = false, .host = "127.0.0.1", .port = 8080 };
	struct upstream_endpoint other_port = { .tls = false, .host = "127.0.0.1", .port = 8081 };
	struct upstream_endpoint tls = { .tls = true, .host = "127.0.0.1", .port = 8080 };
	struct upstream_endpoint other_host = { .tls = false, .host = "127.0.0.2", .port = 8080 };
	struct upstream_endpoint v6 = { .tls = true, .host = "::1", .port = 443 };
	struct upstream_endpoint lower = { .tls = false, .host = "api.example", .port = 80 };
	struct upstream_endpoint upper = { .tls = false, .host = "API.Example", .port = 80 };
	struct upstream *ua, *ua2, *up, *ut, *uh, *u6, *ul, *uu;

	harness_init(&h, 3, true);
	ua = upstreams_hold(h.proxy.upstreams, &a);
	/* the record keeps its own copy of the host */
	memset(host, 'x', sizeof(host) - 1);
	ua2 = upstreams_hold(h.proxy.upstreams, &a2);
	up = upstreams_hold(h.proxy.upstreams, &other_port);
	ut = upstreams_hold(h.proxy.upstreams, &tls);
	uh = upstreams_hold(h.proxy.upstreams, &other_host);
	u6 = upstreams_hold(h.proxy.upstreams, &v6);
	ul = upstreams_hold(h.proxy.upstreams, &lower);
	uu = upstreams_hold(h.proxy.upstreams, &upper);
	assert_ptr_equal(ua, ua2);
	/* host names are case-insensitive: one upstream, one health */
	assert_ptr_equal(ul, uu);
	assert_ptr_not_equal(ua, up);
	assert_ptr_not_equal(ua, ut);
	assert_ptr_not_equal(ua, uh);
	assert_ptr_not_equal(up, ut);
	assert_string_equal(upstream_name(ua), "http://127.0.0.1:8080");
	assert_string_equal(upstream_name(up), "http://127.0.0.1:8081");
	assert_string_equal(upstream_name(ut), "https://127.0.0.1:8080");
	assert_string_equal(upstream_name(uh), "http://127.0.0.2:8080");
	assert_string_equal(upstream_name(u6), "https://[::1]:443");
	assert_false(upstream_down(ua));
	assert_rendered_line(&h, "http://127.0.0.1:8080 up failures=0 held=0");
	assert_rendered_line(&h, "https://[::1]:443 up failures=0 held=0");
	upstream_release(ua);
	upstream_release(ua2);
	upstream_release(up);
	upstream_release(ut);
	upstream_release(uh);
	upstream_release(u6);
	upstream_release(ul);
	upstream_release(uu);
	/* released, still known */
	assert_ptr_equal(upstreams_hold(h.proxy.upstreams, &a2), ua);
	upstream_release(ua);
	harness_free(&h);
}

/* More upstreams than hash buckets: each endpoint still finds its own
 * record, whatever shares its bucket. */
static void test_upstreams_hold_many(void **state)
{
	enum { N = 300 };
	struct harness h;
	struct upstream *held[2][N];
	char name[64];
	unsigned i, t;

	harness_init(&h, 3, true);
	for (t = 0; t < 2; t++)
		for (i = 0; i < N; i++) {
			struct upstream_endpoint e = { .tls = t == 1,
						       .host = "127.0.0.1",
						       .port = (uint16_t)(1000 + i) };

			held[t][i] = upstreams_hold(h.proxy.upstreams, &e);
		}
	for (t = 0; t < 2; t++)
		for (i = 0; i < N; i++) {
			struct upstream_endpoint e = { .tls = t == 1,
						       .host = "127.0.0.1",
						       .port = (uint16_t)(1000 + i) };

			assert_ptr_equal(upstreams_hold(h.proxy.upstreams, &e), held[t][i]);
			snprintf(name, sizeof(name), "%s://127.0.0.1:%u", t == 1 ? "https" : "http",
				 1000 + i);
			assert_string_equal(upstream_name(held[t][i]), name);
			upstream_release(held[t][i]);
			upstream_release(held[t][i]);
		}
	harness_free(&h);
}

/* Lines on /upstreams. */
static unsigned rendered_lines(struct harness *h)
{
	char *text = render(h, false);
	unsigned n = 0;
	char *p;

	for (p = text; *p != '\0'; p++)
		n += *p == '\n';
	free(text);
	return n;
}

/* Conditions for run_until(): /upstreams is empty. */
static bool nothing_rendered(struct harness *h, const void *arg)
{
	return rendered_lines(h) == 0;
}

/* Past 1024 upstreams, the least recently used one with nothing attached
 * is forgotten, even with failures on record (a forward proxy's clients
 * choose the hosts); one a request holds is kept, and a down one is kept
 * while an up one can go instead. */
static void test_upstreams_forget_idle(void **state)
{
	enum { N = 1030 };
	struct harness h;
	struct upstream *u, *held, *down;
	struct upstream_endpoint held_at = { .host = "127.0.0.1", .port = 30001 };
	struct upstream_endpoint down_at = { .host = "127.0.0.1", .port = 30002 };
	char line[128];
	unsigned i;

	harness_init(&h, 3, true);
	/* the oldest, with a failure on record and nothing attached */
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	upstream_release(u);
	held = upstreams_hold(h.proxy.upstreams, &held_at);
	down = upstreams_hold(h.proxy.upstreams, &down_at);
	for (i = 0; i < 3; i++) {
		assert_int_equal(upstream_admit(down, &h.policy), UPSTREAM_GO);
		upstream_connect_end(down, &h.policy, UPSTREAM_CONNECT_FAILED);
	}
	assert_true(upstream_down(down));
	upstream_release(down);
	for (i = 0; i < N; i++) {
		struct upstream_endpoint e = { .tls = true,
					       .host = "127.0.0.1",
					       .port = (uint16_t)(20000 + i) };

		upstream_release(upstreams_hold(h.proxy.upstreams, &e));
	}
	assert_int_equal(rendered_lines(&h), 1024);
	assert_rendered_line(&h, "https://127.0.0.1:21029 up failures=0 held=0");
	assert_rendered_line(&h, "http://127.0.0.1:30001 up failures=0 held=0");
	assert_rendered_line(&h, "http://127.0.0.1:30002 down failures=3 held=0");
	/* the one with a failure went, and the oldest idle ones after it */
	for (i = 0; i <= N - 1024 + 2; i++) {
		char *text = render(&h, false);

		if (i == 0)
			snprintf(line, sizeof(line), "http://127.0.0.1:%u ", h.port);
		else
			snprintf(line, sizeof(line), "https://127.0.0.1:%u ", 20000 + i - 1);
		if (strstr(text, line) != NULL)
			fail_msg("%s is still on /upstreams", line);
		free(text);
	}
	assert_rendered_line(&h, "https://127.0.0.1:20008 up failures=0 held=0");
	upstream_release(held);
	harness_free(&h);
}

/* A down upstream that nobody holds or waits for is forgotten when its
 * probe falls due, instead of being probed for ever. */
static void test_upstreams_forget_down_unused(void **state)
{
	struct harness h;
	struct upstream *u;

	harness_init(&h, 1, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(u));
	upstream_release(u);
	assert_int_equal(rendered_lines(&h), 1);
	assert_true(run_until(&h, nothing_rendered, NULL, 1000));
	/* asked for again: a fresh record, up, in doubt */
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_false(upstream_down(u));
	assert_upstream_line(&h, "up", 0, 0);
	upstream_release(u);
	harness_free(&h);
}

/* Conditions for run_until(): arg (an unsigned) probes failed, by the
 * metrics. */
static bool probes_failed_at_least(struct harness *h, const void *arg)
{
	char line[256];
	unsigned n = *(const unsigned *)arg;
	char *text = render(h, true);
	const char *p;
	bool found;

	snprintf(line, sizeof(line),
		 "retryproxy_probes_total{upstream=\"http://127.0.0.1:%u\",result=\"fail\"} ",
		 h->port);
	p = strstr(text, line);
	found = p != NULL && (unsigned)strtoul(p + strlen(line), NULL, 10) >= n;
	free(text);
	return found;
}

/* A down upstream that requests keep asking for, each holding it only a
 * moment (refused at once: hold false), stays known down and probed; once
 * nobody asks for a whole probe interval it is forgotten. */
static void test_upstreams_down_kept_while_asked(void **state)
{
	struct harness h;
	struct upstream *u;
	unsigned probes = 3;
	uint64_t end;

	harness_init(&h, 1, false);
	/* long enough that a loaded machine still asks in every interval */
	h.policy.probe_interval_ms = 200;
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(u));
	upstream_release(u);
	/* a request every 5 ms, over several probe intervals */
	end = now_ms() + 5000;
	while (!probes_failed_at_least(&h, &probes) && now_ms() < end) {
		u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
		if (!upstream_down(u))
			fail_msg("forgotten while asked for, %llu ms in:\n%s",
				 (unsigned long long)(now_ms() + 5000 - end), render(&h, true));
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_REFUSE);
		upstream_release(u);
		run_until(&h, NULL, NULL, 5);
	}
	assert_true(probes_failed_at_least(&h, &probes));
	assert_upstream_line(&h, "down", 1, 0);
	/* nobody asks any more: forgotten */
	assert_true(run_until(&h, nothing_rendered, NULL, 3000));
	harness_free(&h);
}

/* In doubt, one connect finds out and the others wait for it; once one is
 * made, every request connects on its own. */
static void test_upstreams_doubt_then_made(void **state)
{
	static const int order[] = { 1, 2 };
	struct harness h;
	struct test_waiter w1, w2;
	struct upstream *u;
	int i;

	harness_init(&h, 3, true);
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	/* asking what admit would say counts no connect */
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	/* one connect finds out: the others (a hedge among them) would wait */
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_WAIT);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_wait(u, &w1.waiter);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_wait(u, &w2.waiter);
	assert_ptr_equal(w1.waiter.upstream, u);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 2);
	assert_int_equal(h.released_count, 0);

	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_released(&h, order, 2);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	assert_null(w1.waiter.upstream);
	/* proven: connects in parallel, nobody waits */
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_GO);
	for (i = 0; i < 5; i++)
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_upstream_line(&h, "up", 0, 0);
	upstream_release(u);
	harness_free(&h);
}

/* A failed connect below down_after, or one abandoned while unproven, lets
 * exactly one waiter, the oldest, make the next connect. */
static void test_upstreams_failed_releases_one(void **state)
{
	static const int order[] = { 1, 2, 3 };
	struct harness h;
	struct test_waiter w[4];
	struct upstream *u;
	int i;

	harness_init(&h, 3, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	for (i = 0; i < 4; i++) {
		test_waiter_init(&w[i], &h, i + 1);
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
		upstream_wait(u, &w[i].waiter);
	}
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 4);

	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_released(&h, order, 1);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 3);
	assert_upstream_line(&h, "up", 1, 3);
	/* the released one connects; the others still wait behind it */
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);

	/* its client left before the connect ended: no verdict, the next goes */
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_ABANDONED);
	assert_released(&h, order, 2);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 2);
	assert_upstream_line(&h, "up", 1, 2);

	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_released(&h, order, 3);
	assert_upstream_line(&h, "up", 2, 1);
	assert_false(upstream_down(u));

	/* the last one connects: proven, nobody left waiting */
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_int_equal(h.released_count, 4);
	assert_int_equal(h.released[3], 4);
	assert_upstream_line(&h, "up", 0, 0);
	upstream_release(u);
	harness_free(&h);
}

/* down_after failures in a row mark it down with hold: requests wait; the
 * probes to the refusing port fail and count so; once the port listens, a
 * probe connects, the upstream is up and the held requests go, oldest
 * first. */
static void test_upstreams_down_hold_probe(void **state)
{
	static const int order[] = { 1, 2, 3 };
	struct harness h;
	struct test_waiter w[3];
	struct upstream *u;
	unsigned three = 3;
	char fail_line[128];
	int i;

	harness_init(&h, 3, true);
	for (i = 0; i < 3; i++)
		test_waiter_init(&w[i], &h, i + 1);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	for (i = 0; i < 3; i++) {
		assert_false(upstream_down(u));
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
		/* the first held request arrived while the last connect was in doubt */
		if (i == 2) {
			assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
			upstream_wait(u, &w[0].waiter);
		}
		upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	}
	assert_true(upstream_down(u));
	/* going down releases the one that waited for the connect in doubt:
	 * its verdict is in, and admitted again it is held for the down
	 * upstream (taking its place among the pending retries, exchange.c) */
	assert_released(&h, order, 1);
	h.released_count = 0;
	assert_upstream_line(&h, "down", 3, 0);
	assert_metric(&h, "retryproxy_upstream_up", "} 0");

	for (i = 0; i < 3; i++) {
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
		upstream_wait(u, &w[i].waiter);
	}
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 3);
	assert_upstream_line(&h, "down", 3, 3);
	assert_true(metrics_contain(&h, "retryproxy_held_requests 3\n"));

	/* probes to the refusing port fail; the requests stay held */
	snprintf(fail_line, sizeof(fail_line),
		 "retryproxy_probes_total{upstream=\"http://127.0.0.1:%u\",result=\"fail\"} 1\n",
		 h.port);
	assert_true(run_until(&h, metrics_contain, fail_line, 1000));
	assert_true(upstream_down(u));
	assert_int_equal(h.released_count, 0);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 3);
	assert_metric(&h, "retryproxy_probes_total", ",result=\"ok\"} 0");

	/* back: the next probe connects */
	assert_int_equal(listen(h.sock, 8), 0);
	assert_true(run_until(&h, released_at_least, &three, 1000));
	assert_released(&h, order, 3);
	assert_false(upstream_down(u));
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	assert_metric(&h, "retryproxy_probes_total", ",result=\"ok\"} 1");
	assert_metric(&h, "retryproxy_upstream_up", "} 1");
	assert_true(metrics_contain(&h, "retryproxy_held_requests 0\n"));
	assert_upstream_line(&h, "up", 0, 0);
	/* a probe that connected proves it: the released requests all go */
	for (i = 0; i < 3; i++)
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_release(u);
	harness_free(&h);
}

/* Without hold, going down releases those waiting at once (the exchange
 * answers them 502), and later requests are refused. */
static void test_upstreams_down_no_hold(void **state)
{
	static const int order[] = { 1, 2, 3 };
	struct harness h;
	struct test_waiter w[3];
	struct upstream *u;
	int i;

	harness_init(&h, 2, false);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	for (i = 0; i < 3; i++) {
		test_waiter_init(&w[i], &h, i + 1);
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
		upstream_wait(u, &w[i].waiter);
	}
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_released(&h, order, 1);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(u));
	assert_released(&h, order, 3);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	assert_upstream_line(&h, "down", 2, 0);
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_REFUSE);
	for (i = 0; i < 3; i++)
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_REFUSE);
	/* the same upstream under a policy with hold */
	h.policy.hold = true;
	assert_int_equal(upstream_admission(u, &h.policy), UPSTREAM_WAIT);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_release(u);
	harness_free(&h);
}

/* Any response head resets the failure count; while down only a connect
 * brings it up and releases the held requests. */
static void test_upstreams_response_resets(void **state)
{
	static const int order[] = { 1 };
	struct harness h;
	struct test_waiter w1;
	struct upstream *u;

	harness_init(&h, 3, true);
	test_waiter_init(&w1, &h, 1);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_upstream_line(&h, "up", 2, 0);
	/* a response on a pooled connection */
	upstream_response_seen(u, &h.policy);
	assert_upstream_line(&h, "up", 0, 0);

	/* down, one request held */
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(u));
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_wait(u, &w1.waiter);
	/* a response on a connection made before it went down resets the
	 * count but proves nothing of the listener: still down, still held */
	upstream_response_seen(u, &h.policy);
	assert_true(upstream_down(u));
	assert_released(&h, order, 0);
	assert_upstream_line(&h, "down", 0, 1);
	/* the connect that was in flight gets through: as good as a probe */
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_false(upstream_down(u));
	assert_released(&h, order, 1);
	assert_upstream_line(&h, "up", 0, 0);
	upstream_release(u);
	harness_free(&h);
}

/* An upstream's HTTP version is heard from its first response head, on a
 * connection made while it was known up and proven too (the fast path):
 * before it, a chunked body may not go chunked (RFC 9112 section 6.1). */
static void test_upstreams_version_heard(void **state)
{
	struct harness h;
	struct upstream *u;

	harness_init(&h, 3, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_false(upstream_version_heard(u));
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_false(upstream_version_heard(u));
	assert_false(upstream_answered_http10(u));
	upstream_response_seen(u, &h.policy);
	assert_true(upstream_version_heard(u));
	upstream_note_http10(u, true);
	upstream_response_seen(u, &h.policy);
	assert_true(upstream_version_heard(u));
	assert_true(upstream_answered_http10(u));
	assert_upstream_line(&h, "up", 0, 0);
	upstream_release(u);
	harness_free(&h);
}

/* A TLS 1.3 handshake the server may still refuse on the first read
 * wipes out no failures; its refusal is one more; a response head on it
 * resets the count as any does. */
static void test_upstreams_made_in_doubt(void **state)
{
	struct harness h;
	struct upstream *u;

	harness_init(&h, 2, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE_IN_DOUBT);
	upstream_handshake_refused(u, &h.policy);
	assert_upstream_line(&h, "up", 1, 0);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE_IN_DOUBT);
	assert_upstream_line(&h, "up", 1, 0);
	upstream_response_seen(u, &h.policy);
	assert_upstream_line(&h, "up", 0, 0);
	/* refused twice in a row: down, as two failed handshakes make it */
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE_IN_DOUBT);
	upstream_handshake_refused(u, &h.policy);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE_IN_DOUBT);
	upstream_handshake_refused(u, &h.policy);
	assert_true(upstream_down(u));
	upstream_release(u);
	harness_free(&h);
}

/* down_after 0: health off; every request connects, however many fail. */
static void test_upstreams_off(void **state)
{
	struct harness h;
	struct upstream *u;
	int i;

	harness_init(&h, 0, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	/* never connected, several at once: no one waits */
	for (i = 0; i < 4; i++)
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	for (i = 0; i < 10; i++) {
		upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
		assert_false(upstream_down(u));
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	}
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	assert_upstream_line(&h, "up", 10, 0);
	assert_metric(&h, "retryproxy_upstream_up", "} 1");
	upstream_release(u);
	harness_free(&h);
}

/* A reload that turns health off while the upstream is down: new requests
 * connect at once, and those held go at the upstream's next event (here
 * the probe timer) instead of waiting for a probe to connect. */
static void test_upstreams_off_by_reload(void **state)
{
	static const int order[] = { 1 };
	struct harness h;
	struct test_waiter w1;
	struct health_policy off;
	struct upstream *u;
	unsigned one = 1;
	int i;

	harness_init(&h, 2, true);
	test_waiter_init(&w1, &h, 1);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	for (i = 0; i < 2; i++) {
		assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
		upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	}
	assert_true(upstream_down(u));
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_wait(u, &w1.waiter);

	off = h.policy;
	off.down_after = 0;
	assert_int_equal(upstream_admit(u, &off), UPSTREAM_GO);
	assert_true(run_until(&h, released_at_least, &one, 1000));
	assert_released(&h, order, 1);
	assert_false(upstream_down(u));
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	upstream_connect_end(u, &off, UPSTREAM_CONNECT_FAILED);
	assert_false(upstream_down(u));
	upstream_release(u);
	harness_free(&h);
}

/* Record the release, then wait again on h->rewait_on, once. */
static bool test_rewait_cb(struct upstream_waiter *w)
{
	struct test_waiter *tw = (struct test_waiter *)w;
	struct upstream *u = tw->h->rewait_on;

	test_release_cb(w);
	tw->h->rewait_on = NULL;
	if (u != NULL)
		upstream_wait(u, w);
	return true;
}

/* Record the release, then ask for h->touch, as a request that the
 * release answers can make its client's next request do at once. */
static bool test_touch_cb(struct upstream_waiter *w)
{
	struct test_waiter *tw = (struct test_waiter *)w;

	test_release_cb(w);
	tw->h->touched = upstreams_hold(tw->h->proxy.upstreams, tw->h->touch);
	return true;
}

/* A reload that turns health off releases every down upstream's held
 * requests, even when a release asks for an upstream the walk has not
 * reached yet (which moves it to the front of the set). */
static void test_upstreams_reload_walk_reordered(void **state)
{
	static const int order[] = { 1, 2 };
	struct harness h;
	struct test_waiter wa, wb;
	struct upstream_endpoint other;
	struct health_policy off;
	struct upstream *a, *b;

	harness_init(&h, 1, true);
	test_waiter_init(&wa, &h, 1);
	test_waiter_init(&wb, &h, 2);
	other = h.endpoint;
	other.host = "127.0.0.2";
	b = upstreams_hold(h.proxy.upstreams, &other);
	a = upstreams_hold(h.proxy.upstreams, &h.endpoint); /* first in the set */
	assert_int_equal(upstream_admit(b, &h.policy), UPSTREAM_GO);
	upstream_connect_end(b, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_int_equal(upstream_admit(a, &h.policy), UPSTREAM_GO);
	upstream_connect_end(a, &h.policy, UPSTREAM_CONNECT_FAILED);
	assert_true(upstream_down(a));
	assert_true(upstream_down(b));
	wa.waiter.release = test_touch_cb;
	h.touch = &other;
	upstream_wait(a, &wa.waiter);
	upstream_wait(b, &wb.waiter);

	off = h.policy;
	off.down_after = 0;
	upstreams_health_policy(h.proxy.upstreams, &off);
	assert_released(&h, order, 2);
	assert_false(upstream_down(a));
	assert_false(upstream_down(b));
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	upstream_release(h.touched);
	upstream_release(a);
	upstream_release(b);
	harness_free(&h);
}

/* A request that a release makes wait again joins the queue behind the
 * others and is not released twice by the same release. */
static void test_upstreams_rewait(void **state)
{
	static const int order[] = { 1, 2, 1 };
	struct harness h;
	struct test_waiter w1, w2;
	struct upstream *u;

	harness_init(&h, 3, true);
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	w1.waiter.release = test_rewait_cb;
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	h.rewait_on = u;
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_wait(u, &w1.waiter);
	upstream_wait(u, &w2.waiter);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_released(&h, order, 2);
	assert_ptr_equal(w1.waiter.upstream, u);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 1);
	assert_upstream_line(&h, "up", 0, 1);
	/* the next release takes it */
	upstream_response_seen(u, &h.policy);
	assert_released(&h, order, 3);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	upstream_release(u);
	harness_free(&h);
}

/* A waiter that stops waiting is gone from the queue and never released;
 * the counts and held=N follow, over every upstream. */
static void test_upstreams_unwait(void **state)
{
	static const int order[] = { 1, 3 };
	struct harness h;
	struct test_waiter w1, w2, w3, w4;
	struct upstream_endpoint other = { .tls = false, .host = "127.0.0.1", .port = 0 };
	struct upstream *u, *v;
	char line[128];

	harness_init(&h, 3, true);
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	test_waiter_init(&w3, &h, 3);
	test_waiter_init(&w4, &h, 4);
	other.port = (uint16_t)(h.port == 65535 ? 1 : h.port + 1);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	v = upstreams_hold(h.proxy.upstreams, &other);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(v, &h.policy), UPSTREAM_GO);
	upstream_wait(u, &w1.waiter);
	upstream_wait(u, &w2.waiter);
	upstream_wait(u, &w3.waiter);
	upstream_wait(v, &w4.waiter);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 4);
	assert_upstream_line(&h, "up", 0, 3);
	snprintf(line, sizeof(line), "http://127.0.0.1:%u up failures=0 held=1", other.port);
	assert_rendered_line(&h, line);
	assert_true(metrics_contain(&h, "retryproxy_held_requests 4\n"));

	upstream_unwait(&w2.waiter);
	assert_null(w2.waiter.upstream);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 3);
	assert_upstream_line(&h, "up", 0, 2);
	/* again: nothing happens */
	upstream_unwait(&w2.waiter);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 3);

	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_released(&h, order, 2);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 1);
	assert_upstream_line(&h, "up", 0, 0);
	/* a released waiter is no longer waiting */
	upstream_unwait(&w1.waiter);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 1);

	upstream_unwait(&w4.waiter);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);
	snprintf(line, sizeof(line), "http://127.0.0.1:%u up failures=0 held=0", other.port);
	assert_rendered_line(&h, line);
	upstream_connect_end(v, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_int_equal(h.released_count, 2);
	upstream_release(u);
	upstream_release(v);
	harness_free(&h);
}

/* A released request that opens a connection: it takes the place. */
static struct upstream *test_cap_upstream;

static bool test_take_release_cb(struct upstream_waiter *w)
{
	test_release_cb(w);
	assert_true(upstream_slot_take(test_cap_upstream, 2, true));
	return true;
}

/* arg (an unsigned) is the waiting count in retryproxy_upstream_waiting. */
static bool slot_waiting_is(struct harness *h, const void *arg)
{
	return upstreams_slot_waiting(h->proxy.upstreams) == *(const unsigned *)arg;
}

/* max_upstream_connections: places up to the cap, then a FIFO queue that
 * places given back and pooled connections release from the loop, oldest
 * first; nobody jumps it; one that leaves is gone from it. */
static void test_upstreams_connection_cap(void **state)
{
	static const int first[] = { 1 };
	static const int then[] = { 1, 3 };
	static const int pooled[] = { 1, 3, 4 };
	struct harness h;
	struct test_waiter w1, w2, w3, w4;
	unsigned zero = 0, one = 1;
	struct upstream *u;

	harness_init(&h, 3, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	test_cap_upstream = u;
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	test_waiter_init(&w3, &h, 3);
	test_waiter_init(&w4, &h, 4);
	w1.waiter.release = w2.waiter.release = w3.waiter.release = test_take_release_cb;
	assert_true(upstream_slot_take(u, 2, false));
	assert_true(upstream_slot_take(u, 2, false));
	assert_false(upstream_slot_take(u, 2, false));
	/* refused for the cap alone: closing an idle connection makes room */
	assert_true(upstream_slot_at_cap(u, false));
	upstream_slot_wait(u, &w1.waiter, false);
	upstream_slot_wait(u, &w2.waiter, false);
	upstream_slot_wait(u, &w3.waiter, false);
	upstream_slot_wait(u, &w4.waiter, false);
	/* with others waiting first, room made would not be the newcomer's;
	 * the head of the queue may make it */
	assert_false(upstream_slot_take(u, 2, false));
	assert_false(upstream_slot_at_cap(u, false));
	assert_true(upstream_slot_at_cap(u, true));
	assert_true(metrics_contain(&h, "retryproxy_upstream_waiting 4\n"));
	/* the health queue is another */
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 0);

	/* a place given back goes to the oldest, from the loop */
	upstream_slot_put(u);
	assert_int_equal(h.released_count, 0);
	/* meanwhile a newcomer does not jump the queue, nor closes an idle
	 * connection for nothing: below the cap */
	assert_false(upstream_slot_take(u, 2, false));
	assert_false(upstream_slot_at_cap(u, false));
	run_until(&h, released_at_least, &one, 1000);
	run_until(&h, NULL, NULL, 20);
	assert_released(&h, first, 1);

	/* one that leaves is gone; the next place goes to the one after it */
	upstream_unwait(&w2.waiter);
	assert_null(w2.waiter.upstream);
	upstream_slot_closed(u);
	run_until(&h, NULL, NULL, 20);
	assert_released(&h, then, 2);

	/* at the cap, a pooled connection releases one waiter (which takes the
	 * connection, not a place), no more */
	upstream_slot_pooled(u);
	run_until(&h, NULL, NULL, 20);
	assert_released(&h, pooled, 3);
	assert_true(run_until(&h, slot_waiting_is, &zero, 100));
	assert_true(metrics_contain(&h, "retryproxy_upstream_waiting 0\n"));

	/* with nobody waiting, places free up for anyone */
	upstream_slot_put(u);
	assert_true(upstream_slot_take(u, 2, false));
	assert_false(upstream_slot_take(u, 2, false));
	upstream_slot_put(u);
	upstream_slot_put(u);
	upstream_release(u);
	harness_free(&h);
}

/* A released request that ends there (its deadline, a drain), taking
 * nothing. */
static bool test_decline_release_cb(struct upstream_waiter *w)
{
	test_release_cb(w);
	return false;
}

/* At the cap, a pooled connection offered to the oldest waiting request
 * that ends without taking it is offered to the next one, in the same
 * release: it is still idle. */
static void test_upstreams_cap_offer_declined(void **state)
{
	static const int both[] = { 1, 2 };
	struct harness h;
	struct test_waiter w1, w2, w3;
	struct upstream *u;

	harness_init(&h, 3, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	test_waiter_init(&w3, &h, 3);
	w1.waiter.release = test_decline_release_cb;
	assert_true(upstream_slot_take(u, 1, false));
	upstream_slot_wait(u, &w1.waiter, false);
	upstream_slot_wait(u, &w2.waiter, false);
	upstream_slot_wait(u, &w3.waiter, false);
	upstream_slot_pooled(u);
	run_until(&h, NULL, NULL, 20);
	/* w2 is offered it (w2 goes on: this test takes nothing); w3 waits */
	assert_released(&h, both, 2);
	assert_int_equal(upstreams_slot_waiting(h.proxy.upstreams), 1);
	upstream_unwait(&w3.waiter);
	upstream_slot_put(u);
	upstream_release(u);
	harness_free(&h);
}

/* A held request let go to make the next connect that ends instead (a
 * drain answered it) passes that turn to the next in line: one connect is
 * made, not none. */
static void test_upstreams_turn_declined(void **state)
{
	static const int order[] = { 1, 2 };
	struct harness h;
	struct test_waiter w1, w2, w3;
	struct upstream *u;

	harness_init(&h, 3, true);
	u = upstreams_hold(h.proxy.upstreams, &h.endpoint);
	test_waiter_init(&w1, &h, 1);
	test_waiter_init(&w2, &h, 2);
	test_waiter_init(&w3, &h, 3);
	w1.waiter.release = test_decline_release_cb;
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_WAIT);
	upstream_wait(u, &w1.waiter);
	upstream_wait(u, &w2.waiter);
	upstream_wait(u, &w3.waiter);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_FAILED);
	/* w2 makes the connect; w3 waits behind it */
	assert_released(&h, order, 2);
	assert_int_equal(upstreams_waiting(h.proxy.upstreams), 1);
	assert_null(w2.waiter.upstream);
	assert_int_equal(upstream_admit(u, &h.policy), UPSTREAM_GO);
	upstream_connect_end(u, &h.policy, UPSTREAM_CONNECT_MADE);
	assert_int_equal(h.released_count, 3);
	assert_int_equal(h.released[2], 3);
	upstream_release(u);
	harness_free(&h);
}

/* A host's spellings become one: lower case, one trailing dot gone; what is
 * not an upper-case letter stays, whichever of the 8-byte words it is in. */
static void test_upstream_host_normalise(void **state)
{
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{ "localhost", "localhost" },
		{ "LOCALHOST", "localhost" },
		{ "localhost.", "localhost" },
		{ "Api.Example.COM.", "api.example.com" },
		{ "127.0.0.1", "127.0.0.1" },
		{ "a", "a" },
		{ "A.", "a" },
		{ ".", "." },
		{ "x..", "x." },
		{ "@[`{AZaz09-_", "@[`{azaz09-_" },
		{ "abcdefghijklmnopqrstuvwxyZ", "abcdefghijklmnopqrstuvwxyz" },
		{ "\xc3\x89t\xc3\xa9.example", "\xc3\x89t\xc3\xa9.example" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[64];
		size_t n = strlen(cases[i].in);

		memcpy(buf, cases[i].in, n);
		n = upstream_host_normalise(buf, n);
		buf[n] = '\0';
		assert_string_equal(buf, cases[i].out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_upstreams_hold_and_name),
		cmocka_unit_test(test_upstreams_hold_many),
		cmocka_unit_test(test_upstreams_forget_idle),
		cmocka_unit_test(test_upstreams_forget_down_unused),
		cmocka_unit_test(test_upstreams_down_kept_while_asked),
		cmocka_unit_test(test_upstreams_doubt_then_made),
		cmocka_unit_test(test_upstreams_failed_releases_one),
		cmocka_unit_test(test_upstreams_down_hold_probe),
		cmocka_unit_test(test_upstreams_probe_shortage_each_spell),
		cmocka_unit_test(test_upstreams_down_no_hold),
		cmocka_unit_test(test_upstreams_response_resets),
		cmocka_unit_test(test_upstreams_version_heard),
		cmocka_unit_test(test_upstreams_made_in_doubt),
		cmocka_unit_test(test_upstreams_off),
		cmocka_unit_test(test_upstreams_off_by_reload),
		cmocka_unit_test(test_upstreams_reload_walk_reordered),
		cmocka_unit_test(test_upstreams_rewait),
		cmocka_unit_test(test_upstreams_unwait),
		cmocka_unit_test(test_upstreams_connection_cap),
		cmocka_unit_test(test_upstreams_cap_offer_declined),
		cmocka_unit_test(test_upstreams_turn_declined),
		cmocka_unit_test(test_upstream_host_normalise),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
