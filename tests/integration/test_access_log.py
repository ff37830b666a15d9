#!/usr/bin/env python3
"""Scenario: one access-log line per request, in text and in JSON.

Client: curl through a forward proxy logging text, then through one logging
JSON: GET, HEAD, POST, a 404, a slow response, a request to a closed port,
three requests over one keep-alive connection, and requests matched by a
path route and (forward mode) by a host route.
Origin: echoes; /delay/0.3 answers after 0.3 s.
Must hold: text: exactly one line per request, the time it ended in
front (UTC, to the millisecond, between the request's start and end),
then the word access and
method=, target=, route=, status=, attempts=, bytes= (response body bytes,
the proxy's own answers' included: a 502, a 400, a Max-Forwards TRACE),
duration_ms=, tries= fields that match the request, and for the proxy's
own 502 after a try, note= with its error text; a head refused for one
of its fields (obs-fold, too large) names its request line's method and
target, one refused for its target (too long: 414; a byte no target may
hold: 400) its method and the target as far as it was read (the first 8
KiB of one too long; up to the byte refused, escaped %XX, \\u00XX in JSON),
one refused for its method neither; a route is named by
the URI's host in forward mode. JSON: every stderr line is a JSON object
(log lines with level and msg); one access object per request with time
first, then type, method,
target, route, status, attempts, bytes, duration_ms and tries, a list with
one {status|error, wait_ms} per try, the last with wait_ms 0 (a 502's
note its error text).
"""

import calendar
import json
import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log:
  level: info
  format: @FORMAT@
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
routes:
  - name: echo-route
    match: { path_prefix: /echo }
  - name: host-route
    match: { host: localhost }
"""


def check_time(stamp, before, after):
    """stamp is UTC to the millisecond ("2026-11-29T13:04:45.123Z") and lies
    between before and after (time.time() around the request)."""
    h.ok(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), "time %r" % stamp)
    at = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + int(stamp[20:23]) / 1000
    h.ok(before - 0.002 <= at <= after + 0.002, "time %r not between the request's start and end" % stamp)


def fields(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def lines_for(proxy, tag):
    out = []
    for entry in proxy.access_lines():
        target = entry["target"] if isinstance(entry, dict) else fields(entry).get("target", "")
        if tag in target.split("?", 1)[-1].split("&"):
            out.append(entry)
    return out


def one_line(proxy, tag):
    """The single access line for the request tagged tag (waits for it)."""
    h.wait_until(lambda: lines_for(proxy, tag), 5, "an access line for %s" % tag)
    got = lines_for(proxy, tag)
    h.eq(len(got), 1, "access lines for %s (%r)" % (tag, got))
    return got[0]


def scenario(t):
    origin = t.origin()
    text = t.proxy(CONFIG, FORMAT="text")
    dead = h.closed_port()

    def get(proxy, path, *args):
        return h.curl(*args, origin.url(path), proxy=proxy.url)

    @t.check("text: GET 200 matched by path_prefix -> one line with every field, "
             "the time in front")
    def _():
        before = time.time()
        r = get(text, "/echo?al=1")
        after = time.time()
        h.eq(r.status, 200, "status")
        line = one_line(text, "al=1")
        h.ok(re.match(r"\S+ access client=", line), "line lacks the word access after the time: %r" % line)
        check_time(line.split(" ", 1)[0], before, after)
        f = fields(line)
        for key in ("method", "target", "route", "status", "attempts", "bytes", "duration_ms", "tries"):
            h.ok(key in f, "field %s missing from %r" % (key, line))
        h.eq((f["method"], f["route"], f["status"], f["attempts"]), ("GET", "echo-route", "200", "1"),
             "method, route, status, attempts in %r" % line)
        h.ok(f["target"].endswith("/echo?al=1"), "target field %r" % f["target"])
        h.eq(int(f["bytes"]), len(r.body), "bytes (response body length %d) in %r" % (len(r.body), line))
        h.ok(int(f["duration_ms"]) >= 0, "duration_ms %r" % f["duration_ms"])

    @t.check("text: HEAD logs bytes=0, a 404 logs its status and body size, default route")
    def _():
        r = get(text, "/bytes/500?al=2", "-I")
        h.eq(r.status, 200, "HEAD status")
        f = fields(one_line(text, "al=2"))
        h.eq((f["method"], f["status"], f["bytes"], f["route"]), ("HEAD", "200", "0", "default"), "HEAD line")
        r = get(text, "/status/404?al=3")
        h.eq(r.status, 404, "status")
        f = fields(one_line(text, "al=3"))
        h.eq((f["status"], f["bytes"]), ("404", str(len(r.body))), "404 line")

    @t.check("text: POST logs its method")
    def _():
        get(text, "/echo?al=4", "--data-binary", "abc")
        h.eq(fields(one_line(text, "al=4"))["method"], "POST", "method")

    @t.check("text: duration_ms covers a 0.3s origin delay")
    def _():
        get(text, "/delay/0.3?al=5")
        f = fields(one_line(text, "al=5"))
        h.ok(int(f["duration_ms"]) >= 250, "duration_ms %s for a 300 ms response" % f["duration_ms"])

    @t.check("text: a 502 from a closed port is logged with attempts=1")
    def _():
        r = h.curl("http://127.0.0.1:%d/x?al=6" % dead, proxy=text.url)
        h.eq(r.status, 502, "status")
        f = fields(one_line(text, "al=6"))
        h.eq((f["status"], f["attempts"]), ("502", "1"), "status and attempts")
        h.eq(int(f["bytes"]), len(r.body), "bytes: the proxy's own body (%r)" % r.body)
        h.ok(len(r.body) > 0, "the 502 has a body")
        h.eq(f.get("note", "").replace("%20", " "), r.body.decode().rstrip("\n"),
             "note: the proxy's own error text, as its body says")

    @t.check("text: answers the proxy gives before any try log their body's size too")
    def _():
        # refused as malformed: the parser's 400
        with h.RawConn(text.port()) as c:
            c.send(b"GET http://127.0.0.1:%d/x?al=11 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
                   % origin.port)
            r = c.read_response()
        h.eq(r.status, 400, "status")
        f = fields(one_line(text, "al=11"))
        h.eq((f["status"], int(f["bytes"])), ("400", len(r.body)), "status and bytes")
        h.ok(len(r.body) > 0, "the 400 has a body")
        # TRACE with Max-Forwards: 0 is answered by the proxy, echoing the request
        with h.RawConn(text.port()) as c:
            c.send(b"TRACE http://127.0.0.1:%d/x?al=12 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"Max-Forwards: 0\r\n\r\n" % origin.port)
            r = c.read_response("TRACE")
        h.eq(r.status, 200, "TRACE status")
        f = fields(one_line(text, "al=12"))
        h.eq((f["status"], int(f["bytes"])), ("200", len(r.body)), "TRACE status and bytes")
        h.ok(len(r.body) > 0, "the TRACE echo has a body")

    @t.check("text: a head refused for a field (obs-fold: 400, too large: 431) logs the "
             "method and target of its request line; one whose line is too long logs -")
    def _():
        cases = (
            (b"GET http://127.0.0.1:%d/x?al=13 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n"
             b" folded\r\n\r\n" % origin.port, 400, "al=13"),
            (b"DELETE http://127.0.0.1:%d/x?al=14 HTTP/1.1\r\nHost: a\r\nX-Big: %s\r\n\r\n"
             % (origin.port, b"b" * 70000), 431, "al=14"),
        )
        for raw, status, tag in cases:
            with h.RawConn(text.port()) as c:
                c.send(raw)
                r = c.read_response()
            h.eq(r.status, status, "status for %s" % tag)
            f = fields(one_line(text, tag))
            h.eq((f["status"], f["method"], f["route"]), (str(status), raw.split(b" ")[0].decode(), "-"),
                 "status, method, route for %s" % tag)
            h.ok(f["target"].endswith("/x?" + tag), "target %r for %s" % (f["target"], tag))

    @t.check("text: a request line refused for its target (414 over max_uri_bytes, 400 for a "
             "byte a target may not hold) logs its method, and its target as far as it was read, "
             "escaped; one refused in its method logs -")
    def _():
        def refused(raw, status, tag):
            with h.RawConn(text.port()) as c:
                c.send(raw)
                r = c.read_response()
            h.eq(r.status, status, "status for %s" % tag)
            f = fields(one_line(text, tag))
            h.eq((f["status"], f["route"], f["note"].replace("%20", " ")),
                 (str(status), "-", r.body.decode().rstrip("\n")), "status, route, note for %s" % tag)
            return f

        # a target over max_uri_bytes (8 KiB): its first 8 KiB
        f = refused(b"GET /x?al=15&%s HTTP/1.1\r\nHost: a\r\n\r\n" % (b"u" * 9000), 414, "al=15")
        h.eq((f["method"], f["target"]), ("GET", "/x?al=15&" + "u" * (8192 - 9)),
             "method and target of the 414")
        # a control byte, a non-ASCII byte: the target up to it, the byte %XX
        f = refused(b"GET /x?al=16&a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "al=16")
        h.eq((f["method"], f["target"]), ("GET", "/x?al=16&a%01"), "method and target")
        f = refused(b"PUT /x?al=17&caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "al=17")
        h.eq((f["method"], f["target"]), ("PUT", "/x?al=17&caf%C3"), "method and target")
        # a method that is no token: nothing of the line is named
        n = len([ln for ln in text.access_lines() if "note=invalid%20method" in ln])
        with h.RawConn(text.port()) as c:
            c.send(b"G(T /x?al=18 HTTP/1.1\r\nHost: a\r\n\r\n")
            h.eq(c.read_response().status, 400, "status for an invalid method")
        h.wait_until(lambda: len([ln for ln in text.access_lines()
                                  if "note=invalid%20method" in ln]) == n + 1, 5,
                     "the invalid method's access line")
        f = fields([ln for ln in text.access_lines() if "note=invalid%20method" in ln][-1])
        h.eq((f["method"], f["target"]), ("-", "-"), "method and target of an invalid method")

    @t.check("text: three requests on one keep-alive connection give three lines")
    def _():
        code, rows, err = h.curl_multi([origin.url("/echo?al=%d" % i) for i in (7, 8, 9)], proxy=text.url)
        h.eq([s for s, _ in rows], [200] * 3, "statuses (%s)" % err)
        for i in (7, 8, 9):
            one_line(text, "al=%d" % i)

    @t.check("text: forward mode matches match.host against the URI's host (localhost -> host-route)")
    def _():
        r = h.curl(origin.url("/bytes/10?al=10").replace("127.0.0.1", "localhost"), proxy=text.url)
        h.eq(r.status, 200, "status (%r)" % r)
        h.eq(fields(one_line(text, "al=10"))["route"], "host-route", "route")

    jsonp = t.proxy(CONFIG, FORMAT="json")

    @t.check("json: a GET 200 gives one object with every key and the right types")
    def _():
        before = time.time()
        r = get(jsonp, "/echo?jl=1")
        after = time.time()
        h.eq(r.status, 200, "status")
        obj = one_line(jsonp, "jl=1")
        h.eq(list(obj)[:2], ["time", "type"], "the first keys")
        check_time(obj["time"], before, after)
        for key in ("method", "target", "route", "status", "attempts", "bytes", "duration_ms", "tries"):
            h.ok(key in obj, "key %s missing from %r" % (key, obj))
        h.eq((obj["method"], obj["route"], obj["status"], obj["attempts"]), ("GET", "echo-route", 200, 1),
             "method, route, status, attempts")
        h.eq(obj["bytes"], len(r.body), "bytes")
        h.ok(isinstance(obj["duration_ms"], (int, float)) and obj["duration_ms"] >= 0,
             "duration_ms %r" % obj["duration_ms"])
        h.eq(obj["tries"], [{"status": 200, "wait_ms": 0}], "tries")

    @t.check("json: a 502 from a closed port has one try with an error string and wait_ms 0")
    def _():
        r = h.curl("http://127.0.0.1:%d/x?jl=2" % dead, proxy=jsonp.url)
        h.eq(r.status, 502, "status")
        obj = one_line(jsonp, "jl=2")
        h.eq((obj["status"], obj["attempts"], len(obj["tries"])), (502, 1, 1), "status, attempts, tries")
        h.eq(obj["bytes"], len(r.body), "bytes: the proxy's own body")
        tr = obj["tries"][0]
        h.ok(isinstance(tr.get("error"), str) and tr["error"], "tries[0].error: %r" % tr)
        h.eq(tr.get("wait_ms"), 0, "tries[0].wait_ms")
        h.eq(obj.get("note"), r.body.decode().rstrip("\n"), "note: the proxy's own error text")

    @t.check("json: a request line refused for a byte in its target logs its method and the "
             "target up to that byte, which decodes as it was sent")
    def _():
        with h.RawConn(jsonp.port()) as c:
            c.send(b"DELETE /x?jl=5&a\x7f\"b HTTP/1.1\r\nHost: a\r\n\r\n")
            r = c.read_response()
        h.eq(r.status, 400, "status")
        obj = one_line(jsonp, "jl=5")
        h.eq((obj["method"], obj["target"], obj["route"], obj["status"]),
             ("DELETE", "/x?jl=5&a\x7f", "-", 400), "method, target, route, status")
        h.eq(obj.get("note"), r.body.decode().rstrip("\n"), "note")

    @t.check("json: a 404 and a HEAD each give one object")
    def _():
        get(jsonp, "/status/404?jl=3")
        get(jsonp, "/bytes/10?jl=4", "-I")
        h.eq(one_line(jsonp, "jl=3")["status"], 404, "404 status")
        o = one_line(jsonp, "jl=4")
        h.eq((o["method"], o["bytes"]), ("HEAD", 0), "HEAD method and bytes")

    @t.check("json: every stderr line is a JSON object; non-access lines have level and msg")
    def _():
        lines = [ln for ln in jsonp.stderr_lines() if ln.strip()]
        h.ok(lines, "no stderr output at all")
        for ln in lines:
            try:
                obj = json.loads(ln)
            except ValueError:
                raise AssertionError("stderr line is not JSON: %r" % ln)
            h.ok(isinstance(obj, dict), "stderr line is not an object: %r" % ln)
            if "method" not in obj:
                h.ok("level" in obj and "msg" in obj, "log object without level/msg: %r" % ln)


h.run(scenario, __doc__)
