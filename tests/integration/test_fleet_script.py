#!/usr/bin/env python3
"""Scenario: the fleet's Lua script (src/fleet_lease.c, read from the
source tree) run directly against a real redis-server, checking its grant
arithmetic. Window 2000 ms, so a bucket is 100 ms and 21 buckets are summed.
ARGV: requests, want, ratio, min_per_second, window ms, tokens handed back,
the bucket they were granted in, retries owed (optional); it returns
{grant, requests counted, tokens granted counted, bucket}.
Must hold:
- grant = min(want, floor(ratio x requests + min_per_second x window s)
  - granted), and 0 once that is used up; a bound whole in decimals is
  granted whole though binary floating point misses it (ratio 0.58 x 50
  requests is 28.999999999999996 in a double: 29 tokens, not 28);
- tokens handed back to the bucket that granted them can be granted again;
  a bucket never goes below 0, and handing back to a bucket that is gone
  creates nothing;
- retries owed (spent after their tokens were handed back) are counted
  as granted, in the current bucket, before the grant is worked out; a
  call without them (an older proxy's) counts none;
- requests stay counted 20 buckets later (a window and part of a
  twentieth: 21 buckets), and are gone at 21 buckets, when the old fields
  are deleted and the grant is refilled (the floor);
- a field of a bucket later than Redis's clock's (the clock stepped back,
  a failover to a server whose clock is behind, or an older proxy's
  shorter buckets during an upgrade) is deleted, not counted;
- the key expires a window and two buckets after the last call;
- a window that is not a multiple of 20 ms gets buckets rounded up (250
  ms: 13 ms), as the proxy's own budget does, so that 21 span it whole.
"""

import ast
import os
import re
import time

import harness as h
from redisserver import RedisServer

WINDOW = 2000
BUCKET = WINDOW // 20


def read_script():
    """The C string literal fleet_lease_script, as Redis receives it."""
    with open(os.path.join(h.REPO, "src", "fleet_lease.c")) as f:
        src = f.read()
    body = src[src.index("const char fleet_lease_script[] ="):]
    body = body[:body.index(";\n")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return "".join(ast.literal_eval('"%s"' % lit)
                   for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', body))


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    script = read_script()

    def run(key, requests, want, ratio, floor, back=0, epoch=0, owed=None):
        args = [requests, want, ratio, floor, WINDOW, back, epoch]
        if owed is not None:
            args.append(owed)
        return redis.command("EVAL", script, 1, key, *args)

    def fields(key):
        got = redis.command("HGETALL", key) or []
        return dict(zip(got[0::2], (int(v) for v in got[1::2])))

    def redis_epoch():
        sec, usec = redis.command("TIME")
        now = int(sec) * 1000 + int(usec) // 1000
        return now // BUCKET, now % BUCKET

    @t.check("grant = min(want, floor(ratio x requests + floor x window) - granted)")
    def _():
        g = run("a", 50, 100, 0.2, 1)
        h.eq(g[:3], [12, 50, 12], "50 requests, ratio 0.2, floor 1/s over 2 s")
        h.eq(run("a", 0, 5, 0.2, 1)[:3], [0, 50, 12], "once used up")
        h.eq(run("a", 7, 100, 0.2, 1)[:3], [1, 57, 13], "7 more: floor(11.4 + 2) - 12")
        h.eq(run("b", 0, 3, 0.2, 1)[:3], [2, 0, 2], "no requests: the floor only")
        h.eq(run("c", 100, 3, 0.2, 0)[:3], [3, 100, 3], "at most what is wanted")

    @t.check("ratio 0.58 x 50 requests: 29 tokens, as the decimals say, not 28")
    def _():
        h.eq(run("dec", 50, 100, 0.58, 0)[:3], [29, 50, 29], "grant, requests, granted")
        h.eq(run("dec", 0, 100, 0.58, 0)[:3], [0, 50, 29], "then none")

    @t.check("tokens handed back go to their bucket and can be granted again")
    def _():
        g = run("d", 50, 10, 0.2, 0)
        h.eq(g[0], 10, "grant")
        r = run("d", 0, 0, 0.2, 0, back=4, epoch=g[3])
        h.eq(r[:3], [0, 50, 6], "after handing back 4")
        h.eq(fields("d")["r%d" % g[3]], 6, "the granting bucket")
        h.eq(run("d", 0, 100, 0.2, 0)[:3], [4, 50, 10], "the 4 granted again")

    @t.check("a bucket never goes below 0; a bucket gone is not created")
    def _():
        g = run("e", 10, 5, 0.2, 0)
        h.eq(g[0], 2, "grant")
        run("e", 0, 0, 0.2, 0, back=1000, epoch=g[3])
        h.eq(fields("e")["r%d" % g[3]], 0, "the bucket after handing back 1000")
        run("e", 0, 0, 0.2, 0, back=3, epoch=g[3] - 1000)
        h.ok("r%d" % (g[3] - 1000) not in fields("e"), "fields %r" % fields("e"))
        h.eq(run("e", 0, 100, 0.2, 0)[:3], [2, 10, 2], "what was handed back, granted again")

    @t.check("retries owed count as granted, in the current bucket, before the grant")
    def _():
        g = run("h", 50, 4, 0.2, 0, owed=3)
        h.eq(g[:3], [4, 50, 7], "50 requests, 3 owed: 4 granted of the 7 left")
        h.eq(fields("h")["r%d" % g[3]], 7, "the current bucket")
        h.eq(run("h", 0, 100, 0.2, 0, owed=0)[:3], [3, 50, 10], "the rest")
        h.eq(run("i", 50, 100, 0.2, 0, owed=12)[:3], [0, 50, 12], "owed beyond the window's share")
        h.eq(run("j", 50, 100, 0.2, 0)[:3], [10, 50, 10], "no owed argument: none")

    @t.check("requests count for 21 buckets, then go, old fields deleted, floor refilled")
    def _():
        first = run("f", 50, 100, 0.2, 1)
        h.eq(first[:3], [12, 50, 12], "first grant")
        e1 = first[3]
        for distance in (20, 21):
            # aim at the middle of the bucket, then judge by the bucket the
            # script reports it ran in
            while True:
                epoch, into = redis_epoch()
                if epoch >= e1 + distance and into >= BUCKET // 4:
                    break
                time.sleep(0.01)
            got = run("f", 0, 100, 0.2, 1)
            if got[3] - e1 <= 20:
                h.eq(got[:3], [0, 50, 12], "%d buckets later (still counted)" % (got[3] - e1))
            else:
                h.eq(got[:3], [2, 0, 2], "%d buckets later (gone, floor refilled)"
                     % (got[3] - e1))
                h.eq(fields("f"), {"r%d" % got[3]: 2}, "fields left")
        h.eq(got[3] - e1 >= 21, True, "reached 21 buckets")

    @t.check("a field of a later bucket than Redis's clock's is deleted, not counted")
    def _():
        epoch, _ = redis_epoch()
        # an hour ahead: a Redis whose clock stepped back an hour
        ahead = epoch + 3600 * 1000 // BUCKET
        redis.command("HSET", "m", "q%d" % ahead, 1000, "r%d" % ahead, 3)
        h.eq(run("m", 0, 100, 0.2, 1)[:3], [2, 0, 2], "the floor only, nothing from ahead")
        h.ok(all(int(k[1:]) < ahead for k in fields("m")), "fields left %r" % fields("m"))

    @t.check("a window not a multiple of 20 ms: buckets rounded up, 21 span all of it")
    def _():
        # 250 ms: 13 ms buckets (12 would count back only 240 to 252 ms)
        before, _ = redis.command("TIME")
        got = redis.command("EVAL", script, 1, "k", 1, 1, 0.2, 1, 250, 0, 0)
        after, _ = redis.command("TIME")
        h.ok(int(before) * 1000 // 13 <= got[3] <= (int(after) + 1) * 1000 // 13,
             "bucket %d numbered in 13 ms buckets" % got[3])
        ttl = redis.command("PTTL", "k")
        h.ok(250 < ttl <= 250 + 2 * 13, "PTTL %d" % ttl)

    @t.check("the key expires a window and two buckets after the last call")
    def _():
        run("g", 5, 1, 0.2, 1)
        ttl = redis.command("PTTL", "g")
        h.ok(WINDOW < ttl <= WINDOW + 2 * BUCKET, "PTTL %d" % ttl)
        h.wait_until(lambda: redis.command("EXISTS", "g") == 0,
                     (WINDOW + 2 * BUCKET) / 1000.0 + 2, "the key to expire")


h.run(scenario, __doc__, timeout=60, needs_proxy=False)
