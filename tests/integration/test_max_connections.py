#!/usr/bin/env python3
"""Scenario: limits.max_connections (2) pauses accepting.

Client: raw sockets to a sidecar listener. A and B each make a request and
keep their connection open. C connects and sends a request while A and B
are open. Then A closes.
Origin: echoes.
Must hold: C is neither refused nor reset while the proxy is at its limit:
its request simply waits (no answer for 1.5 s, nothing at the origin); once
A closes, C is served; the proxy keeps running. Then D waits at the limit
and a reload (SIGHUP) raising max_connections to 10 serves it at once, not
when some client leaves; a reload lowering it to 1, with three open, stops
accepting again (E waits).
"""

import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  drain_timeout: 2s
  client_timeout: 30s
  max_connections: 2
defaults:
  retry:
    max_attempts: 1
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    time.sleep(0.3)  # let the proxy see the start-up probe connection close

    conns = {}
    t.defer(lambda: [c.close() for c in conns.values()])

    @t.check("two clients are served and stay connected")
    def _():
        for name in ("A", "B"):
            c = h.RawConn(proxy.port(), timeout=10)
            conns[name] = c
            c.send(h.request("GET", "/echo?client=" + name, "a.example"))
            r = c.read_response()
            h.eq(r.status, 200, "status for client %s" % name)

    @t.check("a third connection at the limit waits: not refused, not reset, not served")
    def _():
        try:
            c = h.RawConn(proxy.port(), timeout=10)
        except OSError as e:
            raise AssertionError("third connection refused at the limit: %s" % e)
        conns["C"] = c
        c.send(h.request("GET", "/echo?client=C", "a.example"))
        quiet = c.silent_for(1.5)
        h.ok(quiet, "third connection got %s while the proxy was at max_connections"
             % ("data %r" % bytes(c.buf[:200]) if c.buf else "closed or reset"))
        h.eq([q for q in origin.requests if q.query.get("client") == "C"], [], "C's request at the origin")

    @t.check("when one connection closes, the waiting client is served")
    def _():
        conns.pop("A").close()
        r = conns["C"].read_response(timeout=10)
        h.eq(r.status, 200, "status for client C")
        h.eq([q.query.get("client") for q in origin.requests].count("C"), 1, "C's request at the origin")

    @t.check("the remaining connections still work")
    def _():
        for name in ("B", "C"):
            conns[name].send(h.request("GET", "/echo?again=" + name, "a.example"))
            h.eq(conns[name].read_response().status, 200, "status for client %s again" % name)

    def reload(limit):
        text = proxy.config_text.replace("max_connections: %d" % limit[0],
                                         "max_connections: %d" % limit[1])
        proxy.reload(text)

    @t.check("a reload that raises max_connections serves a waiting client at once")
    def _():
        c = h.RawConn(proxy.port(), timeout=10)
        conns["D"] = c
        c.send(h.request("GET", "/echo?client=D", "a.example"))
        h.ok(c.silent_for(1.0), "D was served at the limit")
        reload((2, 10))
        h.eq(c.read_response(timeout=3 * h.SLOW).status, 200, "status for client D")

    @t.check("a reload that lowers max_connections below the open ones stops accepting")
    def _():
        reload((10, 1))
        c = h.RawConn(proxy.port(), timeout=10)
        conns["E"] = c
        c.send(h.request("GET", "/echo?client=E", "a.example"))
        h.ok(c.silent_for(1.5), "E was served with 3 connections open and max_connections 1")


h.run(scenario, __doc__)
