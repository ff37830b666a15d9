/* Unit tests for name_lookup.c: the hosts file answers at once, with the
 * port; localhost and names under .localhost that it lacks are loopback
 * without a question; another name is a question out, which a cancel
 * silences; a failure is told in the resolver's words, the IPv4 lookup's
 * first. Against a nameserver played here on loopback (UDP and TCP on one
 * port): the search list is asked one candidate at a time, the next after
 * NXDOMAIN; a truncated answer is asked again over TCP, whose 40 records
 * are the answer; a cancel while the TCP question is out silences it. Run
 * under ASan, a leak or a double free fails too. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <event2/dns.h>
#include <event2/event.h>

#include <cmocka.h>

#include "dns_cache.h"
#include "dns_tcp.h"
#include "name_lookup.h"
#include "resolv_conf.h"

/* What a lookup's callback was given. */
struct answer {
	int calls;
	struct evutil_addrinfo *addresses;
	int error;
	uint64_t ttl_ms;
};

static void answer_cb(struct evutil_addrinfo *addresses, int error, uint64_t ttl_ms, void *arg)
{
	struct answer *a = arg;

	a->calls++;
	a->addresses = addresses;
	a->error = error;
	a->ttl_ms = ttl_ms;
}

/* The address of a one-address answer, as text, and its port. */
static void address_text(const struct evutil_addrinfo *ai, char *text, size_t len, uint16_t *port)
{
	assert_non_null(ai);
	assert_null(ai->ai_next);
	if (ai->ai_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ai->ai_addr;

		inet_ntop(AF_INET6, &sin6->sin6_addr, text, (socklen_t)len);
		*port = ntohs(sin6->sin6_port);
	} else {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ai->ai_addr;

		inet_ntop(AF_INET, &sin->sin_addr, text, (socklen_t)len);
		*port = ntohs(sin->sin_port);
	}
}

struct resolvers {
	struct event_base *base;
	struct evdns_base *hosts; /* the hosts file below, no nameserver */
	struct evdns_base *dns;	  /* no nameserver either: a question stays out */
	struct name_resolver resolver;
	char path[64];
};

static int resolvers_setup(void **state)
{
	struct resolvers *r = calloc(1, sizeof(*r));
	int fd;
	static const char hosts[] = "127.0.0.7 api.test\n::7 api.test\n127.0.0.8 app.localhost\n";

	strcpy(r->path, "/tmp/test_name_lookup_XXXXXX");
	fd = mkstemp(r->path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, hosts, sizeof(hosts) - 1), (ssize_t)(sizeof(hosts) - 1));
	close(fd);
	r->base = event_base_new();
	r->hosts = evdns_base_new(r->base, 0);
	assert_int_equal(evdns_base_load_hosts(r->hosts, r->path), 0);
	r->dns = evdns_base_new(r->base, 0);
	r->resolver.base = r->base;
	r->resolver.hosts = r->hosts;
	r->resolver.dns = r->dns;
	*state = r;
	return 0;
}

static int resolvers_teardown(void **state)
{
	struct resolvers *r = *state;

	evdns_base_free(r->hosts, 1);
	evdns_base_free(r->dns, 1);
	event_base_free(r->base);
	unlink(r->path);
	free(r);
	return 0;
}

static void test_hosts_file_answers_at_once(void **state)
{
	struct resolvers *r = *state;
	struct answer a4 = { 0 }, a6 = { 0 };
	char text[INET6_ADDRSTRLEN];
	uint16_t port;

	assert_null(
		name_lookup_start(&r->resolver, "api.test", false, AF_INET, 8080, answer_cb, &a4));
	assert_null(
		name_lookup_start(&r->resolver, "api.test", false, AF_INET6, 8080, answer_cb, &a6));
	assert_int_equal(a4.calls, 1);
	assert_int_equal(a4.error, DNS_ERR_NONE);
	assert_true(a4.ttl_ms == UINT64_MAX);
	address_text(a4.addresses, text, sizeof(text), &port);
	assert_string_equal(text, "127.0.0.7");
	assert_int_equal(port, 8080);
	assert_int_equal(a6.calls, 1);
	address_text(a6.addresses, text, sizeof(text), &port);
	assert_string_equal(text, "::7");
	dns_addresses_free(a4.addresses);
	dns_addresses_free(a6.addresses);
}

static void test_localhost_is_loopback(void **state)
{
	struct resolvers *r = *state;
	const char *names[] = { "localhost", "LocalHost", "redis.localhost" };
	char text[INET6_ADDRSTRLEN];
	uint16_t port;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct answer a4 = { 0 }, a6 = { 0 };

		assert_null(name_lookup_start(&r->resolver, names[i], false, AF_INET, 6379,
					      answer_cb, &a4));
		assert_null(name_lookup_start(&r->resolver, names[i], false, AF_INET6, 6379,
					      answer_cb, &a6));
		assert_int_equal(a4.calls, 1);
		assert_int_equal(a4.error, DNS_ERR_NONE);
		assert_true(a4.ttl_ms == 0);
		address_text(a4.addresses, text, sizeof(text), &port);
		assert_string_equal(text, "127.0.0.1");
		assert_int_equal(port, 6379);
		address_text(a6.addresses, text, sizeof(text), &port);
		assert_string_equal(text, "::1");
		dns_addresses_free(a4.addresses);
		dns_addresses_free(a6.addresses);
	}
	/* the hosts file's answer first, when it names the name */
	{
		struct answer a = { 0 };

		assert_null(name_lookup_start(&r->resolver, "app.localhost", false, AF_INET, 1,
					      answer_cb, &a));
		address_text(a.addresses, text, sizeof(text), &port);
		assert_string_equal(text, "127.0.0.8");
		dns_addresses_free(a.addresses);
	}
	assert_false(name_is_localhost("localhost.test"));
	assert_false(name_is_localhost("notlocalhost"));
	assert_false(name_is_localhost(".localhost"));
}

static void test_other_names_are_asked_and_cancelled(void **state)
{
	struct resolvers *r = *state;
	struct answer a = { 0 };
	struct name_lookup *lookup;
	char long_label[80];

	lookup = name_lookup_start(&r->resolver, "elsewhere.test", false, AF_INET, 80, answer_cb,
				   &a);
	assert_non_null(lookup);
	assert_int_equal(a.calls, 0);
	name_lookup_cancel(lookup);
	/* the question stays out (so that a dead nameserver is seen to time
	 * out) until the resolver is to go: cancelled then, its callback comes
	 * from the loop and says nothing */
	event_base_loop(r->base, EVLOOP_NONBLOCK);
	assert_int_equal(a.calls, 0);
	name_lookup_cancel_unwaited();
	event_base_loop(r->base, EVLOOP_NONBLOCK);
	assert_int_equal(a.calls, 0);
	/* a label over 63 bytes is no question */
	memset(long_label, 'a', 70);
	strcpy(long_label + 70, ".test");
	assert_null(name_lookup_start(&r->resolver, long_label, false, AF_INET, 80, answer_cb, &a));
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.error, NAME_LOOKUP_NOT_ASKED);
	assert_null(a.addresses);
}

static void test_failure_words(void **state)
{
	(void)state;
	assert_string_equal(name_lookup_failure(DNS_ERR_REFUSED, DNS_ERR_REFUSED),
			    "the DNS server refused the query (REFUSED)");
	assert_string_equal(name_lookup_failure(DNS_ERR_NOTEXIST, DNS_ERR_TIMEOUT),
			    "no such name (NXDOMAIN)");
	/* no IPv4 address: the IPv6 lookup's error says why */
	assert_string_equal(
		name_lookup_failure(DNS_ERR_NODATA, DNS_ERR_TIMEOUT),
		"no answer from the DNS server (timed out, or SERVFAIL at every attempt)");
	assert_string_equal(name_lookup_failure(DNS_ERR_NODATA, DNS_ERR_NODATA),
			    "the name has no address (no A or AAAA record)");
	assert_string_equal(name_lookup_failure(NAME_LOOKUP_NOT_ASKED, NAME_LOOKUP_NOT_ASKED),
			    "the name cannot be asked of DNS (over 255 bytes, or a label over 63)");
}

/* A nameserver played by the test: UDP and TCP on one loopback port. */
struct server {
	struct event_base *base;
	struct evdns_base *dns;
	struct resolv_conf *conf;
	struct name_resolver resolver;
	int udp, tcp, conn;
};

static void server_start(struct server *srv, const char *resolv_conf)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	char address[64];
	int one = 1;

	memset(srv, 0, sizeof(*srv));
	srv->conn = -1;
	srv->tcp = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(srv->tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(srv->tcp, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(srv->tcp, 4), 0);
	getsockname(srv->tcp, (struct sockaddr *)&sin, &len);
	srv->udp = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	assert_int_equal(bind(srv->udp, (struct sockaddr *)&sin, sizeof(sin)), 0);
	srv->base = event_base_new();
	srv->dns = evdns_base_new(srv->base, 0);
	snprintf(address, sizeof(address), "127.0.0.1:%u", ntohs(sin.sin_port));
	assert_int_equal(evdns_base_nameserver_ip_add(srv->dns, address), 0);
	srv->conf = resolv_conf_new();
	resolv_conf_parse(srv->conf, resolv_conf, NULL);
	srv->resolver.base = srv->base;
	srv->resolver.dns = srv->dns;
	srv->resolver.conf = srv->conf;
}

static void server_stop(struct server *srv)
{
	evdns_base_free(srv->dns, 1);
	event_base_free(srv->base);
	resolv_conf_free(srv->conf);
	close(srv->udp);
	close(srv->tcp);
	if (srv->conn >= 0)
		close(srv->conn);
}

/* Run the loop until fd is readable (a question came). */
static void server_wait(struct server *srv, int fd)
{
	for (int i = 0; i < 2000; i++) {
		struct pollfd p = { fd, POLLIN, 0 };
		struct timeval tick = { 0, 1000 };

		if (poll(&p, 1, 0) == 1)
			return;
		event_base_loopexit(srv->base, &tick);
		event_base_loop(srv->base, 0);
	}
	fail_msg("no question came");
}

/* The question's name, lower case, dotted, from a query at q. */
static void question_name(const unsigned char *q, size_t len, char *name)
{
	size_t at = 12, n = 0;

	while (at < len && q[at] != 0) {
		if (n > 0)
			name[n++] = '.';
		for (size_t i = 0; i < q[at]; i++)
			name[n++] = (char)(q[at + 1 + i] | 0x20);
		at += 1 + q[at];
	}
	name[n] = '\0';
}

/* Answer one UDP question with rcode, TC set when truncated, no records;
 * its name into name. */
static void server_udp(struct server *srv, unsigned rcode, bool truncated, char *name)
{
	unsigned char q[512];
	struct sockaddr_storage peer;
	socklen_t peer_len = sizeof(peer);
	ssize_t n;

	server_wait(srv, srv->udp);
	n = recvfrom(srv->udp, q, sizeof(q), 0, (struct sockaddr *)&peer, &peer_len);
	assert_true(n > 12);
	question_name(q, (size_t)n, name);
	q[2] = 0x81 | (truncated ? 0x02 : 0);
	q[3] = (unsigned char)(0x80 | rcode);
	assert_int_equal(sendto(srv->udp, q, (size_t)n, 0, (struct sockaddr *)&peer, peer_len), n);
}

/* Accept the TCP connection and read its question; its name into name. */
static void server_tcp_question(struct server *srv, unsigned char *q, size_t *len, char *name)
{
	unsigned char head[2];

	server_wait(srv, srv->tcp);
	srv->conn = accept(srv->tcp, NULL, NULL);
	assert_true(srv->conn >= 0);
	server_wait(srv, srv->conn);
	assert_int_equal(recv(srv->conn, head, 2, MSG_WAITALL), 2);
	*len = (size_t)head[0] << 8 | head[1];
	assert_int_equal(recv(srv->conn, q, *len, MSG_WAITALL), (ssize_t)*len);
	question_name(q, *len, name);
}

static void test_search_list_walked_one_at_a_time(void **state)
{
	struct server srv;
	struct answer a = { 0 };
	char name[256];

	(void)state;
	server_start(&srv, "search corp.test\noptions ndots:2\n");
	assert_non_null(
		name_lookup_start(&srv.resolver, "svc.ns", false, AF_INET, 80, answer_cb, &a));
	server_udp(&srv, 3, false, name);
	assert_string_equal(name, "svc.ns.corp.test");
	/* NXDOMAIN: the next candidate, the name as it is */
	server_udp(&srv, 3, false, name);
	assert_string_equal(name, "svc.ns");
	while (a.calls == 0)
		event_base_loop(srv.base, EVLOOP_ONCE);
	assert_int_equal(a.error, DNS_ERR_NOTEXIST);
	server_stop(&srv);
}

static void test_truncated_asked_over_tcp(void **state)
{
	struct server srv;
	struct answer a = { 0 };
	unsigned char q[512], reply[2 + 1024];
	size_t len, n;
	char name[256];
	size_t count = 0;

	(void)state;
	server_start(&srv, "search corp.test\noptions ndots:5 timeout:2 attempts:1\n");
	assert_non_null(
		name_lookup_start(&srv.resolver, "big", false, AF_INET, 8080, answer_cb, &a));
	server_udp(&srv, 0, true, name);
	assert_string_equal(name, "big.corp.test");
	/* the same candidate again, over TCP, not the next one */
	server_tcp_question(&srv, q, &len, name);
	assert_string_equal(name, "big.corp.test");
	/* the question, then 40 A records of it, 127.0.1.1 to 127.0.1.40 */
	memcpy(reply + 2, q, len);
	reply[2 + 2] = 0x81;
	reply[2 + 3] = 0x80;
	reply[2 + 7] = 40;
	n = 2 + len;
	for (unsigned i = 1; i <= 40; i++) {
		static const unsigned char rr[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4 };

		memcpy(reply + n, rr, sizeof(rr));
		n += sizeof(rr);
		reply[n++] = 127;
		reply[n++] = 0;
		reply[n++] = 1;
		reply[n++] = (unsigned char)i;
	}
	reply[0] = (unsigned char)((n - 2) >> 8);
	reply[1] = (unsigned char)(n - 2);
	assert_int_equal(send(srv.conn, reply, n, 0), (ssize_t)n);
	while (a.calls == 0)
		event_base_loop(srv.base, EVLOOP_ONCE);
	assert_int_equal(a.error, DNS_ERR_NONE);
	assert_true(a.ttl_ms == 30000);
	for (const struct evutil_addrinfo *ai = a.addresses; ai != NULL; ai = ai->ai_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ai->ai_addr;

		assert_int_equal(ntohs(sin->sin_port), 8080);
		count++;
	}
	assert_int_equal(count, 40);
	dns_addresses_free(a.addresses);
	server_stop(&srv);
}

static void test_cancel_while_tcp_is_out(void **state)
{
	struct server srv;
	struct answer a = { 0 };
	struct name_lookup *lookup;
	unsigned char q[512];
	size_t len;
	char name[256];

	(void)state;
	server_start(&srv, "options timeout:5 attempts:1\n");
	lookup = name_lookup_start(&srv.resolver, "big.test", true, AF_INET6, 80, answer_cb, &a);
	assert_non_null(lookup);
	server_udp(&srv, 0, true, name);
	server_tcp_question(&srv, q, &len, name);
	assert_string_equal(name, "big.test");
	name_lookup_cancel(lookup);
	event_base_loop(srv.base, EVLOOP_NONBLOCK);
	assert_int_equal(a.calls, 0);
	server_stop(&srv);
}

static void test_tcp_failure_words(void **state)
{
	(void)state;
	assert_string_equal(name_lookup_failure(DNS_TCP_TIMEOUT, DNS_ERR_NODATA),
			    "the DNS answer was too large for UDP, and its retry over TCP got no "
			    "answer (timed out)");
	assert_string_equal(name_lookup_failure(DNS_ERR_NODATA, DNS_TCP_CONNECT_FAILED),
			    "the DNS answer was too large for UDP, and its retry over TCP could "
			    "not connect to the DNS server");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hosts_file_answers_at_once),
		cmocka_unit_test(test_localhost_is_loopback),
		cmocka_unit_test(test_other_names_are_asked_and_cancelled),
		cmocka_unit_test(test_failure_words),
		cmocka_unit_test(test_search_list_walked_one_at_a_time),
		cmocka_unit_test(test_truncated_asked_over_tcp),
		cmocka_unit_test(test_cancel_while_tcp_is_out),
		cmocka_unit_test(test_tcp_failure_words),
	};

	return cmocka_run_group_tests(tests, resolvers_setup, resolvers_teardown);
}
