#!/usr/bin/env python3
"""Scenario: listeners on IPv6 addresses take IPv4 too, on a host whose
IPv6 sockets start IPv6-only (net.ipv6.bindv6only = 1).

The config's checks take "[::]:P" to be every address of both families on
P (a second listener on "0.0.0.0:P" is refused as the same port; a
forwarded request to this host's IPv4 address on P is the proxy's own),
and an IPv4-mapped address such as "[::ffff:127.0.0.1]" to be the IPv4
address it maps. Before, the proxy left the socket as the host's default
made it: on such a host "[::]:P" took no IPv4 connection, and an
IPv4-mapped address could not be bound at all.

Client: raw connections over IPv4 and IPv6 loopback.
Origin: the test origin.
Proxy: preloaded with v6only.c, which makes every IPv6 socket start
IPv6-only, as that sysctl does; a sidecar on "[::]:P0", one on
"[::ffff:127.0.0.1]:P2", and the admin on "[::]:P1" (admin_remote).
Must hold: the proxy starts; a GET to 127.0.0.1:P0 and to [::1]:P0 is
relayed (200), a GET to 127.0.0.1:P2 too, and /healthz answers on
127.0.0.1:P1.
"""

import os
import socket

import harness as h

CONFIG = """\
listen:
  - address: "[::]:@PORT0@"
    upstream: http://127.0.0.1:@ORIGIN@
  - address: "[::ffff:127.0.0.1]:@PORT2@"
    upstream: http://127.0.0.1:@ORIGIN@
admin: "[::]:@PORT1@"
access: { admin_remote: true }
log: { level: info, format: text }
limits: { drain_timeout: 1s }
"""


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def scenario(t):
    if not ipv6_loopback():
        t.skip("IPv6 listeners take IPv4 too", "no IPv6 loopback on this host")
        return
    shim = os.environ.get("RETRYPROXY_V6ONLY")
    h.ok(shim and os.path.exists(shim), "RETRYPROXY_V6ONLY names the built library: %r" % shim)
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"LD_PRELOAD": shim,
           "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    origin = t.origin()
    proxy = t.proxy(CONFIG, env=env, ORIGIN=origin.port)

    @t.check("a listener on [::] takes IPv4 and IPv6 connections")
    def _():
        for host in ("127.0.0.1", "::1"):
            with h.RawConn(proxy.port(0), host=host) as c:
                c.send(h.request("GET", "/bytes/10", "app.test"))
                r = c.read_response()
            h.eq(r.status, 200, "GET over %s" % host)

    @t.check("a listener on an IPv4-mapped address takes that IPv4 address's connections")
    def _():
        with h.RawConn(proxy.port(2), host="127.0.0.1") as c:
            c.send(h.request("GET", "/bytes/10", "app.test"))
            h.eq(c.read_response().status, 200, "GET over 127.0.0.1")

    @t.check("an admin on [::] answers over IPv4")
    def _():
        r = h.fetch(proxy.port(1), "GET", "/healthz", "127.0.0.1:%d" % proxy.port(1))
        h.eq(r.status, 200, "/healthz over 127.0.0.1")


h.run(scenario, __doc__)
