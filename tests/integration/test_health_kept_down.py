#!/usr/bin/env python3
"""Scenario: with health.hold: false, the upstream is marked down while a
retryable response's body is still being read (and kept) for a retry.

Client: a raw-socket GET /busy, then, once its 503's head has come, a GET
/other, both to a sidecar listener.
Origin: a raw server on a reserved port; to /busy it sends a 503's head
(Connection: close: no pooled connection is left for a retry) and half its
body, stops listening (so /other's connect is refused, which
marks the upstream down: down_after 1), then sends the rest of the body.
Proxy: health down_after 1, hold false, probe_interval 10s; retry.on as by
default (503 and refused connects among them), max_attempts 3, backoff 5s.
Must hold: /other gets 502 at once, naming the upstream as down; /busy gets
its 503 whole as soon as its body ends, not after the 5 s backoff that no
try could follow while the upstream is down (before, the backoff was
waited, the retry refused, and then the same 503 passed on): Retry-Attempts
1, logged with gave_up=upstream_down and the 503 alone in its trail.
"""

import socket
import threading
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@API@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 1, probe_interval: 10s, hold: false }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 5s
    max_backoff: 5s
    jitter: 0s
    deadline: 30s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


class Origin:
    """Answers /busy with a 503 in two parts, closing its listener between
    them once told to; anything else 200."""

    def __init__(self, port):
        self.head_sent = threading.Event()
        self.send_rest = threading.Event()
        self.rest_sent_at = None
        self.conns = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(16)
        threading.Thread(target=self.accept, daemon=True).start()

    def stop_listening(self):
        h.stop_listening(self.listener)

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            got = rawserver.read_request(conn, b"")
            if got is None:
                return
            if got[1] != "/busy":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                return
            # closed after it: no pooled connection a retry could take
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                         b"Content-Length: 10\r\n\r\nbusy-")
            self.head_sent.set()
            if not self.send_rest.wait(10):
                return
            self.rest_sent_at = time.monotonic()
            conn.sendall(b"-rest")
        except OSError:
            return

    def stop(self):
        self.stop_listening()
        for c in self.conns:
            c.close()


def scenario(t):
    port = h.reserved_port()
    origin = Origin(port)
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, API=port)

    busy = h.RawConn(proxy.port(), timeout=15)
    t.defer(busy.close)
    busy.send(h.request("GET", "/busy", "api.example"))
    h.ok(origin.head_sent.wait(5), "the origin got /busy")
    # the proxy has the 503's head (and keeps its body for a retry)
    time.sleep(0.3)
    origin.stop_listening()
    other = h.fetch(proxy.port(), "GET", "/other", "api.example", timeout=10)
    origin.send_rest.set()
    resp = busy.read_response()
    answered = time.monotonic()

    @t.check("the refused connect marks the upstream down: 502 at once, naming it")
    def _():
        h.check_error_response(other, 502, ["127.0.0.1:%d is down" % port])

    @t.check("the kept 503 goes to the client when its body ends, not after the 5 s backoff")
    def _():
        h.eq((resp.status, resp.body, resp.header("Retry-Attempts")), (503, b"busy--rest", "1"),
             "status, body, Retry-Attempts")
        h.ok(origin.rest_sent_at is not None, "the origin sent the rest")
        waited = answered - origin.rest_sent_at
        h.ok(waited < 2, "the 503 came %.1f s after its body ended (backoff 5 s)" % waited)
        f = h.access_fields(proxy.access_one("/busy"))
        h.eq((f.get("status"), f.get("gave_up"), f.get("tries")), ("503", "upstream_down", "503"),
             "logged status, gave_up and trail")


h.run(scenario, __doc__, timeout=60)
