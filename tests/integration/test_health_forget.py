#!/usr/bin/env python3
"""Scenario: a down upstream nobody asks for is forgotten, also when its
probes fail slower than probe_interval.

A probe that fails after the next one fell due (a host that drops SYNs, a
name the DNS server never answers: each probe lasts connect_timeout) is
followed at once by the next. The check that forgets an unused down
upstream runs whenever a probe is to start, so such an upstream is not
probed back to back for ever, nor kept past the records' bound.

Client: raw sockets through the forward listener; curl to the admin.
DNS: dnsstub.DnsStub on loopback UDP (RETRYPROXY_RESOLV_CONF, `timeout:5
attempts:2`), never answering mute.test.
Proxy: health down_after 1, probe_interval 100ms, hold false;
connect_timeout 300ms; max_attempts 1.
Sequence: one GET to http://mute.test:80/ (its lookup outlasts
connect_timeout: 502, and the upstream is down) and one to a closed
loopback port (refused at once: down too, the control); then nothing.
Must hold: within a few seconds both are gone from /upstreams (each
"forgotten" in the log), and no DNS query for mute.test comes after that.
A sidecar listener's configured upstream (a closed port), down after one
GET, is never forgotten: still listed down, retryproxy_upstream_up 0. So is
one written as an IPv6 address in a long form, http://[0:0::1]:P, whose
record is named http://[::1]:P as requests name it (before the fix the
config's spelling was compared as written, and it was forgotten).
"""

import re
import socket
import time

import harness as h
import dnsstub

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@CLOSED@
  - address: 127.0.0.1:@PORT3@
    upstream: http://[0:0::1]:@CLOSED6@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, connect_timeout: 300ms }
health: { down_after: 1, probe_interval: 100ms, hold: false }
defaults:
  retry:
    max_attempts: 1
"""


def scenario(t):
    stub = dnsstub.DnsStub(answers={}, modes={"mute.test": "silent"},
                           default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv.conf", "timeout:5 attempts:2")
    configured = "http://127.0.0.1:%d" % h.closed_port()
    # bound on ::1 without listening: connects there are refused
    closed6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    t.defer(closed6.close)
    closed6.bind(("::1", 0))
    # the config writes it [0:0::1]; the record is named as requests name it
    configured6 = "http://[::1]:%d" % closed6.getsockname()[1]
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv},
                    CLOSED=configured.rsplit(":", 1)[1],
                    CLOSED6=closed6.getsockname()[1])
    closed = h.closed_port()
    names = ("http://mute.test:80", "http://127.0.0.1:%d" % closed)

    def upstreams():
        return h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1), check=True).body.decode()

    for name in names:
        authority = name.split("//", 1)[1]
        with h.RawConn(proxy.port(0), timeout=10) as c:
            c.send(h.request("GET", name + "/", authority, headers=[("Connection", "close")]))
            h.eq(c.read_response().status, 502, "through the proxy to %s" % name)

    for port, name in ((proxy.port(2), configured), (proxy.port(3), configured6)):
        with h.RawConn(port, timeout=10) as c:
            c.send(h.request("GET", "/", "a.example", headers=[("Connection", "close")]))
            h.eq(c.read_response().status, 502, "through the sidecar listener to %s" % name)

    @t.check("the slow-probe upstream and the refused one both went down")
    def _():
        for name in names:
            proxy.wait_log(r"upstream %s is down" % name.replace(".", r"\."), timeout=5 * h.SLOW)

    @t.check("both are forgotten once nobody asks for them; mute.test is not asked again")
    def _():
        for name in names:
            proxy.wait_log(r"upstream %s: down and unused; forgotten" % name.replace(".", r"\."),
                           timeout=10 * h.SLOW)
        text = upstreams()
        for name in names:
            h.ok(name not in text, "%s still listed: %r" % (name, text))
        # a probe of mute.test already asking ends within connect_timeout
        time.sleep(0.5)
        before = len(stub.queries_for("mute.test"))
        time.sleep(1.0)
        h.eq(len(stub.queries_for("mute.test")), before, "DNS queries for mute.test after")

    @t.check("the upstreams the config names (one an IPv6 address not written the short "
             "way) stay listed down, and their metric 0")
    def _():
        text = upstreams()
        metrics = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        for name in (configured, configured6):
            h.ok(re.search(r"^%s down" % re.escape(name), text, re.M),
                 "%s not listed down: %r" % (name, text))
            h.ok('retryproxy_upstream_up{upstream="%s"} 0' % name in metrics,
                 "retryproxy_upstream_up for %s" % name)
            h.ok(not any("%s: down and unused; forgotten" % name in ln
                         for ln in proxy.stderr_lines()), "%s forgotten" % name)


h.run(scenario, __doc__)
