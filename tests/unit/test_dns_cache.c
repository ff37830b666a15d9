/* Unit tests for dns_cache.c: answers are found by name, port, family and
 * resolver until their end, a held entry outlives its drop, a forgotten
 * name is gone for every port and family, a clear leaves held entries to
 * their holders, and the oldest go first past the cap. Run under ASan, a leak or a double free fails too. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "dns_cache.h"

/* One numeric address as a resolver's answer would carry it. */
static struct evutil_addrinfo *test_address(const char *ip, const char *port)
{
	struct evutil_addrinfo hints;
	struct evutil_addrinfo *ai = NULL;
	struct evutil_addrinfo *copy;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = EVUTIL_AI_NUMERICHOST;
	assert_int_equal(evutil_getaddrinfo(ip, port, &hints, &ai), 0);
	/* the cache takes lists made its own way */
	copy = dns_addresses_copy(ai);
	evutil_freeaddrinfo(ai);
	return copy;
}

static void test_found_until_its_end(void **state)
{
	struct dns_cache *cache = dns_cache_new();
	struct dns_cache_entry *e;

	(void)state;
	e = dns_cache_put(cache, "api.test", 80, false, AF_INET, test_address("127.0.0.1", "80"),
			  1000);
	dns_cache_release(e);
	e = dns_cache_find(cache, "api.test", 80, false, AF_INET, 999);
	assert_non_null(e);
	assert_non_null(dns_cache_addresses(e));
	assert_int_equal(dns_cache_addresses(e)->ai_family, AF_INET);
	dns_cache_release(e);
	/* another port, family or resolver is another answer */
	assert_null(dns_cache_find(cache, "api.test", 81, false, AF_INET, 10));
	assert_null(dns_cache_find(cache, "api.test", 80, false, AF_INET6, 10));
	assert_null(dns_cache_find(cache, "api.test", 80, true, AF_INET, 10));
	assert_null(dns_cache_find(cache, "api.tes", 80, false, AF_INET, 10));
	/* at its end it is dropped */
	assert_null(dns_cache_find(cache, "api.test", 80, false, AF_INET, 1000));
	assert_int_equal(dns_cache_count(cache), 0);
	dns_cache_free(cache);
}

static void test_none_of_a_family(void **state)
{
	struct dns_cache *cache = dns_cache_new();
	struct dns_cache_entry *e;

	(void)state;
	dns_cache_release(dns_cache_put(cache, "v4only.test", 80, false, AF_INET6, NULL, 1000));
	e = dns_cache_find(cache, "v4only.test", 80, false, AF_INET6, 1);
	assert_non_null(e);
	assert_null(dns_cache_addresses(e));
	dns_cache_release(e);
	dns_cache_free(cache);
}

static void test_held_entry_outlives_its_drop(void **state)
{
	struct dns_cache *cache = dns_cache_new();
	struct dns_cache_entry *held;
	struct dns_cache_entry *e;

	(void)state;
	held = dns_cache_put(cache, "api.test", 80, false, AF_INET, test_address("127.0.0.1", "80"),
			     1000);
	/* a newer answer replaces it; its holder still reads the old one */
	e = dns_cache_put(cache, "api.test", 80, false, AF_INET, test_address("127.0.0.2", "80"),
			  1000);
	dns_cache_release(e);
	assert_int_equal(dns_cache_count(cache), 1);
	assert_int_equal(
		((struct sockaddr_in *)dns_cache_addresses(held)->ai_addr)->sin_addr.s_addr,
		htonl(0x7f000001));
	/* forgotten, and the cache freed, it is still the holder's */
	dns_cache_forget(cache, "api.test");
	assert_int_equal(dns_cache_count(cache), 0);
	dns_cache_free(cache);
	assert_int_equal(dns_cache_addresses(held)->ai_family, AF_INET);
	dns_cache_release(held);
}

static void test_forget_every_port_and_family(void **state)
{
	struct dns_cache *cache = dns_cache_new();

	(void)state;
	dns_cache_release(dns_cache_put(cache, "api.test", 80, false, AF_INET,
					test_address("127.0.0.1", "80"), 1000));
	dns_cache_release(dns_cache_put(cache, "api.test", 443, true, AF_INET6,
					test_address("::1", "443"), 1000));
	dns_cache_release(dns_cache_put(cache, "other.test", 80, false, AF_INET,
					test_address("127.0.0.3", "80"), 1000));
	dns_cache_forget(cache, "api.test");
	assert_int_equal(dns_cache_count(cache), 1);
	assert_null(dns_cache_find(cache, "api.test", 443, true, AF_INET6, 1));
	dns_cache_release(dns_cache_find(cache, "other.test", 80, false, AF_INET, 1));
	dns_cache_free(cache);
}

static void test_clear_keeps_held_entries(void **state)
{
	struct dns_cache *cache = dns_cache_new();
	struct dns_cache_entry *held;

	(void)state;
	held = dns_cache_put(cache, "api.test", 80, false, AF_INET, test_address("127.0.0.1", "80"),
			     1000);
	dns_cache_release(dns_cache_put(cache, "other.test", 80, false, AF_INET6, NULL, 1000));
	dns_cache_clear(cache);
	assert_int_equal(dns_cache_count(cache), 0);
	assert_null(dns_cache_find(cache, "other.test", 80, false, AF_INET6, 1));
	assert_int_equal(dns_cache_addresses(held)->ai_family, AF_INET);
	dns_cache_release(held);
	/* and it keeps answers again */
	dns_cache_release(dns_cache_put(cache, "api.test", 80, false, AF_INET, NULL, 1000));
	assert_int_equal(dns_cache_count(cache), 1);
	dns_cache_free(cache);
}

static void test_oldest_go_first(void **state)
{
	struct dns_cache *cache = dns_cache_new();
	char name[32];
	unsigned i;

	(void)state;
	for (i = 0; i < 1100; i++) {
		snprintf(name, sizeof(name), "host%u.test", i);
		dns_cache_release(dns_cache_put(cache, name, 80, false, AF_INET, NULL, 1000));
	}
	assert_int_equal(dns_cache_count(cache), 1024);
	assert_null(dns_cache_find(cache, "host0.test", 80, false, AF_INET, 1));
	assert_null(dns_cache_find(cache, "host75.test", 80, false, AF_INET, 1));
	dns_cache_release(dns_cache_find(cache, "host76.test", 80, false, AF_INET, 1));
	dns_cache_release(dns_cache_find(cache, "host1099.test", 80, false, AF_INET, 1));
	dns_cache_free(cache);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_found_until_its_end),
		cmocka_unit_test(test_none_of_a_family),
		cmocka_unit_test(test_held_entry_outlives_its_drop),
		cmocka_unit_test(test_forget_every_port_and_family),
		cmocka_unit_test(test_clear_keeps_held_entries),
		cmocka_unit_test(test_oldest_go_first),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
