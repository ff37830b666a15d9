#!/usr/bin/env python3
"""Scenario: retry tokens leased during busy traffic do not outlive the
window they were counted in. A proxy that was granted many tokens at a
peak and then idled longer than a window must not spend them on a later
outage: Redis no longer counts them, so the fleet would overspend.

Redis: a redis-server on a free loopback port.
Origin: /ok answers 200, /fail answers 503.
Proxy: one; max_attempts 5, short backoffs; budget ratio 0.2,
min_per_second 0, window 3s (9s under sanitizers, where the peak below
takes longer); fleet: sync_interval 500ms.
Sequence: 100 GET /ok at once, each on a connection opened beforehand (the
proxy counts a request when its head arrives, so the peak Redis sees is
as short as sending 100 small heads, whatever the answers then take), a
peak shorter than a window (about 20 tokens granted), 7 s idle (21 s;
over two windows), then 5 GET /fail, one after the other.
Must hold: the 5 failing requests get at most 1 retry in all.
  Why 1: every retry in the last window spends a token granted in it (a
  lease is renewed at every sync, so no token is older than one sync
  interval plus its round trip), and the script grants at most
  floor(ratio x Q + min_per_second x W) - R, where Q counts the requests
  reported in the counted span (the 21 buckets, a window and a twentieth)
  and R the tokens granted in it. The /ok requests left that span 7 s
  ago, so Q <= 5 and the grants total at most floor(0.2 x 5 + 0) = 1.
  (With tokens kept for the connection's life, the 20 from the peak were
  all spent: 20 retries.)
"""

import re
import time

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
    max_attempts: 5
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 20ms
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 0, window: @WINDOW@ }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 500ms
"""

# Redis counts a route's requests of the last window only, and the peak
# must fit in it: the window scales with the sanitizers' slowness.
WINDOW_S = 3 * h.SLOW
KEY = "retryproxy:{checkout}:default:%d" % (WINDOW_S * 1000)
PEAK = 100


def reported(redis):
    """Requests Redis counts (q fields) in the key now."""
    fields = redis.command("HGETALL", KEY) or []
    return sum(int(v) for k, v in zip(fields[0::2], fields[1::2]) if k.startswith("q"))


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/ok", [200])
    origin.script("/fail", [503])
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port, WINDOW="%ds" % WINDOW_S)
    h.wait_until(lambda: re.search(r"^retryproxy_fleet_connected 1$", h.curl(
        "http://127.0.0.1:%d/metrics" % p.port(1), check=True).body.decode(), re.M),
        10 * h.SLOW, "the fleet to connect")

    # at once: Redis counts the requests of the last window only, and the
    # peak must fit in it. 100 clients each connecting and waiting for its
    # answer before the next request took longer than a 3 s window on a busy
    # machine (the oldest buckets were deleted before the newest were
    # reported). The proxy counts a request when its head arrives, so the
    # connections are opened first and the 100 heads then sent in one go:
    # the peak is that burst, however long the answers take.
    conns = [h.RawConn(p.port(), timeout=30 * h.SLOW) for _ in range(PEAK)]
    t.defer(lambda: [c.close() for c in conns])
    peak_start = time.monotonic()
    for i, c in enumerate(conns):
        c.send(h.request("GET", "/ok?n=%d" % i, "fleet.example"))
    peak = time.monotonic() - peak_start

    @t.check("the peak was reported to Redis (the scenario is what it claims)")
    def _():
        # before reading the answers: a sync meanwhile drops the buckets
        # older than a window, so the count is looked at while it is whole
        h.wait_until(lambda: reported(redis) >= PEAK, 5 * h.SLOW,
                     "the peak's requests counted (the peak took %.1f s; the window is %d s)"
                     % (peak, WINDOW_S))

    statuses = []
    for c in conns:
        try:
            statuses.append(c.read_response("GET").status)
        except Exception as e:  # recorded and reported
            statuses.append("%s: %s" % (type(e).__name__, e))
        c.close()
    h.eq([s for s in statuses if s != 200], [], "answers to /ok other than 200")

    time.sleep(7.0 * h.SLOW)
    tries = []
    for i in range(5):
        r = h.fetch(p.port(), "GET", "/fail?n=%d" % i, "fleet.example", timeout=10 * h.SLOW)
        tries.append(r.header("Retry-Attempts"))

    @t.check("after a long idle, failing requests get at most ratio x their count retries")
    def _():
        retries = len(origin.requests_for("/fail")) - 5
        h.ok(retries <= 1, "%d retries for 5 failing requests (Retry-Attempts %r)"
             % (retries, tries))


h.run(scenario, __doc__, timeout=60)
