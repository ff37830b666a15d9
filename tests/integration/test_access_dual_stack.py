#!/usr/bin/env python3
"""Scenario: access.allow_clients for IPv4 clients of an IPv6 listener.

Client: curl to 127.0.0.1 on a listener bound to the IPv4-mapped IPv6
address [::ffff:127.0.0.1], where the proxy sees the client as
::ffff:127.0.0.1.
Origin: echoes.
Must hold: such a client is matched against the IPv4 entries of
allow_clients: with [127.0.0.1/32] it is served, with [10.0.0.0/8] it gets
403 and the origin sees nothing; an IPv6 entry inside ::ffff:0:0/96 (the
client as the log names it, ["::ffff:127.0.0.0/104"]) lets it in too, while
["::ffff:10.0.0.0/104"] and ["::/0"] (no IPv4 network) refuse it.
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

    @t.check('allow_clients ["::ffff:127.0.0.0/104"] (as the log names it) lets it in')
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port, ALLOW='"::ffff:127.0.0.0/104"')
        r = h.curl("http://127.0.0.1:%d/echo?t=mapped-net" % proxy.port())
        h.eq(r.status, 200, "status (%r)" % r)
        h.ok(any("mapped-net" in q.target for q in origin.requests), "the origin got the request")

    for allow in ('"::ffff:10.0.0.0/104"', '"::/0"'):
        @t.check("allow_clients [%s] refuses it: 403, nothing at the origin" % allow)
        def _(allow=allow):
            proxy = t.proxy(CONFIG, ORIGIN=origin.port, ALLOW=allow)
            tag = "mapped-v6-%d" % len(allow)
            r = h.curl("http://127.0.0.1:%d/echo?t=%s" % (proxy.port(), tag))
            h.eq(r.status, 403, "status (%r)" % r)
            h.eq([q for q in origin.requests if tag in q.target], [], "requests at the origin")


h.run(scenario, __doc__)
