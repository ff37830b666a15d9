#!/usr/bin/env python3
"""Scenario: limits.retry_memory caps the memory all request bodies and
retryable responses kept for retries take at once.

Client: curl PUTs random 700 KiB bodies through a forward proxy with
replay_buffer 1MiB and retry_memory 1MiB (one body fits in memory, two do
not), with Content-Length and chunked; curl to the admin listener for
/metrics. Then a second proxy, the same but with the spool on.
Origin: for A, 503 then a response held half-sent on a gate (A's second try
stays in flight, its body kept); for the others, 503 then /echo. Every
body's length and sha256 is recorded.
Must hold:
- retryproxy_retry_memory_bytes is 0 at the start, A's 700 KiB while A's
  second try's response streams (the 503 its first try got, kept until then,
  no longer counts: it can no longer be the client's) (before the cap, each retryable request could keep replay_buffer
  in memory, up to max_connections x replay_buffer in all: 80 GB with the
  defaults);
- B (Content-Length), sent while A holds its memory, does not fit: it goes
  to the origin once, whole and byte-exact, the client gets the origin's
  503 with Retry-Attempts: 1, the access line says gave_up=body_too_large,
  the log names retry_memory; the gauge stays at A's bytes;
- B2 (chunked) passes the room left part way: the same, once, byte-exact,
  503, gave_up=body_too_large, the log names retry_memory;
- A, released, gets its 200 with Retry-Attempts: 2, twice byte-exact at the
  origin; then the gauge is 0, and C (Content-Length) and C2 (chunked) are
  kept and retried again: 200 after two tries, byte-exact, gauge 0 after;
- a 503 with a 700 KiB body kept while its request waits out a 2 s
  backoff counts in the gauge; another such 503 meanwhile does not fit: it
  is passed on as final at once (503, Retry-Attempts: 1, its body whole),
  the log naming retry_memory; the first then gets its 200 after two
  tries, and the gauge goes back to 0 (before, every request waiting in
  backoff could keep retry_response_buffer, up to max_pending_retries x
  1 MiB);
- D, a chunked PUT from a raw socket, sends 1.25 MiB and pauses before its
  last chunk: found over the room left, it goes once; while its client
  pauses the gauge is 0 (before, the 1 MiB and more read before that held
  its memory and room until the request ended), and E, 700 KiB with
  Content-Length, is kept and retried meanwhile (200 after two tries);
  then D's end comes, and D gets 200, its body byte-exact at the origin;
- with the spool on (spool_max 4MiB), a body that does not fit in memory
  while A' holds it goes to a spool file and is retried: 200 after two
  tries, twice byte-exact.
"""

import hashlib
import os
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
  retry_memory: 1MiB
%s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: slow
    match: { path_prefix: /resp/ }
    retry: { initial_backoff: 2s, max_backoff: 2s, jitter: 0s }
"""

KiB = 1 << 10
SIZE = 700 * KiB


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.join(t.tmp, "spool")
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG % "")

    def gauge(p, name):
        value = h.metric(h.curl("http://127.0.0.1:%d/metrics" % p.port(1),
                                check=True).body.decode(), name)
        h.ok(value is not None, "%s is in /metrics" % name)
        return int(value)

    def a_alone(n):
        """A's body alone, kept while its second try's response streams
        and waits on the gate: the 503 its first try got no longer counts,
        since it can no longer be the client's."""
        return n == SIZE

    def put(p, path, file, chunked=False):
        extra = ["-H", "Transfer-Encoding: chunked"] if chunked else []
        return h.curl("-X", "PUT", "--data-binary", "@" + file, "-H", "Expect:", *extra,
                      origin.url(path), proxy=p.url, timeout=60 * h.SLOW)

    def bodies(path):
        return [(q.body_len, q.body_sha256) for q in origin.requests_for(path)]

    def held(p, path, name):
        """A PUT whose second try waits on a gate, its body kept: (gate,
        thread, result, sha)."""
        file, sha = h.random_body_file(t.tmp, SIZE, name)
        gate = origin.gate(name)
        origin.script(path, [503, "/gate/%s?first=10&rest=10" % name])
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=put(p, path, file)),
                                  daemon=True)
        thread.start()
        gate.wait_reached(30 * h.SLOW)
        return gate, thread, result, sha

    def sent_once(p, path, name, chunked):
        file, sha = h.random_body_file(t.tmp, SIZE, name)
        origin.script(path, [503, "/echo"])
        r = put(p, path, file, chunked)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies(path), [(SIZE, sha)], "the bodies at the origin")
        fields = h.access_fields(p.access_one(path))
        h.eq((fields.get("attempts"), fields.get("gave_up")), ("1", "body_too_large"),
             "access attempts, gave_up")

    def retried(p, path, name, chunked):
        file, sha = h.random_body_file(t.tmp, SIZE, name)
        origin.script(path, [503, "/echo"])
        r = put(p, path, file, chunked)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "status, Retry-Attempts (%r)" % r)
        h.eq(bodies(path), [(SIZE, sha)] * 2, "the bodies at the origin")

    state = {}

    @t.check("the gauge is 0 at the start, A's bytes while A is in flight")
    def _():
        h.eq(gauge(proxy, "retryproxy_retry_memory_bytes"), 0, "retryproxy_retry_memory_bytes at the start")
        state["a"] = held(proxy, "/mem/a", "mem-a")
        h.ok(a_alone(gauge(proxy, "retryproxy_retry_memory_bytes")),
             "retryproxy_retry_memory_bytes with A kept: %d" % gauge(proxy, "retryproxy_retry_memory_bytes"))

    @t.check("B (Content-Length) does not fit: once, whole, 503, body_too_large")
    def _():
        sent_once(proxy, "/mem/b", "mem-b", chunked=False)
        proxy.wait_log(r"PUT \S*/mem/b: body of %d bytes would take what retries keep in memory past "
                       r"retry_memory \(1048576\): sent once, not retried" % SIZE)
        h.ok(a_alone(gauge(proxy, "retryproxy_retry_memory_bytes")), "the gauge, A's bytes alone")

    @t.check("B2 (chunked) passes the room left: once, whole, 503, body_too_large")
    def _():
        sent_once(proxy, "/mem/b2", "mem-b2", chunked=True)
        proxy.wait_log(r"PUT \S*/mem/b2: chunked body is over the room left in retry_memory "
                       r"\(1048576\): sent once, not retried")
        h.wait_until(lambda: a_alone(gauge(proxy, "retryproxy_retry_memory_bytes")), 5 * h.SLOW,
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
        h.wait_until(lambda: gauge(proxy, "retryproxy_retry_memory_bytes") == 0, 5 * h.SLOW,
                     "retryproxy_retry_memory_bytes 0")

    @t.check("room again: C and C2 (chunked) are kept and retried, byte-exact, gauge 0 after")
    def _():
        retried(proxy, "/mem/c", "mem-c", chunked=False)
        retried(proxy, "/mem/c2", "mem-c2", chunked=True)
        h.wait_until(lambda: gauge(proxy, "retryproxy_retry_memory_bytes") == 0, 5 * h.SLOW,
                     "retryproxy_retry_memory_bytes 0")

    @t.check("a retryable response kept in backoff counts; another that does not fit is "
             "passed on as final")
    def _():
        origin.script("/resp/a", ["/bytes/%d?status=503" % SIZE, "/bytes/10"])
        origin.script("/resp/b", ["/bytes/%d?status=503" % SIZE, "/bytes/10"])
        result = {}
        thread = threading.Thread(
            target=lambda: result.update(r=h.curl(origin.url("/resp/a"), proxy=proxy.url,
                                                  timeout=30 * h.SLOW)), daemon=True)
        thread.start()
        # A's 503 waits out its 2 s backoff in memory, head and body
        h.wait_until(lambda: gauge(proxy, "retryproxy_retry_memory_bytes") > SIZE,
                     2 * h.SLOW, "A's 503 counted while it waits")
        r = h.curl(origin.url("/resp/b"), proxy=proxy.url, timeout=30 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts"), len(r.body)), (503, "1", SIZE),
             "B's status, Retry-Attempts, body length")
        proxy.wait_log(r"GET \S*/resp/b: retryable response does not fit in what retry_memory "
                       r"leaves: passed on as final")
        thread.join(30 * h.SLOW)
        a = result.get("r")
        h.ok(a is not None, "A's curl ended")
        h.eq((a.status, a.header("Retry-Attempts")), (200, "2"), "A's status, Retry-Attempts")
        h.wait_until(lambda: gauge(proxy, "retryproxy_retry_memory_bytes") == 0, 5 * h.SLOW,
                     "retryproxy_retry_memory_bytes 0")

    @t.check("a chunked body over replay_buffer goes once: its memory comes free once it is "
             "queued, while the client's rest still comes")
    def _():
        origin.script("/mem/d", ["/echo"])
        data = os.urandom(1280 * KiB)
        chunks = b"".join(b"%x\r\n%s\r\n" % (64 * KiB, data[i:i + 64 * KiB])
                          for i in range(0, len(data), 64 * KiB))
        with h.RawConn(proxy.port(), timeout=30 * h.SLOW) as d:
            d.send(b"PUT %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   % origin.url("/mem/d").encode() + chunks)
            proxy.wait_log(r"PUT \S*/mem/d: chunked body is over ")
            # before, the 1 MiB read before the body was found too large
            # stayed in memory, and in retry_memory, until the request
            # ended: a long upload held the room every other body needs
            h.wait_until(lambda: gauge(proxy, "retryproxy_retry_memory_bytes") == 0, 5 * h.SLOW,
                         "retryproxy_retry_memory_bytes 0 while D's client pauses (%d)"
                         % gauge(proxy, "retryproxy_retry_memory_bytes"))
            retried(proxy, "/mem/e", "mem-e", chunked=False)
            d.send(b"0\r\n\r\n")
            r = d.read_response("PUT")
            h.eq(r.status, 200, "D's status")
        h.eq(bodies("/mem/d"), [(len(data), hashlib.sha256(data).hexdigest())],
             "D's body at the origin")

    spooling = t.proxy(CONFIG % "  spool_max: 4MiB\n  spool_dir: spool")

    @t.check("with the spool on, a body that does not fit in memory is spooled and retried")
    def _():
        gate, thread, result, _ = held(spooling, "/spool/a", "spool-a")
        retried(spooling, "/spool/b", "spool-b", chunked=False)
        retried(spooling, "/spool/b2", "spool-b2", chunked=True)
        h.ok(a_alone(gauge(spooling, "retryproxy_retry_memory_bytes")), "the gauge, A's bytes alone")
        gate.release()
        thread.join(60 * h.SLOW)
        h.eq(result["r"].status, 200, "A's status")
        h.wait_until(lambda: gauge(spooling, "retryproxy_retry_memory_bytes") == 0
                     and gauge(spooling, "retryproxy_spool_bytes") == 0, 5 * h.SLOW,
                     "both gauges 0")


h.run(scenario, __doc__)
