#!/usr/bin/env python3
"""Scenario: the Host an intercepted request carries upstream.

Client: curl through a forward proxy with https:// URLs (so a CONNECT per
connection), trusting the proxy's local CA.
Origin: TLS origins signed by the test CA the proxy trusts through
tls.ca_file: one on 127.0.0.N:443 (N random; the check is skipped where
port 443 cannot be bound), one on localhost at a random port.
Must hold: the requests inside a tunnel go upstream with the Host a sidecar
whose upstream is https://<CONNECT host>:<port> sends: without the port
when it is 443 (clients that sign Host, AWS's among them, sign it without:
an intercepted CONNECT to host:443 must not turn it into host:443), and
without a trailing dot on the CONNECT host. Inside a tunnel to host:443, an
absolute-form target https://host/..., https://host:/... or
https://host:443/... names the tunnel's origin (no port and an empty one
mean 443): it goes upstream in origin-form, Host: host.
"""

import os
import random

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost", "@IP@"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
"""


def scenario(t):
    certs = t.certs()
    local = t.local_ca()
    local_ca = os.path.join(local, "ca.pem")
    ip = "127.%d.%d.%d" % (random.randint(1, 254), random.randint(0, 255), random.randint(2, 254))
    cert, key = certs._leaf("ip443", ip, "IP:" + ip, certs.ca, certs.ca_key)
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    try:
        on443 = t.origin(host=ip, port=443, tls=(cert, key), name="on443")
    except OSError as e:
        on443 = None
        why = "cannot listen on %s:443 (%s)" % (ip, e)
    proxy = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, IP=ip)

    def get(url):
        return h.curl("--cacert", local_ca, url, proxy=proxy.url)

    name = "a CONNECT to host:443: the requests inside go upstream with Host: host, no :443"
    if on443 is None:
        t.skip(name, why)
    else:
        @t.check(name)
        def _():
            r = get("https://%s/echo?t=443" % ip)
            h.eq((r.exit_code, r.status), (0, 200), "curl exit, status (%r)" % r)
            seen = [q for q in on443.requests_for("/echo") if q.query.get("t") == "443"]
            h.eq(len(seen), 1, "requests at the origin")
            h.eq(seen[0].header_all("Host"), [ip], "Host at the origin")
            line = proxy.access_one("t=443")
            h.eq(h.access_fields(line)["target"], "https://%s:443/echo?t=443" % ip,
                 "access-log target (the CONNECT authority, as the client asked)")

    name = ("inside a tunnel to host:443, an absolute-form target with no port, an empty one or "
            "443 names the tunnel's origin")
    if on443 is None:
        t.skip(name, why)
    else:
        @t.check(name)
        def _():
            for i, authority in enumerate((ip, ip + ":", ip + ":443")):
                tag = "abs443-%d" % i
                with h.RawConn.over(h.intercepted_tls(proxy.port(), ip, 443, local_ca)) as tls:
                    tls.send(("GET https://%s/echo?t=%s HTTP/1.1\r\nHost: %s\r\n\r\n"
                              % (authority, tag, authority)).encode())
                    r = tls.read_response()
                h.eq(r.status, 200, "status for https://%s/ (body %r)" % (authority, r.body))
                seen = [q for q in on443.requests_for("/echo") if q.query.get("t") == tag]
                h.eq([(q.target, q.header_all("Host")) for q in seen],
                     [("/echo?t=" + tag, [ip])], "target and Host at the origin")

    @t.check("a CONNECT to a host with a trailing dot: Host upstream without the dot")
    def _():
        r = get("https://localhost.:%d/echo?t=dot" % good.port)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit, status (%r)" % r)
        seen = [q for q in good.requests_for("/echo") if q.query.get("t") == "dot"]
        h.eq(len(seen), 1, "requests at the origin")
        h.eq(seen[0].header_all("Host"), ["localhost:%d" % good.port], "Host at the origin")


h.run(scenario, __doc__)
