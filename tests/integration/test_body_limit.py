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
(README: a body not kept to be sent again never does).
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


h.run(scenario, __doc__)
