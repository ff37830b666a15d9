#!/usr/bin/env python3
"""Scenario: TLS handshakes with an upstream that fail or never end.

Client: raw HTTP/1.1 to three sidecar listeners.
Origin: a TLS 1.2 server, certificate signed by a CA the proxy does not
trust, that asks for a client certificate and ends each handshake with a
fatal alert when the proxy sends none: the proxy sees the server's
certificate, then a failed handshake (both listeners name it by its
address, so that every try meets it, not a refused ::1 for localhost).
Listener 0's upstream is it with
tls.verify: false; listener 1's is it with the default verify: true.
Listener 2's upstream is a socket that takes the TCP connection and never
answers the ClientHello (connect_timeout 300ms, max_attempts 1).
Listener 3's is a TLS 1.3 server (trusted certificate) asking for a client
certificate: in TLS 1.3 the proxy's side of the handshake ends before the
server judges it, so its alert (certificate_required) is read where the
response should be.
Must hold: with verify: false the failure is an ordinary TLS failure, not
a certificate one: it is retried (3 handshakes for max_attempts: 3), the
trail says tls, and neither the answer nor the log speaks of certificate
verification (the untrusted certificate was accepted on purpose); with
verify: true the certificate itself fails: one handshake, tls-verify, the
502 names the verification. The silent one is a 502 naming the TLS
handshake that did not end within the connect timeout, not a connection
never made (the TCP connection was). The TLS 1.3 alert is named in the
502 (certificate required), not taken for a connection reset: it is a
failed handshake (trail tls), retried like the TLS 1.2 one, a POST
without a body too, since the request never reached the server's
application (before, the trail said reset and the POST went once; one
whose body went cannot be sent again either way). With health on
(down_after 2) and a name from a DNS stub, a TLS 1.3 refusal counts as
the TLS 1.2 one does: each is a connect failure toward down_after (two
handshakes, then the upstream is down and the third try is not made) and
forgets the name (each handshake followed a question of its own).
A TLS connection the proxy cannot set up for itself (SSL_new failing,
made to by sslnewfail.c, preloaded, while a flag file exists) is no
failure of the upstream's: with down_after 1 the GET gets 502 naming it, /upstreams still says up with no failure, the name's kept
answer stays (no second question), upstream_errors_total{kind="tls"}
does not count it, and the next request, the flag gone, reaches the
origin (before, it marked the upstream down, and the next request got
"502 upstream ... is down").
"""

import os
import socket
import ssl
import threading

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
    upstream: https://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT2@
    upstream: https://localhost:@SILENT@
  - address: 127.0.0.1:@PORT3@
    upstream: https://127.0.0.1:@ORIGIN13@
log: { level: info, format: text }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 20ms
    jitter: 5ms
limits:
  connect_timeout: 300ms
health: { down_after: 0 }  # every try reaches the origin: no probes, no hold
routes:
  - name: silent
    match: { host: silent.example }
    retry: { max_attempts: 1 }
  - name: unverified
    match: { host: unverified.example }
    tls: { verify: false }
  - name: tls13
    match: { host: tls13.example }
    tls: { ca_file: @CA@ }
"""

# A name (from the DNS stub) for the TLS 1.2 and the TLS 1.3 server that
# want a client certificate, each alone on its listener, with health on.
CONFIG_HEALTH = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://mtls12.test:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
    upstream: https://mtls13.test:@ORIGIN13@
tls: { verify: false }
log: { level: info, format: text }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 20ms
    jitter: 5ms
limits:
  connect_timeout: 1s
  dns_cache: 60s
health: { down_after: 2, probe_interval: 60s, hold: false }
"""

# The proxy's own TLS set-up fails (SSL_new, by a preloaded shim): a
# trusted origin by a name, health that goes down at the first failure.
CONFIG_LOCAL_TLS = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://good.test:@ORIGIN@
admin: 127.0.0.1:@PORT1@
tls: { verify: false }
log: { level: info, format: text }
defaults:
  retry: { max_attempts: 1 }
limits: { dns_cache: 60s }
health: { down_after: 1, probe_interval: 60s, hold: false }
"""


class ClientCertRequired:
    """A TLS 1.2 (or version) server that asks for a client certificate and
    fails every handshake that brings none. Counts the handshakes begun."""

    def __init__(self, cert, key, ca, version=ssl.TLSVersion.TLSv1_2):
        self.handshakes = 0
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.minimum_version = version
        self._context.maximum_version = version
        self._context.load_cert_chain(cert, key)
        self._context.load_verify_locations(ca)
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                s, _ = self._listener.accept()
            except OSError:
                return
            self.handshakes += 1
            s.settimeout(10)
            try:
                with self._context.wrap_socket(s, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass
            finally:
                s.close()

    def close(self):
        self._listener.close()


def scenario(t):
    certs = t.certs()
    origin = ClientCertRequired(certs.unknown, certs.unknown_key, certs.ca)
    t.defer(origin.close)
    origin13 = ClientCertRequired(certs.server, certs.server_key, certs.ca,
                                  version=ssl.TLSVersion.TLSv1_3)
    t.defer(origin13.close)
    silent = h.silent_port()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, SILENT=silent, ORIGIN13=origin13.port,
                    CA=certs.ca)

    def get(listener, host, tag):
        return h.fetch(proxy.port(listener), "GET", "/x?t=" + tag, host, timeout=10 * h.SLOW)

    @t.check("verify: false: a handshake failure after the certificate is a TLS failure, "
             "retried, not a certificate one")
    def _():
        before = origin.handshakes
        r = get(0, "unverified.example", "unverified")
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.ok(b"certificate verify" not in r.body, "the answer speaks of verification: %r" % r.body)
        h.eq(origin.handshakes - before, 3, "handshakes the origin saw")
        fields = h.access_fields(proxy.access_one("t=unverified"))
        h.eq([x.split(" ")[0] for x in fields["tries"].split(" -> ") if not x.startswith("wait")],
             ["tls"] * 3, "outcomes in the trail (%s)" % fields["tries"])

    @t.check("verify: true: the untrusted certificate fails at once, tls-verify, named")
    def _():
        before = origin.handshakes
        r = get(1, "verified.example", "verified")
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.ok(b"certificate verify failed" in r.body, "the answer names the verification: %r"
             % r.body)
        h.eq(origin.handshakes - before, 1, "handshakes the origin saw")
        fields = h.access_fields(proxy.access_one("t=verified"))
        h.eq(fields["tries"], "tls-verify", "trail")

    @t.check("a TLS handshake that never ends: 502 naming the handshake, not the connection")
    def _():
        r = get(2, "silent.example", "silent")
        h.check_error_response(r, 502, ["tls handshake with localhost:%d not done within the "
                                        "connect timeout" % silent])
        fields = h.access_fields(proxy.access_one("t=silent"))
        h.eq(fields["tries"], "connect-timeout", "trail")

    @t.check("TLS 1.3: the alert that refuses the handshake comes after the request went; "
             "the 502 names the alert, not a reset")
    def _():
        before = origin13.handshakes
        r = get(3, "tls13.example", "tls13")
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.ok(b"certificate required" in r.body, "the answer names the alert: %r" % r.body)
        h.ok(b"connection reset" not in r.body, "the answer speaks of a reset: %r" % r.body)
        h.eq(origin13.handshakes - before, 3, "handshakes the origin saw")
        fields = h.access_fields(proxy.access_one("t=tls13"))
        h.eq([x.split(" ")[0] for x in fields["tries"].split(" -> ") if not x.startswith("wait")],
             ["tls"] * 3, "outcomes in the trail (%s)" % fields["tries"])

    @t.check("TLS 1.3: a POST without a body refused so is a failed handshake, never "
             "processed: retried, not ambiguous")
    def _():
        before = origin13.handshakes
        r = h.fetch(proxy.port(3), "POST", "/x?t=tls13-post", "tls13.example",
                    headers=[("Content-Length", "0")], timeout=10 * h.SLOW)
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.eq(origin13.handshakes - before, 3, "handshakes the origin saw")
        fields = h.access_fields(proxy.access_one("t=tls13-post"))
        h.eq([x.split(" ")[0] for x in fields["tries"].split(" -> ") if not x.startswith("wait")],
             ["tls"] * 3, "outcomes in the trail (%s)" % fields["tries"])
        h.eq(r.header("Retry-Ambiguous"), None, "Retry-Ambiguous")


    stub = dnsstub.DnsStub(answers={"mtls12.test": "127.0.0.1", "mtls13.test": "127.0.0.1",
                                    "good.test": "127.0.0.1"},
                           default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv.conf", "timeout:1 attempts:1")
    health = t.proxy(CONFIG_HEALTH, env={"RETRYPROXY_RESOLV_CONF": resolv}, ORIGIN=origin.port,
                     ORIGIN13=origin13.port)

    for listener, name, server in ((0, "mtls12.test", origin), (1, "mtls13.test", origin13)):
        @t.check("%s: each refused handshake counts toward health (down_after 2: two "
                 "handshakes, the third try not made) and forgets the name (asked again)" % name)
        def _():
            before = server.handshakes
            r = h.fetch(health.port(listener), "GET", "/x?t=health-" + name, name,
                        timeout=10 * h.SLOW)
            h.ok(r.status in (502, 503), "status %r (body %r)" % (r.status, r.body))
            h.eq(server.handshakes - before, 2, "handshakes the origin saw")
            h.eq(len([q for q in stub.queries_for(name) if q.type == "A"]), 2,
                 "A questions for %s (%r)" % (name, stub.queries_for(name)))

    # SSL_new fails while the flag file exists: the proxy's own TLS set-up
    shim = os.environ.get("RETRYPROXY_SSLNEWFAIL")
    h.ok(shim and os.path.exists(shim), "RETRYPROXY_SSLNEWFAIL names the built library: %r" % shim)
    flag = os.path.join(t.tmp, "ssl_new_fails")
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    local = t.proxy(CONFIG_LOCAL_TLS,
                    env={"RETRYPROXY_RESOLV_CONF": resolv, "LD_PRELOAD": shim,
                         "RETRYPROXY_SSLNEWFAIL_FILE": flag,
                         "ASAN_OPTIONS": "verify_asan_link_order=0"},
                    ORIGIN=good.port)

    @t.check("a TLS connection the proxy cannot set up for itself (SSL_new fails) is no "
             "failure of the upstream's: not down, no failure, answer kept, not counted")
    def _():
        h.eq(h.fetch(local.port(0), "GET", "/warm", "app.example", timeout=10 * h.SLOW).status,
             404, "status before")
        asked = len([q for q in stub.queries_for("good.test") if q.type == "A"])
        with open(flag, "w"):
            pass
        try:
            # a POST: it never takes the pooled connection the GET left
            r = h.fetch(local.port(0), "POST", "/x", "app.example",
                        headers=[("Content-Length", "0")], timeout=10 * h.SLOW)
        finally:
            os.unlink(flag)
        h.eq(r.status, 502, "status while SSL_new fails (body %r)" % r.body)
        line = h.curl("http://127.0.0.1:%d/upstreams" % local.port(1)).body.decode().strip()
        h.eq(line, "https://good.test:%d up failures=0 held=0" % good.port, "/upstreams")
        metrics = h.curl("http://127.0.0.1:%d/metrics" % local.port(1)).body.decode()
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="tls"}'), 0.0,
             "tls errors counted")
        r = h.fetch(local.port(0), "POST", "/y", "app.example",
                    headers=[("Content-Length", "0")], timeout=10 * h.SLOW)
        h.eq(r.status, 404, "status after (body %r)" % r.body)
        h.eq(len([q for q in stub.queries_for("good.test") if q.type == "A"]), asked,
             "A questions for good.test (the kept answer stays)")


h.run(scenario, __doc__)
