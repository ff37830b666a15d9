#!/usr/bin/env python3
"""Scenario: a chunked body whose framing takes it past replay_buffer before
its data passes max_body_bytes is still read whole before any try.

Client: raw sockets to a sidecar listener with replay_buffer 64KiB and
max_body_bytes 64KiB (with the limit at most replay_buffer, a chunked body
is read whole before the first try: README, "Limits"). A
POST (not idempotent) and a PUT (idempotent, max_attempts 3) send 80 chunks
of 1 KiB (80 KiB of data, over the limit); their first piece is 64 KiB and a
few bytes of the wire, over replay_buffer with its chunk lines while its
data is still under the limit, and the rest follows after a pause. Then a
PUT of 63.5 KiB of data in 256-byte chunks, over replay_buffer on the wire and
under the limit, sent the same way.
Origin: echoes what it got.
Must hold: each body over the limit gets 413 with Retry-Attempts: 0, the
access line says attempts 0, and no connection reaches the origin; the body
under the limit reaches the origin once, whole and byte-exact, with 200 and
Retry-Attempts: 1.
"""

import hashlib
import json
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log:
  format: json
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
  max_body_bytes: 64KiB
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
"""

KiB = 1024


def chunked(data_len, size):
    data = bytes((i * 7) & 0xff for i in range(data_len))
    body = b"".join(b"%x\r\n" % len(data[i:i + size]) + data[i:i + size] + b"\r\n"
                    for i in range(0, data_len, size))
    return data, body + b"0\r\n\r\n"


def send_in_two(c, head, body):
    # the first piece passes replay_buffer with its chunk lines, not with its data
    c.send(head + body[:64 * KiB + 64])
    time.sleep(0.5)
    c.send(body[64 * KiB + 64:])


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def refused(method, tag):
        before = len(origin.connections)
        _, body = chunked(80 * KiB, KiB)
        with h.RawConn(proxy.port()) as c:
            send_in_two(c, b"%s /echo?t=%s HTTP/1.1\r\nHost: a.example\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n" % (method, tag), body)
            r = c.read_response(timeout=10)
        h.check_error_response(r, 413)
        h.eq(r.header("Retry-Attempts"), "0", "Retry-Attempts of a refused request")
        entry = proxy.access_one("t=" + tag.decode())
        h.eq((entry["status"], entry["attempts"]), (413, 0), "the access line's status, attempts")
        time.sleep(0.3)
        h.eq(len(origin.connections), before, "connections that reached the origin")

    @t.check("a chunked POST over max_body_bytes, over replay_buffer first by its framing: "
             "413, Retry-Attempts: 0, nothing reaches the origin")
    def _():
        refused(b"POST", b"post")

    @t.check("a chunked PUT (kept for a retry) the same")
    def _():
        refused(b"PUT", b"put")

    @t.check("a chunked PUT under the limit, over replay_buffer by its framing: once, byte-exact")
    def _():
        data, body = chunked(63 * KiB + 512, 256)
        h.ok(len(body) > 64 * KiB + 64, "body size on the wire %d" % len(body))
        with h.RawConn(proxy.port()) as c:
            send_in_two(c, b"PUT /echo?t=under HTTP/1.1\r\nHost: a.example\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n", body)
            r = c.read_response(timeout=10)
        h.eq(r.status, 200, "status (%r)" % r)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]),
             (len(data), hashlib.sha256(data).hexdigest()), "body at the origin")
        h.eq(len([q for q in origin.requests_for("/echo") if q.target.endswith("t=under")]), 1,
             "requests the origin got")


h.run(scenario, __doc__)
