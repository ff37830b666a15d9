#!/usr/bin/env python3
"""Scenario: retryable response statuses, and which statuses are retryable.

Client: GETs (and a POST) through a forward proxy (raw sockets, so the status line's
reason phrase can be read) to origin paths scripted per try.
Origin: answers each try of a path with the next scripted status; tries are
told apart by a per-try X-Try header, reason phrase and body. Defaults:
retry.on as built in (5xx, 408, 429, failures), max_attempts 3, backoff
100ms doubling, no jitter; retry_response_buffer is 1KiB. Routes by path:
/r404/ retries on [404, 503]; /codes/ on [500, 502] only; /only503/ on [503]
only; /r202/ on [202, 503].
Must hold: 503, 503, 200 gives the client the 200 with Retry-Attempts: 3,
and the origin sees exactly 3 requests; 503 on every try gives the client
the last 503 exactly as the origin sent it on the third try (reason phrase,
headers in order, body) plus Via and Retry-Attempts: 3, and the origin sees
exactly 3; any 5xx, 408 and 429 are retried on the default route, a 404 is
not; a 404 is retried on a route that lists it; a 501 and a 503 are not
retried on a route with on: [500, 502] while its 502 is; a 500 passes at
once on a route with on: [503]; a 202 is retried on a route that lists
it (the operator may know it means "not ready yet"); a retryable 503 whose body is over
retry_response_buffer (by Content-Length or chunked) is passed on as final
at once, body whole, while one of exactly that size is retried; one such
that would not have been retried anyway (a POST's, the last try's) is
logged with that reason (gave_up=not_idempotent, gave_up=attempts); a kept
chunked or close-delimited 503 is given back with its body whole (de-chunked
for an HTTP/1.0 client); for HEAD the last 503 head comes back without a
body; after a given-back 503 the client connection serves another request,
and a request pipelined behind one in backoff is answered after it, in
order; 503s that close their connection are retried on new connections;
a kept 503 without a Date given back after later tries timed out carries
the Date of the second it came, not of the second it was given back (RFC
9110 section 6.6.1).
"""

import email.utils
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  retry_response_buffer: 1KiB
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    multiplier: 2
    max_backoff: 1s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: list-404
    match: { path_prefix: /r404/ }
    retry: { on: [404, 503] }
  - name: codes
    match: { path_prefix: /codes/ }
    retry: { on: [500, 502] }
  - name: only503
    match: { path_prefix: /only503/ }
    retry: { on: [503] }
  - name: accepted
    match: { path_prefix: /r202/ }
    retry: { on: [202, 503] }
  - name: slowtries
    match: { path_prefix: /slowtries/ }
    retry: { try_timeout: 1s }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def seen(path, settle=0.3):
        """Requests the origin got for path, after a moment in which a
        wrongly scheduled extra try would show."""
        time.sleep(settle * h.SLOW)
        return len(origin.requests_for(path))

    def expect(path, steps, status, attempts, what):
        origin.script(path, steps)
        r = h.fetch(proxy.port(), "GET", origin.url(path), host)
        h.eq(r.status, status, "%s: status (body %r)" % (what, r.body))
        h.eq(r.header("Retry-Attempts"), str(attempts), "%s: Retry-Attempts" % what)
        h.eq(seen(path), attempts, "%s: requests the origin saw" % what)
        return r

    @t.check("GET scripted 503, 503, 200 -> 200 with Retry-Attempts: 3; origin saw exactly 3")
    def _():
        r = expect("/s/ok", [503, 503, 200], 200, 3, "503,503,200")
        h.eq(r.body, b"status 200\n", "body of the 200")
        h.eq(r.header_all("Retry-Attempts"), ["3"], "exactly one Retry-Attempts field")
        line = h.access_fields(proxy.access_one("/s/ok"))
        h.eq((line["status"], line["attempts"]), ("200", "3"), "access line status, attempts")

    @t.check("503 on every try -> the client gets the third 503 unchanged, Retry-Attempts: 3")
    def _():
        r = expect("/s/last", [
            "/status/503?hdr=X-Try:1&reason=First%20Unavailable&body=try-one",
            "/status/503?hdr=X-Try:2&reason=Second%20Unavailable&body=try-two",
            "/status/503?hdr=X-Try:3&reason=Third%20Unavailable&body=try-three",
        ], 503, 3, "503 on every try")
        h.eq(r.reason, "Third Unavailable", "reason phrase (from the last try)")
        h.eq(r.header_all("X-Try"), ["3"], "X-Try (from the last try, once)")
        h.eq(r.body, b"try-three", "body (from the last try)")
        h.eq(r.header("Content-Length"), "9", "Content-Length")
        h.eq(r.header_all("Retry-Attempts"), ["3"], "Retry-Attempts")
        h.ok(any("retryproxy" in v for v in r.header_all("Via")), "Via missing: %r" % r.headers)
        # the proxy adds Date to a response that has none (RFC 9110 section 6.6.1)
        names = [n for n, _ in r.headers if n.lower() not in ("via", "retry-attempts", "date")]
        h.eq(names, ["Content-Type", "Content-Length", "X-Try"],
             "the origin's fields, in its order, nothing else")
        h.eq(len(r.header_all("Date")), 1, "Date fields")
        line = h.access_fields(proxy.access_one("/s/last"))
        h.eq((line["status"], line["attempts"], line.get("gave_up")), ("503", "3", "attempts"),
             "access line status, attempts, gave_up")

    @t.check("a 202 is retried on a route whose retry.on lists it: 202, 200 -> 200")
    def _():
        expect("/r202/a", [202, 200], 200, 2, "202 listed")
        expect("/r202/b", [202, 202, 202], 202, 3, "202 on every try")
        expect("/s/202", [202, 200], 202, 1, "202 not listed on the default route")

    @t.check("a kept 503 given back after tries that timed out is dated when it came")
    def _():
        origin.script("/slowtries/x", [503, "/delay/5"])
        start = time.time()
        r = h.fetch(proxy.port(), "GET", origin.url("/slowtries/x"), host)
        end = time.time()
        h.eq((r.status, r.header("Retry-Attempts")), (503, "3"), "status, Retry-Attempts")
        h.ok(end - start >= 1.9, "the 503 came back after the tries timed out (%.1fs)" % (end - start))
        h.eq(len(r.header_all("Date")), 1, "Date fields")
        when = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
        h.ok(int(start) <= when <= start + 1,
             "Date %r is when the 503 came (%.1f), not when it was given back (%.1f)"
             % (r.header("Date"), start, end))

    @t.check("default route (5xx flag): 500 and 504 are retried")
    def _():
        expect("/s/5xx", [500, 504, 200], 200, 3, "500,504,200")
        expect("/s/599", [599, 200], 200, 2, "599,200")

    @t.check("default route: 408 and 429 are retried")
    def _():
        expect("/s/408", [408, 200], 200, 2, "408,200")
        expect("/s/429", [429, 200], 200, 2, "429,200")

    @t.check("default route: a 404 is not retried (passes at once, origin saw 1)")
    def _():
        r = expect("/s/404", [404, 200], 404, 1, "404,200")
        h.eq(r.body, b"status 404\n", "body")

    @t.check("route with on: [404, 503]: a 404 is retried")
    def _():
        expect("/r404/x", [404, 200], 200, 2, "404,200 on list-404")

    @t.check("route with on: [500, 502]: 502 retried; 501 and 503 not (explicit codes replace 5xx)")
    def _():
        expect("/codes/502", [502, 200], 200, 2, "502,200 on codes")
        expect("/codes/501", [501, 200], 501, 1, "501,200 on codes")
        expect("/codes/503", [503, 200], 503, 1, "503,200 on codes")

    @t.check("route with on: [503]: a 500 passes at once")
    def _():
        r = expect("/only503/x", [500, 200], 500, 1, "500,200 on only503")
        h.eq(r.body, b"status 500\n", "body")
        expect("/only503/y", [503, 200], 200, 2, "503,200 on only503")

    @t.check("a 503 with a body over retry_response_buffer (4096 > 1KiB) is final at once")
    def _():
        r = expect("/s/big", ["/bytes/4096?status=503", 200], 503, 1, "4096-byte 503,200")
        h.eq(len(r.body), 4096, "body length")

    @t.check("a 503 over retry_response_buffer that would not be retried anyway says why: "
             "gave_up=not_idempotent for a POST, gave_up=attempts on the last try")
    def _():
        origin.script("/s/bigpost", ["/bytes/4096?status=503", 200])
        r = h.fetch(proxy.port(), "POST", origin.url("/s/bigpost"), host, body=b"x")
        h.eq((r.status, r.header("Retry-Attempts"), len(r.body)), (503, "1", 4096),
             "POST: status, Retry-Attempts, body length")
        f = h.access_fields(proxy.access_one("/s/bigpost"))
        h.eq((f["attempts"], f.get("gave_up"), f.get("note")), ("1", "not_idempotent", None),
             "POST: access attempts, gave_up, note in %r" % f)
        r = expect("/s/biglast", [503, 503, "/bytes/4096?status=503"], 503, 3,
                   "503,503,4096-byte 503")
        h.eq(len(r.body), 4096, "last 503: body length")
        f = h.access_fields(proxy.access_one("/s/biglast"))
        h.eq((f["attempts"], f.get("gave_up"), f.get("note")), ("3", "attempts", None),
             "last 503: access attempts, gave_up, note in %r" % f)

    @t.check("a 503 with a body of exactly retry_response_buffer (1024) is still retried")
    def _():
        expect("/s/edge", ["/bytes/1024?status=503", 200], 200, 2, "1024-byte 503,200")

    @t.check("a chunked 503 over retry_response_buffer is final at once, its body whole")
    def _():
        r = expect("/s/bigchunked", ["/chunked/4096?status=503&chunk=300", 200], 503, 1,
                   "chunked 4096-byte 503,200")
        h.eq(r.body, o.pattern_bytes(4096), "body (4096 pattern bytes)")

    @t.check("a small chunked 503 on every try: the last one reaches the client, body whole")
    def _():
        r = expect("/s/chunked", ["/chunked/500?status=503&chunk=100&hdr=X-Try:1",
                                  "/chunked/500?status=503&chunk=100&hdr=X-Try:2"], 503, 3,
                   "chunked 503 on every try")
        h.eq(r.header_all("X-Try"), ["2"], "X-Try")
        h.eq(r.body, o.pattern_bytes(500), "body (500 pattern bytes)")

    @t.check("HTTP/1.0 client, chunked 503 on every try: the last one comes back de-chunked, then close")
    def _():
        origin.script("/s/http10", ["/chunked/500?status=503&chunk=64&hdr=X-Try:1",
                                    "/chunked/500?status=503&chunk=64&hdr=X-Try:2"])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", origin.url("/s/http10"), host, version="HTTP/1.0"))
            r = c.read_response()
            h.eq((r.status, r.header_all("X-Try"), r.header("Retry-Attempts")), (503, ["2"], "3"),
                 "status, X-Try, Retry-Attempts")
            h.eq(r.header("Transfer-Encoding"), None, "Transfer-Encoding to an HTTP/1.0 client")
            h.eq(r.body, o.pattern_bytes(500), "body (500 pattern bytes)")
            h.ok(r.framing == "close" or c.closed_within(2), "connection should close after the body")

    @t.check("a close-delimited 503 kept, then resets: the client gets that 503, body whole")
    def _():
        r = expect("/s/closebody", ["/close/700?status=503&hdr=X-Try:1",
                                    "/reset/request", "/reset/request"], 503, 3, "close-delimited 503,reset,reset")
        h.eq(r.header_all("X-Try"), ["1"], "X-Try")
        h.eq(r.body, o.pattern_bytes(700), "body (700 pattern bytes)")

    @t.check("HEAD, 503 on every try: the last 503 head, no body, and the connection still works")
    def _():
        origin.script("/s/head", ["/status/503?hdr=X-Try:1", "/status/503?hdr=X-Try:2",
                                  "/status/503?hdr=X-Try:3"])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("HEAD", origin.url("/s/head"), host))
            r = c.read_response("HEAD")
            h.eq((r.status, r.header_all("X-Try"), r.header("Retry-Attempts")), (503, ["3"], "3"),
                 "status, X-Try, Retry-Attempts")
            h.eq(r.header("Content-Length"), "11", "Content-Length as the origin sent it")
            c.send(h.request("GET", origin.url("/bytes/7"), host))
            r2 = c.read_response()
            h.eq((r2.status, len(r2.body)), (200, 7), "next response on the connection (no stray body)")

    @t.check("after a kept 503 is given back, the client connection serves the next request")
    def _():
        origin.script("/s/reuse", [503])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", origin.url("/s/reuse"), host))
            r = c.read_response()
            h.eq((r.status, r.header("Retry-Attempts"), r.body), (503, "3", b"status 503\n"),
                 "status, Retry-Attempts, body")
            h.ok("close" not in (r.header("Connection") or "").lower(), "proxy closed: %r" % r.headers)
            c.send(h.request("GET", origin.url("/bytes/5"), host))
            r2 = c.read_response()
            h.eq((r2.status, len(r2.body), r2.header("Retry-Attempts")), (200, 5, "1"),
                 "second response on the connection")

    @t.check("a request pipelined behind one waiting on a backoff is answered after it, in order")
    def _():
        origin.script("/s/pipe-a", ["/status/503?hdr=X-Try:1", "/status/200?hdr=X-Try:2"])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", origin.url("/s/pipe-a"), host) +
                   h.request("GET", origin.url("/bytes/9"), host))
            r1 = c.read_response()
            r2 = c.read_response()
            h.eq((r1.status, r1.header_all("X-Try"), r1.header("Retry-Attempts")), (200, ["2"], "2"),
                 "first response")
            h.eq((r2.status, len(r2.body), r2.header("Retry-Attempts")), (200, 9, "1"), "second response")

    @t.check("503s that say Connection: close: retried on new connections; Connection not passed on")
    def _():
        origin.script("/s/connclose", ["/status/503?conn_close=1", "/status/503?conn_close=1&hdr=X-Try:2"])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", origin.url("/s/connclose"), host))
            r = c.read_response()
            h.eq((r.status, r.header_all("X-Try"), r.header("Retry-Attempts")), (503, ["2"], "3"),
                 "status, X-Try (last try), Retry-Attempts")
            conns = [q.conn_id for q in origin.requests_for("/s/connclose")]
            h.eq(len(set(conns)), 3, "distinct origin connections of the 3 tries (%r)" % conns)
            if "close" not in (r.header("Connection") or "").lower():
                c.send(h.request("GET", origin.url("/bytes/3"), host))
                h.eq(c.read_response().status, 200, "next response on the client connection")


h.run(scenario, __doc__)
