#!/usr/bin/env python3
"""Scenario: the admin listener holds at most 64 connections at once.

Client: 70 connections to the admin listener that send nothing (a scraper
or probe that leaks its connections, or one that stalls on purpose), then
a 71st that asks GET /healthz; a GET through the proxy listener meanwhile;
then 10 of the idle ones close.
Origin: the test origin, for the request through the proxy.
Must hold: the proxy takes only 64 of them (it holds 64 connections on the
admin port, not 70): the others, the /healthz one among them, wait in the admin listen
queue, unanswered; the proxy listener serves as before; once 10 idle ones
close, the waiting ones are taken and /healthz is answered 200; after all
close, the proxy holds no descriptor of theirs and /healthz is answered at
once (the cap counts connections that closed). Before the cap each admin client held a descriptor of the
proxy's, with no bound but RLIMIT_NOFILE, which the proxy's own clients and
upstreams need.
"""

import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
"""

CAP = 64
EXTRA = 6


def healthz_answer(s, timeout):
    """The status line of the answer on s within timeout, or None."""
    s.settimeout(timeout)
    try:
        data = s.recv(200)
    except socket.timeout:
        return None
    return data.split(b"\r\n", 1)[0]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    admin_port = proxy.port(1)
    idle = []
    t.defer(lambda: [s.close() for s in idle])

    @t.check("70 silent admin clients: the proxy takes 64, the rest wait in the listen queue")
    def _():
        for _ in range(CAP + EXTRA):
            idle.append(socket.create_connection(("127.0.0.1", admin_port), timeout=5))
        h.wait_until(lambda: h.connections_on(proxy.pid, admin_port) >= CAP, 5 * h.SLOW,
                     "%d admin connections taken" % CAP)
        # time for any more accepts to show
        time.sleep(0.5 * h.SLOW)
        h.eq(h.connections_on(proxy.pid, admin_port), CAP, "admin connections the proxy holds")

    waiting = socket.create_connection(("127.0.0.1", admin_port), timeout=5)
    t.defer(waiting.close)

    @t.check("past the cap, /healthz waits unanswered; the proxy listener still serves")
    def _():
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        h.eq(healthz_answer(waiting, 1.0), None, "an answer to the 71st admin client")
        r = h.curl("http://127.0.0.1:%d/bytes/10" % proxy.port(0))
        h.eq(r.exit_code, 0, "curl through the proxy (%s)" % r.stderr)
        h.eq(r.heads[-1][0], 200, "status through the proxy")

    @t.check("10 idle admin clients close: the waiting ones are taken, /healthz gets 200")
    def _():
        for s in idle[:10]:
            s.close()
        del idle[:10]
        h.eq(healthz_answer(waiting, 5 * h.SLOW), b"HTTP/1.1 200 OK", "the /healthz answer")

    @t.check("all closed: their descriptors are let go of, a new /healthz is answered at once")
    def _():
        for s in idle:
            s.close()
        idle.clear()
        waiting.close()
        h.wait_until(lambda: h.connections_on(proxy.pid, admin_port) == 0, 3 * h.SLOW,
                     "no admin connection held")
        h.wait_until(lambda: h.port_accepts(admin_port), 5, "the admin port")
        r = h.curl("http://127.0.0.1:%d/healthz" % admin_port, timeout=5 * h.SLOW)
        h.eq(r.exit_code, 0, "curl /healthz (%s)" % r.stderr)
        h.eq(r.heads[-1][0], 200, "/healthz status")


h.run(scenario, __doc__)
