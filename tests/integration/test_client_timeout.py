#!/usr/bin/env python3
"""Scenario: limits.client_timeout (1s) against slow and idle clients.

Client: raw sockets to a sidecar listener: one connects and sends nothing;
one drips a request head a few bytes at a time, never finishing it
(slowloris); one makes a request and then idles on the keep-alive
connection; one makes requests 0.7 s apart; one asks for a response the
origin takes 2 s to produce; one sends a head announcing a body and then
only part of the body.
Origin: echoes; /delay/2 answers after 2 s.
Must hold: a silent connection, a dripping head and an idle keep-alive
connection are each closed within a few seconds of the 1 s timeout (none
before 0.3 s), and nothing of the dripped request reaches the origin; a
cut head's 408 is logged with the time since its first byte; the
timeout counts from the end of the previous response, so requests 0.7 s
apart keep one connection alive; a slow response is not cut by it; a
request body that stops arriving for client_timeout closes the connection
and the origin never gets a whole request. A client reading a 16 MiB
response slowly (about 640 KB/s, less than a third of the kernel's send
buffer per second) is not cut while it reads, and gets the whole body; one that stops
reading is cut one client_timeout after its last write blocked (two on a
loaded machine, where the kernel may still move bytes a quarter of it
later); its access line's bytes= counts the body bytes written to its
socket, not those still queued in the proxy. After a response
whose tail waits in the proxy (a client that read nothing for 1.5 s of a
3 s client_timeout), the next request's client_timeout counts from when
that tail was written, not from when it was queued: a request sent 2.25 s
after the client read the rest is served.
A second proxy (client_timeout 1s, health hold, max_attempts 3) in front
of origins that refuse connections for a while: a POST whose whole small
body was sent, held 2.5 s for its down upstream, or waiting out a 2.5 s
backoff after a refused connect, is not cut by client_timeout (the body
waits on the proxy, not on the client): 200, and the origin gets the
POST once, body and all.
"""

import hashlib
import threading
import time

import harness as h
import origin as origin_mod

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  drain_timeout: 2s
  client_timeout: 1s
defaults:
  retry:
    max_attempts: 1
"""

BOUND = 1 + 5  # client_timeout plus a generous margin

# the first listener's upstream is held while down; the second's backs off
CONFIG_WAITS = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@HELD@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@BACKOFF@
limits:
  drain_timeout: 2s
  connect_timeout: 1s
  client_timeout: 1s
health: { down_after: 1, probe_interval: 200ms, hold: true }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 2500ms
    max_backoff: 5s
    jitter: 0s
    deadline: 20s
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    @t.check("a connection that sends nothing is closed after client_timeout (not before 0.3s)")
    def _():
        with h.RawConn(proxy.port()) as c:
            h.ok(c.silent_for(0.3), "connection closed or answered within 0.3s")
            h.ok(c.closed_within(BOUND), "silent connection still open after %ss" % BOUND)
            h.eq(bytes(c.buf), b"", "what a connection that sent nothing was sent")

    @t.check("slowloris: a head dripped slower than client_timeout is cut with a 408 and an access "
             "line; nothing reaches the origin")
    def _():
        before = len(origin.requests)
        start = time.monotonic()
        closed = False
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo?slowloris HTTP/1.1\r\nHost: a.example\r\n")
            drip = b"X-Drip: aaaaaaaa\r\n"
            i = 0
            while time.monotonic() - start < BOUND:
                try:
                    c.send(drip[i % len(drip):i % len(drip) + 1])
                except OSError:
                    closed = True
                    break
                i += 1
                if c.closed_within(0.2):
                    closed = True
                    break
        h.ok(closed, "connection dripping a head still open after %ss" % BOUND)
        h.eq(origin.requests[before:], [], "requests that reached the origin")
        h.ok(bytes(c.buf).startswith(b"HTTP/1.1 408 "), "the cut head's answer: %r" % bytes(c.buf[:200]))
        r = h.RawConn.over(None)
        r.buf += c.buf
        got = r.read_response()
        h.eq(got.header("Connection"), "close", "the 408's Connection field")
        # the line reaches the proxy's stderr, and the harness's reader of
        # it, after the 408 reached the client: wait for it
        def lines_408():
            return [ln for ln in proxy.access_lines() if h.access_fields(ln).get("status") == "408"]
        h.wait_until(lines_408, 5 * h.SLOW, "an access line with status 408")
        lines = lines_408()
        h.eq(len(lines), 1, "access lines with status 408 (%r)" % lines)
        fields = h.access_fields(lines[0])
        # its request line came whole: the line says which request was cut
        h.eq((fields.get("method"), fields.get("target")), ("GET", "/echo?slowloris"),
             "the cut head's method and target in its access line")

    @t.check("a head cut inside its request line gets its 408 with method and target '-' in the "
             "access line")
    def _():
        before = len([ln for ln in proxy.access_lines() if h.access_fields(ln).get("status") == "408"])
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo?cut-in-the-line HTT")
            h.ok(c.closed_within(BOUND), "connection with half a request line still open after %ss" % BOUND)
        h.ok(bytes(c.buf).startswith(b"HTTP/1.1 408 "), "the cut line's answer: %r" % bytes(c.buf[:200]))

        def lines_408():
            return [ln for ln in proxy.access_lines() if h.access_fields(ln).get("status") == "408"]
        h.wait_until(lambda: len(lines_408()) > before, 5 * h.SLOW, "a second access line with status 408")
        fields = h.access_fields(lines_408()[-1])
        h.eq((fields.get("method"), fields.get("target")), ("-", "-"),
             "the cut line's method and target in its access line")
        # the request lasted from its first byte to the 408: client_timeout
        # (1 s) less the moment between the connect and that byte
        h.ok(700 <= int(fields.get("duration_ms")) <= BOUND * 1000,
             "the 408's duration_ms, from the head's first byte: %r" % fields.get("duration_ms"))

    @t.check("an idle keep-alive connection is closed after client_timeout, nothing sent")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", "/echo?idle", "a.example"))
            r = c.read_response()
            h.eq(r.status, 200, "status")
            c.send(b"\r\n")  # a stray CRLF after a request is no request begun
            h.ok(c.closed_within(BOUND), "idle keep-alive connection still open after %ss" % BOUND)
            h.eq(bytes(c.buf), b"", "what the idle connection was sent after its response")

    @t.check("the timeout restarts after each response: 3 requests 0.7s apart on one connection")
    def _():
        with h.RawConn(proxy.port()) as c:
            for i in range(3):
                if i:
                    time.sleep(0.7)
                c.send(h.request("GET", "/echo?spaced=%d" % i, "a.example"))
                r = c.read_response()
                h.eq(r.status, 200, "status of request %d" % (i + 1))

    @t.check("a response slower than client_timeout (2s) is not cut")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", "/delay/2", "a.example"))
            r = c.read_response(timeout=15)
        h.eq((r.status, r.body), (200, b"delayed\n"), "slow response")

    @t.check("a request body that stalls for client_timeout closes the connection")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"POST /echo?stalled-body HTTP/1.1\r\nHost: a.example\r\n"
                   b"Content-Length: 100\r\n\r\nonly part")
            h.ok(c.silent_for(0.3), "answered or closed within 0.3s")
            h.ok(c.closed_within(BOUND), "stalled body: connection still open after %ss" % BOUND)
        done = [q for q in origin.requests if "stalled-body" in q.target and q.body_len == 100]
        h.eq(done, [], "whole stalled requests at the origin")

    big = 16 << 20

    @t.check("a client reading a large body slowly but steadily is not cut by client_timeout")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", "/bytes/%d?slow-reader" % big, "a.example"))
            r = c.read_head()
            h.eq(r.status, 200, "status")
            # 64 KB every 0.1 s for 3.5 s: less than a third of the proxy's
            # send buffer per second, so the kernel reports the socket
            # writable only every 2 s or so
            body = h.read_slowly(c, big)
        h.eq(hashlib.sha256(body).hexdigest(), origin_mod.pattern_sha256(big), "body digest")

    @t.check("a client that stops reading a large body is cut after client_timeout")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", "/bytes/%d?stopped-reader" % big, "a.example"))
            h.eq(c.read_head().status, 200, "status")
            h.check_cut_for_not_reading(proxy, "stopped-reader", 1000)
            got = len(c.buf) + len(c.read_to_close())
            h.ok(got < big, "the whole body arrived")

    slow = t.proxy(CONFIG.replace("client_timeout: 1s", "client_timeout: 3s"), ORIGIN=origin.port)

    @t.check("the next request's client_timeout counts from when the last response was written")
    def _():
        # a response queued whole, its last bytes waiting in the proxy
        c, size, queued = h.response_tail_in_proxy(slow, "tail-waits")
        with c:
            # the tail waits 1.5 s (half the client_timeout) before the
            # client reads
            time.sleep(max(0.0, queued + 1.5 - time.monotonic()))
            h.eq(len(c.read_exact(size)), size, "body bytes")
            # 3.75 s after it was queued, 2.25 s after it was written
            time.sleep(max(0.0, queued + 3.75 - time.monotonic()))
            c.send(h.request("GET", "/echo?after-tail", "a.example"))
            h.eq(c.read_response().status, 200, "status of the next request")

    @t.check("a client cut for not reading: bytes= counts what reached its socket, not what "
             "still waited in the proxy")
    def _():
        with h.RawConn(slow.port(), rcvbuf=h.CAPACITY_RCVBUF) as c:
            c.send(h.request("GET", "/bytes/%d?bytes-written" % big, "a.example"))
            h.eq(c.read_head().status, 200, "status")
            # the body bytes the proxy wrote: those the client holds and
            # those the proxy's socket still holds, once neither grows
            last = None
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                time.sleep(0.2)
                now = (len(c.buf) + h.readable(c.sock), h.send_queue(slow.port(), c.local_port))
                if now == last:
                    break
                last = now
            written = sum(last)
            f = h.access_fields(slow.access_one("bytes-written", timeout=(3 + 5) * h.SLOW))
            h.eq(f.get("note"), "client%20stopped%20reading", "access note")
            # a window probe may move a few bytes after the last look
            h.ok(written <= int(f["bytes"]) <= written + 16384,
                 "bytes=%s where the proxy wrote %d of the body" % (f["bytes"], written))

    held = t.origin()
    held.stop_listening()
    backoff = t.origin()
    backoff.stop_listening()
    waits = t.proxy(CONFIG_WAITS, HELD=held.port, BACKOFF=backoff.port)

    for listener, origin_down, what in ((0, held, "held for its down upstream"),
                                        (1, backoff, "waiting out a backoff")):
        @t.check("a POST %s longer than client_timeout: not cut, sent once" % what)
        def _():
            up = threading.Timer(2.5, origin_down.listen_again)
            up.start()
            t.defer(up.cancel)
            start = time.monotonic()
            r = h.fetch(waits.port(listener), "POST", "/echo?waited", "a.example",
                        body=b"hello", timeout=15 * h.SLOW)
            took = time.monotonic() - start
            h.eq(r.status, 200, "status after %.1fs (%r)" % (took, r))
            h.ok(took >= 2.0, "answered after %.1fs, before the origin listened" % took)
            got = [q for q in origin_down.requests if q.method == "POST"]
            h.eq([bytes(q.body) for q in got], [b"hello"], "POSTs at the origin")


h.run(scenario, __doc__)
