#!/usr/bin/env python3
"""Scenario: HTTPS interception in forward mode.

Client: curl (and a raw TLS client for what curl will not send) goes through
a forward proxy with HTTPS URLs, so every request is a CONNECT; it trusts
the proxy's local CA (made with retryproxy --make-ca), or, where the test
says so, only the test origin's CA.
Origin: TLS origins with certificates the tests make with openssl: "good"
(localhost and 127.0.0.1, signed by the test CA the proxy trusts through
tls.ca_file), "unknown" (signed by a CA nobody trusts), and a plain one.
intercept.hosts lists localhost and 127.0.0.1 and the unknown origin's
name; other hosts are tunnelled blind.
Must hold: a listed host is answered by the proxy with a leaf made by the
local CA for the CONNECT host (SAN DNS or IP, EC P-256, at most 30 days,
issued by the local CA, the same certificate for a second connection; ALPN
http/1.1 chosen from h2 and http/1.1, http/1.0 for a client offering it
alone, and a client offering h2 alone
refused with the no_application_protocol alert, logged and counted), the
requests inside are proxied like a sidecar's to https://host:port (Host of
the upstream, Via, Retry-Attempts, a 503 retried, the access log's target
https://host:port/path, keep-alive inside the tunnel; a client's close_notify between requests
answered with the proxy's; a TLS 1.3 request
sent in one segment with the client's Finished, or arriving with it while
the proxy is stopped, is answered at once, not after client_timeout; a
body that ends with the connection, and a refusal, end with the proxy's
close_notify, so a strict TLS client sees no truncation); the Host inside
is compared with the CONNECT authority as a host and port (any case, a
trailing dot, no port meaning 443): another spelling of the same host
passes, a Host naming another host or port is a 400 and nothing reaches
the origin; a refusal inside a tunnel is logged with the tunnel's
https://host:port before its target, as far as it was read (or alone, for a
request line refused in its method and for OPTIONS *, or named in the note of an absolute-form target
naming another origin, which is a 421; see also
test_intercept_absolute_form.py); a host
not listed is tunnelled blind (the client sees the origin's own certificate); a client
that trusts only its own store fails its handshake, which is logged with
the host and counted in retryproxy_intercept_failures_total, and the proxy
keeps serving; so is a client that hangs up
after it received the certificate, but not one that closes or resets the
connection before it did, or in a handshake resuming an earlier tunnel's
session (no certificate sent); a client whose first byte in the tunnel is
no TLS record speaks plain HTTP (curl -p http://): its requests go to
http://host:port like a sidecar's (a 503 retried, the access log's
target http://host:port/path, an https:// target there a 421), and it is
not counted as a failed handshake (before, every such tunnel failed its
handshake and closed); an upstream whose certificate fails verification
is a 502
inside the tunnel; a reload picks up a new host list and a new CA; a reload
that takes a host out of access.allow_hosts or out of interception (its
pattern, intercept: altogether, or interception on its listener, which a
reload made a sidecar on the same address) answers the next request in a tunnel to
it opened before with 403 and closes that tunnel, and nothing of it reaches
the origin; a shutdown whose drain_timeout cuts a close-delimited response
(the origin sends 1000 bytes and stalls) ends the client's connection
without close_notify, so a strict client sees the truncation. With
client_timeout 1s, a TLS client in a tunnel reading a 16 MiB body at about
640 KB/s is not cut and gets it whole; one that stops reading is cut one
client_timeout after the proxy's write blocked (two on a loaded machine).
A TLS session resumes in a second tunnel to the same host, never in a
tunnel to another host. A leaf is made once TLS starts in a tunnel, never
for plain HTTP there. With intercept.server_first_after 1s, a client
that waits for a server-first origin (a loopback line server sending an
SMTP-like 220 banner) gets it after the wait through a blind tunnel (the
CONNECT's line noting it, with bytes_in), an SSH banner from the client
goes blind at once, as do other first bytes that are neither TLS nor an
HTTP method, space and request-target start (a Redis command, also an
inline one such as SET k v or KEYS *, memcached's get foo, a binary
start) while malformed HTTP that has those is still a 400, with a
half-close right behind them passed on (as after too few bytes to tell), a blind connect that fails closes the tunnel (noted), a
reload during the wait that takes the host out of access.allow_hosts or of
intercept.hosts closes the client instead of tunnelling it (noted), a
silent client that closes during the blind connect has it given up at once
(noted), a blind fallback tunnel's line notes why it ended after why it
went blind, a client still silent when a drain begins is closed then (it
does not go blind after the wait), a reload that changes only
server_first_after applies to clients already silent, counted from their
200 (lowered from 20s to 1s 1.5 s after the 200: blind at once; raised
from 1s to 20s 0.3 s after it: not blind 2 s later, then blind once a
reload lowers it again), and TLS and plain HTTP clients are intercepted as
before.
"""

import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
import urllib.parse

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: [@HOSTS@]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    jitter: 10ms
"""


def handshake_by_hand(proxy_port, host, port, cafile, tls13=True):
    """A CONNECT to host:port, then a client TLS handshake driven through
    memory buffers so that the test decides when the client's last flight
    goes out. Returns (socket, SSLObject, incoming, outgoing) with the
    client's Finished still in outgoing."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    h.ok(head.startswith(b"HTTP/1.1 200"), "CONNECT answer %r" % head)
    ctx = ssl.create_default_context(cafile=cafile)
    if tls13:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=host)
    while True:
        try:
            tls.do_handshake()
            return s, tls, incoming, outgoing
        except ssl.SSLWantReadError:
            if outgoing.pending:
                s.sendall(outgoing.read())
            data = s.recv(65536)
            h.ok(data, "the proxy closed during the handshake")
            incoming.write(data)


def read_by_hand(s, tls, incoming, timeout):
    """Decrypted bytes until a whole response head is in, within timeout."""
    s.settimeout(timeout)
    got = b""
    while b"\r\n\r\n" not in got:
        try:
            data = s.recv(65536)
        except socket.timeout:
            raise AssertionError("no response within %ss; got %r" % (timeout, got))
        h.ok(data, "the proxy closed the tunnel; got %r" % got)
        incoming.write(data)
        try:
            while True:
                got += tls.read(65536)
        except ssl.SSLWantReadError:
            pass
    return got


def read_response(tls):
    conn = h.RawConn.over(tls)
    return conn.read_response()


def cert_text(der):
    p = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-text"], input=der,
                       capture_output=True)
    return p.stdout.decode()


def scenario(t):
    certs = t.certs()
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    unknown = t.origin(tls=(certs.unknown, certs.unknown_key), name="unknown")
    plain = t.origin(name="plain")
    local = t.local_ca()
    local_ca = os.path.join(local, "ca.pem")
    proxy = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local,
                    HOSTS='"localhost", "127.0.0.1", "*.invalid"')

    def get(url, *extra):
        return h.curl("--cacert", local_ca, *extra, url, proxy=proxy.url)

    def metric(name):
        r = h.curl(proxy.listener_url(1, "/metrics"))
        m = re.search(r"^%s (\d+)$" % re.escape(name), r.body.decode(), re.M)
        return int(m.group(1)) if m else None

    @t.check("a listed host: the proxy answers with a leaf from the local CA, the request goes "
             "upstream as to an https sidecar")
    def _():
        r = get("https://localhost:%d/echo?t=basic" % good.port)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit, status (%r)" % r)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        seen = good.requests_for("/echo")
        seen = [q for q in seen if q.query.get("t") == "basic"]
        h.eq(len(seen), 1, "requests at the origin")
        h.eq(seen[0].header_all("Host"), ["localhost:%d" % good.port], "Host at the origin")
        h.ok("retryproxy" in (seen[0].header("Via") or ""), "Via at the origin")
        line = proxy.access_one("t=basic")
        h.eq(h.access_fields(line)["target"], "https://localhost:%d/echo?t=basic" % good.port,
             "access-log target")

    @t.check("the leaf: SAN of the CONNECT host, EC P-256, at most 30 days, issued by the local CA, "
             "the same for a second connection")
    def _():
        with h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca) as tls:
            der = tls.getpeercert(binary_form=True)
            h.eq(tls.selected_alpn_protocol(), None, "ALPN (none offered)")
        text = cert_text(der)
        h.ok("DNS:localhost" in text, "SAN DNS:localhost in\n%s" % text)
        h.ok("prime256v1" in text or "P-256" in text, "EC P-256 key")
        h.ok("retryproxy local CA" in text, "issuer is the local CA")
        nb = re.search(r"Not Before: (.*)", text).group(1)
        na = re.search(r"Not After : (.*)", text).group(1)
        days = (ssl.cert_time_to_seconds(na) - ssl.cert_time_to_seconds(nb)) / 86400
        h.ok(days <= 30.05, "validity %.2f days" % days)
        with h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca) as tls:
            h.eq(tls.getpeercert(binary_form=True), der, "the second connection's certificate")
        with h.intercepted_tls(proxy.port(), "127.0.0.1", good.port, local_ca) as tls:
            ip_text = cert_text(tls.getpeercert(binary_form=True))
        h.ok("IP Address:127.0.0.1" in ip_text, "SAN IP:127.0.0.1 in\n%s" % ip_text)

    @t.check("a session resumes in a tunnel to the same host, and never in one to another "
             "(the client would skip that host's certificate)")
    def _():
        ctx = ssl.create_default_context(cafile=local_ca)

        def tunnel(host, session=None):
            s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s\r\n\r\n"
                       % (host, good.port, host)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            tls = ctx.wrap_socket(s, server_hostname=host, session=session)
            # a request and its answer: the TLS 1.3 tickets come after
            tls.sendall(b"GET /echo?t=resume HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                        % (host.encode(), good.port))
            read_response(tls)
            return tls

        first = tunnel("localhost")
        session = first.session
        first.close()
        again = tunnel("localhost", session)
        h.ok(again.session_reused, "a second tunnel to localhost did not resume the session")
        again.close()
        other = tunnel("127.0.0.1", session)
        h.ok(not other.session_reused, "localhost's session resumed in a tunnel to 127.0.0.1")
        h.ok("IP Address:127.0.0.1" in cert_text(other.getpeercert(binary_form=True)),
             "the tunnel to 127.0.0.1 showed no certificate of its own")
        other.close()

    def alpn_tls(offered):
        return h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca, alpn=offered)

    @t.check("a CONNECT to an intercepted host that is no valid host name (an empty label, a "
             "label over 63 bytes) gets 400, not 502, and no error line")
    def _():
        for host in ("a..invalid", "x" * 64 + ".invalid"):
            with h.RawConn(proxy.port()) as c:
                c.send(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
                head = c.read_head()
            h.eq(head.status, 400, "%s: the answer (%r)" % (host, head.raw_head[:60]))
            line = proxy.access_one(host[-12:])
            h.ok("valid%20host%20name" in line, "%s: the access line names why: %s" % (host, line))
        h.ok("no certificate for" not in proxy.stderr(), "no error line for the client's mistake")

    @t.check("ALPN: a client offering h2 and http/1.1 gets http/1.1")
    def _():
        with alpn_tls(["h2", "http/1.1"]) as tls:
            h.eq(tls.selected_alpn_protocol(), "http/1.1", "ALPN")
            h.ok(tls.version() in ("TLSv1.2", "TLSv1.3"), "TLS version %s" % tls.version())

    @t.check("ALPN: a client offering only http/1.0 gets http/1.0, and its HTTP/1.0 request "
             "an answer")
    def _():
        with alpn_tls(["http/1.0"]) as tls:
            h.eq(tls.selected_alpn_protocol(), "http/1.0", "ALPN")
            tls.sendall(b"GET /echo?t=alpn10 HTTP/1.0\r\nHost: localhost:%d\r\n\r\n" % good.port)
            answer, end = h.read_to_end(tls)
        h.ok(answer.startswith(b"HTTP/1.1 200 "), "the answer: %r" % answer[:60])
        h.eq(end, "FIN", "how the HTTP/1.0 answer's connection ended")

    @t.check("ALPN: a client offering only h2 (as gRPC clients do) gets the fatal "
             "no_application_protocol alert (RFC 7301 section 3.2), logged and counted")
    def _():
        before = metric("retryproxy_intercept_failures_total")
        try:
            with alpn_tls(["h2"]) as tls:
                got = "a handshake that selected %r" % tls.selected_alpn_protocol()
        except ssl.SSLError as e:
            got = str(e)
        h.ok("no application protocol" in got.lower().replace("_", " "),
             "the client's handshake: %s" % got)
        h.wait_until(lambda: metric("retryproxy_intercept_failures_total") == before + 1, 5,
                     "the failure counted")
        proxy.wait_log(r"intercept: client .* https://localhost:%d .*no application protocol"
                       % good.port)

    @t.check("retries inside the tunnel: 503, 503, 200 gives the 200 with Retry-Attempts: 3")
    def _():
        good.script("/i/retry", [503, 503, "/echo?t=retried"])
        r = get("https://localhost:%d/i/retry" % good.port)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(good.requests_for("/i/retry")), 3, "requests at the origin")

    @t.check("plain HTTP in a tunnel to a listed host (curl -p http://, a browser's ws://): "
             "its requests go to http://host:port, retried, logged with that prefix")
    def _():
        plain.script("/i/plain", [503, "/echo?t=plain"])
        r = h.curl("-p", "http://localhost:%d/i/plain" % plain.port, proxy=proxy.url)
        h.eq((r.exit_code, r.status, r.header("Retry-Attempts")), (0, 200, "2"),
             "curl exit, status, Retry-Attempts (%r)" % r)
        seen = plain.requests_for("/i/plain")
        h.eq(len(seen), 2, "requests at the plain origin")
        h.eq(seen[-1].header_all("Host"), ["localhost:%d" % plain.port], "Host at the origin")
        h.eq(h.access_fields(proxy.access_one("/i/plain"))["target"],
             "http://localhost:%d/i/plain" % plain.port, "access-log target")
        # the same tunnel refuses a request for another origin, as a TLS one does
        with h.RawConn(proxy.port()) as c:
            c.send(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                    % (plain.port, plain.port)).encode())
            h.eq(c.read_head().status, 200, "CONNECT answered")
            c.send(("GET https://localhost:%d/echo HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                    % (plain.port, plain.port)).encode())
            h.eq(c.read_response().status, 421, "an https target in a plain tunnel")

    @t.check("a leaf is made when TLS starts in the tunnel, never for plain HTTP there")
    def _():
        # a proxy of its own: its leaf cache is empty, and it logs each leaf it makes
        fresh = t.proxy(CONFIG.replace("level: info", "level: debug"), TESTCA=certs.ca,
                        LOCALCA=local, HOSTS='"localhost"')

        def made():
            return [ln for ln in fresh.stderr_lines() if "made a certificate for" in ln]

        r = h.curl("-p", "http://localhost:%d/echo?t=noleaf" % plain.port, proxy=fresh.url)
        h.eq((r.exit_code, r.status), (0, 200), "plain HTTP in the tunnel (%r)" % r)
        fresh.access_one("t=noleaf")
        h.eq(made(), [], "certificates made for a plain-HTTP tunnel")
        r = h.curl("--cacert", local_ca, "https://localhost:%d/echo?t=leaf" % good.port,
                   proxy=fresh.url)
        h.eq((r.exit_code, r.status), (0, 200), "TLS in the tunnel (%r)" % r)
        fresh.wait_log(r"debug intercept: made a certificate for localhost$")
        h.eq(len(made()), 1, "certificates made once TLS started (%r)" % made())

    def line_server(banner, reply, accepted=None):
        """A loopback server that speaks first when banner is given (SMTP's
        220), then answers each line it reads with reply + the line (and,
        at the client's half-close, reply + what is left of one); each
        connection it accepts is noted in accepted when given."""
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        t.defer(ls.close)

        def serve():
            while True:
                try:
                    c, _ = ls.accept()
                except OSError:
                    return
                if accepted is not None:
                    accepted.append(c)
                with c:
                    if banner:
                        c.sendall(banner)
                    buf = b""
                    while True:
                        try:
                            data = c.recv(4096)
                        except OSError:
                            break
                        if not data:
                            # a half-close: what is left of a line, echoed
                            if buf:
                                try:
                                    c.sendall(reply + buf)
                                except OSError:
                                    pass
                            break
                        buf += data
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            c.sendall(reply + line + b"\n")

        threading.Thread(target=serve, daemon=True).start()
        return ls.getsockname()[1]

    blind = t.proxy(CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                                   "  ca_key: @LOCALCA@/ca-key.pem\n  server_first_after: 1s\n"),
                    TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')

    def blind_connect(port, proxy=None):
        c = h.RawConn((proxy or blind).port())
        c.send(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                % (port, port)).encode())
        h.eq(c.read_head().status, 200, "CONNECT answered")
        return c

    def blind_line(port, proxy=None):
        wait_until = time.monotonic() + 10
        while time.monotonic() < wait_until:
            for ln in (proxy or blind).access_lines():
                f = h.access_fields(ln)
                if f.get("method") == "CONNECT" and f.get("target") == "localhost:%d" % port:
                    f["note"] = urllib.parse.unquote(f.get("note", ""))
                    return f
            time.sleep(0.05)
        raise AssertionError("no CONNECT line for localhost:%d" % port)

    @t.check("a protocol whose server speaks first (SMTP) through a listed host's tunnel: after "
             "intercept.server_first_after with no client byte, tunnelled blind to the host")
    def _():
        port = line_server(b"220 smtp.test ESMTP\r\n", b"250 ")
        with blind_connect(port) as c:
            started = time.monotonic()
            h.eq(c.read_until(b"\n"), b"220 smtp.test ESMTP\r\n", "the server's banner")
            waited = time.monotonic() - started
            h.ok(0.8 < waited < 6, "banner after the wait (%.2fs)" % waited)
            c.send(b"EHLO client.test\r\n")
            h.eq(c.read_until(b"\n"), b"250 EHLO client.test\r\n", "the server's answer")
        f = blind_line(port)
        h.ok("tunnelled blind" in f.get("note", ""), "the line's note (%r)" % f)
        h.eq(f.get("bytes_in"), str(len(b"EHLO client.test\r\n")), "bytes from the client")
        blind.wait_log(r"info intercept: client \S+: tunnel to localhost:%d: no byte from the "
                       r"client within intercept.server_first_after" % port)

    @t.check("an SSH client's banner (it speaks without waiting for the server's) through a "
             "listed host's tunnel is no HTTP: tunnelled blind, at once")
    def _():
        port = line_server(b"SSH-2.0-test_server\r\n", b"echo ")
        with blind_connect(port) as c:
            started = time.monotonic()
            # as OpenSSH sends it: a comment after a space (RFC 4253 section 4.2)
            c.send(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u6\r\n")
            h.eq(c.read_until(b"\n"), b"SSH-2.0-test_server\r\n", "the server's banner")
            h.eq(c.read_until(b"\n"), b"echo SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u6\r\n",
                 "the client's banner, passed on")
            h.ok(time.monotonic() - started < 0.8, "no wait for server_first_after (1s)")
        h.ok("SSH" in blind_line(port).get("note", ""), "the line's note")

    @t.check("another protocol whose client speaks first and is no HTTP (a Redis command, "
             "inline too, memcached's get, a binary start such as PostgreSQL's) through a listed "
             "host's tunnel: tunnelled blind, at once")
    def _():
        # memcached's and Redis's inline commands: a word and a space, but no
        # request-target after them
        for first in (b"*1\r\n", b"\x00\x00\x00\x08\x04\xd2\x16\x2f\n", b"get foo\r\n",
                      b"SET k v\r\n", b"KEYS *\r\n", b"SET k http:x\r\n"):
            port = line_server(None, b"echo ")
            with blind_connect(port) as c:
                started = time.monotonic()
                c.send(first)
                h.eq(c.read_until(b"\n"), b"echo " + first, "the client's bytes, passed on")
                h.ok(time.monotonic() - started < 0.8, "no wait for server_first_after (1s)")
            h.ok("neither TLS nor HTTP" in blind_line(port).get("note", ""), "the line's note")

    @t.check("first bytes that are no HTTP and a half-close right behind them (in the same read, "
             "or after too few bytes to tell): the bytes reach the host and the half-close is "
             "passed on, as in a blind tunnel")
    def _():
        # 4032 bytes: the client connection's first read, so that the FIN
        # is seen by the read that takes the bytes
        first = b"*1\r\n" + b"x" * 4027 + b"\n"
        h.eq(len(first), 4032, "the first bytes' length")
        for data in (first, b"SSH"):
            port = line_server(None, b"echo ")
            with blind_connect(port) as c:
                # both there before the proxy looks
                os.kill(blind.pid, signal.SIGSTOP)
                try:
                    c.send(data)
                    c.sock.shutdown(socket.SHUT_WR)
                    time.sleep(0.1)
                finally:
                    os.kill(blind.pid, signal.SIGCONT)
                got = c.read_to_close()
            lines = data.split(b"\n")
            want = b"".join(b"echo " + ln + b"\n" for ln in lines[:-1])
            want += b"echo " + lines[-1] if lines[-1] else b""
            h.eq((len(got), got[:40]), (len(want), want[:40]),
                 "what the host echoed, its lines passed on, then its close")

    @t.check("plain HTTP that is malformed but looks like HTTP (a request-target after the "
             "method) in a listed host's tunnel is still answered 400, not tunnelled blind")
    def _():
        for request in (b"GET /echo?t=bad bad\r\n\r\n",
                        b"GET /echo HTTP/1.1\r\nHost: localhost:%d\r\nContent-Length: x\r\n\r\n"
                        % plain.port,
                        b"OPTIONS * HTTP/1.1\r\nHost: other.example\r\n\r\n",
                        b"GET http://other.example/ HTTP/1.1\r\nHost: other.example\r\n\r\n",
                        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"):
            with blind_connect(plain.port) as c:
                c.send(request)
                status = c.read_head().status
            h.ok(status in (400, 421), "status for %r: %d" % (request, status))

    @t.check("a server-first fallback whose connect fails closes the tunnel, and its line says so")
    def _():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with blind_connect(port) as c:
            h.eq(c.read_to_close(), b"", "the tunnel closes")
        h.ok("tunnelled blind; " in blind_line(port).get("note", ""), "the line's note")

    sfa_text = (CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                               "  ca_key: @LOCALCA@/ca-key.pem\n  server_first_after: 2s\n")
                + 'access:\n  allow_hosts: ["localhost", "127.0.0.1"]\n')
    sfa = t.proxy(sfa_text, TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')
    sfa_text = sfa.config_text

    @t.check("a reload during the server-first wait that takes the host out of "
             "access.allow_hosts (or intercept.hosts): no blind tunnel, the client is closed and its "
             "line says why")
    def _():
        accepted = []
        port = line_server(b"220 smtp.test ESMTP\r\n", b"250 ", accepted)
        with blind_connect(port, sfa) as c:
            sfa.reload(sfa_text.replace('allow_hosts: ["localhost", "127.0.0.1"]',
                                        'allow_hosts: ["127.0.0.1"]'))
            h.eq(c.read_to_close(), b"", "the tunnel closes, with no banner")
        h.eq(accepted, [], "connections to the host refused after the reload")
        note = blind_line(port, sfa).get("note", "")
        h.ok("allow_hosts" in note, "the line's note (%r)" % note)
        sfa.wait_log(r"warn intercept: client \S+: no blind tunnel to localhost:%d: .*"
                     r"access.allow_hosts" % port)
        sfa.reload(sfa_text)
        # nor one whose host a reload stopped intercepting
        port = line_server(b"220 smtp.test ESMTP\r\n", b"250 ", accepted)
        with blind_connect(port, sfa) as c:
            sfa.reload(sfa_text.replace('hosts: ["localhost"]', 'hosts: ["127.0.0.1"]'))
            h.eq(c.read_to_close(), b"", "the tunnel closes, with no banner")
        h.eq(accepted, [], "connections to the host no longer intercepted")
        note = blind_line(port, sfa).get("note", "")
        h.ok("no longer intercepted" in note, "the line's note (%r)" % note)
        sfa.reload(sfa_text)

    @t.check("a blind fallback tunnel's line says both why it went blind and why it ended "
             "(tunnel_idle_timeout)")
    def _():
        sfa.reload(sfa_text.replace("drain_timeout: 2s", "drain_timeout: 2s\n  tunnel_idle_timeout: 1s"))
        port = line_server(None, b"echo ")
        with blind_connect(port, sfa) as c:
            c.send(b"*1\r\n")
            h.eq(c.read_until(b"\n"), b"echo *1\r\n", "the client's bytes, passed on")
            h.eq(c.read_to_close(), b"", "the idle tunnel closes")
        note = blind_line(port, sfa).get("note", "")
        h.ok("neither TLS nor HTTP" in note and "tunnel_idle_timeout" in note,
             "the line's note (%r)" % note)
        sfa.reload(sfa_text)

    @t.check("a silent client that closes while its blind fallback's connect is under way: the "
             "connect is given up at once, and the line says the client closed")
    def _():
        # a listener whose accept queue is full: a connect to it hangs
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(0)
        t.defer(ls.close)
        port = ls.getsockname()[1]
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", port))
            t.defer(f.close)
        with blind_connect(port, sfa) as c:
            sfa.wait_log(r"info intercept: client \S+: tunnel to localhost:%d: no byte" % port)
            c.sock.shutdown(socket.SHUT_WR)
            closed = time.monotonic()
            f = blind_line(port, sfa)
            after = time.monotonic() - closed
            h.eq(c.read_to_close(), b"", "the proxy closes too")
        h.ok(after < 2, "the line %.2fs after the close, not at connect_timeout (5s)" % after)
        h.ok("client closed" in f.get("note", ""), "the line's note (%r)" % f.get("note"))

    @t.check("a drain that begins while a client waits silently in a listed host's tunnel closes "
             "it, as an idle connection: it does not go blind after the wait, nor does one "
             "whose first bytes come in the drain")
    def _():
        accepted = []
        port = line_server(b"220 smtp.test ESMTP\r\n", b"250 ", accepted)
        drained = t.proxy(CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                                         "  ca_key: @LOCALCA@/ca-key.pem\n"
                                         "  server_first_after: 2s\n"),
                          TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')
        with blind_connect(port, drained) as c, blind_connect(port, drained) as begun:
            begun.send(b"SS")  # too few bytes to tell: not silent, kept
            time.sleep(0.2)
            drained.terminate()
            started = time.monotonic()
            h.eq(c.read_to_close(), b"", "the tunnel closes, with no banner")
            h.ok(time.monotonic() - started < 1.5, "closed as the drain began")
            # its first bytes, no HTTP, would go blind: not in a drain
            begun.send(b"H-2.0-client\r\n")
            h.eq(begun.read_to_close(), b"", "the other tunnel closes, with no banner")
        h.eq(accepted, [], "connections to the host")

    @t.check("a drain: plain HTTP begun in a tunnel before the drain, whose PUT head and whole "
             "body come after its answer time, is tried (200) as a GET would be, not told its "
             "body is incomplete")
    def _():
        late = t.proxy(CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                                      "  ca_key: @LOCALCA@/ca-key.pem\n"
                                      "  server_first_after: 20s\n")
                       .replace("drain_timeout: 2s", "drain_timeout: 8s"),
                       TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')
        with blind_connect(plain.port, late) as put:
            put.send(b"P")  # too few bytes to tell: the tunnel is kept by the drain
            time.sleep(0.2)
            late.terminate()
            time.sleep(7.35)  # past the answer time: the last tenth of drain_timeout
            put.send(("UT /echo?t=drainput HTTP/1.1\r\nHost: localhost:%d\r\n"
                      "Content-Length: 5\r\n\r\n" % plain.port).encode())
            time.sleep(0.1)
            put.send(b"hello")
            r = put.read_response(timeout=5)
        h.eq(r.status, 200, "the PUT's status (body %r)" % r.body)

    @t.check("a reload that changes only server_first_after applies to clients already "
             "silent, counted from their 200: lowered below their silence, they go blind at "
             "once; raised, they wait on")
    def _():
        def first_after(value):
            return CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                                  "  ca_key: @LOCALCA@/ca-key.pem\n"
                                  "  server_first_after: %s\n" % value)

        waiting = t.proxy(first_after("20s"), TESTCA=certs.ca, LOCALCA=local,
                          HOSTS='"localhost"')
        text = waiting.config_text
        port = line_server(b"220 smtp.test ESMTP\r\n", b"250 ")
        with blind_connect(port, waiting) as c:
            time.sleep(1.5)
            started = time.monotonic()
            waiting.reload(text.replace("server_first_after: 20s", "server_first_after: 1s"))
            h.eq(c.read_until(b"\n", timeout=10 * h.SLOW), b"220 smtp.test ESMTP\r\n",
                 "the server's banner after the reload")
            h.ok(time.monotonic() - started < 1.0 * h.SLOW,
                 "blind %.2f s after a reload to 1s; silent 1.5 s since the 200"
                 % (time.monotonic() - started))
        # 3s, so that the reload to 20s lands well inside it on a slow run
        waiting.reload(text.replace("server_first_after: 20s", "server_first_after: 3s"))
        with blind_connect(port, waiting) as c:
            time.sleep(0.3)
            waiting.reload(text)
            h.ok(c.silent_for(3.5), "tunnelled blind within 3.8 s under server_first_after 20s")
            waiting.reload(text.replace("server_first_after: 20s", "server_first_after: 1s"))
            h.eq(c.read_until(b"\n", timeout=10 * h.SLOW), b"220 smtp.test ESMTP\r\n",
                 "the server's banner once lowered again")

    @t.check("with server_first_after a TLS client and a plain HTTP one are intercepted as before")
    def _():
        r = h.curl("--cacert", local_ca, "https://localhost:%d/echo?t=sfa" % good.port,
                   proxy=blind.url)
        h.eq((r.exit_code, r.status), (0, 200), "TLS in the tunnel (%r)" % r)
        h.eq(h.access_fields(blind.access_one("t=sfa"))["target"],
             "https://localhost:%d/echo?t=sfa" % good.port, "intercepted")
        r = h.curl("-p", "http://localhost:%d/echo?t=sfp" % plain.port, proxy=blind.url)
        h.eq((r.exit_code, r.status), (0, 200), "plain HTTP in the tunnel (%r)" % r)

    @t.check("keep-alive inside the tunnel: two requests, one CONNECT")
    def _():
        code, results, err = h.curl_multi(
            ["https://localhost:%d/echo?t=ka1" % good.port,
             "https://localhost:%d/echo?t=ka2" % good.port],
            proxy=proxy.url, extra=["--cacert", local_ca])
        h.eq(code, 0, "curl exit (%s)" % err)
        h.eq([s for s, _ in results], [200, 200], "statuses")
        h.eq(sum(n for _, n in results), 1, "connections curl made")

    @t.check("an intercepted CONNECT's one line is written when its tunnel ends, with the "
             "tunnel's life and the bytes sent to the client inside it")
    def _():
        # a spelling of its own: the lines of other checks' tunnels differ
        authority = "LocalHost:%d" % good.port

        def connect_lines():
            return [h.access_fields(ln) for ln in proxy.access_lines()
                    if h.access_fields(ln).get("method") == "CONNECT"
                    and h.access_fields(ln).get("target") == authority]

        before = len(connect_lines())
        s, tls, incoming, outgoing = handshake_by_hand(proxy.port(), "LocalHost", good.port,
                                                       local_ca)
        with s:
            s.sendall(outgoing.read())
            time.sleep(0.5)
            h.eq(len(connect_lines()), before, "CONNECT lines while the tunnel is open")
            tls.write(b"GET /echo?t=connect-line HTTP/1.1\r\nHost: %s\r\n"
                      b"Connection: close\r\n\r\n" % authority.encode())
            s.sendall(outgoing.read())
            got = b""
            s.settimeout(10)
            while True:
                data = s.recv(65536)
                if not data:
                    break
                incoming.write(data)
                try:
                    while True:
                        piece = tls.read(65536)
                        if not piece:
                            break
                        got += piece
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    break
        h.ok(got.startswith(b"HTTP/1.1 200"), "the response inside (%r)" % got[:100])
        h.wait_until(lambda: len(connect_lines()) == before + 1, 5 * h.SLOW,
                     "the CONNECT's line once the tunnel closed")
        f = connect_lines()[-1]
        h.eq((f.get("status"), f.get("note"), f.get("bytes")), ("200", "intercepted", str(len(got))),
             "the CONNECT line's status, note and bytes (%r)" % f)
        h.ok(int(f.get("duration_ms", "0")) >= 500, "its duration covers the tunnel (%r)" % f)

    @t.check("TLS 1.3: a request in the same segment as the client's Finished is answered at once")
    def _():
        s, tls, incoming, outgoing = handshake_by_hand(proxy.port(), "localhost", good.port,
                                                       local_ca)
        with s:
            tls.write(b"GET /echo?t=coalesced HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % good.port)
            s.sendall(outgoing.read())
            got = read_by_hand(s, tls, incoming, 5)
        h.ok(got.startswith(b"HTTP/1.1 200"), "response %r" % got[:100])

    @t.check("TLS 1.3: Finished and a request that arrive while the proxy is stopped are "
             "answered once it runs again")
    def _():
        s, tls, incoming, outgoing = handshake_by_hand(proxy.port(), "localhost", good.port,
                                                       local_ca)
        with s:
            os.kill(proxy.pid, signal.SIGSTOP)
            try:
                s.sendall(outgoing.read())
                tls.write(b"GET /echo?t=stopped HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                          % good.port)
                s.sendall(outgoing.read())
                time.sleep(0.1)
            finally:
                os.kill(proxy.pid, signal.SIGCONT)
            got = read_by_hand(s, tls, incoming, 5)
        h.ok(got.startswith(b"HTTP/1.1 200"), "response %r" % got[:100])

    @t.check("the proxy ends a tunnel with close_notify: a strict client reads a body that "
             "ends with the connection, and a refusal, to a clean end")
    def _():
        for request, status, size in (
                (b"GET /close/5000 HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % good.port, 200, 5000),
                (b"GET /echo HTTP/1.1\r\nHost: other.example\r\n\r\n", 400, None)):
            s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
            s.sendall(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n"
                       % good.port).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            ctx = h.strict_eof(ssl.create_default_context(cafile=local_ca))
            # a FIN without close_notify raises SSLEOFError here
            with ctx.wrap_socket(s, server_hostname="localhost",
                                 suppress_ragged_eofs=False) as tls:
                tls.sendall(request)
                got = b""
                while True:
                    data = tls.recv(65536)
                    if not data:
                        break
                    got += data
            h.ok(got.startswith(b"HTTP/1.1 %d" % status), "response %r" % got[:100])
            if size is not None:
                h.eq(len(got) - got.index(b"\r\n\r\n") - 4, size, "body bytes")

    @t.check("a client that ends the tunnel with close_notify between requests gets the "
             "proxy's close_notify back (unwrap succeeds)")
    def _():
        with h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca, strict=True) as tls:
            tls.sendall(b"GET /echo?t=unwrap HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % good.port)
            h.eq(read_response(tls).status, 200, "status")
            tls.settimeout(5)
            # a FIN without the proxy's close_notify raises SSLEOFError here
            tls.unwrap().close()

    @t.check("a Host naming another host inside the tunnel: 400, nothing sent upstream")
    def _():
        before = len(good.requests)
        with h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca) as tls:
            tls.sendall(b"GET /echo?t=fronted HTTP/1.1\r\nHost: other.example\r\n\r\n")
            r = read_response(tls)
        h.eq(r.status, 400, "status")
        h.eq(len(good.requests), before, "requests at the origin")

    @t.check("a refusal inside the tunnel logs which tunnel: https://host:port before an "
             "origin-form target (as far as it was read), alone for a request whose method or "
             "target could not be read and for *, named in the reason otherwise")
    def _():
        prefix = "https://localhost:%d" % good.port
        refusals = [
            (b"GET /echo?t=refused-fronted HTTP/1.1\r\nHost: other.example\r\n\r\n",
             prefix + "/echo?t=refused-fronted", 400),
            (b"GET /echo?t=refused-length HTTP/1.1\r\nHost: localhost:%d\r\n"
             b"Content-Length: x\r\n\r\n" % good.port, prefix + "/echo?t=refused-length", 400),
            (b"GET /echo?t=refused bad\r\n\r\n", prefix + "/echo?t=refused", 400),
            (b"G(T /echo?t=refused-method HTTP/1.1\r\n\r\n", prefix, 400),
            (b"OPTIONS * HTTP/1.1\r\nHost: other.example\r\n\r\n", prefix, 400),
            (b"GET http://other.example/?t=refused-absolute HTTP/1.1\r\nHost: other.example\r\n\r\n",
             "http://other.example/?t=refused-absolute", 421),
        ]
        for request, target, status in refusals:
            seen = len(proxy.access_lines())
            with h.intercepted_tls(proxy.port(), "localhost", good.port, local_ca) as tls:
                tls.sendall(request)
                r = read_response(tls)
            h.eq(r.status, status, "status for %r" % request)
            # the line is matched by its target: a line of the request
            # before may still arrive after seen was counted
            def refusal_line():
                found = [h.access_fields(l) for l in proxy.access_lines()[seen:]]
                return [f for f in found if f["status"] == str(status) and f["target"] == target]
            fields = h.wait_until(refusal_line, 5, "an access line with status %d and target "
                                  "%r for %r" % (status, target, request))[0]
            if not target.startswith(prefix):
                h.ok("localhost:%d" % good.port in fields["note"],
                     "the note should name the tunnel: %r" % fields["note"])

    @t.check("the Host inside the tunnel is compared as a host and port: other spellings of the "
             "CONNECT host pass, another port or no port (443) is a 400")
    def _():
        cases = [("localhost", "LOCALHOST:%d" % good.port, 200),
                 ("localhost", "localhost.:%d" % good.port, 200),
                 ("127.0.0.1", "127.0.0.1:%d" % good.port, 200),
                 ("localhost", "localhost:9", 400),
                 ("localhost", "localhost", 400),
                 ("127.0.0.1", "localhost:%d" % good.port, 400)]
        for i, (tunnel, host, status) in enumerate(cases):
            with h.intercepted_tls(proxy.port(), tunnel, good.port, local_ca) as tls:
                tls.sendall(("GET /echo?t=hostcmp%d HTTP/1.1\r\nHost: %s\r\n\r\n"
                             % (i, host)).encode())
                r = read_response(tls)
            h.eq(r.status, status, "status for Host %s in a tunnel to %s:%d" % (host, tunnel, good.port))
            seen = [q for q in good.requests_for("/echo") if q.query.get("t") == "hostcmp%d" % i]
            h.eq(len(seen), 1 if status == 200 else 0, "requests at the origin for Host %s" % host)

    p2 = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')

    @t.check("a host not listed: tunnelled blind, the client sees the origin's certificate")
    def _():
        with h.intercepted_tls(p2.port(), "127.0.0.1", good.port, certs.ca,
                         server_hostname="localhost") as tls:
            text = cert_text(tls.getpeercert(binary_form=True))
            tls.sendall(("GET /echo?t=blind HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                         % good.port).encode())
            r = read_response(tls)
        h.ok("retryproxy test CA" in text, "issuer of the blind tunnel's certificate")
        h.eq(r.status, 200, "status through the blind tunnel")
        h.eq(r.header("Retry-Attempts"), None, "no Retry-Attempts: the proxy saw nothing")

    @t.check("a client that trusts only its own store fails its handshake: logged with the host, "
             "counted, and the proxy keeps serving")
    def _():
        before = metric("retryproxy_intercept_failures_total")
        r = h.curl("https://localhost:%d/echo?t=refused" % good.port, proxy=proxy.url)
        h.ok(r.exit_code != 0, "curl must fail without the local CA (%r)" % r)
        h.wait_until(lambda: metric("retryproxy_intercept_failures_total") == before + 1, 5,
                     "intercept failure counted")
        proxy.wait_log(r"intercept: client .* https://localhost:%d" % good.port)
        h.eq(good.requests_for("/echo") and [q for q in good.requests_for("/echo")
                                             if q.query.get("t") == "refused"], [], "origin requests")
        r = get("https://localhost:%d/echo?t=after" % good.port)
        h.eq(r.status, 200, "a request after the failure")

    @t.check("a client that closes or resets before it saw the certificate is neither counted "
             "nor warned about; one that hangs up after is; one that speaks plain HTTP is no "
             "failed handshake")
    def _():
        hello_ctx = ssl.create_default_context(cafile=local_ca)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        try:
            hello_ctx.wrap_bio(incoming, outgoing, server_hostname="localhost").do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()

        def tunnel():
            s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
            s.sendall(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                       % (good.port, good.port)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            return s

        def reset(s):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

        before = metric("retryproxy_intercept_failures_total")
        warned = len([l for l in proxy.stderr_lines() if "intercept: client" in l])
        s = tunnel()
        s.close()
        s = tunnel()
        s.sendall(hello[:30])
        time.sleep(0.1)
        s.close()
        s = tunnel()
        reset(s)
        h.wait_until(lambda: metric('retryproxy_connections{side="client"}') == 0, 5,
                     "the proxy has seen the three clients go")
        h.eq(metric("retryproxy_intercept_failures_total"), before, "failures counted")
        h.eq([l for l in proxy.stderr_lines() if "intercept: client" in l][warned:], [],
             "warnings")
        # the whole ClientHello: the proxy's certificate went out, and a
        # client that then hangs up without an alert may have refused it
        s = tunnel()
        s.sendall(hello)
        time.sleep(0.1)
        reset(s)
        h.wait_until(lambda: metric("retryproxy_intercept_failures_total") == before + 1, 5,
                     "a client hanging up after the certificate counted")
        proxy.wait_log(r"intercept: client .* hung up after receiving the certificate")
        before += 1
        # plain HTTP is no failed handshake: its requests go to
        # http://host:port (here a TLS port, which answers no HTTP: 502)
        s = tunnel()
        s.sendall(("GET /echo?t=plain-to-tls HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                   % good.port).encode())
        r = h.RawConn.over(s).read_response()
        h.eq(r.status, 502, "plain HTTP to a port that speaks TLS")
        s.close()
        h.eq(metric("retryproxy_intercept_failures_total"), before, "failures counted")

    @t.check("a client that hangs up in a resumed handshake, where no certificate went out, is "
             "not said to have refused one, nor counted")
    def _():
        ctx = ssl.create_default_context(cafile=local_ca)

        def tunnel():
            s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
            s.sendall(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                       % (good.port, good.port)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            return s

        with ctx.wrap_socket(tunnel(), server_hostname="localhost") as tls:
            # a request and its answer: the TLS 1.3 tickets come after
            tls.sendall(b"GET /echo?t=resumed-hangup HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                        % good.port)
            read_response(tls)
            session = tls.session
        before = metric("retryproxy_intercept_failures_total")
        warned = len([l for l in proxy.stderr_lines() if "intercept: client" in l])
        s = tunnel()
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost", session=session)
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        s.sendall(outgoing.read())
        # the proxy's whole flight, then the handshake is done on this side
        # but its Finished never sent: the client hangs up instead
        while True:
            incoming.write(s.recv(16384))
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
        h.ok(client.session_reused, "the second tunnel resumed the session")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        h.wait_until(lambda: metric('retryproxy_connections{side="client"}') == 0, 5,
                     "the proxy has seen the client go")
        h.eq(metric("retryproxy_intercept_failures_total"), before, "failures counted")
        h.eq([l for l in proxy.stderr_lines() if "intercept: client" in l][warned:], [],
             "warnings")

    @t.check("a tunnel that ends in its TLS handshake says why on the CONNECT's line: a refused "
             "certificate, a hang-up after it, a close before it")
    def _():
        def tunnel(host):
            s = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                       % (host, good.port, host, good.port)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            return s

        def connect_line(host):
            target = "%s:%d" % (host, good.port)
            found = []

            def seen():
                found[:] = [h.access_fields(ln) for ln in proxy.access_lines()
                            if h.access_fields(ln).get("method") == "CONNECT"
                            and h.access_fields(ln).get("target") == target]
                return found
            h.wait_until(seen, 5 * h.SLOW, "the CONNECT line of %s" % target)
            return found[-1]

        # a client that trusts another CA: its alert is the reason. It
        # waits for the proxy's close before its own: a close with unread
        # bytes would be a reset, which may overtake the alert
        distrusting = ssl.create_default_context(cafile=certs.ca)
        raw = tunnel("localHOST")
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = distrusting.wrap_bio(incoming, outgoing, server_hostname="localhost")
        with raw:
            while True:
                try:
                    client.do_handshake()
                    raise AssertionError("a client trusting another CA finished its handshake")
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    incoming.write(raw.recv(65536))
                except ssl.SSLError:
                    raw.sendall(outgoing.read())  # the alert
                    break
            h.read_to_end(raw, 5)
        # the whole ClientHello, then a hang-up without an alert
        hello_ctx = ssl.create_default_context(cafile=local_ca)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        try:
            hello_ctx.wrap_bio(incoming, outgoing, server_hostname="localhost").do_handshake()
        except ssl.SSLWantReadError:
            pass
        s = tunnel("LOCALhost")
        s.sendall(outgoing.read())
        s.recv(16384)
        s.close()
        # part of a ClientHello, then a close: nothing was judged
        s = tunnel("lOcAlHoSt")
        s.sendall(b"\x16\x03\x01\x02\x00\x01")
        time.sleep(0.1)
        s.close()
        cases = [("localHOST", "intercepted; TLS handshake failed: ", "unknown ca"),
                 ("LOCALhost", "intercepted; client hung up after receiving the certificate, "
                  "without an alert", ""),
                 ("lOcAlHoSt", "intercepted; client closed the connection during the TLS "
                  "handshake", "")]
        for host, start, words in cases:
            line = connect_line(host)
            note = urllib.parse.unquote(line.get("note", ""))
            h.ok(note.startswith(start) and words in note,
                 "%s: the note starts %r and names %r: %r" % (host, start, words, line))
            h.eq(line.get("status"), "200", "%s: the CONNECT's status" % host)

    @t.check("without server_first_after, a tunnel that ends before its bytes tell what the "
             "client speaks says whether any came: none, or too few, within client_timeout; "
             "lost after one")
    def _():
        quiet = t.proxy(CONFIG.replace("  ca_key: @LOCALCA@/ca-key.pem\n",
                                       "  ca_key: @LOCALCA@/ca-key.pem\n  server_first_after: 0s\n")
                        .replace("  drain_timeout: 2s\n", "  drain_timeout: 2s\n  client_timeout: 1s\n"),
                        TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')

        def tunnel(host, first):
            s = socket.create_connection(("127.0.0.1", quiet.port()), timeout=10)
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                       % (host, good.port, host, good.port)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            s.sendall(first)
            return s

        cases = [("LOCALHOST", b"", None,
                  "intercepted; no byte from the client within client_timeout"),
                 ("localHOST", b"G", None,
                  "intercepted; too few bytes from the client within client_timeout to tell "
                  "what it speaks"),
                 # a TLS record's first byte begins the handshake
                 ("LOCALhost", b"\x16", None,
                  "intercepted; TLS handshake not done within client_timeout"),
                 ("localhoST", b"G", "reset",
                  "intercepted; client connection lost before its bytes told what it speaks")]
        held = []
        for host, first, ending, _note in cases:
            s = tunnel(host, first)
            if ending == "reset":
                time.sleep(0.1)  # the byte is read before the reset comes
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            else:
                held.append(s)
        try:
            for host, _first, _ending, note in cases:
                target = "%s:%d" % (host, good.port)
                found = []

                def seen():
                    found[:] = [h.access_fields(ln) for ln in quiet.access_lines()
                                if h.access_fields(ln).get("method") == "CONNECT"
                                and h.access_fields(ln).get("target") == target]
                    return found
                h.wait_until(seen, 5 * h.SLOW, "the CONNECT line of %s" % target)
                h.eq(urllib.parse.unquote(found[-1].get("note", "")), note, "%s: note" % host)
        finally:
            for s in held:
                s.close()
        t.stop_proxy(quiet)

    @t.check("an upstream certificate that fails verification is a 502 inside the tunnel")
    def _():
        r = h.curl("--cacert", local_ca, "https://localhost:%d/echo?t=untrusted" % unknown.port,
                   proxy=p2.url)
        h.eq((r.exit_code, r.status), (0, 502), "curl exit, status (%r)" % r)
        h.ok(re.search(r"certificate", r.body.decode(), re.I), "502 body names the cause: %r" % r.body)
        h.eq(unknown.requests, [], "requests at the untrusted origin")

    @t.check("reload: a new host list and a new CA take effect for new tunnels")
    def _():
        other = h.make_local_ca(os.path.join(t.tmp, "other-local-ca"))
        with h.intercepted_tls(p2.port(), "127.0.0.1", good.port, certs.ca,
                         server_hostname="localhost") as tls:
            before = cert_text(tls.getpeercert(binary_form=True))
        h.ok("retryproxy test CA" in before, "127.0.0.1 not listed: the origin's certificate")
        text = p2.config_text.replace('hosts: ["localhost"]', 'hosts: ["localhost", "127.0.0.1"]')
        p2.reload(text.replace(local + "/", other + "/"))
        with h.intercepted_tls(p2.port(), "127.0.0.1", good.port, os.path.join(other, "ca.pem")) as tls:
            after = cert_text(tls.getpeercert(binary_form=True))
        h.ok("IP Address:127.0.0.1" in after, "127.0.0.1 now intercepted:\n%s" % after)
        with h.intercepted_tls(p2.port(), "localhost", good.port, os.path.join(other, "ca.pem")) as tls:
            h.ok(tls.getpeercert() is not None, "localhost's leaf comes from the new CA")


    p3 = t.proxy(CONFIG + 'access:\n  allow_hosts: ["localhost", "127.0.0.1"]\n', TESTCA=certs.ca,
                 LOCALCA=local, HOSTS='"localhost", "127.0.0.1"')
    p3_text = p3.config_text

    def tunnel_get(tls, tag, host):
        tls.sendall(("GET /echo?t=%s HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                     % (tag, host, good.port)).encode())
        conn = h.RawConn.over(tls)
        return conn, conn.read_response()

    @t.check("a reload that takes the host out of access.allow_hosts: the next request in a "
             "tunnel opened before gets 403 and the tunnel closes; another host's tunnel goes on")
    def _():
        with h.intercepted_tls(p3.port(), "localhost", good.port, local_ca) as gone, \
                h.intercepted_tls(p3.port(), "127.0.0.1", good.port, local_ca) as kept:
            h.eq(tunnel_get(gone, "rl-before", "localhost")[1].status, 200, "before the reload")
            h.eq(tunnel_get(kept, "rl-kept-before", "127.0.0.1")[1].status, 200,
                 "the other tunnel before the reload")
            p3.reload(p3_text.replace('allow_hosts: ["localhost", "127.0.0.1"]',
                                      'allow_hosts: ["127.0.0.1"]'))
            conn, r = tunnel_get(gone, "rl-after", "localhost")
            h.check_error_response(r, 403, ["allow_hosts"])
            h.ok(conn.closed_within(5), "the tunnel should close after the 403")
            h.eq(tunnel_get(kept, "rl-kept-after", "127.0.0.1")[1].status, 200,
                 "the other tunnel after the reload")
        h.eq([q for q in good.requests_for("/echo") if q.query.get("t") == "rl-after"], [],
             "requests at the origin after the reload")
        line = p3.access_one("rl-after")
        h.eq(h.access_fields(line)["status"], "403", "access-log status")

    @t.check("a reload that stops intercepting the host (out of intercept.hosts, or intercept: "
             "gone): the next request in a tunnel opened before gets 403")
    def _():
        p3.reload(p3_text)
        with h.intercepted_tls(p3.port(), "127.0.0.1", good.port, local_ca) as unlisted, \
                h.intercepted_tls(p3.port(), "localhost", good.port, local_ca) as unconfigured:
            h.eq(tunnel_get(unlisted, "ri-before", "127.0.0.1")[1].status, 200, "before")
            h.eq(tunnel_get(unconfigured, "rn-before", "localhost")[1].status, 200, "before")
            p3.reload(p3_text.replace('\n  hosts: ["localhost", "127.0.0.1"]',
                                      '\n  hosts: ["localhost"]'))
            conn, r = tunnel_get(unlisted, "ri-after", "127.0.0.1")
            h.check_error_response(r, 403, ["intercepted"])
            h.ok(conn.closed_within(5), "the tunnel should close after the 403")
            h.eq(tunnel_get(unconfigured, "rn-between", "localhost")[1].status, 200,
                 "a host still listed")
            p3.reload(p3_text[:p3_text.index("intercept:")] +
                      p3_text[p3_text.index("limits:"):])
            conn, r = tunnel_get(unconfigured, "rn-after", "localhost")
            h.check_error_response(r, 403, ["intercepted"])
            h.ok(conn.closed_within(5), "the tunnel should close after the 403")
        h.eq([q for q in good.requests_for("/echo") if q.query.get("t") in ("ri-after", "rn-after")],
             [], "requests at the origin after the reloads")

    @t.check("a reload that makes the tunnel's listener a sidecar (same address, now with "
             "upstream:, which intercepts nothing): the next request in a tunnel opened before "
             "gets 403")
    def _():
        p3.reload(p3_text)
        address = "  - address: 127.0.0.1:%d\n" % p3.port()
        with h.intercepted_tls(p3.port(), "localhost", good.port, local_ca) as tls:
            h.eq(tunnel_get(tls, "rs-before", "localhost")[1].status, 200, "before")
            p3.reload(p3_text.replace(address, address + "    upstream: http://127.0.0.1:%d\n"
                                      % good.port))
            conn, r = tunnel_get(tls, "rs-after", "localhost")
            h.check_error_response(r, 403, ["intercepted"])
            h.ok(conn.closed_within(5), "the tunnel should close after the 403")
        h.eq([q for q in good.requests_for("/echo") if q.query.get("t") == "rs-after"], [],
             "requests at the origin after the reload")
        p3.reload(p3_text)

    p4 = t.proxy(CONFIG.replace("drain_timeout: 2s", "drain_timeout: 1s"), TESTCA=certs.ca,
                 LOCALCA=local, HOSTS='"localhost", "127.0.0.1"')

    @t.check("a shutdown that cuts a close-delimited response inside the tunnel: the client "
             "sees no close_notify (a truncation, not a whole body)")
    def _():
        tls = h.intercepted_tls(p4.port(), "localhost", good.port, local_ca, strict=True)
        t.defer(tls.close)
        tls.sendall(b"GET /close/1000?stall=1 HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                    % good.port)
        got = b""
        while b"\r\n\r\n" not in got or len(got) - got.index(b"\r\n\r\n") - 4 < 1000:
            data = tls.recv(65536)
            h.ok(data, "the proxy closed before the first 1000 bytes: %r" % got[:100])
            got += data
        p4.terminate()
        tls.settimeout(10 * h.SLOW)
        try:
            while tls.recv(65536):
                pass
            ending = "close_notify"
        except ssl.SSLEOFError:
            ending = "EOF without close_notify"
        except ConnectionResetError:
            ending = "reset"
        h.ok(ending != "close_notify",
             "the cut body ended with %s after %d bytes: it looks complete" % (ending, len(got)))
        t.stop_proxy(p4)

    p5 = t.proxy(CONFIG.replace("  drain_timeout: 2s\n", "  drain_timeout: 2s\n  client_timeout: 1s\n"),
                 TESTCA=certs.ca, LOCALCA=local, HOSTS='"localhost"')
    big = 16 << 20

    @t.check("client_timeout 1s: a TLS client reading a large body slowly is not cut")
    def _():
        with h.intercepted_tls(p5.port(), "localhost", good.port, local_ca) as tls:
            conn = h.RawConn.over(tls)
            conn.send(h.request("GET", "/bytes/%d?tls-slow" % big, "localhost:%d" % good.port))
            h.eq(conn.read_head().status, 200, "status")
            body = h.read_slowly(conn, big)
        h.eq(body, o.pattern_bytes(big), "body")

    @t.check("client_timeout 1s: a TLS client that stops reading is cut after it")
    def _():
        with h.intercepted_tls(p5.port(), "localhost", good.port, local_ca) as tls:
            conn = h.RawConn.over(tls)
            conn.send(h.request("GET", "/bytes/%d?tls-stopped" % big, "localhost:%d" % good.port))
            h.eq(conn.read_head().status, 200, "status")
            h.check_cut_for_not_reading(p5, "tls-stopped", 1000)


h.run(scenario, __doc__)
