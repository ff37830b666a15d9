#!/usr/bin/env python3
"""Scenario: absolute-form and asterisk-form requests inside an intercepted
tunnel.

Client: a raw TLS client through a CONNECT to the proxy, trusting the
proxy's local CA, sending request lines curl will not send there.
Origin: a TLS origin on localhost/127.0.0.1 (signed by the test CA the
proxy trusts through tls.ca_file); intercept.hosts lists localhost and
127.0.0.1. A route "abs" matches path_prefix /echo, a route "root" the rest.
Must hold: an absolute-form target naming the tunnel's own origin (https,
the CONNECT host in any spelling route_same_host accepts, the CONNECT
port) is handled as its origin-form equivalent (RFC 9112 section 3.2.2
says a server MUST accept it): the origin gets the path and query in
origin-form with the Host it gets today, the same route matches, a target
with no path goes as "/" (OPTIONS as "*"), and the access log shows the
target as sent; an absolute-form target naming another origin (another
host, another port, no port where the tunnel's is not 443, or http://) is
a 421 Misdirected Request naming the tunnel, and nothing reaches the
origin; an absolute-form target naming the tunnel with a Host naming
another host is a 400 (the tunnel's Host rule still holds); OPTIONS * goes
to the tunnel's origin as OPTIONS * (as on a sidecar listener), and with a
Host naming another host it is a 400; a CONNECT inside the tunnel is still
a 400; a TRACE or OPTIONS with Max-Forwards: 0 is answered by the proxy
only when the tunnel may carry it (400 or 421 as above otherwise), and is
never forwarded.
"""

import os

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost", "127.0.0.1"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
defaults:
  retry:
    max_attempts: 1
routes:
  - name: abs
    match: { path_prefix: /echo }
  - name: root
    match: { path_prefix: / }
"""


def scenario(t):
    certs = t.certs()
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    local = t.local_ca()
    local_ca = os.path.join(local, "ca.pem")
    proxy = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local)
    port = good.port
    prefix = "https://localhost:%d" % port

    def tunnel(host="localhost"):
        return h.RawConn.over(h.intercepted_tls(proxy.port(), host, port, local_ca))

    def send(request_line, host, tunnel_host="localhost", method="GET"):
        """One request in a new tunnel; returns the response."""
        c = tunnel(tunnel_host)
        with c:
            c.send(("%s HTTP/1.1\r\n" % request_line).encode() +
                   (("Host: %s\r\n" % host).encode() if host is not None else b"") + b"\r\n")
            return c.read_response(method=method)

    def at_origin(tag):
        return [q for q in good.requests if tag in q.target]

    @t.check("absolute-form naming the tunnel: goes upstream in origin-form, Host as today, "
             "routed as its origin-form equivalent, logged as sent")
    def _():
        for i, (tunnel_host, authority) in enumerate((
                ("localhost", "localhost:%d" % port),
                ("localhost", "LOCALHOST.:%d" % port),
                ("127.0.0.1", "127.0.0.1:%d" % port))):
            tag = "abs-ok%d" % i
            target = "https://%s/echo?t=%s" % (authority, tag)
            r = send("GET " + target, "%s:%d" % (tunnel_host, port), tunnel_host)
            h.eq(r.status, 200, "status for %s in a tunnel to %s (body %r)"
                 % (target, tunnel_host, r.body))
            seen = at_origin(tag)
            h.eq([q.target for q in seen], ["/echo?t=" + tag], "target at the origin")
            h.eq(seen[0].header_all("Host"), ["%s:%d" % (tunnel_host, port)], "Host at the origin")
            fields = h.access_fields(proxy.access_one("t=" + tag))
            h.eq((fields["route"], fields["target"]), ("abs", target), "access-log route, target")

    @t.check("absolute-form with no path goes as / (routed as /), OPTIONS to it as *")
    def _():
        target = "https://localhost:%d?t=abs-nopath" % port
        r = send("GET " + target, "localhost:%d" % port)
        h.ok(r.status not in (400, 421), "status %d (body %r)" % (r.status, r.body))
        h.eq([q.target for q in at_origin("abs-nopath")], ["/?t=abs-nopath"], "target at the origin")
        h.eq(h.access_fields(proxy.access_one("t=abs-nopath"))["route"], "root", "route")
        before = len(good.requests)
        r = send("OPTIONS https://localhost:%d" % port, "localhost:%d" % port, method="OPTIONS")
        h.ok(r.status > 0, "OPTIONS answered")
        h.eq([(q.method, q.target) for q in good.requests[before:]], [("OPTIONS", "*")],
             "requests at the origin")

    @t.check("absolute-form naming another origin: 421 naming the tunnel, nothing upstream")
    def _():
        before = len(good.requests)
        for i, (tunnel_host, authority) in enumerate((
                ("localhost", "other.example"),
                ("localhost", "other.example:%d" % port),
                ("localhost", "localhost:9"),
                ("localhost", "localhost"),
                ("localhost", "localhost:"),
                ("127.0.0.1", "localhost:%d" % port))):
            target = "https://%s/echo?t=abs-421-%d" % (authority, i)
            r = send("GET " + target, "%s:%d" % (tunnel_host, port), tunnel_host)
            h.check_error_response(r, 421, [tunnel_host])
        r = send("GET http://localhost:%d/echo?t=abs-421-http" % port, "localhost:%d" % port)
        h.check_error_response(r, 421, ["localhost"])
        h.eq(good.requests[before:], [], "requests at the origin")
        line = proxy.access_one("t=abs-421-http")
        fields = h.access_fields(line)
        h.eq((fields["status"], fields["target"]),
             ("421", "http://localhost:%d/echo?t=abs-421-http" % port), "access-log line")

    @t.check("absolute-form naming the tunnel with a Host naming another host: 400, nothing "
             "upstream; with no Host (HTTP/1.0) it goes")
    def _():
        before = len(good.requests)
        r = send("GET %s/echo?t=abs-host-other" % prefix, "other.example")
        h.check_error_response(r, 400, ["other.example"])
        h.eq(good.requests[before:], [], "requests at the origin")
        c = tunnel()
        with c:
            c.send(b"GET %s/echo?t=abs-http10 HTTP/1.0\r\n\r\n" % prefix.encode())
            r = c.read_response()
        h.eq(r.status, 200, "status of the HTTP/1.0 request")
        h.eq([q.header_all("Host") for q in at_origin("abs-http10")], [["localhost:%d" % port]],
             "Host at the origin")

    @t.check("OPTIONS * goes to the tunnel's origin as OPTIONS *; with another Host, 400")
    def _():
        before = len(good.requests)
        r = send("OPTIONS *", "localhost:%d" % port, method="OPTIONS")
        h.ok(r.status not in (400, 421), "status %d (body %r)" % (r.status, r.body))
        seen = good.requests[before:]
        h.eq([(q.method, q.target) for q in seen], [("OPTIONS", "*")], "requests at the origin")
        h.eq(seen[0].header_all("Host"), ["localhost:%d" % port], "Host at the origin")
        h.wait_until(lambda: [l for l in proxy.access_lines()
                              if h.access_fields(l).get("method") == "OPTIONS"
                              and h.access_fields(l).get("target") == prefix], 5 * h.SLOW,
                     "an access line for OPTIONS with target %s" % prefix)
        before = len(good.requests)
        r = send("OPTIONS *", "other.example", method="OPTIONS")
        h.check_error_response(r, 400, ["other.example"])
        h.eq(good.requests[before:], [], "requests at the origin")

    @t.check("TRACE and OPTIONS with Max-Forwards: 0 are answered by the proxy only when the "
             "tunnel may carry them: 400 for another Host, 421 for another origin")
    def _():
        before = len(good.requests)
        for method, target, host, status, named in (
                ("TRACE", "/echo?t=mf0-own", "localhost:%d" % port, 200, None),
                ("OPTIONS", "*", "localhost:%d" % port, 200, None),
                ("TRACE", "/echo?t=mf0-host", "other.example", 400, "other.example"),
                ("OPTIONS", "*", "other.example", 400, "other.example"),
                ("TRACE", "https://other.example/echo?t=mf0-abs", "localhost:%d" % port, 421,
                 "localhost")):
            c = tunnel()
            with c:
                c.send(("%s %s HTTP/1.1\r\nHost: %s\r\nMax-Forwards: 0\r\n\r\n"
                        % (method, target, host)).encode())
                r = c.read_response(method=method)
            if named is None:
                h.eq(r.status, status, "%s %s status (body %r)" % (method, target, r.body))
            else:
                h.check_error_response(r, status, [named])
        h.eq(good.requests[before:], [], "requests at the origin")

    @t.check("a CONNECT inside the tunnel is still refused with 400")
    def _():
        before = len(good.requests)
        r = send("CONNECT localhost:%d" % port, "localhost:%d" % port)
        h.check_error_response(r, 400, ["connect"])
        h.eq(good.requests[before:], [], "requests at the origin")


h.run(scenario, __doc__)
