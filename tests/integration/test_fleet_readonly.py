#!/usr/bin/env python3
"""Scenario: the fleet's Redis answers SCRIPT LOAD but refuses every sync
(a read-only replica after a failover: READONLY). The proxy must treat that
as Redis being down, not as a connection that works.

Redis: a redis-server started with --replicaof 127.0.0.1 1, a read-only
replica of nothing: reads and SCRIPT LOAD answer, the script's writes fail.
Origin: answers every /fail request with 503.
Proxy: max_attempts 4, short backoffs; budget ratio 0.2, min_per_second 5,
window 10s; fleet: sync_interval 100ms.
Must hold, over 3 s:
- one warning "retry budgets are local", naming the READONLY error;
- few connections to Redis (the reconnect backoff grows: 100 ms doubling
  gives about six connects in 3 s; a loop that reset the backoff at every
  SCRIPT LOAD made about thirty);
- retryproxy_fleet_connected stays 0;
- a failing idempotent request is retried on the local budget: the
  client sees Retry-Attempts 4.
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
    max_attempts: 4
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 20ms
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 5, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
"""


def connections(redis):
    """Connections redis-server has accepted so far (this call's included)."""
    info = redis.command("INFO", "stats")
    return int(re.search(r"^total_connections_received:(\d+)", info, re.M).group(1))


def scenario(t):
    redis = RedisServer(t.tmp, extra_args=["--replicaof", "127.0.0.1", "1"]).start()
    t.defer(redis.stop)
    before = connections(redis)
    origin = t.origin()
    origin.script("/fail", [503])
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port)
    started = time.monotonic()
    gauges = []
    while time.monotonic() < started + 3.0 * h.SLOW:
        m = re.search(r"^retryproxy_fleet_connected (\S+)$",
                      h.curl("http://127.0.0.1:%d/metrics" % p.port(1), check=True).body.decode(),
                      re.M)
        gauges.append(m.group(1) if m else None)
        time.sleep(0.05)
    # the INFO calls themselves count: one before, one now
    proxy_connections = connections(redis) - before - 1
    print("%d connections from the proxy in %.1f s" % (proxy_connections, 3.0 * h.SLOW),
          flush=True)

    @t.check("one warning, naming Redis's error, however many syncs fail")
    def _():
        lines = [ln for ln in p.stderr_lines() if "retry budgets are local" in ln]
        h.eq(len(lines), 1, "warnings (%r)" % lines[:5])
        h.ok("READONLY" in lines[0], "warning: %s" % lines[0])
        h.eq([ln for ln in p.stderr_lines() if "answers again" in ln or "connected to" in ln],
             [], "lines saying the fleet is connected")

    @t.check("the reconnect backoff grows: few connections to Redis")
    def _():
        h.ok(1 <= proxy_connections <= 10 * h.SLOW,
             "%d connections in %.1f s" % (proxy_connections, 3.0 * h.SLOW))

    @t.check("retryproxy_fleet_connected stays 0")
    def _():
        h.eq(sorted(set(gauges)), ["0"], "gauge values seen")

    @t.check("a failing idempotent request gets the local budget's retries")
    def _():
        for i in range(3):
            r = h.fetch(p.port(), "GET", "/fail?n=%d" % i, "fleet.example", timeout=10 * h.SLOW)
            h.eq(r.status, 503, "status")
            h.eq(r.header("Retry-Attempts"), "4", "request %d Retry-Attempts" % i)


h.run(scenario, __doc__, timeout=60)
