#!/usr/bin/env python3
"""Scenario: retries refused by limits.max_pending_retries, not by the
budget, are no demand for the fleet's budget.

A lease asks Redis for twice the retries the proxy made or was refused
since the last sync. A retry refused because the proxy already keeps
max_pending_retries requests waiting (reason budget in the log, as the
SPEC names it) could not have used a token: counting it asked for tokens
the proxy cannot spend, held from the rest of the fleet until the next
sync, at every sync while the cap holds.

Redis: a redis-server on a free loopback port.
Origin: answers every /fresh request with 503.
Proxy: one sidecar, log level debug (each sync's "reported N requests,
granted G of W tokens" line); limits.max_pending_retries 1; max_attempts 2,
initial_backoff 3 s (9 s under sanitizers: the one retry keeps the
place); budget ratio 0.2,
min_per_second 100 (the local budget allows every retry), window 20 s;
fleet sync_interval 2 s (6 s under sanitizers).
Client: just after a sync, SIGHUP adds the route /fresh (no lease until its
first sync: its local budget decides, and the fleet counts what it is
refused); then 10 concurrent GET /fresh.
Must hold: one request is retried (Retry-Attempts 2), the others get the 503
at once with gave_up=budget; the route's first syncs ask for the tokens of
the retry made and the share of 10 requests (max(1, ceil(2 x 0.2 x
requests), 2 x retries) per sync: at most 10 in all), not for the nine
retries the cap refused as well (20 or more before the fix).
"""

import re

import harness as h
from fleet_gauge import wait_gauge
from redisserver import RedisServer

SYNC_S = 2 * h.SLOW
WINDOW_S = 10 * SYNC_S

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: debug, format: text }
limits:
  drain_timeout: 2s
  max_pending_retries: 1
defaults:
  retry:
    max_attempts: 2
    initial_backoff: @BACKOFF@s
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 100, window: @WINDOW@s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: capped
  sync_interval: @SYNC@s
"""

FRESH_ROUTE = """\
routes:
  - name: fresh
    match: { path_prefix: /fresh }
"""

N = 10
GRANT = r"fleet capped: route fresh: reported (\d+) requests, granted \d+ of (\d+) tokens"


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/fresh", [503])
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port, SYNC=SYNC_S,
                    WINDOW=WINDOW_S, BACKOFF=3 * h.SLOW)
    wait_gauge([proxy], 1, 10 * h.SLOW)

    def syncs():
        return len(re.findall(r"route default: reported", proxy.stderr()))

    # right after a sync, so that the reload and the requests fit before the next
    before = syncs()
    h.wait_until(lambda: syncs() > before, 3 * SYNC_S, "a sync of the proxy's")
    proxy.reload(proxy.config_text + FRESH_ROUTE)

    out = h.in_threads(N, lambda i: h.fetch(proxy.port(), "GET", "/fresh?i=%d" % i,
                                            "fleet.example", timeout=20 * h.SLOW), 30 * h.SLOW)

    def wants():
        """(requests reported, tokens wanted) of the route's syncs so far."""
        return [(int(m.group(1)), int(m.group(2)))
                for m in re.finditer(GRANT, proxy.stderr())]

    h.wait_until(lambda: sum(r for r, _ in wants()) >= N, 3 * SYNC_S,
                 "the route's requests reported (syncs so far: %r)" % wants())

    @t.check("one request is retried; the others are refused by max_pending_retries")
    def _():
        attempts = sorted(r.header("Retry-Attempts") if isinstance(r, h.Response) else r
                          for r in out)
        h.eq(attempts, ["1"] * (N - 1) + ["2"], "Retry-Attempts of the requests")
        refused = [ln for ln in proxy.stderr_lines()
                   if "target=/fresh" in ln and "gave_up=budget" in ln]
        h.eq(len(refused), N - 1, "access lines with gave_up=budget")

    @t.check("the route's syncs ask for the retry made and the requests' share, not for the "
             "retries the cap refused")
    def _():
        reporting = [(r, w) for r, w in wants() if r > 0]
        asked = sum(w for _, w in reporting)
        h.ok(asked <= N, "tokens asked for by the syncs reporting the requests: %d %r "
             "(the share and one retry: at most %d)" % (asked, reporting, N))


h.run(scenario, __doc__, timeout=90)
