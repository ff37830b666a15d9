#!/usr/bin/env python3
"""Scenario: an upstream that fails in every way a network and a server can,
and a proxy that keeps serving through all of it (also under ASan/UBSan).

Client: curl and raw sockets through a forward listener (GET unless said),
and plain-HTTP requests to sidecar listeners whose upstreams are TLS
origins.
Origin: a closed port (connect refused); the test origin resetting after
reading the request (/reset/request), resetting in the middle of a
Content-Length body (/reset/body), never answering (/hang), dribbling head
and body one byte at a time over about 2 s (/slow, on a proxy whose
try_timeout allows it), and closing its connection after each response
without saying so (?close=1, which leaves a stale pooled connection); a
raw socket server that answers with bytes that are not HTTP, one that
speaks first (an SSH banner), and one that resets in the middle of a
chunked body; TLS origins whose certificates are expired (signed by the
trusted test CA, valid only in 2020), self-signed (localhost, trusted by
nobody) and for another host (wrong.example, test CA), next to a good one.
Defaults: max_attempts 3, backoff 50ms, try_timeout 1s; tls.ca_file is the
test CA; DNS goes to a loopback stub only (no name here needs it).
Must hold: refused, reset-before-response, garbage and silence are retried
up to max_attempts (3 tries counted by Retry-Attempts, access-log
attempts= and the origin) and end in 502 (504 for silence) naming the
cause; a reset in the middle of a body reaches the client as a truncated,
closed response (curl fails with 18 or 56, the bytes that arrived are a
correct prefix), never a complete 200; a response dribbled byte by byte
arrives whole and correct; after the origin closes a pooled connection the
next GET and POST still work (on a new connection); each bad certificate
gives 502 at once naming its reason (expired, self-signed, host name), not
retried (Retry-Attempts 1, one handshake, nothing sent); after every case a
normal request works, and the proxy exits cleanly with no sanitizer report.
"""

import os
import socket
import struct
import subprocess
import time

import dnsstub
import harness as h
import origin as o
from rawserver import RawServer, read_head

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: https://localhost:@EXPIRED@
  - address: 127.0.0.1:@PORT2@
    upstream: https://localhost:@SELFSIGNED@
  - address: 127.0.0.1:@PORT3@
    upstream: https://localhost:@WRONG@
  - address: 127.0.0.1:@PORT4@
    upstream: https://localhost:@GOOD@
tls:
  ca_file: @CA@
limits:
  drain_timeout: 2s
  try_timeout: 1s
  connect_timeout: 2s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 2
    max_backoff: 200ms
    jitter: 10ms
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

# try_timeout long enough for a head dribbled over about a second.
CONFIG_PATIENT = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  try_timeout: 10s
defaults:
  retry:
    max_attempts: 1
"""

CERT_REASONS = {
    "expired": ("expired",),
    "self-signed": ("self-signed", "self signed"),
    "wrong-host": ("hostname", "host name", "mismatch"),
}


def reset(conn):
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def garbage_handler(conn, server):
    read_head(conn)
    conn.sendall(b"\x00\xff\x13garbage that is not HTTP\r\n\r\n\x01\x02")
    conn.shutdown(socket.SHUT_WR)
    time.sleep(0.2)


def banner_handler(conn, server):
    conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    read_head(conn)
    time.sleep(0.2)


CHUNKED_CUT_SENT = 8 * 4096


def chunked_reset_handler(conn, server):
    read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    data = o.pattern_bytes(CHUNKED_CUT_SENT)
    for i in range(0, CHUNKED_CUT_SENT, 4096):
        conn.sendall(b"1000\r\n" + data[i:i + 4096] + b"\r\n")
    time.sleep(0.2)
    reset(conn)


def make_bad_certs(certs, directory):
    """An expired leaf for localhost signed by the test CA (valid only on
    2020-01-01) and a self-signed one for localhost; returns
    {kind: (cert, key)}."""
    def run(*args):
        p = subprocess.run(["openssl"] + list(args), cwd=directory, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("openssl %s failed: %s" % (" ".join(args), p.stderr))

    os.makedirs(os.path.join(directory, "db"), exist_ok=True)
    with open(os.path.join(directory, "db", "index.txt"), "w"):
        pass
    with open(os.path.join(directory, "db", "serial"), "w") as f:
        f.write("%016X\n" % int.from_bytes(os.urandom(7), "big"))
    with open(os.path.join(directory, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca = test\n[test]\ndatabase = db/index.txt\nnew_certs_dir = db\n"
                "serial = db/serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n"
                "[any]\ncommonName = supplied\n")
    with open(os.path.join(directory, "leaf.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "expired.key", "-out", "expired.csr", "-subj", "/CN=localhost")
    run("ca", "-batch", "-config", "ca.cnf", "-cert", certs.ca, "-keyfile", certs.ca_key,
        "-in", "expired.csr", "-out", "expired.pem", "-notext", "-extfile", "leaf.ext",
        "-startdate", "20200101000000Z", "-enddate", "20200102000000Z")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "self.key", "-out", "self.pem", "-days", "3", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    return {
        "expired": (os.path.join(directory, "expired.pem"), os.path.join(directory, "expired.key")),
        "self-signed": (os.path.join(directory, "self.pem"), os.path.join(directory, "self.key")),
    }


def scenario(t):
    certs = t.certs()
    bad = make_bad_certs(certs, os.path.join(t.tmp, "badpki"))
    origin = t.origin()
    tls_origins = {
        "expired": t.origin(tls=bad["expired"], name="expired"),
        "self-signed": t.origin(tls=bad["self-signed"], name="self-signed"),
        "wrong-host": t.origin(tls=(certs.wrong, certs.wrong_key), name="wrong-host"),
    }
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    garbage = RawServer(garbage_handler)
    t.defer(garbage.stop)
    banner = RawServer(banner_handler)
    t.defer(banner.stop)
    chunk_cut = RawServer(chunked_reset_handler)
    t.defer(chunk_cut.stop)
    stub = dnsstub.DnsStub().start()
    t.defer(stub.stop)
    env = {"RETRYPROXY_RESOLV_CONF": stub.write_resolv_conf(t.tmp)}
    proxy = t.proxy(CONFIG, env=env, EXPIRED=tls_origins["expired"].port,
                    SELFSIGNED=tls_origins["self-signed"].port, WRONG=tls_origins["wrong-host"].port,
                    GOOD=good.port, CA=certs.ca)
    counter = [0]

    def still_serving(p=proxy):
        """The next normal request through the forward listener works."""
        counter[0] += 1
        tag = "after%d" % counter[0]
        r = h.curl(origin.url("/echo?t=" + tag), proxy=p.url)
        h.eq((r.exit_code, r.status), (0, 200), "the next normal request (%r)" % r)
        h.ok(p.alive(), "the proxy exited")

    def access(tag):
        return h.access_fields(proxy.access_one(tag))

    def at_origin(tag, settle=0.3):
        time.sleep(settle * h.SLOW)
        return [q for q in origin.requests if q.query.get("t") == tag]

    @t.check("connect refused: 3 tries, then 502 naming the refusal; Retry-Attempts and access log say 3")
    def _():
        port = h.closed_port()
        r = h.curl("http://127.0.0.1:%d/x?t=refused" % port, proxy=proxy.url)
        h.check_error_response(r, 502, ("refused",))
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        entry = access("t=refused")
        h.eq(entry.get("attempts"), "3", "access-log attempts (%r)" % entry)
        h.eq(entry.get("tries", "").count("refused"), 3, "refused tries in the trail (%r)" % entry)
        still_serving()

    @t.check("reset after the request, before any response: 3 tries (origin sees 3), then 502")
    def _():
        r = h.curl(origin.url("/reset/request?t=rst"), proxy=proxy.url)
        h.check_error_response(r, 502, ("reset", "closed", "connection"))
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.eq(len(at_origin("rst")), 3, "requests at the origin")
        h.eq(access("t=rst").get("attempts"), "3", "access-log attempts")
        still_serving()

    @t.check("reset in the middle of a Content-Length body: truncated, closed, never a complete 200")
    def _():
        n = 300000
        r = h.curl(origin.url("/reset/body?n=%d&t=midbody" % n), proxy=proxy.url)
        h.ok(r.exit_code != 0, "curl exited 0: the client took a cut body for a complete one (%r)" % r)
        h.ok(r.exit_code in (18, 56), "curl exit %d (expected 18 partial file or 56 recv failure): %r"
             % (r.exit_code, r))
        h.eq(r.status, 200, "status of the head that went out before the reset")
        h.ok(len(r.body) < n, "client got %d of %d bytes" % (len(r.body), n))
        h.eq(r.body, o.pattern_bytes(len(r.body)), "the bytes that did arrive")
        h.eq(len(at_origin("midbody")), 1, "requests at the origin (no retry once the body started)")
        still_serving()

    @t.check("reset in the middle of a chunked body: truncated, no last chunk, never a complete 200")
    def _():
        with h.RawConn(proxy.port(), timeout=10) as c:
            c.send(h.request("GET", "http://127.0.0.1:%d/chunkcut" % chunk_cut.port,
                             "127.0.0.1:%d" % chunk_cut.port))
            head = c.read_head()
            rest = c.read_to_close(timeout=10)
        h.eq(head.status, 200, "status")
        if head.header("Content-Length") is not None:
            h.ok(len(rest) < int(head.header("Content-Length")),
                 "a complete Content-Length body arrived for a cut upstream body")
        else:
            h.ok(not rest.endswith(b"0\r\n\r\n"), "the cut chunked body was terminated properly: %r"
                 % rest[-40:])
        r = h.curl("http://127.0.0.1:%d/chunkcut2" % chunk_cut.port, proxy=proxy.url)
        h.ok(r.exit_code != 0, "curl exited 0 for a cut chunked body (%r)" % r)
        h.ok(len(r.body) <= CHUNKED_CUT_SENT, "client got %d bytes, the upstream sent %d"
             % (len(r.body), CHUNKED_CUT_SENT))
        h.eq(r.body, o.pattern_bytes(len(r.body)), "the bytes that did arrive")
        still_serving()

    @t.check("origin never answers: 504 after 3 try_timeouts of 1s, origin sees 3 requests; "
             "the first try, on a pooled connection, times out like the rest")
    def _():
        # leaves a kept-alive connection in the pool for the first try
        still_serving()
        start = time.monotonic()
        r = h.curl(origin.url("/hang?t=hang"), proxy=proxy.url)
        took = time.monotonic() - start
        h.check_error_response(r, 504, ("timeout", "timed out"))
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.ok(3.0 <= took <= 8 * h.SLOW, "504 after %.1fs; 3 tries of 1s" % took)
        hung = at_origin("hang")
        h.eq(len(hung), 3, "requests at the origin")
        h.ok(hung[0].index > 0, "the first try was not on a pooled connection (request %d on "
             "its connection)" % hung[0].index)
        h.eq(access("t=hang").get("tries", "").count("timeout"), 3,
             "timeouts in the trail (%r)" % access("t=hang"))
        still_serving()

    @t.check("origin answers with bytes that are not HTTP: 502, retried (3 connections)")
    def _():
        r = h.curl("http://127.0.0.1:%d/garbage?t=garbage" % garbage.port, proxy=proxy.url)
        h.check_error_response(r, 502)
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.eq(garbage.connections, 3, "connections to the garbage server")
        still_serving()

    @t.check("upstream speaks first with an SSH banner: 502, retried, proxy unharmed")
    def _():
        r = h.curl("http://127.0.0.1:%d/banner?t=banner" % banner.port, proxy=proxy.url)
        h.check_error_response(r, 502)
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        still_serving()

    @t.check("origin closes after each response (stale pooled connection): next GET works at once")
    def _():
        r = h.curl(origin.url("/echo?t=stale1&close=1"), proxy=proxy.url)
        h.eq(r.status, 200, "first status (%r)" % r)
        r = h.curl(origin.url("/echo?t=stale2"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "GET right after the close (%r)" % r)
        first, second = at_origin("stale1", 0), at_origin("stale2")
        h.eq((len(first), len(second)), (1, 1), "requests at the origin")
        h.ok(first[0].conn_id != second[0].conn_id, "the second request went on the closed connection")

    @t.check("origin closed the pooled connection a while ago: next GET and POST work")
    def _():
        r = h.curl(origin.url("/echo?t=stale3&close=1"), proxy=proxy.url)
        h.eq(r.status, 200, "first status (%r)" % r)
        time.sleep(0.5)
        r = h.curl(origin.url("/echo?t=stale4"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "GET (%r)" % r)
        r = h.curl(origin.url("/echo?t=stale5&close=1"), proxy=proxy.url)
        h.eq(r.status, 200, "third status (%r)" % r)
        time.sleep(0.5)
        r = h.curl("--data-binary", "post body", origin.url("/echo?t=stale6"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "POST (%r)" % r)
        posts = at_origin("stale6")
        h.eq([(q.method, bytes(q.body)) for q in posts], [("POST", b"post body")], "POSTs at the origin")
        still_serving()

    @t.check("pooled connections closed under a keep-alive burst: 10 requests in one curl run all 200")
    def _():
        urls = [origin.url("/echo?t=burst%d%s" % (i, "&close=1" if i % 2 == 0 else "")) for i in range(10)]
        code, rows, err = h.curl_multi(urls, proxy=proxy.url)
        h.eq(code, 0, "curl exit (%s)" % err)
        h.eq([s for s, _ in rows], [200] * 10, "statuses")
        still_serving()

    for kind, what in (("expired", "an expired certificate"), ("self-signed", "a self-signed certificate"),
                       ("wrong-host", "a certificate for another host")):
        @t.check("TLS upstream with %s: 502 naming the reason, 1 try, nothing sent" % what)
        def _(kind=kind):
            listener = {"expired": 1, "self-signed": 2, "wrong-host": 3}[kind]
            upstream = tls_origins[kind]
            before = len(upstream.connections)
            r = h.curl(proxy.listener_url(listener, "/echo?t=tls-" + kind))
            h.check_error_response(r, 502, CERT_REASONS[kind])
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts (a bad certificate is not retried)")
            time.sleep(0.5 * h.SLOW)
            h.eq(len(upstream.connections) - before, 1, "handshakes with the origin (a retry adds one)")
            h.eq(upstream.requests, [], "requests that reached the origin")
            entry = access("t=tls-" + kind)
            h.eq(entry.get("attempts"), "1", "access-log attempts (%r)" % entry)
            r = h.curl(proxy.listener_url(4, "/echo?t=tls-good-after-" + kind))
            h.eq((r.exit_code, r.status), (0, 200), "the good TLS upstream right after (%r)" % r)
            still_serving()

    patient = t.proxy(CONFIG_PATIENT, env=env)

    @t.check("head and body dribbled one byte at a time over about 2s: the response arrives whole")
    def _():
        n = 120
        start = time.monotonic()
        r = h.curl(origin.url("/slow/%d?head=1&delay=0.01&t=slow" % n), proxy=patient.url)
        took = time.monotonic() - start
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(r.header("Content-Length"), str(n), "Content-Length")
        h.eq(r.body, o.pattern_bytes(n), "body")
        h.ok(took >= 1.0, "the response took only %.1fs; was it dribbled?" % took)
        still_serving(patient)

    @t.check("the proxy is alive at the end")
    def _():
        h.ok(proxy.alive() and patient.alive(), "a proxy exited")


h.run(scenario, __doc__, timeout=120)
