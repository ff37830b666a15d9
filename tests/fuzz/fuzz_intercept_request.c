/* Requests inside an intercepted tunnel: the decrypted bytes (or the plain
 * HTTP of a tunnel whose client spoke no TLS) go through the same strict
 * parser, and then the tunnel's own rule (no CONNECT; an absolute-form
 * target naming the tunnel's origin, https (http without TLS) and its host
 * and port; the Host the tunnel's host and port). Whatever the bytes, a request
 * the rule lets through names the tunnel's host and port or none, in its
 * Host and in an absolute-form target; one it refuses (400, or 421 for a
 * target naming another origin) says why. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"
#include "route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http1_head fuzz_head;

/* Tunnel hosts as CONNECT gives them: a name, IPv4, IPv6 (no brackets). */
static const char *const fuzz_tunnel_hosts[] = {
	"api.example.com",
	"127.0.0.1",
	"::1",
	"localhost",
};

/* Their ports: the https default, the http one, and another. */
static const uint16_t fuzz_tunnel_ports[] = { 443, 80, 8443 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct http1_limits limits = { .max_head_bytes = 8192, .max_target_bytes = 2048 };
	struct http1_framing framing;
	enum http1_error error;
	const char *tunnel;
	uint16_t port;
	bool tls;
	char reason[256];
	int status;

	if (size < 1)
		return 0;
	/* the first byte picks the tunnel; the rest is what the client sent */
	tunnel = fuzz_tunnel_hosts[data[0] %
				   (sizeof(fuzz_tunnel_hosts) / sizeof(fuzz_tunnel_hosts[0]))];
	port = fuzz_tunnel_ports[(data[0] / 4) % 3];
	tls = (data[0] / 16) % 2 == 0;
	if (http1_parse_request_head((const char *)data + 1, size - 1, &limits, &fuzz_head,
				     &error) != HTTP1_PARSE_DONE ||
	    http1_request_framing(&fuzz_head, &framing, &error) < 0)
		return 0;
	reason[0] = '\0';
	status =
		route_check_tunnel(tunnel, port, tls, &fuzz_head, &framing, reason, sizeof(reason));
	if (status == 0) {
		const struct http1_target *t = &fuzz_head.parsed_target;

		if (t->form == HTTP1_TARGET_AUTHORITY)
			abort();
		if (t->form == HTTP1_TARGET_ABSOLUTE &&
		    (t->tls != tls || t->port != port ||
		     !route_same_host(t->host, t->host_len, tunnel, strlen(tunnel))))
			abort();
		if (framing.host_name != NULL &&
		    (!route_same_host(framing.host_name, framing.host_name_len, tunnel,
				      strlen(tunnel)) ||
		     (framing.host_port != 0 ? framing.host_port
		      : tls		     ? 443
					     : 80) != port))
			abort();
	} else if ((status != 400 && status != 421) || reason[0] == '\0') {
		abort();
	}
	return 0;
}
