#!/usr/bin/env python3
"""Scenario: a fleet's Redis name resolves to several addresses and Redis
listens on one of them only: the proxy tries the others at once, one after
another, and warns only when every address failed.

Redis: a redis-server on a free loopback port, bound to 127.0.0.1 only.
Names (RETRYPROXY_HOSTS, a hosts file listing the IPv6 address first; DNS:
dnsstub.DnsStub answering NXDOMAIN, asked nothing):
- localhost: ::1, then 127.0.0.1 (::1 refuses);
- three.test: ::1, 127.0.0.2 (both refuse), then 127.0.0.1;
- slowfirst.test: 127.0.0.3, whose port on it never answers a connect (a
  full accept queue), then 127.0.0.1;
- nowhere.test: ::1 and 127.0.0.2, both refusing.
Proxies: one per name, fleet.redis NAME:PORT, sync_interval 100ms, log
level info; nowhere.test's at debug.
Must hold:
- localhost, three.test and slowfirst.test: retryproxy_fleet_connected 1
  and no warning at all ("Connection refused ... retry budgets are local"
  for the refusing ones, "no answer within 500 ms" for slowfirst.test
  before, each followed by a reconnect backoff of 100 to 150 ms);
  localhost's within 2 s of its start;
- nowhere.test: one warning, naming each address and why it failed, gauge
  0, and after 1.5 s still that one warning while the debug lines show the
  attempts backing off (at most 6 rounds of 2 addresses), not spinning;
  requests still proxied (200).
"""

import os
import re
import time

import harness as h
import dnsstub
from fleet_gauge import fleet_gauge, wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: @LEVEL@, format: text }
fleet:
  redis: @NAME@:@REDIS@
  name: addresses
  sync_interval: 100ms
"""

HOSTS = """\
::1 localhost three.test nowhere.test
127.0.0.2 three.test nowhere.test
127.0.0.3 slowfirst.test
127.0.0.1 localhost three.test slowfirst.test
"""


def warnings(proxy):
    return [ln for ln in proxy.stderr_lines() if re.search(r"\bwarn\b", ln)]


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    h.blackhole(t, host="127.0.0.3", port=redis.port)
    origin = t.origin()
    stub = dnsstub.DnsStub(default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, options="timeout:1 attempts:1")
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write(HOSTS)
    env = {"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts}

    def proxy(name, level="info"):
        return t.proxy(CONFIG, env=env, NAME=name, ORIGIN=origin.port, REDIS=redis.port,
                       LEVEL=level)

    started = time.monotonic()
    local = proxy("localhost")
    three = proxy("three.test")
    slow = proxy("slowfirst.test")
    nowhere = proxy("nowhere.test", level="debug")

    @t.check("localhost (::1 refuses, 127.0.0.1 listens): connected within 2 s, no warning")
    def _():
        wait_gauge([local], 1, 2 * h.SLOW)
        elapsed = time.monotonic() - started
        h.ok(elapsed < 2 * h.SLOW, "connected after %.2f s" % elapsed)
        local.wait_log(r"fleet addresses: connected to redis localhost:%d" % redis.port)
        h.eq(warnings(local), [], "warnings")

    @t.check("three.test (two refusing addresses first) and slowfirst.test (a silent one "
             "first): connected, no warning")
    def _():
        wait_gauge([three, slow], 1, 10 * h.SLOW)
        for p in (three, slow):
            h.eq(warnings(p), [], "warnings")
        h.eq(stub.queries, [], "DNS queries")

    @t.check("nowhere.test (every address refuses): one warning naming both, backoff, "
             "still proxies")
    def _():
        nowhere.wait_log(r"fleet addresses: redis nowhere\.test:%d: every address failed: "
                         r"::1: Connection refused; 127\.0\.0\.2: Connection refused; "
                         r"retry budgets are local until it answers" % redis.port,
                         timeout=10 * h.SLOW)
        first = len(nowhere.stderr_lines())
        time.sleep(1.5)
        lines = nowhere.stderr_lines()
        h.eq(len(warnings(nowhere)), 1, "warnings (%s)" % warnings(nowhere))
        h.eq(fleet_gauge(nowhere), 0, "retryproxy_fleet_connected")
        refused = [ln for ln in lines[first:] if "Connection refused" in ln]
        h.ok(len(refused) <= 12, "%d refused connects in 1.5 s: the attempts back off"
             % len(refused))
        r = h.curl("http://127.0.0.1:%d/echo" % nowhere.port(0))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)


h.run(scenario, __doc__, timeout=60)
