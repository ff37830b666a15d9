#!/usr/bin/env python3
"""Scenario: a retry to an upstream that answered HTTP/1.0 sends no chunked
request body (RFC 9112 section 6.1: a client must not send
Transfer-Encoding unless it knows the server handles HTTP/1.1, as from the
version of a response it received).

Client: PUTs through a forward proxy from raw sockets, with chunked bodies
(chunks of 100 bytes, one with a chunk extension, some with a trailer
field) and with Content-Length; an admin listener for /metrics.
Origin: the test origin, whose ?http10=1 answers with an HTTP/1.0 status
line and closes; each path scripted 503 (HTTP/1.0 or HTTP/1.1) then 200.
Proxy: replay_buffer 4KiB, spool_max 1MiB (a body over 4 KiB goes to a
spool file), retry.on [503], max_attempts 3, 50ms waits.
Must hold:
- a chunked body kept in memory, after an HTTP/1.0 503: the retry carries
  Content-Length with the body's length and no Transfer-Encoding, the
  origin reads it by that length, byte-exact (the trailer field is not
  sent: it has no place without chunked framing; nor is the Trailer field
  the client sent to announce it); the client gets the 200
  with Retry-Attempts: 2; the first try went chunked, as the client sent it
  (with its trailer section: see the last point);
- after two HTTP/1.0 503s, the third try goes with Content-Length too;
- after an HTTP/1.1 503 the retry goes chunked, as the client sent it;
- a Content-Length body after an HTTP/1.0 503 goes again as it came;
- an HTTP/1.0 upstream that keeps connections alive: a chunked body's
  first try on a pooled connection whose last answer came in HTTP/1.0 goes
  with Content-Length (the proxy knows the server's version from it), its
  trailer section and Trailer field left out; answering 408 on such a
  pooled one (taken as stale, replaced at once): the replacement goes with
  Content-Length too;
- on a new connection, a chunked body's first try to an upstream whose
  latest answer came in HTTP/1.0 (a GET's, its connection closed) goes
  with Content-Length; that try's HTTP/1.1 answer makes the next one go
  chunked again;
- a chunked body kept in a spool file (over replay_buffer), which the proxy
  re-sends from the file only as it came, chunked: after an HTTP/1.0 503 it
  is not sent again. The client gets that 503, unchanged, with
  Retry-Attempts: 1, the origin saw one try, the access line says
  gave_up=upstream_http10 and retries_given_up_total{reason="upstream_http10"}
  counts it. After an HTTP/1.1 503 the same body is retried from the file;
- a chunked body kept in memory whose first try goes to an upstream not
  heard from yet (no answer since the proxy started: HTTP/1.0 or HTTP/1.1
  unknown) goes with Content-Length, whatever the upstream speaks; the
  next goes as the answer says (chunked to HTTP/1.1, by length to
  HTTP/1.0); one with a trailer section goes chunked, trailer and all
  (the check above of /m/a: its first try is such a one), and so does one
  with chunk extensions, which the upstream gets as they came (they have
  no place without chunked framing either).
"""

import hashlib
import os

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  replay_buffer: 4KiB
  spool_max: 1MiB
  spool_dir: spool
defaults:
  retry:
    on: [503]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


def chunked(data, size=100, trailer=False, extension=True):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i:i + size]
        ext = b";note=x" if i == 0 and extension else b""
        out += b"%x%s\r\n" % (len(piece), ext) + piece + b"\r\n"
    out += b"0\r\n"
    if trailer:
        out += b"X-Checksum: abc\r\n"
    return out + b"\r\n"


def body_of(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(n))


def scenario(t):
    os.makedirs(os.path.join(t.tmp, "spool"), exist_ok=True)
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def put(path, steps, body, chunk=True, trailer=False):
        """Script path with steps, PUT body (chunked or by length; a trailer
        announced by a Trailer field); the response, the origin's requests
        for it and the access line's fields."""
        origin.script(path, steps)
        if chunk:
            headers, raw = [("Transfer-Encoding", "chunked")], chunked(body, trailer=trailer)
            if trailer:
                headers.append(("Trailer", "X-Checksum"))
        else:
            headers, raw = [], body
        r = h.fetch(proxy.port(), "PUT", origin.url(path), host, headers=headers, body=raw)
        return r, origin.requests_for(path), h.access_fields(proxy.access_one(path))

    def by_length(q, body, what):
        h.eq(q.framing, "length", "%s: framing at the origin" % what)
        h.eq(q.header_all("Transfer-Encoding"), [], "%s: Transfer-Encoding" % what)
        h.eq(q.header_all("Content-Length"), [str(len(body))], "%s: Content-Length" % what)
        h.eq(q.body_sha256, hashlib.sha256(body).hexdigest(), "%s: body sha256" % what)

    def by_chunks(q, body, what):
        h.eq(q.framing, "chunked", "%s: framing at the origin" % what)
        h.eq(q.header_all("Content-Length"), [], "%s: Content-Length" % what)
        h.eq(q.body_sha256, hashlib.sha256(body).hexdigest(), "%s: body sha256" % what)

    def given_up(reason):
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()
        return h.metric(text, "retryproxy_retries_given_up_total",
                        '{route="default",reason="%s"}' % reason)

    @t.check("a chunked body kept in memory goes with Content-Length after an HTTP/1.0 503")
    def _():
        body = body_of(1000, 1)
        r, reqs, fields = put("/m/a", ["/status/503?http10=1", 200], body, trailer=True)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq(len(reqs), 2, "tries at the origin")
        h.eq(reqs[0].version, "HTTP/1.1", "request version")
        by_chunks(reqs[0], body, "first try")
        h.eq(reqs[0].trailers, [("X-Checksum", "abc")], "first try's trailer")
        h.eq(reqs[0].header_all("Trailer"), ["X-Checksum"], "first try's Trailer field")
        by_length(reqs[1], body, "retry")
        h.eq(reqs[1].trailers, [], "retry's trailer fields")
        # no field may announce the trailer section the retry leaves out
        h.eq(reqs[1].header_all("Trailer"), [], "retry's Trailer field")
        h.eq(fields.get("tries"), "503 -> wait 50ms -> 200", "logged trail")

    @t.check("after two HTTP/1.0 503s the third try goes with Content-Length too")
    def _():
        body = body_of(777, 2)
        r, reqs, _ = put("/m/b", ["/status/503?http10=1", "/status/503?http10=1", 200], body)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts")
        h.eq(len(reqs), 3, "tries at the origin")
        by_chunks(reqs[0], body, "first try")
        by_length(reqs[1], body, "second try")
        by_length(reqs[2], body, "third try")

    @t.check("unchanged: chunked again after an HTTP/1.1 503; a Content-Length body as it came")
    def _():
        body = body_of(900, 3)
        r, reqs, _ = put("/m/c", [503, 200], body)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "HTTP/1.1 503: status, Retry-Attempts, tries")
        by_chunks(reqs[1], body, "retry after an HTTP/1.1 503")
        r, reqs, _ = put("/m/d", ["/status/503?http10=1", 200], body, chunk=False)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "Content-Length body: status, Retry-Attempts, tries")
        by_length(reqs[1], body, "Content-Length body's retry")

    @t.check("a 408 from an HTTP/1.0 upstream on a pooled connection: the replacement goes "
             "with Content-Length")
    def _():
        origin.script("/k/warm", ["/status/200?http10=keep"])
        r = h.fetch(proxy.port(), "GET", origin.url("/k/warm"), host)
        h.eq(r.status, 200, "the GET that leaves a kept-alive HTTP/1.0 connection pooled")
        body = body_of(500, 5)
        r, reqs, fields = put("/k/a", ["/status/408?http10=keep", 200], body)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "status, Retry-Attempts, tries")
        h.eq(reqs[0].conn_id, origin.requests_for("/k/warm")[0].conn_id,
             "the first try went on the pooled connection")
        # that connection's last answer came in HTTP/1.0
        by_length(reqs[0], body, "first try")
        by_length(reqs[1], body, "the stale connection's replacement")
        h.eq(fields.get("tries"), "stale -> wait 0ms -> 200", "logged trail")

    @t.check("a chunked body's first try on a pooled connection whose last answer came in "
             "HTTP/1.0 goes with Content-Length")
    def _():
        origin.script("/p/warm", ["/status/200?http10=keep"])
        r = h.fetch(proxy.port(), "GET", origin.url("/p/warm"), host)
        h.eq(r.status, 200, "the GET that leaves a kept-alive HTTP/1.0 connection pooled")
        body = body_of(600, 6)
        r, reqs, fields = put("/p/a", ["/status/200?http10=keep"], body, trailer=True)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "1", 1),
             "status, Retry-Attempts, tries")
        h.eq(reqs[0].conn_id, origin.requests_for("/p/warm")[0].conn_id,
             "the try went on the pooled connection")
        by_length(reqs[0], body, "the try on the pooled HTTP/1.0 connection")
        h.eq(reqs[0].trailers, [], "its trailer fields")
        h.eq(reqs[0].header_all("Trailer"), [], "its Trailer field")

    @t.check("a chunked body in the spool is not sent again to an HTTP/1.0 upstream: its 503, "
             "gave_up=upstream_http10")
    def _():
        body = body_of(20000, 4)
        r, reqs, fields = put("/s/a", ["/status/503?http10=1", 200], body)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        h.eq(r.body, b"status 503\n", "the 503's body, unchanged")
        h.eq(len(reqs), 1, "tries at the origin")
        by_chunks(reqs[0], body, "the one try")
        h.eq(fields.get("gave_up"), "upstream_http10", "gave_up")
        h.eq(given_up("upstream_http10"), 1.0, "given_up_total{reason=upstream_http10}")
        r, reqs, _ = put("/s/b", [503, 200], body)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "after an HTTP/1.1 503: status, Retry-Attempts, tries")
        by_chunks(reqs[1], body, "the spooled body's retry")

    @t.check("a chunked body's first try on a new connection to an upstream whose latest "
             "answer came in HTTP/1.0 goes with Content-Length; once it answers a chunked "
             "body in HTTP/1.1, chunked again")
    def _():
        # an upstream of its own, so that no pooled HTTP/1.1 connection of
        # the checks above stands in
        other = t.origin()
        other.script("/n/warm", ["/status/200?http10=1"])
        r = h.fetch(proxy.port(), "GET", other.url("/n/warm"), other.authority)
        h.eq(r.status, 200, "the GET answered in HTTP/1.0, its connection closed")
        body = body_of(700, 7)
        for path, framed in (("/n/a", by_length), ("/n/b", by_chunks)):
            other.script(path, [200])
            r = h.fetch(proxy.port(), "PUT", other.url(path), other.authority,
                        headers=[("Transfer-Encoding", "chunked")], body=chunked(body))
            reqs = other.requests_for(path)
            h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "1", 1),
                 "%s: status, Retry-Attempts, tries" % path)
            h.ok(reqs[0].conn_id != other.requests_for("/n/warm")[0].conn_id,
                 "%s went on a new connection" % path)
            framed(reqs[0], body, path)

    @t.check("a chunked body kept in memory, first to an upstream not heard from yet, goes "
             "with Content-Length (its HTTP/1.0 or HTTP/1.1 is not known); with a trailer "
             "section or a chunk extension it goes chunked; once an answer came, as that answer "
             "says")
    def _():
        body = body_of(800, 8)
        # a fresh upstream of each kind, so that no answer of the checks
        # above says what it speaks
        for http10 in (True, False):
            fresh = t.origin()
            answer = "/status/200?http10=1" if http10 else 200
            for path, framed in (("/f/a", by_length), ("/f/b", by_length if http10 else by_chunks)):
                fresh.script(path, [answer])
                r = h.fetch(proxy.port(), "PUT", fresh.url(path), fresh.authority,
                            headers=[("Transfer-Encoding", "chunked")],
                            body=chunked(body, extension=False))
                reqs = fresh.requests_for(path)
                what = "%s to an HTTP/1.%d upstream" % (path, 0 if http10 else 1)
                h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "1", 1),
                     "%s: status, Retry-Attempts, tries" % what)
                framed(reqs[0], body, what)
        # a trailer section has no place without chunked framing: kept
        fresh = t.origin()
        fresh.script("/f/t", [200])
        r = h.fetch(proxy.port(), "PUT", fresh.url("/f/t"), fresh.authority,
                    headers=[("Transfer-Encoding", "chunked"), ("Trailer", "X-Checksum")],
                    body=chunked(body, trailer=True))
        reqs = fresh.requests_for("/f/t")
        h.eq((r.status, len(reqs)), (200, 1), "with a trailer: status, tries")
        by_chunks(reqs[0], body, "with a trailer")
        h.eq(reqs[0].trailers, [("X-Checksum", "abc")], "its trailer")
        # nor have chunk extensions: kept as well, and the upstream gets them
        fresh = t.origin()
        fresh.script("/f/e", [200])
        r = h.fetch(proxy.port(), "PUT", fresh.url("/f/e"), fresh.authority,
                    headers=[("Transfer-Encoding", "chunked")], body=chunked(body))
        reqs = fresh.requests_for("/f/e")
        h.eq((r.status, len(reqs)), (200, 1), "with a chunk extension: status, tries")
        by_chunks(reqs[0], body, "with a chunk extension")
        h.eq(reqs[0].chunk_extensions, [b"note=x"], "its chunk extension")


h.run(scenario, __doc__)
