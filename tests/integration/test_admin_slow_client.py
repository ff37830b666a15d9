#!/usr/bin/env python3
"""Scenario: an admin client that trickles its request is closed; one that
asks now and then on a kept-alive connection is not.

Client: one connection to the admin listener that sends the start of a
request and then one byte every 2 s (never a whole head), and beside it a
keep-alive connection that asks GET /healthz every 2 s, both for about 26 s.
Origin: none.
Must hold: the trickling connection is still open 12 s after its accept and
is closed within about 20 s of it (the admin waits at most 20 s for a whole
request, from the accept or the end of the last answer; evhttp's own 10 s
timeout is per read, so before this it kept its place, one of the admin's
64, for as long as it kept sending); the proxy then holds no descriptor of
it; the kept-alive connection gets every answer, 200, on the one
connection, well past 20 s.
"""

import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:9
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
"""

REQUEST_WAIT_S = 20
EVERY_S = 2.0
RUN_S = 26


def still_open(s):
    """False once the peer closed or reset s (it sends nothing otherwise)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def scenario(t):
    proxy = t.proxy(CONFIG)
    admin_port = proxy.port(1)

    def trickle(_):
        """Seconds from the accept to the close, and whether it was open at 12 s."""
        s = socket.create_connection(("127.0.0.1", admin_port), timeout=5)
        start = time.monotonic()
        open_at_12 = None
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            while time.monotonic() - start < REQUEST_WAIT_S + 10 * h.SLOW:
                time.sleep(EVERY_S)
                if open_at_12 is None and time.monotonic() - start >= 12:
                    open_at_12 = still_open(s)
                if not still_open(s):
                    return time.monotonic() - start, open_at_12
                try:
                    s.sendall(b"a")
                except OSError:
                    return time.monotonic() - start, open_at_12
            return None, open_at_12
        finally:
            s.close()

    def keep_asking(_):
        """The statuses of every answer on one connection over RUN_S."""
        s = socket.create_connection(("127.0.0.1", admin_port), timeout=5 * h.SLOW)
        statuses = []
        start = time.monotonic()
        try:
            while time.monotonic() - start < RUN_S:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                data = b""
                while not data.endswith(b"ok\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        statuses.append("closed")
                        return statuses
                    data += chunk
                statuses.append(data.split(b"\r\n", 1)[0].decode())
                time.sleep(EVERY_S)
            return statuses
        finally:
            s.close()

    results = h.in_threads(2, lambda i: trickle(i) if i == 0 else keep_asking(i),
                           RUN_S + REQUEST_WAIT_S + 15 * h.SLOW)
    closed_after, open_at_12 = results[0] if isinstance(results[0], tuple) else (None, None)
    statuses = results[1]

    @t.check("the trickling admin client is open at 12 s, closed within about 20 s")
    def _():
        h.ok(isinstance(results[0], tuple), "trickling client: %r" % (results[0],))
        h.eq(open_at_12, True, "open 12 s after its accept")
        h.ok(closed_after is not None and closed_after < REQUEST_WAIT_S + 3 * EVERY_S * h.SLOW,
             "closed within about %d s of its accept (after %r s)" % (REQUEST_WAIT_S,
                                                                     closed_after))

    @t.check("the kept-alive client asking every 2 s gets every answer on one connection")
    def _():
        h.ok(isinstance(statuses, list), "kept-alive client: %r" % (statuses,))
        h.ok(len(statuses) >= RUN_S / (EVERY_S + 1), "answers: %r" % (statuses,))
        h.eq(set(statuses), {"HTTP/1.1 200 OK"}, "every answer's status line")

    @t.check("the proxy holds no admin connection once both are gone")
    def _():
        h.wait_until(lambda: h.connections_on(proxy.pid, admin_port) == 0, 3 * h.SLOW,
                     "no admin connection held")


h.run(scenario, __doc__)
