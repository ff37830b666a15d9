#!/usr/bin/env python3
"""Scenario: a request body that stops arriving for client_timeout before
any response has begun.

Client: raw sockets to a sidecar listener (client_timeout 1s) that each
send a head and only part of its body, then wait: a PUT (retryable, its
body kept for replay before the first try), a POST (not retryable, its
body streamed to the origin as it comes), a chunked PUT, and a PUT with
Expect: 100-continue that sends no body after the 100 Continue.
Origin: echoes.
Must hold: each gets 408 Request Timeout with Connection: close and a
one-line body (after the 100 Continue, for the last), then the
connection closes, as a head that stops arriving does: the client is
told the request timed out rather than left to take a bare close for a
crash (RFC 9110 section 15.5.9); the access line says 408; the origin
never gets a whole request. A body that arrives steadily with pauses
shorter than client_timeout is not cut.
"""

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  drain_timeout: 2s
  client_timeout: 1s
defaults:
  retry:
    max_attempts: 3
"""

BOUND = 1 + 5  # client_timeout plus a generous margin

CASES = [
    ("put", b"PUT /echo?t=put HTTP/1.1\r\nHost: a.example\r\nContent-Length: 100\r\n\r\nonly part", False),
    ("post", b"POST /echo?t=post HTTP/1.1\r\nHost: a.example\r\nContent-Length: 100\r\n\r\nonly part", False),
    ("chunked", b"PUT /echo?t=chunked HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"4\r\npart\r\n", False),
    ("expect", b"PUT /echo?t=expect HTTP/1.1\r\nHost: a.example\r\nExpect: 100-continue\r\n"
     b"Content-Length: 100\r\n\r\n", True),
]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG.replace("@ORIGIN@", str(origin.port)))

    for tag, data, interim in CASES:
        @t.check("%s: a body stalled for client_timeout gets 408, then the close" % tag)
        def _(tag=tag, data=data, interim=interim):
            with h.RawConn(proxy.port()) as c:
                c.send(data)
                if interim:
                    h.eq(c.read_head(timeout=5).status, 100, "interim response")
                h.ok(c.silent_for(0.3), "answered or closed within 0.3s: %r" % bytes(c.buf))
                r = c.read_response(timeout=BOUND, skip_1xx=False)
                h.check_error_response(r, 408)
                h.eq((r.header("Connection") or "").lower(), "close", "Connection field of the 408")
                h.ok(c.closed_within(BOUND), "connection still open %ss after the 408" % BOUND)
            fields = h.access_fields(proxy.access_one("t=" + tag))
            h.eq(fields.get("status"), "408", "access-log status (%r)" % fields)
            whole = [q for q in origin.requests if ("t=" + tag) in q.target and q.body_len == 100]
            h.eq(whole, [], "requests with their body at the origin")

    @t.check("a body sent with pauses shorter than client_timeout is not cut")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"PUT /echo?t=steady HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\n")
            for b in (b"a", b"b", b"c"):
                h.ok(c.silent_for(0.5), "answered or closed while the body arrived")
                c.send(b)
            r = c.read_response(timeout=10)
        h.eq(r.status, 200, "steady body (%r)" % r)


h.run(scenario, __doc__)
