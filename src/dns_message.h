#ifndef RETRYPROXY_DNS_MESSAGE_H
#define RETRYPROXY_DNS_MESSAGE_H

/*
 * DNS messages for the TCP retry of a truncated answer (dns_tcp.h): an A
 * or AAAA question, and its answer read strictly (RFC 1035 section 4.1):
 * the ID and the question must be the ones asked, the RCODE is the
 * answer's error, and the addresses are the records of the name asked or
 * of the end of the CNAME chain the answer gives for it. Anything that
 * does not read so is ill-formed, never read past its end.
 */

#include <stddef.h>
#include <stdint.h>

#define DNS_MESSAGE_TYPE_A 1
#define DNS_MESSAGE_TYPE_AAAA 28

/* The answer's error when it does not read as an answer to the question:
 * beside evdns's DNS_ERR_* codes (0 or more) and name_lookup.h's
 * NAME_LOOKUP_NOT_ASKED. */
#define DNS_MESSAGE_MALFORMED (-5)

/* A question's largest wire form: header, a name of 255 bytes, type and
 * class. */
#define DNS_MESSAGE_QUERY_MAX (12 + 255 + 4)

struct dns_message_answer {
	unsigned char *addresses; /* count addresses of 4 (A) or 16 (AAAA) bytes */
	size_t count;
	uint32_t ttl; /* the smallest along the chain, in seconds */
};

/* Write the query for name (no trailing dot) and qtype into out (at least
 * DNS_MESSAGE_QUERY_MAX bytes), recursion desired; its length, or 0 for a
 * name that has no wire form (over 255 bytes, an empty label or one over
 * 63). */
size_t dns_message_query(unsigned char *out, uint16_t id, const char *name, uint16_t qtype);

/* Read msg (len bytes, without TCP's length prefix) as the answer to the
 * query id for name and qtype: DNS_ERR_NONE with answer's addresses set
 * (free() them), DNS_ERR_NODATA when there are none, the RCODE's
 * DNS_ERR_*, or DNS_MESSAGE_MALFORMED. */
int dns_message_answer(const unsigned char *msg, size_t len, uint16_t id, const char *name,
		       uint16_t qtype, struct dns_message_answer *answer);

#endif
