#!/usr/bin/env python3
"""Scenario: a fleet whose Redis is named by a host name connects through
a slow resolver, and gives up on a silent one by the resolver's own
timeouts.

The deadline a sync round has (twice sync_interval, at least 500 ms) is
for Redis's answers. A lookup is ended by the resolver's timeouts instead:
cut off at 500 ms, a lookup that always takes longer (a slow DNS server,
or one that drops AAAA queries, for which evdns waits seconds) would be
started again and cut off again at every reconnect, and the fleet would
never connect.

Redis: a redis-server on a free loopback port.
DNS: dnsstub.DnsStub on loopback UDP, named by a resolv.conf
(RETRYPROXY_RESOLV_CONF, `options timeout:3 attempts:1`); it answers
slow.test with 127.0.0.1 after 1.5 s and never answers silent.test. An
empty RETRYPROXY_HOSTS keeps /etc/hosts out.
Proxy A: fleet.redis slow.test:PORT, sync_interval 100ms (a round's
deadline: 500 ms). Proxy B: fleet.redis silent.test:PORT.
Proxy C: fleet.redis two.test:PORT, which its hosts file gives two
addresses, 127.0.0.2 first (nothing listens there: refused), then
127.0.0.1.
Must hold: A reports retryproxy_fleet_connected 1 and logs "connected to
redis slow.test", with no "no answer within" line. B logs that it cannot
resolve silent.test (the resolver gave up, not the reply deadline: local
budgets), keeps retryproxy_fleet_connected 0 and still proxies: 200. C's
reconnect takes the name's next address and connects (gauge 1).
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
    stub = dnsstub.DnsStub(answers={"slow.test": "127.0.0.1"},
                           modes={"silent.test": "silent"}, default_mode="nxdomain").start()
    t.defer(stub.stop)
    stub.delay("slow.test", 1.5)
    resolv = stub.write_resolv_conf(t.tmp, options="timeout:3 attempts:1")
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    env = {"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts}
    slow = t.proxy(CONFIG, env=env, NAME="slow.test", ORIGIN=origin.port, REDIS=redis.port)
    silent = t.proxy(CONFIG, env=env, NAME="silent.test", ORIGIN=origin.port, REDIS=redis.port)
    two_hosts = os.path.join(t.tmp, "two-hosts")
    with open(two_hosts, "w") as f:
        f.write("127.0.0.2 two.test\n127.0.0.1 two.test\n")
    two = t.proxy(CONFIG, env=dict(env, RETRYPROXY_HOSTS=two_hosts), NAME="two.test",
                  ORIGIN=origin.port, REDIS=redis.port)

    @t.check("a lookup that takes 1.5 s (over a round's 500 ms deadline): the fleet connects")
    def _():
        wait_gauge([slow], 1, 10 * h.SLOW)
        slow.wait_log(r"fleet named: connected to redis slow\.test:%d" % redis.port)
        h.eq([ln for ln in slow.stderr_lines() if "no answer within" in ln], [],
             "lookups cut off by the reply deadline")

    @t.check("a silent resolver: the lookup ends by the resolver's timeout; still proxies")
    def _():
        silent.wait_log(r"fleet named: redis silent\.test:%d: cannot resolve silent\.test"
                        % redis.port, timeout=10 * h.SLOW)
        h.eq(fleet_gauge(silent), 0, "retryproxy_fleet_connected")
        r = h.curl("http://127.0.0.1:%d/echo" % silent.port(0))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq([ln for ln in silent.stderr_lines() if "no answer within" in ln], [],
             "lookups cut off by the reply deadline")

    @t.check("a name with two addresses, the first refusing: the next attempt takes the second")
    def _():
        wait_gauge([two], 1, 10 * h.SLOW)
        two.wait_log(r"fleet named: redis two\.test:%d answers again" % redis.port)


h.run(scenario, __doc__, timeout=60)
