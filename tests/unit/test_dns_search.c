/* Unit tests for resolv_conf.c and dns_search.c: resolv.conf read as
 * libevent 2.1's evdns reads it (a domain or search line starts a new
 * search list and puts ndots back to 1; the host name's domain when the
 * file gives none; timeout and attempts as evdns takes them), and the
 * candidates of a name in evdns's order: with ndots or more dots the name
 * first, else the search domains first and the name last; an absolute name
 * alone. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include <cmocka.h>

#include "dns_search.h"
#include "resolv_conf.h"

/* The candidates of name under conf, joined by spaces. */
static char *candidates(const struct resolv_conf *conf, const char *name, bool absolute)
{
	static char joined[1024];
	char **names;
	size_t count = dns_search_candidates(conf, name, absolute, &names);

	joined[0] = '\0';
	for (size_t i = 0; i < count; i++) {
		if (i > 0)
			strcat(joined, " ");
		strcat(joined, names[i]);
	}
	dns_search_free(names, count);
	return joined;
}

static void test_kubernetes_order(void **state)
{
	struct resolv_conf *conf = resolv_conf_new();

	(void)state;
	resolv_conf_parse(conf,
			  "nameserver 10.96.0.10\n"
			  "search ns.svc.cluster.local svc.cluster.local cluster.local\n"
			  "options ndots:5\n",
			  "pod-1");
	assert_int_equal(conf->ndots, 5);
	assert_int_equal(conf->domain_count, 3);
	/* fewer dots than ndots: the search domains first, the name last */
	assert_string_equal(candidates(conf, "myservice", false),
			    "myservice.ns.svc.cluster.local myservice.svc.cluster.local "
			    "myservice.cluster.local myservice");
	assert_string_equal(
		candidates(conf, "api.example.com", false),
		"api.example.com.ns.svc.cluster.local api.example.com.svc.cluster.local "
		"api.example.com.cluster.local api.example.com");
	/* ndots or more: the name first */
	assert_string_equal(candidates(conf, "a.b.c.d.e.f", false),
			    "a.b.c.d.e.f a.b.c.d.e.f.ns.svc.cluster.local "
			    "a.b.c.d.e.f.svc.cluster.local a.b.c.d.e.f.cluster.local");
	/* written with a trailing dot: the name alone */
	assert_string_equal(candidates(conf, "myservice", true), "myservice");
	/* no resolv.conf at all: the name alone */
	assert_string_equal(candidates(NULL, "myservice", false), "myservice");
	resolv_conf_free(conf);
}

static void test_ndots_one_default(void **state)
{
	struct resolv_conf *conf = resolv_conf_new();

	(void)state;
	resolv_conf_parse(conf, "search corp.test\n", NULL);
	assert_int_equal(conf->ndots, 1);
	assert_string_equal(candidates(conf, "svc", false), "svc.corp.test svc");
	assert_string_equal(candidates(conf, "svc.ns", false), "svc.ns svc.ns.corp.test");
	resolv_conf_free(conf);
}

static void test_evdns_reading_rules(void **state)
{
	struct resolv_conf *conf = resolv_conf_new();

	(void)state;
	/* an options line before the search line: evdns's search line starts
	 * a new search state, whose ndots is 1 */
	resolv_conf_parse(conf, "options ndots:4\nsearch a.test\n", NULL);
	assert_int_equal(conf->ndots, 1);
	/* the last domain or search line wins; leading dots go; a domain
	 * written with a trailing dot asks the same name */
	resolv_conf_parse(conf, "search x.test y.test\ndomain .z.test\n", NULL);
	assert_int_equal(conf->domain_count, 1);
	assert_string_equal(conf->domains[0], "z.test");
	resolv_conf_parse(conf, "search q.test.\noptions ndots:0\n", NULL);
	assert_string_equal(candidates(conf, "svc", false), "svc svc.q.test");
	/* no search or domain line: the host name's domain, ndots back to 1 */
	resolv_conf_parse(conf, "options ndots:3\n", "node7.dc1.example");
	assert_int_equal(conf->ndots, 1);
	assert_int_equal(conf->domain_count, 1);
	assert_string_equal(conf->domains[0], "dc1.example");
	/* and none when the host name has no dot */
	resolv_conf_parse(conf, "", "node7");
	assert_int_equal(conf->domain_count, 0);
	assert_string_equal(candidates(conf, "svc", false), "svc");
	/* keywords are whole words, options evdns's own */
	resolv_conf_parse(conf, "searchx a.test\n\tsearch  b.test\tc.test\n", NULL);
	assert_string_equal(candidates(conf, "svc", false), "svc.b.test svc.c.test svc");
	resolv_conf_free(conf);
}

static void test_timeout_and_attempts(void **state)
{
	struct resolv_conf *conf = resolv_conf_new();

	(void)state;
	assert_int_equal(conf->timeout_ms, 5000);
	assert_int_equal(conf->attempts, 3);
	resolv_conf_parse(conf, "options timeout:1.5 attempts:1\n", NULL);
	assert_int_equal(conf->timeout_ms, 1500);
	assert_int_equal(conf->attempts, 1);
	/* what evdns refuses leaves the default: under a millisecond, not a
	 * number; attempts over 255 are 255 */
	resolv_conf_parse(conf, "options timeout:0 attempts:x\n", NULL);
	assert_int_equal(conf->timeout_ms, 5000);
	assert_int_equal(conf->attempts, 3);
	resolv_conf_parse(conf, "options timeout:2s attempts:900\n", NULL);
	assert_int_equal(conf->timeout_ms, 5000);
	assert_int_equal(conf->attempts, 255);
	/* max-inflight: the proxy's 1024 unless set, clipped to 1..65000 as
	 * evdns clips it, a value that is no number ignored */
	assert_int_equal(conf->max_inflight, 1024);
	resolv_conf_parse(conf, "options max-inflight:4\n", NULL);
	assert_int_equal(conf->max_inflight, 4);
	resolv_conf_parse(conf, "options max-inflight:0\n", NULL);
	assert_int_equal(conf->max_inflight, 1);
	resolv_conf_parse(conf, "options max-inflight:99999\n", NULL);
	assert_int_equal(conf->max_inflight, 65000);
	resolv_conf_parse(conf, "options max-inflight:x\n", NULL);
	assert_int_equal(conf->max_inflight, 1024);
	/* a file that cannot be read: the defaults */
	resolv_conf_read(conf, "/nonexistent/resolv.conf");
	assert_int_equal(conf->timeout_ms, 5000);
	assert_int_equal(conf->ndots, 1);
	assert_int_equal(conf->max_inflight, 1024);
	resolv_conf_free(conf);
}

static void test_which_errors_go_on(void **state)
{
	(void)state;
	assert_true(dns_search_goes_on(DNS_ERR_NOTEXIST));
	assert_true(dns_search_goes_on(DNS_ERR_NODATA));
	assert_true(dns_search_goes_on(DNS_ERR_REFUSED));
	assert_true(dns_search_goes_on(DNS_ERR_FORMAT));
	assert_true(dns_search_goes_on(DNS_ERR_NOTIMPL));
	/* evdns takes SERVFAIL as a timeout, which ends the walk */
	assert_false(dns_search_goes_on(DNS_ERR_SERVERFAILED));
	assert_false(dns_search_goes_on(DNS_ERR_TIMEOUT));
	assert_false(dns_search_goes_on(DNS_ERR_CANCEL));
	assert_false(dns_search_goes_on(DNS_ERR_SHUTDOWN));
	assert_false(dns_search_goes_on(DNS_ERR_NONE));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kubernetes_order),
		cmocka_unit_test(test_ndots_one_default),
		cmocka_unit_test(test_evdns_reading_rules),
		cmocka_unit_test(test_timeout_and_attempts),
		cmocka_unit_test(test_which_errors_go_on),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
