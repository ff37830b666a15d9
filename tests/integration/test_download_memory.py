#!/usr/bin/env python3
"""Scenario: a 1 GiB download through the proxy to a slow reader.

Client: a raw socket GETs 1 GiB (absolute-form), reads the head and a
little, stops reading for 3 seconds, then reads slowly (64 KiB every 50 ms
for a second), then as fast as it can while hashing.
Origin: generates the 1 GiB as fast as the socket takes it, never holding
it in memory, and counts what it has sent.
Must hold: the body arrives whole and byte-exact (length and sha256); while
the client is not reading, the origin cannot push more than 64 MiB past
what the client has read (backpressure reaches the origin); the proxy's
peak resident memory (VmHWM) stays under 64 MiB above its resident size
before the download. Under sanitizers (RETRYPROXY_SANITIZED=1) the proxy
runs with ASAN_OPTIONS quarantine_size_mb=8 so freed buffers are not
hoarded, and the same bound applies.
"""

import hashlib
import socket
import threading
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log:
  level: warn
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

SIZE = 1 << 30
MiB = 1 << 20
RSS_BOUND = 64 * MiB
STALL_BOUND = 64 * MiB


def scenario(t):
    origin = t.origin()
    env = {"ASAN_OPTIONS": "quarantine_size_mb=8"} if h.SANITIZED else None
    proxy = t.proxy(CONFIG, env=env)
    auth = origin.authority

    # Warm up once so lazily initialised state is in the baseline.
    r = h.curl(origin.url("/bytes/100000"), proxy=proxy.url)
    if r.status != 200:
        raise AssertionError("warm-up request failed: %r" % r)
    baseline_kib = proxy.proc_status()["VmRSS"]
    print("proxy VmRSS before the download: %d KiB" % baseline_kib, flush=True)

    peak = {"rss": baseline_kib}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            try:
                peak["rss"] = max(peak["rss"], proxy.proc_status()["VmRSS"])
            except (OSError, KeyError):
                return
            time.sleep(0.1)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    result = {}

    @t.check("1 GiB arrives whole and byte-exact at a slow-then-fast reader")
    def _():
        s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=60 * h.SLOW)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        try:
            s.sendall(h.request("GET", origin.url("/bytes/%d" % SIZE), auth))
            head = bytearray()
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                h.ok(chunk, "connection closed before the response head: %r" % bytes(head))
                head += chunk
            end = head.index(b"\r\n\r\n") + 4
            status = int(head.split(b" ", 2)[1])
            h.eq(status, 200, "status")
            h.ok(b"content-length: %d" % SIZE in head[:end].lower(), "head: %r" % bytes(head[:end]))
            hasher = hashlib.sha256()
            got = len(head) - end
            hasher.update(head[end:])

            # Stall: read nothing for 3 seconds.
            time.sleep(3)
            reqs = [q for q in origin.requests if q.path == "/bytes/%d" % SIZE]
            result["stall_sent"] = reqs[-1].sent_bytes
            result["stall_read"] = got

            # Slow: 64 KiB every 50 ms for about a second.
            for _ in range(20):
                chunk = s.recv(64 * 1024)
                h.ok(chunk, "connection closed after %d bytes" % got)
                hasher.update(chunk)
                got += len(chunk)
                time.sleep(0.05)

            # Fast: the rest.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
            buf = bytearray(MiB)
            view = memoryview(buf)
            while got < SIZE:
                n = s.recv_into(view)
                h.ok(n, "connection closed after %d of %d bytes" % (got, SIZE))
                hasher.update(view[:n])
                got += n
            h.eq(got, SIZE, "body length")
            h.eq(hasher.hexdigest(), o.pattern_sha256(SIZE), "body sha256")
        finally:
            s.close()

    sampling.set()
    sampler.join(2)

    @t.check("backpressure: during the 3 s stall the origin got at most 64 MiB ahead of the reader")
    def _():
        h.ok("stall_sent" in result, "the download did not get as far as the stall")
        ahead = result["stall_sent"] - result["stall_read"]
        print("origin was %.1f MiB ahead of the reader after the stall" % (ahead / MiB), flush=True)
        h.ok(ahead < STALL_BOUND, "origin sent %.1f MiB more than the client had read (bound %d MiB)"
             % (ahead / MiB, STALL_BOUND // MiB))

    @t.check("proxy peak RSS (VmHWM) under 64 MiB above its pre-download RSS")
    def _():
        status = proxy.proc_status()
        hwm = status.get("VmHWM")
        h.ok(isinstance(hwm, int), "no VmHWM in /proc/%d/status" % proxy.pid)
        grown = (max(hwm, peak["rss"]) - baseline_kib) * 1024
        print("proxy VmHWM %d KiB, sampled peak VmRSS %d KiB, baseline %d KiB: grew %.1f MiB"
              % (hwm, peak["rss"], baseline_kib, grown / MiB), flush=True)
        h.ok(grown < RSS_BOUND, "proxy peak RSS grew by %.1f MiB during the download (bound %d MiB)"
             % (grown / MiB, RSS_BOUND // MiB))


h.run(scenario, __doc__, timeout=110)
