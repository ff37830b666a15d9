#!/usr/bin/env python3
"""Scenario: a forward proxy runs out of file descriptors because its pool
keeps an idle connection to every upstream its clients named.

Client: once the proxy runs, its RLIMIT_NOFILE soft limit is lowered to
ROOM descriptors above what it has open; then (1) 40 absolute-form GETs,
one after the other, each on a new connection (Connection: close) and each
to another upstream, http://127.0.0.1:<port>/, with 5 s (more under
sanitizers) for each answer: each leaves one more idle connection, so the
descriptors run out at an upstream connect; (2) ROOM - 4 new connections
left idle, more than the descriptors left over from (1) (the pool holds
the rest), so that they run out at an accept, then a GET on the last.
Origin: one listening port per upstream, answered 200 by one thread
(many_ports.py); it keeps its connections open, so each GET leaves the
proxy an idle pooled connection (pool_idle_timeout 60s).
Must hold: every GET gets 200, those past the limit included: when an
accept or an upstream connect's socket finds no descriptor left, the
proxy closes idle pooled connections, oldest first, and logs "out of file
descriptors: closed N idle upstream connections", instead of leaving the
new client unaccepted until an idle connection times out; the proxy never
holds more descriptors than its limit allows, and keeps running.
(3) A sidecar proxy (health down_after 1, hold false, probe_interval 60s)
whose descriptors idle clients use up, with nothing pooled to close: a GET
that finds no descriptor for its upstream connect gets 502, but the
upstream is not marked down (the shortage is the proxy's, not the
upstream's: before, it was logged down, and once descriptors were free
again requests got "502 upstream ... is down" until a probe): once the
idle clients leave, /upstreams says it is up with no failure, and the
next GET gets 200. Its upstream is a name (fd.test, answered by a stub
resolver on loopback, kept for dns_cache 60s), resolved once by a GET
before the shortage: the connect that found no descriptor neither forgot
that answer (the GET after asks no question) nor counted in
retryproxy_upstream_errors_total{kind="connect"} (before, it did both, as
for a connect the upstream refused).
"""

import resource
import time

import dnsstub
import harness as h
from many_ports import ManyPorts

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s, pool_idle_timeout: 60s }
"""

UPSTREAMS = 40
ROOM = 16

CONFIG_SIDECAR = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://fd.test:@UP@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, dns_cache: 60s, pool_max_idle: 0 }
health: { down_after: 1, probe_interval: 60s, hold: false }
defaults:
  retry: { max_attempts: 1 }
"""


def get(proxy_port, authority):
    """One absolute-form GET on its own connection: the status, or the
    error that ended it."""
    try:
        return h.forward_get(proxy_port, authority, timeout=5 * h.SLOW)
    except (h.ReadTimeout, AssertionError, OSError) as e:
        return "%s: %s" % (type(e).__name__, e)


def scenario(t):
    server = ManyPorts(UPSTREAMS)
    t.defer(server.stop)
    proxy = t.proxy(CONFIG)
    before = h.fd_count(proxy.pid)
    limit = before + ROOM
    hard = resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE, (limit, hard))
    print("proxy: %d descriptors open, RLIMIT_NOFILE soft limit set to %d" % (before, limit), flush=True)

    results = []
    most = 0
    for port in server.ports:
        results.append(get(proxy.port(0), "127.0.0.1:%d" % port))
        most = max(most, h.fd_count(proxy.pid))

    @t.check("%d GETs to %d upstreams, %d descriptors of room: every one gets 200"
             % (UPSTREAMS, UPSTREAMS, ROOM))
    def _():
        bad = [(i, r) for i, r in enumerate(results) if r != 200]
        h.eq(bad, [], "requests without a 200 (index, status or error)")

    # (2) idle clients until an accept finds no descriptor, then a GET on
    # the last: it must be accepted although the pool holds descriptors
    def shortages():
        return sum(1 for line in proxy.stderr_lines() if "out of file descriptors: closed" in line)

    at_connects = shortages()
    idle = []
    t.defer(lambda: [c.close() for c in idle])
    for _ in range(ROOM - 4):
        idle.append(h.RawConn(proxy.port(0), timeout=5 * h.SLOW))
    # before any request on them: only an accept can have run out
    try:
        h.wait_until(lambda: shortages() > at_connects, 3 * h.SLOW, "a shortage at an accept")
        at_accept = True
    except AssertionError:
        at_accept = False
    authority = "127.0.0.1:%d" % server.ports[0]
    idle[-1].send(h.request("GET", "http://%s/" % authority, authority))
    try:
        last = idle[-1].read_response().status
    except (h.ReadTimeout, AssertionError, OSError) as e:
        last = "%s: %s" % (type(e).__name__, e)
    most = max(most, h.fd_count(proxy.pid))

    @t.check("%d idle clients more: an accept finds no descriptor, idle pooled connections are closed "
             "for it, and a GET on the last client gets 200" % (ROOM - 4))
    def _():
        h.ok(at_connects > 0, "the GETs of (1) never ran out of descriptors")
        h.ok(at_accept, "no descriptors were given back for the accepts")
        h.eq(last, 200, "the last idle connection's GET")

    @t.check("out of descriptors, idle pooled connections are closed, and the log says so")
    def _():
        proxy.wait_log(r"out of file descriptors: closed \d+ idle upstream connections?",
                       timeout=2 * h.SLOW)
        h.ok(most <= limit, "the proxy held %d descriptors over a limit of %d" % (most, limit))
        h.ok(proxy.alive(), "the proxy exited")

    # (3) no descriptor for an upstream connect, nothing pooled to close
    stub = dnsstub.DnsStub(answers={"fd.test": "127.0.0.1"}).start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv.conf", "timeout:1 attempts:1")
    side = t.proxy(CONFIG_SIDECAR, env={"RETRYPROXY_RESOLV_CONF": resolv}, UP=server.ports[1])
    try:
        warm = h.fetch(side.port(0), "GET", "/warm", "app.example", timeout=5 * h.SLOW).status
    except (h.ReadTimeout, AssertionError, OSError) as e:
        warm = "%s: %s" % (type(e).__name__, e)
    time.sleep(0.3)
    stub.clear()
    side_before = h.fd_count(side.pid)
    side_limit = side_before + 4
    resource.prlimit(side.pid, resource.RLIMIT_NOFILE,
                     (side_limit, resource.prlimit(side.pid, resource.RLIMIT_NOFILE)[1]))
    fill = []
    t.defer(lambda: [c.close() for c in fill])
    for i in range(side_limit - side_before):
        fill.append(h.RawConn(side.port(0), timeout=5 * h.SLOW))
        h.wait_until(lambda: h.fd_count(side.pid) == side_before + i + 1, 3 * h.SLOW,
                     "idle client %d accepted" % (i + 1))
    fill[-1].send(h.request("GET", "/no-fd", "app.example"))
    try:
        starved = fill[-1].read_response().status
    except (h.ReadTimeout, AssertionError, OSError) as e:
        starved = "%s: %s" % (type(e).__name__, e)
    for c in fill:
        c.close()
    h.wait_until(lambda: h.fd_count(side.pid) <= side_before, 3 * h.SLOW, "the idle clients gone")
    upstreams = h.curl("http://127.0.0.1:%d/upstreams" % side.port(1)).body.decode()
    try:
        after = h.fetch(side.port(0), "GET", "/after", "app.example", timeout=5 * h.SLOW)
    except (h.ReadTimeout, AssertionError, OSError) as e:
        after = "%s: %s" % (type(e).__name__, e)
    metrics = h.curl("http://127.0.0.1:%d/metrics" % side.port(1)).body.decode()

    @t.check("no descriptor for an upstream connect: 502, but the upstream is not marked down, "
             "and the next GET gets 200")
    def _():
        h.eq(warm, 200, "the GET before the shortage")
        h.eq(starved, 502, "the GET that found no descriptor")
        h.eq(upstreams.strip(), "http://fd.test:%d up failures=0 held=0" % server.ports[1],
             "/upstreams after the shortage")
        h.ok(not any("is down" in line for line in side.stderr_lines()),
             "the shortage was logged as the upstream going down")
        h.eq(getattr(after, "status", after), 200, "the GET after the shortage")

    @t.check("no descriptor for an upstream connect: the name's kept answer stays, and "
             "retryproxy_upstream_errors_total{kind=\"connect\"} does not count it")
    def _():
        h.eq([q.type for q in stub.queries_for("fd.test")], [],
             "questions for fd.test after the shortage (within dns_cache)")
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="connect"}'), 0.0,
             "connect errors counted")


h.run(scenario, __doc__, timeout=120)
