#!/usr/bin/env python3
"""Scenario: a body sent once after its spool gave up, to a slow upstream.

Client: curl PUTs a chunked body of 16 MiB and 100 KiB through a sidecar
listener with replay_buffer 64KiB, spool_max 16MiB and client_timeout 2s:
its size shows only on the way, so the file takes 16 MiB and the body then
goes once, the file's part first and the client's last bytes after it. The
client has sent its whole body within a moment and then only waits.
Upstream: a raw server (small receive buffer) that reads the request head,
reads nothing for 5 s, then reads the whole chunked body and answers 200
with the number of data bytes it got.
Must hold: while the proxy is still sending the file's part, the client's
last bytes wait in the proxy through no fault of the client's, which sent
everything: the request is not cut as a body stalled for client_timeout.
The client gets the upstream's 200 naming every byte of the body, and the
access line says status=200.
"""

import os
import socket
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UPSTREAM@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 2s
  replay_buffer: 64KiB
  spool_max: 16MiB
  spool_dir: @SPOOL_DIR@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20
SIZE = 16 * MiB + 100 * 1024


def slow_upstream(conn, server):
    """Read the head, nothing for 5 s, then the chunked body; answer 200."""
    conn.settimeout(30)
    total = rawserver.read_chunked_request(conn, lambda: time.sleep(5 * h.SLOW))
    if total is None:
        return
    body = b"got %d\n" % total
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                 % len(body) + body)


class SmallBufferServer(rawserver.RawServer):
    def __init__(self, handler):
        super().__init__(handler, conn_timeout=30)
        # taken by the connections accepted from now on: the upstream's
        # window stays small, so the file's part waits in the proxy
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)


def scenario(t):
    upstream = SmallBufferServer(slow_upstream)
    t.defer(upstream.stop)
    spool_dir = os.path.join(t.tmp, "spool")
    os.makedirs(spool_dir)
    proxy = t.proxy(CONFIG, UPSTREAM=upstream.port, SPOOL_DIR=spool_dir)
    body = os.path.join(t.tmp, "body")
    with open(body, "wb") as f:
        f.write(os.urandom(SIZE))

    @t.check("a body sent once after the spool: its last bytes wait, the client is not cut")
    def _():
        r = h.curl("-X", "PUT", "-H", "Transfer-Encoding: chunked", "-H", "Expect:",
                   "--data-binary", "@" + body,
                   "http://127.0.0.1:%d/upload" % proxy.port(0), timeout=60)
        h.eq((r.exit_code, r.status), (0, 200),
             "curl exit code and status (%r; %s)" % (r, proxy.stderr_tail(6)))
        h.eq(r.body, b"got %d\n" % SIZE, "the upstream got every byte")
        fields = h.access_fields(proxy.access_one("/upload"))
        h.eq(fields.get("status"), "200", "logged status (%r)" % fields)
        h.ok(proxy.wait_log("over spool_max", timeout=5),
             "the log says the body went past spool_max")


h.run(scenario, __doc__)
