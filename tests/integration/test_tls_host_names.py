#!/usr/bin/env python3
"""Scenario: which certificate names an https upstream's host matches
(RFC 9525 section 6.3).

Client: raw HTTP/1.1 to a sidecar listener; the Host picks a route whose
upstream is one of the origins below.
Origin: TLS origins with leaves of the test CA (which the proxy trusts
through tls.ca_file): "cn-only" names localhost in its subject's CN alone,
with no subjectAltName; "partial" has the SAN DNS:w*.api.test; "whole" has
DNS:*.api.test. RETRYPROXY_HOSTS maps w1.api.test to 127.0.0.1; RETRYPROXY_RESOLV_CONF
points at a closed port, so no DNS leaves the machine.
Must hold: a wildcard that is a whole left-most label matches (w1.api.test
against *.api.test: 200); a wildcard inside a label does not (w1.api.test against
w*.api.test: 502 tls-verify, nothing reaches the origin), nor does a subject
CN where the certificate has no DNS name (localhost: 502 tls-verify): RFC
9525 keeps neither, as Go, Python and browsers do not.
"""


import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@CN_ONLY@
tls:
  ca_file: @CA@
log: { level: info, format: text }
defaults:
  retry: { max_attempts: 2, initial_backoff: 10ms, jitter: 5ms }
routes:
  - name: partial
    match: { host: partial.example }
    upstream: https://w1.api.test:@PARTIAL@
  - name: whole
    match: { host: whole.example }
    upstream: https://w1.api.test:@WHOLE@
"""


def scenario(t):
    certs = t.certs()
    leaves = {name: certs._leaf(name, cn, san, certs.ca, certs.ca_key) for name, cn, san in (
        ("cn-only", "localhost", None),
        ("partial", "partial", "DNS:w*.api.test"),
        ("whole", "whole", "DNS:*.api.test"))}
    origins = {name: t.origin(tls=leaf, name=name) for name, leaf in leaves.items()}
    env = t.hosts_only_env("127.0.0.1 w1.api.test localhost\n")
    proxy = t.proxy(CONFIG, env=env, CA=certs.ca, CN_ONLY=origins["cn-only"].port,
                    PARTIAL=origins["partial"].port, WHOLE=origins["whole"].port)

    def get(host, tag):
        return h.fetch(proxy.port(), "GET", "/echo?t=" + tag, host, timeout=10 * h.SLOW)

    @t.check("a whole-label wildcard matches: w1.api.test against *.api.test, 200")
    def _():
        r = get("whole.example", "whole")
        h.eq(r.status, 200, "status (body %r)" % r.body)

    @t.check("a wildcard inside a label does not match: w1.api.test against w*.api.test, 502 tls-verify")
    def _():
        r = get("partial.example", "partial")
        h.check_error_response(r, 502, ["certificate verify failed"])
        h.eq(h.access_fields(proxy.access_one("t=partial"))["tries"], "tls-verify", "trail")
        h.eq(origins["partial"].requests, [], "requests at the origin")

    @t.check("a subject CN alone names no host: localhost against CN=localhost, 502 tls-verify")
    def _():
        r = get("app.example", "cn-only")
        h.check_error_response(r, 502, ["certificate verify failed"])
        h.eq(h.access_fields(proxy.access_one("t=cn-only"))["tries"], "tls-verify", "trail")
        h.eq(origins["cn-only"].requests, [], "requests at the origin")


h.run(scenario, __doc__)
