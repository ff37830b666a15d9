/* Unit tests for dns_message.c: the A or AAAA query's wire form, and the
 * strict reading of its answer: the ID and question must match (the name
 * in any letter case), the RCODE is the error, the addresses are those of
 * the name asked or of the end of its CNAME chain (in whatever order the
 * records come), the TTL the smallest along the chain; anything that does
 * not read so (a record past the end, a compression loop, an address of
 * the wrong size, a CNAME loop, TC set over TCP) is ill-formed. Run under
 * ASan, a read past the message fails too. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include <cmocka.h>

#include "dns_message.h"

/* A message being written. */
struct msg {
	unsigned char b[4096];
	size_t n;
};

static void put8(struct msg *m, unsigned v)
{
	m->b[m->n++] = (unsigned char)v;
}

static void put16(struct msg *m, unsigned v)
{
	put8(m, v >> 8);
	put8(m, v & 0xff);
}

static void put32(struct msg *m, uint32_t v)
{
	put16(m, v >> 16);
	put16(m, v & 0xffff);
}

/* name's labels and, unless pointer is nonzero, the root; else a
 * compression pointer to that offset after them */
static void put_name(struct msg *m, const char *name, unsigned pointer)
{
	while (*name != '\0') {
		const char *dot = strchr(name, '.');
		size_t len = dot != NULL ? (size_t)(dot - name) : strlen(name);

		put8(m, (unsigned)len);
		memcpy(m->b + m->n, name, len);
		m->n += len;
		name += len + (dot != NULL);
	}
	if (pointer != 0)
		put16(m, 0xc000 | pointer);
	else
		put8(m, 0);
}

/* The header and the question (at offset 12). */
static void put_head(struct msg *m, unsigned id, unsigned flags, unsigned ancount, const char *name,
		     unsigned qtype)
{
	m->n = 0;
	put16(m, id);
	put16(m, flags);
	put16(m, 1);
	put16(m, ancount);
	put16(m, 0);
	put16(m, 0);
	put_name(m, name, 0);
	put16(m, qtype);
	put16(m, 1);
}

/* A record whose owner is the question's name (a pointer to offset 12). */
static void put_a(struct msg *m, unsigned owner_pointer, uint32_t ttl, unsigned char last)
{
	put16(m, 0xc000 | owner_pointer);
	put16(m, DNS_MESSAGE_TYPE_A);
	put16(m, 1);
	put32(m, ttl);
	put16(m, 4);
	put8(m, 127);
	put8(m, 0);
	put8(m, 0);
	put8(m, last);
}

#define ANSWER 0x8180 /* QR, RD, RA, NOERROR */

static int read_answer(const struct msg *m, const char *name, unsigned qtype,
		       struct dns_message_answer *a)
{
	return dns_message_answer(m->b, m->n, 0x1234, name, (uint16_t)qtype, a);
}

static void test_query(void **state)
{
	unsigned char q[DNS_MESSAGE_QUERY_MAX];
	static const unsigned char want[] = { 0x12, 0x34, 0x01, 0x00, 0,   1,	0,   0, 0,
					      0,    0,	  0,	3,    'a', 'p', 'i', 4, 't',
					      'e',  's',  't',	0,    0,   28,	0,   1 };
	char name[300];

	(void)state;
	assert_int_equal(dns_message_query(q, 0x1234, "api.test", DNS_MESSAGE_TYPE_AAAA),
			 sizeof(want));
	assert_memory_equal(q, want, sizeof(want));
	/* no wire form: an empty label, one over 63, a name over 255 */
	assert_int_equal(dns_message_query(q, 1, "a..test", DNS_MESSAGE_TYPE_A), 0);
	memset(name, 'a', 64);
	strcpy(name + 64, ".test");
	assert_int_equal(dns_message_query(q, 1, name, DNS_MESSAGE_TYPE_A), 0);
	for (size_t i = 0; i < 128; i++)
		memcpy(name + 2 * i, "a.", 2);
	strcpy(name + 256, "b");
	assert_int_equal(dns_message_query(q, 1, name, DNS_MESSAGE_TYPE_A), 0);
}

static void test_forty_records(void **state)
{
	struct msg m;
	struct dns_message_answer a;

	(void)state;
	put_head(&m, 0x1234, ANSWER, 40, "big.test", DNS_MESSAGE_TYPE_A);
	for (unsigned i = 0; i < 40; i++)
		put_a(&m, 12, i == 17 ? 7 : 300, (unsigned char)(i + 1));
	assert_true(m.n > 512);
	/* the asked name in another letter case (evdns randomises it) */
	assert_int_equal(read_answer(&m, "BIG.Test", DNS_MESSAGE_TYPE_A, &a), DNS_ERR_NONE);
	assert_int_equal(a.count, 40);
	assert_int_equal(a.ttl, 7);
	assert_int_equal(a.addresses[0 * 4 + 3], 1);
	assert_int_equal(a.addresses[39 * 4 + 3], 40);
	free(a.addresses);
}

static void test_cname_chain(void **state)
{
	struct msg m;
	struct dns_message_answer a;
	size_t target;

	(void)state;
	/* svc.test A? -> the A record of the end of the chain first, then
	 * svc.test CNAME mid.test, mid.test CNAME end.test, and an A record
	 * of a name off the chain, which is not used */
	put_head(&m, 0x1234, ANSWER, 4, "svc.test", DNS_MESSAGE_TYPE_A);
	target = m.n;
	put_name(&m, "end.test", 0);
	put16(&m, DNS_MESSAGE_TYPE_A);
	put16(&m, 1);
	put32(&m, 600);
	put16(&m, 4);
	put32(&m, 0x0a000001);
	put_a(&m, 12, 900, 99); /* svc.test A: not the chain's end */
	put16(&m, 0xc00c);	/* svc.test CNAME mid.test */
	put16(&m, 5);
	put16(&m, 1);
	put32(&m, 60);
	put16(&m, 6);
	put_name(&m, "mid", (unsigned)target + 4); /* mid + .test of end.test */
	put_name(&m, "mid.test", 0);		   /* mid.test CNAME end.test */
	put16(&m, 5);
	put16(&m, 1);
	put32(&m, 0x80000000u); /* RFC 2181: taken as 0 */
	put16(&m, 2);
	put16(&m, 0xc000 | (unsigned)target);
	assert_int_equal(read_answer(&m, "svc.test", DNS_MESSAGE_TYPE_A, &a), DNS_ERR_NONE);
	assert_int_equal(a.count, 1);
	assert_int_equal(a.addresses[0], 10);
	assert_int_equal(a.ttl, 0);
	free(a.addresses);
}

static void test_errors_and_nodata(void **state)
{
	struct msg m;
	struct dns_message_answer a;

	(void)state;
	put_head(&m, 0x1234, 0x8183, 0, "gone.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "gone.test", DNS_MESSAGE_TYPE_A, &a), DNS_ERR_NOTEXIST);
	put_head(&m, 0x1234, 0x8185, 0, "gone.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "gone.test", DNS_MESSAGE_TYPE_A, &a), DNS_ERR_REFUSED);
	put_head(&m, 0x1234, 0x8182, 0, "gone.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "gone.test", DNS_MESSAGE_TYPE_A, &a),
			 DNS_ERR_SERVERFAILED);
	/* NOERROR with A records only, for an AAAA question: no data */
	put_head(&m, 0x1234, ANSWER, 1, "v4.test", DNS_MESSAGE_TYPE_AAAA);
	put_a(&m, 12, 60, 1);
	assert_int_equal(read_answer(&m, "v4.test", DNS_MESSAGE_TYPE_AAAA, &a), DNS_ERR_NODATA);
	assert_null(a.addresses);
}

static void test_ill_formed(void **state)
{
	struct msg m;
	struct dns_message_answer a;

	(void)state;
	/* another ID, a query not an answer, TC over TCP, another question */
	put_head(&m, 0x4321, ANSWER, 0, "x.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, 0x0100, 0, "x.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, ANSWER | 0x0200, 0, "x.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, ANSWER, 0, "y.test", DNS_MESSAGE_TYPE_A);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, ANSWER, 0, "x.test", DNS_MESSAGE_TYPE_AAAA);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	/* shorter than a header; a record cut short; ANCOUNT past the end */
	assert_int_equal(dns_message_answer(m.b, 11, 0x1234, "x.test", DNS_MESSAGE_TYPE_AAAA, &a),
			 DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, ANSWER, 1, "x.test", DNS_MESSAGE_TYPE_A);
	put_a(&m, 12, 60, 1);
	m.n -= 2;
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	put_head(&m, 0x1234, ANSWER, 2, "x.test", DNS_MESSAGE_TYPE_A);
	put_a(&m, 12, 60, 1);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	/* an owner name that points at itself */
	put_head(&m, 0x1234, ANSWER, 1, "x.test", DNS_MESSAGE_TYPE_A);
	put_a(&m, (unsigned)m.n, 60, 1);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	/* an A record of 5 bytes */
	put_head(&m, 0x1234, ANSWER, 1, "x.test", DNS_MESSAGE_TYPE_A);
	put_a(&m, 12, 60, 1);
	m.b[m.n - 5] = 5;
	put8(&m, 0);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	/* a CNAME loop: x.test -> x.test */
	put_head(&m, 0x1234, ANSWER, 1, "x.test", DNS_MESSAGE_TYPE_A);
	put16(&m, 0xc00c);
	put16(&m, 5);
	put16(&m, 1);
	put32(&m, 60);
	put16(&m, 2);
	put16(&m, 0xc00c);
	assert_int_equal(read_answer(&m, "x.test", DNS_MESSAGE_TYPE_A, &a), DNS_MESSAGE_MALFORMED);
	assert_null(a.addresses);
}

static void test_aaaa(void **state)
{
	struct msg m;
	struct dns_message_answer a;

	(void)state;
	put_head(&m, 0x1234, ANSWER, 1, "v6.test", DNS_MESSAGE_TYPE_AAAA);
	put16(&m, 0xc00c);
	put16(&m, DNS_MESSAGE_TYPE_AAAA);
	put16(&m, 1);
	put32(&m, 30);
	put16(&m, 16);
	for (unsigned i = 0; i < 16; i++)
		put8(&m, i == 15);
	assert_int_equal(read_answer(&m, "v6.test", DNS_MESSAGE_TYPE_AAAA, &a), DNS_ERR_NONE);
	assert_int_equal(a.count, 1);
	assert_int_equal(a.addresses[15], 1);
	assert_int_equal(a.ttl, 30);
	free(a.addresses);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query),	    cmocka_unit_test(test_forty_records),
		cmocka_unit_test(test_cname_chain), cmocka_unit_test(test_errors_and_nodata),
		cmocka_unit_test(test_ill_formed),  cmocka_unit_test(test_aaaa),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
