#!/usr/bin/env python3
"""Scenario: the client goes away while its request waits on a backoff.

Client: first, as a control, a GET whose client stays through the backoff;
then a raw connection sends a GET through a forward proxy, waits until the
origin has answered the first try, and closes the connection during the 2 s
backoff (once with a FIN, once with a RST); then a GET whose client leaves
while the second try hangs at the origin; last a fresh GET.
Origin: answers the first try of each path 503 and the next 200 (or, for
the last scenario, never answers the second). Backoff: initial 2s, no
jitter, max_attempts 3; client_timeout 1s.
Must hold: the client that stays gets its 200 after the backoff, although
the backoff is longer than client_timeout; for a client gone during the
backoff, after waiting past it, the origin saw exactly 1 request for the
path (no retry was sent), with no new connection opened toward it, and the
access line says gave_up=client_gone and attempts=1; when the client leaves
during the hanging second try, the proxy closes that upstream connection
and logs gave_up=client_gone with attempts=2, also when the first try was
reset (no response kept); a POST whose 1 MiB body
waits unread behind the client input limit (not kept: a POST retries only
a connect that was refused) and whose client resets during the backoff is
not sent to the origin that listens by the retry's time, not even its head
and part of the body (gave_up=client_gone); so is a GET whose client
pipelined a next request large enough to fill the proxy's input for it
(over the 256 KiB it reads ahead: 512 KiB, then a reset; 272 KiB, then a
close, so that the kernel's buffers on the proxy's side take the rest and
the FIN reaches it behind it), then reset or closed the connection during
the backoff: the proxy, reading nothing more from it,
finds it gone when the retry is due (before, the retry went out and the
access line said status=200 for a client long gone); the proxy keeps
serving (the fresh GET gets 200 at once).
"""

import socket
import struct
import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s, client_timeout: 1s }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 2s
    multiplier: 2
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

BACKOFF = 2.0


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def leave_during_backoff(path, rst, pipelined=0):
        origin.script(path, [503, 200])
        conn = h.RawConn(proxy.port())
        data = h.request("GET", origin.url(path), host)
        if pipelined:
            # a next request behind it, whose body the proxy leaves unread
            # once its input is full; the kernel's buffers take the rest
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            data += h.request("POST", origin.url(path + "/next"), host, body=b"n" * pipelined)
        conn.send(data)
        origin.wait_for(lambda o: any(q.path == path and q.finished_at for q in o.requests), 5,
                        "the first try of %s answered" % path)
        # the proxy reads the 503 and schedules the retry
        time.sleep(0.3)
        connections_before = len(origin.connections)
        if rst:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        time.sleep(BACKOFF + 1.0 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 1, "requests the origin saw for %s after the backoff" % path)
        h.eq(len(origin.connections), connections_before, "connections to the origin")
        f = h.access_fields(proxy.access_one(path))
        h.eq((f.get("gave_up"), f["attempts"]), ("client_gone", "1"), "access gave_up, attempts in %r" % f)

    @t.check("control: a client that stays through the 2 s backoff (> client_timeout 1s) gets its 200")
    def _():
        origin.script("/gone/stay", [503, 200])
        r = h.fetch(proxy.port(), "GET", origin.url("/gone/stay"), host)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.ok(r.elapsed >= BACKOFF - 0.02, "answered after %.2f s, before the backoff" % r.elapsed)
        h.eq(len(origin.requests_for("/gone/stay")), 2, "requests the origin saw")

    @t.check("client closes (FIN) during the backoff: no retry reaches the origin; gave_up=client_gone")
    def _():
        leave_during_backoff("/gone/fin", rst=False)

    @t.check("client resets (RST) during the backoff: the same")
    def _():
        leave_during_backoff("/gone/rst", rst=True)

    @t.check("a client whose pipelined next request fills the proxy's input, and that resets "
             "during the backoff: no retry reaches the origin; gave_up=client_gone")
    def _():
        leave_during_backoff("/gone/pipelined-rst", rst=True, pipelined=512 << 10)

    @t.check("the same with a FIN")
    def _():
        # a FIN comes only behind every byte before it: all must fit in what
        # the proxy reads ahead and its socket's receive buffer
        leave_during_backoff("/gone/pipelined-fin", rst=False, pipelined=272 << 10)

    @t.check("client closes while the second try waits for its head: that upstream connection closes")
    def _():
        path = "/gone/inflight"
        origin.script(path, [503, "/hang"])
        conn = h.RawConn(proxy.port())
        conn.send(h.request("GET", origin.url(path), host))
        origin.wait_for(lambda o: len(o.requests_for(path)) >= 2, BACKOFF + 5 * h.SLOW,
                        "the second try of %s" % path)
        second = origin.requests_for(path)[1]
        upstream = [c for c in origin.connections if c.id == second.conn_id][0]
        conn.close()
        h.ok(upstream.closed.wait(3 * h.SLOW),
             "the origin's connection for the second try is still open 3 s after the client left")
        f = h.access_fields(proxy.access_one(path))
        h.eq((f.get("gave_up"), f["attempts"]), ("client_gone", "2"), "access gave_up, attempts in %r" % f)

    @t.check("the same after a reset, with no response kept: gave_up=client_gone")
    def _():
        path = "/gone/inflight-reset"
        origin.script(path, ["/reset/request", "/hang"])
        conn = h.RawConn(proxy.port())
        conn.send(h.request("GET", origin.url(path), host))
        origin.wait_for(lambda o: len(o.requests_for(path)) >= 2, BACKOFF + 5 * h.SLOW,
                        "the second try of %s" % path)
        conn.close()
        f = h.access_fields(proxy.access_one(path))
        h.eq((f.get("gave_up"), f["attempts"], f["tries"]),
             ("client_gone", "2", "reset -> wait 2.0s -> cancelled"),
             "access gave_up, attempts, tries in %r" % f)

    @t.check("a POST whose 1 MiB body waits unread (over the client input limit) and whose "
             "client resets during the backoff after a refused connect: the retry never "
             "reaches the origin that listens by then, not even in part; gave_up=client_gone")
    def _():
        port = h.reserved_port()
        conn = h.RawConn(proxy.port())
        body = b"p" * (1 << 20)
        # the kernel's buffers may not take it all at once: sent beside
        sender = threading.Thread(target=lambda: conn.send(
            h.request("POST", "http://127.0.0.1:%d/gone/body" % port, "127.0.0.1:%d" % port,
                      body=body)), daemon=True)
        sender.start()
        # the first try is refused at once; the 2 s backoff has begun
        time.sleep(0.5)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        late = t.origin(port=port, name="late")
        time.sleep(BACKOFF + 1.0 * h.SLOW)
        h.eq(len(late.requests), 0, "requests the origin saw (%r)" % late.requests)
        f = h.access_fields(proxy.access_one("/gone/body"))
        h.eq((f.get("gave_up"), f["attempts"]), ("client_gone", "1"),
             "access gave_up, attempts in %r" % f)

    @t.check("the proxy keeps serving: a fresh GET gets 200 at once")
    def _():
        r = h.fetch(proxy.port(), "GET", origin.url("/bytes/10"), host)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "1"), "status, Retry-Attempts")
        h.ok(proxy.alive(), "proxy exited")


h.run(scenario, __doc__)
