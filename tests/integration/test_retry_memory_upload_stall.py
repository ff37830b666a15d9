#!/usr/bin/env python3
"""Scenario: a chunked upload found over replay_buffer goes once, and what
memory kept of it still counts in limits.retry_memory until the upstream
has taken it.

Client: a raw socket PUTs a 10 MiB chunked body (64 KiB chunks) to a
sidecar listener with replay_buffer 8MiB and retry_memory 16MiB; curl to
the admin listener for /metrics.
Upstream: a raw server whose connection takes nothing (a 64 KiB receive
buffer) until the test lets it; then it reads the request, decodes the
chunked body and answers 200 with the body's length and sha256.
Must hold:
- once the body is found over replay_buffer and goes once, while the
  upstream takes nothing, retryproxy_retry_memory_bytes still counts the
  megabytes of it waiting in the proxy for the upstream (before, the 8 MiB
  memory held were handed to the upstream's connection at once and counted
  nowhere: every such upload to a slow upstream could hold replay_buffer
  beside the cap, up to max_connections x replay_buffer in all);
- let go, the upstream gets the whole body, byte-exact, in order; the
  client gets its 200, and the gauge is back to 0.
"""

import hashlib
import os
import socket
import threading

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UPSTREAM@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  try_timeout: 60s
  replay_buffer: 8MiB
  retry_memory: 16MiB
"""

MiB = 1 << 20
CHUNK = 64 << 10
SIZE = 10 * MiB


def read_chunked(f):
    """The decoded body of a chunked message read from file object f."""
    out = []
    while True:
        line = f.readline()
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while f.readline() not in (b"\r\n", b""):
                pass
            return b"".join(out)
        out.append(f.read(size))
        f.read(2)


def scenario(t):
    let_go = threading.Event()
    received = {}
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # a small window the connection keeps: the proxy cannot hand the body
    # to the kernel instead of holding it
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    t.defer(listener.close)

    def upstream():
        conn, _ = listener.accept()
        with conn:
            let_go.wait(120)
            f = conn.makefile("rb")
            while f.readline() not in (b"\r\n", b""):
                pass
            body = read_chunked(f)
            received["body"] = (len(body), hashlib.sha256(body).hexdigest())
            answer = ("%d %s" % received["body"]).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))

    threading.Thread(target=upstream, daemon=True).start()
    proxy = t.proxy(CONFIG, UPSTREAM=listener.getsockname()[1])

    def gauge():
        value = h.metric(h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1),
                                check=True).body.decode(), "retryproxy_retry_memory_bytes")
        h.ok(value is not None, "retryproxy_retry_memory_bytes is in /metrics")
        return int(value)

    data = os.urandom(SIZE)
    client = socket.create_connection(("127.0.0.1", proxy.port(0)), timeout=60 * h.SLOW)
    t.defer(client.close)

    def send():
        try:
            client.sendall(b"PUT /up HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n")
            for at in range(0, SIZE, CHUNK):
                client.sendall(b"%x\r\n%s\r\n" % (CHUNK, data[at:at + CHUNK]))
            client.sendall(b"0\r\n\r\n")
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    @t.check("over replay_buffer it goes once; what memory holds of it counts until the "
             "upstream takes it")
    def _():
        proxy.wait_log(r"PUT /up: chunked body is over replay_buffer \(8388608\): sent once",
                       timeout=30 * h.SLOW)
        # well over what the kernel's buffers can have taken of it
        h.wait_until(lambda: gauge() >= 2 * MiB, 10 * h.SLOW,
                     "retryproxy_retry_memory_bytes counting the body waiting for the upstream")

    @t.check("let go, the upstream gets the whole body byte-exact; 200; the gauge back to 0")
    def _():
        let_go.set()
        sender.join(60 * h.SLOW)
        r = h.RawConn.over(client, timeout=60 * h.SLOW).read_response("PUT")
        expected = (SIZE, hashlib.sha256(data).hexdigest())
        h.eq(received.get("body"), expected, "the body at the upstream")
        h.eq(r.status, 200, "status")
        h.wait_until(lambda: gauge() == 0, 5 * h.SLOW, "retryproxy_retry_memory_bytes 0")


h.run(scenario, __doc__)
