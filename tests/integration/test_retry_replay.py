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
origin reset the first two tries before reading any of the body; an 8 MiB
PUT the origin answers 413 (or 503) before reading its body, closing with
the body unread (a reset), gets that 413 after one try (the 503 is retried
and the trail starts with it), not a 502 for the reset; a 200 whose body
ends with the connection, sent that way, is never passed on as whole; with
replay_buffer 64KiB, a 60 KiB PUT is still repeated, while a 256 KiB PUT, by
Content-Length or chunked, reaches the origin once, whole, the client gets
the 503 with Retry-Attempts: 1 and the access line says
gave_up=body_too_large.
"""

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

    def put(proxy, path, file, steps, chunked=False, expect=""):
        origin.script(path, steps)
        args = ["-X", "PUT", "--data-binary", "@" + file, "-H", "Content-Type: application/octet-stream",
                "-H", "Expect: " + expect]
        if chunked:
            args += ["-H", "Transfer-Encoding: chunked"]
        r = h.curl(*args, origin.url(path), proxy=proxy.url, timeout=30)
        time.sleep(0.4 * h.SLOW)
        return r, origin.requests_for(path)

    def replayed(proxy, path, n, steps, status, attempts, **kw):
        """PUT n random bytes to path, scripted with steps; check the
        status, Retry-Attempts and the number of requests at the origin.
        Returns (the origin's requests, the body's sha256)."""
        f, sha = h.random_body_file(t.tmp, n, path.strip("/").replace("/", "-"))
        r, reqs = put(proxy, path, f, steps, **kw)
        h.eq((r.status, r.header("Retry-Attempts")), (status, str(attempts)),
             "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), attempts, "requests the origin saw")
        return reqs, sha

    def same_body(reqs, n, sha, what):
        for i, q in enumerate(reqs):
            h.eq((q.body_len, q.body_sha256), (n, sha),
                 "%s: body length and sha256 of try %d" % (what, i + 1))

    @t.check("1 MiB PUT (Content-Length), 503, 503, 200: the origin got it 3 times, byte-exact")
    def _():
        n = 1 << 20
        reqs, sha = replayed(big, "/replay/cl", n, [503, 503, "/echo"], 200, 3)
        same_body(reqs, n, sha, "CL")
        h.eq([q.framing for q in reqs], ["length"] * 3, "framing at the origin")

    @t.check("the same with Expect: 100-continue: 200 after 3 tries, body byte-exact each time")
    def _():
        n = (1 << 20) + 5
        reqs, sha = replayed(big, "/replay/expect", n, [503, 503, "/echo"], 200, 3, expect="100-continue")
        same_body(reqs, n, sha, "Expect")

    @t.check("1 MiB PUT, origin resets before reading the body twice, then 200: whole body on try 3")
    def _():
        n = 1 << 20
        reqs, sha = replayed(big, "/replay/resethead", n, ["/reset/head", "/reset/head", "/echo"], 200, 3)
        same_body(reqs[2:], n, sha, "after two cut-off sends")

    @t.check("8 MiB PUT answered 413 before its body was read, the connection then reset: the "
             "client gets the 413, once")
    def _():
        replayed(big, "/replay/early413", 8 << 20, ["/early/413"], 413, 1)
        fl = h.access_fields(big.access_one("/replay/early413"))
        h.eq((fl["status"], fl.get("tries")), ("413", "413"), "access status, tries")

    @t.check("8 MiB PUT answered 503 before its body was read, the connection then reset: "
             "retried after the 503, whole body on try 2")
    def _():
        n = 8 << 20
        reqs, sha = replayed(big, "/replay/early503", n, ["/early/503", "/echo"], 200, 2)
        same_body(reqs[1:], n, sha, "after the early 503")
        fl = h.access_fields(big.access_one("/replay/early503"))
        h.ok(fl.get("tries", "").startswith("503 "), "the trail starts with the 503: %r"
             % fl.get("tries"))

    @t.check("8 MiB PUT answered 200 with a body that ends with the connection, before the "
             "request body was read, the connection then reset: never passed on as whole")
    def _():
        path = "/replay/early-close"
        f, _ = h.random_body_file(t.tmp, 8 << 20, "early-close")
        r, _ = put(big, path, f, ["/early/200?size=131034"])
        h.ok(not (r.exit_code == 0 and r.status == 200),
             "a 200 whose end the reset may have cut came as whole: %r" % r)
        fl = h.access_fields(big.access_one(path))
        h.ok(fl.get("status") != "200" or "reset" in fl.get("note", ""),
             "the access line says the body broke off: %r" % fl)

    @t.check("chunked PUT of 1,000,003 bytes, 503, 503, 200: the origin got it 3 times, byte-exact")
    def _():
        n = 1000003
        reqs, sha = replayed(big, "/replay/chunked", n, [503, 503, "/echo"], 200, 3, chunked=True)
        same_body(reqs, n, sha, "chunked")
        h.eq([q.framing for q in reqs], ["chunked"] * 3, "framing at the origin")

    @t.check("replay_buffer 64KiB: a 60 KiB PUT is still repeated, byte-exact")
    def _():
        n = 60 * 1024
        reqs, sha = replayed(small, "/replay/under", n, [503, "/echo"], 200, 2)
        same_body(reqs, n, sha, "60 KiB")

    @t.check("replay_buffer 64KiB: a 256 KiB PUT (Content-Length) goes once, whole, not retried")
    def _():
        n = 256 * 1024
        reqs, sha = replayed(small, "/replay/over-cl", n, [503, "/echo"], 503, 1)
        same_body(reqs, n, sha, "256 KiB")
        fl = h.access_fields(small.access_one("/replay/over-cl"))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")

    @t.check("replay_buffer 64KiB: a 256 KiB chunked PUT goes once, whole, not retried")
    def _():
        n = 256 * 1024 + 17
        reqs, sha = replayed(small, "/replay/over-chunked", n, [503, "/echo"], 503, 1, chunked=True)
        same_body(reqs, n, sha, "256 KiB chunked")
        h.eq(reqs[0].framing, "chunked", "framing at the origin")
        fl = h.access_fields(small.access_one("/replay/over-chunked"))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")

    @t.check("replay_buffer 64KiB: a chunked PUT whose last 99 KiB come in one burst goes once")
    def _():
        # the body crosses replay_buffer in the same read that ends it
        path = "/replay/over-chunked-burst"
        origin.script(path, [503, "/echo"])
        rest = os.urandom(99 * 1024)
        with h.RawConn(small.port()) as c:
            c.send(h.request("PUT", origin.url(path), "127.0.0.1:%d" % origin.port,
                             headers=[("Transfer-Encoding", "chunked")]) +
                   b"3e8\r\n" + b"a" * 1000 + b"\r\n")
            time.sleep(0.3 * h.SLOW)
            c.send(b"%x\r\n" % len(rest) + rest + b"\r\n0\r\n\r\n")
            r = c.read_response()
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        time.sleep(0.4 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 1, "requests the origin saw")
        fl = h.access_fields(small.access_one(path))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")


h.run(scenario, __doc__)
