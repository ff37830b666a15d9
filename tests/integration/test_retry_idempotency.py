#!/usr/bin/env python3
"""Scenario: which requests may be sent again after they reached the origin.

Client: POST, PATCH, PUT, DELETE and GET requests with small bodies through
a forward proxy (raw sockets), with and without the conditions a route's
idempotency map names: a query parameter, a header, a top-level JSON member
(in a Content-Length and in a chunked body).
Origin: answers the first try of each path 503, then 200 (/echo-like bodies
are recorded). Defaults: retry.on [503, 429, connect-failure, reset,
timeout] (no 5xx, so a 500 is final), max_attempts 4, 150ms waits, no
jitter. Routes by path: /cond/ adds when_present (query ifGenerationMatch,
header If-Match, json_field etag) and keeps the default methods; /getonly/
has idempotent.methods [GET]; /partial/ sets only retry.max_attempts: 2.
Must hold: a POST or PATCH without a condition gets the 503 at once, the
origin saw 1, gave_up=not_idempotent; on /cond/ a POST with
?ifGenerationMatch=1 (also after a reset), with If-Match (any case), with a
JSON body having a top-level "etag" (also chunked; application/json, a +json
type or no Content-Type) is repeated and every try carries the same body; a
POST with {"other": 1}, a nested or array "etag", {"etag": ""}, an "etag" in
a text/plain or form body, an empty ?ifGenerationMatch= (or a bare name), an
empty If-Match, a look-alike query name, or the condition on a route without
it is not; on /ius/ (when_present If-Unmodified-Since) a POST with one
HTTP-date there is repeated, one with a value that is no HTTP-date, two
dates (one line or two) or an If-Match beside it is not (RFC 9110 section
13.1.4: the origin ignores it then), nor one whose date is not before now
(half a minute ahead, or in the year 9999: the write a first try made
leaves it true); on /inm/ (when_present If-None-Match)
a POST with If-None-Match: * (on one line or more) is repeated, one with an
entity-tag (alone, weak, beside a "*", or "\"*\"") is not: it holds again
after the write succeeded (RFC 9110 section 13.1.2 names "*" as the guard
of a write); PUT
and DELETE are repeated on the default route; on /getonly/ a PUT is not
repeated but a GET is; /partial/ gives up after 2 tries, waits the defaults'
150ms (not the built-in 1s) and, inheriting on:, passes a 500 at once.
"""

import email.utils
import hashlib
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    on: [503, 429, connect-failure, reset, timeout]
    max_attempts: 4
    initial_backoff: 150ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: cond
    match: { path_prefix: /cond/ }
    idempotent:
      when_present:
        - query: ifGenerationMatch
        - header: If-Match
        - json_field: etag
  - name: ius
    match: { path_prefix: /ius/ }
    idempotent:
      when_present:
        - header: If-Unmodified-Since
  - name: inm
    match: { path_prefix: /inm/ }
    idempotent:
      when_present:
        - header: If-None-Match
  - name: getonly
    match: { path_prefix: /getonly/ }
    idempotent: { methods: [GET] }
  - name: partial
    match: { path_prefix: /partial/ }
    retry: { max_attempts: 2 }
"""

JSON = [("Content-Type", "application/json")]


def chunked(data, size=7):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def send(method, path, body=b"", headers=(), steps=(503, 200)):
        """Script path (without query) with steps, send, and return the
        response and the origin's requests for it (after a settle time in
        which a wrong extra try would show)."""
        origin.script(path.split("?", 1)[0], list(steps))
        r = h.fetch(proxy.port(), method, origin.url(path), host, headers=headers, body=body)
        time.sleep(0.4 * h.SLOW)
        return r, origin.requests_for(path.split("?", 1)[0])

    def repeated(method, path, body=b"", headers=(), sent_body=None, steps=(503, 200)):
        r, reqs = send(method, path, body, headers, steps)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "%s %s: status, Retry-Attempts (should be repeated)" % (method, path))
        h.eq(len(reqs), 2, "%s %s: requests the origin saw" % (method, path))
        want = hashlib.sha256(sent_body if sent_body is not None else body).hexdigest()
        for i, q in enumerate(reqs):
            h.eq(q.body_sha256, want, "%s %s: body sha256 of try %d" % (method, path, i + 1))
        return r, reqs

    def not_repeated(method, path, body=b"", headers=()):
        r, reqs = send(method, path, body, headers)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"),
             "%s %s: status, Retry-Attempts (must not be repeated)" % (method, path))
        h.eq(len(reqs), 1, "%s %s: requests the origin saw" % (method, path))
        return r

    @t.check("POST without a condition: 503 at once, origin saw 1, gave_up=not_idempotent")
    def _():
        not_repeated("POST", "/plain/post", b"amount=10")
        f = h.access_fields(proxy.access_one("/plain/post"))
        h.eq((f["status"], f["attempts"], f.get("gave_up")), ("503", "1", "not_idempotent"),
             "access status, attempts, gave_up")

    @t.check("PATCH without a condition is not repeated either")
    def _():
        not_repeated("PATCH", "/plain/patch", b'{"a": 1}', JSON)

    @t.check("POST ?ifGenerationMatch=1 on /cond/: repeated, same body each try")
    def _():
        repeated("POST", "/cond/q?ifGenerationMatch=1", b"object-data")

    @t.check("POST ?ifGenerationMatch=1 on /cond/, origin resets after reading it: repeated")
    def _():
        repeated("POST", "/cond/reset?ifGenerationMatch=7", b"object-data",
                 steps=("/reset/request", 200))

    @t.check("POST with If-Match on /cond/: repeated (also as if-match)")
    def _():
        repeated("POST", "/cond/h1", b"object-data", [("If-Match", '"abc"')])
        repeated("POST", "/cond/h2", b"object-data", [("if-match", '"abc"')])

    @t.check('POST {"etag": "x"} on /cond/: repeated, same body each try')
    def _():
        repeated("POST", "/cond/j", b'{"name": "o", "etag": "x"}', JSON)

    @t.check('chunked POST {"etag": "x"} on /cond/: repeated, the chunked body identical each try')
    def _():
        body = b'{"size": 12, "etag": "CAE="}'
        r, reqs = repeated("POST", "/cond/jc", chunked(body),
                           JSON + [("Transfer-Encoding", "chunked")], sent_body=body)
        h.eq([q.framing for q in reqs], ["chunked", "chunked"], "framing at the origin")

    @t.check('POST {"other": 1}, nested or array "etag" on /cond/: not repeated')
    def _():
        not_repeated("POST", "/cond/jo", b'{"other": 1}', JSON)
        not_repeated("POST", "/cond/jn", b'{"meta": {"etag": "x"}}', JSON)
        not_repeated("POST", "/cond/ja", b'[{"etag": "x"}]', JSON)

    @t.check("an empty precondition is none: ?ifGenerationMatch= or bare, an empty If-Match, "
             '{"etag": ""}: not repeated')
    def _():
        not_repeated("POST", "/cond/qe?ifGenerationMatch=", b"d")
        not_repeated("POST", "/cond/qb?a=1&ifGenerationMatch", b"d")
        not_repeated("POST", "/cond/he", b"d", [("If-Match", "")])
        not_repeated("POST", "/cond/hc", b"d", [("If-Match", " , ")])
        not_repeated("POST", "/cond/je", b'{"etag": ""}', JSON)

    @t.check('a body whose Content-Type is not JSON is not read for "etag": not repeated; '
             "without a Content-Type it is")
    def _():
        body = b'{"etag": "x"}'
        not_repeated("POST", "/cond/jt", body, [("Content-Type", "text/plain")])
        not_repeated("POST", "/cond/jf", body,
                     [("Content-Type", "application/x-www-form-urlencoded")])
        repeated("POST", "/cond/jm", body, [("Content-Type", "application/merge-patch+json")])
        repeated("POST", "/cond/jz", body)

    @t.check("POST with a look-alike query name, or with ifGenerationMatch off /cond/: not repeated")
    def _():
        not_repeated("POST", "/cond/qx?ifGenerationMatchX=1", b"d")
        not_repeated("POST", "/cond/qy?x=ifGenerationMatch", b"d")
        not_repeated("POST", "/plain/q?ifGenerationMatch=1", b"d")
        not_repeated("POST", "/plain/h", b"d", [("If-Match", '"abc"')])

    @t.check("If-Unmodified-Since counts only as an origin must read it (RFC 9110 section "
             "13.1.4): one HTTP-date, no If-Match beside it")
    def _():
        date = "Sun, 06 Nov 1994 08:49:37 GMT"
        repeated("POST", "/ius/ok", b"d", [("If-Unmodified-Since", date)])
        repeated("POST", "/ius/850", b"d", [("If-Unmodified-Since", "Sunday, 06-Nov-94 08:49:37 GMT")])
        # not a date, two members, or beside an If-Match: the origin ignores it
        not_repeated("POST", "/ius/bad", b"d", [("If-Unmodified-Since", "yesterday")])
        not_repeated("POST", "/ius/num", b"d", [("If-Unmodified-Since", "784111777")])
        # a date not before now: a write the first try made leaves it true
        not_repeated("POST", "/ius/soon", b"d",
                     [("If-Unmodified-Since",
                       email.utils.formatdate(time.time() + 30, usegmt=True))])
        not_repeated("POST", "/ius/future", b"d",
                     [("If-Unmodified-Since", "Fri, 31 Dec 9999 23:59:59 GMT")])
        not_repeated("POST", "/ius/two", b"d", [("If-Unmodified-Since", date + ", " + date)])
        not_repeated("POST", "/ius/lines", b"d", [("If-Unmodified-Since", date),
                                                  ("If-Unmodified-Since", date)])
        not_repeated("POST", "/ius/im", b"d", [("If-Match", "*"), ("If-Unmodified-Since", date)])
        f = h.access_fields(proxy.access_one("/ius/bad"))
        h.eq((f["attempts"], f.get("gave_up")), ("1", "not_idempotent"), "access attempts, gave_up")

    @t.check("If-None-Match guards a write only as \"*\" (RFC 9110 section 13.1.2): entity-tags "
             "hold again after the write succeeded")
    def _():
        repeated("POST", "/inm/star", b"d", [("If-None-Match", "*")])
        repeated("POST", "/inm/lines", b"d", [("If-None-Match", "*"), ("if-none-match", " * ")])
        not_repeated("POST", "/inm/tag", b"d", [("If-None-Match", '"v1"')])
        not_repeated("POST", "/inm/weak", b"d", [("If-None-Match", 'W/"v1", "v2"')])
        not_repeated("POST", "/inm/mixed", b"d", [("If-None-Match", '*, "v1"')])
        not_repeated("POST", "/inm/two", b"d", [("If-None-Match", "*"), ("If-None-Match", '"v1"')])
        not_repeated("POST", "/inm/quoted", b"d", [("If-None-Match", '"*"')])

    @t.check("PUT and DELETE (idempotent by default) are repeated")
    def _():
        repeated("PUT", "/plain/put", b"new contents")
        repeated("DELETE", "/plain/delete")
        repeated("PUT", "/cond/put", b"new contents")

    @t.check("idempotent.methods: [GET]: PUT not repeated, GET repeated")
    def _():
        not_repeated("PUT", "/getonly/put", b"new contents")
        repeated("GET", "/getonly/get")

    @t.check("route setting only retry.max_attempts: 2 gives up after 2, waits the defaults' 150ms")
    def _():
        r, reqs = send("GET", "/partial/a", steps=[503])
        h.eq((r.status, r.header("Retry-Attempts")), (503, "2"), "status, Retry-Attempts")
        h.eq(len(reqs), 2, "requests the origin saw")
        gap = h.try_gaps(reqs)[0]
        h.ok(0.15 - 0.02 <= gap <= 0.15 + 0.3 * h.SLOW,
             "wait %.0f ms; the defaults say 150 ms (the built-in default is 1 s)" % (gap * 1000))

    @t.check("... and it keeps the defaults' on: (no 5xx): a 500 passes at once")
    def _():
        r, reqs = send("GET", "/partial/b", steps=[500, 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (500, "1", 1),
             "status, Retry-Attempts, requests the origin saw")


h.run(scenario, __doc__)
