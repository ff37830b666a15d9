#!/usr/bin/env python3
"""Scenario: limits.spool_total caps what all spool files hold at once.

Client: curl PUTs random 5 MiB bodies through a forward proxy with
replay_buffer 64KiB, spool_max 8MiB and spool_total 8MiB (one body fits,
two do not); curl to the admin listener for /metrics.
Origin: for A, 503 then a response held half-sent on a gate (A's second try
stays in flight, its file open); for B and C, 503 then /echo. Every body's
length and sha256 is recorded.
Must hold:
- retryproxy_spool_bytes is 0 at the start, A's 5 MiB while A is in flight;
- B (Content-Length), sent while A holds its file, cannot fit in the 3 MiB
  spool_total leaves: it goes to the origin once, whole and byte-exact,
  the client gets the origin's 503 with Retry-Attempts: 1, the access line
  says gave_up=body_too_large, the give-up is counted, and the log names
  spool_total at once, no byte of B written to a file (before, B was
  written until the cap stopped it, up to 3 MiB of disk writes for
  nothing); the gauge stays at A's bytes;
- B2 (chunked, its size unknown until it has come) passes spool_total part
  way: the same, once, byte-exact, 503, body_too_large, and the log names
  spool_total after a part of B2 (more than 0, at most the 3 MiB left) went
  to its file; once B2 ends the gauge is back to A's bytes;
- A, released, gets its 200 with Retry-Attempts: 2, and the origin got it
  twice, byte-exact;
- after both ended the gauge is 0 and no spool file is open; then C (same
  size as B) is spooled and retried again: 200, Retry-Attempts: 2, twice
  byte-exact, and the gauge goes back to 0;
- D and E (5 MiB each, Content-Length, raw connections) side by side: once
  D's head and first 256 KiB came, the gauge shows D's whole length (a body
  of known length counts from its head, as in retry_memory); E's head then
  finds no room: E goes once at once, whole, 503, no byte of it spooled,
  while D's body and E's arrive in turns; D gets 200 after two tries, both
  byte-exact. (Before, only bytes written counted: both bodies were written
  until together they passed the cap, and both went once, unretried,
  though either fitted alone.)
"""

import hashlib
import os
import re
import threading

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
  spool_max: 8MiB
  spool_total: 8MiB
  spool_dir: spool
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20
SIZE = 5 * MiB


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG)

    def metrics():
        return h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()

    def spool_bytes():
        m = re.search(r"^retryproxy_spool_bytes (\d+)$", metrics(), re.M)
        h.ok(m is not None, "retryproxy_spool_bytes is in /metrics")
        return int(m.group(1))

    def gave_up_body_too_large():
        m = re.search(r'^retryproxy_retries_given_up_total\{route="default",'
                      r'reason="body_too_large"\} (\d+)$', metrics(), re.M)
        return int(m.group(1)) if m else 0

    def put(path, file, chunked=False):
        extra = ["-H", "Transfer-Encoding: chunked"] if chunked else []
        return h.curl("-X", "PUT", "--data-binary", "@" + file, "-H", "Expect:", *extra,
                      origin.url(path), proxy=proxy.url, timeout=60 * h.SLOW)

    def bodies(path):
        return [(q.body_len, q.body_sha256) for q in origin.requests_for(path)]

    def open_spool_files():
        out = []
        for fd in os.listdir("/proc/%d/fd" % proxy.pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (proxy.pid, fd))
            except OSError:
                continue
            if link.startswith(spool_dir + "/"):
                out.append(link)
        return out

    file_a, sha_a = h.random_body_file(t.tmp, SIZE, "a")
    file_b, sha_b = h.random_body_file(t.tmp, SIZE, "b")
    file_b2, sha_b2 = h.random_body_file(t.tmp, SIZE, "b2")
    file_c, sha_c = h.random_body_file(t.tmp, SIZE, "c")
    gate = origin.gate("total-a")
    origin.script("/total/a", [503, "/gate/total-a?first=10&rest=10"])
    origin.script("/total/b", [503, "/echo"])
    origin.script("/total/b2", [503, "/echo"])
    origin.script("/total/c", [503, "/echo"])
    result = {}
    thread = threading.Thread(target=lambda: result.update(a=put("/total/a", file_a)),
                              daemon=True)

    @t.check("the gauge is 0 at the start, A's bytes while A is in flight")
    def _():
        h.eq(spool_bytes(), 0, "retryproxy_spool_bytes at the start")
        thread.start()
        gate.wait_reached(30 * h.SLOW)
        h.eq(spool_bytes(), SIZE, "retryproxy_spool_bytes with A's file open")

    def sent_once(path, file, sha):
        before = gave_up_body_too_large()
        r = put(path, file, chunked=path.endswith("b2"))
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies(path), [(SIZE, sha)], "the bodies at the origin")
        fields = h.access_fields(proxy.access_one(path))
        h.eq((fields.get("attempts"), fields.get("gave_up")), ("1", "body_too_large"),
             "access attempts, gave_up")
        h.eq(gave_up_body_too_large(), before + 1, "body_too_large give-ups counted")

    @t.check("B (Content-Length) cannot fit: once, whole, 503, body_too_large, no byte spooled")
    def _():
        sent_once("/total/b", file_b, sha_b)
        proxy.wait_log(r"PUT \S*/total/b: request body of %d bytes would take the spool "
                       r"files past spool_total: sent once, not retried" % SIZE)
        h.eq([ln for ln in proxy.stderr_lines() if "/total/b: request body not spooled" in ln],
             [], "log lines of B's file stopped part way")
        h.eq(spool_bytes(), SIZE, "the gauge, A's bytes alone")

    @t.check("B2 (chunked) passes spool_total part way: once, whole, 503, body_too_large")
    def _():
        sent_once("/total/b2", file_b2, sha_b2)
        line = proxy.wait_log(r"PUT \S*/total/b2: request body not spooled after \d+ bytes: "
                              r"the spool files together would pass spool_total")[0]
        spooled = int(re.search(r"after (\d+) bytes", line).group(1))
        h.ok(0 < spooled <= 8 * MiB - SIZE,
             "B2's file took %d bytes, at most the %d left" % (spooled, 8 * MiB - SIZE))
        h.wait_until(lambda: spool_bytes() == SIZE, 5 * h.SLOW,
                     "the gauge back to A's bytes once B2 ended")

    @t.check("A, released, gets 200 after two tries, both byte-exact")
    def _():
        gate.release()
        thread.join(60 * h.SLOW)
        r = result.get("a")
        h.ok(r is not None, "A's curl ended")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies("/total/a"), [(SIZE, sha_a)] * 2, "A's bodies at the origin")

    @t.check("after both: the gauge is 0, no spool file open")
    def _():
        h.wait_until(lambda: spool_bytes() == 0, 5 * h.SLOW, "retryproxy_spool_bytes 0")
        h.wait_until(lambda: not open_spool_files(), 5 * h.SLOW, "no spool file open")
        h.eq(os.listdir(spool_dir), [], "names in the spool directory")

    @t.check("room again: C is spooled and retried, byte-exact, and the gauge goes to 0")
    def _():
        r = put("/total/c", file_c)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies("/total/c"), [(SIZE, sha_c)] * 2, "C's bodies at the origin")
        h.wait_until(lambda: spool_bytes() == 0, 5 * h.SLOW, "retryproxy_spool_bytes 0")

    @t.check("D and E (Content-Length) side by side: D's length counts from its head, so E "
             "goes once at once and D is retried")
    def _():
        origin.script("/total/d", [503, "/echo"])
        origin.script("/total/e", [503, "/echo"])
        body_d, body_e = os.urandom(SIZE), os.urandom(SIZE)
        piece = 256 * 1024
        d = h.RawConn(proxy.port(), timeout=30 * h.SLOW)
        e = h.RawConn(proxy.port(), timeout=30 * h.SLOW)
        t.defer(d.close)
        t.defer(e.close)
        d.send(b"PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % (origin.url("/total/d").encode(), SIZE) + body_d[:piece])
        # before, only what was written counted: E's head found 7.75 MiB
        # left, both bodies were written until together they passed the
        # cap, and both went once (8 MiB written for nothing)
        h.wait_until(lambda: spool_bytes() > 0, 5 * h.SLOW, "D's file counted")
        h.eq(spool_bytes(), SIZE, "the gauge once D's head came: its whole length")
        e.send(b"PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % (origin.url("/total/e").encode(), SIZE))
        for off in range(0, SIZE, piece):
            e.send(body_e[off:off + piece])
            if off + piece < SIZE:
                d.send(body_d[off + piece:off + 2 * piece])
        rd = d.read_response("PUT", timeout=30 * h.SLOW)
        re_ = e.read_response("PUT", timeout=30 * h.SLOW)
        h.eq((rd.status, rd.header("Retry-Attempts")), (200, "2"), "D's status, Retry-Attempts")
        h.eq(bodies("/total/d"), [(SIZE, hashlib.sha256(body_d).hexdigest())] * 2,
             "D's bodies at the origin")
        h.eq((re_.status, re_.header("Retry-Attempts")), (503, "1"), "E's status, Retry-Attempts")
        h.eq(bodies("/total/e"), [(SIZE, hashlib.sha256(body_e).hexdigest())],
             "E's body at the origin")
        proxy.wait_log(r"PUT \S*/total/e: request body of %d bytes would take the spool "
                       r"files past spool_total: sent once, not retried" % SIZE)
        h.eq([ln for ln in proxy.stderr_lines() if re.search(r"/total/[de]: request body not "
                                                            r"spooled", ln)],
             [], "log lines of a file stopped part way")
        h.wait_until(lambda: spool_bytes() == 0, 5 * h.SLOW, "retryproxy_spool_bytes 0")


h.run(scenario, __doc__)
