#!/usr/bin/env python3
"""Scenario: an upstream that never answers a connect is found down even
when try_timeout, shorter than connect_timeout, ends each try first.

Upstream: a loopback port whose listen queue is full (backlog 0, one
connection queued and never accepted), so the kernel drops every further
SYN: a connect there hangs until a timeout, as to a host that is gone.
Proxy: a sidecar to it; limits.connect_timeout 5s, retry.try_timeout 300ms,
max_attempts 1; health down_after 3, probe_interval 500ms, hold false.
Client: 10 GETs at once (a first check makes sure a connect there hangs).
Must hold: the first tries end with 504 after try_timeout; those cuts count
as connect failures, so after down_after of them the upstream is down
(/upstreams says so, failures=3) and the remaining requests get 502 at once
naming the upstream as down; all 10 are answered within about
down_after x try_timeout, not one try_timeout after another for all of them.
"""

import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@HOLE@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, connect_timeout: 5s }
health: { down_after: 3, probe_interval: 500ms, hold: false }
defaults:
  retry:
    max_attempts: 1
    try_timeout: 300ms
"""

REQUESTS = 10


def black_hole():
    """A listening socket that takes no more connections: its queue holds
    the one connection made here, never accepted. Returns (port, sockets)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(2):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.2)
    return port, [srv] + fillers


def scenario(t):
    port, held = black_hole()
    t.defer(lambda: [s.close() for s in held])

    @t.check("set-up: a connect to the full listen queue does not complete")
    def _():
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            h.ok(False, "the kernel took a connection on a full listen queue")
        except (socket.timeout, OSError):
            pass
        finally:
            probe.close()
    proxy = t.proxy(CONFIG, HOLE=port)

    def one(i):
        start = time.monotonic()
        try:
            r = h.fetch(proxy.port(), "GET", "/x%d" % i, "app.example", timeout=20 * h.SLOW)
        except Exception as e:  # recorded and reported
            r = "%s: %s" % (type(e).__name__, e)
        return (time.monotonic() - start, r)

    @t.check("10 GETs at once: all answered, the first with 504 after try_timeout, the rest "
             "with 502 naming the upstream as down, well before 10 x try_timeout")
    def _():
        results = h.in_threads(REQUESTS, one, 30 * h.SLOW)
        bad = [r for r in results if r is None or not isinstance(r[1], h.Response)]
        h.eq(bad, [], "requests without an answer")
        statuses = sorted(r[1].status for r in results)
        print("answers: %s" % sorted((round(d, 2), r.status) for d, r in results), flush=True)
        down = [r for _, r in results if r.status == 502 and b"is down" in r.body]
        h.ok(len(down) >= REQUESTS - 5, "only %d answers named the upstream as down: %s"
             % (len(down), statuses))
        slowest = max(d for d, _ in results)
        h.ok(slowest < 2.5 * h.SLOW, "the last answer came after %.1fs" % slowest)

    @t.check("/upstreams shows the upstream down after down_after failures")
    def _():
        text = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1), check=True).body.decode()
        line = [ln for ln in text.splitlines() if ln.startswith("http://127.0.0.1:%d " % port)]
        h.eq(len(line), 1, "the upstream's line in %r" % text)
        h.ok(" down failures=3 " in line[0] + " ", "the upstream is not down: %r" % line[0])


h.run(scenario, __doc__)
