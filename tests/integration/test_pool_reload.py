#!/usr/bin/env python3
"""Scenario: a reload's lowered pool limits apply to connections already
idle in the pool.

Client: 4 GETs at once through a sidecar listener, each answered after
0.5 s, so the proxy opens 4 upstream connections and pools them; then a
reload lowering limits.pool_max_idle from 4 to 1; then one lowering
limits.pool_idle_timeout from 60s to 1s; curl to the admin listener for
retryproxy_connections{side="upstream"}.
Origin: the test origin (/delay).
Must hold: the 4 connections are pooled; after the first reload 1 is left
at once (before, all 4 stayed until the old 60 s timeout, one over the
cap each until then); after the second, the last one closes within about
1 s of the reload (before, it waited out the old 60 s); a GET after both
is still answered. Requests in flight over a reload that lowers
pool_max_idle to 1 leave 1 connection pooled as they end (before, they
were pooled under their own config's 4, and all 4 stayed).
"""

import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { pool_max_idle: %d, pool_idle_timeout: %s, drain_timeout: 2s }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG % (4, "60s"), ORIGIN=origin.port)

    def upstream_connections():
        body = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        return h.metric(body, "retryproxy_connections", '{side="upstream"}')

    @t.check("4 GETs at once: 4 upstream connections, pooled")
    def _():
        url = "http://127.0.0.1:%d/delay/0.5" % proxy.port(0)
        results = h.in_threads(4, lambda i: h.curl(url + "?n=%d" % i).status, 20 * h.SLOW)
        h.eq(results, [200] * 4, "statuses")
        h.wait_until(lambda: upstream_connections() == 4, 5 * h.SLOW, "4 pooled connections")

    @t.check("pool_max_idle 4 -> 1 by a reload: 1 idle connection left at once")
    def _():
        proxy.reload(proxy.config_text.replace("pool_max_idle: 4", "pool_max_idle: 1"))
        h.wait_until(lambda: upstream_connections() == 1, 2 * h.SLOW,
                     "1 pooled connection after the reload (%s)" % upstream_connections())

    @t.check("pool_idle_timeout 60s -> 1s by a reload: the last one closes within about 1 s")
    def _():
        proxy.reload(proxy.config_text.replace("pool_idle_timeout: 60s",
                                                  "pool_idle_timeout: 1s"))
        h.wait_until(lambda: upstream_connections() == 0, 1 + 3 * h.SLOW,
                     "no pooled connection (%s)" % upstream_connections())

    @t.check("a GET after both reloads is answered")
    def _():
        r = h.curl("http://127.0.0.1:%d/bytes/10" % proxy.port(0))
        h.eq(r.status, 200, "status")

    @t.check("pool_max_idle 4 -> 1 by a reload while 4 requests are in flight: 1 of their "
             "connections is pooled after, not 4")
    def _():
        proxy.reload(proxy.config_text.replace("pool_max_idle: 1", "pool_max_idle: 4")
                     .replace("pool_idle_timeout: 1s", "pool_idle_timeout: 60s"))
        h.wait_until(lambda: upstream_connections() <= 1, 2 * h.SLOW, "the pool back to 1")
        url = "http://127.0.0.1:%d/delay/1.5" % proxy.port(0)
        statuses = []
        worker = threading.Thread(target=lambda: statuses.extend(
            h.in_threads(4, lambda i: h.curl(url + "?m=%d" % i).status, 20 * h.SLOW)),
            daemon=True)
        worker.start()
        h.wait_until(lambda: upstream_connections() == 4, 5 * h.SLOW,
                     "4 upstream connections in flight (%s)" % upstream_connections())
        proxy.reload(proxy.config_text.replace("pool_max_idle: 4", "pool_max_idle: 1"))
        worker.join(20 * h.SLOW)
        h.eq(statuses, [200] * 4, "statuses")
        time.sleep(0.5)
        h.eq(upstream_connections(), 1, "pooled connections once the 4 ended")


h.run(scenario, __doc__)
