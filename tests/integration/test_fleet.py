#!/usr/bin/env python3
"""Scenario: six proxies of one fleet share their route budget through a
real Redis, fall back to their local budgets while Redis is frozen or
gone, and share it again when it is back.

Redis: a redis-server on a free loopback port, nothing written to disk.
Origin: answers every /storm request with 503, /ok with 200.
Proxies: six sidecars, each with its admin listener; max_attempts 5,
initial_backoff 10ms, no jitter; budget ratio 0.2, min_per_second 5,
window 10s; fleet: name "checkout", sync_interval 100ms.
Client: 6 threads, each sending a GET /storm every 150 ms for 4.5 s
(N requests in all), each to the next proxy in turn.
Must hold:
- every proxy reports retryproxy_fleet_connected 1 before the storm;
- the origin sees at most N x (1 + 0.2) + 5 x 10 + lease slack tries (far
  below the N x 1.2 + 6 x 50 six local floors would allow), and at least
  N + 40 (the fleet's floor is spent, not withheld);
- Redis keeps one hash per fleet and route, with an expiry;
- Redis frozen (SIGSTOP): requests through every proxy still answer at
  once (200 for /ok; /storm retried on the local budget), each proxy logs
  one warning however many reconnects fail, and its gauge goes to 0;
- Redis thawed: every proxy reconnects by itself (gauge 1, "answers
  again" logged);
- Redis stopped and started again on the same port (its scripts gone):
  the proxies notice, fall back, and reconnect;
- the scripts flushed while connected (NOSCRIPT): syncing goes on;
- SIGHUP with the fleet: section dropped: no fleet gauge, /config has no
  fleet:; with another name: /config shows it and the gauge comes back.
"""

import re
import threading
import time

import harness as h
from fleet_gauge import admin_get, fleet_gauge, wait_gauge
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
    max_attempts: 5
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 50ms
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 5, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
"""

PROXIES = 6
RATIO = 0.2
MIN_PER_SECOND = 5
WINDOW = 10.0
THREADS = 6
PERIOD = 0.15
PER_THREAD = 30
# Each proxy holds at most max(1, ceil(2 x ratio x its requests per sync),
# 2 x the retries it made or was refused per sync) unspent tokens; at this
# load (one request per proxy per 150 ms, a retry or two each) that is 4.
SLACK = 4 * PROXIES


def storm(proxies, tag):
    """The client load; returns [(id, Response or error)]."""
    results = []
    lock = threading.Lock()
    t0 = time.monotonic() + 0.1

    def client(i):
        for k in range(PER_THREAD):
            at = t0 + k * PERIOD + i * PERIOD / THREADS
            time.sleep(max(0.0, at - time.monotonic()))
            rid = k * THREADS + i
            proxy = proxies[rid % len(proxies)]
            try:
                got = h.fetch(proxy.port(), "GET", "/storm?%s=%d" % (tag, rid), "fleet.example",
                              timeout=10 * h.SLOW)
            except Exception as e:  # recorded and reported
                got = "%s: %s" % (type(e).__name__, e)
            with lock:
                results.append((rid, got))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(PER_THREAD * PERIOD + 30 * h.SLOW)
    return sorted(results, key=lambda r: r[0])


def quick_requests(proxies, path, timeout):
    """One GET through each proxy; returns [(proxy index, Response)]."""
    out = []
    for i, p in enumerate(proxies):
        out.append((i, h.fetch(p.port(), "GET", path, "fleet.example", timeout=timeout)))
    return out


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/storm", [503])
    origin.script("/ok", [200])
    proxies = [t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port) for _ in range(PROXIES)]

    @t.check("every proxy connects to the fleet's Redis")
    def _():
        wait_gauge(proxies, 1, 10 * h.SLOW)
        for p in proxies:
            p.wait_log(r"fleet checkout: connected to redis 127\.0\.0\.1:%d" % redis.port)

    results = storm(proxies, "id")
    time.sleep(0.5 * h.SLOW)
    n = len(results)
    tries = len(origin.requests_for("/storm"))
    bound = (1 + RATIO) * n + MIN_PER_SECOND * WINDOW + SLACK
    local = (1 + RATIO) * n + PROXIES * MIN_PER_SECOND * WINDOW
    print("storm: %d client requests over %d proxies, %d tries at the origin; fleet bound "
          "%.0f; six local budgets would allow %.0f" % (n, PROXIES, tries, bound, local),
          flush=True)

    @t.check("every storm request got the origin's 503")
    def _():
        h.eq(n, THREADS * PER_THREAD, "requests sent")
        bad = [(rid, got) for rid, got in results
               if not isinstance(got, h.Response) or got.status != 503]
        h.eq(bad, [], "requests without the origin's 503")

    @t.check("origin tries <= N x (1 + ratio) + min_per_second x window + lease slack, once "
             "for the fleet")
    def _():
        h.ok(tries <= bound, "origin saw %d tries for %d requests; the fleet allows %.0f"
             % (tries, n, bound))

    @t.check("the fleet's floor is spent: at least N + 40 tries")
    def _():
        h.ok(tries >= n + 40, "only %d tries for %d requests" % (tries, n))

    @t.check("Redis holds one hash for the fleet's route, with an expiry")
    def _():
        keys = redis.command("KEYS", "retryproxy:*")
        h.eq(keys, ["retryproxy:{checkout}:default:10000"], "keys")
        ttl = redis.command("PTTL", keys[0])
        h.ok(0 < ttl <= 11000, "PTTL %s" % ttl)
        fields = redis.command("HGETALL", keys[0])
        counts = dict(zip(fields[0::2], fields[1::2]))
        requests = sum(int(v) for k, v in counts.items() if k.startswith("q"))
        h.ok(n - 6 <= requests <= n + 6,
             "Redis counted %d requests for %d sent (%r)" % (requests, n, counts))

    redis.freeze()
    frozen_at = time.monotonic()

    @t.check("Redis frozen: requests through every proxy answer at once")
    def _():
        slowest = 0.0
        for _ in range(5):
            for i, r in quick_requests(proxies, "/ok", 10 * h.SLOW):
                h.eq(r.status, 200, "proxy %d /ok status" % i)
                slowest = max(slowest, r.elapsed)
            time.sleep(0.2)
        h.ok(slowest < 1.0 * h.SLOW, "slowest /ok took %.3fs while Redis was frozen" % slowest)

    @t.check("Redis frozen: each proxy falls back (gauge 0) and warns once")
    def _():
        wait_gauge(proxies, 0, 5 * h.SLOW)
        # long enough for reconnects to fail again (connect, then no answer)
        time.sleep(max(0.0, frozen_at + 3.0 * h.SLOW - time.monotonic()))
        for i, p in enumerate(proxies):
            lines = [ln for ln in p.stderr_lines() if "retry budgets are local" in ln]
            h.eq(len(lines), 1, "proxy %d warnings (%r)" % (i, lines))
            h.ok("no answer within 500 ms" in lines[0], "proxy %d warning: %s" % (i, lines[0]))

    @t.check("Redis frozen: failing requests are retried on the local budgets")
    def _():
        for i, r in quick_requests(proxies, "/storm?frozen=1", 10 * h.SLOW):
            h.eq(r.status, 503, "proxy %d status" % i)
            h.eq(r.header("Retry-Attempts"), "5", "proxy %d Retry-Attempts" % i)

    redis.thaw()

    @t.check("Redis thawed: every proxy reconnects by itself")
    def _():
        wait_gauge(proxies, 1, 15 * h.SLOW)
        for p in proxies:
            p.wait_log(r"fleet checkout: redis 127\.0\.0\.1:%d answers again" % redis.port)

    redis.stop()

    @t.check("Redis stopped: the proxies fall back at once and keep answering")
    def _():
        wait_gauge(proxies, 0, 5 * h.SLOW)
        for i, r in quick_requests(proxies, "/ok", 10 * h.SLOW):
            h.eq(r.status, 200, "proxy %d /ok status" % i)

    redis.start()

    @t.check("Redis started again on the same port: the proxies reconnect")
    def _():
        wait_gauge(proxies, 1, 15 * h.SLOW)
        h.wait_until(lambda: redis.command("KEYS", "retryproxy:*"), 5 * h.SLOW,
                     "the proxies to sync with the new Redis")

    @t.check("scripts flushed while connected (NOSCRIPT): syncing goes on")
    def _():
        redis.command("SCRIPT", "FLUSH")
        redis.command("DEL", "retryproxy:{checkout}:default:10000")
        for i, r in quick_requests(proxies, "/ok", 10 * h.SLOW):
            h.eq(r.status, 200, "proxy %d /ok status" % i)

        def synced():
            fields = redis.command("HGETALL", "retryproxy:{checkout}:default:10000") or []
            counts = dict(zip(fields[0::2], fields[1::2]))
            return sum(int(v) for k, v in counts.items() if k.startswith("q")) >= PROXIES
        h.wait_until(synced, 5 * h.SLOW, "the /ok requests to be counted in Redis")
        time.sleep(0.5)
        h.ok(all(fleet_gauge(p) == 1 for p in proxies), "a proxy fell back after NOSCRIPT")

    q = proxies[1]

    @t.check("a reload drops a route's lease while its sync is out: the late reply ends "
             "it and syncing goes on")
    def _():
        redis.freeze()
        try:
            time.sleep(0.15)  # a round goes out and waits (its deadline is 500 ms)
            q.reload(q.config_text.replace("window: 10s", "window: 11s"))
        finally:
            redis.thaw()
        h.wait_until(lambda: "retryproxy:{checkout}:default:11000" in
                     redis.command("KEYS", "retryproxy:*"), 10 * h.SLOW,
                     "the new window's key")
        wait_gauge([q], 1, 10 * h.SLOW)
        h.eq(h.fetch(q.port(), "GET", "/ok", "fleet.example").status, 200, "/ok status")

    p = proxies[0]
    p_text = p.config_text

    def redis_clients():
        """Connections to Redis but the one asking."""
        lines = redis.command("CLIENT", "LIST").splitlines()
        return [ln for ln in lines if " cmd=client" not in ln]

    @t.check("reload without fleet: connection closed, no gauge, no fleet: in /config")
    def _():
        h.eq(len(redis_clients()), PROXIES, "connections to Redis before")
        p.reload(re.sub(r"fleet:\n(  .*\n)+", "", p_text))
        h.eq(fleet_gauge(p), None, "fleet gauge")
        h.ok("fleet:" not in admin_get(p, "/config"), "/config still has fleet:")
        h.wait_until(lambda: len(redis_clients()) == PROXIES - 1, 5 * h.SLOW,
                     "the proxy's connection to Redis to close (%r)" % redis_clients())

    @t.check("reload with another fleet name: /config shows it, the proxy connects")
    def _():
        p.reload(p_text.replace("name: checkout", "name: payments"))
        h.ok(re.search(r"^fleet:\n  redis: 127\.0\.0\.1:%d\n  name: payments\n"
                       r"  sync_interval: 100ms$" % redis.port, admin_get(p, "/config"), re.M),
             "/config:\n" + admin_get(p, "/config"))
        wait_gauge([p], 1, 10 * h.SLOW)
        h.wait_until(lambda: "retryproxy:{payments}:default:10000" in
                     redis.command("KEYS", "retryproxy:*"), 5 * h.SLOW, "the new fleet's key")


h.run(scenario, __doc__, timeout=120)
