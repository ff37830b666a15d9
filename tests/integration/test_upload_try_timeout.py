#!/usr/bin/env python3
"""Scenario: request bodies that take longer to send than try_timeout.

Client: through a sidecar listener with try_timeout 2s, replay_buffer
64KiB and spool_max 64MiB: (1) curl PUTs 32 MiB (spooled: a retry may
need it); (2) a raw socket POSTs 300 KiB with Content-Length, 10 KiB every
100 ms (3 s in all); (3) curl PUTs 8 MiB to a path whose route has
max_attempts 1.
Upstream: a raw server whose connections have a 64 KiB receive buffer:
(1) reads the body at about 8 MiB/s (4 s in all) and answers 200 naming
the bytes it got; (2) reads the body as it comes, then the same; (3)
reads the head and then nothing, and never answers.
Must hold: try_timeout bounds the wait for the response head once the
request has gone, and, while its body is still going, how long the
upstream may take none of it; a body that keeps moving is not cut, however
long it takes: (1) 200 after one try, every byte at the upstream (before,
504 after three tries of 2 s each, the 32 MiB sent three times); (2) 200,
every byte (before, 504 after 2 s: a slow client's upload was cut); (3) an
upstream that takes no more of the body still times out: 504 within a few
seconds, the access line saying timeout.
"""

import os
import re
import socket
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UPSTREAM@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  try_timeout: @TRY@ms
  replay_buffer: 64KiB
  spool_max: 64MiB
  spool_dir: @SPOOL_DIR@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: once
    match: { path_prefix: /stall }
    retry: { max_attempts: 1 }
"""

MiB = 1 << 20
KiB = 1 << 10
TRY_MS = 2000 * h.SLOW


def upstream(conn, server):
    conn.settimeout(60)
    got = rawserver.read_request_head(conn)
    if got is None:
        return
    lines, buf = got
    path = lines[0].split(b" ")[1]
    n = int(rawserver.field(lines, b"content-length"))
    if path.startswith(b"/stall"):
        time.sleep(15 * h.SLOW)
        return
    # /slow: 8 MiB/s at most; /post: as it comes
    rate = 8 * MiB if path.startswith(b"/slow") else 0
    start = time.monotonic()
    while len(buf) < n:
        if rate:
            ahead = len(buf) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        data = conn.recv(256 * KiB)
        if not data:
            return
        buf += data
    body = b"got %d\n" % len(buf)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                 % len(body) + body)


class SmallBufferServer(rawserver.RawServer):
    def __init__(self, handler):
        super().__init__(handler, conn_timeout=60)
        # taken by the connections accepted from now on: the upstream
        # takes the body only as fast as it reads it
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)


def scenario(t):
    server = SmallBufferServer(upstream)
    t.defer(server.stop)
    spool_dir = os.path.join(t.tmp, "spool")
    os.makedirs(spool_dir)
    proxy = t.proxy(CONFIG, UPSTREAM=server.port, SPOOL_DIR=spool_dir, TRY=TRY_MS)

    def put(path, n):
        f, _ = h.random_body_file(t.tmp, n, path.strip("/"))
        start = time.monotonic()
        r = h.curl("-X", "PUT", "-H", "Expect:", "--data-binary", "@" + f,
                   proxy.listener_url(0, path), timeout=60 * h.SLOW)
        return r, time.monotonic() - start

    @t.check("a spooled 32 MiB PUT the upstream takes in 4 s (try_timeout 2s): 200 after one "
             "try")
    def _():
        r, took = put("/slow", 32 * MiB)
        h.eq((r.status, r.header("Retry-Attempts"), r.body), (200, "1", b"got %d\n" % (32 * MiB)),
             "status, Retry-Attempts, body (%r, %.1f s; %s)" % (r, took, proxy.stderr_tail(4)))
        fields = h.access_fields(proxy.access_one("/slow"))
        h.eq((fields.get("status"), fields.get("attempts")), ("200", "1"), "access status, attempts")

    @t.check("a POST whose client sends its body over 3 s (try_timeout 2s): 200, every byte")
    def _():
        n = 300 * KiB
        with h.RawConn(proxy.port(), timeout=30 * h.SLOW) as c:
            c.send(b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n)
            for _ in range(n // (10 * KiB)):
                c.send(os.urandom(10 * KiB))
                time.sleep(0.1)
            r = c.read_response("POST")
        h.eq((r.status, r.body), (200, b"got %d\n" % n),
             "status, body (%r; %s)" % (r, proxy.stderr_tail(4)))

    @t.check("an upstream that takes no more of the body still times out: 504")
    def _():
        r, took = put("/stall", 8 * MiB)
        h.eq(r.status, 504, "status (%r)" % r)
        h.ok(took < 4 * TRY_MS / 1000.0, "504 after %.1f s" % took)
        line = proxy.access_one("/stall")
        h.ok(re.search(r'tries="timeout"', line), "the trail says timeout: %s" % line)


h.run(scenario, __doc__)
