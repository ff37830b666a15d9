#!/usr/bin/env python3
"""Scenario: the fleet's Redis closes idle connections (its `timeout`
config, here 1 s) sooner than the proxy syncs (sync_interval 3s).

Redis: a redis-server on a free loopback port with --timeout 1.
Origin: answers 200.
Proxy: one route with a fleet budget; fleet: sync_interval 3s.
Must hold: over 10 s (three syncs) the proxy keeps its one connection: no
"retry budgets are local" warning, no "answers again", the gauge stays 1,
and Redis saw one connection from it. Before the fix Redis closed the
connection a second or two after every sync, and the proxy fell back to
its local budgets, reconnected and warned each time.
"""

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
    budget: { ratio: 0.1, min_per_second: 5, window: 60s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 3s
"""


def evalsha_clients(redis):
    """Connections Redis holds whose last command was a sync or a PING:
    the proxy's."""
    listing = redis.command("CLIENT", "LIST")
    return [ln for ln in listing.splitlines()
            if " cmd=evalsha " in ln or " cmd=eval " in ln or " cmd=ping " in ln]


def scenario(t):
    redis = RedisServer(t.tmp, extra_args=["--timeout", "1"]).start()
    t.defer(redis.stop)
    origin = t.origin()
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port)
    wait_gauge([p], 1, 10 * h.SLOW)
    first = evalsha_clients(redis)
    gauges = []
    end = time.monotonic() + 10
    while time.monotonic() < end:
        gauges.append(fleet_gauge(p))
        time.sleep(0.25)
    last = evalsha_clients(redis)

    @t.check("the proxy's connection to Redis is kept between syncs")
    def _():
        h.eq([ln for ln in p.stderr_lines()
              if "retry budgets are local" in ln or "answers again" in ln], [],
             "fall-backs and reconnects logged")
        h.eq(sorted(set(gauges)), [1], "retryproxy_fleet_connected over 10 s")
        ids = [ln.split()[0] for ln in first + last]
        h.eq(len(first), 1, "proxy connections at the start: %r" % first)
        h.eq(len(set(ids)), 1, "one connection, the same throughout: %r" % ids)


h.run(scenario, __doc__, timeout=60)
