#!/usr/bin/env python3
"""Scenario: an upstream that answers 408 as it closes an idle keep-alive
connection the proxy reuses at that moment (RFC 9110 15.5.9: the server
timed the connection out; it never read the request).

Client: curl through a forward listener, GETs and a POST with If-Match.
Origin: a raw server where every connection answers its first request
(200, keep-alive) and its second with `408 Request Timeout` and
`Connection: close`, then closes: every pooled connection times out as it
is reused. A request to /fresh-408 is answered 408 on any connection.
Proxy: max_attempts 3 with retry.on [503] (408 is not retried) and a 10 s
backoff; a route /last with max_attempts 1 (to an origin of its own, so
that its pooled connection is its own).
Must hold:
- a 408 first thing on a pooled connection is a stale connection: the GET
  goes again at once on a new one and gets 200, whatever retry.on says,
  with no backoff; the trail says `stale`, Retry-Attempts 2 (before, the
  client got the upstream's 408 for a request it sent in time);
- a POST made retryable by If-Match goes again the same way, and the 412
  it then gets carries no Retry-Ambiguous: the 408 was an answer;
- on the last try (max_attempts 1) the 408 itself is passed on, not a 502
  of the proxy's own;
- a 408 on a new connection is a response like any other: passed on once,
  as retry.on does not name it (checked first, with nothing pooled).
"""

import threading
import time

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
    on: [503]
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: cond
    match: { path_prefix: /cond/ }
    idempotent:
      when_present:
        - header: If-Match
  - name: last
    match: { path_prefix: /last }
    retry: { max_attempts: 1 }
"""

TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
               b"Content-Length: 8\r\n\r\ntimeout\n")


class Origin(rawserver.RawServer):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.requests = []  # (connection, target) in arrival order

    def serve(self, conn, cid):
        buf = b""
        served = 0
        while True:
            got = rawserver.read_request(conn, buf)
            if got is None:
                return
            _, target, buf = got
            with self.lock:
                self.requests.append((cid, target))
            if served == 1 or target.endswith("/fresh-408"):
                conn.sendall(TIMEOUT_408)
                return
            if target.endswith("/412"):
                conn.sendall(b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            served += 1

    def seen(self, target):
        with self.lock:
            return [cid for cid, seen in self.requests if seen.endswith(target)]


def scenario(t):
    origin = Origin()
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG)
    base = "http://127.0.0.1:%d" % origin.port
    # the last-try check's own origin: its pooled connection is its own
    last_origin = Origin()
    t.defer(last_origin.stop)
    last_base = "http://127.0.0.1:%d" % last_origin.port

    @t.check("a 408 on a new connection is a response: passed on, sent once")
    def _():
        r = h.curl("-H", "Connection: close", base + "/fresh-408", proxy=proxy.url)
        h.eq((r.status, r.body), (408, b"timeout\n"), "status and body")
        h.eq(len(origin.seen("/fresh-408")), 1, "sent once")

    @t.check("a 408 first thing on a pooled connection: a new connection at once, 200")
    def _():
        h.eq(h.curl(base + "/warm", proxy=proxy.url).status, 200, "the GET that fills the pool")
        started = time.monotonic()
        r = h.curl(base + "/again", proxy=proxy.url)
        took = time.monotonic() - started
        h.eq((r.status, r.body), (200, b"ok\n"), "status and body")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.ok(took < 5, "no 10 s backoff before the new connection (took %.1f s)" % took)
        conns = origin.seen("/again")
        h.eq(len(conns), 2, "the origin saw the GET on two connections (%r)" % conns)
        h.ok(conns[0] != conns[1], "the second on a new connection (%r)" % conns)
        line = h.access_fields(proxy.access_one("/again"))
        h.eq(line.get("status"), "200", "access-log status")
        h.ok("stale" in line.get("tries", ""), "the trail says stale: %r" % line)

    @t.check("a conditional POST whose pooled connection answered 408: its 412 is not ambiguous")
    def _():
        h.eq(h.curl(base + "/warm-again", proxy=proxy.url).status, 200, "a pooled connection")
        r = h.curl("-H", 'If-Match: "v1"', "--data-binary", "x", base + "/cond/412",
                   proxy=proxy.url)
        h.eq(r.status, 412, "status")
        h.eq(r.header("Retry-Ambiguous"), None, "Retry-Ambiguous (a 408 is an answer)")
        h.eq(len(origin.seen("/cond/412")), 2, "the origin saw the POST twice")
        line = h.access_fields(proxy.access_one("/cond/412"))
        h.ok("stale" in line.get("tries", ""), "the trail says stale: %r" % line)
        h.eq(line.get("ambiguous"), None, "no ambiguous= in the access line: %r" % line)

    @t.check("on the last try the 408 is passed on, not a 502")
    def _():
        h.eq(h.curl(last_base + "/last/warm", proxy=proxy.url).status, 200,
             "the GET that fills the pool")
        r = h.curl(last_base + "/last/again", proxy=proxy.url)
        h.eq((r.status, r.body), (408, b"timeout\n"), "status and body")
        h.eq(len(last_origin.seen("/last/again")), 1, "sent once")


h.run(scenario, __doc__, timeout=60)
