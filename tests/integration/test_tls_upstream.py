#!/usr/bin/env python3
"""Scenario: TLS origination to https:// upstreams in sidecar mode.

Client: curl sends plain-HTTP origin-form requests to sidecar listeners whose
upstreams are https origins; some requests carry a Host that selects a route
with its own tls: section.
Origin: TLS origins with certificates made by openssl at test time: "good"
(localhost and 127.0.0.1, signed by the test CA), "wrong" (only
wrong.example, same CA), "unknown" (right names, signed by a CA nobody
trusts) and, when this Python can serve it, "old" (TLS 1.1 at most). Some
requests ask the origin to close after answering, to force new handshakes.
Must hold: with tls.ca_file the good origin works, SNI carries the host
name (and no SNI is sent for an IP literal), TLS is 1.2 or newer; pooled TLS
connections are reused; new connections to the same upstream resume the TLS
session, and concurrent ones never offer the same TLS 1.3 ticket (the
origin reads the tickets each ClientHello offers; RFC 8446 appendix C.4)
while some of them still resume; a wrong-host certificate and an unknown CA each give a 502 at once
(no retry although max_attempts allows it) whose one-line body names the
reason, and nothing reaches the origin; a route with verify: false works
and is warned about by name at start, as is each route (default included)
that inherits a global tls.verify: false; a route's own ca_file is used; a
body that ends with the connection is whole after the origin's
close_notify, and broken off toward the client (curl fails, the log names
the missing close_notify) when the connection ends without one (RFC 9112
section 9.8), also when such a body was a retryable answer kept and then
given to the client because every later try failed, and a response
pipelined before such a body reaches a client slow to read it whole; an
answer sent before the request body was read, the connection then reset,
reaches the client (413, not 502); TLS below 1.2 is refused; with no tls: section SSL_CERT_FILE supplies the
trust (and without it the same upstream fails verification). The proxy
ends its upstream TLS connections with a close_notify (the origin reads a
clean TLS end, not an EOF in violation of the protocol): a pooled one closed
by pool_idle_timeout (300ms here), and one still pooled when the proxy exits
on SIGTERM. A reload (SIGHUP) that finds tls.ca_file's bytes (or the default
store) unchanged keeps the pooled connection and the saved session; one
with new bytes makes a new connection with a full handshake. A reload reads
tls.ca_file again: with the test CA
taken out of the file, the good origin gets 502 (neither the pooled
connection nor the saved session of before is used); put back, 200; a
file that does not load is refused and the running trust stays: 200; a
connection in use while a reload takes the CA out finishes its request
(200) and is not pooled: the next request gets 502. An upstream name
whose first address refuses every connect: each new connection, made with
the second address, resumes with the one ticket the origin sends per
handshake (the refused attempt took none).
"""

import json
import os
import shutil
import signal
import socket
import ssl
import threading
import time
import warnings

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@GOOD@
  - address: 127.0.0.1:@PORT1@
    upstream: https://127.0.0.1:@GOOD@
  - address: 127.0.0.1:@PORT2@
    upstream: https://localhost:@WRONG@
  - address: 127.0.0.1:@PORT3@
    upstream: https://127.0.0.1:@UNKNOWN@
  - address: 127.0.0.1:@PORT4@
    upstream: https://localhost:@OLD@
  - address: 127.0.0.1:@PORT5@
    upstream: https://localhost:@TLS12@
tls:
  ca_file: @CA@
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 10ms
routes:
  - name: insecure-route
    match: { host: insecure.example }
    upstream: https://127.0.0.1:@UNKNOWN@
    tls: { verify: false }
  - name: route-ca
    match: { host: routeca.example }
    upstream: https://localhost:@UNKNOWN@
    tls:
      ca_file: @OTHERCA@
"""

# No tls: section: trust comes from OpenSSL's default paths.
CONFIG_DEFAULT_TRUST = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@GOOD@
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

# Certificates not checked for any route without its own tls: section.
CONFIG_GLOBAL_NO_VERIFY = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://127.0.0.1:@UNKNOWN@
tls: { verify: false }
limits:
  drain_timeout: 2s
routes:
  - name: inherits
    match: { host: inherits.example }
  - name: own-tls
    match: { host: own.example }
    tls: { ca_file: @CA@, verify: true }
"""

# A name with two addresses: 127.0.0.2 first, where nothing listens (each
# connect is refused there), then 127.0.0.1, the origin.
CONFIG_TWO_ADDRESSES = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://two.test:@ONETICKET@
tls: { verify: false }
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

# Upstream connections left idle close soon, so the test sees how they end.
CONFIG_SHORT_IDLE = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@GOOD@
tls:
  ca_file: @CA@
limits:
  drain_timeout: 2s
  pool_idle_timeout: 300ms
defaults:
  retry:
    max_attempts: 1
"""

CERT_WORDS = ("certificate", "verif", "hostname", "host name", "issuer")


def tls11_possible(certs):
    """Whether this Python/OpenSSL can run a TLS 1.1-only server a client
    can reach; without that the minimum-version check proves nothing."""
    if not ssl.HAS_TLSv1_1:
        return False
    warnings.simplefilter("ignore", DeprecationWarning)
    old = o.Origin(tls=(certs.server, certs.server_key), tls_max_version=ssl.TLSVersion.TLSv1_1).start()
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.load_verify_locations(certs.ca)
        with socket.create_connection(("127.0.0.1", old.port), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as tls:
                return tls.version() == "TLSv1.1"
    except (OSError, ssl.SSLError):
        return False
    finally:
        old.stop()


def scenario(t):
    certs = t.certs()
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    wrong = t.origin(tls=(certs.wrong, certs.wrong_key), name="wrong")
    unknown = t.origin(tls=(certs.unknown, certs.unknown_key), name="unknown")
    can_tls11 = tls11_possible(certs)
    old = t.origin(tls=(certs.server, certs.server_key), name="old",
                   tls_max_version=ssl.TLSVersion.TLSv1_1 if can_tls11 else None)
    tls12 = t.origin(tls=(certs.server, certs.server_key), name="tls12",
                     tls_max_version=ssl.TLSVersion.TLSv1_2)
    proxy = t.proxy(CONFIG, GOOD=good.port, WRONG=wrong.port, UNKNOWN=unknown.port, OLD=old.port,
                    TLS12=tls12.port, CA=certs.ca, OTHERCA=certs.other_ca)

    def get(listener, path, host=None):
        args = [proxy.listener_url(listener, path)]
        if host:
            args = ["-H", "Host: " + host] + args
        return h.curl(*args)

    @t.check("https://localhost upstream with ca_file: 200, body exact, SNI localhost, TLS >= 1.2")
    def _():
        r = get(0, "/bytes/50000?t=sni")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(r.body, o.pattern_bytes(50000), "body")
        seen = [q for q in good.requests if q.query.get("t") == "sni"][0]
        conn = [c for c in good.connections if c.id == seen.conn_id][0]
        h.eq(conn.sni, "localhost", "SNI the origin received")
        h.ok(conn.tls_version in ("TLSv1.2", "TLSv1.3"), "TLS version %r" % conn.tls_version)
        h.eq(seen.header_all("Host"), ["localhost:%d" % good.port], "Host at the origin")

    @t.check("https://127.0.0.1 upstream: IP SAN verified, no SNI for an IP literal (RFC 6066 3)")
    def _():
        r = get(1, "/echo?t=ip")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        seen = [q for q in good.requests if q.query.get("t") == "ip"][0]
        conn = [c for c in good.connections if c.id == seen.conn_id][0]
        h.eq(conn.sni, None, "SNI for an IP-literal upstream")

    @t.check("pooled TLS connection reused: 5 separate clients, one upstream connection")
    def _():
        r = get(0, "/echo?t=pool0")
        h.eq(r.status, 200, "status")
        before = len(good.connections)
        ids = set()
        for i in range(1, 6):
            r = get(0, "/echo?t=pool%d" % i)
            h.eq(r.status, 200, "status (%r)" % r)
            ids.add(json.loads(r.body)["conn_id"])
        h.eq(len(ids), 1, "upstream connections used for 5 requests")
        h.eq(len(good.connections), before, "new TLS connections accepted by the origin")

    @t.check("new connections to a pooled upstream resume the TLS session")
    def _():
        conn_ids = []
        for i in range(3):
            r = get(0, "/echo?t=resume%d&close=1" % i)
            h.eq(r.status, 200, "status (%r)" % r)
            conn_ids.append(json.loads(r.body)["conn_id"])
            cid = conn_ids[-1]
            good.wait_for(lambda org: any(c.id == cid and c.closed.is_set() for c in org.connections),
                          5, "the origin to close connection %d" % cid)
            time.sleep(0.2)
        h.eq(len(set(conn_ids)), 3, "distinct upstream connections (the origin closed each)")
        conns = {c.id: c for c in good.connections}
        resumed = [conns[c].session_reused for c in conn_ids[1:]]
        h.eq(resumed, [True, True], "session_reused on the 2nd and 3rd connection")

    @t.check("TLS 1.3: concurrent new connections each offer a ticket of their own, or none "
             "(RFC 8446 C.4)")
    def _():
        before = len(good.connections)
        results = {}

        def fetch(i):
            results[i] = get(0, "/delay/0.3?t=ticket%d&close=1" % i)

        threads = [threading.Thread(target=fetch, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        h.eq(sorted(r.status for r in results.values()), [200] * 4, "statuses (%r)" % results)
        new = good.connections[before:]
        h.ok(len(new) >= 3, "new upstream connections: %d" % len(new))
        h.ok(all(c.tls_version == "TLSv1.3" for c in new), "TLS 1.3 (%r)" %
             [c.tls_version for c in new])
        offered = [i for c in good.connections for i in (c.psk_identities or [])]
        h.ok(any(c.session_reused for c in new), "a new connection resumed (%r)" %
             [(c.psk_identities is not None and len(c.psk_identities), c.session_reused)
              for c in new])
        h.eq(len(offered), len(set(offered)),
             "tickets offered, each once (%d offers on %d connections since the start)"
             % (len(offered), len(good.connections)))

    @t.check("TLS 1.2: one saved session is resumed by every new connection, concurrent ones too")
    def _():
        r = get(5, "/echo?t=tls12-first&close=1")
        h.eq(r.status, 200, "status (%r)" % r)
        cid = json.loads(r.body)["conn_id"]
        tls12.wait_for(lambda org: any(c.id == cid and c.closed.is_set() for c in org.connections),
                       5, "the origin to close connection %d" % cid)
        time.sleep(0.2)  # and the proxy to see it: no stale pooled connection
        results = {}

        def fetch(i):
            results[i] = get(5, "/delay/0.3?t=tls12-%d&close=1" % i)

        threads = [threading.Thread(target=fetch, args=(i,)) for i in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        h.eq(sorted(r.status for r in results.values()), [200] * 3, "statuses (%r)" % results)
        conns = tls12.connections
        h.eq([c.tls_version for c in conns], ["TLSv1.2"] * 4, "TLS versions")
        h.eq([c.session_reused for c in conns], [False, True, True, True], "resumed")

    @t.check("a body that ends with the connection: whole after a close_notify, broken without")
    def _():
        r = get(0, "/close/5000?t=clean-end")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(r.body, o.pattern_bytes(5000), "body")
        r = get(0, "/close/5000?t=cut-end&unclean=1")
        h.ok(r.exit_code != 0, "curl should see a broken response: %r" % r)
        h.ok(len(r.body) <= 5000, "body of %d bytes" % len(r.body))
        note = h.access_fields(proxy.access_one("cut-end")).get("note", "")
        h.ok("close_notify" in note.replace("%20", " "), "the access log says why: %r" % note)

    @t.check("a retryable answer whose body ended without a close_notify, kept, then given to "
             "the client when every later try failed: broken off too, never passed as whole")
    def _():
        good.script("/unclean-kept", ["/close/3000?status=503&unclean=1", "/reset/request"])
        r = get(0, "/unclean-kept?t=unclean-kept")
        h.ok(r.exit_code != 0, "curl should see a broken response: %r" % r)
        f = h.access_fields(proxy.access_one("unclean-kept"))
        h.eq(f.get("attempts"), "3", "attempts")
        h.ok("close_notify" in f.get("note", "").replace("%20", " "),
             "the access log says why: %r" % f)

    @t.check("a pipelined response before one broken off without a close_notify reaches a "
             "client slow to read it whole; then the connection is reset")
    def _():
        n = 200000
        c = h.RawConn(proxy.port(0), rcvbuf=16 << 10)
        c.send(b"GET /bytes/%d?t=before-cut HTTP/1.1\r\nHost: a\r\n\r\n"
               b"GET /close/100?t=cut-after&unclean=1 HTTP/1.1\r\nHost: a\r\n\r\n" % n)
        proxy.access_one("cut-after")
        time.sleep(0.2)  # a reset now would lose what the client has not read
        r = c.read_response()
        h.eq(len(r.body), n, "first body's length")
        h.ok(r.body == o.pattern_bytes(n), "first body intact")
        h.ok(c.closed_within(5), "the connection ends after the broken response")
        c.close()

    @t.check("an 8 MiB POST answered 413 before its body was read, the connection then reset: "
             "the client gets the 413, as over plain HTTP")
    def _():
        f, _ = h.random_body_file(t.tmp, 8 << 20, "early413")
        r = h.curl("-X", "POST", "--data-binary", "@" + f, "-H", "Expect:",
                   "-H", "Content-Type: application/octet-stream",
                   proxy.listener_url(0, "/early/413?t=tls-early413"), timeout=30)
        h.eq((r.exit_code, r.status), (0, 413), "curl exit and status (%r)" % r)
        fl = h.access_fields(proxy.access_one("tls-early413"))
        h.eq((fl["status"], fl.get("tries")), ("413", "413"), "access status, tries")

    @t.check("wrong-host certificate: 502 at once naming the reason, not retried, nothing sent")
    def _():
        r = get(2, "/echo?t=wrong")
        h.check_error_response(r, 502, CERT_WORDS)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        time.sleep(0.5)
        h.eq(len(wrong.requests), 0, "requests that reached the wrong-host origin")
        h.eq(len(wrong.connections), 1, "connections to the wrong-host origin (a retry would add one)")

    @t.check("certificate from an unknown CA: 502 naming the reason, nothing sent")
    def _():
        before = len(unknown.connections)
        r = get(3, "/echo?t=unknownca")
        h.check_error_response(r, 502, CERT_WORDS)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        time.sleep(0.5)
        h.eq([q for q in unknown.requests if q.query.get("t") == "unknownca"], [], "requests at the origin")
        h.eq(len(unknown.connections) - before, 1, "connection attempts (a retry would add one)")

    @t.check("route with tls: {verify: false} reaches the unknown-CA origin")
    def _():
        r = get(0, "/echo?t=insecure", host="insecure.example")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(json.loads(r.body)["target"], "/echo?t=insecure", "target at the unknown-CA origin")

    @t.check("verify: false is warned about at start, naming the route")
    def _():
        lines = [ln for ln in proxy.stderr_lines() if "insecure-route" in ln]
        h.ok(any(("warn" in ln.lower() or "verif" in ln.lower()) for ln in lines),
             "expected a warning line naming insecure-route; stderr:\n%s" % proxy.stderr_tail())

    @t.check("route with its own tls.ca_file trusts that CA")
    def _():
        r = get(0, "/echo?t=routeca", host="routeca.example")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(json.loads(r.body)["target"], "/echo?t=routeca", "target at the origin")

    if can_tls11:
        @t.check("an upstream offering at most TLS 1.1 is refused (502), nothing sent")
        def _():
            r = get(4, "/echo?t=old")
            h.eq(r.status, 502, "status (%r)" % r)
            h.eq(old.requests, [], "requests at the TLS 1.1 origin")
    else:
        t.skip("an upstream offering at most TLS 1.1 is refused",
               "this Python/OpenSSL cannot serve TLS 1.1, so the check would prove nothing")

    trust = t.proxy(CONFIG_DEFAULT_TRUST, env={"SSL_CERT_FILE": certs.ca}, GOOD=good.port)

    @t.check("no tls: section, SSL_CERT_FILE names the test CA: 200")
    def _():
        r = h.curl(trust.listener_url(0, "/echo?t=sslcertfile"))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)

    notrust = t.proxy(CONFIG_DEFAULT_TRUST, GOOD=good.port)

    @t.check("no tls: section and no SSL_CERT_FILE: the test CA is not trusted (502)")
    def _():
        r = h.curl(notrust.listener_url(0, "/echo?t=nocertfile"))
        h.eq(r.status, 502, "status (%r)" % r)


    @t.check("a reload reads the default trust store (SSL_CERT_FILE) again only when it changed")
    def _():
        # a bundle of about a megabyte, as a system's is: the test CA and
        # copies of another; read again or not shows in the bytes read
        bundle = os.path.join(t.tmp, "default-bundle.pem")
        with open(certs.ca) as f:
            ca_pem = f.read()
        with open(certs.other_ca) as f:
            other_pem = f.read()
        copies = (1 << 20) // len(other_pem)
        with open(bundle, "w") as f:
            f.write(ca_pem + other_pem * copies)
        size = os.path.getsize(bundle)
        proxy = t.proxy(CONFIG_DEFAULT_TRUST, env={"SSL_CERT_FILE": bundle}, GOOD=good.port)

        def bytes_read():
            with open("/proc/%d/io" % proxy.pid) as f:
                return int([ln for ln in f if ln.startswith("rchar:")][0].split()[1])

        def reload():
            before = bytes_read()
            proxy.reload()
            return bytes_read() - before

        r = h.curl(proxy.listener_url(0, "/echo?t=bundle-before"))
        h.eq((r.exit_code, r.status), (0, 200), "before any reload (%r)" % r)
        pooled = json.loads(r.body)["conn_id"]
        read = reload()
        h.ok(read < size // 4, "an unchanged bundle of %d bytes was read again (%d bytes read)"
             % (size, read))
        r = h.curl(proxy.listener_url(0, "/echo?t=bundle-unchanged"))
        h.eq((r.exit_code, r.status), (0, 200), "after a reload that kept the store (%r)" % r)
        h.eq(json.loads(r.body)["conn_id"], pooled,
             "the pooled connection after a reload that kept the store")
        with open(bundle, "w") as f:
            f.write(other_pem * (copies + 1))
        read = reload()
        h.ok(read >= size, "a changed bundle was not read again (%d bytes read)" % read)
        r = h.curl(proxy.listener_url(0, "/echo?t=bundle-without-ca"))
        h.check_error_response(r, 502, CERT_WORDS)
        with open(bundle, "w") as f:
            f.write(ca_pem + other_pem * copies)
        reload()
        r = h.curl(proxy.listener_url(0, "/echo?t=bundle-back"))
        h.eq((r.exit_code, r.status), (0, 200), "with the CA back in the bundle (%r)" % r)

    idle = t.proxy(CONFIG_SHORT_IDLE, GOOD=good.port, CA=certs.ca)

    def pooled_conn(tag):
        """The origin's connection a request through the short-idle proxy
        went on, left pooled."""
        r = h.curl(idle.listener_url(0, "/echo?t=" + tag))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        cid = json.loads(r.body)["conn_id"]
        return [c for c in good.connections if c.id == cid][0]

    @t.check("a pooled TLS connection closed by pool_idle_timeout ends with close_notify")
    def _():
        conn = pooled_conn("idle-close")
        h.ok(conn.closed.wait(10 * h.SLOW), "the idle connection closed (%r)" % conn)
        h.eq(conn.tls_end, "close_notify", "how the proxy ended TLS (%s)" % conn.close_reason)

    @t.check("pooled TLS connections still open at shutdown end with close_notify")
    def _():
        CONFIG_SHORT_IDLE_LONG = CONFIG_SHORT_IDLE.replace("pool_idle_timeout: 300ms",
                                                           "pool_idle_timeout: 60s")
        exiting = t.proxy(CONFIG_SHORT_IDLE_LONG, GOOD=good.port, CA=certs.ca)
        r = h.curl(exiting.listener_url(0, "/echo?t=exit-close"))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        cid = json.loads(r.body)["conn_id"]
        conn = [c for c in good.connections if c.id == cid][0]
        time.sleep(0.2)
        h.eq(conn.closed.is_set(), False, "pooled connection open before SIGTERM")
        h.eq(exiting.stop(), None, "clean exit")
        h.ok(conn.closed.wait(5 * h.SLOW), "the pooled connection closed at exit")
        h.eq(conn.tls_end, "close_notify", "how the proxy ended TLS (%s)" % conn.close_reason)

    @t.check("a reload that leaves tls.ca_file's bytes as they were keeps the pooled TLS "
             "connection and the saved session; new bytes drop both")
    def _():
        trust = os.path.join(t.tmp, "trust-kept.pem")
        shutil.copyfile(certs.ca, trust)
        config = CONFIG_SHORT_IDLE.replace("pool_idle_timeout: 300ms", "pool_idle_timeout: 60s")
        keeping = t.proxy(config, GOOD=good.port, CA=trust)

        def conn_of(tag, close=False):
            r = h.curl(keeping.listener_url(0, "/echo?t=%s%s" % (tag, "&close=1" if close else "")))
            h.eq((r.exit_code, r.status), (0, 200), "%s: curl exit and status (%r)" % (tag, r))
            cid = json.loads(r.body)["conn_id"]
            conn = [c for c in good.connections if c.id == cid][0]
            if close:
                h.ok(conn.closed.wait(5 * h.SLOW), "%s: the origin closed its connection" % tag)
                time.sleep(0.2)
            return conn

        first = conn_of("kept-0")
        keeping.reload()
        h.eq(conn_of("kept-1").id, first.id, "the pooled connection after an unchanged reload")
        # a reload refused after the trust was taken over (a listener it
        # cannot bind) gives the running config its trust back
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        running = keeping.config_text
        try:
            keeping.reload(running.replace("tls:", "  - address: 127.0.0.1:%d\n    upstream: "
                                           "https://localhost:%d\ntls:"
                                           % (busy.getsockname()[1], good.port), 1),
                           outcome=r"keeping the running config")
        finally:
            busy.close()
        h.eq(conn_of("kept-1b").id, first.id, "the pooled connection after a refused reload")
        keeping.reload(running)
        h.eq(conn_of("kept-1c").id, first.id, "the pooled connection after the next reload")
        # the same bytes written again (a new mtime, a new inode): the same trust
        os.unlink(trust)
        shutil.copyfile(certs.ca, trust)
        keeping.reload()
        h.eq(conn_of("kept-2", close=True).id, first.id,
             "the pooled connection after the file was written again with the same bytes")
        keeping.reload()
        fresh = conn_of("kept-3")
        h.ok(fresh.id != first.id, "a new connection once the origin closed the pooled one")
        h.eq(fresh.session_reused, True, "the new connection resumed the session saved before "
             "the reload")
        # new bytes that still trust the origin's CA: a new trust, made anew
        with open(trust, "w") as f, open(certs.ca) as a, open(certs.other_ca) as b:
            f.write(a.read() + b.read())
        keeping.reload()
        after = conn_of("kept-4")
        h.ok(after.id != fresh.id, "the pooled connection verified under the old trust was "
             "used after the file changed (connection %d)" % after.id)
        h.eq(after.session_reused, False, "a session saved under the old trust was offered")
        h.eq(conn_of("kept-5").id, after.id, "the connection made under the new trust is pooled")

    @t.check("a reload reads tls.ca_file again: a CA taken out is distrusted, put back trusted")
    def _():
        trust = os.path.join(t.tmp, "trust.pem")
        shutil.copyfile(certs.ca, trust)
        CONFIG_LONG_IDLE = CONFIG_SHORT_IDLE.replace("pool_idle_timeout: 300ms",
                                                     "pool_idle_timeout: 60s")
        reloading = t.proxy(CONFIG_LONG_IDLE, GOOD=good.port, CA=trust)

        def reload_with(ca):
            shutil.copyfile(ca, trust)
            reloading.reload()

        r = h.curl(reloading.listener_url(0, "/echo?t=trust-before"))
        h.eq((r.exit_code, r.status), (0, 200), "before the reload (%r)" % r)
        # a pooled connection and a saved session from the old trust are
        # not used after it
        reload_with(certs.other_ca)
        r = h.curl(reloading.listener_url(0, "/echo?t=trust-removed"))
        h.check_error_response(r, 502, CERT_WORDS)
        reload_with(certs.ca)
        r = h.curl(reloading.listener_url(0, "/echo?t=trust-back&conn_close=1"))
        h.eq((r.exit_code, r.status), (0, 200), "with the CA put back (%r)" % r)
        # a file that does not load: the reload is refused (the config
        # loader finds it, naming file:line:column), the trust that runs
        # stays (for a new connection: the last one was not pooled)
        with open(trust, "w") as f:
            f.write("not a certificate\n")
        os.kill(reloading.pid, signal.SIGHUP)
        reloading.wait_log(r"tls\.ca_file: holds no certificate", timeout=10 * h.SLOW)
        reloading.wait_log(r"keeping the running config", timeout=10 * h.SLOW)
        r = h.curl(reloading.listener_url(0, "/echo?t=trust-kept"))
        h.eq((r.exit_code, r.status), (0, 200), "after a refused reload (%r)" % r)
        # a connection in use while a reload replaces the trust is closed
        # when its request ends, not pooled for the next one
        reload_with(certs.ca)
        r = h.curl(reloading.listener_url(0, "/echo?t=trust-again"))
        h.eq((r.exit_code, r.status), (0, 200), "with the CA back (%r)" % r)
        gate = good.gate("trust-reload")
        held = {}
        th = threading.Thread(target=lambda: held.update(
            r=h.curl(reloading.listener_url(0, "/gate/trust-reload?first=10&rest=10"))))
        th.start()
        gate.wait_reached(10 * h.SLOW)
        reload_with(certs.other_ca)
        gate.release()
        th.join(20 * h.SLOW)
        h.eq((held["r"].exit_code, held["r"].status), (0, 200),
             "the request in flight during the reload (%r)" % held["r"])
        r = h.curl(reloading.listener_url(0, "/echo?t=after-reload-in-flight"))
        h.check_error_response(r, 502, CERT_WORDS)

    unchecked = t.proxy(CONFIG_GLOBAL_NO_VERIFY, UNKNOWN=unknown.port, CA=certs.ca)

    @t.check("tls.verify: false for all: the start warns naming each route that inherits it")
    def _():
        unchecked.wait_log(r"route default: tls\.verify is false", timeout=10 * h.SLOW)
        unchecked.wait_log(r"route inherits: tls\.verify is false", timeout=10 * h.SLOW)
        h.ok(not [ln for ln in unchecked.stderr_lines() if "route own-tls: tls.verify" in ln],
             "a route with its own tls: section was named: %s" % unchecked.stderr_tail())
        r = h.curl(unchecked.listener_url(0, "/echo?t=unchecked"))
        h.eq((r.exit_code, r.status), (0, 200), "the unknown CA's origin, unchecked (%r)" % r)


    oneticket = t.origin(tls=(certs.server, certs.server_key), name="oneticket", num_tickets=1)
    two = t.proxy(CONFIG_TWO_ADDRESSES, ONETICKET=oneticket.port,
                  env=t.hosts_only_env("127.0.0.2 two.test\n127.0.0.1 two.test\n", "hosts-two"))

    @t.check("TLS 1.3: an address attempt refused before its handshake uses up no ticket: each "
             "new connection resumes, with one ticket a handshake")
    def _():
        conn_ids = []
        for i in range(4):
            r = h.curl(two.listener_url(0, "/echo?t=two%d&close=1" % i))
            h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
            cid = json.loads(r.body)["conn_id"]
            conn_ids.append(cid)
            oneticket.wait_for(lambda org: any(c.id == cid and c.closed.is_set()
                                               for c in org.connections),
                               5, "the origin to close connection %d" % cid)
            time.sleep(0.2)
        conns = {c.id: c for c in oneticket.connections}
        h.eq([conns[c].tls_version for c in conn_ids], ["TLSv1.3"] * 4, "TLS versions")
        h.eq([conns[c].session_reused for c in conn_ids], [False, True, True, True],
             "session_reused on each connection")


h.run(scenario, __doc__)
