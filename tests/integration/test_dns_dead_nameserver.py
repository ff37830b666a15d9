#!/usr/bin/env python3
"""Scenario: one of the two nameservers resolv.conf names stops answering.

Client: raw-socket GETs through the forward proxy, one after another, each
for a name of its own (n0.test, n1.test, ...), so that each asks DNS; then
GETs for names nobody answers whose clients leave at once, a reload (SIGHUP),
and SIGTERM with more such questions out.
Origin: the test origin on 127.0.0.1; dnsstub.DnsStub on a loopback port
answers every nN.test with an A record (and no AAAA record); a UDP socket
on another loopback port reads every question and answers none (a DNS
server that died, or a firewall that drops its traffic). resolv.conf
(RETRYPROXY_RESOLV_CONF) names the stub first, then the dead one, with
timeout:2 attempts:2; connect_timeout 1500ms (below the
resolver's timeout, as the default 5s is not above its default 5), dns_cache 0s, one try, health
off.
Must hold: the names resolve: of 24 GETs at most 4 get a 502 (the
questions the dead server takes before the resolver counts it down), and
the last 12 all get the origin's answer, each within 0.5 s. libevent's
resolver takes turns between nameservers and learns that one is dead only
from its questions timing out; before, every lookup's question was
cancelled when connect_timeout ended its try, which came first, so the
dead server was never counted down and took every A question: every GET got
502 after 2 s. A reload does not send again the questions of lookups
whose clients left (before, each reload sent them again with a new
timeout, so that under reloads more frequent than a timeout they never
ended). The proxy exits cleanly with questions still out (no leak under
the sanitizers).
"""

import os
import socket
import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  connect_timeout: 1500ms
  dns_cache: 0s
defaults:
  retry: { max_attempts: 1 }
health: { down_after: 0 }
"""

COUNT = 24


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"n%d.test" % i: "127.0.0.1" for i in range(COUNT)}).start()
    t.defer(stub.stop)
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))
    t.defer(dead.close)
    resolv = os.path.join(t.tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1:%d\nnameserver 127.0.0.1:%d\noptions timeout:2 attempts:2\n"
                % (stub.port, dead.getsockname()[1]))
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv})

    results = []
    for i in range(COUNT):
        start = time.monotonic()
        status = h.status_of(lambda: h.forward_get(proxy.port(0), "n%d.test:%d" % (i, origin.port)))
        results.append((status, round(time.monotonic() - start, 2)))
        time.sleep(0.2)

    @t.check("at most 4 of %d names fail while the resolver finds the dead server out" % COUNT)
    def _():
        failed = [r for r in results if r[0] != 404]
        h.ok(len(failed) <= 4, "%d of %d GETs did not reach the origin: %r"
             % (len(failed), COUNT, results))

    @t.check("once it has, every name resolves at once (the last %d GETs)" % (COUNT // 2))
    def _():
        late = results[COUNT // 2:]
        h.ok(all(r[0] == 404 and r[1] < 0.5 * h.SLOW for r in late),
             "the last %d GETs (status from the origin, seconds): %r" % (len(late), late))

    def gone_questions():
        """Questions for gone*.test either server got so far."""
        at_dead = 0
        dead.setblocking(False)
        try:
            while True:
                at_dead += b"gone" in dead.recv(512).lower()
        except BlockingIOError:
            pass
        gone_questions.at_dead += at_dead
        return gone_questions.at_dead + len([q for q in stub.queries
                                             if q.name.startswith("gone")])
    gone_questions.at_dead = 0

    @t.check("a reload does not send again the questions nobody waits for")
    def _():
        for i in range(4):
            stub.mode("gone%d.test" % i, "silent")
            authority = "gone%d.test:%d" % (i, origin.port)
            with h.RawConn(proxy.port(0)) as c:
                c.send(h.request("GET", "http://%s/" % authority, authority))
                h.wait_until(lambda: gone_questions() >= 2 * (i + 1), 2 * h.SLOW,
                             "the questions for %s" % authority)
        asked = gone_questions()
        proxy.reload()
        time.sleep(0.5)
        h.eq(gone_questions(), asked, "questions for the 4 names whose clients left, after "
             "the reload (before, each reload sent them again, a new timeout each time)")

    @t.check("the proxy stops cleanly with questions still out")
    def _():
        for i in range(4):
            c = h.RawConn(proxy.port(0))
            t.defer(c.close)
            authority = "later%d.test:%d" % (i, origin.port)
            stub.mode("later%d.test" % i, "silent")
            c.send(h.request("GET", "http://%s/" % authority, authority))
        time.sleep(0.3)
        t.stop_proxy(proxy)


h.run(scenario, __doc__, timeout=120)
