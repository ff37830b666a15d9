#!/usr/bin/env python3
"""Scenario: names whose lookups never end do not hold up other names.

Client: 48 raw-socket GETs through the forward proxy, each for its own name
(dead0.test ... dead47.test) that the resolver never answers (a resolver
whose upstream for that domain is down drops the query), left waiting;
then GETs for names it answers at once, and a last one after a reload
whose resolv.conf sets `options max-inflight:4`.
Origin: the test origin on 127.0.0.1; dnsstub.DnsStub on a loopback port,
named by RETRYPROXY_RESOLV_CONF (timeout:5 attempts:2, as a default
resolv.conf keeps a question out for seconds), answers good*.test and drops
every other question. connect_timeout 4s, one try, health off.
Must hold: every waiting name's A and AAAA questions reach the stub at once
(96 questions; before, libevent's default cap of 64 questions in flight
held the other 32 back, in a queue every later lookup joined), and a GET
for a name the resolver answers gets 200 within a second while they wait
(before, it waited behind them until their connect_timeout ended them, 4 s,
and got 502 when its own ended first); a resolv.conf that sets libevent's
`max-inflight:` still sets the cap (a name then waits behind the dead ones),
and a reload whose file no longer sets it lifts it again.
"""

import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  connect_timeout: 4s
defaults:
  retry: { max_attempts: 1 }
health: { down_after: 0 }
"""

DEAD = 48


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"good%d.test" % i: "127.0.0.1" for i in range(3)},
                           default_mode="silent").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, options="timeout:5 attempts:2")
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv})

    def dead_questions():
        return [q for q in stub.queries if q.name.startswith("dead")]

    waiting = []
    t.defer(lambda: [c.close() for c in waiting])
    for i in range(DEAD):
        c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        waiting.append(c)
        authority = "dead%d.test:%d" % (i, origin.port)
        c.send(h.request("GET", "http://%s/" % authority, authority))

    @t.check("every waiting name's questions reach the resolver at once (%d)" % (2 * DEAD))
    def _():
        try:
            h.wait_until(lambda: len(dead_questions()) >= 2 * DEAD, 2 * h.SLOW,
                         "%d questions" % (2 * DEAD))
        except AssertionError:
            raise AssertionError("the stub got %d questions for the dead names, not %d: the rest "
                                 "wait in the resolver's queue" % (len(dead_questions()), 2 * DEAD))

    @t.check("a name the resolver answers gets 200 within 1 s while the dead names wait")
    def _():
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(proxy.port(0), "good0.test:%d" % origin.port))
        took = time.monotonic() - start
        h.eq(status, 404, "status from the origin (it has no page /)")
        h.ok(took < 1.0 * h.SLOW, "took %.2f s (the dead names ended at connect_timeout 4 s)"
             % took)

    @t.check("the waiting requests end at connect_timeout with 502 naming DNS")
    def _():
        for c in waiting[:3]:
            r = c.read_response()
            h.check_error_response(r, 502, ["resolve", "dns"])

    @t.check("a resolv.conf that sets max-inflight: still sets the cap")
    def _():
        stub.write_resolv_conf(t.tmp, options="timeout:5 attempts:2 max-inflight:4")
        proxy.reload()
        more = []
        t.defer(lambda: [c.close() for c in more])
        for i in range(4):
            c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
            more.append(c)
            authority = "dead%d.test:%d" % (100 + i, origin.port)
            c.send(h.request("GET", "http://%s/" % authority, authority))
        h.wait_until(lambda: len([q for q in dead_questions() if q.name.startswith("dead10")]) >= 4,
                     2 * h.SLOW, "the cap's 4 questions")
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(proxy.port(0), "good1.test:%d" % origin.port))
        took = time.monotonic() - start
        h.ok(took > 1.0, "good1.test answered after %.2f s (%r): it should have waited behind "
             "the 4 dead names' questions" % (took, status))

    @t.check("a reload whose resolv.conf no longer sets max-inflight: lifts that cap again")
    def _():
        more = []
        t.defer(lambda: [c.close() for c in more])
        for i in range(4):
            c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
            more.append(c)
            authority = "dead%d.test:%d" % (200 + i, origin.port)
            c.send(h.request("GET", "http://%s/" % authority, authority))
        h.wait_until(lambda: len([q for q in dead_questions() if q.name.startswith("dead20")]) >= 4,
                     2 * h.SLOW, "the cap's 4 questions")
        stub.write_resolv_conf(t.tmp, options="timeout:5 attempts:2")
        proxy.reload()
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(proxy.port(0), "good2.test:%d" % origin.port))
        took = time.monotonic() - start
        h.eq(status, 404, "status from the origin (it has no page /)")
        h.ok(took < 1.0 * h.SLOW, "took %.2f s: the cap of 4 is still in force" % took)


h.run(scenario, __doc__, timeout=60)
