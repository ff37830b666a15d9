#!/usr/bin/env python3
"""Scenario: bytes nobody asked for on an idle pooled TLS connection, a TLS
record cut in two.

Client: raw sockets to a sidecar listener whose upstream is the https origin
of this file (max_attempts 1).
Origin: a TLS server over Python's memory BIOs on raw sockets, so that it
can send a record in pieces. On its first connection it answers the first
request, waits until the proxy has pooled the connection, encrypts a second
response nobody asked for into one TLS record and sends the record's first
half only; should a request come on that connection later, it sends the
record's second half, so that the proxy would read the stray response as
that request's answer. Every other request, on any connection, gets a
response naming the connection it came on.
Must hold: a partly received record on an idle pooled connection ends it
as a whole stray response does: the next request goes on a new connection
and its client gets that connection's answer, never the stray one; the
first connection sees no second request.
"""

import ssl
import threading
import time

import harness as h
from rawserver import RawServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@ORIGIN@
tls:
  ca_file: @CA@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 3s }
defaults:
  retry: { max_attempts: 1 }
"""

STRAY = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY"


def answer(body):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class TlsOverBio:
    """The server side of one TLS connection on a raw socket: what the TLS
    layer writes is sent by the caller, so records can be cut."""

    def __init__(self, sock, context):
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.buf = b""
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self._feed()
        self.flush()

    def _feed(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.incoming.write(data)

    def flush(self):
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())

    def read_request_head(self):
        """A request head's bytes, or None when the peer ended the
        connection (close_notify or EOF)."""
        while b"\r\n\r\n" not in self.buf:
            try:
                self.buf += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.flush()
                try:
                    self._feed()
                except EOFError:
                    return None
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return None
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head

    def encrypt(self, data):
        """The records that carry data, not sent."""
        self.flush()
        self.tls.write(data)
        return self.outgoing.read()


class StrayOrigin(RawServer):
    def __init__(self, cert, key):
        super().__init__(conn_timeout=10)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.half_sent = threading.Event()
        self.first_conn_requests = 0

    def serve(self, conn, cid):
        tls = TlsOverBio(conn, self.context)
        if tls.read_request_head() is None:
            return
        if cid == 1:
            self.first_conn_requests += 1
        conn.sendall(tls.encrypt(answer(b"conn%d" % cid)))
        if cid != 1:
            while tls.read_request_head() is not None:
                conn.sendall(tls.encrypt(answer(b"conn%d" % cid)))
            return
        time.sleep(0.3 * h.SLOW)  # the proxy pools the connection
        record = tls.encrypt(STRAY)
        cut = len(record) // 2
        conn.sendall(record[:cut])
        self.half_sent.set()
        if tls.read_request_head() is None:
            return
        self.first_conn_requests += 1
        conn.sendall(record[cut:])


def scenario(t):
    certs = t.certs()
    origin = StrayOrigin(certs.server, certs.server_key)
    t.defer(origin.stop)
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, CA=certs.ca)

    @t.check("half a stray record on an idle pooled TLS connection ends it: the next request "
             "goes on a new connection and gets its own answer")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/first", "localhost"))
            r = c.read_response()
            h.eq((r.status, r.body), (200, b"conn1"), "first response")
        h.ok(origin.half_sent.wait(5), "the origin sent the half record")
        time.sleep(0.3 * h.SLOW)  # the proxy reads the half record while the connection idles
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "/second", "localhost"))
            r = c.read_response()
        h.ok(r.body != b"STRAY", "the stray response reached a client")
        h.eq((r.status, r.body), (200, b"conn2"), "second response, on a new connection")
        h.eq(origin.first_conn_requests, 1, "requests on the first connection")
        h.ok(proxy.alive(), "proxy still serving")


h.run(scenario, __doc__)
