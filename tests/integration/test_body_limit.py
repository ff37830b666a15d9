#!/usr/bin/env python3
"""Scenario: request bodies over limits.max_body_bytes, refused alike.

Client: raw sockets to a sidecar listener (route "limited", max_body_bytes
1 KiB, replay_buffer left at 8 MiB) sending a POST (not idempotent: its body
is not kept for a retry) and a PUT (kept) with a chunked body over the
limit, a chunked POST with Expect: 100-continue whose body comes after the
100, a POST whose Content-Length is over the limit, a chunked POST under the
limit sent in two pieces, with a GET pipelined behind it, and a GET then a
chunked PUT on one connection to a route with max_attempts: 1.
Origin: echoes what it got.
Must hold: every body over the limit gets 413 with Retry-Attempts: 0 and an
access line under its route with attempts 0 and no tries, and no connection
reaches the origin (SPEC: nothing of a refused request reaches the
upstream), whether its size was announced or found in its chunks, kept for a
retry or not; the chunked body under the limit reaches the origin
byte-exact, still chunked, and the pipelined GET is answered after it; the
PUT, whose body is read whole only for the limit, takes no pooled connection
(README: a body not kept to be sent again never does). A client that goes
on sending a 16 MiB body for 4 s after its 413 (it reads the answer only
once its body is sent) is read to the end and gets the 413, not a reset;
one that stops sending and keeps its connection open is closed 2 s after
its 413. A PUT with a body on the max_attempts: 1 route answered 503 gave
up for attempts, as a GET does, not for not_idempotent (a PUT is
idempotent: its body was only not kept because no retry could follow).
"""

import hashlib
import json
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log:
  format: json
limits:
  drain_timeout: 2s
  max_body_bytes: 1KiB
routes:
  - name: once
    match: { path_prefix: /echo/once }
    retry: { max_attempts: 1 }
  - name: limited
    match: { path_prefix: /echo }
"""

CHUNK = b"3e8\r\n" + b"x" * 1000 + b"\r\n"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def refused_alike(tag, head, body=b"", expect=False):
        before = len(origin.connections)
        with h.RawConn(proxy.port()) as c:
            c.send(head)
            if expect:
                interim = c.read_head(timeout=5)
                h.eq(interim.status, 100, "the 100 Continue before the body")
            c.send(body)
            r = c.read_response(timeout=5)
        h.check_error_response(r, 413)
        h.eq(r.header("Retry-Attempts"), "0", "Retry-Attempts of a refused request")
        entry = proxy.access_one(tag)
        h.eq((entry["route"], entry["status"], entry["attempts"], entry["tries"]),
             ("limited", 413, 0, []), "the access line's route, status, attempts and tries")
        time.sleep(0.3)
        h.eq(len(origin.connections), before, "connections that reached the origin")

    @t.check("a chunked POST over max_body_bytes (streamed, not kept): 413, Retry-Attempts: 0, "
             "nothing reaches the origin")
    def _():
        refused_alike("t=chunkpost", b"POST /echo?t=chunkpost HTTP/1.1\r\nHost: a.example\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + CHUNK + CHUNK + b"0\r\n\r\n")

    @t.check("a chunked PUT over max_body_bytes (kept for a retry): the same")
    def _():
        refused_alike("t=chunkput", b"PUT /echo?t=chunkput HTTP/1.1\r\nHost: a.example\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + CHUNK + CHUNK + b"0\r\n\r\n")

    @t.check("a chunked POST with Expect: 100-continue, its body over the limit after the 100: "
             "the same")
    def _():
        refused_alike("t=chunkexpect", b"POST /echo?t=chunkexpect HTTP/1.1\r\nHost: a.example\r\n"
                      b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
                      CHUNK + CHUNK + b"0\r\n\r\n", expect=True)

    @t.check("a POST whose Content-Length is over max_body_bytes: the same, under its route")
    def _():
        refused_alike("t=length", b"POST /echo?t=length HTTP/1.1\r\nHost: a.example\r\n"
                      b"Content-Length: 2048\r\n\r\n")

    @t.check("a client that sends a 16 MiB body over 4 s before reading the 413 (no Expect, as "
             "many HTTP libraries do) finishes sending and then reads its 413: the proxy lingers "
             "while the body keeps coming, not a fixed 2 s")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"POST /echo?t=slowsender HTTP/1.1\r\nHost: a.example\r\n"
                   b"Content-Length: %d\r\n\r\n" % (16 << 20))
            piece = b"s" * (64 << 10)
            started = time.monotonic()
            for i in range(256):
                try:
                    c.sock.sendall(piece)
                except OSError as e:
                    raise AssertionError("sending the body failed after %.1fs: %r"
                                         % (time.monotonic() - started, e))
                time.sleep(4.0 / 256)
            r = c.read_response(timeout=5)
        h.check_error_response(r, 413)

    @t.check("a client that stops sending after the 413, its connection open, is closed 2 s "
             "later (a byte sent then is answered with a reset)")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"POST /echo?t=stops HTTP/1.1\r\nHost: a.example\r\n"
                   b"Content-Length: 4096\r\n\r\n" + b"s" * 1000)
            r = c.read_response(timeout=5)
            h.check_error_response(r, 413)
            time.sleep(2.0 + 0.6 * h.SLOW)
            try:
                c.sock.sendall(b"s")
                time.sleep(0.2)
                c.sock.sendall(b"s")
                reset = False
            except OSError:
                reset = True
        h.ok(reset, "the connection was still open %.1fs after the 413" % (2.0 + 0.6 * h.SLOW))

    @t.check("a chunked POST under the limit in two pieces reaches the origin exact, and a GET "
             "pipelined behind it is answered")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"POST /echo?t=under HTTP/1.1\r\nHost: a.example\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            time.sleep(0.3)
            c.send(b"6\r\n world\r\n0\r\n\r\n"
                   b"GET /echo?t=behind HTTP/1.1\r\nHost: a.example\r\n\r\n")
            first = c.read_response(timeout=10)
            second = c.read_response(timeout=10)
        h.eq(first.status, 200, "status (%r)" % first)
        seen = json.loads(first.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (11, sha(b"hello world")), "body at the origin")
        h.ok(["Transfer-Encoding", "chunked"] in seen["headers"],
             "the body went on chunked: %r" % seen["headers"])
        h.eq(first.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.eq(second.status, 200, "the pipelined GET's status (%r)" % second)
        h.eq(json.loads(second.body)["target"], "/echo?t=behind", "the pipelined GET's target")

    @t.check("a chunked PUT under the limit on a route with max_attempts: 1 (read whole for the "
             "limit, sent once) takes no pooled connection")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(b"GET /echo/once?t=warm HTTP/1.1\r\nHost: a.example\r\n\r\n")
            h.eq(c.read_response(timeout=10).status, 200, "the GET's status")
            origin.wait_for(lambda o: o.requests_for("/echo/once")
                            and o.requests_for("/echo/once")[-1].finished_at is not None)
            warm = origin.requests_for("/echo/once")[-1].conn_id
            c.send(b"PUT /echo/once?t=put HTTP/1.1\r\nHost: a.example\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            r = c.read_response(timeout=10)
        h.eq(r.status, 200, "the PUT's status (%r)" % r)
        seen = json.loads(r.body)
        h.eq(seen["body_sha256"], sha(b"hello"), "body at the origin")
        h.ok(origin.requests_for("/echo/once")[-1].conn_id != warm,
             "the PUT went on the GET's pooled connection")

    @t.check("a PUT with a body answered 503 on a route with max_attempts: 1 gave up for "
             "attempts, as one without a body does, not for not_idempotent")
    def _():
        for tag, head in (("put503", b"PUT /echo/once?t=put503&status=503 HTTP/1.1\r\n"
                                     b"Host: a.example\r\nContent-Length: 5\r\n\r\nhello"),
                          ("chunked503", b"PUT /echo/once?t=chunked503&status=503 HTTP/1.1\r\n"
                                         b"Host: a.example\r\nTransfer-Encoding: chunked\r\n"
                                         b"\r\n5\r\nhello\r\n0\r\n\r\n"),
                          ("get503", b"GET /echo/once?t=get503&status=503 HTTP/1.1\r\n"
                                     b"Host: a.example\r\n\r\n")):
            with h.RawConn(proxy.port()) as c:
                c.send(head)
                r = c.read_response(timeout=10)
            h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "%s: status" % tag)
            entry = proxy.access_one("t=" + tag)
            h.eq(entry.get("gave_up"), "attempts", "%s: the access line's gave_up (%r)"
                 % (tag, entry))


h.run(scenario, __doc__)
