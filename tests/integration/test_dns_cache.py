#!/usr/bin/env python3
"""Scenario: an upstream name's answer is kept for limits.dns_cache.

Client: raw POSTs on one keep-alive connection to a sidecar listener whose
upstream is a name (http://api.test:PORT); POST is not idempotent, so each
goes on a new upstream connection of its own.
Origin: the test origin on 127.0.0.1 (echo); dnsstub.DnsStub on a loopback
UDP port, named by RETRYPROXY_RESOLV_CONF: api.test has an A record and no
AAAA one.
Must hold:
- with dns_cache 3s, 10 POSTs on 10 new upstream connections make one A and
  one AAAA question in all (the AAAA lookup ends with no address, kept as
  "none" beside the A answer); before the cache every connect asked both
  again: 20 questions;
- while the answer is kept, the proxy does not see a changed record: with
  api.test moved to 127.0.0.2 (where nothing listens), a POST still reaches
  the origin, with no question;
- once dns_cache has passed, the next connect asks again, gets 127.0.0.2,
  and the POST gets 502 (refused; max_attempts 1);
- that failed connect forgot the name: api.test moved back to 127.0.0.1,
  the next POST, at once (well within dns_cache of the last answer), asks
  again and gets 200;
- with a resolver that never answers AAAA queries (after a reload that
  points the listener at such a name), 5 POSTs ask A and AAAA once: the
  connect through the A answer, made after the 50 ms resolution delay,
  keeps "no AAAA" too (before, each new connection asked AAAA again and
  waited the delay);
- with dns_cache 0, every connect asks both questions, as before;
- a connect that try_timeout ends (below connect_timeout) forgets the name
  as one that connect_timeout ends does: with stale.test's kept answer a
  blackholed 127.0.0.2 and its record moved to 127.0.0.1 during the first
  try, the retry asks again and gets 200 (before, it connected to the kept
  address again and timed out too);
- an answer whose records have a TTL (1 s) shorter than dns_cache (30 s)
  is kept for the TTL only: two POSTs within it ask once, one after it asks
  again (before, the TTL was not seen, and the answer was kept 30 s).
"""

import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://api.test:@ORIGIN@
log: { level: info, format: text }
limits: { dns_cache: %s, drain_timeout: 2s }
defaults:
  retry: { max_attempts: 1 }
"""

KEEP_S = 3

# A try_timeout below connect_timeout, and an answer kept longer than the
# request takes.
CONFIG_TRY_TIMEOUT = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://stale.test:@ORIGIN@
limits: { dns_cache: 30s, connect_timeout: 5s, drain_timeout: 2s }
defaults:
  retry: { max_attempts: 2, try_timeout: 1s, initial_backoff: 50ms, jitter: 0ms }
"""


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"api.test": "127.0.0.1"}, default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv.conf", "timeout:1 attempts:1")
    env = {"RETRYPROXY_RESOLV_CONF": resolv}
    proxy = t.proxy(CONFIG % ("%ds" % KEEP_S), env=env, ORIGIN=origin.port)

    def posts(p, tag, count):
        """count POSTs on one client connection (a new one after a close);
        their statuses."""
        statuses = []
        c = h.RawConn(p.port(0), timeout=10 * h.SLOW)
        try:
            for i in range(count):
                c.send(h.request("POST", "/echo?t=%s-%d" % (tag, i), "api.test", (), b"x"))
                resp = c.read_response("POST")
                statuses.append(resp.status)
                if resp.header("Connection") == "close":
                    c.close()
                    c = h.RawConn(p.port(0), timeout=10 * h.SLOW)
        finally:
            c.close()
        return statuses

    def questions():
        return sorted(q.type for q in stub.queries_for("api.test"))

    @t.check("10 POSTs on 10 new upstream connections: one A and one AAAA question in all")
    def _():
        stub.clear()
        h.eq(posts(proxy, "kept", 10), [200] * 10, "statuses")
        conns = {q.conn_id for q in origin.requests_for("/echo") if "t=kept-" in q.target}
        h.eq(len(conns), 10, "upstream connections the 10 POSTs came on")
        h.eq(questions(), ["A", "AAAA"], "questions for api.test")

    @t.check("while kept, a changed record is not seen: the POST reaches the origin, no question")
    def _():
        stub.answer("api.test", "127.0.0.2")
        stub.clear()
        h.eq(posts(proxy, "stale", 1), [200], "status")
        h.eq(questions(), [], "questions for api.test")

    @t.check("once dns_cache has passed, the next connect asks again: 127.0.0.2, 502")
    def _():
        time.sleep(KEEP_S + 0.5)
        stub.clear()
        h.eq(posts(proxy, "moved", 1), [502], "status")
        h.eq(questions(), ["A", "AAAA"], "questions for api.test")

    @t.check("the failed connect forgot the name: moved back, the next POST asks and gets 200")
    def _():
        stub.answer("api.test", "127.0.0.1")
        stub.clear()
        h.eq(posts(proxy, "back", 1), [200], "status")
        h.eq(questions(), ["A", "AAAA"], "questions for api.test")

    @t.check("a resolver that drops AAAA queries: asked once, not on every new connection")
    def _():
        stub.answer("mute6.test", "127.0.0.1")
        stub.mute("mute6.test", "AAAA")
        text = proxy.config_text.replace("upstream: http://api.test:", "upstream: http://mute6.test:")
        proxy.reload(text)
        stub.clear()
        h.eq(posts(proxy, "mute6", 5), [200] * 5, "statuses")
        h.eq(sorted(q.type for q in stub.queries_for("mute6.test")), ["A", "AAAA"],
             "questions for mute6.test")

    uncached = t.proxy(CONFIG % "0s", env=env, ORIGIN=origin.port)

    @t.check("dns_cache 0: every connect asks both questions")
    def _():
        stub.clear()
        h.eq(posts(uncached, "uncached", 5), [200] * 5, "statuses")
        h.eq(questions(), ["A"] * 5 + ["AAAA"] * 5, "questions for api.test")

    short = t.proxy(CONFIG_TRY_TIMEOUT, env=env, ORIGIN=origin.port)

    @t.check("a connect try_timeout ended forgets the name: the retry asks again and gets 200")
    def _():
        h.blackhole(t, "127.0.0.2", origin.port)
        stub.answer("stale.test", "127.0.0.2")
        stub.clear()
        got = []
        c = h.RawConn(short.port(0), timeout=20 * h.SLOW)
        try:
            c.send(h.request("GET", "/echo?t=stale", "stale.test", (), b""))
            h.wait_until(lambda: stub.queries_for("stale.test"), 5 * h.SLOW, "the first question")
            stub.answer("stale.test", "127.0.0.1")
            got.append(c.read_response("GET"))
        finally:
            c.close()
        h.eq((got[0].status, got[0].header("Retry-Attempts")), (200, "2"),
             "status and Retry-Attempts")
        h.eq([q.type for q in stub.queries_for("stale.test") if q.type == "A"], ["A", "A"],
             "A questions for stale.test (one per try)")

    # answers whose records live 1 s, under a dns_cache of 30 s
    stub_ttl = dnsstub.DnsStub(answers={"api.test": "127.0.0.1"}, default_mode="nxdomain",
                               ttl=1).start()
    t.defer(stub_ttl.stop)
    resolv_ttl = stub_ttl.write_resolv_conf(t.tmp, "resolv-ttl.conf", "timeout:1 attempts:1")
    ttl_proxy = t.proxy(CONFIG % "30s", env={"RETRYPROXY_RESOLV_CONF": resolv_ttl},
                        ORIGIN=origin.port)

    @t.check("an answer is kept no longer than its records' TTL (1 s) under dns_cache 30s")
    def _():
        h.eq(posts(ttl_proxy, "ttl-first", 2), [200, 200], "statuses")
        h.eq([q.type for q in stub_ttl.queries_for("api.test") if q.type == "A"], ["A"],
             "A questions within the TTL")
        time.sleep(1.5)
        stub_ttl.clear()
        h.eq(posts(ttl_proxy, "ttl-after", 1), [200], "status")
        h.eq([q.type for q in stub_ttl.queries_for("api.test") if q.type == "A"], ["A"],
             "A questions once the TTL has passed")


h.run(scenario, __doc__)
