#!/usr/bin/env python3
"""Scenario: out of file descriptors, a client of the admin listener.

Client: ten absolute-form GETs, each to another upstream, leave the proxy
ten idle pooled connections (pool_idle_timeout 60s); then the proxy's
RLIMIT_NOFILE soft limit is lowered to its lowest free descriptor number,
so that no new descriptor can be had (idle client connections first fill
any gap below the highest descriptor in use); then GET /healthz on the
admin listener.
Origin: one listening port per upstream (many_ports.py), answered 200.
Must hold: the admin accept, like a listener's, gets idle pooled
connections closed for it ("out of file descriptors: closed N idle
upstream connections") and /healthz is answered within 3 s, not after
pool_idle_timeout; the proxy does not spin on the failing accept (no flood
of "Error from accept() call" lines on stderr).
"""

import os
import resource
import socket

import harness as h
from many_ports import ManyPorts

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, pool_idle_timeout: 60s }
"""

UPSTREAMS = 10


def fds(pid):
    return {int(n) for n in os.listdir("/proc/%d/fd" % pid)}


def lowest_free(pid):
    used = fds(pid)
    n = 0
    while n in used:
        n += 1
    return n


def scenario(t):
    server = ManyPorts(UPSTREAMS)
    t.defer(server.stop)
    proxy = t.proxy(CONFIG)
    base = len(fds(proxy.pid))
    for port in server.ports:
        authority = "127.0.0.1:%d" % port
        with h.RawConn(proxy.port(0), timeout=5 * h.SLOW) as c:
            c.send(h.request("GET", "http://%s/" % authority, authority,
                             headers=[("Connection", "close")]))
            h.eq(c.read_response().status, 200, "GET to %s" % authority)
    # the clients' connections closed: what is left is pooled
    h.wait_until(lambda: len(fds(proxy.pid)) == base + UPSTREAMS, 2 * h.SLOW,
                 "%d idle pooled connections, no client connection" % UPSTREAMS)
    # idle clients fill the gaps below the highest descriptor (a client's
    # closed connection), so that the pooled connections hold descriptors
    # under the limit
    idle = []
    t.defer(lambda: [c.close() for c in idle])
    while lowest_free(proxy.pid) < max(fds(proxy.pid)):
        count = len(fds(proxy.pid))
        idle.append(h.RawConn(proxy.port(0), timeout=5 * h.SLOW))
        h.wait_until(lambda: len(fds(proxy.pid)) > count, 2 * h.SLOW, "an idle client accepted")
    limit = lowest_free(proxy.pid)
    hard = resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE, (limit, hard))

    s = socket.create_connection(("127.0.0.1", proxy.port(1)))
    t.defer(s.close)
    s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    s.settimeout(3 * h.SLOW)
    try:
        answer = s.recv(100)
    except socket.timeout:
        answer = b"(nothing within %ds)" % (3 * h.SLOW)

    @t.check("out of descriptors, the admin accept gets idle pooled connections closed and "
             "/healthz is answered")
    def _():
        h.ok(answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"),
             "the admin answer: %r" % answer)
        proxy.wait_log(r"out of file descriptors: closed \d+ idle upstream connections?",
                       timeout=2 * h.SLOW)

    @t.check("the failing admin accept is not retried in a busy loop")
    def _():
        spins = sum(1 for line in proxy.stderr_lines() if "Error from accept() call" in line)
        h.ok(spins < 10, "%d 'Error from accept() call' lines on stderr" % spins)
        h.ok(proxy.alive(), "the proxy exited")


h.run(scenario, __doc__, timeout=60)
