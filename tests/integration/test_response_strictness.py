#!/usr/bin/env python3
"""Scenario: upstream responses that break HTTP/1.1, each one a 502, never
passed on, repaired or mistaken for a good response.

Client: curl and raw sockets to a sidecar listener whose upstream is a raw
socket server of this file. Paths under /once/ use a route with
max_attempts 1; paths under /thrice/ a route with max_attempts 3.
Origin: a raw socket server that reads each request and answers with the
bytes the last path segment names (the table RESPONSES): Content-Length with
Transfer-Encoding in both orders, differing or invalid Content-Length, a bad
or overflowing chunk size, a chunk-size line over 4 KiB of leading zeros,
chunk data followed by garbage instead of CRLF,
obs-fold, bare LF, bare CR, NUL in a field value or name, whitespace before
a colon, a field line without a colon, a garbage status line, status 99,
600 and 1000, HTTP/2 and lower-case http/1.1 status lines, a head over
max_header_bytes (4 KiB), more fields than the proxy takes, and a 101
nobody asked for; then the whole response in one write and the connection
closed; so also answers without content (a HEAD's 200, a 304, a 204)
with Content-Length and Transfer-Encoding both, and a 503 whose chunked
body has a chunk-size line over 4 KiB. Other paths: a chunked response whose bad chunk comes 0.5 s after a
good first chunk (the head is out by then), a complete response
followed on the same connection by bytes the client never asked for, and
a complete response followed, once its connection idles in the pool, by a
second one nobody asked for, sent while the proxy is stopped (SIGSTOP)
with the next request on the client's connection waiting too.
Must hold: each malformed response is a 502 for a GET on /once/ (one
request at the origin, Retry-Attempts 1, one-line text body saying the
response was invalid, not that the upstream was unreachable), also one
whose head is well formed and whose chunked body breaks in the same write
(the proxy holds all of it before sending anything, and the SPEC makes
a malformed response a 502), a chunk-size line over 4 KiB named as too
long in the 502, relayed or found in a kept 503 on /thrice/ (after 3
tries), and also an answer without content with
both framing fields (RFC 9112 section 6.3 lets no hop pass the two on:
never both at the client); whatever the proxy answers there, the client
never gets a clean response; on /thrice/
a GET's malformed response counts as a reset and is retried (the origin
sees 3 requests, Retry-Attempts 3) while a POST without a condition is not
(1 request, Retry-Attempts 1); a body that goes bad after the head was sent
ends the client connection with an incomplete response (no last chunk),
never a clean one; bytes after a complete response never reach the next
request's client (it gets its own response), also when they reach an
idle pooled connection in the same event-loop pass as that request; a
well-formed response in
Transfer-Encoding: gzip, chunked is a 502 for an HTTP/1.0 client on /thrice/
that names the transfer coding, is not retried (1 request at the origin)
and does not call the upstream unreachable, while an HTTP/1.1 client gets
it as it came; the proxy keeps serving.
"""

import os
import signal
import socket
import threading
import time

import dnsstub
import harness as h
from rawserver import RawServer, read_request

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@BAD@
limits:
  drain_timeout: 2s
  max_header_bytes: 4KiB
  try_timeout: 2s
defaults:
  retry:
    max_attempts: 1
    initial_backoff: 50ms
    jitter: 10ms
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: thrice
    match: { path_prefix: /thrice/ }
    retry:
      max_attempts: 3
      initial_backoff: 50ms
      jitter: 10ms
      budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

OK = b"HTTP/1.1 200 OK\r\n"

# name: the whole response, sent in one write, then the connection closes.
RESPONSES = {
    "cl-te": OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "te-cl": OK + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "cl-differ": OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "cl-comma-differ": OK + b"Content-Length: 5, 6\r\n\r\nhello!",
    "cl-letters": OK + b"Content-Length: 5x\r\n\r\nhello",
    "cl-negative": OK + b"Content-Length: -5\r\n\r\nhello",
    "cl-plus": OK + b"Content-Length: +5\r\n\r\nhello",
    "cl-overflow": OK + b"Content-Length: 99999999999999999999999\r\n\r\nhello",
    "chunk-size-bad": OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "chunk-size-overflow": OK + b"Transfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n",
    "chunk-then-garbage": OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloGARBAGE\r\n0\r\n\r\n",
    # 4097 bytes with the CRLF: over the 4 KiB line limit by its LF
    "chunk-line-long": OK + b"Transfer-Encoding: chunked\r\n\r\n" + b"0" * 4094 + b"1\r\nx\r\n0\r\n\r\n",
    "obs-fold": OK + b"X-Folded: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
    "bare-lf": OK + b"X-A: a\nX-B: b\r\nContent-Length: 5\r\n\r\nhello",
    "bare-cr": OK + b"X-A: a\rb\r\nContent-Length: 5\r\n\r\nhello",
    "nul-value": OK + b"X-A: a\x00b\r\nContent-Length: 5\r\n\r\nhello",
    "nul-name": OK + b"X-\x00A: b\r\nContent-Length: 5\r\n\r\nhello",
    "space-colon": OK + b"X-A : a\r\nContent-Length: 5\r\n\r\nhello",
    "no-colon": OK + b"X-A a\r\nContent-Length: 5\r\n\r\nhello",
    "status-garbage": b"HTTP/1.1 two hundred OK\r\nContent-Length: 5\r\n\r\nhello",
    "status-99": b"HTTP/1.1 99 Too Small\r\nContent-Length: 5\r\n\r\nhello",
    "status-600": b"HTTP/1.1 600 Too Big\r\nContent-Length: 5\r\n\r\nhello",
    "status-1000": b"HTTP/1.1 1000 Way Too Big\r\nContent-Length: 5\r\n\r\nhello",
    "http2": b"HTTP/2 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "lowercase-version": b"http/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "not-http": b"SSH-2.0-OpenSSH_9.2p1\r\n\r\n",
    "long-head": OK + b"X-Long: " + b"v" * 8000 + b"\r\nContent-Length: 5\r\n\r\nhello",
    "many-fields": OK + b"".join(b"X-F%d: v\r\n" % i for i in range(300)) + b"Content-Length: 5\r\n\r\nhello",
    "101-unasked": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello",
}

# name: (method, the whole response): answers without content (to a HEAD,
# a 304, a 204) whose head has Content-Length and Transfer-Encoding both;
# sent in one write, then the connection closes, as for RESPONSES.
NO_CONTENT_CL_TE = {
    "head-cl-te": ("HEAD", OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
    "head-te-cl": ("HEAD", OK + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
    "304-cl-te": ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"),
    "204-cl-te": ("GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"),
}

# A well-formed response in a transfer coding the proxy never asked for (no
# TE went upstream): an HTTP/1.1 client gets it as it came; an HTTP/1.0
# client cannot be given it decoded. Connection: close, so that the proxy
# never pools the connection the origin closes after it: the next check's
# request (a max_attempts 1 route) would find it stale and get a 502.
GZIP_CHUNKED = (OK + b"Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
                b"5\r\nhello\r\n0\r\n\r\n")

# name: a chunked response whose head and a good start go out, then 0.5 s
# later the part that breaks it; then the connection closes.
LATE = {
    "late-bad-chunk": (OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                       b"zz\r\nworld\r\n0\r\n\r\n"),
    "late-chunk-garbage": (OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld",
                           b"GARBAGE\r\n0\r\n\r\n"),
}

# Kinds whose head is well formed and whose body breaks in the same write:
# the proxy has the whole malformed response in hand before it sends anything.
BODY_KINDS = ["chunk-size-bad", "chunk-size-overflow", "chunk-then-garbage", "chunk-line-long"]

# name: the whole response, sent in one write, then the connection closes: a
# retryable status whose chunked body has a chunk-size line over 4 KiB (of
# leading zeros), which the proxy finds while it keeps the response.
KEPT_LONG_LINE = (b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"0" * 5000 + b"1\r\nx\r\n0\r\n\r\n")

# Head-level kinds checked for retry behaviour on /thrice/.
RETRY_KINDS = ["cl-te", "cl-differ", "obs-fold", "nul-value", "status-garbage", "http2", "long-head",
               "101-unasked"]


class BadOrigin(RawServer):
    """The raw upstream: one thread per connection; every request is
    recorded as (connection number, method, target)."""

    def __init__(self):
        self.requests = []
        self.stray_go = threading.Event()
        super().__init__(conn_timeout=10)

    def seen(self, target_part):
        with self._lock:
            return [r for r in self.requests if target_part in r[2]]

    def serve(self, conn, cid):
        buf = b""
        while True:
            got = read_request(conn, buf)
            if got is None:
                return
            method, target, buf = got
            with self._lock:
                self.requests.append((cid, method, target))
            kind = target.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            if not self._answer(conn, kind):
                return

    def _answer(self, conn, kind):
        """Send the response for kind; False when the connection must end."""
        if kind in RESPONSES or kind in NO_CONTENT_CL_TE:
            conn.sendall(RESPONSES[kind] if kind in RESPONSES else NO_CONTENT_CL_TE[kind][1])
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.1)
            return False
        if kind in LATE:
            first, late = LATE[kind]
            conn.sendall(first)
            time.sleep(0.5)
            conn.sendall(late)
            time.sleep(0.3)
            return False
        if kind == "kept-chunk-line-long":
            conn.sendall(KEPT_LONG_LINE)
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.1)
            return False
        if kind == "gzip-chunked":
            conn.sendall(GZIP_CHUNKED)
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.1)
            return False
        if kind == "extra-bytes":
            # a complete response, then a second one nobody asked for; the
            # connection stays open for the next request
            conn.sendall(OK + b"Content-Length: 5\r\n\r\nfirst"
                         + b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled")
            return True
        if kind == "good":
            conn.sendall(OK + b"Content-Length: 5\r\n\r\nfresh")
            return True
        if kind == "stray-later":
            # a complete response; then, once the test says so (the
            # connection idle in the pool by then), a second one nobody
            # asked for; the connection stays open for the next request
            conn.sendall(OK + b"Content-Length: 5\r\n\r\nfirst")
            self.stray_go.wait(10)
            conn.sendall(OK + b"Content-Length: 8\r\n\r\nsmuggled")
            return True
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return True


def scenario(t):
    bad = BadOrigin()
    t.defer(bad.stop)
    stub = dnsstub.DnsStub().start()
    t.defer(stub.stop)
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": stub.write_resolv_conf(t.tmp)}, BAD=bad.port)

    def get(path, *args):
        return h.curl(*(list(args) + [proxy.listener_url(0, path)]))

    def settle():
        time.sleep(0.2 * h.SLOW)

    for kind in BODY_KINDS:
        @t.check("malformed body (%s) in the same write as the head: the client never gets a clean response"
                 % kind)
        def _(kind=kind):
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request("GET", "/once/%s?raw=1" % kind, "a.example"))
                head = c.read_head()
                if head.status == 502:
                    return  # refused whole: the broken body never reached the client
                rest = c.read_to_close(timeout=10)
            h.ok(head.header("Content-Length") is None, "a Content-Length on a re-framed broken body")
            h.ok(b"0\r\n\r\n" not in rest, "the broken chunked body was terminated cleanly: %r" % rest)

    for kind in RESPONSES:
        @t.check("malformed response (%s): 502 for a GET, one request at the origin" % kind)
        def _(kind=kind):
            path = "/once/%s" % kind
            before = len(bad.seen(path))
            r = get(path)
            h.check_error_response(r, 502)
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
            # the upstream answered: the 502 says the answer was invalid
            h.ok(r.body.startswith(b"502 invalid response from upstream: "),
                 "the 502's text: %r" % r.body)
            settle()
            h.eq(len(bad.seen(path)) - before, 1, "requests at the origin")

    @t.check("a chunk-size line over 4 KiB (leading zeros) in a relayed or a kept response: the 502 "
             "says the line is too long, not that the size or an extension is invalid")
    def _():
        r = get("/once/chunk-line-long")
        h.check_error_response(r, 502)
        h.eq(r.body, b"502 invalid response from upstream: chunk-size line too long (1 attempt)\n",
             "the 502's text")
        r = get("/thrice/kept-chunk-line-long")
        h.check_error_response(r, 502)
        h.eq(r.body, b"502 invalid response from upstream: chunk-size line too long (3 attempts)\n",
             "the 502's text after the kept 503s broke")
        f = h.access_fields(proxy.access_one("/thrice/kept-chunk-line-long"))
        h.eq((f.get("status"), f.get("note")),
             ("502", r.body.decode().rstrip("\n").replace(" ", "%20")), "logged status and note")

    for kind, (method, _raw) in NO_CONTENT_CL_TE.items():
        @t.check("Content-Length and Transfer-Encoding both on an answer without content (%s): 502, "
                 "never the two passed on" % kind)
        def _(kind=kind, method=method):
            path = "/once/%s" % kind
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request(method, path, "a.example", headers=[("Connection", "close")]))
                r = c.read_response(method=method)
            h.ok(r.header("Content-Length") is None or r.header("Transfer-Encoding") is None,
                 "the client got both Content-Length and Transfer-Encoding")
            h.eq(r.status, 502, "status")
            h.ok(r.body.startswith(b"502 invalid response from upstream: ") or method == "HEAD",
                 "the 502's text: %r" % r.body)
            settle()
            h.eq(len(bad.seen(path)), 1, "requests at the origin")

    for kind in RETRY_KINDS:
        @t.check("malformed response (%s) on a max_attempts 3 route: GET retried 3 times, POST sent once"
                 % kind)
        def _(kind=kind):
            path = "/thrice/get/%s" % kind
            r = get(path)
            h.check_error_response(r, 502)
            h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts for the GET")
            settle()
            h.eq(len(bad.seen(path)), 3, "GET requests at the origin")
            path = "/thrice/post/%s" % kind
            r = get(path, "--data-binary", "unconditional")
            h.check_error_response(r, 502)
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts for the POST")
            settle()
            h.eq(len(bad.seen(path)), 1, "POST requests at the origin")

    @t.check("gzip, chunked to an HTTP/1.0 client on a max_attempts 3 route: one 502 naming the "
             "transfer coding, not retried, not called unreachable")
    def _():
        path = "/thrice/h10/gzip-chunked"
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", path, "a.example", version="HTTP/1.0"))
            r = c.read_response()
        h.check_error_response(r, 502, ["transfer coding"])
        h.ok(b"unreachable" not in r.body, "the upstream answered, yet the 502 says %r" % r.body)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        settle()
        h.eq(len(bad.seen(path)), 1, "requests at the origin")
        path = "/thrice/h11/gzip-chunked"
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", path, "a.example", headers=[("Connection", "close")]))
            r = c.read_response()
        h.eq((r.status, r.header_all("Transfer-Encoding"), r.body), (200, ["gzip, chunked"], b"hello"),
             "HTTP/1.1: status, Transfer-Encoding, body as they came")

    for kind, what in (("late-bad-chunk", "a bad chunk size"),
                       ("late-chunk-garbage", "garbage where a chunk's CRLF belongs")):
        @t.check("%s 0.5s after the head went out: the client sees an incomplete response, never a clean one"
                 % what)
        def _(kind=kind):
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request("GET", "/once/%s" % kind, "a.example"))
                head = c.read_head()
                rest = c.read_to_close(timeout=10)
            if head.status == 502:
                return  # refused whole: also never a clean response
            h.eq(head.status, 200, "status")
            if head.header("Content-Length") is not None:
                h.ok(len(rest) < int(head.header("Content-Length")),
                     "a complete Content-Length body for a broken upstream body: %r" % rest)
            else:
                h.ok(b"0\r\n\r\n" not in rest, "the broken chunked body was terminated cleanly: %r" % rest)
            r = get("/once/%s?curl=1" % kind)
            h.ok(r.exit_code != 0, "curl exited 0: it took the broken response for a complete one (%r)" % r)

    @t.check("bytes after a complete response never reach the next request's client")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/thrice/extra-bytes", "a.example"))
            first = c.read_response()
            h.eq((first.status, first.body), (200, b"first"), "the complete first response")
            c.send(h.request("GET", "/thrice/good", "a.example"))
            second = c.read_response()
        h.eq((second.status, second.body), (200, b"fresh"), "the next request's own response")
        for i in range(3):
            r = get("/thrice/good?n=%d" % i)
            h.eq((r.status, r.body), (200, b"fresh"), "a later request's response")

    @t.check("a response nobody asked for, in on an idle pooled connection in the same pass as the next "
             "request, never reaches that request's client")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/once/stray-later", "a.example"))
            first = c.read_response()
            h.eq((first.status, first.body), (200, b"first"), "the complete first response")
            settle()  # its connection is in the pool now
            # stopped, the proxy reads neither the next request nor the
            # stray response behind it: both wait in the kernel, and are
            # readable in the same pass once it goes on
            os.kill(proxy.proc.pid, signal.SIGSTOP)
            try:
                # stopped for sure: a request read before the stop took
                # the connection while it was clean, and no proxy can
                # tell the stray sent then from its answer
                h.wait_until(lambda: proxy.proc_status()["State"].startswith("T"), 5,
                             "the proxy stopped")
                c.send(h.request("GET", "/once/good?after-stray", "a.example"))
                time.sleep(0.2)
                bad.stray_go.set()
                time.sleep(0.2)
            finally:
                os.kill(proxy.proc.pid, signal.SIGCONT)
            second = c.read_response()
        h.eq((second.status, second.body), (200, b"fresh"), "the next request's own response")

    @t.check("the proxy still serves a good response after all of that")
    def _():
        r = get("/once/good")
        h.eq((r.exit_code, r.status, r.body), (0, 200, b"fresh"), "curl exit, status, body")
        h.ok(proxy.alive(), "the proxy exited")


h.run(scenario, __doc__, timeout=100)
