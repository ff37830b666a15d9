#!/usr/bin/env python3
"""Scenario: request bodies kept and re-sent byte-exact, or streamed once.

Client: curl PUTs random bodies from a file through a forward proxy, with
Content-Length and chunked (Transfer-Encoding: chunked); one proxy has the
default replay_buffer (8MiB), another replay_buffer 64KiB.
Origin: answers 503, 503, then 200 (or 503 then 200) per path, and records
every request body's length and sha256.
Must hold: a 1 MiB Content-Length PUT and a chunked PUT of 1,000,003 bytes
each end in 200 with Retry-Attempts: 3, and the origin received the body 3
times, each with the client's sha256 (and the chunked one as chunked each
time), also when the client sent Expect: 100-continue, and also when the
origin reset the first two tries before reading any of the body; with
replay_buffer 64KiB, a 60 KiB PUT is still repeated, while a 256 KiB PUT, by
Content-Length or chunked, reaches the origin once, whole, the client gets
the 503 with Retry-Attempts: 1 and the access line says
gave_up=body_too_large.
"""

import hashlib
import os
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  replay_buffer: @REPLAY@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    multiplier: 2
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


def scenario(t):
    origin = t.origin()
    big = t.proxy(CONFIG, REPLAY="8MiB")
    small = t.proxy(CONFIG, REPLAY="64KiB")

    def body_file(n, name):
        data = os.urandom(n)
        path = os.path.join(t.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path, hashlib.sha256(data).hexdigest()

    def put(proxy, path, file, steps, chunked=False, expect=""):
        origin.script(path, steps)
        args = ["-X", "PUT", "--data-binary", "@" + file, "-H", "Content-Type: application/octet-stream",
                "-H", "Expect: " + expect]
        if chunked:
            args += ["-H", "Transfer-Encoding: chunked"]
        r = h.curl(*args, origin.url(path), proxy=proxy.url, timeout=30)
        time.sleep(0.4 * h.SLOW)
        return r, origin.requests_for(path)

    def same_body(reqs, n, sha, what):
        for i, q in enumerate(reqs):
            h.eq((q.body_len, q.body_sha256), (n, sha),
                 "%s: body length and sha256 of try %d" % (what, i + 1))

    @t.check("1 MiB PUT (Content-Length), 503, 503, 200: the origin got it 3 times, byte-exact")
    def _():
        n = 1 << 20
        f, sha = body_file(n, "1mib")
        r, reqs = put(big, "/replay/cl", f, [503, 503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 3, "requests the origin saw")
        same_body(reqs, n, sha, "CL")
        h.eq([q.framing for q in reqs], ["length"] * 3, "framing at the origin")

    @t.check("the same with Expect: 100-continue: 200 after 3 tries, body byte-exact each time")
    def _():
        n = (1 << 20) + 5
        f, sha = body_file(n, "expect")
        r, reqs = put(big, "/replay/expect", f, [503, 503, "/echo"], expect="100-continue")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 3, "requests the origin saw")
        same_body(reqs, n, sha, "Expect")

    @t.check("1 MiB PUT, origin resets before reading the body twice, then 200: whole body on try 3")
    def _():
        n = 1 << 20
        f, sha = body_file(n, "resethead")
        r, reqs = put(big, "/replay/resethead", f, ["/reset/head", "/reset/head", "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 3, "requests the origin saw")
        same_body(reqs[2:], n, sha, "after two cut-off sends")

    @t.check("chunked PUT of 1,000,003 bytes, 503, 503, 200: the origin got it 3 times, byte-exact")
    def _():
        n = 1000003
        f, sha = body_file(n, "chunked")
        r, reqs = put(big, "/replay/chunked", f, [503, 503, "/echo"], chunked=True)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 3, "requests the origin saw")
        same_body(reqs, n, sha, "chunked")
        h.eq([q.framing for q in reqs], ["chunked"] * 3, "framing at the origin")

    @t.check("replay_buffer 64KiB: a 60 KiB PUT is still repeated, byte-exact")
    def _():
        n = 60 * 1024
        f, sha = body_file(n, "60k")
        r, reqs = put(small, "/replay/under", f, [503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 2, "requests the origin saw")
        same_body(reqs, n, sha, "60 KiB")

    @t.check("replay_buffer 64KiB: a 256 KiB PUT (Content-Length) goes once, whole, not retried")
    def _():
        n = 256 * 1024
        f, sha = body_file(n, "256k")
        r, reqs = put(small, "/replay/over-cl", f, [503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 1, "requests the origin saw")
        same_body(reqs, n, sha, "256 KiB")
        fl = h.access_fields(small.access_one("/replay/over-cl"))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")

    @t.check("replay_buffer 64KiB: a 256 KiB chunked PUT goes once, whole, not retried")
    def _():
        n = 256 * 1024 + 17
        f, sha = body_file(n, "256k-chunked")
        r, reqs = put(small, "/replay/over-chunked", f, [503, "/echo"], chunked=True)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 1, "requests the origin saw")
        same_body(reqs, n, sha, "256 KiB chunked")
        h.eq(reqs[0].framing, "chunked", "framing at the origin")
        fl = h.access_fields(small.access_one("/replay/over-chunked"))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")


h.run(scenario, __doc__)
