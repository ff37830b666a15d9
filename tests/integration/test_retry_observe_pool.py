#!/usr/bin/env python3
"""Scenario: retry.mode: observe with idempotency_key: inject, and a pooled
connection the upstream closes after reading the request on it.

Client: raw requests through a forward listener: a GET to fill the pool,
then a POST without a body (a "capture" call) and no Idempotency-Key.
Origin: a raw server where every connection answers its first request
(200, keep-alive) and closes, without answering, once it has read its
second: every pooled connection is stale, and the request on it was read.
Proxy: max_attempts 3 with a 10 s backoff; route /obs/ has
idempotency_key: inject and mode: observe, route /enf/ the same with
mode: enforce.
Must hold:
- under observe no key is injected, so the POST is not safe to send twice:
  it never goes on a pooled connection, reaches the origin once and gets
  its 200 with Retry-Attempts 1 (before, it took the pooled connection and
  the stale try was replaced at once: the origin got the POST twice,
  without a key);
- under enforce the same POST carries an injected key, so the pooled
  connection's replacement goes at once with the same key (Retry-Attempts
  2, trail stale -> 200).
"""

import threading

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 10s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: obs
    match: { path_prefix: /obs/ }
    retry: { idempotency_key: inject, mode: observe }
  - name: enf
    match: { path_prefix: /enf/ }
    retry: { idempotency_key: inject }
"""


class Origin(rawserver.RawServer):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.requests = []  # (connection, method, target, Idempotency-Key)

    def serve(self, conn, cid):
        buf = b""
        served = 0
        while True:
            got = rawserver.read_request_head(conn, buf)
            if got is None:
                return
            lines, buf = got
            method, target = lines[0].split(b" ")[:2]
            key = rawserver.field(lines, b"idempotency-key")
            with self.lock:
                self.requests.append((cid, method.decode(), target.decode(),
                                      key.decode() if key is not None else None))
            if served == 1:
                return  # read, then closed unanswered: a stale connection
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            served += 1


def scenario(t):
    proxy = t.proxy(CONFIG)

    def run(prefix):
        origin = Origin()
        t.defer(origin.stop)
        host = "127.0.0.1:%d" % origin.port
        base = "http://%s" % host
        warm = h.fetch(proxy.port(), "GET", base + prefix + "warm", host)
        h.eq(warm.status, 200, "the GET that fills the pool")
        r = h.fetch(proxy.port(), "POST", base + prefix + "capture", host)
        posts = [q for q in origin.requests if q[1] == "POST"]
        return r, posts

    @t.check("observe: a POST with no key of its own never takes a pooled connection")
    def _():
        r, posts = run("/obs/")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "1"), "status, Retry-Attempts")
        h.eq(len(posts), 1, "POSTs the origin read (%r)" % posts)
        h.eq(posts[0][3], None, "Idempotency-Key at the origin")

    @t.check("enforce: the same POST carries its key, and a stale pooled connection is "
             "replaced at once with the same key")
    def _():
        r, posts = run("/enf/")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq(len(posts), 2, "POSTs the origin read (%r)" % posts)
        h.ok(posts[0][3] is not None and posts[0][3] == posts[1][3],
             "the same key on both (%r)" % posts)
        f = h.access_fields(proxy.access_one("/enf/capture"))
        h.eq(f.get("tries"), "stale -> wait 0ms -> 200", "trail")


h.run(scenario, __doc__, timeout=60)
