#!/usr/bin/env python3
"""Scenario: limits.max_connections (2) pauses accepting.

Client: raw sockets to a sidecar listener. A and B each make a request and
keep their connection open, each with its next request head begun (busy).
C connects and sends a request while A and B are open. Then A closes.
Origin: echoes.
Must hold: C is neither refused nor reset while the proxy is at its limit:
its request simply waits (no answer for 1.5 s, nothing at the origin); once
A closes, C is served; the proxy keeps running. Then D waits at the limit
and a reload (SIGHUP) raising max_connections to 10 serves it at once, not
when some client leaves; a reload lowering it to 1, with three open, stops
accepting again (E waits).

Second proxy (max_connections 3): K1 then K2 make a request each and stay
idle (keep-alive), S's request is held at the origin. N, a fourth client,
is served at once: the proxy closes K1, idle longest, with a FIN (as the
idle timeout would), and logs it; K2 stays open, S still gets its whole
response. With every connection busy (requests held at the origin, a head
begun) a new client waits; once one response is written, that connection,
now idle, makes room for it. A CONNECT tunnel, when the idle connections
are gone, is not closed for a new client, which waits.

Third proxy (max_connections 2): eight clients one after another, each
served and left idle, each new one closing the longest-idle: the limit,
reached seven times, is warned about once (at most once per 10 s), not
once per connection. Then A's request is held at the origin and B is
served; N connects while B has been idle a moment, and B sends its next
request 0.2 s after its response: B is served (a connection idle for
less than a second is not closed to make room, so a next request on its
way is not lost), and N is served once B has been idle a second, B
closed for it with a FIN. So is a connection whose request came with a
stray CRLF after it (empty lines a request line may follow, RFC 9112
section 2.2): idle, not a request begun.
"""

import json
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

    def busy(name):
        """Begin conns[name]'s next request head: a request under way."""
        conns[name].send(b"GET /echo?busy=" + name.encode() + b" HTTP/1.1\r\n")

    def finish(name):
        """End the head busy() began, and read its response."""
        conns[name].send(b"Host: a.example\r\n\r\n")
        h.eq(conns[name].read_response().status, 200, "status for %s's begun request" % name)

    @t.check("a third connection at the limit waits: not refused, not reset, not served")
    def _():
        # A and B are busy: an idle one would be closed to make room
        busy("A")
        busy("B")
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
        finish("B")
        for name in ("B", "C"):
            conns[name].send(h.request("GET", "/echo?again=" + name, "a.example"))
            h.eq(conns[name].read_response().status, 200, "status for client %s again" % name)

    def reload(limit):
        text = proxy.config_text.replace("max_connections: %d" % limit[0],
                                         "max_connections: %d" % limit[1])
        proxy.reload(text)

    @t.check("a reload that raises max_connections serves a waiting client at once")
    def _():
        busy("B")
        busy("C")
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
        h.ok(not conns["B"].closed_within(0.1) and not conns["C"].closed_within(0.1),
             "a connection with its request head begun was closed")

    idle_scenario(t, origin)
    churn_scenario(t, origin)


IDLE_CONFIG = CONFIG.replace("max_connections: 2", "max_connections: 3")


def clean_eof(c, timeout):
    """True if c's peer closes with a FIN (no reset) within timeout, with
    nothing more sent first."""
    c.sock.settimeout(timeout)
    try:
        return c.sock.recv(1024) == b""
    except OSError:
        return False


def idle_scenario(t, origin):
    proxy = t.proxy(IDLE_CONFIG, ORIGIN=origin.port)
    time.sleep(0.3)  # let the proxy see the start-up probe connection close
    conns = {}
    t.defer(lambda: [c.close() for c in conns.values()])

    def served(name, tag):
        c = h.RawConn(proxy.port(), timeout=10)
        conns[name] = c
        c.send(h.request("GET", "/echo?idle=" + tag, "a.example"))
        h.eq(c.read_response(timeout=3 * h.SLOW).status, 200, "status for client %s" % name)

    def held(name, gate):
        c = h.RawConn(proxy.port(), timeout=20 * h.SLOW)
        conns[name] = c
        c.send(h.request("GET", "/echo?hold=" + gate, "a.example"))
        origin.gate(gate).wait_reached(5 * h.SLOW)

    @t.check("at max_connections, the longest-idle keep-alive connection makes room for a new client")
    def _():
        served("K1", "k1")
        time.sleep(0.1)
        served("K2", "k2")
        held("S", "idle-s")
        served("N", "n")  # a fourth client at max_connections 3
        h.ok(clean_eof(conns["K1"], 2 * h.SLOW), "K1 (idle longest) was not closed with a FIN")
        h.ok(conns["K2"].silent_for(0.3), "K2 was closed too, or sent something")
        proxy.wait_log(r"max_connections \(3\) reached: closed the idle keep-alive connection "
                       r"of client 127\.0\.0\.1:%d" % conns["K1"].local_port)

    @t.check("a connection whose request is in flight is not closed to make room")
    def _():
        s = conns["S"]
        h.ok(s.silent_for(0.3), "S was closed or answered while its request was held")
        origin.gate("idle-s").release()
        r = s.read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 200, "status for S")
        h.eq(json.loads(r.body)["target"], "/echo?hold=idle-s", "the target S's response echoes")

    @t.check("with every connection busy a new client waits, then takes the place of one done")
    def _():
        # K2, S and N: two requests held at the origin, one head begun
        for name in ("K2", "S"):
            conns[name].send(h.request("GET", "/echo?hold=busy-" + name, "a.example"))
            origin.gate("busy-" + name).wait_reached(5 * h.SLOW)
        conns["N"].send(b"GET /echo?begun=1 HTTP/1.1\r\n")
        w = h.RawConn(proxy.port(), timeout=10)
        conns["W"] = w
        w.send(h.request("GET", "/echo?idle=w", "a.example"))
        h.ok(w.silent_for(1.5), "W was answered while every connection was busy")
        h.ok(conns["N"].silent_for(0.1), "N, with its head begun, was closed")
        origin.gate("busy-S").release()
        r = conns["S"].read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 200, "status for S's second request")
        h.eq(w.read_response(timeout=5 * h.SLOW).status, 200, "status for W")
        h.ok(clean_eof(conns["S"], 2 * h.SLOW), "S, idle after its response, was not closed")
        origin.gate("busy-K2").release()
        h.eq(conns["K2"].read_response(timeout=5 * h.SLOW).status, 200, "status for K2")

    @t.check("a CONNECT tunnel is not closed to make room")
    def _():
        # K2 and W idle, N's head begun: T takes W's place, idle longest
        tunnel = h.RawConn(proxy.port(), timeout=10)
        conns["T"] = tunnel
        tunnel.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"
                     % (origin.authority, origin.authority)).encode())
        h.eq(tunnel.read_head(timeout=5 * h.SLOW).status, 200, "status for T's CONNECT")
        h.ok(clean_eof(conns["W"], 2 * h.SLOW), "W, idle longest, was not closed")
        conns["K2"].send(b"GET /echo?begun=2 HTTP/1.1\r\n")
        y = h.RawConn(proxy.port(), timeout=10)
        conns["Y"] = y
        y.send(h.request("GET", "/echo?idle=y", "a.example"))
        h.ok(y.silent_for(1.0), "Y was answered with a tunnel and two heads begun open")
        tunnel.send(h.request("GET", "/echo?through=tunnel", origin.authority))
        h.eq(tunnel.read_response(timeout=5 * h.SLOW).status, 200, "status through the tunnel")


def churn_scenario(t, origin):
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    time.sleep(0.3)  # let the proxy see the start-up probe connection close
    conns = []
    t.defer(lambda: [c.close() for c in conns])

    @t.check("a limit reached again and again (each new client closing an idle one) is warned "
             "about once, not once per connection")
    def _():
        for i in range(8):
            c = h.RawConn(proxy.port(), timeout=10)
            conns.append(c)
            c.send(h.request("GET", "/echo?churn=%d" % i, "a.example"))
            h.eq(c.read_response(timeout=3 * h.SLOW).status, 200, "status for client %d" % i)
        proxy.wait_log(r"closed the idle keep-alive connection", count=6)
        warnings = [ln for ln in proxy.stderr_lines() if "max_connections (2) reached" in ln
                    and " warn " in ln]
        h.eq(len(warnings), 1, "warnings of the limit reached 7 times (%r)" % warnings)

    @t.check("a connection idle less than a second is not closed for a new client: the request it "
             "sends 0.2 s after its response is served, then the new client is")
    def _():
        for c in conns:
            c.close()
        del conns[:]
        time.sleep(0.3)  # let the proxy see them close
        a = h.RawConn(proxy.port(), timeout=10)
        b = h.RawConn(proxy.port(), timeout=10)
        n = h.RawConn(proxy.port(), timeout=10)
        conns.extend([a, b, n])
        a.send(h.request("GET", "/echo?hold=race-a", "a.example"))
        origin.gate("race-a").wait_reached(5 * h.SLOW)
        b.send(h.request("GET", "/echo?race=b1", "a.example"))
        h.eq(b.read_response(timeout=3 * h.SLOW).status, 200, "status for B's first request")
        n.send(h.request("GET", "/echo?race=n", "a.example"))
        time.sleep(0.2)
        b.send(h.request("GET", "/echo?race=b2", "a.example"))
        h.eq(b.read_response(timeout=3 * h.SLOW).status, 200, "status for B's next request")
        r = n.read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 200, "status for N, once B was idle a second")
        h.ok(clean_eof(b, 2 * h.SLOW), "B, idle longest, was not closed for N")
        origin.gate("race-a").release()
        h.eq(a.read_response(timeout=5 * h.SLOW).status, 200, "status for A")

    @t.check("a connection idle after a stray CRLF behind its request (RFC 9112 section 2.2) is "
             "closed to make room as any idle one is: empty lines begin no request")
    def _():
        for c in conns:
            c.close()
        del conns[:]
        time.sleep(0.3)  # let the proxy see them close
        a = h.RawConn(proxy.port(), timeout=10)
        b = h.RawConn(proxy.port(), timeout=10)
        conns.extend([a, b])
        a.send(h.request("GET", "/echo?hold=crlf-a", "a.example"))
        origin.gate("crlf-a").wait_reached(5 * h.SLOW)
        b.send(h.request("POST", "/echo?crlf=b", "a.example", body=b"ab") + b"\r\n")
        h.eq(b.read_response(timeout=3 * h.SLOW).status, 200, "status for B's request")
        n = h.RawConn(proxy.port(), timeout=10)
        conns.append(n)
        n.send(h.request("GET", "/echo?crlf=n", "a.example"))
        r = n.read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 200, "status for N, once B was idle a second")
        h.ok(clean_eof(b, 2 * h.SLOW), "B, idle after its stray CRLF, was not closed for N")
        origin.gate("crlf-a").release()
        h.eq(a.read_response(timeout=5 * h.SLOW).status, 200, "status for A")


h.run(scenario, __doc__)
