#include "dns_message.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include "xmalloc.h"

#define DNS_MESSAGE_HEADER 12
#define DNS_MESSAGE_CLASS_IN 1
#define DNS_MESSAGE_TYPE_CNAME 5
#define DNS_MESSAGE_NAME_MAX 255
/* more pointers than a 255-byte name can have labels is a loop */
#define DNS_MESSAGE_MAX_POINTERS 128
/* a CNAME chain longer than this is taken for a loop */
#define DNS_MESSAGE_MAX_CHAIN 16
/* RFC 2181 section 8: a TTL with the top bit set is taken as 0 */
#define DNS_MESSAGE_TTL_MAX 0x7fffffffu

static uint16_t dns_message_u16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t dns_message_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* name's wire form (labels, then the root's 0) into out; its length, or 0 */
static size_t dns_message_encode_name(unsigned char *out, const char *name)
{
	size_t len = 0;
	const char *label = name;

	if (*name == '\0') {
		out[0] = 0;
		return 1;
	}
	for (;;) {
		const char *dot = strchr(label, '.');
		size_t n = dot != NULL ? (size_t)(dot - label) : strlen(label);

		if (n == 0 || n > 63 || len + 1 + n + 1 > DNS_MESSAGE_NAME_MAX)
			return 0;
		out[len++] = (unsigned char)n;
		memcpy(out + len, label, n);
		len += n;
		if (dot == NULL)
			break;
		label = dot + 1;
	}
	out[len++] = 0;
	return len;
}

size_t dns_message_query(unsigned char *out, uint16_t id, const char *name, uint16_t qtype)
{
	size_t name_len = dns_message_encode_name(out + DNS_MESSAGE_HEADER, name);
	unsigned char *p;

	if (name_len == 0)
		return 0;
	memset(out, 0, DNS_MESSAGE_HEADER);
	out[0] = (unsigned char)(id >> 8);
	out[1] = (unsigned char)id;
	out[2] = 0x01; /* RD */
	out[5] = 1;    /* QDCOUNT */
	p = out + DNS_MESSAGE_HEADER + name_len;
	p[0] = (unsigned char)(qtype >> 8);
	p[1] = (unsigned char)qtype;
	p[2] = 0;
	p[3] = DNS_MESSAGE_CLASS_IN;
	return DNS_MESSAGE_HEADER + name_len + 4;
}

/* Read the name at *pos (compression pointers followed) into out as its
 * uncompressed wire form; *pos moves past it where it is written. False
 * for one that runs past the message, loops, is over 255 bytes or has a
 * label type other than plain and pointer. */
static bool dns_message_read_name(const unsigned char *msg, size_t len, size_t *pos,
				  unsigned char *out, size_t *out_len)
{
	size_t at = *pos, n = 0;
	unsigned pointers = 0;
	bool jumped = false;

	for (;;) {
		unsigned char label;

		if (at >= len)
			return false;
		label = msg[at];
		if ((label & 0xc0) == 0xc0) {
			if (at + 1 >= len || ++pointers > DNS_MESSAGE_MAX_POINTERS)
				return false;
			if (!jumped)
				*pos = at + 2;
			jumped = true;
			at = (size_t)(label & 0x3f) << 8 | msg[at + 1];
			continue;
		}
		if (label & 0xc0)
			return false;
		if (n + 1 + label > DNS_MESSAGE_NAME_MAX || at + 1 + label > len)
			return false;
		memcpy(out + n, msg + at, (size_t)label + 1);
		n += (size_t)label + 1;
		at += (size_t)label + 1;
		if (label == 0)
			break;
	}
	if (!jumped)
		*pos = at;
	*out_len = n;
	return true;
}

/* Two wire-form names alike but for ASCII case. */
static bool dns_message_same_name(const unsigned char *a, size_t a_len, const unsigned char *b,
				  size_t b_len)
{
	if (a_len != b_len)
		return false;
	for (size_t i = 0; i < a_len; i++) {
		unsigned char x = a[i], y = b[i];

		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x + 32);
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y + 32);
		if (x != y)
			return false;
	}
	return true;
}

static int dns_message_rcode_error(unsigned rcode)
{
	switch (rcode) {
	case 1:
		return DNS_ERR_FORMAT;
	case 2:
		return DNS_ERR_SERVERFAILED;
	case 3:
		return DNS_ERR_NOTEXIST;
	case 4:
		return DNS_ERR_NOTIMPL;
	case 5:
		return DNS_ERR_REFUSED;
	default:
		return DNS_ERR_UNKNOWN;
	}
}

/* One answer record, its owner name in wire form. */
struct dns_message_record {
	unsigned char owner[DNS_MESSAGE_NAME_MAX];
	size_t owner_len;
	uint16_t type, class;
	uint32_t ttl;
	size_t rdata, rdlength; /* offset into the message */
};

static bool dns_message_read_record(const unsigned char *msg, size_t len, size_t *pos,
				    struct dns_message_record *rr)
{
	if (!dns_message_read_name(msg, len, pos, rr->owner, &rr->owner_len))
		return false;
	if (*pos + 10 > len)
		return false;
	rr->type = dns_message_u16(msg + *pos);
	rr->class = dns_message_u16(msg + *pos + 2);
	rr->ttl = dns_message_u32(msg + *pos + 4);
	if (rr->ttl > DNS_MESSAGE_TTL_MAX)
		rr->ttl = 0;
	rr->rdlength = dns_message_u16(msg + *pos + 8);
	rr->rdata = *pos + 10;
	if (rr->rdata + rr->rdlength > len)
		return false;
	*pos = rr->rdata + rr->rdlength;
	return true;
}

int dns_message_answer(const unsigned char *msg, size_t len, uint16_t id, const char *name,
		       uint16_t qtype, struct dns_message_answer *answer)
{
	unsigned char asked[DNS_MESSAGE_NAME_MAX], question[DNS_MESSAGE_NAME_MAX];
	unsigned char target[DNS_MESSAGE_NAME_MAX];
	size_t asked_len, question_len, target_len, pos, answers_at;
	size_t rdata_size = qtype == DNS_MESSAGE_TYPE_AAAA ? 16 : 4;
	unsigned ancount, flags;
	uint32_t ttl = DNS_MESSAGE_TTL_MAX;
	struct dns_message_record rr;

	memset(answer, 0, sizeof(*answer));
	asked_len = dns_message_encode_name(asked, name);
	if (asked_len == 0 || len < DNS_MESSAGE_HEADER)
		return DNS_MESSAGE_MALFORMED;
	flags = dns_message_u16(msg + 2);
	/* an answer (QR), to a standard query, whole (TC clear: over TCP
	 * nothing is left to retry with), with the question asked */
	if (dns_message_u16(msg) != id || !(flags & 0x8000) || (flags & 0x7800) != 0 ||
	    (flags & 0x0200) || dns_message_u16(msg + 4) != 1)
		return DNS_MESSAGE_MALFORMED;
	ancount = dns_message_u16(msg + 6);
	pos = DNS_MESSAGE_HEADER;
	if (!dns_message_read_name(msg, len, &pos, question, &question_len) || pos + 4 > len ||
	    !dns_message_same_name(question, question_len, asked, asked_len) ||
	    dns_message_u16(msg + pos) != qtype ||
	    dns_message_u16(msg + pos + 2) != DNS_MESSAGE_CLASS_IN)
		return DNS_MESSAGE_MALFORMED;
	pos += 4;
	if ((flags & 0x000f) != 0)
		return dns_message_rcode_error(flags & 0x000f);
	answers_at = pos;
	/* every record must read, whatever it is */
	for (unsigned i = 0; i < ancount; i++)
		if (!dns_message_read_record(msg, len, &pos, &rr))
			return DNS_MESSAGE_MALFORMED;
	/* follow the CNAME chain from the name asked, wherever in the section
	 * its links are */
	memcpy(target, asked, asked_len);
	target_len = asked_len;
	for (unsigned links = 0;; links++) {
		bool followed = false;

		pos = answers_at;
		for (unsigned i = 0; i < ancount && !followed; i++) {
			size_t rdata_pos;

			dns_message_read_record(msg, len, &pos, &rr);
			if (rr.type != DNS_MESSAGE_TYPE_CNAME || rr.class != DNS_MESSAGE_CLASS_IN ||
			    !dns_message_same_name(rr.owner, rr.owner_len, target, target_len))
				continue;
			rdata_pos = rr.rdata;
			if (!dns_message_read_name(msg, rr.rdata + rr.rdlength, &rdata_pos, target,
						   &target_len) ||
			    rdata_pos != rr.rdata + rr.rdlength)
				return DNS_MESSAGE_MALFORMED;
			if (rr.ttl < ttl)
				ttl = rr.ttl;
			followed = true;
		}
		if (!followed)
			break;
		if (links == DNS_MESSAGE_MAX_CHAIN)
			return DNS_MESSAGE_MALFORMED;
	}
	pos = answers_at;
	for (unsigned i = 0; i < ancount; i++) {
		dns_message_read_record(msg, len, &pos, &rr);
		if (rr.type != qtype || rr.class != DNS_MESSAGE_CLASS_IN ||
		    !dns_message_same_name(rr.owner, rr.owner_len, target, target_len))
			continue;
		if (rr.rdlength != rdata_size) {
			free(answer->addresses);
			memset(answer, 0, sizeof(*answer));
			return DNS_MESSAGE_MALFORMED;
		}
		answer->addresses = xrealloc(answer->addresses, (answer->count + 1) * rdata_size);
		memcpy(answer->addresses + answer->count * rdata_size, msg + rr.rdata, rdata_size);
		answer->count++;
		if (rr.ttl < ttl)
			ttl = rr.ttl;
	}
	if (answer->count == 0)
		return DNS_ERR_NODATA;
	answer->ttl = ttl;
	return DNS_ERR_NONE;
}
