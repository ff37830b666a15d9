#!/usr/bin/env python3
"""Scenario: SIGTERM drains, then exits 0.

Client: raw connections to a sidecar listener. Proxy 1 (drain_timeout 10s):
one idle keep-alive connection that has finished a request; another whose
request came with a stray CRLF after it (RFC 9112 section 2.2: old clients
send one after a POST body; nothing of a next request); one whose
response is queued whole but not read yet, its last 128 KiB still in the
proxy (more than the kernel's buffers hold); one GET /delay/2 in flight; one GET /drain/retry waiting in a 1 s backoff after a
503. Then SIGTERM, and meanwhile a new connection to the listener and GET
/healthz on the admin listener. Proxy 2 (drain_timeout 1s, pool_max_idle 0,
so that every first try is on a new connection): one GET /delay/6 in
flight, then SIGTERM.
Origin: /delay/N answers 200 "delayed" after N seconds; /drain/retry
answers 503, then 200.
Must hold: proxy 1 closes the idle connections at once (the one with the
stray CRLF too: empty lines are not a request begun) and refuses new
connections, writes the unread response whole before closing its
connection, answers /healthz with 503 "draining\\n" while the requests run,
lets the slow request finish with its 200 and the waiting one retry and
finish with its 200 (Retry-Attempts: 2), closes those connections after
their responses, and exits 0 once they are done (about 2 s after SIGTERM,
well before drain_timeout). Proxy 2 (drain_timeout 1s: no try starts after
0.9 s) answers a request head begun and still partial with a 408 at
0.9 s, logged with its method and target, and closes its connection (an
idle connection, nothing begun, closes silently at SIGTERM as above), and
so does a PUT whose body, kept to be re-sent, stopped arriving before any
try (408, as at client_timeout, rather than a bare close at the end); it
answers at SIGTERM a request in a 5 s backoff with the 503 it kept and
one in backoff after a reset with a 503 of its own naming the shutdown;
one whose 503 arrives 0.4 s into the drain gets it then; one held for a
down upstream (health down_after 1) gets 503 at 0.9 s, and so does, with
the 503 it kept, one whose retry's try hangs at the origin (the try
cancelled, not cut at 1 s with nothing: Retry-Attempts 2); each is logged
gave_up=deadline note=draining and none is tried again. A request whose
retry's try still hangs after a reset, nothing held, is cut at 1 s and
logged status 0, gave_up=deadline note=drain_timeout: the drain ended its
retrying, not a client that left (never gave_up=client_gone). It exits 0 about
1 s after SIGTERM, closing the unfinished request's connection, and
resetting the connection of a response whose tail still waited in the
proxy, unread (never a clean close after part of a response).
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
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@GONE@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: @DRAIN@
health: { down_after: 1, probe_interval: 200ms, hold: true }
routes:
  - name: drain-retry
    match: { path_prefix: /drain/ }
    retry: { max_attempts: 2, initial_backoff: 1s, jitter: 0s }
  - name: long-backoff
    match: { path_prefix: /long/ }
    retry: { max_attempts: 3, initial_backoff: 5s, jitter: 0s }
  - name: long-backoff-reset
    match: { path_prefix: /reset/ }
    retry: { max_attempts: 3, initial_backoff: 5s, jitter: 0s }
  - name: quick-retry
    match: { path_prefix: /quick/ }
    retry: { max_attempts: 3, initial_backoff: 50ms, jitter: 0s }
"""


def scenario(t):
    origin = t.origin()
    origin.script("/drain/retry", [503, 200])
    gone = h.closed_port()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, GONE=gone, DRAIN="10s")
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
        conns["crlf"] = h.RawConn(port)
        conns["crlf"].send(h.request("POST", "/status/200", "app.example", body=b"ab") + b"\r\n")
        h.eq(conns["crlf"].read_response().status, 200, "the request with a stray CRLF after it")
        conns["slow"] = h.RawConn(port)
        conns["slow"].send(h.request("GET", "/delay/2", "app.example"))
        conns["retry"] = h.RawConn(port)
        conns["retry"].send(h.request("GET", "/drain/retry", "app.example"))
        origin.wait_for(lambda o: o.requests_for("/delay/2") and o.requests_for("/drain/retry"),
                        5 * h.SLOW, "the slow request and the first try of the retried one")
        start["sigterm"] = time.monotonic()
        proxy.terminate()

    @t.check("after SIGTERM: the idle connections are closed at once, new connections are refused")
    def _():
        h.ok(conns["idle"].closed_within(1 * h.SLOW), "the idle keep-alive connection stayed open")
        h.ok(conns["crlf"].closed_within(1 * h.SLOW),
             "the idle connection with a stray CRLF stayed open (until drain_timeout)")
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
              ("/status/200", "200", "1"), ("/status/200", "200", "1")],
             "access lines (target, status, attempts)")
        h.eq(len([x for x in targets if x[0] == conns["tail"].tail_target]), 1,
             "access lines of the unread response")

    t.stop_proxy(proxy)

    # no idle pooled connections: /reset/head's first try on one would be
    # a stale pooled connection, tried again at once, not left in backoff
    slow = t.proxy(CONFIG.replace("  drain_timeout: @DRAIN@\n",
                                  "  drain_timeout: @DRAIN@\n  pool_max_idle: 0\n"),
                   ORIGIN=origin.port, GONE=gone, DRAIN="1s")

    waiting = {}

    @t.check("drain_timeout 1s, set-up: a slow request, an unread response, two requests in a "
             "5 s backoff, one whose retryable answer comes during the drain, one held")
    def _():
        # a response whose tail waits in the proxy, unread, when the time is up
        waiting["unread"], waiting["unread_size"], _ = h.response_tail_in_proxy(slow, "cut-tail")
        origin.script("/long/kept", ["/status/503?body=kept+503%0A"])
        # held at the origin until 0.4 s after SIGTERM (a fixed delay from
        # the first try let the 503 come before SIGTERM when the set-up was
        # slow: it then waited in backoff too, and the gauges below never
        # read two until a retry had started)
        origin.script("/long/late", ["/status/503?hold=late&body=late+503%0A"])
        # a 503 kept while the retry's try hangs
        origin.script("/quick/inflight", ["/status/503?body=inflight+503%0A", "/hang"])
        # nothing kept: a reset, then a retry whose try hangs
        origin.script("/quick/bare", ["/reset/request", "/hang"])
        for name, port, target in (("cut", 0, "/delay/6"), ("kept", 0, "/long/kept"),
                                   ("reset", 0, "/reset/head"), ("late", 0, "/long/late"),
                                   ("held", 2, "/held"), ("inflight", 0, "/quick/inflight"),
                                   ("bare", 0, "/quick/bare")):
            conns[name] = h.RawConn(slow.port(port))
            conns[name].send(h.request("GET", target, "app.example"))
        # a request head begun and never finished
        conns["partial"] = h.RawConn(slow.port(0))
        conns["partial"].send(b"GET /partial HTTP/1.1\r\nHost: app.example\r\nX-A: b")
        # a PUT whose body (kept to be re-sent) stopped arriving: no try yet
        conns["partial-body"] = h.RawConn(slow.port(0))
        conns["partial-body"].send(b"PUT /partial-body HTTP/1.1\r\nHost: app.example\r\n"
                                   b"Content-Length: 100\r\n\r\nonly part")
        origin.wait_for(lambda o: all(o.requests_for(p) for p in
                                      ("/delay/6", "/long/kept", "/reset/head", "/long/late")),
                        5 * h.SLOW, "the first tries at the origin")
        for path in ("/quick/inflight", "/quick/bare"):
            origin.wait_for(lambda o: len(o.requests_for(path)) == 2, 5 * h.SLOW,
                            "the retry of %s at the origin" % path)

        def gauges():
            m = h.curl("http://127.0.0.1:%d/metrics" % slow.port(1), check=True).body.decode()
            return (h.metric(m, "retryproxy_backoff_pending"),
                    h.metric(m, "retryproxy_held_requests"))
        h.wait_until(lambda: gauges() == (2.0, 1.0), 5 * h.SLOW,
                     "two requests in backoff and one held")
        waiting["sigterm"] = time.monotonic()
        slow.terminate()
        release = threading.Timer(0.4, origin.gate("late").release)
        release.start()
        t.defer(release.cancel)

    @t.check("a retry that would start after the drain gives up at SIGTERM: the kept 503, else "
             "503 naming the shutdown")
    def _():
        r = conns["kept"].read_response(timeout=5 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (503, b"kept 503\n", "1"),
             "status, body, Retry-Attempts")
        h.ok(took < 0.6, "answered %.2fs after SIGTERM, not at the drain's end" % took)
        r = conns["reset"].read_response(timeout=5 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        h.ok(b"shutting down" in r.body, "the 503's body names the shutdown: %r" % r.body)

    @t.check("a retry decided during the drain that would start after it gives up at once")
    def _():
        r = conns["late"].read_response(timeout=5 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.eq((r.status, r.body), (503, b"late 503\n"), "status, body")
        h.ok(took < 0.8, "answered %.2fs after SIGTERM, not at the drain's end" % took)

    @t.check("a held request is answered 503 before drain_timeout, not cut")
    def _():
        r = conns["held"].read_response(timeout=5 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        h.ok(b"shutting down" in r.body, "the 503's body names the shutdown: %r" % r.body)
        # the 503 itself says it was answered, not cut: the upper bound only
        # keeps it near the drain's end, with room for a loaded machine
        h.ok(0.7 <= took <= 1.0 + 0.5 * h.SLOW,
             "answered %.2fs after SIGTERM (drain_timeout 1s)" % took)
        h.ok(conns["held"].closed_within(1 * h.SLOW), "the connection stayed open after it")

    @t.check("a request whose retry's try is in flight gets the 503 it kept before "
             "drain_timeout, not a cut")
    def _():
        r = conns["inflight"].read_response(timeout=5 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (503, b"inflight 503\n", "2"),
             "status, body, Retry-Attempts")
        h.ok(0.7 <= took <= 1.0 + 0.5 * h.SLOW,
             "answered %.2fs after SIGTERM (drain_timeout 1s)" % took)

    def answered_408(name, method, words):
        """The connection conns[name] gets a 408 saying words near
        drain_timeout, then closes; one access line, nothing upstream."""
        c = conns[name]
        r = c.read_response(timeout=5 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.check_error_response(r, 408, words)
        h.eq(r.header("Connection"), "close", "Connection")
        h.ok(0.7 <= took <= 1.0 + 0.5 * h.SLOW,
             "answered %.2fs after SIGTERM (drain_timeout 1s)" % took)
        h.ok(c.closed_within(1 * h.SLOW), "the connection stayed open after the 408")
        f = [f for f in (h.access_fields(ln) for ln in slow.stderr_lines())
             if f and f.get("target") == "/" + name]
        h.eq([(x.get("method"), x.get("status")) for x in f], [(method, "408")],
             "access lines of /%s" % name)
        h.eq(origin.requests_for("/" + name), [], "requests for /%s at the origin" % name)

    @t.check("a request head still partial near drain_timeout gets 408 before the drain ends, "
             "logged with its method and target, then its connection closes")
    def _():
        answered_408("partial", "GET", ("request head not complete",))

    @t.check("a kept request body still partial near drain_timeout gets 408 before the drain "
             "ends, as at client_timeout, logged, then its connection closes")
    def _():
        answered_408("partial-body", "PUT", ("request body not complete",))

    @t.check("drain_timeout 1s: a longer request is cut off and the proxy exits 0 after about 1 s")
    def _():
        c = conns["cut"]
        code = slow.proc.wait(timeout=10 * h.SLOW)
        took = time.monotonic() - waiting["sigterm"]
        h.eq(code, 0, "exit code")
        h.ok(0.8 <= took <= 3 * h.SLOW, "exit took %.2fs after SIGTERM (drain_timeout 1s)" % took)
        h.ok(c.closed_within(1), "the cut-off request's connection stayed open")
        h.ok(b"delayed" not in bytes(c.buf), "the cut-off request got the origin's answer")
        slow.wait_log(r"drain_timeout")
        # the cut response ends with a reset, never a clean close after part of it
        unread, unread_size = waiting["unread"], waiting["unread_size"]
        data, end = h.read_to_end(unread.sock)
        got = len(unread.buf) + len(data)
        h.ok(got < unread_size, "the unread response came whole (%d bytes)" % got)
        h.eq(end, "RST", "how the unread response's connection ended after %d of %d bytes"
             % (got, unread_size))

    @t.check("the answers given for the drain are logged gave_up=deadline note=draining, and "
             "the retries never reached the origin")
    def _():
        lines = {f["target"]: f for f in (h.access_fields(ln) for ln in slow.stderr_lines())
                 if f and f.get("target")}
        for target in ("/long/kept", "/reset/head", "/long/late", "/held", "/quick/inflight"):
            f = lines.get(target, {})
            h.eq((f.get("status"), f.get("gave_up"), f.get("note")), ("503", "deadline", "draining"),
                 "access line of %s" % target)
        for target in ("/long/kept", "/reset/head", "/long/late"):
            h.eq(len(origin.requests_for(target)), 1, "tries of %s at the origin" % target)
        h.eq(lines.get("/quick/inflight", {}).get("tries"), "503 -> wait 50ms -> cancelled",
             "the trail of /quick/inflight")
        h.eq(len(origin.requests_for("/quick/inflight")), 2, "tries of /quick/inflight")
        f = lines.get("/quick/bare", {})
        h.eq((f.get("status"), f.get("gave_up"), f.get("note"), f.get("tries")),
             ("0", "deadline", "drain_timeout", "reset -> wait 50ms -> cancelled"),
             "access line of /quick/bare, cut at drain_timeout")


h.run(scenario, __doc__)
