#!/usr/bin/env python3
"""Scenario: pooled connections the upstream closes as a request arrives
(its keep-alive timeout racing the proxy's reuse).

Client: curl through a forward listener: a GET to fill the pool, then PUTs
of 1 MiB (Content-Length, then chunked).
Origin: a raw server where every connection answers its first request
(200, keep-alive, the body's length) and closes, without answering, as its
second request arrives: every pooled connection is stale.
Proxy: replay_buffer 64KiB, no spool, max_attempts 3.
Must hold:
- a body that cannot be sent again (over replay_buffer, not spooled) never
  goes on a pooled connection: both PUTs get 200 from a new connection,
  whole (the origin counts 1 MiB), with Retry-Attempts 1 (before, the
  stale connection it took gave the client a 502).
"""

import threading

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s, replay_buffer: 64KiB, spool_max: 0 }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 2s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


def read_body(conn, lines, rest):
    """The request body after a head of these lines (Content-Length or
    chunked), and what follows it; (None, b"") at EOF."""
    length = int(rawserver.field(lines, b"content-length") or 0)
    chunked = rawserver.field(lines, b"transfer-encoding") is not None
    body = b""
    while True:
        if chunked:
            size_line, sep, after = rest.partition(b"\r\n")
            if sep:
                size = int(size_line.split(b";")[0], 16)
                # a chunk's data and CRLF; the last chunk: no trailers, CRLF
                if len(after) >= size + 2:
                    if size == 0:
                        return body, after[2:]
                    body += after[:size]
                    rest = after[size + 2:]
                    continue
        elif len(rest) >= length:
            return rest[:length], rest[length:]
        data = conn.recv(65536)
        if not data:
            return None, b""
        rest += data


class Origin(rawserver.RawServer):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.answered = []  # (connection, method, target, body length)

    def serve(self, conn, cid):
        buf = b""
        served = 0
        while True:
            got = rawserver.read_request_head(conn, buf)
            if got is None:
                return
            lines, buf = got
            if served == 1:
                return  # the second request: closed unanswered, as a stale connection
            body, buf = read_body(conn, lines, buf)
            if body is None:
                return
            method, target = lines[0].split(b" ")[:2]
            with self.lock:
                self.answered.append((cid, method.decode(), target.decode(), len(body)))
            text = b"got %d\n" % len(body)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(text) + text)
            served += 1


def scenario(t):
    origin = Origin()
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG)
    base = "http://127.0.0.1:%d" % origin.port
    body_file, _ = h.random_body_file(t.tmp, 1 << 20, "put")

    @t.check("a 1 MiB PUT over replay_buffer never takes a pooled connection")
    def _():
        h.eq(h.curl(base + "/warm", proxy=proxy.url).status, 200, "the GET that fills the pool")
        for tag, extra in (("length", []), ("chunked", ["-H", "Transfer-Encoding: chunked"])):
            r = h.curl("-X", "PUT", "--data-binary", "@" + body_file, *extra,
                       base + "/put-" + tag, proxy=proxy.url)
            h.eq((r.status, r.body), (200, b"got 1048576\n"), "%s PUT: status and body" % tag)
            h.eq(r.header("Retry-Attempts"), "1", "%s PUT: Retry-Attempts" % tag)
            puts = [a for a in origin.answered if a[2] == "/put-" + tag]
            h.eq(len(puts), 1, "%s PUT: answered at the origin" % tag)


h.run(scenario, __doc__, timeout=60)
