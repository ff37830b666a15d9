#!/usr/bin/env python3
"""Scenario: routes whose budget window is shorter than four sync
intervals are warned about in one line naming them all, once per config
that changes them, not once per route at every reload.

Redis: a redis-server on a free loopback port.
Proxy: fleet sync_interval 100ms; the default route's window is 10s;
routes fast (window 300ms), faster (window 200ms) and slow (window 10s).
Then: a reload of the same config; a reload that shortens slow's window to
250ms; a reload of that config again.
Must hold: at start, one warning naming fast (300 ms) and faster (200 ms)
and neither slow nor default (before: one line per route); the unchanged
reload adds none (before: two more); the reload that shortened slow's
window adds one naming all three; the reload of it unchanged adds none.
"""

import harness as h
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
defaults:
  retry:
    budget: { ratio: 0.2, min_per_second: 10, window: 10s }
routes:
  - name: fast
    match: { path_prefix: /fast/ }
    retry: { budget: { ratio: 0.2, min_per_second: 10, window: 300ms } }
  - name: faster
    match: { path_prefix: /faster/ }
    retry: { budget: { ratio: 0.2, min_per_second: 10, window: 200ms } }
  - name: slow
    match: { path_prefix: /slow/ }
    retry: { budget: { ratio: 0.2, min_per_second: 10, window: @SLOW_WINDOW@ } }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
"""

WARNING = "more than a quarter of"


def warnings(proxy):
    return [ln for ln in proxy.stderr_lines() if WARNING in ln]


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port, SLOW_WINDOW="10s")
    p.wait_log(WARNING)

    @t.check("at start: one warning, naming the two short routes")
    def _():
        lines = warnings(p)
        h.eq(len(lines), 1, "warnings (%r)" % lines)
        for route in ("fast (300 ms)", "faster (200 ms)"):
            h.ok(route in lines[0], "%r not in %r" % (route, lines[0]))
        for route in ("slow", "default"):
            h.ok(route not in lines[0], "%r in %r" % (route, lines[0]))

    @t.check("a reload of the same config: no new warning")
    def _():
        p.reload(p.config_text)
        h.eq(len(warnings(p)), 1, "warnings (%r)" % warnings(p))

    @t.check("a reload that shortens another route's window: one more warning, naming all three")
    def _():
        p.reload(p.config_text.replace("window: 10s } }", "window: 250ms } }"))
        lines = warnings(p)
        h.eq(len(lines), 2, "warnings (%r)" % lines)
        for route in ("fast (300 ms)", "faster (200 ms)", "slow (250 ms)"):
            h.ok(route in lines[1], "%r not in %r" % (route, lines[1]))

    @t.check("that config reloaded unchanged: no new warning")
    def _():
        p.reload(p.config_text)
        h.eq(len(warnings(p)), 2, "warnings (%r)" % warnings(p))


h.run(scenario, __doc__, timeout=60)
