#!/usr/bin/env python3
"""Scenario: a fleet whose Redis is named by a host name connects through
a slow resolver, and gives up on a silent one by the resolver's own
timeouts.

The deadline a sync round has (twice sync_interval, at least 500 ms) is
for Redis's answers. A lookup is ended by the resolver's timeouts instead:
cut off at 500 ms, a lookup that always takes longer (a slow DNS server)
would be started again and cut off again at every reconnect, and the fleet
would never connect. A and AAAA are asked apart, as for an upstream, so a
server that drops AAAA queries costs the 50 ms resolution delay, not the
3 s evdns gives one lookup for both families to wait for the other.

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
Proxy D: fleet.redis mute6.test:PORT, which the stub answers for A
(127.0.0.1) and drops AAAA queries of (the resolver's timeout is 3 s, and so
is the wait evdns's one lookup for both families gives the other family
once one answered).
Proxy E: fleet.redis localhost:PORT, which its hosts file gives as ::1 and
127.0.0.1 (Redis listens on 127.0.0.1 only: ::1 refuses).
Must hold: A reports retryproxy_fleet_connected 1 and logs "connected to
redis slow.test", with no "no answer within" line. B logs that it cannot
resolve silent.test (the resolver gave up, not the reply deadline: local
budgets), keeps retryproxy_fleet_connected 0 and still proxies: 200. C
goes on to the name's next address and connects (gauge 1). D
connects on the A answer without waiting for the AAAA one: its gauge is 1
well within 3 s (under 2 s) of the stub's A query. E asks DNS nothing (for
neither family) and connects (gauge 1), IPv6 refused and IPv4 next.
Proxy F: fleet.redis slow.test:PORT, connected; then its hosts file gets
moved.test (127.0.0.1) and its config fleet.redis moved.test:PORT, and
SIGHUP: the new name is looked up in the hosts file the reload read, not
the one read before it, so F asks DNS nothing for moved.test, logs no
"cannot resolve" and connects (gauge 1).
"""

import datetime
import os
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
    stub.answer("mute6.test", "127.0.0.1")
    stub.mute("mute6.test", "AAAA")
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

    @t.check("a name with two addresses, the first refusing: the second is tried at once, "
             "no warning")
    def _():
        wait_gauge([two], 1, 10 * h.SLOW)
        two.wait_log(r"fleet named: connected to redis two\.test:%d" % redis.port)
        h.eq([ln for ln in two.stderr_lines() if "retry budgets are local" in ln], [],
             "warnings")

    mute6 = t.proxy(CONFIG, env=env, NAME="mute6.test", ORIGIN=origin.port, REDIS=redis.port)

    @t.check("a resolver that drops AAAA queries: the fleet connects on the A answer, not "
             "after the 3 s evdns waits for the other family")
    def _():
        wait_gauge([mute6], 1, 10 * h.SLOW)
        # when the proxy connected, by its own log's clock (not when a poll
        # of /metrics saw it: polls lag on a loaded machine)
        line = mute6.wait_log(r"fleet named: connected to redis mute6\.test:%d" % redis.port)[0]
        stamp = datetime.datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")
        connected = stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
        queries = stub.queries_for("mute6.test")
        asked = [time.time() - (time.monotonic() - q.at) for q in queries if q.type == "A"]
        h.ok(asked, "the stub saw no A query for mute6.test: %r" % queries)
        h.ok([q for q in queries if q.type == "AAAA"],
             "the stub saw no AAAA query for mute6.test: %r" % queries)
        h.ok(connected - asked[0] < 2.0,
             "connected %.1fs after the A query; the AAAA wait is 3 s" % (connected - asked[0]))

    local_hosts = os.path.join(t.tmp, "local-hosts")
    with open(local_hosts, "w") as f:
        f.write("::1 localhost\n127.0.0.1 localhost\n")
    local = t.proxy(CONFIG, env=dict(env, RETRYPROXY_HOSTS=local_hosts), NAME="localhost",
                    ORIGIN=origin.port, REDIS=redis.port)

    @t.check("localhost from the hosts file, ::1 refusing: no DNS query for either family, "
             "and 127.0.0.1 is tried at once")
    def _():
        wait_gauge([local], 1, 10 * h.SLOW)
        local.wait_log(r"fleet named: connected to redis localhost:%d" % redis.port)
        h.eq(stub.queries_for("localhost"), [], "DNS queries for localhost")

    moved_hosts = os.path.join(t.tmp, "moved-hosts")
    with open(moved_hosts, "w") as f:
        f.write("")
    moved = t.proxy(CONFIG, env=dict(env, RETRYPROXY_HOSTS=moved_hosts), NAME="slow.test",
                    ORIGIN=origin.port, REDIS=redis.port)

    @t.check("a reload to a Redis name its new hosts file adds: looked up there, connected, "
             "no warning")
    def _():
        wait_gauge([moved], 1, 10 * h.SLOW)
        with open(moved_hosts, "w") as f:
            f.write("127.0.0.1 moved.test\n")
        moved.reload(moved.config_text.replace("slow.test:", "moved.test:"))
        moved.wait_log(r"fleet named: connected to redis moved\.test:%d" % redis.port,
                       timeout=10 * h.SLOW)
        h.eq([ln for ln in moved.stderr_lines() if "moved.test" in ln and "local" in ln], [],
             "warnings that budgets went local")
        h.eq(stub.queries_for("moved.test"), [], "DNS queries for moved.test")


h.run(scenario, __doc__, timeout=60)
