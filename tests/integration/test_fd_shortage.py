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
"""

import os
import resource

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


def get(proxy_port, authority):
    """One absolute-form GET on its own connection: the status, or the
    error that ended it."""
    try:
        return h.forward_get(proxy_port, authority, timeout=5 * h.SLOW)
    except (h.ReadTimeout, AssertionError, OSError) as e:
        return "%s: %s" % (type(e).__name__, e)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def scenario(t):
    server = ManyPorts(UPSTREAMS)
    t.defer(server.stop)
    proxy = t.proxy(CONFIG)
    before = fd_count(proxy.pid)
    limit = before + ROOM
    hard = resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE, (limit, hard))
    print("proxy: %d descriptors open, RLIMIT_NOFILE soft limit set to %d" % (before, limit), flush=True)

    results = []
    most = 0
    for port in server.ports:
        results.append(get(proxy.port(0), "127.0.0.1:%d" % port))
        most = max(most, fd_count(proxy.pid))

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
    most = max(most, fd_count(proxy.pid))

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


h.run(scenario, __doc__, timeout=120)
