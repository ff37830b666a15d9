#!/usr/bin/env python3
"""Scenario: a DNS answer too large for UDP (sent truncated, TC=1) is asked
again over TCP, as glibc's resolver does, also when the name is the first
candidate of a search list.

Client: curl through the forward proxy to http://NAME:PORT/echo.
Origin: the test origin on 127.0.0.1 (echo). dnsstub.DnsStub on a loopback
port, UDP and TCP, named by a resolv.conf (RETRYPROXY_RESOLV_CONF) with
`search corp.test other.test` and `options ndots:5 timeout:1 attempts:1`;
an empty RETRYPROXY_HOSTS keeps /etc/hosts out. big.test and
svc.corp.test have 40 A records, 127.0.0.2 to 127.0.0.40 and then
127.0.0.1 (where the origin listens; nothing listens on the others, so a
connect there is refused at once and the next address is tried): their
UDP answers are truncated (TC=1, no records), their TCP ones whole.
hushed.test, hangup.test and garbled.test are truncated too,
and their TCP connection is never answered, closed unanswered, or answered
with another ID. A second stub serves UDP only (its TCP port refuses),
truncating refused.test, behind a second proxy. lost.corp.test (the first
candidate of lost) is truncated and its TCP connection closed unanswered.
cache.corp.test (the first candidate of cache, a third proxy's
fleet.redis, a redis-server on 127.0.0.1) is truncated, answered whole over
TCP.
Must hold: big.test (asked as it is after the search list's candidates,
which are NXDOMAIN: fewer dots than ndots) gives 200, and the stub saw
big.test's A question over UDP (truncated) and then over TCP; svc, whose first
candidate svc.corp.test is truncated, gives 200, asked over TCP as
svc.corp.test, and its A lookup never asks svc.other.test or svc (before,
the truncation was taken as NXDOMAIN and the last candidate's NXDOMAIN was
the 502's reason). A TCP retry that gets no answer in the resolver's
timeout, that is closed unanswered, that is answered ill-formed, or that
cannot connect, is a 502 naming the truncated answer and the TCP failure,
never NXDOMAIN (lost's later candidates, which are NXDOMAIN, are not the
reason), and no request reaches the origin. A client that gives up while
the TCP retry waits takes its question with it; the proxy goes on (and,
under ASan, exits without a report). The fleet connects to cache
(retryproxy_fleet_connected 1), cache.corp.test asked over TCP.
"""

import os
import time

import harness as h
import dnsstub
from fleet_gauge import wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
  connect_timeout: 5s
defaults:
  retry:
    max_attempts: 1
"""

# a fleet whose Redis name's first candidate is truncated
CONFIG_FLEET = CONFIG + """\
fleet:
  redis: cache:@REDIS@
  name: truncated
  sync_interval: 100ms
"""

BIG = ["127.0.0.%d" % i for i in range(2, 41)] + ["127.0.0.1"]


def resolv_conf(t, stub, name):
    path = os.path.join(t.tmp, name)
    with open(path, "w") as f:
        f.write("nameserver %s\nsearch corp.test other.test\n"
                "options ndots:5 timeout:1 attempts:1\n" % stub.address)
    return path


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"big.test": BIG, "svc.corp.test": BIG,
                                    "hushed.test": BIG, "hangup.test": BIG,
                                    "garbled.test": BIG, "lost.corp.test": BIG,
                                    "cache.corp.test": "127.0.0.1"},
                           default_mode="nxdomain")
    stub.truncate("big.test")
    stub.truncate("svc.corp.test")
    stub.truncate("hushed.test", tcp="silent")
    stub.truncate("hangup.test", tcp="close")
    stub.truncate("garbled.test", tcp="malformed")
    stub.truncate("lost.corp.test", tcp="close")
    stub.truncate("cache.corp.test")
    stub.start()
    t.defer(stub.stop)
    udp_only = dnsstub.DnsStub(answers={"refused.test": BIG}, tcp=False)
    udp_only.truncate("refused.test")
    udp_only.start()
    t.defer(udp_only.stop)
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv_conf(t, stub, "resolv.conf"),
                                 "RETRYPROXY_HOSTS": hosts})
    proxy_udp_only = t.proxy(CONFIG, env={
        "RETRYPROXY_RESOLV_CONF": resolv_conf(t, udp_only, "resolv-udp.conf"),
        "RETRYPROXY_HOSTS": hosts})

    def get(p, host, tag):
        stub.clear()
        udp_only.clear()
        return h.curl("http://%s:%d/echo?t=%s" % (host, origin.port, tag), proxy=p.url)

    def reached(tag):
        return [q for q in origin.requests if q.query.get("t") == tag]

    @t.check("big.test (40 A records, truncated over UDP): asked over TCP, 200")
    def _():
        r = get(proxy, "big.test", "big")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        asked = [(q.transport, q.answer) for q in stub.queries_for("big.test")
                 if q.name == "big.test" and q.type == "A"]
        h.eq(asked, [("udp", "truncated"), ("tcp", "noerror")], "big.test's A questions")
        h.eq(len(reached("big")), 1, "requests at the origin")

    @t.check("svc: its first candidate svc.corp.test is truncated: asked over TCP, 200")
    def _():
        r = get(proxy, "svc", "search")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        a = [(q.name, q.transport, q.answer) for q in stub.queries if q.type == "A"]
        h.eq(a, [("svc.corp.test", "udp", "truncated"), ("svc.corp.test", "tcp", "noerror")],
             "the A questions")

    failures = [
        ("hushed.test", proxy, ("timed out",)),
        ("hangup.test", proxy, ("closed",)),
        ("garbled.test", proxy, ("ill-formed",)),
        ("refused.test", proxy_udp_only, ("could not connect",)),
        # the first candidate of lost's search list: its failure is told,
        # not the NXDOMAIN of the candidates after it
        ("lost", proxy, ("closed",)),
    ]
    for name, p, words in failures:
        @t.check("%s: the TCP retry fails: 502 naming it, not NXDOMAIN" % name)
        def _(name=name, p=p, words=words):
            started = time.monotonic()
            r = get(p, name, name)
            h.check_error_response(r, 502, words)
            text = r.body.decode().lower()
            h.ok("over tcp" in text and "too large for udp" in text and "nxdomain" not in text,
                 "the 502 should name the truncated answer and TCP: %r" % r.body)
            h.ok(time.monotonic() - started < 4.5, "the 502 took %.1fs" % (time.monotonic() - started))
            h.eq(reached(name), [], "requests at the origin")
            s = stub if p is proxy else udp_only
            # the stub without TCP sees only the truncated UDP question
            how = ("udp", "truncated") if s is udp_only else ("tcp", "noerror")
            h.ok([q for q in s.queries_for(name) if q.type == "A" and (q.transport, q.answer) == how],
                 "%s was not asked over %s: %r" % (name, how[0], s.queries_for(name)))

    @t.check("a client gone while the TCP retry waits: the question is dropped, the proxy "
             "goes on")
    def _():
        r = h.curl("-m", "0.3", "http://hushed.test:%d/echo?t=gone" % origin.port,
                   proxy=proxy.url)
        h.ok(r.exit_code != 0, "curl should have given up: %r" % r)
        # the lookup's TCP question was dropped with the request: the next
        # request for a name that resolves is answered
        r = get(proxy, "big.test", "after-gone")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)

    @t.check("fleet.redis cache, whose first candidate cache.corp.test is truncated: "
             "resolved over TCP, connected")
    def _():
        redis = RedisServer(t.tmp).start()
        t.defer(redis.stop)
        fleet = t.proxy(CONFIG_FLEET, env={
            "RETRYPROXY_RESOLV_CONF": resolv_conf(t, stub, "resolv.conf"),
            "RETRYPROXY_HOSTS": hosts}, REDIS=redis.port)
        wait_gauge([fleet], 1, 10 * h.SLOW)
        h.ok([q for q in stub.queries_for("cache.corp.test") if q.transport == "tcp"],
             "cache.corp.test was not asked over TCP: %r" % stub.queries_for("cache"))


h.run(scenario, __doc__, timeout=60)
