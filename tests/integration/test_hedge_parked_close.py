#!/usr/bin/env python3
"""Scenario: a retryable answer too large to keep, parked on a hedge, whose
upstream closes the connection right behind it, the close read with it.

Client: GETs to a sidecar listener.
Upstream: a raw server whose connections follow a plan, in the order they
come: the first try's reads the request and resets it after 1 s; the
hedge's gets a 503 with a body of about 4 KB and the close, in one
segment, so that the proxy reads the answer and the close together (the
answer is the size of its first read, CONN_READ_START in src/conn.c, which
then reads on and finds the close); a later one gets a 500, or a 200
(Connection: close: nothing of the upstream's stays pooled).
Proxy: limits.retry_response_buffer 1KiB; hedges after 200ms (max 1),
max_attempts 3.
Must hold (README "Hedging": a retryable answer too large to keep waits,
unread; if no other try brings an answer that is not retryable, it goes to
the client whole as the final response, and nothing is retried):
- the close that came with the whole 503 does not lose it, whatever its
  framing (the close ends it; a Content-Length with Connection: close, or
  without, keep-alive): once the first try fails the client gets the 503
  and its body, Retry-Attempts: 2, no third connection, the trail
  "reset -> wait 0ms -> hedge:503";
- the connection it came on is not pooled: the next request gets a new
  connection and its 200 at once (tries "200");
- a 503 whose close cut its body short is a reset: the first try's reset
  then leads to a third try, whose 500 the client gets, and the trail
  begins "hedge:reset";
- with max_attempts 2, the parked 503 given back once the first try
  failed is logged gave_up=attempts, not only with the size note: no retry
  would have followed it anyway (as for one that came alone).
"""

import socket
import struct
import threading
import time

import harness as h
from rawserver import RawServer, read_head

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 10s, retry_response_buffer: 1KiB }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
    hedge: { after: 200ms, max: 1 }
"""

# the proxy's first read of a new connection (src/conn.c CONN_READ_START):
# an answer of that size fills it, and the proxy reads on into the close
ANSWER_SIZE = 4096 - 64

HEADS = {
    "close-delimited": b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n",
    "length-close": (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n"),
    "length-keep-alive": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n",
    # announces 500 bytes more than it sends
    "length-cut": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n",
}


def answer(kind):
    """(the bytes sent, the body the client should get)."""
    head = HEADS[kind]
    if b"%d" not in head:
        body = bytes(i % 251 for i in range(ANSWER_SIZE - len(head)))
        return head + body, body
    size = ANSWER_SIZE - len(head % 1000)
    body = bytes(i % 251 for i in range(size))
    announced = size + 500 if kind == "length-cut" else size
    return head % announced + body, body


def scenario(t):
    plan = []
    lock = threading.Lock()

    def serve(conn, server):
        read_head(conn)
        with lock:
            step = plan.pop(0) if plan else "500"
        if step == "late-reset":
            time.sleep(1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif step in HEADS:
            # one segment with the FIN: the proxy reads both at once
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            conn.sendall(answer(step)[0])
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):
                pass
        elif step == "200":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        else:
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")

    upstream = RawServer(serve)
    t.defer(upstream.stop)
    proxy = t.proxy(CONFIG, ORIGIN=upstream.port)
    port = proxy.port(0)

    def run(name, steps):
        with lock:
            plan[:] = steps
        before = upstream.connections
        r = h.fetch(port, "GET", "/" + name, "api.example")
        time.sleep(0.3 * h.SLOW)
        return r, upstream.connections - before, h.access_fields(proxy.access_one("/" + name))

    @t.check("a parked 503 whose close came with it still goes to the client whole")
    def _():
        for name in ("close-delimited", "length-close", "length-keep-alive"):
            r, conns, f = run(name, ["late-reset", name])
            h.eq((r.status, r.body == answer(name)[1], r.header("Retry-Attempts")),
                 (503, True, "2"),
                 "%s: status, whole body, Retry-Attempts (tries %r)" % (name, f["tries"]))
            h.eq(conns, 2, "%s: upstream connections" % name)
            h.eq(f["tries"], "reset -> wait 0ms -> hedge:503", "%s: tries" % name)
            # nothing pooled the closed connection
            r, conns, f = run("after-" + name, ["200"])
            h.eq((r.status, conns, f["tries"]), (200, 1, "200"),
                 "after %s: status, connections, tries" % name)

    @t.check("a parked 503 cut short by its close is a reset")
    def _():
        r, conns, f = run("length-cut", ["late-reset", "length-cut", "500"])
        h.eq((r.status, r.header("Retry-Attempts"), conns), (500, "3", 3),
             "status, Retry-Attempts, upstream connections")
        h.ok(f["tries"].startswith("hedge:reset -> "), "tries %r" % f["tries"])

    @t.check("a parked 503 with no attempt left after it says gave_up=attempts")
    def _():
        two = t.proxy(CONFIG.replace("max_attempts: 3", "max_attempts: 2"),
                      ORIGIN=upstream.port)
        with lock:
            plan[:] = ["late-reset", "length-keep-alive"]
        r = h.fetch(two.port(0), "GET", "/two-attempts", "api.example")
        h.eq((r.status, r.header("Retry-Attempts")), (503, "2"), "status, Retry-Attempts")
        f = h.access_fields(two.access_one("/two-attempts"))
        h.eq(f["tries"], "reset -> wait 0ms -> hedge:503", "tries")
        h.eq(f.get("gave_up"), "attempts", "gave_up (note %r)" % f.get("note"))
        t.stop_proxy(two)


h.run(scenario, __doc__)
