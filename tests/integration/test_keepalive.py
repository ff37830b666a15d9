#!/usr/bin/env python3
"""Scenario: persistent connections on both sides and the upstream pool.

Client: one curl fetching 20 URLs through the proxy, then separate curl
runs; a raw socket pipelining several requests in one write; requests with
Connection: close; four concurrent raw clients held open by gates.
Origin: keep-alive; for some requests it closes the connection right after
the response without announcing it (a stale pooled connection); gated
responses keep four upstream connections busy at once.
Must hold: curl reuses its one client connection for all 20 requests and
the origin sees them on exactly one upstream connection, also reused by
later clients; pipelined responses come back complete and in request order
even when the first is the slowest; a client that pipelines 3,000 requests
for 30 KB each and reads nothing does not make the proxy hold their
responses (its VmRSS grows less than 32 MiB; the next request is read only
once the output has drained), and its first responses are whole; a connection the origin closed is never
used again (the next request, also a POST, succeeds); Connection: close is
honoured; after the burst at most pool_max_idle (2) idle upstream
connections stay open, and those close after pool_idle_timeout.
"""

import json
import socket
import threading
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  pool_max_idle: 2
  pool_idle_timeout: 3s
defaults:
  retry:
    max_attempts: 1
"""


def conns_of(origin, tag):
    return {r.conn_id for r in origin.requests if tag in r.query}


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    auth = origin.authority

    @t.check("20 requests in one curl run: one client connection, one upstream connection")
    def _():
        urls = [origin.url("/echo?ka20=%d" % i) for i in range(20)]
        code, rows, err = h.curl_multi(urls, proxy=proxy.url)
        h.eq(code, 0, "curl exit (%s)" % err)
        h.eq([s for s, _ in rows], [200] * 20, "statuses")
        h.eq(sum(c for _, c in rows), 1, "client connections curl opened (num_connects)")
        seen = [r for r in origin.requests if "ka20" in r.query]
        h.eq(len(seen), 20, "requests at the origin")
        h.eq(len({r.conn_id for r in seen}), 1, "upstream connections used for the 20 requests")

    @t.check("later clients reuse the same pooled upstream connection")
    def _():
        for i in range(3):
            r = h.curl(origin.url("/echo?kalater=%d" % i), proxy=proxy.url)
            h.eq(r.status, 200, "status (%r)" % r)
        first = conns_of(origin, "ka20")
        later = conns_of(origin, "kalater")
        h.eq(later, first, "upstream connection ids (first run vs later clients)")
        h.eq(len(origin.connections), 1, "connections the origin accepted in total")

    @t.check("pipelined requests in one write: complete responses in request order")
    def _():
        reqs = [
            h.request("GET", origin.url("/delay/0.5?pipe=1"), auth),
            h.request("GET", origin.url("/bytes/1000?pipe=2"), auth),
            h.request("POST", origin.url("/echo?pipe=3"), auth, body=b"pipelined body"),
            h.request("GET", origin.url("/chunked/3000?pipe=4"), auth),
            h.request("GET", origin.url("/status/204?pipe=5"), auth),
            h.request("HEAD", origin.url("/bytes/777?pipe=6"), auth),
            h.request("GET", origin.url("/echo?pipe=7"), auth),
        ]
        with h.RawConn(proxy.port(), timeout=15) as c:
            c.send(b"".join(reqs))
            r1 = c.read_response()
            r2 = c.read_response()
            r3 = c.read_response()
            r4 = c.read_response()
            r5 = c.read_response()
            r6 = c.read_response(method="HEAD")
            r7 = c.read_response()
        h.eq((r1.status, r1.body), (200, b"delayed\n"), "response 1 (the slow one)")
        h.eq((r2.status, r2.body), (200, o.pattern_bytes(1000)), "response 2")
        h.eq(r3.status, 200, "response 3 status")
        e3 = json.loads(r3.body)
        h.eq((e3["target"], e3["body_len"]), ("/echo?pipe=3", 14), "response 3 is the POST's echo")
        h.eq((r4.status, r4.body), (200, o.pattern_bytes(3000)), "response 4")
        h.eq(r5.status, 204, "response 5")
        h.eq((r6.status, r6.header("Content-Length")), (200, "777"), "response 6 (HEAD)")
        h.eq(json.loads(r7.body)["target"], "/echo?pipe=7", "response 7 is the last echo")

    @t.check("a client that pipelines and does not read: the proxy's memory stays bounded")
    def _():
        n, size = 3000, 30000
        body = o.pattern_bytes(size)
        answer = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size) + body
        # an origin that answers each request head at once (the test
        # origin's pace would hide a pile-up behind the client)
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        served = [0]

        def serve():
            conn, _ = server.accept()
            with conn:
                pending = b""
                while True:
                    data = conn.recv(1 << 16)
                    if not data:
                        return
                    pending += data
                    heads = pending.count(b"\r\n\r\n")
                    pending = pending[pending.rfind(b"\r\n\r\n") + 4:] if heads else pending
                    if heads:
                        conn.sendall(answer * heads)
                        served[0] += heads

        threading.Thread(target=serve, daemon=True).start()
        url = "http://127.0.0.1:%d/flood" % server.getsockname()[1]
        base = proxy.proc_status()["VmRSS"]
        with h.RawConn(proxy.port(), timeout=30) as c:
            c.send(b"".join(h.request("GET", url + "?n=%d" % i, auth) for i in range(n)))
            # what the proxy would hold if it read on: n x 30 KB = 90 MB
            time.sleep(2 * h.SLOW)
            grew = proxy.proc_status()["VmRSS"] - base
            h.ok(grew < 32 * 1024, "VmRSS grew %d KiB while the client read nothing (%d "
                 "requests answered)" % (grew, served[0]))
            for i in (0, 1):
                r = c.read_response()
                h.eq((r.status, r.body), (200, body), "response %d" % i)
        server.close()

    @t.check("a pooled connection the origin closed is not reused: GET and POST after it succeed")
    def _():
        r = h.curl(origin.url("/echo?stale=1&close=1"), proxy=proxy.url)
        h.eq(r.status, 200, "status of the request after which the origin closes")
        cid = json.loads(r.body)["conn_id"]
        origin.wait_for(lambda org: any(c.id == cid and c.closed.is_set() for c in org.connections),
                        5, "the origin to close its side")
        time.sleep(0.5)
        r = h.curl(origin.url("/echo?stale=2"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "GET after the stale close (%r)" % r)
        h.curl(origin.url("/echo?stale=3&close=1"), proxy=proxy.url)
        time.sleep(0.5)
        r = h.curl("-X", "POST", "--data-binary", "x", origin.url("/echo?stale=4"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "POST after the stale close (%r)" % r)
        h.eq(json.loads(r.body)["body_len"], 1, "POST body at the origin")

    @t.check("Connection: close from an HTTP/1.1 client: response, then the proxy closes")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("GET", origin.url("/bytes/100?cc=1"), auth, [("Connection", "close")]))
            r = c.read_response()
            h.eq((r.status, r.body), (200, o.pattern_bytes(100)), "response")
            h.ok(c.closed_within(5), "proxy should close the connection after Connection: close")

    pool_origin = t.origin(name="pool-origin")

    @t.check("4 concurrent requests use 4 upstream connections; afterwards 2 stay idle (pool_max_idle)")
    def _():
        gates = [pool_origin.gate("g%d" % i) for i in range(4)]
        results = [None] * 4

        def client(i):
            try:
                with h.RawConn(proxy.port(), timeout=20) as c:
                    c.send(h.request("GET", pool_origin.url("/gate/g%d?first=10&rest=10" % i),
                                     pool_origin.authority))
                    results[i] = c.read_response()
            except Exception as e:  # reported below
                results[i] = e
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
        for th in threads:
            th.start()
        for g in gates:
            g.wait_reached(10)
        h.eq(len(pool_origin.connections), 4, "upstream connections while 4 requests are in flight")
        for g in gates:
            g.release()
        for th in threads:
            th.join(20)
        for i, r in enumerate(results):
            h.ok(isinstance(r, h.Response) and r.status == 200 and r.body == o.pattern_bytes(20),
                 "client %d result: %r" % (i, r))
        pool_origin.wait_for(lambda org: sum(c.closed.is_set() for c in org.connections) >= 2, 5,
                             "the proxy to close the connections beyond pool_max_idle")
        time.sleep(0.5)
        open_now = [c for c in pool_origin.connections if not c.closed.is_set()]
        h.eq(len(open_now), 2, "idle upstream connections kept (pool_max_idle: 2)")

    @t.check("idle pooled connections close after pool_idle_timeout (3s)")
    def _():
        pool_origin.wait_for(lambda org: all(c.closed.is_set() for c in org.connections), 3 + 10,
                             "every idle pooled connection to be closed")
        reasons = {c.close_reason for c in pool_origin.connections}
        h.ok(all(r.startswith("peer") for r in reasons), "connections should be closed by the proxy: %r" % reasons)


h.run(scenario, __doc__)
