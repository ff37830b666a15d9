#!/usr/bin/env python3
"""Scenario: the proxy never connects to one of its own listeners for a
client, so that a CONNECT to itself cannot nest.

Before, a CONNECT naming the proxy's own listener was tunnelled to it, and
the bytes behind it reached that listener as a new client: one connection
carrying N pipelined "CONNECT self" heads in one write made the proxy open
N nested tunnels (2N descriptors and N places under max_connections), so a
single client could take every place and descriptor the proxy has.

Client: raw sockets to the forward listener; curl through it.
Origin: the test origin on 127.0.0.1 (echo).
Proxy: a forward listener and a sidecar listener (whose upstream is the
origin) on 127.0.0.1, an admin on loopback; RETRYPROXY_HOSTS gives
self.test the address 127.0.0.1 (no DNS query leaves the machine).
Must hold: one connection sending 50 CONNECTs to the forward listener's
own address in one write gets 403 naming the proxy's own listener, after
one try (tries="forbidden"), and the proxy holds no tunnel and no upstream
connection for it; a CONNECT to the sidecar listener, to self.test at the
forward listener's port, and a forwarded GET to either listener get the
same 403; the sidecar still serves its own clients, and a CONNECT to the
origin still tunnels.
"""

import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
"""


def scenario(t):
    origin = t.origin()
    env = t.hosts_only_env("127.0.0.1 self.test\n")
    proxy = t.proxy(CONFIG, env=env, ORIGIN=origin.port)
    forward, sidecar = proxy.port(0), proxy.port(2)

    def connections():
        m = h.curl(proxy.listener_url(1, "/metrics")).body.decode()
        return (h.metric(m, "retryproxy_connections", '{side="client"}'),
                h.metric(m, "retryproxy_connections", '{side="upstream"}'))

    def connect(authority):
        with h.RawConn(forward) as c:
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
            return c.read_response()

    @t.check("50 pipelined CONNECTs to the proxy's own listener on one connection: 403 "
             "naming it, no tunnel nested, no upstream connection")
    def _():
        authority = "127.0.0.1:%d" % forward
        head = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode()
        with h.RawConn(forward) as c:
            c.send(head * 50)
            r = c.read_response()
            h.check_error_response(r, 403, ("own", "listener"))
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
            time.sleep(0.3)
            client, upstream = connections()
        h.ok(client is not None and client <= 2, "client connections open: %r" % client)
        h.eq(upstream, 0, "upstream connections open")
        h.eq(h.access_fields(proxy.access_one(authority)).get("tries"), "forbidden", "tries")

    for authority in ("127.0.0.1:%d" % sidecar, "self.test:%d" % forward):
        @t.check("CONNECT %s (the proxy's own listener): 403 naming it" % authority)
        def _():
            h.check_error_response(connect(authority), 403, ("own", "listener"))

    for url in ("http://127.0.0.1:%d/echo" % forward, "http://self.test:%d/echo" % sidecar):
        @t.check("a forwarded GET to %s (the proxy's own listener): 403 naming it" % url)
        def _():
            r = h.curl(url, proxy=proxy.url)
            h.check_error_response(r, 403, ("own", "listener"))

    @t.check("the sidecar still serves its clients, and a CONNECT to the origin still tunnels")
    def _():
        r = h.curl("http://127.0.0.1:%d/echo?t=direct" % sidecar)
        h.eq((r.exit_code, r.status), (0, 200), "sidecar (%r)" % r)
        r = h.curl("-p", origin.url("/echo?t=tunnel"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "tunnel (%r)" % r)
        h.ok(not [ln for ln in proxy.stderr_lines() if re.search(r"admin: /", ln)],
             "nothing served by the admin")


h.run(scenario, __doc__)
