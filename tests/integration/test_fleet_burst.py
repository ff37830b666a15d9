#!/usr/bin/env python3
"""Scenario: a storm of failures at one proxy of a fleet, and a route a
reload adds, are held to the fleet's budget, not to one token.

Redis: a redis-server on a free loopback port.
Origin: answers every /storm and /fresh request with 503.
Proxy: one sidecar with its admin listener; max_attempts 3,
initial_backoff 250ms (longer than a sync), no jitter; budget ratio 0.2,
min_per_second 3, window 10s (the fleet allows 0.2 x requests + 30
retries); fleet sync_interval 100ms. Once it has stopped, a second one
that syncs every 2 s with a 10 s window (6 s and 30 s under sanitizers).
Client: ten waves of 5 concurrent GET /storm, 100 ms apart (N = 50).
Must hold:
- the first wave meets the lease of a quiet proxy (one token, plus its
  share of the requests) and some of it is given up with gave_up=budget;
  then each lease is sized by the retries asked for, so the storm spends
  the fleet's floor: at least 30 retries reach the origin of the 40 the
  fleet allows (0.2 x 50 + 30; a lease of twice the proxy's share of its
  requests, as before, let 21 through), and the origin's tries stay
  within N x (1 + 0.2) + 30 + the lease slack (what the proxy held unspent);
- Redis's hash for the route counts the retries granted;
- SIGHUP adding a route /fresh just after one of the second proxy's syncs
  (Redis's count of script calls just went up): a GET /fresh sent at once
  (before the route's first sync could answer) is retried on the local
  budget, not refused, and the retry reaches Redis's count for that route;
- SIGHUP dropping /fresh again just after a GET /fresh (before the next
  sync): the route's last sync still goes out, so Redis counts that
  request, and the retry tokens the route held unspent are handed back
  (Redis's count of granted tokens is the retries the origin saw);
- the same for a route dropped while a sync of it is out (Redis frozen
  over the sync, a GET sent and the route dropped meanwhile, Redis thawed
  before the round's deadline): that sync's grant goes back and the GET
  is counted;
- the same for a route dropped just before Redis's scripts are flushed
  (SCRIPT FLUSH): its last sync, refused with NOSCRIPT, is sent again
  with the script's text, as a live route's is.
"""

import re
import threading
import time

import harness as h
from fleet_gauge import admin_get, wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 250ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 3, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: burst
  sync_interval: 100ms
"""

FRESH_ROUTE = """\
routes:
  - name: fresh
    match: { path_prefix: /fresh }
"""

LATER_ROUTE = """\
routes:
  - name: later
    match: { path_prefix: /later }
"""

WAVES = 10
WAVE = 5

# The second proxy's sync interval: the reload and a request with two
# backoffs must fit in one, so it scales with the sanitizers' slowness; the
# window stays at least four intervals, or the config is warned about.
SLOW_SYNC_S = 2 * h.SLOW
SLOW_WINDOW_S = 10 * h.SLOW


def wave(proxy, k):
    """WAVE concurrent GET /storm; returns their responses."""
    out = [None] * WAVE

    def one(i):
        try:
            out[i] = h.fetch(proxy.port(), "GET", "/storm?w=%d&i=%d" % (k, i), "fleet.example",
                             timeout=10 * h.SLOW)
        except Exception as e:  # recorded and reported
            out[i] = "%s: %s" % (type(e).__name__, e)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(WAVE)]
    for th in threads:
        th.start()
    return threads, out

FLUSHED_ROUTE = """\
routes:
  - name: flushed
    match: { path_prefix: /flushed }
"""


def retried(responses):
    return sum(1 for r in responses
               if isinstance(r, h.Response) and int(r.header("Retry-Attempts") or 0) >= 2)


def route_counts(redis, route, window_s=10):
    fields = redis.command("HGETALL", "retryproxy:{burst}:%s:%d" % (route, window_s * 1000))
    counts = dict(zip(fields[0::2], fields[1::2]))
    return (sum(int(v) for k, v in counts.items() if k.startswith("q")),
            sum(int(v) for k, v in counts.items() if k.startswith("r")))


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/storm", [503])
    origin.script("/fresh", [503])
    origin.script("/later", [503])
    origin.script("/flushed", [503])
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port)
    waves = []

    @t.check("the proxy connects to the fleet's Redis")
    def _():
        wait_gauge([proxy], 1, 10 * h.SLOW)

    @t.check("five waves of 10 failing requests: every one gets the origin's 503")
    def _():
        running = []
        for k in range(WAVES):
            threads, out = wave(proxy, k)
            running.append(threads)
            waves.append(out)
            time.sleep(0.1)
        for threads in running:
            for th in threads:
                th.join(20 * h.SLOW)
        bad = [r for out in waves for r in out
               if not isinstance(r, h.Response) or r.status != 503]
        h.eq(bad, [], "answers other than the origin's 503")

    @t.check("the first wave meets a quiet proxy's lease; the storm then spends the fleet's "
             "floor: at least 30 retries of the 40 it allows")
    def _():
        counts = [retried(out) for out in waves]
        retries = len(origin.requests_for("/storm")) - WAVES * WAVE
        print("requests retried per wave: %s; %d retries at the origin" % (counts, retries),
              flush=True)
        h.ok(counts[0] < WAVE, "the whole first wave was retried: %s" % counts)
        h.ok(retries >= 30, "only %d retries reached the origin: %s" % (retries, counts))
        lines = [h.access_fields(ln) for ln in proxy.stderr_lines()]
        budget = [f for f in lines if f.get("target", "").startswith("/storm")
                  and f.get("gave_up") == "budget"]
        h.ok(budget, "no access line says gave_up=budget")

    @t.check("the origin's tries stay within the fleet's bound, and Redis counts the grants")
    def _():
        n = WAVES * WAVE
        tries = len(origin.requests_for("/storm"))
        # the lease slack: what the proxy held unspent, at most twice the
        # retries asked for in one interval (a wave's two tries each)
        bound = 1.2 * n + 30 + 2 * 2 * WAVE
        h.ok(tries <= bound, "origin saw %d tries for %d requests; the bound is %.0f"
             % (tries, n, bound))
        h.wait_until(lambda: route_counts(redis, "default")[0] >= n, 5 * h.SLOW,
                     "the requests counted in Redis")
        q, r = route_counts(redis, "default")
        h.ok(r >= tries - n, "Redis counts %d retries granted; the origin saw %d retries"
             % (r, tries - n))

    # stopped, so that the scripts Redis runs are the second proxy's syncs
    t.stop_proxy(proxy)
    # syncing every 2 s (6 s), so that the new route's first sync is far off
    slow = t.proxy(CONFIG.replace("sync_interval: 100ms", "sync_interval: %ds" % SLOW_SYNC_S)
                   .replace("window: 10s", "window: %ds" % SLOW_WINDOW_S),
                   ORIGIN=origin.port, REDIS=redis.port)

    def script_calls():
        info = redis.command("INFO", "commandstats")
        return sum(int(n) for n in re.findall(r"^cmdstat_eval(?:sha)?:calls=(\d+)", info, re.M))

    @t.check("a route added by SIGHUP retries at once on the local budget; Redis counts it")
    def _():
        wait_gauge([slow], 1, 10 * h.SLOW)
        # a sync just answered, so the next is a whole interval away (the
        # sync timer runs from the proxy's start: right after the gauge
        # went 1 the next sync could be close, under load)
        before = script_calls()
        h.wait_until(lambda: script_calls() > before, 3 * SLOW_SYNC_S, "a sync of the proxy's")
        slow.reload(slow.config_text + FRESH_ROUTE)
        r = h.fetch(slow.port(), "GET", "/fresh", "fleet.example", timeout=10 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "3"), "status, Retry-Attempts")
        h.wait_until(lambda: route_counts(redis, "fresh", SLOW_WINDOW_S)[1] >= 2, 6 * h.SLOW,
                     "the route's retries counted in Redis")
        h.ok("retryproxy_fleet_connected 1" in admin_get(slow, "/metrics"),
             "the fleet gauge fell to 0")

    def counted_in_redis(route, n):
        """Wait until Redis counts the n requests of route (whose path is
        /ROUTE), then check it counts them and a token granted for each
        retry the origin saw."""
        tries = len(origin.requests_for("/" + route))
        h.wait_until(lambda: route_counts(redis, route, SLOW_WINDOW_S)[0] >= n,
                     3 * SLOW_SYNC_S, "Redis to count the route's %d requests (%r)"
                     % (n, route_counts(redis, route, SLOW_WINDOW_S)))
        h.eq(route_counts(redis, route, SLOW_WINDOW_S), (n, tries - n),
             "requests, tokens granted (retries made: origin tries - %d)" % n)

    @t.check("a route dropped by SIGHUP: its last requests reach Redis, its lease goes back")
    def _():
        before = script_calls()
        h.wait_until(lambda: script_calls() > before, 3 * SLOW_SYNC_S, "a sync of the proxy's")
        h.fetch(slow.port(), "GET", "/fresh", "fleet.example", timeout=10 * h.SLOW)
        slow.reload(slow.config_text.replace(FRESH_ROUTE, ""))
        counted_in_redis("fresh", 2)

    @t.check("a route dropped by SIGHUP while its sync is out: that sync's grant goes back, "
             "later requests reach Redis")
    def _():
        text = slow.config_text
        slow.reload(text + LATER_ROUTE)
        h.wait_until(lambda: route_counts(redis, "later", SLOW_WINDOW_S)[1] >= 1,
                     3 * SLOW_SYNC_S, "the route's first lease")
        redis.freeze()
        try:
            # a round goes out within a sync interval and waits (its
            # deadline is two intervals after it went)
            time.sleep(SLOW_SYNC_S * 1.1)
            h.fetch(slow.port(), "GET", "/later", "fleet.example", timeout=10 * h.SLOW)
            slow.reload(text)
        finally:
            redis.thaw()
        counted_in_redis("later", 1)
        h.ok("retryproxy_fleet_connected 1" in admin_get(slow, "/metrics"),
             "the fleet gauge fell to 0")

    @t.check("a route dropped by SIGHUP, then Redis's scripts flushed: its last sync is sent "
             "again after NOSCRIPT, its request counted and its lease handed back")
    def _():
        text = slow.config_text
        slow.reload(text + FLUSHED_ROUTE)
        h.wait_until(lambda: route_counts(redis, "flushed", SLOW_WINDOW_S)[1] >= 1,
                     3 * SLOW_SYNC_S, "the route's first lease")
        before = script_calls()
        h.wait_until(lambda: script_calls() > before, 3 * SLOW_SYNC_S, "a sync of the proxy's")
        h.fetch(slow.port(), "GET", "/flushed", "fleet.example", timeout=10 * h.SLOW)
        slow.reload(text)
        redis.command("SCRIPT", "FLUSH")
        counted_in_redis("flushed", 1)


h.run(scenario, __doc__)
