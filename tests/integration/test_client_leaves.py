#!/usr/bin/env python3
"""Scenario: the account (access log and metrics) of a client that leaves
before its request has arrived whole.

Client: raw sockets to a sidecar listener: one sends part of a request
head (its request line whole, or cut inside it) and then closes (a FIN,
after which it still reads); one sends part of a head and resets; one
sends nothing, or only a stray CRLF, and closes; one sends a PUT (its body
kept to be re-sent) or a POST (its body streamed to its try) with 100 of
its 1000 body bytes and closes; one closes after a whole POST, while the
origin takes 1 s to answer.
Origin: the test origin (echo, /delay/1); a blackhole port (a full accept
queue) for the second listener.
Proxy: client_timeout 10s (no timeout ends anything here), max_attempts 2.
Must hold: a head cut by the client's FIN gets a 400 (Connection: close)
and an access line as a head cut by client_timeout gets its 408: status
400, the method and target of its request line (`-` when that line was
not whole), note "client closed the connection during the request head",
duration_ms from the head's first byte; the proxy closes the connection
once the 400 is written (not after lingering for input that cannot come);
it counts in
retryproxy_requests_total{route="-",code="400"} as the proxy's other 400s
do, and nothing reaches the origin (before, such a client had no access
line and counted nowhere, where nginx logs a 400). A head cut by a reset
gets its line too, with status 0 (nothing could be sent to it) and a note
naming the reset, and counts nowhere, as a request whose client left
before any answer. A connection that closes having sent nothing, or only
the empty lines a request line may follow, gets no line and counts
nowhere; one that ends on a lone CR after empty lines (none, or one to
eight) sent a bare CR, no empty line (RFC 9112 section 2.2), and gets the
400 and its line (before, only after eight empty lines, the ninth line's
CR being over the parser's limit). A client that closes in the middle of
its body is gone as one whose request is under way (status 0, counted
nowhere), and its line's
note says "client closed the connection during the request body" (before,
only "client closed the connection", as for one that left with its request
whole, waiting for the response, which keeps that note). So does one that
sent its whole body (Content-Length, or chunked with a trailer) and closed
while that body still waited in the proxy's input, its try connecting to
an upstream that never accepts (a second listener): only "client closed
the connection" (before, "during the request body"); one whose chunked body
was cut there says "during the request body".
"""

import socket
import struct
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@BLACKHOLE@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 10s
defaults:
  retry:
    max_attempts: 2
"""

HEAD_NOTE = "client%20closed%20the%20connection%20during%20the%20request%20head"


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, BLACKHOLE=h.blackhole(t))

    def unrouted(code):
        text = h.curl(proxy.listener_url(1, "/metrics")).body.decode()
        return h.metric(text, "retryproxy_requests_total", '{route="-",code="%d"}' % code) or 0.0

    def client_connections():
        text = h.curl(proxy.listener_url(1, "/metrics")).body.decode()
        return h.metric(text, "retryproxy_connections", '{side="client"}')

    def lines_noting(word):
        return [h.access_fields(ln) for ln in proxy.access_lines()
                if word in h.access_fields(ln).get("note", "")]

    @t.check("a client that closes after part of a request head gets a 400 and an access line "
             "naming its request, counted as the proxy's other 400s")
    def _():
        before = unrouted(400)
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo?t=cut-head HTTP/1.1\r\nHost: a.example\r\nX-Half: a")
            time.sleep(0.3)
            c.sock.shutdown(socket.SHUT_WR)
            got = c.read_to_close(timeout=5 * h.SLOW)
        h.ok(got.startswith(b"HTTP/1.1 400 "), "the cut head's answer: %r" % got[:200])
        r = h.RawConn.over(None)
        r.buf += got
        answer = r.read_response()
        h.check_error_response(answer, 400, ("closed",))
        h.eq(answer.header("Connection"), "close", "the 400's Connection field")
        fields = h.access_fields(proxy.access_one("t=cut-head"))
        h.eq((fields.get("method"), fields.get("status"), fields.get("route"),
              fields.get("attempts"), fields.get("tries"), fields.get("note")),
             ("GET", "400", "-", "0", "-", HEAD_NOTE), "the cut head's access line")
        h.eq(fields.get("bytes"), str(len(answer.body)), "bytes: the 400's text")
        # from the head's first byte, 0.3 s before the close
        h.ok(250 <= int(fields.get("duration_ms")) < 5000 * h.SLOW,
             "duration_ms from the head's first byte: %r" % fields.get("duration_ms"))
        h.wait_until(lambda: unrouted(400) == before + 1, 5 * h.SLOW,
                     'requests_total{route="-",code="400"} one more')
        h.eq([q for q in origin.requests if "cut-head" in q.target], [],
             "requests at the origin")
        # the client's FIN came before the 400: nothing is left to linger
        # for, and the connection's place among max_connections is free
        h.wait_until(lambda: client_connections() == 0, 1.5 * h.SLOW,
                     "the proxy to close the connection after its 400 "
                     '(retryproxy_connections{side="client"} back to 0)')

    @t.check("a client that closes inside its request line: 400, its line with method and "
             "target '-'")
    def _():
        before = len(lines_noting("request%20head"))
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo?t=cut-line HTT")
            time.sleep(0.2)
            c.close()
        h.wait_until(lambda: len(lines_noting("request%20head")) > before, 5 * h.SLOW,
                     "an access line for the cut request line")
        fields = lines_noting("request%20head")[-1]
        h.eq((fields.get("method"), fields.get("target"), fields.get("status"),
              fields.get("note")), ("-", "-", "400", HEAD_NOTE), "the cut line's access line")

    @t.check("a client that resets after part of a head: an access line with status 0 and a "
             "note, counted nowhere")
    def _():
        before = unrouted(400)
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo?t=reset-head HTTP/1.1\r\nHost: a.example\r\n")
            time.sleep(0.2)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        fields = h.access_fields(proxy.access_one("t=reset-head"))
        h.eq((fields.get("method"), fields.get("status"), fields.get("bytes"),
              fields.get("note")),
             ("GET", "0", "0",
              "client%20reset%20the%20connection%20during%20the%20request%20head"),
             "the reset head's access line")
        h.eq(unrouted(400), before, 'requests_total{route="-",code="400"}')
        h.eq(unrouted(0), 0.0, 'requests_total{route="-",code="0"}')

    @t.check("a connection that closes having sent nothing, or only empty lines: no access line, "
             "counted nowhere")
    def _():
        lines = len(proxy.access_lines())
        before = unrouted(400)
        for data in (b"", b"\r\n", b"\r\n\r\n"):
            with h.RawConn(proxy.port()) as c:
                if data:
                    c.send(data)
                time.sleep(0.2)
                c.sock.shutdown(socket.SHUT_WR)
                h.eq(c.read_to_close(timeout=5 * h.SLOW), b"",
                     "what the proxy sent a connection that sent %r" % data)
        # a request served after them: its line comes after any of theirs
        h.eq(h.fetch(proxy.port(), "GET", "/echo?t=after-idle", "a.example").status, 200,
             "a request after them")
        proxy.access_one("t=after-idle")
        h.eq(len(proxy.access_lines()), lines + 1, "access lines added (the request after only)")
        h.eq(unrouted(400), before, 'requests_total{route="-",code="400"}')

    @t.check("a connection that ends on a lone CR after empty lines (a bare CR, no empty line): "
             "a 400 and an access line, however many empty lines came before")
    def _():
        for n in (0, 1, 7, 8):
            before = unrouted(400)
            lines = len(proxy.access_lines())
            with h.RawConn(proxy.port()) as c:
                c.send(b"\r\n" * n + b"\r")
                time.sleep(0.2)
                c.sock.shutdown(socket.SHUT_WR)
                got = c.read_to_close(timeout=5 * h.SLOW)
            h.ok(got.startswith(b"HTTP/1.1 400 "),
                 "the answer to %d empty lines and a CR: %r" % (n, got[:100]))
            h.wait_until(lambda: len(proxy.access_lines()) == lines + 1, 5 * h.SLOW,
                         "an access line for %d empty lines and a CR" % n)
            fields = h.access_fields(proxy.access_lines()[-1])
            h.eq((fields.get("method"), fields.get("target"), fields.get("status")),
                 ("-", "-", "400"), "the access line of %d empty lines and a CR" % n)
            h.wait_until(lambda: unrouted(400) == before + 1, 5 * h.SLOW,
                         'requests_total{route="-",code="400"} one more')

    body_note = "client%20closed%20the%20connection%20during%20the%20request%20body"
    for method, why, tries in (("PUT", "kept to be re-sent, before any try", "-"),
                               ("POST", "streamed to its try", "cancelled")):
        @t.check("a client that closes in the middle of a %s body (%s): its line says the body "
                 "was cut, status 0, counted nowhere" % (method, why))
        def _(method=method, tries=tries):
            tag = "t=cut-body-%s" % method
            before = unrouted(400)
            with h.RawConn(proxy.port()) as c:
                c.send(b"%s /echo?%s HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1000\r\n"
                       b"\r\n" % (method.encode(), tag.encode()) + b"a" * 100)
                time.sleep(0.3)
                c.sock.shutdown(socket.SHUT_WR)
                h.eq(c.read_to_close(timeout=5 * h.SLOW), b"", "what the client got")
            fields = h.access_fields(proxy.access_one(tag))
            h.eq((fields.get("method"), fields.get("route"), fields.get("status"),
                  fields.get("tries"), fields.get("note")),
                 (method, "default", "0", tries, body_note), "the cut body's access line")
            h.eq(unrouted(400), before, 'requests_total{route="-",code="400"}')
            text = h.curl(proxy.listener_url(1, "/metrics")).body.decode()
            h.eq(h.metric(text, "retryproxy_requests_total", '{route="default",code="0"}'), None,
                 'requests_total{code="0"}')

    for framing, headers, body in (
            ("Content-Length", (("Content-Length", "100"),), b"c" * 100),
            ("chunked", (("Transfer-Encoding", "chunked"),),
             b"64\r\n" + b"c" * 100 + b"\r\n0\r\nX-Sum: 1\r\n\r\n")):
        @t.check("a client that closes after its whole %s body while the body still waits in "
                 "the proxy's input (its try connecting): the note says only that it closed"
                 % framing)
        def _(framing=framing, headers=headers, body=body):
            tag = "t=whole-waiting-%s" % framing
            with h.RawConn(proxy.port(2)) as c:
                c.send(h.request("POST", "/echo?" + tag, "a.example", headers=headers) + body)
                time.sleep(0.3)
                c.sock.shutdown(socket.SHUT_WR)
                h.eq(c.read_to_close(timeout=5 * h.SLOW), b"", "what the client got")
            fields = h.access_fields(proxy.access_one(tag))
            h.eq((fields.get("status"), fields.get("note")),
                 ("0", "client%20closed%20the%20connection"), "its access line")

    @t.check("a client that closes in the middle of a chunked body while it waits in the proxy's "
             "input: its line says the body was cut")
    def _():
        tag = "t=cut-waiting-chunked"
        with h.RawConn(proxy.port(2)) as c:
            c.send(h.request("POST", "/echo?" + tag, "a.example",
                             headers=(("Transfer-Encoding", "chunked"),)) +
                   b"64\r\n" + b"c" * 100 + b"\r\n")
            time.sleep(0.3)
            c.sock.shutdown(socket.SHUT_WR)
            h.eq(c.read_to_close(timeout=5 * h.SLOW), b"", "what the client got")
        fields = h.access_fields(proxy.access_one(tag))
        h.eq((fields.get("status"), fields.get("note")), ("0", body_note), "its access line")

    @t.check("a client that closes after its whole body, before the response: the note says only "
             "that it closed")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("POST", "/delay/1?t=whole-body", "a.example", body=b"b" * 100))
            time.sleep(0.3)
            c.sock.shutdown(socket.SHUT_WR)
            h.eq(c.read_to_close(timeout=5 * h.SLOW), b"", "what the client got")
        fields = h.access_fields(proxy.access_one("t=whole-body"))
        h.eq((fields.get("status"), fields.get("tries"), fields.get("note")),
             ("0", "cancelled", "client%20closed%20the%20connection"), "its access line")


h.run(scenario, __doc__)
