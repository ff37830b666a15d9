#!/usr/bin/env python3
"""Scenario: limits.replay_total caps the memory all kept request bodies
take at once.

Client: curl PUTs random 700 KiB bodies through a forward proxy with
replay_buffer 1MiB and replay_total 1MiB (one body fits in memory, two do
not), with Content-Length and chunked; curl to the admin listener for
/metrics. Then a second proxy, the same but with the spool on.
Origin: for A, 503 then a response held half-sent on a gate (A's second try
stays in flight, its body kept); for the others, 503 then /echo. Every
body's length and sha256 is recorded.
Must hold:
- retryproxy_replay_bytes is 0 at the start, A's 700 KiB while A is in
  flight (before the cap, each retryable request could keep replay_buffer
  in memory, up to max_connections x replay_buffer in all: 80 GB with the
  defaults);
- B (Content-Length), sent while A holds its memory, does not fit: it goes
  to the origin once, whole and byte-exact, the client gets the origin's
  503 with Retry-Attempts: 1, the access line says gave_up=body_too_large,
  the log names replay_total; the gauge stays at A's bytes;
- B2 (chunked) passes the room left part way: the same, once, byte-exact,
  503, gave_up=body_too_large, the log names replay_total;
- A, released, gets its 200 with Retry-Attempts: 2, twice byte-exact at the
  origin; then the gauge is 0, and C (Content-Length) and C2 (chunked) are
  kept and retried again: 200 after two tries, byte-exact, gauge 0 after;
- with the spool on (spool_max 4MiB), a body that does not fit in memory
  while A' holds it goes to a spool file and is retried: 200 after two
  tries, twice byte-exact.
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
  replay_buffer: 1MiB
  replay_total: 1MiB
%s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

KiB = 1 << 10
SIZE = 700 * KiB


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.join(t.tmp, "spool")
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG % "")

    def gauge(p, name):
        text = h.curl("http://127.0.0.1:%d/metrics" % p.port(1), check=True).body.decode()
        m = re.search(r"^%s (\d+)$" % name, text, re.M)
        h.ok(m is not None, "%s is in /metrics" % name)
        return int(m.group(1))

    def body_file(name):
        data = os.urandom(SIZE)
        path = os.path.join(t.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path, hashlib.sha256(data).hexdigest()

    def put(p, path, file, chunked=False):
        extra = ["-H", "Transfer-Encoding: chunked"] if chunked else []
        return h.curl("-X", "PUT", "--data-binary", "@" + file, "-H", "Expect:", *extra,
                      origin.url(path), proxy=p.url, timeout=60 * h.SLOW)

    def bodies(path):
        return [(q.body_len, q.body_sha256) for q in origin.requests_for(path)]

    def held(p, path, name):
        """A PUT whose second try waits on a gate, its body kept: (gate,
        thread, result, sha)."""
        file, sha = body_file(name)
        gate = origin.gate(name)
        origin.script(path, [503, "/gate/%s?first=10&rest=10" % name])
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=put(p, path, file)),
                                  daemon=True)
        thread.start()
        gate.wait_reached(30 * h.SLOW)
        return gate, thread, result, sha

    def sent_once(p, path, name, chunked):
        file, sha = body_file(name)
        origin.script(path, [503, "/echo"])
        r = put(p, path, file, chunked)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies(path), [(SIZE, sha)], "the bodies at the origin")
        fields = h.access_fields(p.access_one(path))
        h.eq((fields.get("attempts"), fields.get("gave_up")), ("1", "body_too_large"),
             "access attempts, gave_up")

    def retried(p, path, name, chunked):
        file, sha = body_file(name)
        origin.script(path, [503, "/echo"])
        r = put(p, path, file, chunked)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies(path), [(SIZE, sha)] * 2, "the bodies at the origin")

    state = {}

    @t.check("the gauge is 0 at the start, A's bytes while A is in flight")
    def _():
        h.eq(gauge(proxy, "retryproxy_replay_bytes"), 0, "retryproxy_replay_bytes at the start")
        state["a"] = held(proxy, "/mem/a", "mem-a")
        h.eq(gauge(proxy, "retryproxy_replay_bytes"), SIZE, "retryproxy_replay_bytes with A kept")

    @t.check("B (Content-Length) does not fit: once, whole, 503, body_too_large")
    def _():
        sent_once(proxy, "/mem/b", "mem-b", chunked=False)
        proxy.wait_log(r"PUT \S*/mem/b: body of %d bytes would take the replay buffers past "
                       r"replay_total \(1048576\): sent once, not retried" % SIZE)
        h.eq(gauge(proxy, "retryproxy_replay_bytes"), SIZE, "the gauge, A's bytes alone")

    @t.check("B2 (chunked) passes the room left: once, whole, 503, body_too_large")
    def _():
        sent_once(proxy, "/mem/b2", "mem-b2", chunked=True)
        proxy.wait_log(r"PUT \S*/mem/b2: chunked body is over the room left in replay_total "
                       r"\(1048576\): sent once, not retried")
        h.wait_until(lambda: gauge(proxy, "retryproxy_replay_bytes") == SIZE, 5 * h.SLOW,
                     "the gauge back to A's bytes once B2 ended")

    @t.check("A, released, gets 200 after two tries, both byte-exact; then the gauge is 0")
    def _():
        gate, thread, result, sha = state["a"]
        gate.release()
        thread.join(60 * h.SLOW)
        r = result.get("r")
        h.ok(r is not None, "A's curl ended")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies("/mem/a"), [(SIZE, sha)] * 2, "A's bodies at the origin")
        h.wait_until(lambda: gauge(proxy, "retryproxy_replay_bytes") == 0, 5 * h.SLOW,
                     "retryproxy_replay_bytes 0")

    @t.check("room again: C and C2 (chunked) are kept and retried, byte-exact, gauge 0 after")
    def _():
        retried(proxy, "/mem/c", "mem-c", chunked=False)
        retried(proxy, "/mem/c2", "mem-c2", chunked=True)
        h.wait_until(lambda: gauge(proxy, "retryproxy_replay_bytes") == 0, 5 * h.SLOW,
                     "retryproxy_replay_bytes 0")

    spooling = t.proxy(CONFIG % "  spool_max: 4MiB\n  spool_dir: spool")

    @t.check("with the spool on, a body that does not fit in memory is spooled and retried")
    def _():
        gate, thread, result, _ = held(spooling, "/spool/a", "spool-a")
        retried(spooling, "/spool/b", "spool-b", chunked=False)
        retried(spooling, "/spool/b2", "spool-b2", chunked=True)
        h.eq(gauge(spooling, "retryproxy_replay_bytes"), SIZE, "the gauge, A's bytes alone")
        gate.release()
        thread.join(60 * h.SLOW)
        h.eq(result["r"].status, 200, "A's status")
        h.wait_until(lambda: gauge(spooling, "retryproxy_replay_bytes") == 0
                     and gauge(spooling, "retryproxy_spool_bytes") == 0, 5 * h.SLOW,
                     "both gauges 0")


h.run(scenario, __doc__)
