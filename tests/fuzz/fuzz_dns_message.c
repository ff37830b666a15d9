/* The answer to a DNS question over TCP (dns_message.c), as a server that
 * sends anything at all may give it. The first input byte picks the
 * question (A or AAAA, and one of three names); the rest is the message,
 * whose ID is taken as the question's, so that the fuzzer gets past the
 * ID check. Whatever it says, the reading must stay inside the message
 * (ASan), end, and give a consistent result: addresses exactly when it
 * says DNS_ERR_NONE, at least one then, of the question's type's size;
 * and the same bytes read again give the same answer. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include "dns_message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "a.test", "svc.ns.svc.cluster.local", "A.Test" };
	struct dns_message_answer answer, again;
	uint16_t qtype, id;
	const char *name;
	int error;

	if (size < 3)
		return 0;
	qtype = data[0] & 1 ? DNS_MESSAGE_TYPE_AAAA : DNS_MESSAGE_TYPE_A;
	name = names[(data[0] >> 1) % 3];
	id = (uint16_t)(data[1] << 8 | data[2]);
	error = dns_message_answer(data + 1, size - 1, id, name, qtype, &answer);
	if (error == DNS_ERR_NONE) {
		size_t bytes = answer.count * (qtype == DNS_MESSAGE_TYPE_AAAA ? 16 : 4);

		if (answer.count == 0 || answer.addresses == NULL)
			abort();
		/* every byte of the addresses is there (ASan checks the
		 * size the count says) */
		for (size_t i = 0; i < bytes; i++)
			fuzz_sink += answer.addresses[i];
		if (answer.ttl > 0x7fffffffu)
			abort();
	} else if (answer.addresses != NULL || answer.count != 0) {
		abort();
	}
	if (error < 0 && error != DNS_MESSAGE_MALFORMED)
		abort();
	if (dns_message_answer(data + 1, size - 1, id, name, qtype, &again) != error ||
	    again.count != answer.count || again.ttl != answer.ttl ||
	    (answer.count > 0 &&
	     memcmp(again.addresses, answer.addresses,
		    answer.count * (qtype == DNS_MESSAGE_TYPE_AAAA ? 16 : 4)) != 0))
		abort();
	free(answer.addresses);
	free(again.addresses);
	return 0;
}
