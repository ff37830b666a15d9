#!/usr/bin/env python3
"""Scenario: request and response heads that arrive in pieces, so that the
proxy holds them in more than one of its input blocks. The proxy parses a
head where its input's first block holds it and copies the window together
only when the head runs past that block; this checks that path.

Client: raw sockets to a sidecar listener. Origin: a raw socket server of
this file. Each response head carries an X-Big field of 3, 20 or 60 KiB
and is written in two pieces 50 ms apart, cut 3,000 bytes in (inside the
proxy's first block), with a body of 100,000 pattern bytes behind it; one
head is broken (a bare LF) after the cut, one is 70 KiB (over
max_header_bytes, 64 KiB) in three pieces. Each request head carries a
Cookie of 3, 20 or 60 KiB, is sent the same way and has a 100,000-byte
body; the origin reports what it received.
Must hold: every good response reaches the client whole (the X-Big value
and the body byte for byte); the broken and the oversized response heads
are a 502, not a hang; with max_header_bytes 1MiB, over the upstream
input's usual 256 KiB, a 300 KiB response head reaches the client whole
(not a stall until try_timeout); every good request reaches the origin whole (the
Cookie and the body's sha256); a request head broken after the cut is a
400 and never reaches the origin; the proxy keeps serving.
"""

import hashlib
import time

import harness as h
from rawserver import RawServer, read_head

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  try_timeout: 5s
defaults:
  retry:
    max_attempts: 1
"""

CUT = 3000
BODY = bytes(i % 251 for i in range(100000))
SIZES = (3, 20, 60)


def big_value(kib):
    return b"v" * (kib * 1024)


def response_pieces(kind):
    """The pieces of the response a path names, written 50 ms apart."""
    if kind == "oversized":
        head = b"HTTP/1.1 200 OK\r\nX-Big: " + big_value(70) + b"\r\nContent-Length: 5\r\n\r\n"
        third = len(head) // 3
        return [head[:third], head[third:2 * third], head[2 * third:] + b"hello"]
    if kind == "broken":
        head = (b"HTTP/1.1 200 OK\r\nX-Big: " + big_value(20) + b"\r\nX-Bad: a\nX-Next: b\r\n"
                b"Content-Length: 5\r\n\r\n")
        return [head[:CUT], head[CUT:] + b"hello"]
    kib = int(kind)
    head = (b"HTTP/1.1 200 OK\r\nX-Big: " + big_value(kib) + b"\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY))
    return [head[:CUT], head[CUT:] + BODY]


class Origin(RawServer):
    """Answers /resp/<kind> with response_pieces(kind) and /req with what
    it received: the Cookie's length and the body's sha256. Each
    connection serves one request."""

    def __init__(self):
        self.requests = []
        super().__init__(conn_timeout=10)

    def serve(self, conn, cid):
        buf = read_head(conn)
        if b"\r\n\r\n" not in buf:
            return
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        target = lines[0].split(b" ")[1].decode("latin-1")
        fields = {}
        for ln in lines[1:]:
            name, _, value = ln.partition(b":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields.get(b"content-length", b"0"))
        while len(body) < length:
            data = conn.recv(65536)
            if not data:
                return
            body += data
        with self._lock:
            self.requests.append(target)
        if target.startswith("/resp/"):
            for i, piece in enumerate(response_pieces(target.rsplit("/", 1)[1])):
                if i:
                    time.sleep(0.05)
                conn.sendall(piece)
        else:
            report = b"cookie=%d sha=%s" % (len(fields.get(b"cookie", b"")),
                                            hashlib.sha256(body).hexdigest().encode())
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                         % len(report) + report)
        time.sleep(0.1)

    def seen(self, target):
        with self._lock:
            return self.requests.count(target)


def send_in_pieces(conn, data, cut):
    conn.send(data[:cut])
    time.sleep(0.05)
    conn.send(data[cut:])


def scenario(t):
    origin = Origin()
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    for kib in SIZES:
        @t.check("a response head with a %d KiB field, in two pieces: the client gets it whole" % kib)
        def _(kib=kib):
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request("GET", "/resp/%d" % kib, "a.example"))
                r = c.read_response()
            h.eq(r.status, 200, "status")
            h.eq(r.header("X-Big"), big_value(kib).decode(), "the X-Big value")
            h.eq(len(r.body), len(BODY), "body length")
            h.ok(r.body == BODY, "the body differs from what the origin sent")

    # max_header_bytes over the upstream input's usual limit (256 KiB)
    wide = t.proxy(CONFIG.replace("limits:\n", "limits:\n  max_header_bytes: 1MiB\n"),
                   ORIGIN=origin.port)

    @t.check("max_header_bytes 1MiB: a response head of 300 KiB reaches the client whole")
    def _():
        with h.RawConn(wide.port(), timeout=15) as c:
            c.send(h.request("GET", "/resp/300", "a.example"))
            r = c.read_response()
        h.eq(r.status, 200, "status")
        h.eq(len(r.header("X-Big") or ""), 300 * 1024, "the X-Big value's length")
        h.ok(r.body == BODY, "the body differs from what the origin sent")

    for kind, what in (("broken", "broken after the cut (a bare LF)"),
                       ("oversized", "of 70 KiB, over max_header_bytes, in three pieces")):
        @t.check("a response head %s: 502, not a hang" % what)
        def _(kind=kind):
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request("GET", "/resp/%s" % kind, "a.example"))
                r = c.read_response()
            h.check_error_response(r, 502)

    for kib in SIZES:
        @t.check("a request head with a %d KiB Cookie and a body, in two pieces: the origin gets both whole"
                 % kib)
        def _(kib=kib):
            data = h.request("POST", "/req", "a.example", headers=[("Cookie", big_value(kib).decode())],
                             body=BODY)
            with h.RawConn(proxy.port(), timeout=10) as c:
                send_in_pieces(c, data, CUT)
                r = c.read_response()
            h.eq(r.status, 200, "status")
            h.eq(r.body.decode(), "cookie=%d sha=%s" % (kib * 1024, hashlib.sha256(BODY).hexdigest()),
                 "what the origin received")

    @t.check("a request head broken after the cut: 400, never at the origin")
    def _():
        data = (b"GET /req-broken HTTP/1.1\r\nHost: a.example\r\nCookie: " + big_value(20)
                + b"\r\nX-Bad: a\nX-Next: b\r\n\r\n")
        with h.RawConn(proxy.port(), timeout=10) as c:
            send_in_pieces(c, data, CUT)
            r = c.read_response()
        h.check_error_response(r, 400)
        time.sleep(0.2 * h.SLOW)
        h.eq(origin.seen("/req-broken"), 0, "requests at the origin")

    @t.check("the proxy still serves after all of that")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/resp/3", "a.example"))
            r = c.read_response()
        h.eq(r.status, 200, "status")
        h.ok(proxy.alive(), "the proxy exited")


h.run(scenario, __doc__, timeout=100)
