#!/usr/bin/env python3
"""Scenario: TLS records that arrive in pieces, on both sides of the proxy.

Between the proxy and a TLS origin, and between a TLS client and the
proxy, sits a relay that passes every read on in pieces of 1 to 7 bytes,
each its own TCP segment (TCP_NODELAY) 0.2 ms after the last, so that TLS
records, handshake messages included, reach the proxy in many small
segments; whether a read of the proxy's sees them apart is up to timing,
and with the gap that is the rule (with SSL_ERROR_WANT_READ before any
byte taken as an EOF, 3 of the 4 checks fail).
Client: curl through a sidecar listener whose upstream is the https origin
behind the relay; and a Python TLS client that CONNECTs through the relay
to a forward listener that intercepts the origin's host, then speaks TLS
to the proxy.
Origin: the test origin over TLS with a certificate of the test CA.
Must hold: a 20,000-byte response and a chunked one come through whole
(sha256) on both paths, twice on one keep-alive connection (the second on
the pooled upstream connection), a 30,000-byte request body reaches the
origin whole, and the relay really cut the records (hundreds of pieces
per request).
"""

import hashlib
import random
import socket
import threading
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@RELAY@
  - address: 127.0.0.1:@PORT1@
tls:
  ca_file: @CA@
intercept:
  hosts: [localhost]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry: { max_attempts: 1 }
"""


class FragmentingRelay:
    """Listens on loopback and relays each connection to target_port,
    passing what it reads on in pieces of 1 to 7 bytes, one segment each,
    with a short gap between them. Counts the pieces it sent."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.pieces = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        rng = random.Random(src.fileno())
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                i = 0
                while i < len(data):
                    n = rng.randint(1, 7)
                    dst.sendall(data[i:i + n])
                    i += n
                    with self._lock:
                        self.pieces += 1
                    time.sleep(0.0002)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self._listener.close()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def scenario(t):
    certs = t.certs()
    origin = t.origin(tls=(certs.server, certs.server_key))
    relay = FragmentingRelay(origin.port)
    t.defer(relay.close)
    localca = t.local_ca()
    proxy = t.proxy(CONFIG, RELAY=relay.port, CA=certs.ca, LOCALCA=localca)

    @t.check("upstream side: 20,000 bytes and a chunked body whole, twice on one connection")
    def _():
        before = relay.pieces
        with h.RawConn(proxy.port(0)) as c:
            for path, n in (("/bytes/20000", 20000), ("/chunked/9000?chunk=1000", 9000)):
                c.send(h.request("GET", path, "localhost"))
                r = c.read_response("GET")
                h.eq(r.status, 200, "%s: status" % path)
                h.eq(sha(r.body), o.pattern_sha256(n), "%s: body sha256" % path)
        h.eq(len(origin.connections), 1, "upstream connections (the second request pooled)")
        h.ok(relay.pieces - before > 1000,
             "the relay cut the TLS records (%d pieces)" % (relay.pieces - before))

    @t.check("upstream side: a 30,000-byte request body reaches the origin whole")
    def _():
        body = o.pattern_bytes(30000)
        r = h.fetch(proxy.port(0), "PUT", "/echo", "localhost", body=body)
        h.eq(r.status, 200, "status")
        reqs = origin.requests_for("/echo")
        h.eq([q.body_sha256 for q in reqs], [sha(body)], "body the origin read")

    @t.check("client side: an intercepted tunnel whose records arrive in pieces")
    def _():
        client_relay = FragmentingRelay(proxy.port(1))
        t.defer(client_relay.close)
        tls = h.intercepted_tls(client_relay.port, "localhost", origin.port, localca + "/ca.pem",
                                timeout=20)
        with h.RawConn.over(tls, timeout=20) as c:
            for path, n in (("/bytes/20000", 20000), ("/chunked/9000?chunk=1000", 9000)):
                c.send(h.request("GET", path, "localhost:%d" % origin.port))
                r = c.read_response("GET")
                h.eq(r.status, 200, "%s: status" % path)
                h.eq(sha(r.body), o.pattern_sha256(n), "%s: body sha256" % path)
        h.ok(client_relay.pieces > 1000,
             "the relay cut the client's TLS records (%d pieces)" % client_relay.pieces)


if __name__ == "__main__":
    h.run(scenario)
