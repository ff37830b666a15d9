#!/usr/bin/env python3
"""Scenario: interim (1xx) responses from an upstream, forwarded to an
HTTP/1.1 client as RFC 9110 section 15.2 says a proxy must.

Client: raw sockets to a sidecar listener whose upstream is a raw socket
server of this file. Paths under /once/ use a route with max_attempts 1,
/thrice/ one with max_attempts 3, /hedged/ one with a hedge after 300ms.
Origin: a raw socket server that answers each request as its last path
segment says: "hints" sends a 103 Early Hints (a Link field, hop-by-hop
fields and a Connection option) and then a 200; "processing" a 100 and a
102 and then the 200; "continue" a 100 (unasked, or asked by a client
whose kept body the proxy answers Expect for itself) and then the 200; "plain" a 200 after 0.3 s; "retry" a 103 and a 503
on the first request, a 103 and a 200 on the next; "hedge" a 103 and
nothing more on the first request, a 103 and a 200 on the next; "resume"
a 200 cut after 5 bytes, then a 103 and the 206 with the rest; "flood"
3,000 103s of 4 KiB and then the 200; "endless" 103s and "endless-continue"
100s, each sent over and over with no final response, until the proxy
closes the connection.
Must hold: an HTTP/1.1 client gets the 103 before the 200, byte for byte
the upstream's status line and fields minus the hop-by-hop ones, with Via
and Retry-Attempts; the final response is untouched and logged with status
200; an upstream's 100 and 102 are forwarded, the 100 as any 1xx (the
proxy did not ask for it: for a body it keeps to re-send it answers Expect
itself and does not pass it on), so a client that sent Expect with such a
body gets the proxy's 100 and then the upstream's; an HTTP/1.0 client never gets a 1xx; a 103 from a try
whose 503 is retried reaches the client, followed by the next try's 103 and
its 200 (Retry-Attempts 2), logged 200; a hedged request forwards each
try's 103, then the winner's 200; a resume's 103 (a 200 broken after 5
of its 10 bytes, resumed with a 103 and a 206) is not put inside the body
the client is reading; pipelined requests get their responses
in order, a 103 of the second never before the first's response; a request
inside an intercepted tunnel (a forward proxy intercepting TLS to the origin
served over TLS) gets its 103 as a plain one does; a client that does not
read while its upstream sends 12 MiB of 103s (under a max_header_bytes of
16 MiB) gets some of them, not all (those past 256 KiB queued for it are
dropped), then the 200 whole; an upstream whose 1xx responses of one try
go past max_header_bytes (64 KiB by default) without a final one, 103s or
100s, is an invalid response: a 502 naming the interim responses long
before try_timeout, logged as a malformed try with that text as its note,
and a GET on /thrice/ is retried as after any invalid response (3 requests
at the origin, Retry-Attempts 3).
"""

import os
import ssl
import time

import harness as h
from rawserver import RawServer, read_request

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
limits:
  try_timeout: 3s
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
  - name: hedged
    match: { path_prefix: /hedged/ }
    retry:
      max_attempts: 2
      hedge: { after: 300ms, max: 1 }
      budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

# the flood of 103s fits within the interim responses one try may bring
FLOOD_CONFIG = CONFIG.replace("  try_timeout: 3s\n", "  try_timeout: 3s\n  max_header_bytes: 16MiB\n")

# a forward proxy that intercepts TLS to localhost
INTERCEPT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
defaults:
  retry:
    max_attempts: 1
"""

HINTS = (b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n"
         b"Connection: X-Hop\r\nX-Hop: a\r\nKeep-Alive: timeout=5\r\nLink: </app.js>; rel=preload\r\n\r\n")
# what the client must get of it
HINTS_OUT = (b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n"
             b"Link: </app.js>; rel=preload\r\nVia: 1.1 retryproxy\r\nRetry-Attempts: %d\r\n\r\n")
FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
# 103s of 4 KiB each, 12 MiB in all: more than the kernel's buffers and
# the proxy's 256 KiB mark for a client that does not read
FLOOD = 3000


class InterimOrigin(RawServer):
    """The raw upstream; every request is recorded by target."""

    def __init__(self, tls=None):
        self.requests = []
        self.flood_sent = False
        self.tls = tls  # an ssl.SSLContext: serve TLS
        super().__init__(conn_timeout=10)

    def seen(self, target_part):
        with self._lock:
            return [r for r in self.requests if target_part in r]

    def serve(self, conn, cid):
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        buf = b""
        while True:
            got = read_request(conn, buf)
            if got is None:
                return
            _method, target, buf = got
            with self._lock:
                self.requests.append(target)
                n = len([r for r in self.requests if r == target])
            kind = target.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            if not self._answer(conn, kind, n):
                return

    def _answer(self, conn, kind, n):
        """Answer request number n for its target; False when the
        connection must end."""
        if kind == "hints":
            conn.sendall(HINTS)
            time.sleep(0.1)
            conn.sendall(FINAL)
            return True
        if kind == "processing":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n")
            time.sleep(0.1)
            conn.sendall(FINAL)
            return True
        if kind == "continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\nX-From: origin\r\n\r\n")
            time.sleep(0.1)
            conn.sendall(FINAL)
            return True
        if kind == "plain":
            time.sleep(0.3)
            conn.sendall(FINAL)
            return True
        if kind == "retry":
            conn.sendall(HINTS)
            if n == 1:
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
            else:
                conn.sendall(FINAL)
            return True
        if kind == "hedge":
            conn.sendall(HINTS)
            if n == 1:
                time.sleep(3)
                return False
            conn.sendall(FINAL)
            return True
        if kind == "resume":
            if n == 1:
                conn.sendall(b"HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nETag: \"v1\"\r\n"
                             b"Content-Length: 10\r\n\r\nhello")
                time.sleep(0.2)
                return False
            conn.sendall(HINTS)
            conn.sendall(b"HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\n"
                         b"Content-Range: bytes 5-9/10\r\nContent-Length: 5\r\n\r\nworld")
            return True
        if kind in ("endless", "endless-continue"):
            interim = HINTS if kind == "endless" else b"HTTP/1.1 100 Continue\r\n\r\n"
            # until the proxy gives up on the try and closes; 10 s at most
            stop = time.monotonic() + 10
            while time.monotonic() < stop:
                conn.sendall(interim * 20)
                time.sleep(0.002)
            return False
        if kind == "flood":
            hint = (b"HTTP/1.1 103 Early Hints\r\nLink: </%s>; rel=preload\r\n\r\n"
                    % (b"a" * 4000))
            for _ in range(FLOOD):
                conn.sendall(hint)
            with self._lock:
                self.flood_sent = True
            conn.sendall(FINAL)
            return True
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return True


def scenario(t):
    origin = InterimOrigin()
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def final_ok(r, attempts):
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (200, b"hello", str(attempts)),
             "final status, body, Retry-Attempts")

    def logged_status(tag):
        entry = proxy.access_one(tag)
        return entry.get("status") if isinstance(entry, dict) else h.access_fields(entry).get("status")

    @t.check("HTTP/1.1 client: the 103 comes first, minus hop-by-hop fields; the 200 follows, logged 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/once/hints?tag=h11", "a.example"))
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 1, "the interim response as forwarded")
            final_ok(c.read_response(skip_1xx=False), 1)
        h.eq(str(logged_status("tag=h11")), "200", "logged status")

    continue_out = b"HTTP/1.1 100 Continue\r\nX-From: origin\r\nVia: 1.1 retryproxy\r\nRetry-Attempts: 1\r\n\r\n"

    @t.check("an upstream's 100 and 102 are forwarded, in order")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/once/processing", "a.example"))
            h.eq(c.read_until(b"\r\n\r\n"),
                 b"HTTP/1.1 100 Continue\r\nVia: 1.1 retryproxy\r\nRetry-Attempts: 1\r\n\r\n",
                 "the first head")
            h.eq(c.read_until(b"\r\n\r\n"),
                 b"HTTP/1.1 102 Processing\r\nVia: 1.1 retryproxy\r\nRetry-Attempts: 1\r\n\r\n",
                 "the second head")
            final_ok(c.read_response(skip_1xx=False), 1)

    @t.check("an upstream's unasked 100 reaches a client that sent no Expect, then the 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/once/continue?tag=c1", "a.example"))
            h.eq(c.read_until(b"\r\n\r\n"), continue_out, "the upstream's 100 as forwarded")
            final_ok(c.read_response(skip_1xx=False), 1)
        h.eq(str(logged_status("tag=c1")), "200", "logged status")

    @t.check("a client that sent Expect with a kept body: the proxy's own 100, then the upstream's, "
             "then the 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("PUT", "/thrice/continue?tag=c2", "a.example",
                             headers=[("Expect", "100-continue"), ("Content-Length", "5")]))
            h.eq(c.read_until(b"\r\n\r\n"), b"HTTP/1.1 100 Continue\r\n\r\n", "the proxy's 100")
            c.send(b"12345")
            h.eq(c.read_until(b"\r\n\r\n"), continue_out, "the upstream's 100 as forwarded")
            final_ok(c.read_response(skip_1xx=False), 1)
        h.eq(str(logged_status("tag=c2")), "200", "logged status")

    @t.check("HTTP/1.0 client: no 1xx at all, the 200 first")
    def _():
        for path in ("/once/hints?tag=h10", "/once/processing?tag=h10", "/once/continue?tag=h10"):
            with h.RawConn(proxy.port(), timeout=10) as c:
                c.send(h.request("GET", path, "a.example", version="HTTP/1.0"))
                r = c.read_response(skip_1xx=False)
                h.eq((r.status, r.body), (200, b"hello"), "the first response for %s" % path)
                h.ok(c.closed_within(5), "the HTTP/1.0 connection closes")
                h.eq(bytes(c.buf), b"", "bytes after the response")

    @t.check("a 103 then a retried 503: the client gets both tries' 103, then the second try's 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/thrice/retry", "a.example"))
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 1, "the first try's interim response")
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 2, "the second try's interim response")
            final_ok(c.read_response(skip_1xx=False), 2)
        h.eq(len(origin.seen("/thrice/retry")), 2, "requests at the origin")
        h.eq(str(logged_status("/thrice/retry")), "200", "logged status")

    @t.check("hedged: each try's 103 is forwarded, then the hedge's 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/hedged/hedge", "a.example"))
            # Retry-Attempts counts the tries made when each came: the
            # first try's may come after the hedge started on a busy box
            heads = sorted(c.read_until(b"\r\n\r\n") for _ in range(2))
            h.ok(heads in ([HINTS_OUT % 1, HINTS_OUT % 2], [HINTS_OUT % 2] * 2),
                 "the two tries' interim responses: %r" % heads)
            final_ok(c.read_response(skip_1xx=False), 2)
        h.eq(str(logged_status("/hedged/hedge")), "200", "logged status")

    @t.check("a resumed download: the resume's 103 never lands inside the body the client reads")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/thrice/resume", "a.example"))
            r = c.read_response(skip_1xx=False)
            h.eq((r.status, r.body), (200, b"helloworld"), "status, the spliced body")
        h.eq(len(origin.seen("/thrice/resume")), 2, "requests at the origin")

    @t.check("pipelined: the second request's 103 never comes before the first's response")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/once/plain?tag=p1", "a.example")
                   + h.request("GET", "/once/hints?tag=p2", "a.example")
                   + h.request("GET", "/once/hints?tag=p3", "a.example", headers=[("Connection", "close")]))
            final_ok(c.read_response(skip_1xx=False), 1)
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 1, "the second request's interim response")
            final_ok(c.read_response(skip_1xx=False), 1)
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 1, "the third request's interim response")
            final_ok(c.read_response(skip_1xx=False), 1)
            h.ok(c.closed_within(5), "the connection closes after Connection: close")
            h.eq(bytes(c.buf), b"", "bytes after the last response")

    @t.check("a stream of 103s to a client that does not read: those past 256 KiB queued are "
             "dropped, the upstream is still read, the 200 comes whole")
    def _():
        flooded = t.proxy(FLOOD_CONFIG, ORIGIN=origin.port)
        with h.RawConn(flooded.port(), timeout=10, rcvbuf=4096) as c:
            c.send(h.request("GET", "/once/flood", "a.example"))
            # the proxy keeps reading the upstream while the client does not
            h.wait_until(lambda: origin.flood_sent, 10 * h.SLOW, "the origin to send every 103")
            hints = 0
            while True:
                r = c.read_response(skip_1xx=False)
                if r.status != 103:
                    break
                hints += 1
            final_ok(r, 1)
        h.ok(0 < hints < FLOOD, "some 103s reach the client, not all %d (got %d)" % (FLOOD, hints))

    for kind in ("endless", "endless-continue"):
        @t.check("1xx responses over max_header_bytes with no final one (%s): a 502 naming them, "
                 "at once, logged malformed; a GET on /thrice/ retried" % kind)
        def _(kind=kind):
            path = "/once/%s?tag=%s" % (kind, kind)
            with h.RawConn(proxy.port(), timeout=10) as c:
                start = time.monotonic()
                c.send(h.request("GET", path, "a.example"))
                r = c.read_response()
                elapsed = time.monotonic() - start
            h.check_error_response(r, 502)
            h.ok(r.body.startswith(b"502 invalid response from upstream: interim (1xx) responses "
                                   b"over max_header_bytes"), "the 502's text: %r" % r.body)
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
            h.ok(elapsed < 2, "the 502 took %.1fs: the try ran to try_timeout (3s)" % elapsed)
            f = h.access_fields(proxy.access_one("tag=%s" % kind))
            h.eq((f.get("status"), f.get("tries")), ("502", "malformed"), "logged status and tries")
            h.eq(f.get("note"), r.body.decode().rstrip("\n").replace(" ", "%20"), "logged note")

            path = "/thrice/%s" % kind
            r = h.fetch(proxy.port(), "GET", path, "a.example", timeout=15)
            h.check_error_response(r, 502)
            h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts on /thrice/")
            h.ok(r.elapsed < 5, "the retried 502 took %.1fs" % r.elapsed)
            h.eq(len(origin.seen(path)), 3, "requests at the origin")

    @t.check("inside an intercepted tunnel: the 103 comes first, then the 200")
    def _():
        certs = t.certs()
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certs.server, certs.server_key)
        secure = InterimOrigin(tls)
        t.defer(secure.stop)
        local = t.local_ca()
        mitm = t.proxy(INTERCEPT_CONFIG, TESTCA=certs.ca, LOCALCA=local)
        with h.RawConn.over(h.intercepted_tls(mitm.port(), "localhost", secure.port,
                                              os.path.join(local, "ca.pem"))) as c:
            c.send(h.request("GET", "/once/hints", "localhost:%d" % secure.port))
            h.eq(c.read_until(b"\r\n\r\n"), HINTS_OUT % 1, "the interim response as forwarded")
            final_ok(c.read_response(skip_1xx=False), 1)

    @t.check("the proxy still serves")
    def _():
        r = h.fetch(proxy.port(), "GET", "/once/plain", "a.example")
        h.eq((r.status, r.body), (200, b"hello"), "status, body")
        h.ok(proxy.alive(), "the proxy exited")


h.run(scenario, __doc__, timeout=60)
