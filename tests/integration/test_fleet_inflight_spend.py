#!/usr/bin/env python3
"""Scenario: retries made while a sync is out are counted in Redis, also
when the sync's reply grants fewer tokens than were spent meanwhile.

A sync hands the proxy's unspent lease back to Redis and asks for a new
one; until its reply comes the proxy goes on spending the lease it handed
back. The reply's grant pays for what was spent; what it does not cover is
owed and reported at the next sync. Without that, those retries are
counted nowhere and the other proxies may spend them again.

Redis: a redis-server on a free loopback port, frozen (SIGSTOP) to hold a
sync round out.
Origin: /ok answers 200, /storm answers 503.
Proxy: one; max_attempts 2, 10 ms backoff; budget ratio 0.5,
min_per_second 0, window 10s; fleet: sync_interval 2s (a round unanswered
for 4 s counts as Redis down); log level debug, which names each sync's
grant.
Sequence: 50 GET /ok at once, then a sync leases about 25 tokens; Redis is
frozen past the next round's start; 10 GET /storm one after the other
(each tried twice: 10 retries paid from the lease that round handed back);
Redis thawed, and the round's reply grants 1 (it asked for 1: no requests
since); the next round reports the storm.
Must hold: once the storm's round is answered, the retries Redis counts
for the window, less the lease the proxy holds unspent (the last grant;
nothing failed after it), are at least the retries the origin saw.
"""

import re
import threading
import time

import harness as h
from fleet_gauge import wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: debug, format: text }
defaults:
  retry:
    max_attempts: 2
    initial_backoff: 10ms
    jitter: 0s
    budget: { ratio: 0.5, min_per_second: 0, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 2s
"""

KEY = "retryproxy:{checkout}:default:10000"
SYNC = r"fleet checkout: route default: reported (\d+) requests, granted (\d+) of"


def counted(redis, kind):
    """Requests (q) or retries (r) Redis counts in the route's key now."""
    fields = redis.command("HGETALL", KEY) or []
    return sum(int(v) for k, v in zip(fields[0::2], fields[1::2]) if k.startswith(kind))


def syncs(proxy):
    """(requests reported, tokens granted) of every sync answered so far."""
    return [(int(m.group(1)), int(m.group(2)))
            for m in (re.search(SYNC, ln) for ln in proxy.stderr_lines()) if m]


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/ok", [200])
    origin.script("/storm", [503])
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port)
    wait_gauge([p], 1, 10 * h.SLOW)

    # at once, so that one sync reports them all and leases for them
    threads = [threading.Thread(target=h.fetch, args=(p.port(), "GET", "/ok?n=%d" % i,
                                                      "fleet.example"))
               for i in range(50)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    h.wait_until(lambda: counted(redis, "q") >= 50, 5 * h.SLOW, "the 50 requests counted")
    h.wait_until(lambda: any(n > 0 and g >= 10 for n, g in syncs(p)), 5 * h.SLOW,
                 "a lease for them (syncs so far: %r)" % syncs(p))
    answered = len(syncs(p))

    redis.freeze()
    t.defer(redis.thaw)
    time.sleep(2.3)  # past the next round's start: it waits on the frozen Redis
    frozen_at = time.monotonic()
    statuses = [h.fetch(p.port(), "GET", "/storm?n=%d" % i, "fleet.example").status
                for i in range(10)]
    storm_took = time.monotonic() - frozen_at
    answered_frozen = len(syncs(p))
    redis.thaw()
    retries = len(origin.requests_for("/storm")) - 10

    @t.check("the storm ran while a round was out (the scenario is what it claims)")
    def _():
        h.eq(statuses, [503] * 10, "storm statuses")
        h.ok(retries >= 5, "only %d retries: the lease was not there to spend" % retries)
        h.ok(storm_took < 1.5, "the storm took %.1fs; the round's deadline is 4s" % storm_took)
        h.eq(answered_frozen, answered, "syncs answered while Redis was frozen")

    # the held round's reply, then the round that reports the storm and
    # what was owed
    h.wait_until(lambda: any(n >= 10 for n, _ in syncs(p)[answered:]), 8 * h.SLOW,
                 "the storm reported (syncs since the freeze: %r)" % syncs(p)[answered:])

    @t.check("Redis counts every retry made from the lease handed back")
    def _():
        h.eq([ln for ln in p.stderr_lines() if "no answer within" in ln], [],
             "rounds that timed out")
        # read between two syncs: the last grant is then the lease held
        for _ in range(20):
            before = syncs(p)
            r = counted(redis, "r")
            if syncs(p) == before:
                break
        lease = before[-1][1]
        h.ok(r - lease >= retries,
             "Redis counts %d retries granted, %d of them the lease held unspent: %d for the "
             "%d retries the origin saw (syncs since the freeze: %r)"
             % (r, lease, r - lease, retries, before[answered:]))


h.run(scenario, __doc__, timeout=60)
