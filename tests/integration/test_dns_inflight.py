#!/usr/bin/env python3
"""Scenario: names whose lookups never end do not hold up other names.

Client: 48 raw-socket GETs through the forward proxy, each for its own name
(dead0.test ... dead47.test) that the resolver never answers (a resolver
whose upstream for that domain is down drops the query), left waiting;
then GETs for names it answers at once; then a second proxy whose
resolv.conf sets `options max-inflight:4`, with 2 dead names asked, a GET
for a good name, a reload whose file no longer sets it, and another.
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
`max-inflight:` still sets the cap (a name then waits behind the dead ones'
questions), and a reload whose file no longer sets it lifts it again (the
good name gets 200 at once with those questions still out; before, the
file's cap stayed). With a cap of 2 held by one dead name's questions, 4
more dead names whose clients leave while their questions wait in the
resolver's queue never have them sent, and a good name asked after them
gets 200 once the first dead name's questions time out (2 s), not after
theirs too (before, a given-up lookup left its queued question to be sent
for nobody, and the good name got 502 at connect_timeout).
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

    # a proxy of its own: the questions above are still out (not cancelled:
    # see test_dns_dead_nameserver.py) and would hold a lowered cap full
    capped_conf = stub.write_resolv_conf(t.tmp, name="capped.conf",
                                         options="timeout:5 attempts:2 max-inflight:4")
    capped = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": capped_conf})

    def ask_dead(first, count, wait=True):  # and wait until their questions fill the cap
        for i in range(first, first + count):
            c = h.RawConn(capped.port(0), timeout=20 * h.SLOW)
            t.defer(c.close)
            authority = "dead%d.test:%d" % (i, origin.port)
            c.send(h.request("GET", "http://%s/" % authority, authority))
        if wait:
            h.wait_until(lambda: len([q for q in dead_questions()
                                      if first <= int(q.name[4:].split(".")[0]) < first + count])
                         >= 4, 2 * h.SLOW, "the cap's 4 questions")

    @t.check("a resolv.conf that sets max-inflight: still sets the cap")
    def _():
        ask_dead(100, 2)
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(capped.port(0), "good1.test:%d" % origin.port))
        took = time.monotonic() - start
        h.ok(took > 1.0, "good1.test answered after %.2f s (%r): it should have waited behind "
             "the 2 dead names' 4 questions" % (took, status))

    @t.check("a reload whose resolv.conf no longer sets max-inflight: lifts that cap again")
    def _():
        # 2 more dead names, waited for, to fill the cap again once the
        # reload has cancelled the questions nobody waits for any more
        ask_dead(200, 2, wait=False)
        stub.write_resolv_conf(t.tmp, name="capped.conf", options="timeout:5 attempts:2")
        capped.reload()
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(capped.port(0), "good2.test:%d" % origin.port))
        took = time.monotonic() - start
        h.eq(status, 404, "status from the origin (it has no page /)")
        h.ok(took < 1.0 * h.SLOW, "took %.2f s: the cap of 4 is still in force" % took)

    # a proxy of its own again: a cap of 2, one dead name's 2 questions out
    queued_conf = stub.write_resolv_conf(t.tmp, name="queued.conf",
                                         options="timeout:2 attempts:1 max-inflight:2")
    queued = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": queued_conf})

    @t.check("a lookup given up while its question waits in the resolver's queue takes it out: "
             "it is never sent, and the names asked after it do not wait behind it")
    def _():
        held = h.RawConn(queued.port(0), timeout=20 * h.SLOW)
        t.defer(held.close)
        authority = "dead300.test:%d" % origin.port
        held.send(h.request("GET", "http://%s/" % authority, authority))
        h.wait_until(lambda: len(stub.queries_for("dead300.test")) >= 2, 2 * h.SLOW,
                     "dead300.test's 2 questions, the cap")
        for i in range(301, 305):
            with h.RawConn(queued.port(0), timeout=20 * h.SLOW) as c:
                authority = "dead%d.test:%d" % (i, origin.port)
                c.send(h.request("GET", "http://%s/" % authority, authority))
                time.sleep(0.1)  # its lookup starts, its questions queued
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(queued.port(0), "good0.test:%d" % origin.port))
        took = time.monotonic() - start
        h.eq(status, 404, "status from the origin (it has no page /)")
        sent = [q.name for q in stub.queries if q.name in ["dead%d.test" % i
                                                           for i in range(301, 305)]]
        h.eq(sent, [], "questions of lookups given up while queued that reached the stub")
        h.ok(took < 3.0 * h.SLOW, "good0.test took %.2f s: it waited behind the questions of "
             "lookups given up (dead300.test's end after 2 s)" % took)


h.run(scenario, __doc__, timeout=60)
