#!/usr/bin/env python3
"""Scenario: a forward proxy's clients reach 1200 upstreams that answer, each
left with a pooled connection, and then go quiet.

Client: 1200 absolute-form GETs, sixteen at a time on raw sockets, each to
another upstream: http://127.0.0.1:<port>/ with one listening port per
upstream (a selectors loop, many_ports.py, answers 200 and keeps the
connection open). Each upstream is left with an idle pooled connection, so
while they last every record is attached and /upstreams may pass 1024.
Then nothing: no request, no new upstream; the upstreams close every
connection (as at their own idle timeout), so the proxy's pooled
connections end (pool_idle_timeout is 60s: the GETs' time, however slow
the machine, never ends one before the busy check).
Origin: the loop above; nothing else.
Must hold:
- every request gets 200;
- right after them, /upstreams lists all 1200 (each has a connection);
- with every connection gone, /upstreams keeps at most 1024 upstreams
  (UPSTREAMS_KEEP in src/upstreams.c: past it, the least recently used
  records with nothing attached are forgotten), the most recently used
  among them, and /metrics has no more retryproxy_upstream_up series than
  that: a quiet proxy does not keep the peak of its busy minute.
"""

import concurrent.futures
import re

import harness as h
from many_ports import ManyPorts

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits: { drain_timeout: 2s, pool_idle_timeout: 60s }
"""

COUNT = 1200
KEEP = 1024


def scenario(t):
    server = ManyPorts(COUNT)
    t.defer(server.stop)
    proxy = t.proxy(CONFIG)
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    names = ["127.0.0.1:%d" % p for p in server.ports]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda n: h.forward_get(proxy.port(0), n), names))
    busy = len(h.curl(admin + "/upstreams", check=True).body.splitlines())

    @t.check("every request got 200")
    def _():
        h.eq({c: codes.count(c) for c in set(codes)}, {200: COUNT}, "status codes")

    @t.check("busy: every upstream is kept while its pooled connection is")
    def _():
        h.eq(busy, COUNT, "/upstreams lines with %d pooled connections" % COUNT)

    def upstream_connections():
        body = h.curl(admin + "/metrics", check=True).body.decode()
        return h.metric(body, "retryproxy_connections", '{side="upstream"}')

    # the upstreams hang up: the pooled connections end; nothing else happens
    server.close_connections()
    h.wait_until(lambda: upstream_connections() == 0, 15 * h.SLOW,
                 "the pooled connections closed")

    @t.check("quiet: /upstreams keeps at most %d upstreams, the most recently used" % KEEP)
    def _():
        def trimmed():
            lines = h.curl(admin + "/upstreams", check=True).body.decode().splitlines()
            return len(lines) <= KEEP
        h.wait_until(trimmed, 3 * h.SLOW, "/upstreams at most %d lines" % KEEP)
        lines = h.curl(admin + "/upstreams", check=True).body.decode().splitlines()
        listed = {line.split()[0] for line in lines}
        newest = ["http://%s" % n for n in names[-100:]]
        h.ok(len(lines) <= KEEP, "/upstreams has %d lines" % len(lines))
        h.eq([n for n in newest if n not in listed], [], "recent upstreams missing")

    @t.check("quiet: /metrics has no more upstream series than %d" % KEEP)
    def _():
        body = h.curl(admin + "/metrics", check=True).body.decode()
        up = re.findall(r"^retryproxy_upstream_up\{", body, re.M)
        h.ok(len(up) <= KEEP, "%d retryproxy_upstream_up series" % len(up))


h.run(scenario, __doc__, timeout=60)
