#!/usr/bin/env python3
"""Scenario: Expect: 100-continue.

Client: curl posting with Expect: 100-continue; raw sockets that send a
head with Expect: 100-continue and hold the body back until 100 Continue
arrives (Content-Length and chunked), one whose Content-Length is over
max_body_bytes, and an HTTP/1.0 one.
Origin: echoes what it got (it would answer Expect itself if it saw it).
Must hold: the proxy sends exactly one 100 Continue before it has the body,
then the final response; the origin gets the body byte-exact and no Expect
field; a body announced over max_body_bytes gets 413 without 100 Continue
and without the body being sent; an HTTP/1.0 request gets no 100 Continue
(RFC 9110 10.1.1).
"""

import hashlib
import json
import os

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  max_body_bytes: 1MiB
defaults:
  retry:
    max_attempts: 1
"""


def sha(b):
    return hashlib.sha256(b).hexdigest()


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    auth = origin.authority

    @t.check("curl with Expect: 100-continue gets 100 then 200; origin gets the body, no Expect")
    def _():
        body = os.urandom(300 * 1024)
        path = os.path.join(t.tmp, "body.bin")
        with open(path, "wb") as f:
            f.write(body)
        r = h.curl("-H", "Expect: 100-continue", "--expect100-timeout", "10", "--data-binary", "@" + path,
                   origin.url("/echo?t=curl"), proxy=proxy.url)
        h.eq(r.exit_code, 0, "curl exit (%r)" % r)
        h.eq([s for s, _ in r.heads], [100, 200], "response heads curl saw")
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (len(body), sha(body)), "body at the origin")
        h.ok("expect" not in [n.lower() for n, _ in seen["headers"]], "Expect reached the origin: %r" % seen["headers"])

    @t.check("raw, Content-Length: 100 Continue arrives before the body is sent, then one final 200")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(("POST %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n"
                    % (origin.url("/echo?t=rawcl"), auth)).encode())
            interim = c.read_head(timeout=5)
            h.eq(interim.status, 100, "first response head before the body is sent")
            c.send(b"hello world")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (11, sha(b"hello world")), "body at the origin")

    @t.check("raw, chunked: 100 Continue before the body, body exact at the origin")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(("PUT %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
                    % (origin.url("/echo?t=rawchunked"), auth)).encode())
            interim = c.read_head(timeout=5)
            h.eq(interim.status, 100, "first response head before the body is sent")
            c.send(b"6\r\nchunky\r\n0\r\n\r\n")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (6, sha(b"chunky")), "body at the origin")
        h.ok("expect" not in [n.lower() for n, _ in seen["headers"]], "Expect reached the origin")

    @t.check("Content-Length over max_body_bytes with Expect: 413 without 100 and without the body")
    def _():
        before = len(origin.requests)
        with h.RawConn(proxy.port()) as c:
            c.send(("POST %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                    % (origin.url("/echo?t=toolarge"), auth, 2 << 20)).encode())
            r = c.read_response(timeout=5, skip_1xx=False)
        h.check_error_response(r, 413)
        h.eq(len(origin.requests), before, "requests that reached the origin")

    @t.check("HTTP/1.0 request with Expect: no 100 Continue, the body is simply read")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(("POST %s HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
                    % origin.url("/echo?t=h10")).encode())
            h.ok(c.silent_for(1.0), "the proxy sent something before the body: %r" % bytes(c.buf))
            c.send(b"abcde")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "status (%r)" % r)
        h.eq(json.loads(r.body)["body_sha256"], sha(b"abcde"), "body at the origin")


h.run(scenario, __doc__)
