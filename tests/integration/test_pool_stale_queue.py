#!/usr/bin/env python3
"""Scenario: a pooled connection found stale while requests wait for a
connection (limits.max_upstream_connections: 1).

Client: raw connections to a sidecar listener; the admin listener's
/metrics.
Origin: a raw server. Its first connection answers GET /warm (200,
keep-alive) and, when the next request comes on it, closes without
answering once the test says so (the pooled connection was stale). On
every other connection it answers once and closes: /slow after 1.5 s,
anything else at once.
Proxy: one connection per upstream; /slow on a route with try_timeout 5s,
the rest with try_timeout 1s; max_attempts 3.
Must hold: GET /a takes the pooled connection; GET /slow, sent while /a is
on it, waits for a connection (retryproxy_upstream_waiting 1); when the
pooled connection turns out stale, /a goes again at once on a new
connection, in the place its stale one held, ahead of /slow that came
after it: /a gets 200 with Retry-Attempts 2 (trail "stale -> wait 0ms ->
200") and reaches the origin before /slow; /slow then gets its 200. (Before,
/a queued behind /slow, waited out its 1 s try_timeout and got 504
"upstream busy" from a healthy upstream.)
"""

import threading

import harness as h
from rawserver import RawServer, read_request

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  max_upstream_connections: 1
defaults:
  retry:
    max_attempts: 3
    try_timeout: 1s
    initial_backoff: 50ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: slow
    match: { path_prefix: /slow }
    retry: { try_timeout: 5s }
"""


class StaleOrigin(RawServer):
    def __init__(self):
        self.close_stale = threading.Event()
        self.arrivals = []  # targets, in the order they came, first connection's excepted
        super().__init__(conn_timeout=20)

    def serve(self, conn, cid):
        buf = b""
        n = 0
        while True:
            got = read_request(conn, buf)
            if got is None:
                return
            _, target, buf = got
            n += 1
            if cid == 1:
                if n == 1:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                self.close_stale.wait(10 * h.SLOW)
                return
            with self._lock:
                self.arrivals.append(target)
            if target.startswith("/slow"):
                threading.Event().wait(1.5)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            return


def scenario(t):
    origin = StaleOrigin()
    t.defer(origin.stop)
    t.defer(origin.close_stale.set)
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def waiting():
        body = h.curl("-s", "http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()
        return h.metric(body, "retryproxy_upstream_waiting")

    @t.check("a stale pooled connection's replacement goes before a request that came after it")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(h.request("GET", "/warm", "app.example"))
            h.eq(c.read_response().status, 200, "the GET that fills the pool")
        got = {}

        def send(name, target):
            with h.RawConn(proxy.port(0), timeout=15 * h.SLOW) as c:
                c.send(h.request("GET", target, "app.example"))
                got[name] = c.read_response()

        a = threading.Thread(target=send, args=("a", "/a"))
        a.start()
        b = None
        try:
            h.wait_until(lambda: origin.connections == 1 and proxy.access_for("/a") == [] and
                         waiting() == 0, 5 * h.SLOW, "GET /a in flight")
            b = threading.Thread(target=send, args=("slow", "/slow"))
            b.start()
            h.wait_until(lambda: waiting() == 1, 5 * h.SLOW,
                         "GET /slow waiting for the connection /a holds")
        finally:
            origin.close_stale.set()
            a.join(20 * h.SLOW)
            if b is not None:
                b.join(20 * h.SLOW)
        r = got.get("a")
        h.ok(r is not None, "GET /a got no response")
        h.eq(r.status, 200, "GET /a after its stale connection (%r)" % (r.body[:200],))
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts of GET /a")
        line = proxy.access_one("/a")
        h.eq(h.access_fields(line).get("tries"), "stale -> wait 0ms -> 200",
             "trail of GET /a (%s)" % line)
        h.eq(origin.arrivals, ["/a", "/slow"], "arrival order at the origin")
        h.eq(got["slow"].status, 200, "GET /slow")
        h.wait_until(lambda: waiting() == 0, 5 * h.SLOW, "no request waiting at the end")


if __name__ == "__main__":
    h.run(scenario, __doc__)
