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
9525 keeps neither, as Go, Python and browsers do not. A route whose
tls.ca_file holds only an intermediate CA (issued by the test CA, which
that route does not name) trusts a leaf that intermediate issued: 200.
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
  - name: intermediate
    match: { host: intermediate.example }
    upstream: https://localhost:@INTERMEDIATE@
    tls: { ca_file: @INTERMEDIATE_CA@ }
"""


def intermediate_pki(certs):
    """An intermediate CA issued by the test CA and a localhost leaf it
    issued: (the intermediate alone, the leaf followed by the intermediate,
    the leaf's key)."""
    ext = certs._path("intermediate.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    certs._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                   "-keyout", "intermediate.key", "-out", "intermediate.csr",
                   "-subj", "/CN=retryproxy test intermediate")
    certs._openssl("x509", "-req", "-in", "intermediate.csr", "-CA", certs.ca, "-CAkey",
                   certs.ca_key, "-set_serial", "7", "-days", "3", "-out", "intermediate.pem",
                   "-extfile", ext)
    inter, inter_key = certs._path("intermediate.pem"), certs._path("intermediate.key")
    leaf, leaf_key = certs._leaf("by-intermediate", "localhost", "DNS:localhost", inter, inter_key)
    chain = certs._path("by-intermediate-chain.pem")
    with open(chain, "w") as out:
        for part in (leaf, inter):
            with open(part) as f:
                out.write(f.read())
    return inter, chain, leaf_key


def scenario(t):
    certs = t.certs()
    leaves = {name: certs._leaf(name, cn, san, certs.ca, certs.ca_key) for name, cn, san in (
        ("cn-only", "localhost", None),
        ("partial", "partial", "DNS:w*.api.test"),
        ("whole", "whole", "DNS:*.api.test"))}
    origins = {name: t.origin(tls=leaf, name=name) for name, leaf in leaves.items()}
    inter_ca, inter_chain, inter_key = intermediate_pki(certs)
    origins["intermediate"] = t.origin(tls=(inter_chain, inter_key), name="intermediate")
    env = t.hosts_only_env("127.0.0.1 w1.api.test localhost\n")
    proxy = t.proxy(CONFIG, env=env, CA=certs.ca, CN_ONLY=origins["cn-only"].port,
                    PARTIAL=origins["partial"].port, WHOLE=origins["whole"].port,
                    INTERMEDIATE=origins["intermediate"].port, INTERMEDIATE_CA=inter_ca)

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

    @t.check("a route's ca_file holding only an intermediate CA trusts the leaves it issued "
             "(as curl and Go do): 200")
    def _():
        r = get("intermediate.example", "intermediate")
        h.eq(r.status, 200, "status (body %r)" % r.body)


h.run(scenario, __doc__)
