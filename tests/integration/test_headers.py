#!/usr/bin/env python3
"""Scenario: what happens to header fields on the way through.

Client: raw requests (forward absolute-form and sidecar origin-form) with
duplicate fields, odd name case, inner spaces, an obs-text byte, a Via from
an earlier proxy, and every hop-by-hop field: Connection naming two custom
fields (in two Connection lines, odd case), Keep-Alive, Proxy-Connection,
TE, Upgrade.
Origin: echoes the request it got; /respheaders answers with duplicates,
odd case, obs-text, its own Via, and hop-by-hop fields (Keep-Alive and a
field named by Connection).
Must hold: hop-by-hop fields and the fields Connection names are gone in
both directions; every other field arrives byte-exact (name case and value)
in the original order, duplicates kept, nothing added except Via
("1.1 retryproxy" after any earlier Via; "1.0 retryproxy" for a message
that came in as HTTP/1.0, RFC 9110 section 7.6.3) and, on responses, Retry-Attempts
(replacing one the upstream sent), and upstream TE: trailers with
Connection: TE when an HTTP/1.1 client's TE lists trailers (RFC 9110
section 10.1.4: the proxy passes trailer sections on to such a client);
in sidecar mode the upstream gets exactly one Host: <upstream authority>;
a Content-Length of one number repeated ("5, 5", or two identical
fields) goes on as one "Content-Length: 5", both ways (RFC 9110 section
8.6: it must not be forwarded as it came); Proxy-Authorization (curl -x
user:secret@...) never reaches the origin; an absolute-form target with
no path goes as "/" and is routed as "/" (a path_prefix: / route), and an
OPTIONS to it goes as "OPTIONS *" (RFC 9112 section 3.2.4); a TRACE or
OPTIONS with Max-Forwards: 0 is answered by the proxy (TRACE: the request
echoed as message/http, without its Authorization or Cookie; OPTIONS:
Allow) and never reaches the origin, and with Max-Forwards: 5 it reaches
the origin with Max-Forwards: 4 (RFC 9110 section 7.6.2); two Max-Forwards
lines (0 and 5, or 5 and 0) are a list, not a number: the request reaches
the origin with both as sent; a response without Date gets one from the
proxy (RFC 9110 section 6.6.1: a recipient with a clock that forwards it
must), one with a Date keeps it alone and unchanged, and the proxy's own
answers (a 400, a TRACE echo) carry a Date too. A chunked message's
trailer section goes on without the fields its head's Connection names,
the hop-by-hop ones, and
those a trailer must not carry (framing, Trailer, Host, authentication,
request modifiers, content format, Cache-Control, Retry-Attempts), both
ways (a request kept for a retry, a response kept while a retry is made,
too), the rest byte-exact in order, also when it arrives in pieces; the
connection stays in step after it. A trailer field line may be as long as
a header line: only the section's size is bounded, by max_header_bytes;
with that limit over the proxy's read buffers (300 KiB), a section of
exactly that size goes on both ways without stalling, and with it one byte
under the upstream read buffer (256 KiB - 1), a response's section of exactly
that size too.
"""

import email.utils
import json
import socket
import threading
import time

import harness as h
import origin as o
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
routes:
  - name: replayed
    match: { path_prefix: /echo/replayed }
    retry:
      max_attempts: 2
  - name: root
    match: { path_prefix: / }
"""

# (name, value) pairs that must pass through untouched, in this order.
END_TO_END = [
    ("X-First", "1"),
    ("x-custom", "a"),
    ("X-Custom", "b"),
    ("X-MiXeD-CaSe", "Value  With   Spaces"),
    ("X-Obs-Text", "caf\xe9"),
    ("Accept", "*/*"),
    ("X-Last", "z"),
]

HOP_BY_HOP = [
    ("Connection", "keep-alive, X-Drop-Me"),
    ("X-Drop-Me", "secret"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"),
    ("Proxy-Authorization", "Basic dXNlcjpzZWNyZXQ="),
    ("TE", "trailers"),
    ("Upgrade", "websocket"),
    ("connection", "x-OTHER-drop"),
    ("X-Other-Drop", "also secret"),
]


def request_fields():
    """End-to-end and hop-by-hop fields interleaved, plus an earlier Via."""
    e, hb = END_TO_END, HOP_BY_HOP
    return [e[0], hb[0], e[1], hb[1], hb[2], e[2], hb[3], ("Via", "1.0 client-side-proxy"),
            e[3], hb[4], hb[5], e[4], hb[6], hb[7], e[5], hb[8], e[6]]


# a trailer section's fields: those that must not go on, interleaved with
# those that must (the odd-case X-Checksum and Server-Timing)
TRAILER_DROPPED = [
    ("X-Hop-T", "named by Connection"), ("Connection", "close"), ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"), ("TE", "trailers"), ("Upgrade", "h2c"),
    ("Content-Length", "99"), ("Transfer-Encoding", "gzip"), ("Trailer", "X-Other"),
    ("Host", "evil.example"), ("Authorization", "Basic eA=="), ("Proxy-Authorization", "Basic eA=="),
    ("WWW-Authenticate", "Basic"), ("Proxy-Authenticate", "Basic"), ("Expect", "100-continue"),
    ("Max-Forwards", "3"), ("Range", "bytes=0-1"), ("Content-Type", "text/evil"),
    ("Content-Encoding", "gzip"), ("Content-Range", "bytes 0-1/2"),
    ("Cache-Control", "no-store"), ("Retry-Attempts", "9"), ("x-hop-t2", "also named"),
]
TRAILER_KEPT = [("x-CHECKSUM", "1"), ("Server-Timing", "db;dur=53")]


def trailer_lines():
    """The trailer section's lines (bytes): kept and dropped interleaved."""
    d, k = TRAILER_DROPPED, TRAILER_KEPT
    fields = d[:10] + [k[0]] + d[10:] + [k[1]]
    return b"".join(b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in fields)


KEPT_LINES = b"".join(b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in TRAILER_KEPT)


def via_list(headers):
    vals = [v for n, v in headers if n.lower() == "via"]
    return [p.strip() for v in vals for p in v.split(",")]


def check_upstream_fields(seen_headers):
    names_gone = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                  "upgrade", "x-drop-me", "x-other-drop"}
    for n, v in seen_headers:
        if n.lower() == "connection":
            # The proxy may manage its own upstream connection, but must not
            # pass the client's connection options on; it names its own TE.
            h.ok(v.lower() in ("keep-alive", "close", "te"), "upstream Connection: %r" % v)
        elif n.lower() == "te":
            # the client's TE: trailers asked again on the proxy's own hop
            h.eq((n, v), ("TE", "trailers"), "the proxy's own TE")
        else:
            h.ok(n.lower() not in names_gone, "hop-by-hop field %r reached the origin: %r" % (n, seen_headers))
    rest = [(n, v) for n, v in seen_headers if n.lower() not in ("host", "via", "connection", "te")]
    h.eq(rest, END_TO_END, "end-to-end fields at the origin (order, case, values)")
    h.eq(via_list(seen_headers), ["1.0 client-side-proxy", "1.1 retryproxy"], "Via at the origin")


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    auth = origin.authority

    @t.check("forward: hop-by-hop gone upstream, other fields byte-exact in order, Via appended")
    def _():
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", origin.url("/echo?fwd-headers"), auth, request_fields()))
            r = c.read_response()
        h.eq(r.status, 200, "status (%r)" % r)
        seen = origin.requests[-1]
        h.eq(seen.target, "/echo?fwd-headers", "target")
        h.eq(seen.header_all("Host"), [auth], "Host at the origin")
        check_upstream_fields(seen.headers)

    @t.check("sidecar: same field handling, and the upstream gets exactly Host: <upstream authority>")
    def _():
        with h.RawConn(proxy.port(1)) as c:
            c.send(h.request("GET", "/echo?sidecar-headers", "app.example:8080", request_fields()))
            r = c.read_response()
        h.eq(r.status, 200, "status (%r)" % r)
        seen = origin.requests[-1]
        h.eq(seen.target, "/echo?sidecar-headers", "target")
        h.eq(seen.header_all("Host"), [auth], "Host at the origin")
        check_upstream_fields(seen.headers)

    @t.check("TE: trailers from an HTTP/1.1 client is asked again upstream with Connection: TE; "
             "not for HTTP/1.0, not for other codings, nothing without it")
    def _():
        cases = [("HTTP/1.1", [("TE", "trailers")], True),
                 ("HTTP/1.1", [("te", "gzip;q=0.5, TRAILERS")], True),
                 ("HTTP/1.1", [("TE", "gzip, deflate")], False),
                 ("HTTP/1.1", [], False),
                 ("HTTP/1.0", [("TE", "trailers")], False)]
        for version, fields, asked in cases:
            with h.RawConn(proxy.port(1)) as c:
                c.send(h.request("GET", "/echo?te", "app.example", fields, version=version))
                r = c.read_response()
            h.eq(r.status, 200, "status (%r)" % r)
            seen = origin.requests[-1].headers
            te = [(n, v) for n, v in seen if n.lower() in ("te", "connection")]
            want = [("TE", "trailers"), ("Connection", "TE")] if asked else []
            h.eq(te, want, "TE and Connection at the origin for %s %r" % (version, fields))

    @t.check("response: hop-by-hop gone, other fields byte-exact in order, Via appended, Retry-Attempts")
    def _():
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", origin.url("/respheaders"), auth))
            r = c.read_response()
        h.eq((r.status, r.body), (200, b"ok\n"), "status and body")
        for n, v in r.headers:
            if n.lower() == "connection":
                h.ok("x-hop-resp" not in v.lower(), "the origin's Connection options reached the client: %r" % v)
            h.ok(n.lower() not in ("x-hop-resp", "keep-alive"),
                 "hop-by-hop response field %r reached the client: %r" % (n, r.headers))
        rest = [(n, v) for n, v in r.headers
                if n.lower() not in ("via", "retry-attempts", "connection", "date")]
        expected = [(n, v) for n, v in o.RESPONSE_HEADERS
                    if n.lower() not in ("via", "connection", "x-hop-resp", "keep-alive")]
        expected.append(("Content-Length", "3"))
        h.eq(rest, expected, "end-to-end response fields at the client (order, case, values)")
        h.eq(via_list(r.headers), ["1.1 origin-via", "1.1 retryproxy"], "Via at the client")
        h.eq(r.header_all("Retry-Attempts"), ["1"], "Retry-Attempts")

    @t.check("an upstream's own Retry-Attempts (a proxy of its own) is replaced by this proxy's")
    def _():
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", origin.url("/status/200?hdr=Retry-Attempts:9"), auth))
            r = c.read_response()
        h.eq((r.status, r.header_all("Retry-Attempts")), (200, ["1"]), "status, Retry-Attempts")

    @t.check("response raw bytes: an obs-text byte in a value arrives unchanged")
    def _():
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", origin.url("/respheaders"), auth))
            r = c.read_response()
        h.ok(b"\r\nX-Obs-Text: caf\xe9\r\n" in r.raw_head, "raw head: %r" % r.raw_head)

    @t.check("curl through the proxy: its Proxy-Connection does not reach the origin")
    def _():
        r = h.curl("-H", "Proxy-Connection: keep-alive", origin.url("/echo?curl"), proxy=proxy.url)
        h.eq(r.status, 200, "status (%r)" % r)
        names = [n.lower() for n, _ in json.loads(r.body)["headers"]]
        h.ok("proxy-connection" not in names, "Proxy-Connection at the origin: %r" % names)

    @t.check("curl -x user:secret@proxy: Proxy-Authorization does not reach the origin")
    def _():
        url = "http://user:secret@127.0.0.1:%d" % proxy.port(0)
        r = h.curl("-x", url, origin.url("/echo?proxy-auth"))
        h.eq(r.status, 200, "status (%r)" % r)
        names = [n.lower() for n, _ in json.loads(r.body)["headers"]]
        h.ok("proxy-authorization" not in names, "Proxy-Authorization at the origin: %r" % names)

    def exact(target):
        """Access-log entries whose target is exactly target."""
        return [e for e in proxy.access_lines() if h.access_fields(e).get("target") == target]

    @t.check("a target with no path goes as / and is routed as /; OPTIONS to it goes as *")
    def _():
        target = "http://%s" % auth
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", target, auth))
            r = c.read_response()
            h.wait_until(lambda: exact(target), 5 * h.SLOW, "the access-log entry of GET " + target)
            h.eq(h.access_fields(exact(target)[0]).get("route"), "root", "route of GET " + target)
            before = len(origin.requests)
            c.send(h.request("OPTIONS", target, auth))
            r = c.read_response()
        h.ok(r.status > 0, "OPTIONS answered")
        seen = [q for q in origin.requests[before:] if q.method == "OPTIONS"]
        h.eq([q.target for q in seen], ["*"], "OPTIONS targets at the origin")

    @t.check("Max-Forwards: 0 on TRACE and OPTIONS is answered here; above 0 it goes on decremented")
    def _():
        before = len(origin.requests)
        fields = [("Max-Forwards", "0"), ("X-Trace-Me", "1"), ("Authorization", "Basic c2VjcmV0"),
                  ("Cookie", "session=secret")]
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("TRACE", origin.url("/echo?t=mf0"), auth, fields))
            r = c.read_response()
        h.eq(r.status, 200, "TRACE status")
        h.eq(r.header("Content-Type"), "message/http", "TRACE Content-Type")
        h.ok(r.body.startswith(b"TRACE " + origin.url("/echo?t=mf0").encode() + b" HTTP/1.1\r\n"),
             "TRACE echo: %r" % r.body)
        h.ok(b"X-Trace-Me: 1\r\n" in r.body and b"secret" not in r.body.lower()
             and b"c2vjcmv0" not in r.body.lower(), "TRACE echo fields: %r" % r.body)
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("OPTIONS", origin.url("/echo?t=mf0"), auth, [("Max-Forwards", "0")]))
            r = c.read_response()
        h.eq(r.status, 200, "OPTIONS status")
        h.ok("OPTIONS" in (r.header("Allow") or ""), "OPTIONS Allow: %r" % r.header("Allow"))
        h.eq([q for q in origin.requests[before:] if q.query.get("t") == "mf0"], [],
             "requests at the origin")
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("OPTIONS", origin.url("/echo?t=mf5"), auth, [("Max-Forwards", "5")]))
            r = c.read_response()
        seen = [q for q in origin.requests[before:] if q.query.get("t") == "mf5"]
        h.eq([q.header_all("Max-Forwards") for q in seen], [["4"]], "Max-Forwards at the origin")

    @t.check("two Max-Forwards fields are a list, not a number: neither answered here nor "
             "decremented, they go on as sent")
    def _():
        before = len(origin.requests)
        for tag, values in (("mf-0-5", ("0", "5")), ("mf-5-0", ("5", "0"))):
            fields = [("Max-Forwards", v) for v in values]
            with h.RawConn(proxy.port(0)) as c:
                c.send(h.request("TRACE", origin.url("/echo?t=" + tag), auth, fields))
                r = c.read_response()
            h.ok(r.header("Content-Type") != "message/http", "%s answered by the proxy" % tag)
            seen = [q for q in origin.requests[before:] if q.query.get("t") == tag]
            h.eq([q.header_all("Max-Forwards") for q in seen], [list(values)],
                 "%s: Max-Forwards at the origin" % tag)

    @t.check("a Content-Length list of one number repeated goes on as one Content-Length")
    def _():
        with h.RawConn(proxy.port(1)) as c:
            c.send(b"POST /echo?t=cl-list HTTP/1.1\r\nHost: a.example\r\n"
                   b"Content-Length: 5, 5\r\n\r\nhello")
            r = c.read_response()
        h.eq(r.status, 200, "status")
        seen = json.loads(r.body)
        lengths = [v for n, v in seen["headers"] if n.lower() == "content-length"]
        h.eq((lengths, seen["body_len"]), (["5"], 5), "Content-Length fields and body at the origin")
        # and on a response: a raw origin sends a list and a repeat
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def answer():
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n"
                             b"Content-Length: 5\r\nConnection: close\r\n\r\nhello")

        th = threading.Thread(target=answer, daemon=True)
        th.start()
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", "http://127.0.0.1:%d/cl-list" % server.getsockname()[1],
                             "127.0.0.1:%d" % server.getsockname()[1]))
            r = c.read_response()
        th.join(5)
        server.close()
        h.eq(r.status, 200, "status")
        h.eq([v for n, v in r.headers if n.lower() == "content-length"], ["5"],
             "Content-Length fields at the client")
        h.eq(r.body, b"hello", "body")

    @t.check("Via names the version each message came in: 1.0 from an HTTP/1.0 client, "
             "and from an HTTP/1.0 upstream")
    def _():
        with h.RawConn(proxy.port(1)) as c:
            c.send(h.request("GET", "/echo?via10", "app.example", version="HTTP/1.0"))
            r = c.read_response()
        h.eq(r.status, 200, "status (%r)" % r)
        h.eq(via_list(origin.requests[-1].headers), ["1.0 retryproxy"],
             "Via at the origin for an HTTP/1.0 request")
        h.eq(via_list(r.headers), ["1.1 retryproxy"], "Via at the client (the origin's HTTP/1.1)")

        def http10(conn, server):
            rawserver.read_head(conn)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

        old = rawserver.RawServer(http10)
        t.defer(old.stop)
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", "http://127.0.0.1:%d/via10" % old.port,
                             "127.0.0.1:%d" % old.port))
            r = c.read_response()
        h.eq((r.status, r.body), (200, b"ok"), "status and body")
        h.eq(via_list(r.headers), ["1.0 retryproxy"], "Via at the client for an HTTP/1.0 response")

    @t.check("Transfer-Encoding on a HEAD's or a 304's answer (no body) reaches an HTTP/1.1 "
             "client as GET would have it, not an HTTP/1.0 one; never on a 204, nor from an "
             "HTTP/1.0 upstream, whose connection is then not reused")
    def _():
        def bodiless(conn, server):
            while True:
                head = rawserver.read_head(conn)
                if not head:
                    return
                start = head.split(b"\r\n", 1)[0]
                if b"/te-204" in start:
                    conn.sendall(b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n")
                elif b"/te-10-head" in start:
                    # Transfer-Encoding from HTTP/1.0: faulty framing
                    conn.sendall(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                 b"Connection: keep-alive\r\n\r\n")
                elif b"/te-304" in start:
                    conn.sendall(b"HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")

        origin_te = rawserver.RawServer(bodiless)
        t.defer(origin_te.stop)
        where = "127.0.0.1:%d" % origin_te.port
        for method, path, version, want_status, want_te in (
                ("HEAD", "/te-head", "HTTP/1.1", 200, ["chunked"]),
                ("GET", "/te-304", "HTTP/1.1", 304, ["chunked"]),
                ("HEAD", "/te-head", "HTTP/1.0", 200, []),
                ("GET", "/te-304", "HTTP/1.0", 304, []),
                ("GET", "/te-204", "HTTP/1.1", 204, []),
                ("HEAD", "/te-10-head", "HTTP/1.1", 200, [])):
            with h.RawConn(proxy.port(0)) as c:
                c.send(h.request(method, "http://%s%s" % (where, path), where, version=version))
                r = c.read_response(method=method)
                tag = "%s %s %s" % (method, path, version)
                h.eq(r.status, want_status, "%s: status" % tag)
                h.eq(r.header_all("Transfer-Encoding"), want_te, "%s: Transfer-Encoding" % tag)
                h.eq(r.body, b"", "%s: no body" % tag)
                if version == "HTTP/1.1":
                    # the connection is still good for a next request
                    before = origin_te.connections
                    c.send(h.request("HEAD", "http://%s/te-head" % where, where))
                    h.eq(c.read_response(method="HEAD").status, 200, "%s: next request" % tag)
                    if path == "/te-10-head":
                        h.eq(origin_te.connections, before + 1,
                             "%s: the upstream connection was not reused" % tag)

    @t.check("a chunked response's trailer section: the fields it must not carry are dropped, "
             "the rest byte-exact, whole or in pieces; the connection stays in step")
    def _():
        kept = []

        def serve(conn, _server):
            buf = b""
            while True:
                got = rawserver.read_request(conn, buf)
                if got is None:
                    return
                _method, target, buf = got
                status = b"200 OK"
                if "kept" in target:
                    # a 503 kept while a retry is made, which then fails:
                    # the client gets the kept one
                    kept.append(target)
                    if len(kept) > 1:
                        return
                    status = b"503 Service Unavailable"
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: X-Hop-T, keep-alive,x-HOP-t2\r\n"
                             b"Trailer: X-Checksum\r\n\r\n5\r\nhello\r\n")
                end = b"0\r\n" + trailer_lines() + b"\r\n"
                if "split" in target:
                    for i in range(0, len(end), 7):
                        conn.sendall(end[i:i + 7])
                        time.sleep(0.01)
                elif "dropped" in target:
                    conn.sendall(b"0\r\nX-Hop-T: a\r\nTrailer: b\r\n\r\n")
                else:
                    conn.sendall(end)

        origin_t = rawserver.RawServer(serve)
        t.defer(origin_t.stop)
        authority = "127.0.0.1:%d" % origin_t.port
        with h.RawConn(proxy.port(0)) as c:
            for path, want in (("/whole", KEPT_LINES), ("/split", KEPT_LINES), ("/dropped", b""),
                               ("/echo/replayed/kept", KEPT_LINES)):
                c.send(h.request("GET", "http://%s%s" % (authority, path), authority))
                head = c.read_until(b"\r\n\r\n")
                status = b"503" if "kept" in path else b"200"
                h.ok(head.startswith(b"HTTP/1.1 %s " % status) and b"\r\nTrailer: X-Checksum\r\n" in head,
                     "%s: head %r" % (path, head))
                h.eq(c.read_until(b"\r\n\r\n"), b"5\r\nhello\r\n0\r\n" + want + b"\r\n",
                     "%s: the body and trailer section as the client got them" % path)
            h.eq(bytes(c.buf), b"", "bytes after the last response")
        h.eq(len(kept), 2, "tries of the kept response")

    @t.check("a chunked request's trailer section: the fields it must not carry are dropped "
             "before the origin, the rest byte-exact, streamed or kept for a retry")
    def _():
        for path in ("/echo?t=req-trailer", "/echo/replayed?t=req-trailer"):
            with h.RawConn(proxy.port(1)) as c:
                c.send(b"PUT %s HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n"
                       b"Connection: X-Hop-T, x-hop-T2\r\n\r\n5\r\nhello\r\n0\r\n"
                       % path.encode() + trailer_lines() + b"\r\n")
                r = c.read_response()
            h.eq(r.status, 200, "%s: status" % path)
            seen = json.loads(r.body)
            h.eq((seen["body_len"], seen["trailers"]), (5, [list(f) for f in TRAILER_KEPT]),
                 "%s: body length and trailer fields at the origin" % path)

    @t.check("a trailer field line as long as a header line (5 KiB) goes on both ways; a trailer "
             "section over max_header_bytes is refused")
    def _():
        long_line = b"X-Long: " + b"a" * 5000 + b"\r\n"

        def serve(conn, _server):
            if rawserver.read_request(conn) is not None:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n" + long_line + b"\r\n")

        origin_t = rawserver.RawServer(serve)
        t.defer(origin_t.stop)
        authority = "127.0.0.1:%d" % origin_t.port
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", "http://%s/long" % authority, authority,
                             [("X-Long-Head", "a" * 5000)]))
            c.read_until(b"\r\n\r\n")
            h.eq(c.read_until(b"\r\n\r\n"), b"5\r\nhello\r\n0\r\n" + long_line + b"\r\n",
                 "the body and trailer section as the client got them")
        with h.RawConn(proxy.port(1)) as c:
            c.send(b"PUT /echo?t=long-trailer HTTP/1.1\r\nHost: a.example\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" + long_line + b"\r\n")
            r = c.read_response()
        h.eq(r.status, 200, "status")
        h.eq(json.loads(r.body)["trailers"], [["X-Long", "a" * 5000]], "trailer fields at the origin")
        with h.RawConn(proxy.port(1)) as c:
            c.send(b"PUT /echo?t=huge-trailer HTTP/1.1\r\nHost: a.example\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
                   + long_line * 14 + b"\r\n")
            r = c.read_response()
        h.eq(r.status, 400, "status for a trailer section of %d bytes" % (len(long_line) * 14))

    line = b"X-T: " + b"a" * 1000 + b"\r\n"

    def trailer_section(limit):
        """A trailer section of exactly limit bytes, its final empty line not counted."""
        section = line * (limit // len(line))
        section += b"X-P: " + b"b" * (limit - len(section) - 7) + b"\r\n"
        h.eq(len(section), limit, "the trailer section's size")
        return section

    def with_header_limit(limit):
        return CONFIG.replace("  drain_timeout: 2s\n",
                              "  drain_timeout: 2s\n  max_header_bytes: %d\n" % limit)

    def response_trailer_reaches_client(limit, path):
        """A proxy with max_header_bytes limit relays a response whose trailer
        section is exactly that long, whole, without stalling."""
        section = trailer_section(limit)

        def serve(conn, _server):
            if rawserver.read_request(conn) is not None:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n" + section + b"\r\n")

        origin_t = rawserver.RawServer(serve)
        t.defer(origin_t.stop)
        limited = t.proxy(with_header_limit(limit), ORIGIN=origin_t.port)
        with h.RawConn(limited.port(1)) as c:
            c.send(h.request("GET", path, "a.example"))
            c.read_until(b"\r\n\r\n")
            h.eq(c.read_until(b"0\r\n"), b"5\r\nhello\r\n0\r\n", "the body")
            got = c.read_until(b"\r\n\r\n", timeout=5 * h.SLOW)
            h.eq(len(got), len(section) + 2, "the trailer section's bytes at the client")

    @t.check("with max_header_bytes over the read buffers (300 KiB), a trailer section of "
             "exactly that size goes on both ways, not stalled behind its final empty line")
    def _():
        limit = 300 * 1024
        response_trailer_reaches_client(limit, "/big-trailer")
        big_echo = t.proxy(with_header_limit(limit), ORIGIN=origin.port)
        with h.RawConn(big_echo.port(1)) as c:
            c.send(b"PUT /echo?t=big-trailer HTTP/1.1\r\nHost: a.example\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
                   + trailer_section(limit) + b"\r\n")
            r = c.read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 200, "status of a request with a trailer section of 300 KiB")
        h.eq(len(json.loads(r.body)["trailers"]), limit // len(line) + 1,
             "trailer fields at the origin")

    @t.check("with max_header_bytes one byte under the upstream read buffer (256 KiB - 1), a "
             "response's trailer section of exactly that size is not stalled")
    def _():
        # the upstream input takes the larger of its read buffer and
        # max_header_bytes + 2 (a section held whole with its final CRLF)
        response_trailer_reaches_client(256 * 1024 - 1, "/edge-trailer")

    @t.check("Date: added to a response that has none (RFC 9110 section 6.6.1), an upstream's kept, "
             "and on the proxy's own answers")
    def _():
        def imf_fixdate_near_now(value, what):
            h.ok(value is not None and len(value) == 29 and value.endswith(" GMT"),
                 "%s: Date %r is not an IMF-fixdate" % (what, value))
            when = email.utils.parsedate_to_datetime(value).timestamp()
            h.ok(abs(when - time.time()) < 5, "%s: Date %r is not now" % (what, value))

        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", origin.url("/respheaders"), auth))
            r = c.read_response()
        h.eq(r.status, 200, "status")
        h.eq(len(r.header_all("Date")), 1, "Date fields on a response without one (%r)" % r.headers)
        imf_fixdate_near_now(r.header("Date"), "forwarded response")

        old_date = "Sun, 06 Nov 1994 08:49:37 GMT"

        def dated(conn, server):
            rawserver.read_head(conn)
            conn.sendall(b"HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Length: 2\r\n\r\nok"
                         % old_date.encode())

        up = rawserver.RawServer(dated)
        t.defer(up.stop)
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("GET", "http://127.0.0.1:%d/dated" % up.port, "127.0.0.1:%d" % up.port))
            r = c.read_response()
        h.eq((r.status, r.header_all("Date")), (200, [old_date]), "status, the upstream's Date")

        with h.RawConn(proxy.port(1)) as c:
            c.send(b"GET /x HTTP/1.1\r\n\r\n")
            r = c.read_response()
        h.eq(r.status, 400, "status without Host")
        imf_fixdate_near_now(r.header("Date"), "the proxy's 400")
        with h.RawConn(proxy.port(1)) as c:
            c.send(h.request("TRACE", "/x", "app.example", [("Max-Forwards", "0")]))
            r = c.read_response()
        h.eq(r.status, 200, "TRACE status")
        imf_fixdate_near_now(r.header("Date"), "the proxy's TRACE answer")


h.run(scenario, __doc__)
