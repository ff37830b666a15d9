#!/usr/bin/env python3
"""Scenario: access.allow_clients for IPv4 clients of an IPv6 listener.

Client: curl to 127.0.0.1 on a listener bound to the IPv4-mapped IPv6
address [::ffff:127.0.0.1], where the proxy sees the client as
::ffff:127.0.0.1.
Origin: echoes.
Must hold: such a client is matched against the IPv4 entries of
allow_clients: with [127.0.0.1/32] it is served, with [10.0.0.0/8] it gets
403 and the origin sees nothing.
"""

import harness as h

CONFIG = """\
listen:
  - address: "[::ffff:127.0.0.1]:@PORT0@"
    upstream: http://127.0.0.1:@ORIGIN@
access:
  allow_clients: [@ALLOW@]
limits:
  drain_timeout: 2s
"""


def scenario(t):
    origin = t.origin()

    @t.check("allow_clients [127.0.0.1/32] lets in 127.0.0.1 arriving as ::ffff:127.0.0.1")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port, ALLOW="127.0.0.1/32")
        r = h.curl("http://127.0.0.1:%d/echo?t=mapped-allowed" % proxy.port())
        h.eq(r.status, 200, "status (%r)" % r)
        h.ok(any("mapped-allowed" in q.target for q in origin.requests), "the origin got the request")

    @t.check("allow_clients [10.0.0.0/8] refuses it: 403, nothing at the origin")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port, ALLOW="10.0.0.0/8")
        r = h.curl("http://127.0.0.1:%d/echo?t=mapped-refused" % proxy.port())
        h.eq(r.status, 403, "status (%r)" % r)
        h.eq([q for q in origin.requests if "mapped-refused" in q.target], [], "requests at the origin")


h.run(scenario, __doc__)
