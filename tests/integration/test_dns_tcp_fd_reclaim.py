#!/usr/bin/env python3
"""Scenario: the TCP retry of a truncated DNS answer finds the proxy out of
file descriptors while idle pooled upstream connections hold some.

Client: two GETs at once through the second sidecar listener (upstream:
the test origin by address) leave two idle pooled upstream connections. The proxy's
client connects to the first listener (upstream big.test, a name whose
answers a stub resolver on loopback sends truncated over UDP and whole
over TCP); the proxy's RLIMIT_NOFILE soft limit is then lowered to what it
has open, and the client sends a GET.
Origin: the test origin on 127.0.0.1 (big.test's address).
Config: max_attempts 1; dns_cache 0; health down_after 1, hold false.
Must hold: the TCP questions get their sockets by closing the idle pooled
connections, as an upstream connect's socket does (the log says so), and
the GET gets 200 from the origin; big.test was asked over TCP.
"""

import os
import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://big.test:@UP@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@UP@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, dns_cache: 0s }
health: { down_after: 1, probe_interval: 60s, hold: false }
defaults:
  retry: { max_attempts: 1 }
"""


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"big.test": "127.0.0.1"})
    stub.truncate("big.test")
    stub.start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv.conf", "timeout:1 attempts:1")
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts},
                    UP=origin.port)
    # two at once, so that two upstream connections stay pooled: the A and
    # the AAAA question may each want a TCP socket at the same time
    pooled = h.two_pooled(proxy.port(2), "app.example")
    # the GETs' client connections closed; their upstream ones stay pooled
    time.sleep(0.3)
    # no descriptor left (the pooled GETs' client connections closed below
    # their upstream ones, a gap the clients fill first)
    client = h.clients_at_fd_limit(t, proxy.pid, proxy.port(0))[-1]
    stub.clear()
    client.send(h.request("GET", "/echo?t=starved", "app.example"))
    starved = h.status_of(lambda: client.read_response())
    asked_tcp = [q for q in stub.queries_for("big.test") if q.transport == "tcp"]

    @t.check("the pooled GETs before the shortage: 200")
    def _():
        h.eq(pooled, [200, 200], "the GETs through the second listener")

    @t.check("no descriptor for the TCP questions: idle pooled connections are closed for them "
             "and the GET gets 200")
    def _():
        h.ok(not isinstance(starved, str), "the starved GET got no response: %s" % starved)
        h.eq(starved.status, 200, "the starved GET: %r" % (starved.body[:200],))
        h.ok(asked_tcp, "big.test was not asked over TCP")
        h.ok(any("out of file descriptors: closed 2 idle upstream connections" in line
                 for line in proxy.stderr_lines()),
             "no log line of the pooled connection closed")


h.run(scenario, __doc__, timeout=60)
