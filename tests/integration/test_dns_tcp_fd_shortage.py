#!/usr/bin/env python3
"""Scenario: the TCP retry of a truncated DNS answer finds the proxy out of
file descriptors.

Client: GETs through a sidecar proxy whose upstream is big.test, a name
whose answers a stub resolver on loopback (dnsstub.DnsStub, UDP and TCP,
named by RETRYPROXY_RESOLV_CONF, timeout:1 attempts:1) sends truncated over
UDP (TC=1) and whole over TCP. A GET first, then the proxy's
RLIMIT_NOFILE soft limit is lowered to 4 above what it has open and 4 idle
clients take those 4; a GET on the last of them; then the idle clients
leave and a GET again.
Origin: the test origin on 127.0.0.1 (big.test's address).
Config: health down_after 1, hold false, probe_interval 60s; max_attempts
1; dns_cache 0 (every GET asks); pool_max_idle 0.
Must hold: the GET that finds no descriptor for the TCP socket gets a 502
that names the proxy's shortage (Too many open files), not a DNS server it
could not connect to; the upstream is not marked down for it (/upstreams:
up, failures=0; no "is down" log line) and
retryproxy_upstream_errors_total{kind="dns"} does not count it: the
shortage is the proxy's, as for an upstream connect's socket; the next
GET, once descriptors are free, gets 200.
"""

import os
import resource
import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://big.test:@UP@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, dns_cache: 0s, pool_max_idle: 0 }
health: { down_after: 1, probe_interval: 60s, hold: false }
defaults:
  retry: { max_attempts: 1 }
"""

ROOM = 4


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
    warm = h.status_of(lambda: h.fetch(proxy.port(0), "GET", "/echo?t=warm", "app.example",
                                     timeout=5 * h.SLOW).status)
    tcp_before = [q for q in stub.queries_for("big.test") if q.transport == "tcp"]

    # the warm GET's client connection closed
    time.sleep(0.3)
    before = h.fd_count(proxy.pid)
    limit = before + ROOM
    hard = resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE, (limit, hard))
    fill = []
    t.defer(lambda: [c.close() for c in fill])
    for i in range(ROOM):
        fill.append(h.RawConn(proxy.port(0), timeout=5 * h.SLOW))
        h.wait_until(lambda: h.fd_count(proxy.pid) == before + i + 1, 3 * h.SLOW,
                     "idle client %d accepted" % (i + 1))
    stub.clear()
    fill[-1].send(h.request("GET", "/echo?t=starved", "app.example"))
    starved = h.status_of(lambda: fill[-1].read_response())
    for c in fill:
        c.close()
    h.wait_until(lambda: h.fd_count(proxy.pid) <= before, 3 * h.SLOW, "the idle clients gone")
    upstreams = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1)).body.decode()
    metrics = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()
    after = h.status_of(lambda: h.fetch(proxy.port(0), "GET", "/echo?t=after", "app.example",
                                      timeout=5 * h.SLOW).status)

    @t.check("before the shortage big.test resolves over TCP: 200")
    def _():
        h.eq(warm, 200, "the GET before the shortage")
        h.ok(tcp_before, "big.test was not asked over TCP")

    @t.check("no descriptor for the TCP retry: a 502 naming the proxy's shortage, not the "
             "DNS server")
    def _():
        h.ok(not isinstance(starved, str), "the starved GET got no response: %s" % starved)
        h.check_error_response(starved, 502, ("too many open files",))
        text = starved.body.decode().lower()
        h.ok("could not connect" not in text, "the 502 blames the DNS server: %r" % starved.body)

    @t.check("no descriptor for the TCP retry: the upstream is not marked down, no dns error "
             "counted, the next GET gets 200")
    def _():
        h.eq(upstreams.strip(), "http://big.test:%d up failures=0 held=0" % origin.port,
             "/upstreams after the shortage")
        h.ok(not any("is down" in line for line in proxy.stderr_lines()),
             "the shortage was logged as the upstream going down")
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="dns"}'), 0.0,
             "dns errors counted")
        h.eq(after, 200, "the GET after the shortage")


h.run(scenario, __doc__, timeout=60)
