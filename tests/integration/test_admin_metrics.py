#!/usr/bin/env python3
"""Scenario: the admin endpoint's pages and what /metrics counts.

Client: curl to the admin listener (GET /healthz, /config, /metrics,
/no-such-page, POST /healthz, HEAD /healthz) and one raw GET through a
sidecar listener on the route "flaky" (initial_backoff 100ms, jitter 0).
Origin: answers the first try of /flaky/once with 503 and the second with
200.
Must hold: /healthz is 200 "ok\\n"; /config is YAML that `retryproxy --check
-c` accepts once written to a file, and names the route with its inherited
policy resolved; /metrics is text/plain; version=0.0.4; after the retried
request retryproxy_requests_total{route="flaky",code="200"} is one more,
retryproxy_tries_total{route="flaky"} two more,
retryproxy_retries_total{route="flaky",cause="status"} one more and
retryproxy_tries_per_request_count one more than before it, the connection
gauges for both sides and retryproxy_pool_reuse_total are there; an unknown
path is 404, a POST to a page 405 with Allow, a HEAD the GET's fields
without a body, a CONNECT (which names no path) 405 with Allow and a body
framed by Content-Length, the connection answering the next request; a
method evhttp does not know (PROPFIND, a lower-case get) its own 501 and
the connection closed; a
request with two Content-Length fields, a Transfer-Encoding whose last
coding is not chunked, or both a Content-Length and a Transfer-Encoding
gets 400 and the connection closes (RFC 9112 section 6.3: its body cannot
be told from a next request); so does one with a field name with
whitespace before its colon (RFC 9112 section 5.1), a Content-Length that
is not digits, or a chunked body (evhttp reads chunk sizes such as 0x29,
+29 or "29 x", which a strict front end would not), and nothing after it
is answered; so does one with a NUL byte in a field (evhttp would read
"Host: 127.0.0.1\\0.rebound.example" as 127.0.0.1, and a line starting
with a NUL as the end of the head; RFC 9110 section 5.5), the valid
requests pipelined before it answered first, and so does one whose Host is not uri-host[:port],
an empty one included (RFC 9112 section 3.2). Up to 8 empty lines before
a request line are skipped, as RFC 9112 section 2.2 asks and a proxy
listener does; a 9th gets 400. Answers the proxy gives before any route is chosen (a
400 for two Host fields, a TRACE with Max-Forwards: 0) count in
retryproxy_requests_total under route "-", as the access log names it. A config whose number /config could not write back in a
form the parser takes (999999999999999.99, which is 1e15) is refused by
--check, naming the line, column and key; so is a duration whose fraction
/config would write back in more digits than the parser takes
(10000000000000.5s is 10000000000000500ms).
A reload refused for a bad value counts in
retryproxy_config_reloads_total{result="failed"} and sets
retryproxy_config_last_reload_successful to 0; the next good reload
counts under result="ok" and sets it back to 1. Requests to the admin
give no access-log line (they are not proxied requests).
"""

import os
import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
routes:
  - name: flaky
    match: { path_prefix: /flaky/ }
    retry:
      max_attempts: 3
      initial_backoff: 100ms
      jitter: 0s
"""

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port):
    """The samples of /metrics as {(name, ((label, value), ...)): float}."""
    r = h.curl("http://127.0.0.1:%d/metrics" % port, check=True)
    h.eq(r.status, 200, "/metrics status")
    out = {}
    for line in r.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        h.ok(m, "unparsable metrics line %r" % line)
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples, name, **labels):
    """A sample's value, 0 when the series does not exist yet."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    admin = "http://127.0.0.1:%d" % proxy.port(1)

    @t.check("GET /healthz -> 200 'ok\\n', text/plain")
    def _():
        r = h.curl(admin + "/healthz", check=True)
        h.eq(r.status, 200, "status")
        h.eq(r.body, b"ok\n", "body")
        h.ok((r.header("Content-Type") or "").startswith("text/plain"),
             "Content-Type %r" % r.header("Content-Type"))

    @t.check("a request in HTTP/1.2 or 1.9 (a later 1.x) is answered in HTTP/1.1, the "
             "version the admin speaks, not an HTTP/1.2 that does not exist, evhttp's own "
             "refusals (413, 501, 400) and its interim 100 Continue included")
    def _():
        requests = ((b"GET /healthz", b"", b"HTTP/1.1 200 OK"),
                    (b"POST /healthz", b"Content-Length: 5000\r\n",
                     b"HTTP/1.1 413 Request Entity Too Large"),
                    (b"PROPFIND /metrics", b"", b"HTTP/1.1 501 Not Implemented"),
                    (b"GET /healthz", b"Content-Length: x\r\n", b"HTTP/1.1 400 Bad Request"))
        for version in (b"HTTP/1.2", b"HTTP/1.9"):
            for line, fields, status in requests:
                with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                    c.send(line + b" " + version + b"\r\nHost: 127.0.0.1\r\n" + fields +
                           b"Connection: close\r\n\r\n")
                    data = c.read_to_close()
                h.eq(data.split(b"\r\n", 1)[0], status,
                     "status line for %r in %r" % (line, version))
            # the interim 100 evhttp writes itself before reading the body
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(b"POST /healthz " + version + b"\r\nHost: 127.0.0.1\r\n"
                       b"Expect: 100-continue\r\nContent-Length: 5\r\n"
                       b"Connection: close\r\n\r\n")
                h.eq(c.read_until(b"\r\n\r\n"), b"HTTP/1.1 100 Continue\r\n\r\n",
                     "interim answer to an Expect: 100-continue in %r" % version)
                c.send(b"hello")
                data = c.read_to_close()
            h.eq(data.split(b"\r\n", 1)[0], b"HTTP/1.1 405 Method Not Allowed",
                 "status line after the 100 in %r" % version)

    @t.check("a version evhttp reads but HTTP has not (HTTP/1.-1, HTTP/-1.1, a minor past "
             "an int) gets 400, and HTTP/0.9 505 as on a proxy listener, in HTTP/1.1: never "
             "echoed in the status line, evhttp's own refusals (501) included")
    def _():
        cases = ((b"GET /healthz", b"HTTP/1.-1", b"HTTP/1.1 400 Bad Request"),
                 (b"GET /healthz", b"HTTP/-1.1", b"HTTP/1.1 400 Bad Request"),
                 (b"GET /healthz", b"HTTP/1.99999999999", b"HTTP/1.1 400 Bad Request"),
                 (b"GET /healthz", b"HTTP/0.9", b"HTTP/1.1 505 HTTP Version Not Supported"),
                 (b"HEAD /healthz", b"HTTP/0.9", b"HTTP/1.1 505 HTTP Version Not Supported"),
                 (b"PROPFIND /metrics", b"HTTP/0.9", b"HTTP/1.1 501 Not Implemented"),
                 (b"PROPFIND /metrics", b"HTTP/1.-1", b"HTTP/1.1 501 Not Implemented"))
        for line, version, status in cases:
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(line + b" " + version + b"\r\nHost: 127.0.0.1\r\n\r\n")
                data = c.read_to_close()
            h.eq(data.split(b"\r\n", 1)[0], status, "status line for %r in %r" % (line, version))

    @t.check("the version is read strictly, HTTP/ DIGIT . DIGIT (RFC 9112 section 2.3): one "
             "that evhttp's %d.%d would take for another (HTTP/1.01, HTTP/1.4294967296, "
             "HTTP/+1.1) or refuse with its own page gets 400, another major version "
             "(HTTP/2.0) 505, in HTTP/1.1 with the connection closed, at the first request "
             "of a connection or a later one; HTTP/1.0 and HTTP/1.1 are served")
    def _():
        bad = b"HTTP/1.1 400 Bad Request"
        unsupported = b"HTTP/1.1 505 HTTP Version Not Supported"
        cases = ((b"HTTP/1.4294967296", bad), (b"HTTP/1.01", bad), (b"HTTP/01.1", bad),
                 (b"HTTP/+1.1", bad), (b"HTTP/1.+1", bad), (b"HTTP/4294967297.1", bad),
                 (b"HTTP/1.1x", bad), (b"HTTP/1", bad), (b"http/1.1", bad), (b"HTTP/1.", bad),
                 (b"HTTP/11.1", bad), (b"HTTP/2.0", unsupported), (b"HTTP/3.0", unsupported),
                 (b"HTTP/9.9", unsupported))
        for version, status in cases:
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(b"GET /healthz " + version + b"\r\nHost: 127.0.0.1\r\n\r\n")
                data = c.read_to_close()
            h.eq(data.split(b"\r\n", 1)[0], status, "status line in %r" % version)
            h.ok(b"\r\n\r\nok\n" not in data, "served in %r: %r" % (version, data))
        # evhttp's own refusal of a method it does not know, in a version
        # refused, is in HTTP/1.1 too
        with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
            c.send(b"PROPFIND /metrics HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n")
            data = c.read_to_close()
        h.eq(data.split(b"\r\n", 1)[0], b"HTTP/1.1 501 Not Implemented", "PROPFIND in HTTP/2.0")
        # a later request on a kept-alive connection: pipelined behind the
        # first, and sent after its answer was read
        with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
            c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                   b"GET /healthz HTTP/1.01\r\nHost: 127.0.0.1\r\n\r\n")
            first = c.read_response()
            second = c.read_response()
            h.eq((first.version, first.status), ("HTTP/1.1", 200), "the first, pipelined")
            h.eq((second.version, second.status), ("HTTP/1.1", 400), "the second, pipelined")
            h.ok(c.closed_within(2 * h.SLOW), "the connection stayed open after the 400")
        for version, status in ((b"HTTP/1.4294967296", 400), (b"HTTP/2.0", 505)):
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                h.eq(c.read_response().status, 200, "the first request")
                c.send(b"GET /healthz " + version[:7])
                time.sleep(0.05)  # the line in two pieces
                c.send(version[7:] + b"\r\nHost: 127.0.0.1\r\n\r\n")
                r = c.read_response()
                h.eq((r.version, r.status), ("HTTP/1.1", status), "a later request in %r" % version)
                h.ok(c.closed_within(2 * h.SLOW), "the connection stayed open after %r" % version)
        for version in (b"HTTP/1.0", b"HTTP/1.1"):
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(b"GET /healthz " + version + b"\r\nHost: 127.0.0.1\r\n"
                       b"Connection: close\r\n\r\n")
                r = c.read_response()
            h.eq((r.version, r.status, r.body), (version.decode(), 200, b"ok\n"),
                 "served in %r" % version)

    @t.check("GET /config -> YAML that retryproxy --check accepts, with the route's policy resolved")
    def _():
        r = h.curl(admin + "/config", check=True)
        h.eq(r.status, 200, "status")
        text = r.body.decode()
        h.ok("name: flaky" in text, "the route is missing from /config:\n%s" % text)
        # the route wrote three retry keys; the rest came from defaults:
        for line in ("initial_backoff: 100ms", "max_backoff: 32s", "deadline: 2m",
                     "methods: [GET, HEAD, OPTIONS, TRACE, PUT, DELETE]"):
            h.ok(line in text, "%r missing from /config:\n%s" % (line, text))
        path = os.path.join(t.tmp, "dumped.yaml")
        with open(path, "w") as f:
            f.write(text)
        p = h.run_bin(["--check", "-c", path])
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"),
             "--check on the dump (stderr %r)\n%s" % (p.stderr, text))

    def refused_at(name, text, wheres):
        """--check on a config file of text: exit 1, each of wheres
        (file:line:col: key:) in the errors. Returns the errors."""
        path = os.path.join(t.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        p = h.run_bin(["--check", "-c", path])
        h.eq(p.returncode, 1, "--check exit status (stdout %r)" % p.stdout)
        for where in wheres:
            h.ok(where in p.stderr, "%r missing from the errors:\n%s" % (where, p.stderr))
        return p.stderr

    @t.check("a number /config could not write back (999999999999999.99 is 1e15) is refused at load")
    def _():
        # /config writes the double the parser made, and 1e15 has 16 whole
        # digits, one more than the parser takes: a config it accepted
        # would print a /config it refuses
        refused_at("huge-number.yaml",
                   "defaults:\n  retry:\n    multiplier: 999999999999999.99\n"
                   "    budget: { ratio: 999999999999999.99 }\n",
                   (":3:17: defaults.retry.multiplier: ", ":4:22: defaults.retry.budget.ratio: "))

    @t.check("a duration /config could not write back (10000000000000.5s is 10000000000000500ms, "
             "17 digits) is refused at load")
    def _():
        # /config writes a duration in its largest exact unit, and a fraction
        # can make that longer than the 15 digits the parser takes
        stderr = refused_at("huge-duration.yaml",
                            "defaults:\n  retry:\n    deadline: 10000000000000.5s\n"
                            "    max_backoff: 99999999999999.5m\n"
                            "    try_timeout: 2000000000000h\n",
                            (":3:15: defaults.retry.deadline: ",
                             ":4:18: defaults.retry.max_backoff: "))
        # a whole number of a unit is written back as it was: still taken
        h.ok("try_timeout" not in stderr, "2000000000000h refused:\n%s" % stderr)

    @t.check("a request retried once (503 then 200) moves the counters by exactly its tries")
    def _():
        before = scrape(proxy.port(1))
        origin.script("/flaky/once", [503, 200])
        r = h.fetch(proxy.port(0), "GET", "/flaky/once", "app.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        after = scrape(proxy.port(1))

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)
        h.eq(delta("retryproxy_requests_total", route="flaky", code="200"), 1,
             "requests_total{route=flaky,code=200} increase")
        h.eq(delta("retryproxy_tries_total", route="flaky"), 2, "tries_total increase")
        h.eq(delta("retryproxy_retries_total", route="flaky", cause="status"), 1,
             "retries_total{cause=status} increase")
        h.eq(delta("retryproxy_retries_total", route="flaky", cause="reset"), 0,
             "retries_total{cause=reset} increase")
        h.eq(delta("retryproxy_tries_per_request_count"), 1, "tries_per_request_count increase")
        h.eq(delta("retryproxy_tries_per_request_sum"), 2, "tries_per_request_sum increase")
        h.eq(delta("retryproxy_request_duration_seconds_count"), 1,
             "request_duration_seconds_count increase")
        h.eq(value(after, "retryproxy_backoff_pending"), 0, "backoff_pending after the request")
        for name, labels in (("retryproxy_connections", {"side": "client"}),
                             ("retryproxy_connections", {"side": "upstream"}),
                             ("retryproxy_pool_reuse_total", {})):
            key = (name, tuple(sorted(labels.items())))
            h.ok(key in after, "%s%r missing from /metrics" % (name, labels))

    @t.check("answers the proxy gives before routing count in requests_total, route \"-\"")
    def _():
        before = scrape(proxy.port(1))
        with h.RawConn(proxy.port(0)) as c:
            c.send(b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            r = c.read_response()
        h.eq(r.status, 400, "status of a request with two Host fields")
        with h.RawConn(proxy.port(0)) as c:
            c.send(b"TRACE /x HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\n\r\n")
            r = c.read_response("TRACE")
        h.eq(r.status, 200, "status of a TRACE with Max-Forwards: 0")
        after = scrape(proxy.port(1))
        for code in ("400", "200"):
            h.eq(value(after, "retryproxy_requests_total", route="-", code=code) -
                 value(before, "retryproxy_requests_total", route="-", code=code), 1,
                 "requests_total{route=-,code=%s} increase" % code)
        h.eq(value(after, "retryproxy_tries_total", route="-"), 0, "no try on route -")

    @t.check("GET /metrics is served as text/plain; version=0.0.4")
    def _():
        r = h.curl(admin + "/metrics", check=True)
        ct = (r.header("Content-Type") or "").replace(" ", "")
        h.ok(ct.startswith("text/plain;version=0.0.4"), "Content-Type %r" % r.header("Content-Type"))

    @t.check("an unknown path -> 404; POST /healthz -> 405 with Allow; HEAD /healthz has no body")
    def _():
        r = h.curl(admin + "/no-such-page")
        h.eq(r.status, 404, "status for /no-such-page")
        r = h.curl("-X", "POST", "-d", "x", admin + "/healthz")
        h.eq(r.status, 405, "status for POST /healthz")
        h.ok("GET" in (r.header("Allow") or ""), "Allow %r" % r.header("Allow"))
        with h.RawConn(proxy.port(1)) as c:
            c.send(h.request("HEAD", "/healthz", "127.0.0.1"))
            r = c.read_response("HEAD")
            h.eq((r.status, r.header("Content-Length")), (200, "3"), "HEAD /healthz: status, Content-Length")
            h.ok(c.silent_for(0.3), "HEAD /healthz sent a body: %r" % bytes(c.buf))

    @t.check("a method evhttp does not know (PROPFIND, a lower-case get) -> its own 501 "
             "page, and the connection closes")
    def _():
        for method in ("PROPFIND", "get"):
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(h.request(method, "/metrics", "127.0.0.1"))
                r = c.read_response()
                h.eq(r.status, 501, "status for %s /metrics" % method)
                h.ok(c.closed_within(2 * h.SLOW), "the connection closes after %s" % method)

    @t.check("evhttp's own refusals (501 for PROPFIND, 400 for an unreadable request line, "
             "413 for a body over 4 KiB) have Cache-Control: no-store and nosniff")
    def _():
        requests = ((501, h.request("PROPFIND", "/metrics", "127.0.0.1")),
                    (400, b"GET /healthz HTTP/1.1 extra\r\nHost: 127.0.0.1\r\n\r\n"),
                    (413, h.request("POST", "/healthz", "127.0.0.1", body=b"x" * 5000)))
        for status, raw in requests:
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                c.send(raw)
                r = c.read_response()
                h.eq(r.status, status, "status for %r" % raw[:30])
                h.eq((r.header("Cache-Control"), r.header("X-Content-Type-Options")),
                     ("no-store", "nosniff"), "the %d's fields (%r)" % (status, r.raw_head))
                h.ok(c.closed_within(2 * h.SLOW), "the connection closes after the %d" % status)

    @t.check("CONNECT (no path) -> 405 with Allow, its body framed; the connection goes on")
    def _():
        with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
            c.send(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
            r = c.read_head()
            h.eq(r.status, 405, "status")
            h.ok("GET" in (r.header("Allow") or ""), "Allow %r" % r.header("Allow"))
            h.ok(r.header("Content-Length") is not None,
                 "the body has no Content-Length: a client reads it until a close that "
                 "does not come (%r)" % r.headers)
            c.read_exact(int(r.header("Content-Length")))
            c.send(h.request("GET", "/healthz", "127.0.0.1"))
            r = c.read_response()
            h.eq((r.status, r.body), (200, b"ok\n"), "the next request on the connection")


    def reload_change(before, after):
        """From one scrape to the next: the failed and ok reloads counted,
        and last_reload_successful after."""
        return tuple(value(after, "retryproxy_config_reloads_total", result=r) -
                     value(before, "retryproxy_config_reloads_total", result=r)
                     for r in ("failed", "ok")) + \
            (value(after, "retryproxy_config_last_reload_successful"),)

    @t.check("a refused reload shows on /metrics (reloads_total failed, last_reload_successful "
             "0) until a good one")
    def _():
        before = scrape(proxy.port(1))
        h.eq(value(before, "retryproxy_config_last_reload_successful"), 1,
             "last_reload_successful before any reload")
        good = proxy.config_text
        proxy.reload(good.replace("initial_backoff: 100ms", "initial_backoff: soon"),
                     r"keeping the running config")
        failed = scrape(proxy.port(1))
        h.eq(reload_change(before, failed), (1, 0, 0),
             "after a refused reload: failed, ok increases, last_reload_successful")
        proxy.reload(good)
        ok = scrape(proxy.port(1))
        h.eq(reload_change(failed, ok), (0, 1, 1),
             "after a good reload: failed, ok increases, last_reload_successful")


    def refused_and_closed(raw, what):
        """raw sent to the admin gets a 400, whole, and the connection
        closes: nothing after it is read as a next request."""
        with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
            c.send(raw)
            r = c.read_head()
            h.eq(r.status, 400, "status for %s" % what)
            c.read_exact(int(r.header("Content-Length") or 0))
            h.ok(c.closed_within(2 * h.SLOW),
                 "the connection stayed open after %s; then: %r" % (what, bytes(c.buf[:80])))

    @t.check("a request whose body length is ambiguous (two Content-Lengths, a Transfer-Encoding "
             "not ending in chunked, both fields) -> 400 and the connection closes")
    def _():
        heads = (b"Content-Length: 5\r\nContent-Length: 6\r\n",
                 b"Transfer-Encoding: gzip\r\n",
                 b"Transfer-Encoding: chunked, gzip\r\n",
                 b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")
        for fields in heads:
            # what follows would be a second request to whoever took the
            # first one's framing otherwise
            refused_and_closed(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields +
                               b"\r\nhello0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                               repr(fields))


    @t.check("a field name with whitespace before its colon (Content-Length : 41), a Content-Length "
             "that is not digits (+41) and a chunked body (evhttp reads a chunk size 0x29 or +29 as "
             "41) -> 400 and the connection closes: the bytes after the head are never read as the "
             "next request, as a front end taking them for the body would not")
    def _():
        inner = b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        size = b"%d" % len(inner)
        chunk = b"%x" % len(inner)
        cases = ((b"Content-Length : " + size + b"\r\n", inner),
                 (b"Content-Length\t: " + size + b"\r\n", inner),
                 (b"Transfer-Encoding : chunked\r\n", chunk + b"\r\n" + inner + b"\r\n0\r\n\r\n"),
                 (b"X Y: 1\r\nContent-Length: 0\r\n", inner),
                 (b"Content-Length: +" + size + b"\r\n", inner),
                 (b"Content-Length: -0\r\n", inner),
                 (b"Transfer-Encoding: chunked\r\n", b"0x" + chunk + b"\r\n" + inner + b"\r\n0\r\n\r\n"),
                 (b"Transfer-Encoding: chunked\r\n", b"+" + chunk + b"\r\n" + inner + b"\r\n0\r\n\r\n"),
                 (b"Transfer-Encoding: chunked\r\n", chunk + b" x\r\n" + inner + b"\r\n0\r\n\r\n"),
                 (b"Transfer-Encoding: chunked\r\n", chunk + b"\r\n" + inner + b"\r\n0\r\n\r\n"))
        for fields, rest in cases:
            refused_and_closed(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"\r\n" + rest
                               + b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", repr(fields + rest[:8]))
        r = h.fetch(proxy.port(1), "GET", "/healthz", "127.0.0.1", headers=[("Content-Length", "0")])
        h.eq(r.status, 200, "status with Content-Length: 0")

    @t.check("a NUL byte in a field (a Host that evhttp would cut to 127.0.0.1 at it, a Content-Length, "
             "a line it would take for the end of the head) -> 400 and the connection closes, as RFC "
             "9110 section 5.5 asks: never answered as the field's text before the NUL")
    def _():
        inner = b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for fields in (b"Host: 127.0.0.1\x00.rebound.example\r\n",
                       b"Host: 127.0.0.1\r\nContent-Length: 0\x00%d\r\n" % len(inner),
                       b"Host: 127.0.0.1\r\n\x00Content-Length: %d\r\n" % len(inner),
                       b"Host: 127.0.0.1\r\nX-A: a\x00b\r\n"):
            refused_and_closed(b"GET /healthz HTTP/1.1\r\n" + fields + b"\r\n" + inner, repr(fields))

    @t.check("empty lines before a request line (a stray CRLF after a body; RFC 9112 section 2.2 "
             "asks a server to skip at least one) are skipped, up to 8 as on a proxy listener, on a "
             "connection's first request and a later one, sent at once or byte by byte; a 9th gets 400")
    def _():
        get = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for pieces in ([b"\r\n\n" + get + b"\r\n" + get + b"\r\n" * 8 + get],
                       [bytes([b]) for b in b"\r\n" + get + b"\r\n"]):
            with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
                for piece in pieces:
                    c.send(piece)
                    if len(pieces) > 1:
                        time.sleep(0.002)  # each byte a read of its own
                for n in range(3 if len(pieces) == 1 else 1):
                    r = c.read_response()
                    h.eq(r.status, 200, "status of request %d after empty lines (%d pieces)"
                         % (n + 1, len(pieces)))
        refused_and_closed(b"\r\n" * 9 + get, "9 empty lines before the request line")

    @t.check("a NUL byte in a request pipelined behind a valid one refuses that one alone: the "
             "valid one is answered first, then the one with the NUL gets 400 and the connection "
             "closes")
    def _():
        get = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        with h.RawConn(proxy.port(1), timeout=5 * h.SLOW) as c:
            c.send(get + get + b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\x00.rebound.example\r\n\r\n")
            for n in (1, 2):
                r = c.read_response()
                h.eq(r.status, 200, "status of valid request %d before the one with a NUL" % n)
            r = c.read_response()
            h.eq(r.status, 400, "status of the request with a NUL")
            h.ok(c.closed_within(2 * h.SLOW), "the connection stayed open after the NUL's 400")

    @t.check("a Host that is not a valid uri-host[:port] (a port that is no number, userinfo, "
             "a space, an unclosed IPv6 bracket, an empty one) -> 400 and the connection "
             "closes, as RFC 9112 section 3.2 asks; valid ones are served")
    def _():
        for host in (b"127.0.0.1:x", b"localhost:80@evil.example", b"127.0.0.1 evil.example",
                     b"[::1", b"[::1]x", b"localhost/x", b"127.0.0.1:9901:1", b"local%zzhost",
                     b"", b" "):
            refused_and_closed(b"GET /healthz HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"
                               b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                               "Host %r" % host)
        # an http URI's host is never empty (RFC 9110 section 4.2.1): an empty
        # Host names none, whatever the version
        refused_and_closed(b"GET /healthz HTTP/1.0\r\nHost:\r\n\r\n", "HTTP/1.0, Host empty")
        for host in (b"127.0.0.1", b"127.0.0.1:", b"[::1]:9901", b"localhost:9901", b"LOCALHOST"):
            r = h.fetch(proxy.port(1), "GET", "/healthz", host.decode())
            h.eq(r.status, 200, "status for Host %r" % host)

    @t.check("the admin's own requests give no access-log line: every line is a proxied "
             "request's")
    def _():
        pages = ("/", "/healthz", "/metrics", "/config", "/upstreams", "/no-such-page")
        for page in pages:
            h.curl("-s", admin + page)
        time.sleep(0.1)  # the log writes within a millisecond
        targets = [h.access_fields(line).get("target") for line in proxy.access_lines()]
        h.ok(targets and not any(target in pages for target in targets),
             "access-log targets: %r" % targets)


h.run(scenario, __doc__)
