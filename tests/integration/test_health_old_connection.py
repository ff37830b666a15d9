#!/usr/bin/env python3
"""Scenario: an origin that stops listening while a keep-alive connection
made before still answers (a service restarting: the old process finishes
its connections, the new one is not listening yet).

Client: raw-socket POSTs and GETs to a sidecar listener; curl to the admin
listener for /upstreams.
Origin: a raw server on a reserved port that answers every request 200,
keep-alive; its listener is closed, then opened again on the same port,
while the connections it accepted go on answering.
Proxy: health down_after 1, probe_interval 300ms, hold true; max_attempts
3, backoff 50ms, deadline 20s.
Must hold:
- with the listener closed, a POST that needs a new connection is refused,
  marks the upstream down and is held;
- GETs then served on the pooled connection made before get 200, reset
  the failure count, but do not mark the upstream up: /upstreams still
  says down with the POST held, and no "is up" line is logged (before, each
  such response marked it up and released the POST onto a refused connect,
  which spent its attempts: the POST got 502 while the origin restarted);
- once the listener is back, a probe marks it up and the POST goes
  upstream once: 200;
- down again, a retryable 503 on the connection made before is not passed
  on as final: its retry is held (before, the 503 went to the client after
  one try, no retry and no reason given), and once the upstream is back the
  retry's 200 comes with Retry-Attempts: 2;
- such a 503 with Retry-After: its retry comes no sooner than asked, even
  when a probe finds the upstream back before (before, the retry was held
  and released with the probe, Retry-After ignored).
"""

import re
import socket
import threading
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@API@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 1, probe_interval: 300ms, hold: true }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    deadline: 20s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


RETRY_AFTER = 2  # seconds


class Origin:
    """Answers every request 200, keep-alive; the listener can close and
    open again while accepted connections go on."""

    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.requests = []  # (method, target)
        self.times = []  # (target, when it came)
        self.conns = []
        self.listener = None
        self.listen()

    def listen(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.listener = s
        threading.Thread(target=self.accept, args=(s,), daemon=True).start()

    def stop_listening(self):
        h.stop_listening(self.listener)

    def accept(self, s):
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        buf = b""
        try:
            while True:
                got = rawserver.read_request(conn, buf)
                if got is None:
                    return
                method, target, buf = got
                with self.lock:
                    self.requests.append((method, target))
                    self.times.append((target, time.monotonic()))
                if target.startswith("/busy") and len(self.seen(target)) == 1:
                    # the first time: come back later (/busy-ra: not before
                    # RETRY_AFTER)
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\n%sContent-Length: 5"
                                 b"\r\n\r\nbusy\n"
                                 % (b"Retry-After: %d\r\n" % RETRY_AFTER
                                    if target == "/busy-ra" else b""))
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        except OSError:
            return

    def stop(self):
        self.stop_listening()
        with self.lock:
            for c in self.conns:
                c.close()

    def seen(self, target):
        with self.lock:
            return [m for m, seen in self.requests if seen == target]


def scenario(t):
    port = h.reserved_port()
    origin = Origin(port)
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, API=port)

    def upstream_line():
        body = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1), check=True).body.decode()
        return next((ln for ln in body.splitlines() if ln.startswith("http://127.0.0.1:%d " % port)),
                    None)

    keep = h.RawConn(proxy.port(0), timeout=10 * h.SLOW)
    t.defer(keep.close)
    keep.send(h.request("GET", "/warm", "app.example"))
    h.eq(keep.read_response().status, 200, "the GET that makes the pooled connection")
    origin.stop_listening()
    post = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
    t.defer(post.close)
    post.send(h.request("POST", "/held", "app.example", body=b"once"))

    @t.check("the POST's refused connect marks the upstream down; the POST is held")
    def _():
        proxy.wait_log(r"upstream http://127\.0\.0\.1:%d is down" % port, timeout=5 * h.SLOW)
        h.wait_until(lambda: (upstream_line() or "").endswith("held=1"), 5 * h.SLOW,
                     "the POST held (%r)" % upstream_line())

    @t.check("GETs on the connection made before: 200, and the upstream stays down")
    def _():
        for i in range(4):
            keep.send(h.request("GET", "/pooled-%d" % i, "app.example"))
            h.eq(keep.read_response().status, 200, "GET %d" % i)
            time.sleep(0.1)  # a release and its refused connect would come now
        line = upstream_line()
        h.ok(line is not None and " down " in line and line.endswith("held=1"),
             "still down with the POST held: %r" % line)
        h.eq([ln for ln in proxy.stderr_lines() if re.search(r"upstream \S+ is up", ln)], [],
             "no 'is up' line")
        h.eq(origin.seen("/held"), [], "the POST not at the origin yet")

    @t.check("the listener back: a probe marks it up, the POST goes once: 200")
    def _():
        origin.listen()
        r = post.read_response()
        h.eq(r.status, 200, "the POST's status")
        h.eq(origin.seen("/held"), ["POST"], "the POST at the origin once")
        proxy.wait_log(r"upstream http://127\.0\.0\.1:%d is up" % port, timeout=5 * h.SLOW)

    def held_after_503(target):
        """With the listener closed and the upstream down again (a POST's
        refused connect), a GET of target on the connection made before:
        the origin answers 503 (retryable), and the retry it calls for waits
        for the upstream: held. Returns the POST's connection."""
        origin.stop_listening()
        post2 = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(post2.close)
        post2.send(h.request("POST", "/held-" + target, "app.example", body=b"once"))
        h.wait_until(lambda: " down " in (upstream_line() or ""), 5 * h.SLOW,
                     "down again (%r)" % upstream_line())
        keep.send(h.request("GET", target, "app.example"))
        h.wait_until(lambda: (upstream_line() or "").endswith("held=2"), 5 * h.SLOW,
                     "the GET held after its 503 (%r)" % upstream_line())
        return post2

    @t.check("a 503 on the old connection while down: the retry is held, not the 503 passed "
             "on; once back, the retry's 200")
    def _():
        post2 = held_after_503("/busy")
        origin.listen()
        r = keep.read_response(timeout=20 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "the GET's status and attempts")
        h.eq(len(origin.seen("/busy")), 2, "tries of /busy at the origin")
        h.eq(post2.read_response().status, 200, "the held POST's status")

    @t.check("a 503 with Retry-After on the old connection while down: the retry comes no "
             "sooner than Retry-After asked, though the upstream is back before")
    def _():
        origin.stop_listening()
        post3 = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(post3.close)
        post3.send(h.request("POST", "/held-ra", "app.example", body=b"once"))
        h.wait_until(lambda: " down " in (upstream_line() or ""), 5 * h.SLOW,
                     "down again (%r)" % upstream_line())
        keep.send(h.request("GET", "/busy-ra", "app.example"))
        h.wait_until(lambda: origin.seen("/busy-ra"), 5 * h.SLOW, "the 503 sent")
        origin.listen()
        h.eq(post3.read_response().status, 200, "the held POST's status")
        r = keep.read_response(timeout=20 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "the GET's status and attempts")
        came = [when for target, when in origin.times if target == "/busy-ra"]
        h.eq(len(came), 2, "tries of /busy-ra at the origin")
        h.ok(came[1] - came[0] >= RETRY_AFTER - 0.05,
             "the retry came %.2f s after the 503 with Retry-After: %d"
             % (came[1] - came[0], RETRY_AFTER))



h.run(scenario, __doc__, timeout=60)
