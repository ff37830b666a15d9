#!/usr/bin/env python3
"""Scenario: a fleet's Redis name is resolved as an upstream's is:
localhost and names under .localhost are never asked of DNS (RFC 6761
section 6.3), and a lookup that fails is logged in the resolver's own
words.

Redis: a redis-server on a free loopback port (127.0.0.1 only).
DNS: dnsstub.DnsStub on loopback UDP, named by a resolv.conf
(RETRYPROXY_RESOLV_CONF, `options timeout:1 attempts:1`). It answers
localhost and redis.localhost with 127.0.0.9 (nothing listens there),
refuses refused.test (REFUSED), answers gone.test NXDOMAIN, and records
every query. RETRYPROXY_HOSTS names an empty hosts file, so the hosts file
knows no name, localhost included.
Proxies: fleet.redis localhost:PORT, redis.localhost:PORT,
refused.test:PORT, gone.test:PORT; sync_interval 100ms.
Must hold: the localhost proxies connect (retryproxy_fleet_connected 1;
::1 refuses, 127.0.0.1 is tried next) and the stub sees no
query for either name (before: both families were asked of DNS, and its
127.0.0.9 answer tried); refused.test logs "cannot resolve refused.test:
the DNS server refused the query (REFUSED)" and gone.test "cannot resolve
gone.test: no such name (NXDOMAIN)", as an upstream's 502 says (before:
getaddrinfo's generic words), and both keep the gauge at 0 and still
proxy (200).
"""

import os

import harness as h
import dnsstub
from fleet_gauge import fleet_gauge, wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
fleet:
  redis: @NAME@:@REDIS@
  name: named
  sync_interval: 100ms
"""


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"localhost": "127.0.0.9", "redis.localhost": "127.0.0.9"},
                           modes={"refused.test": "refused", "gone.test": "nxdomain"},
                           default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, options="timeout:1 attempts:1")
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    env = {"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts}

    def proxy(name):
        return t.proxy(CONFIG, env=env, NAME=name, ORIGIN=origin.port, REDIS=redis.port)

    local = proxy("localhost")
    sub = proxy("redis.localhost")
    refused = proxy("refused.test")
    gone = proxy("gone.test")

    @t.check("localhost and redis.localhost, which the hosts file lacks, are loopback: "
             "connected, and no DNS query for either")
    def _():
        wait_gauge([local, sub], 1, 10 * h.SLOW)
        h.eq(stub.queries_for("localhost") + stub.queries_for("redis.localhost"), [],
             "DNS queries for localhost names")
        for p in (local, sub):
            h.eq([ln for ln in p.stderr_lines() if "cannot resolve" in ln], [],
                 "lookup failures")

    @t.check("REFUSED and NXDOMAIN are logged in the resolver's words; local budgets, still "
             "proxies")
    def _():
        refused.wait_log(r"fleet named: redis refused\.test:%d: cannot resolve refused\.test: "
                         r"the DNS server refused the query \(REFUSED\); retry budgets are "
                         r"local" % redis.port, timeout=10 * h.SLOW)
        gone.wait_log(r"fleet named: redis gone\.test:%d: cannot resolve gone\.test: "
                      r"no such name \(NXDOMAIN\); retry budgets are local" % redis.port,
                      timeout=10 * h.SLOW)
        for p in (refused, gone):
            h.eq(fleet_gauge(p), 0, "retryproxy_fleet_connected")
            r = h.curl("http://127.0.0.1:%d/echo" % p.port(0))
            h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)


h.run(scenario, __doc__, timeout=60)
