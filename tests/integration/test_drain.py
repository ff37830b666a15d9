#!/usr/bin/env python3
"""Scenario: SIGTERM drains, then exits 0.

Client: raw connections to a sidecar listener. Proxy 1 (drain_timeout 10s):
one idle keep-alive connection that has finished a request; one whose
response is queued whole but not read yet, its last 128 KiB still in the
proxy (more than the kernel's buffers hold); one GET /delay/2 in flight; one GET /drain/retry waiting in a 1 s backoff after a
503. Then SIGTERM, and meanwhile a new connection to the listener and GET
/healthz on the admin listener. Proxy 2 (drain_timeout 1s): one GET
/delay/6 in flight, then SIGTERM.
Origin: /delay/N answers 200 "delayed" after N seconds; /drain/retry
answers 503, then 200.
Must hold: proxy 1 closes the idle connection at once and refuses new
connections, writes the unread response whole before closing its
connection, answers /healthz with 503 "draining\\n" while the requests run,
lets the slow request finish with its 200 and the waiting one retry and
finish with its 200 (Retry-Attempts: 2), closes those connections after
their responses, and exits 0 once they are done (about 2 s after SIGTERM,
well before drain_timeout). Proxy 2 exits 0 about 1 s after SIGTERM, closing
the unfinished request's connection, and resetting the connection of a
response whose tail still waited in the proxy, unread (never a clean close
after part of a response).
"""

import hashlib
import time

import harness as h
import origin as origin_mod

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: @DRAIN@
routes:
  - name: drain-retry
    match: { path_prefix: /drain/ }
    retry: { max_attempts: 2, initial_backoff: 1s, jitter: 0s }
"""


def scenario(t):
    origin = t.origin()
    origin.script("/drain/retry", [503, 200])
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, DRAIN="10s")
    port, admin = proxy.port(0), proxy.port(1)
    conns = {}
    t.defer(lambda: [c.close() for c in conns.values()])
    start = {}
    tail = {}

    @t.check("set-up: an idle keep-alive connection, an unread response, a slow request and "
             "one in backoff")
    def _():
        conns["tail"], tail["size"], _ = h.response_tail_in_proxy(proxy, "drain-tail")
        conns["idle"] = h.RawConn(port)
        conns["idle"].send(h.request("GET", "/status/200", "app.example"))
        h.eq(conns["idle"].read_response().status, 200, "the idle connection's request")
        conns["slow"] = h.RawConn(port)
        conns["slow"].send(h.request("GET", "/delay/2", "app.example"))
        conns["retry"] = h.RawConn(port)
        conns["retry"].send(h.request("GET", "/drain/retry", "app.example"))
        origin.wait_for(lambda o: o.requests_for("/delay/2") and o.requests_for("/drain/retry"),
                        5 * h.SLOW, "the slow request and the first try of the retried one")
        start["sigterm"] = time.monotonic()
        proxy.terminate()

    @t.check("after SIGTERM: the idle connection is closed at once, new connections are refused")
    def _():
        h.ok(conns["idle"].closed_within(1 * h.SLOW), "the idle keep-alive connection stayed open")
        h.wait_until(lambda: not h.port_accepts(port), 1 * h.SLOW, "the listener to close")

    @t.check("the response queued but not yet read goes out whole, then its connection closes")
    def _():
        c = conns["tail"]
        got = c.read_exact(tail["size"], timeout=10 * h.SLOW)
        h.eq(hashlib.sha256(got).hexdigest(), origin_mod.pattern_sha256(tail["size"]), "body digest")
        h.ok(c.closed_within(2 * h.SLOW), "the connection stayed open after the response")

    @t.check("during the drain /healthz answers 503 'draining\\n'")
    def _():
        r = h.curl("http://127.0.0.1:%d/healthz" % admin, timeout=5)
        h.eq((r.status, r.body), (503, b"draining\n"), "status, body")
        h.ok(proxy.alive(), "the proxy had exited already")

    @t.check("the in-flight request finishes with its 200, then its connection closes")
    def _():
        r = conns["slow"].read_response(timeout=10 * h.SLOW)
        h.eq((r.status, r.body), (200, b"delayed\n"), "status, body")
        h.ok(conns["slow"].closed_within(2 * h.SLOW), "the connection stayed open after the response")

    @t.check("the request waiting in backoff is retried and finishes with its 200")
    def _():
        r = conns["retry"].read_response(timeout=10 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq(len(origin.requests_for("/drain/retry")), 2, "tries at the origin")

    @t.check("the proxy exits 0 once they are done, well before drain_timeout")
    def _():
        code = proxy.proc.wait(timeout=15 * h.SLOW)
        took = time.monotonic() - start["sigterm"]
        h.eq(code, 0, "exit code")
        h.ok(took < 6 * h.SLOW, "exit took %.1fs after SIGTERM" % took)
        h.ok(proxy.wait_log(r"draining"), "no 'draining' log line")

    @t.check("every request's access line is on stderr once the proxy has exited")
    def _():
        # read once, without waiting: the process is gone, so what is not
        # in the file now was lost
        lines = [h.access_fields(ln) for ln in proxy.stderr_lines()]
        lines = [f for f in lines if f and f.get("target")]
        targets = sorted((f["target"], f.get("status"), f.get("attempts")) for f in lines)
        # /bytes/: the unread response, and those that sized it
        h.eq([x for x in targets if not x[0].startswith("/bytes/")],
             [("/delay/2", "200", "1"), ("/drain/retry", "200", "2"),
              ("/status/200", "200", "1")], "access lines (target, status, attempts)")
        h.eq(len([x for x in targets if x[0] == conns["tail"].tail_target]), 1,
             "access lines of the unread response")

    t.stop_proxy(proxy)

    slow = t.proxy(CONFIG, ORIGIN=origin.port, DRAIN="1s")

    @t.check("drain_timeout 1s: a longer request is cut off and the proxy exits 0 after about 1 s")
    def _():
        # a response whose tail waits in the proxy, unread, when the time is up
        unread, unread_size, _ = h.response_tail_in_proxy(slow, "cut-tail")
        c = h.RawConn(slow.port(0))
        conns["cut"] = c
        c.send(h.request("GET", "/delay/6", "app.example"))
        origin.wait_for(lambda o: o.requests_for("/delay/6"), 5 * h.SLOW, "the request at the origin")
        sent = time.monotonic()
        slow.terminate()
        code = slow.proc.wait(timeout=10 * h.SLOW)
        took = time.monotonic() - sent
        h.eq(code, 0, "exit code")
        h.ok(0.8 <= took <= 3 * h.SLOW, "exit took %.2fs after SIGTERM (drain_timeout 1s)" % took)
        h.ok(c.closed_within(1), "the cut-off request's connection stayed open")
        h.ok(b"delayed" not in bytes(c.buf), "the cut-off request got the origin's answer")
        slow.wait_log(r"drain_timeout")
        # the cut response ends with a reset, never a clean close after part of it
        data, end = h.read_to_end(unread.sock)
        got = len(unread.buf) + len(data)
        h.ok(got < unread_size, "the unread response came whole (%d bytes)" % got)
        h.eq(end, "RST", "how the unread response's connection ended after %d of %d bytes"
             % (got, unread_size))


h.run(scenario, __doc__)
