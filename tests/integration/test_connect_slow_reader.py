#!/usr/bin/env python3
"""Scenario: a CONNECT tunnel to a client that reads slowly.

Client: a raw socket with a small receive buffer opens a blind CONNECT
tunnel to a plain origin, asks for 8 MiB, and reads it at about 40 KB/s for
7 seconds, then the rest at once.
Origin: the plain HTTP origin, which sends the body as fast as it can.
Must hold: with tunnel_idle_timeout 2s the tunnel is not closed while the
client still takes bytes, though for longer than that the proxy neither
reads nor writes (the kernel holds megabytes for the client, the proxy's own
buffer toward it stays above its low mark, the origin's side is paused):
both sides are still open after the slow reading, and the body arrives
whole. A tunnel where nothing moves still closes after tunnel_idle_timeout,
both sides, and so does one whose client stops reading in the middle of a
download (what it holds is not taken: no traffic).
"""

import hashlib
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  tunnel_idle_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""


def scenario(t):
    plain = t.origin(name="plain")
    proxy = t.proxy(CONFIG)
    state = {}

    @t.check("a slow reader (40 KB/s for 7s) in a blind tunnel with tunnel_idle_timeout 2s: "
             "the tunnel stays open, 8 MiB arrive whole")
    def _():
        n = 8 << 20
        c = h.RawConn(proxy.port(), timeout=10 * h.SLOW, rcvbuf=16 << 10)
        state["conn"] = c
        authority = "127.0.0.1:%d" % plain.port
        c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
        r = c.read_head()
        h.eq(r.status, 200, "CONNECT status")
        c.send(("GET /bytes/%d?t=slow HTTP/1.1\r\nHost: x\r\n\r\n" % n).encode())
        r = c.read_head()
        h.eq(r.status, 200, "status through the tunnel")
        body = bytearray(c.buf)
        c.buf.clear()
        start = time.monotonic()
        while time.monotonic() - start < 7:
            c.sock.settimeout(10 * h.SLOW)
            data = c.sock.recv(4 << 10)
            h.ok(data, "tunnel closed after %.1fs of slow reading, at %d of %d bytes"
                 % (time.monotonic() - start, len(body), n))
            body.extend(data)
            time.sleep(0.1)
        cid = [q for q in plain.requests if q.query.get("t") == "slow"][0].conn_id
        origin_side = [x for x in plain.connections if x.id == cid][0]
        h.ok(not origin_side.closed.is_set(),
             "the origin's side of the tunnel closed while the client was still reading")
        while len(body) < n:
            data = c.sock.recv(1 << 20)
            h.ok(data, "tunnel closed at %d of %d bytes" % (len(body), n))
            body.extend(data)
        h.eq(hashlib.sha256(bytes(body[:n])).hexdigest(), o.pattern_sha256(n), "body sha256")
        state["origin_side"] = origin_side

    @t.check("then idle, the same tunnel closes after tunnel_idle_timeout (2s), both sides")
    def _():
        c = state.pop("conn")
        with c:
            h.ok("origin_side" in state, "the tunnel was not open after the slow reading")
            h.ok(c.closed_within(2 + 8 * h.SLOW), "idle tunnel still open 10s after the last byte")
            h.ok(state["origin_side"].closed.wait(5), "origin side of the idle tunnel still open")

    @t.check("a client that stops reading in the middle of a download: the tunnel closes, "
             "both sides, once nothing more is taken for tunnel_idle_timeout")
    def _():
        n = 64 << 20
        with h.RawConn(proxy.port(), timeout=10 * h.SLOW, rcvbuf=16 << 10) as c:
            authority = "127.0.0.1:%d" % plain.port
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
            h.eq(c.read_head().status, 200, "CONNECT status")
            c.send(("GET /bytes/%d?t=stalled HTTP/1.1\r\nHost: x\r\n\r\n" % n).encode())
            plain.wait_for(lambda org: any(q.query.get("t") == "stalled" for q in org.requests),
                           5 * h.SLOW, "the request to reach the origin")
            cid = [q for q in plain.requests if q.query.get("t") == "stalled"][0].conn_id
            origin_side = [x for x in plain.connections if x.id == cid][0]
            # the kernel's buffers fill within a moment; from then on nothing
            # moves, and two timeouts are the most the proxy may wait
            h.ok(origin_side.closed.wait(2 * 2 + 8 * h.SLOW),
                 "origin side of a tunnel whose client reads nothing still open")


h.run(scenario, __doc__)
