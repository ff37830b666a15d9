#!/usr/bin/env python3
"""Scenario: a request that asks to switch protocols (Upgrade, as a
WebSocket handshake does), through the sidecar and the forward proxy.

Client: raw sockets: a WebSocket-style GET (Upgrade: websocket, Connection:
Upgrade, Sec-WebSocket-Key), then bytes of the new protocol both ways.
Origin: a raw server. /ws/echo answers 101 with Upgrade, Connection and
Sec-WebSocket-Accept and, in the same write, its first bytes of the new
protocol; then it echoes what it reads in upper case and, at EOF, sends
"BYE" and closes. /ws/flaky/ answers its first try 503, the next 101 as
/ws/echo. /ws/refuse answers 200 (no switch) and serves on. /ws/bare
answers 101 without an Upgrade field. /ws/cut and /ws/end answer 101 and
their first bytes, then close (over TLS /ws/cut without a close_notify,
/ws/end with one). /head echoes the request head it got
as the body.
Must hold: the origin gets the Upgrade field byte-exact and this hop's own
"Connection: upgrade", Sec-WebSocket-Key byte-exact and Via; the client
gets the 101 with Upgrade, Connection: upgrade, Sec-WebSocket-Accept, Via
and Retry-Attempts: 1, then the origin's first bytes, then its echo of
every write, in order, and the half-close is passed on both ways; the
access log has one line with status 101, and the status page counts the
101s as successes beside the 2xx and 3xx; once the tunnel closes the
upstream connection is closed (retryproxy_connections{side="upstream"} back
to 0), and while it lasts it holds no place under max_upstream_connections
(1 here: a request beside an open one is served); a 503 before the switch is retried as any GET's (Retry-Attempts: 2,
two requests at the origin); an origin that does not switch answers as
usual and the client's connection serves the next request; a 101 without
an Upgrade field, or naming a protocol the request did not list (h2c for
websocket), is a 502, while one listed among several, in another case, is
taken; Upgrade is not passed on, nor a 101 accepted,
for an HTTP/1.0 request, one whose Connection lacks the upgrade option, or
one with a body; an h2c upgrade (HTTP/2 over cleartext, which the
proxy does not speak; RFC 9113 deprecates it) is not offered upstream:
Upgrade: h2c and HTTP2-Settings do not reach the origin, h2c is left out
of a list that names other protocols (several Upgrade fields keep their
order), and a 101 to h2c is a 502; the same switch works through the forward listener with
an absolute-form ws-style target, and inside an intercepted CONNECT to a
TLS origin (wss), where an origin's close without a close_notify reaches
the client without the proxy's (a cut stays a cut), and one with it with
the proxy's.
"""

import os
import re
import socket
import ssl

import harness as h
import origin as o
from rawserver import RawServer, read_request

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
admin: 127.0.0.1:@PORT2@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  max_upstream_connections: 1
defaults:
  retry:
    max_attempts: 3
    try_timeout: 5s
    initial_backoff: 50ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: ws
    match: { path_prefix: / }
"""

INTERCEPT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
limits:
  drain_timeout: 2s
"""

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
SWITCH = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          "Sec-WebSocket-Accept: %s\r\nX-Origin: yes\r\n\r\n" % ACCEPT).encode()
FIRST = b"server speaks first"


class UpgradeOrigin(RawServer):
    def __init__(self, tls=None):
        self.heads = []  # (target, raw head) in arrival order
        self.tries = {}
        self.tls = None
        if tls is not None:
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(*tls)
        super().__init__(conn_timeout=10)

    def heads_for(self, part):
        with self._lock:
            return [raw for target, raw in self.heads if part in target]

    def serve(self, conn, cid):
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        buf = b""
        while True:
            head_end = buf.find(b"\r\n\r\n")
            while head_end < 0:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                head_end = buf.find(b"\r\n\r\n")
            raw = buf[:head_end + 4]
            got = read_request(conn, buf)
            if got is None:
                return
            _, target, buf = got
            with self._lock:
                self.heads.append((target, raw))
                n = self.tries[target] = self.tries.get(target, 0) + 1
            if target.startswith("/ws/flaky/") and n == 1:
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                continue
            if target.startswith(("/ws/echo", "/ws/flaky/")):
                conn.sendall(SWITCH + FIRST)
                self.echo(conn, buf)
                return
            if target.startswith(("/ws/cut", "/ws/end")):
                # the new protocol's first bytes, then a close: /ws/end's
                # with a TLS close_notify, /ws/cut's without (a cut)
                conn.sendall(SWITCH + FIRST)
                if target.startswith("/ws/end") and isinstance(conn, ssl.SSLSocket):
                    conn = conn.unwrap()
                conn.shutdown(socket.SHUT_RDWR)
                return
            if target.startswith("/ws/bare"):
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n")
                return
            if target.startswith("/ws/other"):
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                             b"Connection: Upgrade\r\n\r\n")
                return
            body = raw if target.startswith("/head") else b"no switch"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    @staticmethod
    def echo(conn, buf):
        if buf:
            conn.sendall(buf.upper())
        while True:
            data = conn.recv(65536)
            if not data:
                conn.sendall(b"BYE")
                if not isinstance(conn, ssl.SSLSocket):
                    conn.shutdown(socket.SHUT_WR)
                return
            conn.sendall(data.upper())


def handshake(target, host, version="HTTP/1.1", connection="Upgrade", extra=(),
              upgrade="websocket"):
    fields = [("Upgrade", upgrade), ("Connection", connection),
              ("Sec-WebSocket-Key", KEY), ("Sec-WebSocket-Version", "13")] + list(extra)
    return h.request("GET", target, host, fields, version=version)


def head_fields(raw):
    """The (name, value) pairs of a raw head."""
    out = []
    for ln in raw.split(b"\r\n")[1:]:
        if ln:
            name, _, value = ln.partition(b":")
            out.append((name.decode("latin-1"), value.strip().decode("latin-1")))
    return out


def talk(c, half_close=True):
    """The new protocol both ways after a 101: the origin's first bytes, an
    echo of each write, then the half-close passed on each way."""
    h.eq(c.read_exact(len(FIRST)), FIRST, "the origin's first bytes behind the 101")
    for word in (b"hello", b"x" * 200000, b"again"):
        c.send(word)
        h.eq(c.read_exact(len(word)), word.upper(), "the echo of %d bytes" % len(word))
    if not half_close:
        return
    c.sock.shutdown(socket.SHUT_WR)
    h.eq(c.read_to_close(), b"BYE", "what the origin sent after the client's half-close")


def upstream_connections(proxy):
    body = h.curl("-s", "http://127.0.0.1:%d/metrics" % proxy.port(2)).body.decode()
    return h.metric(body, "retryproxy_connections", '{side="upstream"}')


def scenario(t):
    origin = UpgradeOrigin()
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    authority = "127.0.0.1:%d" % origin.port

    def check_switched(r, attempts):
        h.eq(r.status, 101, "status (%r)" % (r,))
        h.eq(r.header_all("Upgrade"), ["websocket"], "Upgrade to the client")
        h.eq(r.header_all("Connection"), ["upgrade"], "Connection to the client")
        h.eq(r.header("Sec-WebSocket-Accept"), ACCEPT, "Sec-WebSocket-Accept to the client")
        h.eq(r.header("X-Origin"), "yes", "the origin's own field")
        h.eq(r.header("Via"), "1.1 retryproxy", "Via to the client")
        h.eq(r.header("Retry-Attempts"), str(attempts), "Retry-Attempts")

    @t.check("sidecar: the switch goes through, then bytes both ways and the half-closes")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/echo?c=side", "app.example",
                             extra=[("Sec-WebSocket-Protocol", "chat, superchat")]))
            check_switched(c.read_head(), 1)
            talk(c)
        raw = origin.heads_for("c=side")
        h.eq(len(raw), 1, "requests at the origin")
        fields = head_fields(raw[0])
        names = [n.lower() for n, _ in fields]
        h.eq([v for n, v in fields if n == "Upgrade"], ["websocket"], "Upgrade at the origin")
        h.eq([v for n, v in fields if n.lower() == "connection"], ["upgrade"],
             "Connection at the origin")
        h.ok(("Sec-WebSocket-Key", KEY) in fields and
             ("Sec-WebSocket-Protocol", "chat, superchat") in fields,
             "the WebSocket fields byte-exact at the origin: %r" % fields)
        h.eq(names.count("via"), 1, "one Via at the origin (%r)" % fields)
        line = proxy.access_one("c=side")
        h.eq(h.access_fields(line).get("status"), "101", "access-log status (%s)" % line)
        # written when the switched connection closed: what it carried to
        # the client (the first bytes, the echoes and BYE) and from it
        h.eq((h.access_fields(line).get("bytes"), h.access_fields(line).get("bytes_in")),
             (str(len(FIRST) + 200010 + 3), "200010"),
             "the switched connection's bytes to and from the client (%s)" % line)
        h.wait_until(lambda: upstream_connections(proxy) == 0, 5 * h.SLOW,
                     "no upstream connection open once the tunnel closed")

    @t.check("bytes the client sends behind the handshake, before the 101, go on after it")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/echo?c=early", "app.example") + b"early")
            check_switched(c.read_head(), 1)
            h.eq(c.read_exact(len(FIRST) + 5), FIRST + b"EARLY", "the first bytes, then the echo")
            c.send(b"late")
            h.eq(c.read_exact(4), b"LATE", "the echo after")
            h.eq(proxy.access_for("c=early"), [], "access lines while the switched connection "
                 "is open (its line is written when it ends)")

    @t.check("a switched connection holds no place under max_upstream_connections (1)")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as ws:
            ws.send(handshake("/ws/echo?c=held", "app.example"))
            check_switched(ws.read_head(), 1)
            with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
                c.send(h.request("GET", "/head?c=beside-ws", "app.example"))
                r = c.read_response()
            h.eq(r.status, 200, "a request beside the open WebSocket (%r)" % r.body[:200])
            talk(ws)

    @t.check("a 503 before the switch is retried; the client then gets the 101")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/flaky/a", "app.example"))
            check_switched(c.read_head(), 2)
            talk(c)
        h.eq(len(origin.heads_for("/ws/flaky/a")), 2, "requests at the origin")

    @t.check("forward listener: an absolute-form target switches the same way")
    def _():
        with h.RawConn(proxy.port(1), timeout=10 * h.SLOW) as c:
            c.send(handshake("http://%s/ws/echo?c=fwd" % authority, authority))
            check_switched(c.read_head(), 1)
            talk(c)

    @t.check("an origin that does not switch answers as usual; the connection serves on")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/refuse", "app.example"))
            r = c.read_response()
            h.eq((r.status, r.body), (200, b"no switch"), "the answer without a switch")
            h.ok(r.header("Upgrade") is None, "no Upgrade to the client")
            c.send(h.request("GET", "/head?c=after-refuse", "app.example"))
            h.eq(c.read_response().status, 200, "the next request on the same connection")

    @t.check("a 101 without an Upgrade field, or to a protocol the request did not list, is a 502")
    def _():
        for path in ("/ws/bare", "/ws/other"):
            with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
                c.send(handshake(path, "app.example"))
                h.eq(c.read_response().status, 502, "status for %s" % path)

    @t.check("the request may list several protocols, in any case: the one chosen is among them")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/echo?c=list", "app.example", upgrade="h2c , WebSocket"))
            r = c.read_head()
            h.eq(r.status, 101, "status")
            talk(c)

    cases = [
        ("http10", dict(version="HTTP/1.0")),
        ("no-option", dict(connection="keep-alive")),
        ("body", dict(extra=[("Content-Length", "3")])),
    ]
    for name, kw in cases:
        @t.check("no switch offered upstream for a request %s" % name)
        def _(name=name, kw=kw):
            with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
                req = handshake("/head?c=%s" % name, "app.example", **kw)
                c.send(req + (b"abc" if name == "body" else b""))
                r = c.read_response()
            h.eq(r.status, 200, "status")
            fields = head_fields(origin.heads_for("c=%s" % name)[0])
            h.ok(all(n.lower() != "upgrade" for n, _ in fields),
                 "Upgrade reached the origin: %r" % fields)
            h.ok(all(v.lower() != "upgrade" for n, v in fields if n.lower() == "connection"),
                 "Connection: upgrade reached the origin: %r" % fields)
            h.ok(("Sec-WebSocket-Key", KEY) in fields, "the end-to-end fields still go")

    @t.check("an h2c upgrade is not offered upstream: the request goes as a plain GET, "
             "without Upgrade, Connection: upgrade or HTTP2-Settings")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/head?c=h2c-only", "app.example", upgrade="h2c",
                             connection="Upgrade, HTTP2-Settings",
                             extra=[("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")]))
            r = c.read_response()
            h.eq(r.status, 200, "status")
            c.send(h.request("GET", "/head?c=after-h2c", "app.example"))
            h.eq(c.read_response().status, 200, "the next request on the same connection")
        fields = head_fields(origin.heads_for("c=h2c-only")[0])
        names = [n.lower() for n, _ in fields]
        h.ok("upgrade" not in names and "http2-settings" not in names,
             "Upgrade or HTTP2-Settings reached the origin: %r" % fields)
        h.ok(all(v.lower() != "upgrade" for n, v in fields if n.lower() == "connection"),
             "Connection: upgrade reached the origin: %r" % fields)

    @t.check("h2c listed beside another protocol: only the other one is offered upstream")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/head?c=h2c-list", "app.example", upgrade="h2c, websocket"))
            h.eq(c.read_response().status, 200, "status")
        fields = head_fields(origin.heads_for("c=h2c-list")[0])
        h.eq([v for n, v in fields if n.lower() == "upgrade"], ["websocket"],
             "Upgrade at the origin")
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/echo?c=h2c-list-switch", "app.example",
                             upgrade="h2c, websocket"))
            h.eq(c.read_head().status, 101, "the switch to websocket")
            talk(c)

    @t.check("h2c in the first of several Upgrade fields: the protocols left keep their "
             "order of preference (the fields are not reordered)")
    def _():
        with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
            c.send(handshake("/head?c=h2c-order", "app.example", upgrade="h2c, websocket",
                             extra=[("Upgrade", "chat/2")]))
            h.eq(c.read_response().status, 200, "status")
        fields = head_fields(origin.heads_for("c=h2c-order")[0])
        h.eq([v for n, v in fields if n.lower() == "upgrade"], ["websocket", "chat/2"],
             "Upgrade fields at the origin, in order")

    @t.check("an origin that switches to h2c anyway: 502, nothing tunnelled")
    def _():
        for upgrade in ("h2c", "H2C, websocket"):
            with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
                c.send(handshake("/ws/other", "app.example", upgrade=upgrade))
                h.eq(c.read_head().status, 502, "status for Upgrade: %s" % upgrade)

    @t.check("several switched connections at once, each its own echo")
    def _():
        def one(i):
            with h.RawConn(proxy.port(0), timeout=10 * h.SLOW) as c:
                c.send(handshake("/ws/echo?c=many%d" % i, "app.example"))
                check_switched(c.read_head(), 1)
                talk(c)
            return "echoed"

        h.eq(h.in_threads(8, one, 30 * h.SLOW), ["echoed"] * 8, "each switched connection")

    @t.check("the status page counts a 101 that switched protocols as a success, with the "
             "2xx and 3xx: a route of WebSockets is not shown failing")
    def _():
        metrics = h.curl("-s", "http://127.0.0.1:%d/metrics" % proxy.port(2)).body.decode()
        codes = {int(c): int(v) for c, v in re.findall(
            r'^retryproxy_requests_total\{route="ws",code="(\d+)"\} (\d+)$', metrics, re.M)}
        h.ok(codes.get(101, 0) > 0 and sum(codes.values()) > codes[101],
             "the route has 101s and other answers: %r" % codes)
        ok = sum(v for c, v in codes.items() if c == 101 or 200 <= c < 400)
        page = h.curl("-s", "http://127.0.0.1:%d/?norefresh" % proxy.port(2)).body.decode()
        row = re.search(r'<tr data-route="ws">.*?</tr>', page, re.S)
        h.ok(row is not None, "a row for the route ws on the page")
        cell = re.search(r'data-key="success_rate"[^>]*title="(\d+) of (\d+) [^"]*">([^<]*)<',
                         row.group(0))
        h.eq(cell.groups(), (str(ok), str(sum(codes.values())),
                             "%.1f%%" % (100.0 * ok / sum(codes.values()))),
             "the route's success cell (succeeded, of all, rate)")

    certs = t.certs()
    local = t.local_ca()
    tls_origin = UpgradeOrigin(tls=(certs.server, certs.server_key))
    t.defer(tls_origin.stop)
    intercepting = t.proxy(INTERCEPT_CONFIG, TESTCA=certs.ca, LOCALCA=local)

    @t.check("an intercepted tunnel (wss): the switch goes through to a TLS origin")
    def _():
        tls = h.intercepted_tls(intercepting.port(), "localhost", tls_origin.port,
                                os.path.join(local, "ca.pem"), timeout=10 * h.SLOW)
        with h.RawConn.over(tls, timeout=10 * h.SLOW) as c:
            c.send(handshake("/ws/echo?c=wss", "localhost:%d" % tls_origin.port))
            check_switched(c.read_head(), 1)
            talk(c, half_close=False)
        h.eq(len(tls_origin.heads_for("c=wss")), 1, "requests at the TLS origin")
        line = intercepting.access_one("c=wss")
        h.eq(h.access_fields(line).get("status"), "101", "access-log status (%s)" % line)

    @t.check("an intercepted tunnel (wss): an origin's close without a TLS close_notify "
             "reaches the client as a cut, not as the proxy's close_notify; one with it, "
             "as the proxy's")
    def _():
        def switched(target):
            """A strict TLS client switched through the tunnel to target,
            the origin's first bytes read; the TLS socket and its RawConn."""
            tls = h.intercepted_tls(intercepting.port(), "localhost", tls_origin.port,
                                    os.path.join(local, "ca.pem"), strict=True,
                                    timeout=10 * h.SLOW)
            c = h.RawConn.over(tls, timeout=10 * h.SLOW)
            c.send(handshake(target, "localhost:%d" % tls_origin.port))
            check_switched(c.read_head(), 1)
            h.eq(c.read_exact(len(FIRST)), FIRST, "the origin's bytes before its end")
            return tls, c

        tls, conn = switched("/ws/cut?c=wss-cut")
        with conn as c:
            h.eq(bytes(c.buf), b"", "bytes after the origin's")
            try:
                end = tls.recv(65536)
            except ConnectionResetError:
                end = "reset"
            except ssl.SSLError as e:
                end = "unclean EOF" if o.unclean_tls_eof(e) else repr(e)
            h.ok(end in ("unclean EOF", "reset"),
                 "the end the client saw: %r (b'' is a close_notify: a clean end)" % (end,))
        tls, conn = switched("/ws/end?c=wss-end")
        with conn:
            h.eq(tls.recv(65536), b"", "the end after an origin's close_notify (the proxy's)")


if __name__ == "__main__":
    h.run(scenario, __doc__)
