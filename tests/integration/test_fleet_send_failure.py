#!/usr/bin/env python3
"""Scenario: hiredis refuses to queue the syncs for a while, as it does
when out of memory or when the connection is going away
(redisAsyncCommandArgv returns an error and sends nothing).

Redis: a redis-server on a free loopback port.
Origin: answers 200.
Proxy: one route with a fleet budget; fleet: sync_interval 100ms; a small
library preloaded (tests/integration/redisfail.c) makes
redisAsyncCommandArgv refuse EVALSHA and EVAL while a file exists.
Must hold: the requests the proxy saw while its syncs could not be queued
reach Redis with the first sync that can be (they were dropped before the
fix, when the round was then taken for unanswered and the connection
dropped); the failure is logged once as a warning, however many rounds it
lasts, and its end once, at info level ("queued again"); the connection
is kept (no "retry budgets are local" warning, no reconnect); while the
syncs cannot be queued the route's budget is local, and
retryproxy_fleet_connected says so: 0 (it stayed 1 before), then 1 again
once they can.
"""

import os
import time

import harness as h
from fleet_gauge import fleet_gauge, wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
defaults:
  retry:
    max_attempts: 2
    budget: { ratio: 0.1, min_per_second: 5, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
"""

KEY = "retryproxy:{checkout}:default:10000"
REQUESTS = 20


def counted(redis):
    """The requests Redis holds for the route, all buckets."""
    fields = redis.command("HGETALL", KEY) or []
    return sum(int(fields[i + 1]) for i in range(0, len(fields), 2) if fields[i].startswith("q"))


def scenario(t):
    shim = os.environ.get("RETRYPROXY_REDISFAIL")
    h.ok(shim and os.path.exists(shim), "RETRYPROXY_REDISFAIL names the built library: %r" % shim)
    flag = os.path.join(t.tmp, "fail")
    env = {"LD_PRELOAD": shim, "RETRYPROXY_REDISFAIL_FILE": flag}
    if os.environ.get("RETRYPROXY_SANITIZED"):
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0"
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    p = t.proxy(CONFIG, env=env, ORIGIN=origin.port, REDIS=redis.port)
    wait_gauge([p], 1, 10 * h.SLOW)
    before = counted(redis)

    with open(flag, "w"):
        pass
    for i in range(REQUESTS):
        h.eq(h.curl(p.url + "/status/200?n=%d" % i).status, 200, "request %d" % i)
    time.sleep(1.0)  # ten rounds that cannot be queued, two reply deadlines
    gauge_while_failing = fleet_gauge(p)
    os.unlink(flag)
    deadline = time.monotonic() + 3 * h.SLOW
    while counted(redis) < before + REQUESTS and time.monotonic() < deadline:
        time.sleep(0.1)

    @t.check("the requests seen while the syncs could not be queued reach Redis")
    def _():
        h.eq(counted(redis) - before, REQUESTS, "requests Redis counted")

    @t.check("the failure is logged once, as a warning")
    def _():
        lines = [ln for ln in p.stderr_lines() if "cannot queue" in ln]
        h.eq(len(lines), 1, "warnings: %r" % lines)
        h.ok("warn" in lines[0].lower(), "level: %s" % lines[0])

    @t.check("the end of the failure is logged once, at info level")
    def _():
        lines = [ln for ln in p.stderr_lines() if "queued again" in ln]
        h.eq(len(lines), 1, "lines: %r" % lines)
        h.ok(" info " in lines[0], "level: %s" % lines[0])

    @t.check("the connection is kept; the gauge is 0 while the budget is local, then 1")
    def _():
        h.eq(gauge_while_failing, 0, "retryproxy_fleet_connected while failing")
        wait_gauge([p], 1, 3 * h.SLOW)
        h.eq([ln for ln in p.stderr_lines() if "retry budgets are local" in ln], [],
             "fall-back warnings")
        connects = [ln for ln in p.stderr_lines()
                    if "connected to redis" in ln or "answers again" in ln]
        h.eq(len(connects), 1, "connects to Redis (one, at start): %r" % connects)


h.run(scenario, __doc__, timeout=60)
