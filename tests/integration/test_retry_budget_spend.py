#!/usr/bin/env python3
"""Scenario: the retry budget is spent by retries that happen, once each.

Client: raw-socket GETs to a sidecar listener, one at a time, each through
a proxy of its own (a fresh budget).
Origin: a raw server: a 503 whose announced body breaks off with a reset;
a chunked 503 larger than retry_response_buffer; a plain 503; otherwise
200.
Proxy: budget ratio 0, min_per_second 0.1, window 10s: exactly one retry
per window; retry_response_buffer 1KiB.
Must hold:
- a 503 whose body breaks off while it is kept is retried once, and the
  budget pays for that retry once: the client gets the 200, Retry-Attempts
  2, and retryproxy_retries_total counts 1;
- a retryable 503 passed on because it is over retry_response_buffer spends
  nothing: the next request's 503 is still retried (200, Retry-Attempts 2);
- two 503s at once whose bodies take half a second to arrive: the budget
  is looked at again when each retry's backoff starts, so only one is
  retried (200) and the other gets its 503 (gave_up=budget); retries_total
  counts 1;
- a retryable 503 with a Content-Length over retry_response_buffer, once
  the budget is spent, is passed on with gave_up=budget (no size note: the
  budget, not the size, stopped the retry), and
  retryproxy_retries_given_up_total{reason="budget"} counts it;
- the bound is exact where its decimal product is a whole number that
  binary floating point misses: ratio 0.58 (min_per_second 0) with 50
  requests in the window allows 29 retries (0.58 x 50 is 28.999999999999996
  in a double, and only 28 were allowed): the 50th request, answered 503
  29 times, gets its 200 with Retry-Attempts 30.
"""

import socket
import struct
import threading
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, retry_response_buffer: 1KiB }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    max_backoff: 50ms
    jitter: 0s
    budget: { ratio: 0, min_per_second: 0.1, window: 10s }
"""

# 0.58 x 50 requests: 29 retries in exact arithmetic, 28.999999999999996 in
# a double
RATIO_CONFIG = CONFIG.replace(
    "max_attempts: 3\n    initial_backoff: 50ms\n    max_backoff: 50ms",
    "max_attempts: 40\n    initial_backoff: 1ms\n    max_backoff: 1ms").replace(
    "budget: { ratio: 0, min_per_second: 0.1, window: 10s }",
    "budget: { ratio: 0.58, min_per_second: 0, window: 60s }")


class Origin(rawserver.RawServer):
    """Each path's first request gets its fault, later ones 200."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def serve(self, conn, cid):
        buf = b""
        while True:
            r = rawserver.read_request(conn, buf)
            if r is None:
                return
            _, target, buf = r
            first = target not in self.seen
            self.seen[target] = self.seen.get(target, 0) + 1
            if first and target.startswith("/breaks"):
                conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
                # the rest of the body never comes: a reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if target.startswith("/big503"):
                body = b"y" * 4000
                conn.sendall(b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n" +
                             b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
                continue
            if target.startswith("/cl503big"):
                conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 4000\r\n\r\n" + b"z" * 4000)
                continue
            if first and target.startswith("/slow503"):
                conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
                time.sleep(0.5)
                conn.sendall(b"x" * 90)
                continue
            if target.startswith("/until30") and self.seen[target] < 30:
                conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\nno")
                continue
            if first and target.startswith("/plain503"):
                conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\nno")
                continue
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def retries_counted(proxy):
    """retryproxy_retries_total of the default route, every cause."""
    text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
    return sum(h.metric(text, "retryproxy_retries_total",
                        '{route="default",cause="%s"}' % cause) or 0
               for cause in ("status", "connect", "reset", "timeout"))


def scenario(t):
    origin = Origin()
    t.defer(origin.stop)

    @t.check("a 503 whose kept body breaks off is retried, and spends the budget once")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port)
        r = h.fetch(proxy.port(0), "GET", "/breaks", "api.example")
        h.eq((r.status, r.body), (200, b"ok"), "status and body")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.eq(origin.seen.get("/breaks"), 2, "requests at the origin")
        h.eq(retries_counted(proxy), 1, "retryproxy_retries_total")
        t.stop_proxy(proxy)

    @t.check("a 503 over retry_response_buffer, passed on, spends nothing")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port)
        r = h.fetch(proxy.port(0), "GET", "/big503", "api.example")
        h.eq((r.status, len(r.body)), (503, 4000), "the large 503, passed on whole")
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        r = h.fetch(proxy.port(0), "GET", "/plain503", "api.example")
        h.eq((r.status, r.body), (200, b"ok"), "the next 503 is retried")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.eq(retries_counted(proxy), 1, "retryproxy_retries_total")
        t.stop_proxy(proxy)

    @t.check("two 503s with slow bodies at once, a budget of one retry: one retried, one not")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port)
        results = {}

        def get(path):
            results[path] = h.fetch(proxy.port(0), "GET", path, "api.example")

        threads = [threading.Thread(target=get, args=("/slow503-%d" % i,)) for i in (1, 2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        h.eq(sorted(r.status for r in results.values()), [200, 503], "statuses")
        refused = [p for p, r in results.items() if r.status == 503][0]
        h.eq(h.access_fields(proxy.access_one(refused)).get("gave_up"), "budget", "gave_up")
        h.eq(retries_counted(proxy), 1, "retryproxy_retries_total")
        t.stop_proxy(proxy)

    @t.check("a 503 announced over retry_response_buffer, the budget spent: gave_up=budget")
    def _():
        proxy = t.proxy(CONFIG, ORIGIN=origin.port)
        r = h.fetch(proxy.port(0), "GET", "/plain503-spend", "api.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "the one retry is spent")
        r = h.fetch(proxy.port(0), "GET", "/cl503big", "api.example")
        h.eq((r.status, len(r.body)), (503, 4000), "the large 503, passed on whole")
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        fields = h.access_fields(proxy.access_one("/cl503big"))
        h.eq(fields.get("gave_up"), "budget", "gave_up")
        h.eq(fields.get("note"), None, "note")
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        h.eq(h.metric(text, "retryproxy_retries_given_up_total",
                      '{route="default",reason="budget"}'), 1, "given up for the budget")
        t.stop_proxy(proxy)

    @t.check("ratio 0.58 and 50 requests in the window: 29 retries, not 28")
    def _():
        proxy = t.proxy(RATIO_CONFIG, ORIGIN=origin.port)
        h.ok("ratio: 0.58" in proxy.config_text, "the config has the ratio")
        for i in range(49):
            h.eq(h.fetch(proxy.port(0), "GET", "/ok-%d" % i, "api.example").status, 200,
                 "request %d" % i)
        r = h.fetch(proxy.port(0), "GET", "/until30", "api.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "30"), "status, Retry-Attempts")
        h.eq(retries_counted(proxy), 29, "retryproxy_retries_total")
        t.stop_proxy(proxy)


h.run(scenario, __doc__, timeout=60)
