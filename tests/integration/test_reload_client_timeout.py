#!/usr/bin/env python3
"""Scenario: a reload changes client_timeout under idle keep-alive
connections.

Client: raw keep-alive connections to a sidecar listener, each idle after
one request.
Origin: the shared test origin (echo).
Must hold: with client_timeout 60s, a reload to 1s closes a connection
idle since before the reload within a few seconds, not 60 s after its last
request; after a reload back to 60s a connection that goes idle stays open
past 1 s and serves its next request; a connection that has sent half a
head when a reload lowers client_timeout to 1s is closed within a few
seconds too, not 60 s after it connected; so is a CONNECT to an
intercepted host whose TLS handshake has not ended (its client sent half a
ClientHello) when a reload lowers client_timeout.
"""

import os
import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
log: { level: info, format: text }
intercept:
  hosts: ["intercepted.test"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
limits:
  client_timeout: %s
  drain_timeout: 2s
"""


def scenario(t):
    origin = t.origin()
    localca = h.make_local_ca(os.path.join(t.tmp, "local-ca"))
    proxy = t.proxy(CONFIG % "60s", ORIGIN=origin.port, LOCALCA=localca)
    text = h.read_file(proxy.config_path)

    def reload(timeout):
        proxy.reload(re.sub(r"client_timeout: \S+", "client_timeout: " + timeout, text))

    def idle_conn(tag):
        c = h.RawConn(proxy.port(), timeout=10 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/echo?c=" + tag, "app.example"))
        h.eq(c.read_response().status, 200, "status")
        return c

    @t.check("a lowered client_timeout closes connections idle since before the reload")
    def _():
        idle = idle_conn("before")
        reload("1s")
        started = time.monotonic()
        h.ok(idle.closed_within(8 * h.SLOW),
             "an idle connection still open %.1f s after a reload to client_timeout 1s"
             % (time.monotonic() - started))

    @t.check("a raised client_timeout lets an idle connection stay past the old one")
    def _():
        reload("60s")
        idle = idle_conn("raised")
        h.ok(idle.silent_for(2.5), "closed within 2.5 s under client_timeout 60s")
        idle.send(h.request("GET", "/echo?c=raised-again", "app.example"))
        h.eq(idle.read_response().status, 200, "the next request on it")


    @t.check("a lowered client_timeout closes a connection whose head was under way at the reload")
    def _():
        partial = h.RawConn(proxy.port(), timeout=10 * h.SLOW)
        t.defer(partial.close)
        partial.send(b"GET /echo?c=partial HTTP/1.1\r\nHost: app.example\r\n")
        time.sleep(0.3)
        reload("1s")
        started = time.monotonic()
        h.ok(partial.closed_within(8 * h.SLOW),
             "a connection with half a head still open %.1f s after a reload to "
             "client_timeout 1s" % (time.monotonic() - started))

    @t.check("a lowered client_timeout closes an intercepted CONNECT still in its handshake")
    def _():
        reload("60s")
        tunnel = h.RawConn(proxy.port(1), timeout=10 * h.SLOW)
        t.defer(tunnel.close)
        tunnel.send(b"CONNECT intercepted.test:443 HTTP/1.1\r\n"
                    b"Host: intercepted.test:443\r\n\r\n")
        h.eq(tunnel.read_head().status, 200, "the CONNECT's status")
        # the start of a TLS record carrying a ClientHello, never finished
        tunnel.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        time.sleep(0.3)
        reload("1s")
        started = time.monotonic()
        h.ok(tunnel.closed_within(8 * h.SLOW),
             "an intercepted CONNECT in its handshake still open %.1f s after a reload to "
             "client_timeout 1s" % (time.monotonic() - started))

if __name__ == "__main__":
    h.run(scenario, __doc__)
