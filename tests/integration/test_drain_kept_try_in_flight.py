#!/usr/bin/env python3
"""Scenario: at the drain's answer time, a request whose retry's try is in
flight gets the large 503 it kept from its first try, and the try in flight
is cancelled: its answer, coming while the 503 is still being fed to a
client that reads slowly, never reaches the client.

Client: a raw connection with a small receive buffer that sends a GET and
reads nothing until the retry's answer has come, then reads to the end.
Proxy: drain_timeout 10s (its answer time 1 s before it), retry_response_buffer
8MiB, max_attempts 3, initial_backoff 50ms.
Origin: for the GET, a 503 with a 6 MiB body (kept), then a 200 held at a
gate until the drain's answer time has passed.
Must hold:
- the client gets the kept 503 whole, byte-exact, Retry-Attempts 2, and
  nothing after it: no second response head inside or after its body;
- the access line says status=503, tries "503 -> wait 50ms -> cancelled",
  gave_up=deadline note=draining (before: the try in flight went on while
  the 503 was fed, its 200 head and body were queued into the middle of the
  503's body, and the line said status=200 bytes=10);
- the proxy exits 0.
"""

import hashlib
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 10s
  client_timeout: 30s
  retry_response_buffer: 8MiB
  retry_memory: 16MiB
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 1000, window: 1s }
"""

BODY = 6 << 20


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    @t.check("a retry's try in flight at the drain's answer time is cancelled while its kept "
             "503 is fed: its answer never reaches the client")
    def _():
        gate = origin.gate("retry")
        origin.script("/inflight", ["/bytes/%d?status=503" % BODY, "/bytes/10?hold=retry"])
        c = h.RawConn(proxy.port(), rcvbuf=32 << 10, timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/inflight", "a.example"))
        gate.wait_reached(10 * h.SLOW)
        proxy.terminate()
        proxy.wait_log("answering the requests waiting for a try", timeout=15 * h.SLOW)
        # the 503 is being fed, the client reading nothing: the retry's
        # answer comes now
        gate.release()
        time.sleep(0.2)
        r = c.read_response(timeout=5 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "2"), "status, Retry-Attempts")
        h.eq(hashlib.sha256(r.body).hexdigest(), o.pattern_sha256(BODY),
             "the kept 503's body (length %d, a response head inside it: %s)"
             % (len(r.body), b"HTTP/1.1 200" in r.body))
        rest, end = h.read_to_end(c.sock, timeout=3)
        h.eq(rest, b"", "what came after the 503 (%s)" % end)
        fl = h.access_fields(proxy.access_one("/inflight"))
        h.eq((fl["status"], fl["tries"], fl["gave_up"], fl.get("note")),
             ("503", "503 -> wait 50ms -> cancelled", "deadline", "draining"),
             "access status, tries, gave_up, note")
        t.stop_proxy(proxy)


h.run(scenario, __doc__, timeout=80)
