#!/usr/bin/env python3
"""Scenario: CONNECT tunnels.

Client: curl -p -x (HTTP and HTTPS through a tunnel, downloads and uploads)
and raw sockets sending CONNECT, then bytes through the tunnel.
Origin: a plain HTTP origin and a TLS origin (test CA); some requests ask
the origin to close after answering.
Must hold: the proxy answers CONNECT with a 2xx without body framing
fields; bytes pass unchanged both ways (sha256 of a download and of an
upload; TLS end to end verifies with the test CA and SNI reaches the
origin as the client sent it); the proxy does not touch tunnelled requests
(no Via); the tunnel closes when the origin closes, when the client closes,
and after tunnel_idle_timeout of silence (a reload's new one, lowered or
raised, applies to tunnels already open, counted from the reload); when the origin resets it, the
client gets every byte sent before, then a reset (not a FIN, which would
make a cut stream look whole); a half-close passes through (a
client that sends, shuts its side and reads still gets the answer); CONNECT to a closed port gets a
502 with a one-line body; a tunnel's access line has one try, 200, and is
written when the tunnel ends (none while it is open), with bytes= what it
carried to the client, bytes_in= what it carried from it, duration_ms its
life, and note= why it ended when that was tunnel_idle_timeout, a reset or
the drain of SIGTERM (the line is never lost at exit); a tunnel the drain
cuts at drain_timeout ends with a reset each way, not a FIN; a
CONNECT framed with content (Content-Length: 5, or chunked) is a 400 and
opens no connection, since a CONNECT has none (RFC 9110 section 9.3.6) and
what follows its head is the tunnel's (Content-Length: 0 still tunnels).
"""

import hashlib
import json
import os
import socket
import struct
import threading
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  tunnel_idle_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""


def sha(b):
    return hashlib.sha256(b).hexdigest()


def open_tunnel(proxy, port, host="127.0.0.1"):
    c = h.RawConn(proxy.port(), timeout=10)
    authority = "%s:%d" % (host, port)
    c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    r = c.read_head()
    h.ok(200 <= r.status < 300, "CONNECT answered %d: %r" % (r.status, r.headers))
    # the proxy's own 2xx: dated (RFC 9110 section 6.6.1)
    h.ok((r.header("Date") or "").endswith(" GMT"), "the CONNECT 200's Date (%r)" % r.headers)
    return c, r


def scenario(t):
    certs = t.certs()
    plain = t.origin(name="plain")
    secure = t.origin(tls=(certs.server, certs.server_key), name="secure")
    proxy = t.proxy(CONFIG)

    @t.check("curl -p: 3 MiB download through the tunnel is byte-exact")
    def _():
        n = 3 << 20
        r = h.curl("-p", plain.url("/bytes/%d?t=down" % n), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(sha(r.body), o.pattern_sha256(n), "body sha256")

    @t.check("curl -p: 2 MiB upload through the tunnel is byte-exact, request untouched (no Via)")
    def _():
        body = os.urandom(2 << 20)
        path = os.path.join(t.tmp, "up.bin")
        with open(path, "wb") as f:
            f.write(body)
        r = h.curl("-p", "--data-binary", "@" + path, plain.url("/echo?t=up"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (len(body), sha(body)), "upload at the origin")
        names = [n.lower() for n, _ in seen["headers"]]
        h.ok("via" not in names, "a tunnelled request must reach the origin untouched: %r" % seen["headers"])

    @t.check("curl -p to the TLS origin: verifies with the test CA, SNI localhost arrives, body exact")
    def _():
        n = 1 << 20
        r = h.curl("-p", "--cacert", certs.ca, secure.url("/bytes/%d?t=tls" % n).replace("127.0.0.1", "localhost"),
                   proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(sha(r.body), o.pattern_sha256(n), "body sha256")
        seen = [q for q in secure.requests if q.query.get("t") == "tls"][0]
        conn = [c for c in secure.connections if c.id == seen.conn_id][0]
        h.eq(conn.sni, "localhost", "SNI at the origin")

    @t.check("raw CONNECT: 2xx without Content-Length or Transfer-Encoding")
    def _():
        c, r = open_tunnel(proxy, plain.port)
        c.close()
        h.eq(r.header("Content-Length"), None, "Content-Length on the CONNECT response")
        h.eq(r.header("Transfer-Encoding"), None, "Transfer-Encoding on the CONNECT response")

    @t.check("a tunnel's access line: one try, 200, nothing cancelled")
    def _():
        r = h.curl("-p", "-x", proxy.url, plain.url("/bytes/10?t=tunnel-line"))
        h.eq(r.status, 200, "status through the tunnel (%r)" % r)
        lines = [h.access_fields(ln) for ln in proxy.stderr_lines()]
        tunnels = [f for f in lines if f.get("method") == "CONNECT"]
        h.ok(tunnels, "no CONNECT access line")
        h.eq((tunnels[-1].get("attempts"), tunnels[-1].get("tries")), ("1", "200"),
             "the last CONNECT line's attempts and trail: %r" % tunnels[-1])

    @t.check("a tunnel's access line is written when it ends, with its life and bytes both "
             "ways: none while it is open")
    def _():
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(10)
        port = server.getsockname()[1]
        tag = "127.0.0.1:%d" % port

        def serve():
            conn, _ = server.accept()
            with conn:
                conn.recv(100)
                conn.sendall(o.pattern_bytes(1000))
                while conn.recv(65536):
                    pass

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        c, _ = open_tunnel(proxy, port)
        with c:
            c.send(b"hello")
            h.eq(c.read_exact(1000), o.pattern_bytes(1000), "what came through the tunnel")
            time.sleep(0.6)
            h.eq(proxy.access_for(tag), [], "access lines while the tunnel is open")
        th.join(5)
        server.close()
        f = h.access_fields(proxy.access_one(tag))
        h.eq((f.get("status"), f.get("bytes"), f.get("bytes_in")), ("200", "1000", "5"),
             "the closed tunnel's status, bytes to the client and from it (%r)" % f)
        h.ok(int(f.get("duration_ms", "0")) >= 600, "duration_ms covers the tunnel's life (%r)" % f)
        h.eq(f.get("note"), None, "a note on a tunnel both sides closed (%r)" % f)

    def quiet_server(accepted=None, timeout=20):
        """A server that takes one connection and holds it, reading, until
        its peer closes; its socket and port. accepted, an Event, is set
        when the connection is taken."""
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(timeout)

        def serve():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if accepted is not None:
                accepted.set()
            with conn:
                try:
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass

        threading.Thread(target=serve, daemon=True).start()
        return server, server.getsockname()[1]

    @t.check("a tunnel closed for tunnel_idle_timeout, or cut by a reset, logs why on its line")
    def _():
        server, port = quiet_server()
        c, _ = open_tunnel(proxy, port)
        with c:
            h.ok(c.closed_within(2 + 8), "idle tunnel still open 10s after the last byte")
        f = h.access_fields(proxy.access_one("127.0.0.1:%d" % port))
        server.close()
        h.eq(f.get("note"), "tunnel_idle_timeout", "the idle tunnel's note (%r)" % f)
        # the idle timer and the line count milliseconds apart: 1999 is 2 s
        h.ok(int(f.get("duration_ms", "0")) >= 1990, "the idle tunnel's duration (%r)" % f)
        server, port = quiet_server()
        c, _ = open_tunnel(proxy, port)
        c.send(b"abc")
        time.sleep(0.2)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        f = h.access_fields(proxy.access_one("127.0.0.1:%d" % port))
        server.close()
        h.eq((f.get("bytes_in"), f.get("note")), ("3", "client%20reset%20the%20tunnel"),
             "the reset tunnel's bytes from the client and note (%r)" % f)

    @t.check("a tunnel whose client resets before what was queued ahead of the tunnel (a "
             "pipelined response's tail) went out logs bytes=0, not a count wrapped below 0")
    def _():
        accepted = threading.Event()
        server, port = quiet_server(accepted, timeout=30)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", proxy.port()))
        authority = "127.0.0.1:%d" % port
        s.sendall(("GET http://127.0.0.1:%d/bytes/8000000?t=before-tunnel HTTP/1.1\r\n"
                   "Host: 127.0.0.1:%d\r\n\r\nCONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"
                   % (plain.port, plain.port, authority, authority)).encode())
        # read the response slowly until the proxy takes up the CONNECT
        # (its output of the response low enough) and the tunnel opens
        s.settimeout(10)
        deadline = time.monotonic() + 60 * h.SLOW
        while not accepted.is_set() and time.monotonic() < deadline:
            if not s.recv(4096):
                break
            time.sleep(0.0005)
        h.ok(accepted.is_set(), "the tunnel opened behind the response")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        lines = []
        h.wait_until(lambda: lines.extend(
            f for f in map(h.access_fields, proxy.access_lines()) if f.get("target") == authority)
            or lines, 10 * h.SLOW, "the tunnel's access line")
        f = lines[0]
        server.close()
        h.eq((f.get("method"), f.get("bytes")), ("CONNECT", "0"),
             "the tunnel's method and bytes to the client (%r)" % f)

    @t.check("the tunnel closes toward the client when the origin closes")
    def _():
        c, _ = open_tunnel(proxy, plain.port)
        with c:
            c.send(b"GET /bytes/10?t=originclose HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            r = c.read_response()
            h.eq((r.status, r.body), (200, o.pattern_bytes(10)), "response through the tunnel")
            h.ok(c.closed_within(5), "client side still open 5s after the origin closed")

    @t.check("the tunnel closes toward the origin when the client closes")
    def _():
        c, _ = open_tunnel(proxy, plain.port)
        c.send(b"GET /bytes/10?t=clientclose HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.read_response()
        h.eq(r.status, 200, "response through the tunnel")
        cid = [q for q in plain.requests if q.query.get("t") == "clientclose"][0].conn_id
        c.close()
        plain.wait_for(lambda org: any(x.id == cid and x.closed.is_set() for x in org.connections),
                       5, "the origin side of the tunnel to close")

    @t.check("a half-close passes through: the client shuts its side, the answer still arrives")
    def _():
        # a server that reads to EOF, then answers and closes: the shape
        # of protocols that mark the end of a request with a FIN
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(10)
        got = {}

        def serve():
            conn, _ = server.accept()
            with conn:
                data = b""
                while True:
                    piece = conn.recv(65536)
                    if not piece:
                        break
                    data += piece
                got["request"] = data
                time.sleep(0.05)
                conn.sendall(b"answer to " + data)

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        c, _ = open_tunnel(proxy, server.getsockname()[1])
        with c:
            c.send(b"hello")
            c.sock.shutdown(socket.SHUT_WR)
            h.ok(c.closed_within(5), "the tunnel did not close after the server's answer")
            h.eq(bytes(c.buf), b"answer to hello", "what came back")
        th.join(5)
        server.close()
        h.eq(got.get("request"), b"hello", "what the server read before its EOF")

    @t.check("an origin that resets the tunnel: the client gets every byte sent before, then "
             "a reset, not a clean end (a cut stream must not look whole)")
    def _():
        for pause, size in ((0.2, 1000), (0, 64 << 10)):
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            server.settimeout(10)

            def serve():
                conn, _ = server.accept()
                conn.recv(100)
                conn.sendall(o.pattern_bytes(size))
                time.sleep(pause)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

            th = threading.Thread(target=serve, daemon=True)
            th.start()
            authority = "127.0.0.1:%d" % server.getsockname()[1]
            c, _ = open_tunnel(proxy, server.getsockname()[1])
            with c:
                c.send(b"go")
                # a client that reads late: what was sent waits for it
                time.sleep(0.5)
                c.sock.settimeout(10)
                got = b""
                try:
                    while True:
                        data = c.sock.recv(65536)
                        if not data:
                            ending = "a clean end (FIN)"
                            break
                        got += data
                except ConnectionResetError:
                    ending = "reset"
                except socket.timeout:
                    ending = "nothing for 10s"
            th.join(5)
            server.close()
            h.eq((len(got), got == o.pattern_bytes(size)), (size, True),
                 "bytes through the tunnel before the reset (pause %.1fs)" % pause)
            h.eq(ending, "reset", "how the tunnel ended toward the client (pause %.1fs)" % pause)
            f = h.access_fields(proxy.access_one(authority))
            h.eq((f.get("bytes"), f.get("note")), (str(size), "upstream%20reset%20the%20tunnel"),
                 "the reset tunnel's bytes and note (pause %.1fs)" % pause)

    @t.check("an idle tunnel closes after tunnel_idle_timeout (2s), both sides")
    def _():
        before = {x.id for x in plain.connections}
        c, _ = open_tunnel(proxy, plain.port)
        with c:
            plain.wait_for(lambda org: len({x.id for x in org.connections} - before) == 1, 5,
                           "the proxy to connect to the origin")
            new = [x for x in plain.connections if x.id not in before][0]
            h.ok(c.closed_within(2 + 8), "idle tunnel still open 10s after the last byte")
            h.ok(new.closed.wait(5), "origin side of the idle tunnel still open")

    @t.check("a reload's tunnel_idle_timeout applies to tunnels already open, from the reload: "
             "lowered, an idle tunnel closes after the new one; raised, it outlives the old one")
    def _():
        p3 = t.proxy(CONFIG.replace("tunnel_idle_timeout: 2s", "tunnel_idle_timeout: 30s"))
        c, _ = open_tunnel(p3, plain.port)
        with c:
            p3.reload(p3.config_text.replace("tunnel_idle_timeout: 30s",
                                             "tunnel_idle_timeout: 1s"))
            h.ok(c.closed_within(1 + 5), "the tunnel open 6s after a reload lowered "
                 "tunnel_idle_timeout from 30s to 1s")
        f = h.access_fields(p3.access_one("127.0.0.1:%d" % plain.port))
        h.eq(f.get("note"), "tunnel_idle_timeout", "the line's note (%r)" % f)
        c, _ = open_tunnel(p3, plain.port)
        with c:
            p3.reload(p3.config_text.replace("tunnel_idle_timeout: 1s",
                                             "tunnel_idle_timeout: 30s"))
            h.ok(not c.closed_within(3), "the tunnel closed within 3s though a reload raised "
                 "tunnel_idle_timeout from 1s to 30s")
            c.send(b"GET /echo?t=after-raise HTTP/1.1\r\nHost: x\r\n\r\n")
            h.eq(c.read_head().status, 200, "the tunnel still carries a request")

    @t.check("CONNECT to a closed port: 502 with a one-line body")
    def _():
        port = h.closed_port()
        with h.RawConn(proxy.port()) as c:
            c.send(("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port)).encode())
            r = c.read_response()
        h.check_error_response(r, 502, ("refused", "connect", "unreachable"))

    @t.check("CONNECT with content (Content-Length: 5, or chunked): 400, no tunnel opened; "
             "Content-Length: 0 tunnels")
    def _():
        authority = "127.0.0.1:%d" % plain.port
        for framing, body in (("Content-Length: 5", b"hello"),
                              ("Transfer-Encoding: chunked", b"5\r\nhello\r\n0\r\n\r\n")):
            before = len(plain.connections)
            with h.RawConn(proxy.port()) as c:
                c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n\r\n"
                        % (authority, authority, framing)).encode() + body)
                r = c.read_response()
                h.check_error_response(r, 400, ("connect",))
                h.ok(c.closed_within(5), "connection still open after the 400")
            time.sleep(0.2)
            h.eq(len(plain.connections), before, "origin connections opened for " + framing)
        with h.RawConn(proxy.port()) as c:
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n"
                    % (authority, authority)).encode())
            r = c.read_head()
        h.eq(r.status, 200, "CONNECT with Content-Length: 0")

    @t.check("SIGTERM with a tunnel open: the drain cuts it at drain_timeout with a reset "
             "each way (a FIN would make a cut stream look whole), and its line is written "
             "before the exit")
    def _():
        p2 = t.proxy(CONFIG.replace("tunnel_idle_timeout: 2s", "tunnel_idle_timeout: 30s"))
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(20)
        port = server.getsockname()[1]
        ends = {}

        def how_it_ends(sock):
            sock.settimeout(10)
            try:
                while sock.recv(65536):
                    pass
                return "a clean end (FIN)"
            except ConnectionResetError:
                return "reset"
            except socket.timeout:
                return "nothing for 10s"

        def serve():
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"streaming...")
                ends["origin"] = how_it_ends(conn)

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        c, _ = open_tunnel(p2, port)
        with c:
            c.send(b"ping")
            h.eq(c.read_exact(12), b"streaming...", "the origin's bytes through the tunnel")
            p2.terminate()
            ends["client"] = how_it_ends(c.sock)
        th.join(10)
        t.stop_proxy(p2)
        server.close()
        h.eq((ends.get("client"), ends.get("origin")), ("reset", "reset"),
             "how the tunnel the drain cut ended toward the client and the origin")
        f = h.access_fields(p2.access_one("127.0.0.1:%d" % port))
        h.eq((f.get("bytes"), f.get("bytes_in"), f.get("note")), ("12", "4", "drain_timeout"),
             "the drained tunnel's bytes and note (%r)" % f)

h.run(scenario, __doc__)
