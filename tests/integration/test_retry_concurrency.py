#!/usr/bin/env python3
"""Scenario: many requests waiting on backoff timers at once.

Client: 200 threads, each with its own raw connection to a forward proxy,
send one GET at the same moment, each to its own origin path.
Origin: threaded, with a listen queue of 1024; answers the first try of each
path 503 and the second 200. Backoff: initial 1s, no jitter, max_attempts 3,
a retry budget large enough not to interfere.
Must hold: all 200 get 200 with Retry-Attempts: 2; none in less than the 1 s
backoff; all together in well under the 200 s a serialized wait would take
(under 5 s, or 3x that under sanitizers): the waits run concurrently on
timers; the origin saw exactly 2 requests per path; the proxy then still
answers a plain GET.
"""

import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: warn, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 1s
    multiplier: 2
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

N = 200
BACKOFF = 1.0


def scenario(t):
    origin = t.origin(backlog=1024)
    proxy = t.proxy(CONFIG)
    host = origin.authority
    for i in range(N):
        origin.script("/c/%d" % i, [503, 200])

    results = [None] * N
    ready = threading.Barrier(N + 1)

    def client(i):
        try:
            conn = h.RawConn(proxy.port(), timeout=30)
        except OSError as e:
            results[i] = ("connect failed: %s" % e, None, None)
            ready.wait()
            return
        with conn:
            data = h.request("GET", origin.url("/c/%d" % i), host)
            ready.wait()
            start = time.monotonic()
            try:
                conn.send(data)
                r = conn.read_response()
                results[i] = (r.status, r.header("Retry-Attempts"), time.monotonic() - start)
            except (AssertionError, OSError) as e:
                results[i] = ("failed: %s" % e, None, time.monotonic() - start)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(N)]
    for th in threads:
        th.start()
    ready.wait()
    start = time.monotonic()
    for th in threads:
        th.join(60)
    total = time.monotonic() - start

    @t.check("all %d concurrent GETs get 200 with Retry-Attempts: 2" % N)
    def _():
        bad = [(i, r) for i, r in enumerate(results) if r is None or r[:2] != (200, "2")]
        h.ok(not bad, "%d of %d not (200, Retry-Attempts 2); first ones: %r" % (len(bad), N, bad[:5]))

    @t.check("none is answered before its 1 s backoff has passed")
    def _():
        early = [(i, round(r[2], 3)) for i, r in enumerate(results)
                 if r is not None and r[2] is not None and r[2] < BACKOFF - 0.02]
        h.ok(not early, "answered in under 1 s: %r" % early[:5])

    @t.check("all together within 5 s (x%d under sanitizers): the waits ran concurrently" % h.SLOW)
    def _():
        slowest = max((r[2] for r in results if r is not None and r[2] is not None), default=None)
        h.ok(total < 5.0 * h.SLOW,
             "the %d requests took %.2f s in all (slowest %s s); one 1 s backoff each should "
             "overlap" % (N, total, slowest))

    @t.check("the origin saw exactly 2 requests per path")
    def _():
        time.sleep(0.3 * h.SLOW)
        counts = {}
        for q in origin.requests:
            counts[q.path] = counts.get(q.path, 0) + 1
        bad = {p: c for p, c in counts.items() if c != 2}
        h.eq(len(counts), N, "paths the origin saw")
        h.ok(not bad, "paths not seen exactly twice: %r" % dict(list(bad.items())[:5]))

    @t.check("the proxy still answers a plain GET afterwards")
    def _():
        r = h.fetch(proxy.port(), "GET", origin.url("/bytes/100"), host)
        h.eq((r.status, len(r.body), r.header("Retry-Attempts")), (200, 100, "1"),
             "status, body length, Retry-Attempts")


h.run(scenario, __doc__)
