#!/usr/bin/env python3
"""Scenario: a spool file that gave up part way is let go once it is sent.

Client: a raw socket PUTs a chunked body through a sidecar listener with
replay_buffer 64KiB and spool_max 1MiB (admin listener on): 2 MiB of
chunks, so its file takes about 1 MiB and the body then goes once; then the
client pauses before its last chunk and the end of the body.
Upstream: a raw server that reads the chunked body as it comes and answers
200 with the number of data bytes it got.
Must hold: while the client pauses, once the file's part has gone to the
upstream, the file is closed and its bytes are back out of spool_total:
retryproxy_spool_bytes is 0 and no spool file is open (before, both held
the file's part until the request ended). Then the client's rest goes too
and the client gets the upstream's 200 naming every byte.
"""

import os
import re
import socket

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UPSTREAM@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 20s
  replay_buffer: 64KiB
  spool_max: 1MiB
  spool_dir: @SPOOL_DIR@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
"""

PIECE = 64 * 1024
FIRST = 32 * PIECE  # 2 MiB, past spool_max
LAST = 100 * 1024


def counting_upstream(conn, server):
    """Read the head and the chunked body as it comes; answer 200."""
    conn.settimeout(60)
    total = rawserver.read_chunked_request(conn)
    if total is None:
        return
    body = b"got %d\n" % total
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                 % len(body) + body)


def chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def scenario(t):
    upstream = rawserver.RawServer(counting_upstream, conn_timeout=60)
    t.defer(upstream.stop)
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir)
    proxy = t.proxy(CONFIG, UPSTREAM=upstream.port, SPOOL_DIR=spool_dir)

    def spool_bytes():
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        m = re.search(r"^retryproxy_spool_bytes (\d+)$", text, re.M)
        h.ok(m is not None, "retryproxy_spool_bytes is in /metrics")
        return int(m.group(1))

    @t.check("a file that gave up is closed once sent, while the client's rest waits")
    def _():
        client = socket.create_connection(("127.0.0.1", proxy.port(0)), timeout=30 * h.SLOW)
        t.defer(client.close)
        client.sendall(b"PUT /upload HTTP/1.1\r\nHost: example.test\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(FIRST // PIECE):
            client.sendall(chunk(os.urandom(PIECE)))
        proxy.wait_log(r"PUT /upload: request body not spooled after \d+ bytes: "
                       r"the body is over spool_max", timeout=10 * h.SLOW)
        h.wait_until(lambda: spool_bytes() == 0, 10 * h.SLOW,
                     "retryproxy_spool_bytes 0 while the client pauses")
        h.wait_until(lambda: not h.open_files_under(proxy.pid, spool_dir), 5 * h.SLOW,
                     "no spool file open while the client pauses")
        client.sendall(chunk(os.urandom(LAST)) + b"0\r\n\r\n")
        response = b""
        while b"\r\n\r\n" not in response:
            data = client.recv(65536)
            h.ok(data, "the response head came (%r)" % response[:200])
            response += data
        head, _, body = response.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
        while len(body) < length:
            data = client.recv(65536)
            h.ok(data, "the response body came (%r)" % body)
            body += data
        h.ok(head.startswith(b"HTTP/1.1 200 "), "status line (%r)" % head[:200])
        h.eq(body, b"got %d\n" % (FIRST + LAST), "the upstream got every byte")
        fields = h.access_fields(proxy.access_one("/upload"))
        h.eq((fields.get("status"), fields.get("attempts")), ("200", "1"),
             "logged status, attempts (%r)" % fields)


h.run(scenario, __doc__)
