#!/usr/bin/env python3
"""Scenario: bodies stream through in both directions, not store-and-forward.

Client: raw sockets. Downloads: GETs (retryable by the default policy) of
gated responses, with Content-Length and chunked. Uploads: a POST and a PUT
whose bodies (Content-Length, and chunked) are larger than replay_buffer
(64 KiB), of which the client sends only the first half before waiting.
Origin: for downloads, sends the head and the first part, then waits on a
gate the test releases; for uploads, reads and records progress.
Must hold: the client receives the head and the whole first part while the
origin is still held at the gate; the origin receives the whole first half
of an upload while the client still holds the second half back; the
complete bodies arrive byte-exact afterwards.
"""

import hashlib
import json
import os

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
defaults:
  retry:
    initial_backoff: 100ms
    jitter: 10ms
"""

FIRST = 5000
REST = 7000


def read_body_bytes(c, resp, n):
    """Read n body bytes of resp from c, whatever the framing."""
    te = ",".join(resp.header_all("Transfer-Encoding")).lower()
    if "chunked" not in te:
        return c.read_exact(n)
    out = bytearray()
    while len(out) < n:
        size = int(c.read_until(b"\r\n")[:-2].split(b";")[0], 16)
        h.ok(size > 0, "chunked body ended after %d of %d bytes" % (len(out), n))
        out += c.read_exact(size)
        h.eq(c.read_exact(2), b"\r\n", "chunk terminator")
    return bytes(out)


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    auth = origin.authority

    def gated_download(name, chunked):
        gate = origin.gate(name)
        query = "first=%d&rest=%d%s" % (FIRST, REST, "&chunked=1" if chunked else "")
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", origin.url("/gate/%s?%s" % (name, query)), auth))
            gate.wait_reached(10)
            resp = c.read_head(timeout=10)
            h.eq(resp.status, 200, "status")
            first = read_body_bytes(c, resp, FIRST)
            h.ok(not gate.released.is_set(), "gate was released early (test bug)")
            h.eq(first, o.pattern_bytes(FIRST), "first part, received while the origin waits")
            gate.release()
            if "chunked" in ",".join(resp.header_all("Transfer-Encoding")).lower():
                rest = read_body_bytes(c, resp, REST)
                h.eq(c.read_until(b"\r\n"), b"0\r\n", "last chunk")
            elif resp.header("Content-Length") is not None:
                h.eq(resp.header("Content-Length"), str(FIRST + REST), "Content-Length")
                rest = c.read_exact(REST)
            else:
                rest = c.read_to_close()
            h.eq(first + rest, o.pattern_bytes(FIRST + REST), "whole body")

    @t.check("Content-Length response: client gets the first part while the origin is held")
    def _():
        gated_download("cl", chunked=False)

    @t.check("chunked response: client gets the first part while the origin is held")
    def _():
        gated_download("chunked", chunked=True)

    def gated_upload(method, tag, chunked):
        total = 512 * 1024
        half = total // 2
        body = os.urandom(total)
        with h.RawConn(proxy.port(), timeout=15) as c:
            if chunked:
                c.send(("%s %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                        % (method, origin.url("/echo?t=" + tag), auth)).encode())
                for i in range(0, half, 16384):
                    c.send(b"%x\r\n" % 16384 + body[i:i + 16384] + b"\r\n")
            else:
                c.send(("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
                        % (method, origin.url("/echo?t=" + tag), auth, total)).encode() + body[:half])
            origin.wait_for(lambda org: any(q.query.get("t") == tag and q.body_len >= half
                                            for q in org.requests), 10,
                            "the origin to receive the first %d bytes of the upload" % half)
            if chunked:
                for i in range(half, total, 16384):
                    c.send(b"%x\r\n" % 16384 + body[i:i + 16384] + b"\r\n")
                c.send(b"0\r\n\r\n")
            else:
                c.send(body[half:])
            r = c.read_response(timeout=15)
        h.eq(r.status, 200, "status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (total, hashlib.sha256(body).hexdigest()),
             "whole body at the origin")

    @t.check("POST with Content-Length: the origin gets the first half while the client holds the rest")
    def _():
        gated_upload("POST", "post-cl", chunked=False)

    @t.check("PUT (idempotent) chunked, larger than replay_buffer: streamed, not held")
    def _():
        gated_upload("PUT", "put-chunked", chunked=True)


h.run(scenario, __doc__)
