#!/usr/bin/env python3
"""Scenario: requests the proxy must refuse, and upstream failures.

Client: raw sockets sending malformed requests to a sidecar listener
(Content-Length with Transfer-Encoding, differing or invalid Content-Length,
Transfer-Encoding other than a final chunked, a bad chunk size, a
chunk-size line over 4 KiB (of leading zeros, or with an extension), obs-fold,
whitespace before a colon, bare LF, bare CR, NUL, an invalid method, missing,
invalid or duplicate Host), oversized requests (URI over max_uri_bytes 1 KiB,
head over max_header_bytes 4 KiB, body over max_body_bytes 1 KiB announced
by Content-Length or reached by chunks) and their just-under-the-limit
twins; forward requests to a closed port and to origins that never answer,
reset, or answer malformed.
Origin: echoes; /hang never answers; /reset/* and /drop cut the connection;
/bad/* send malformed responses. max_attempts is 1 so no retry hides a
failure; try_timeout is 1s.
Must hold: each refused request gets its status (400, 414, 431, 413) with a
one-line text/plain body, Content-Length and Retry-Attempts (a chunk-size
line too long says so, not that the size is invalid), and nothing of
it reaches the origin; framing errors close the connection; the twins under
the limits pass; a closed port gives 502 naming the refusal; a silent
origin gives 504 after about try_timeout (a HEAD's 502 comes without a
body, so a request pipelined behind it is read right); a reset, a close before the
response or a malformed response head gives 502; a reset in the middle of
a body cuts the client connection short instead of padding or hanging.
"""

import json
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  drain_timeout: 2s
  max_uri_bytes: 1KiB
  max_header_bytes: 4KiB
  max_body_bytes: 1KiB
  try_timeout: 1s
  connect_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

MALFORMED = [
    ("Content-Length together with Transfer-Encoding", True,
     b"POST /echo?m=clte HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("two differing Content-Length fields", True,
     b"POST /echo?m=cl2 HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
    ("invalid Content-Length", True,
     b"POST /echo?m=clbad HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5x\r\n\r\nhello"),
    ("negative Content-Length", True,
     b"POST /echo?m=clneg HTTP/1.1\r\nHost: a.example\r\nContent-Length: -1\r\n\r\n"),
    ("Transfer-Encoding not ending in chunked", True,
     b"POST /echo?m=tegzip HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
    ("unknown Transfer-Encoding alone", True,
     b"POST /echo?m=teonly HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n"),
    ("bad chunk size", True,
     b"PUT /echo?m=chunk HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    ("obs-fold", False,
     b"GET /echo?m=fold HTTP/1.1\r\nHost: a.example\r\nX-A: a\r\n b\r\n\r\n"),
    ("whitespace before the colon", False,
     b"GET /echo?m=wscolon HTTP/1.1\r\nHost: a.example\r\nX-A : b\r\n\r\n"),
    ("bare LF inside the head", False,
     b"GET /echo?m=barelf HTTP/1.1\r\nHost: a.example\r\nX-A: a\nX-B: b\r\n\r\n"),
    ("bare CR inside a field value", False,
     b"GET /echo?m=barecr HTTP/1.1\r\nHost: a.example\r\nX-A: a\rb\r\n\r\n"),
    ("NUL inside a field value", False,
     b"GET /echo?m=nul HTTP/1.1\r\nHost: a.example\r\nX-A: a\x00b\r\n\r\n"),
    ("invalid method token", False,
     b"G(T /echo?m=method HTTP/1.1\r\nHost: a.example\r\n\r\n"),
    ("HTTP/1.1 without Host", False,
     b"GET /echo?m=nohost HTTP/1.1\r\nX-A: a\r\n\r\n"),
    ("invalid Host", False,
     b"GET /echo?m=badhost HTTP/1.1\r\nHost: bad host\r\n\r\n"),
    ("two Host fields", False,
     b"GET /echo?m=twohost HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"),
]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    sidecar = proxy.port(1)
    auth = origin.authority

    def refused(raw, status, must_close, port=None, words=None):
        before = len(origin.requests)
        with h.RawConn(port or sidecar) as c:
            c.send(raw)
            r = c.read_response(timeout=5)
            closed = c.closed_within(5) if must_close else None
        h.check_error_response(r, status, words)
        if must_close:
            h.ok(closed, "connection should be closed after a framing error")
        time.sleep(0.2)
        h.eq(origin.requests[before:], [], "requests that reached the origin")

    for name, must_close, raw in MALFORMED:
        @t.check("400 for %s; nothing reaches the origin" % name)
        def _(raw=raw, must_close=must_close):
            refused(raw, 400, must_close)

    @t.check("a space inside the request target: 400 naming whitespace in the target, in the "
             "answer and the log, not an invalid version")
    def _():
        refused(b"GET /echo?m=a b HTTP/1.1\r\nHost: a.example\r\n\r\n", 400, False,
                words=("whitespace in the request target",))
        refused(b"GET /echo?m=a\tb HTTP/1.1\r\nHost: a.example\r\n\r\n", 400, False,
                words=("whitespace in the request target",))
        proxy.wait_log("note=whitespace%20in%20the%20request%20target", count=2)
        refused(b"GET /echo?m=v http/1.1\r\nHost: a.example\r\n\r\n", 400, False,
                words=("invalid http version",))

    @t.check("a TLS ClientHello sent to a plain HTTP listener (a client told https:// for the "
             "proxy): 400 naming it, in the answer and the log, not an invalid method")
    def _():
        hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40
        refused(hello, 400, False, words=("tls handshake",))
        proxy.wait_log("note=TLS%20handshake%20on%20a%20plain%20HTTP%20listener")

    @t.check("a chunk-size line over 4 KiB, leading zeros or an extension: 400 saying the line "
             "is too long, not that the size or an extension is invalid; a 4 KiB one passes")
    def _():
        def chunked(tag, size_line):
            return (b"PUT /echo?m=%s HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
                    % tag + size_line + b"\r\nx\r\n0\r\n\r\n")
        # 4097 bytes with the CRLF: over by the LF alone, or by a digit
        for tag, size_line in ((b"zeros-lf", b"0" * 4094 + b"1"), (b"zeros", b"0" * 5000 + b"1"),
                               (b"ext", b"1;e=" + b"v" * 4093)):
            refused(chunked(tag, size_line), 400, True, words=("chunk-size line too long",))
            proxy.wait_log("m=%s .*note=chunk-size%%20line%%20too%%20long" % tag.decode())
        # 4096 bytes with the CRLF: the longest line taken
        with h.RawConn(sidecar) as c:
            c.send(chunked(b"zeros-4k", b"0" * 4093 + b"1"))
            r = c.read_response()
        h.eq((r.status, json.loads(r.body)["body_len"]), (200, 1),
             "status and body length at the origin for a 4 KiB chunk-size line")

    @t.check("414 for a request-target over max_uri_bytes; a 900-byte one passes")
    def _():
        refused(b"GET /echo?long=" + b"a" * 2000 + b" HTTP/1.1\r\nHost: a.example\r\n\r\n", 414, False)
        r = h.curl(proxy.listener_url(1, "/echo?long=" + "a" * 880))
        h.eq(r.status, 200, "status for a 900-byte target (%r)" % r)

    @t.check("431 for a head over max_header_bytes; a 3 KiB head passes")
    def _():
        fields = b"".join(b"X-Filler-%02d: %s\r\n" % (i, b"v" * 80) for i in range(60))
        refused(b"GET /echo?m=bighead HTTP/1.1\r\nHost: a.example\r\n" + fields + b"\r\n", 431, False)
        fields = b"".join(b"X-Filler-%02d: %s\r\n" % (i, b"v" * 80) for i in range(30))
        with h.RawConn(sidecar) as c:
            c.send(b"GET /echo?m=okhead HTTP/1.1\r\nHost: a.example\r\n" + fields + b"\r\n")
            r = c.read_response()
        h.eq(r.status, 200, "status for a 3 KiB head")

    @t.check("a head of exactly max_header_bytes passes, also after the empty lines a request line "
             "may follow (RFC 9112 section 2.2: they are not part of the head)")
    def _():
        start = b"GET /echo?m=exacthead HTTP/1.1\r\nHost: a.example\r\nX-Pad: "
        head = start + b"p" * (4096 - len(start) - 4) + b"\r\n\r\n"
        h.eq(len(head), 4096, "head length")
        for before, cut in ((b"", None), (b"\r\n", None), (b"\r\n" * 8, None),
                            (b"\r\n" * 8, 3000)):
            raw = before + head
            with h.RawConn(sidecar) as c:
                if cut is not None:
                    # in two pieces: the second takes it past the limit
                    c.send(raw[:cut])
                    time.sleep(0.2)
                    raw = raw[cut:]
                c.send(raw)
                r = c.read_response(timeout=5)
            h.eq(r.status, 200, "status for a 4 KiB head after %d empty lines (body %r)"
                 % (len(before) // 2, r.body))
        refused(b"\r\n" + head[:-4] + b"p\r\n\r\n", 431, False)

    @t.check("max_header_bytes 8: a stream of CRLFs gets 431 and the proxy lives (the empty "
             "lines before a head are dropped once, not a run at a time)")
    def _():
        tiny = t.proxy("listen:\n  - address: 127.0.0.1:@PORT0@\n"
                       "    upstream: http://127.0.0.1:@ORIGIN@\n"
                       "limits:\n  drain_timeout: 1s\n  max_header_bytes: 8\n",
                       ORIGIN=origin.port)
        with h.RawConn(tiny.port()) as c:
            c.send(b"\r\n" * 200000)
            r = c.read_response(timeout=5)
        h.check_error_response(r, 431)
        # in bursts that each go over the limit and hold nothing but empty
        # lines: none is dropped, so the limit still answers
        with h.RawConn(tiny.port()) as c:
            for _ in range(4):
                c.send(b"\r\n" * 5)
                time.sleep(0.1)
            r = c.read_response(timeout=5)
        h.check_error_response(r, 431)
        h.ok(tiny.alive(), "the proxy died")
        t.stop_proxy(tiny)

    @t.check("413 at once for Content-Length over max_body_bytes, before the body is sent")
    def _():
        refused(b"POST /echo?m=bigcl HTTP/1.1\r\nHost: a.example\r\nContent-Length: 2048\r\n\r\n", 413, False)

    @t.check("413 for a chunked body growing over max_body_bytes")
    def _():
        chunk = b"3e8\r\n" + b"x" * 1000 + b"\r\n"
        refused(b"PUT /echo?m=bigchunked HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
                + chunk + chunk + b"0\r\n\r\n", 413, False)

    @t.check("a body of exactly max_body_bytes passes")
    def _():
        r = h.curl("--data-binary", "y" * 1024, proxy.listener_url(1, "/echo?m=exact"))
        h.eq(r.status, 200, "status (%r)" % r)

    @t.check("502 naming the refusal for an upstream port nobody listens on")
    def _():
        port = h.closed_port()
        r = h.curl("http://127.0.0.1:%d/x" % port, proxy=proxy.url)
        h.check_error_response(r, 502, ("refused",))
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")

    @t.check("HEAD to a closed port: the 502 comes without a body, and the request pipelined "
             "behind it on the same connection gets its own response")
    def _():
        port = h.closed_port()
        with h.RawConn(proxy.port(0)) as c:
            c.send(h.request("HEAD", "http://127.0.0.1:%d/x" % port, "127.0.0.1:%d" % port) +
                   h.request("GET", origin.url("/status/201"), origin.authority))
            first = c.read_response(method="HEAD")
            second = c.read_response()
        h.eq((first.status, first.body), (502, b""), "the HEAD's status and body")
        h.ok(int(first.header("Content-Length") or 0) > 0, "the HEAD's Content-Length")
        h.eq(second.status, 201, "the pipelined GET's status")

    heads = [
        (400, b"HEAD /echo?m=headbad HTTP/1.1\r\nHost: a.example\r\nX: a\x01b\r\n\r\n"),
        (414, b"HEAD /" + b"u" * 1100 + b" HTTP/1.1\r\nHost: a.example\r\n\r\n"),
        (431, b"HEAD /echo?m=headbig HTTP/1.1\r\nHost: a.example\r\nX: " + b"h" * 4200 + b"\r\n\r\n"),
    ]
    for status, raw in heads:
        @t.check("a HEAD the parser refuses (%d): the answer comes without a body, as to any HEAD"
                 % status)
        def _(status=status, raw=raw):
            with h.RawConn(proxy.port(1)) as c:
                c.send(raw)
                r = c.read_response(method="HEAD")
                rest = c.read_to_close(timeout=5)
            h.eq(r.status, status, "status")
            h.eq(rest, b"", "bytes after the HEAD's head (a body the client takes for the next response)")

    @t.check("504 after try_timeout (1s) when the origin accepts and never answers")
    def _():
        start = time.monotonic()
        r = h.curl(origin.url("/hang?m=504"), proxy=proxy.url)
        took = time.monotonic() - start
        h.check_error_response(r, 504, ("timeout", "timed out"))
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.ok(0.8 <= took <= 10, "504 came after %.1fs; try_timeout is 1s" % took)

    for path in ("/reset/request", "/drop", "/reset/status", "/reset/head"):
        @t.check("502 when the origin %s" % {"/reset/request": "resets after reading the request",
                                              "/drop": "closes without answering",
                                              "/reset/status": "resets in the middle of the status line",
                                              "/reset/head": "resets before reading the body"}[path])
        def _(path=path):
            r = h.curl(origin.url(path + "?m=x"), proxy=proxy.url)
            h.check_error_response(r, 502)

    for kind in ("cl-dup", "te-cl", "obs-fold", "status", "bare-lf", "space-colon"):
        @t.check("502 for a malformed upstream response head (%s)" % kind)
        def _(kind=kind):
            r = h.curl(origin.url("/bad/" + kind), proxy=proxy.url)
            h.check_error_response(r, 502)

    @t.check("origin resets in the middle of a body: the client connection is cut short, not padded or hung")
    def _():
        n = 200000
        with h.RawConn(proxy.port(0), timeout=10) as c:
            c.send(h.request("GET", origin.url("/reset/body?n=%d" % n), auth))
            head = c.read_head()
            h.eq(head.status, 200, "status (the head went out before the reset)")
            start = time.monotonic()
            data = c.read_to_close(timeout=10)
            h.ok(time.monotonic() - start < 10, "client connection still open 10s after the upstream reset")
        if head.header("Content-Length") is not None:
            h.ok(len(data) < n, "client got %d bytes of a %d-byte body that was cut" % (len(data), n))
            h.eq(data, o.pattern_bytes(len(data)), "the bytes that did arrive")
        else:
            h.ok(not data.endswith(b"0\r\n\r\n"), "a cut chunked body must not be terminated properly")


h.run(scenario, __doc__)
