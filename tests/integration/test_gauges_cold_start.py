#!/usr/bin/env python3
"""Scenario: requests wait for a fresh upstream's first connect; the
backoff and held gauges count them right.

Client: three GETs at once on raw sockets through a sidecar listener whose
upstream is https://127.0.0.1:<port>, a socket that accepts and never
answers (the TLS handshake, part of the connect, hangs until
connect_timeout, 5 s).
Origin: none; that silent socket.
Must hold, while the first connect is in doubt:
- one request connects and two wait for it: retryproxy_held_requests 2
  and retryproxy_route_held_requests{route="default"} 2;
- none is in backoff: retryproxy_backoff_pending 0 and its route's 0 (it
  was proxy->backoff_pending - held before, which wrapped to 4294967294:
  those waiting for a connect in doubt take no place among the pending
  retries);
- the status page's tiles say the same;
and once the clients leave, both gauges, per route included, are 0.
"""

import re

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://127.0.0.1:@SILENT@
admin: 127.0.0.1:@PORT1@
log: { level: error, format: text }
limits: { connect_timeout: 5s, drain_timeout: 1s }
"""


def gauges(admin):
    body = h.curl(admin + "/metrics", check=True).body.decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r'^(retryproxy_(?:route_)?(?:backoff_pending|held_requests))'
                     r'(\{route="default"\})? (\d+)$', line)
        if m:
            out[m.group(1)] = int(m.group(3))
    return out


def scenario(t):
    silent = h.silent_port()
    proxy = t.proxy(CONFIG, SILENT=silent)
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    clients = [h.RawConn(proxy.port(0)) for _ in range(3)]
    try:
        for c in clients:
            c.send(h.request("GET", "/", "app.example"))
        h.wait_until(lambda: gauges(admin).get("retryproxy_held_requests") == 2, 10 * h.SLOW,
                     "two requests waiting for the first connect")
        now = gauges(admin)
        page = h.curl(admin + "/?norefresh", check=True).body.decode()

        @t.check("two wait for the connect in doubt: held 2, in backoff 0, by route too")
        def _():
            h.eq(now, {"retryproxy_held_requests": 2, "retryproxy_backoff_pending": 0,
                       "retryproxy_route_held_requests": 2,
                       "retryproxy_route_backoff_pending": 0}, "gauges")

        @t.check("the page's tiles say the same")
        def _():
            tiles = dict(re.findall(r'data-key="(backoff_pending|held_requests)">(\d+)<', page))
            h.eq(tiles, {"backoff_pending": "0", "held_requests": "2"}, "tiles")
    finally:
        for c in clients:
            c.close()

    @t.check("once the clients leave, every backoff and held gauge is 0")
    def _():
        h.wait_until(lambda: set(gauges(admin).values()) == {0}, 10 * h.SLOW,
                     "gauges at 0: %r" % gauges(admin))


h.run(scenario, __doc__, timeout=60)
