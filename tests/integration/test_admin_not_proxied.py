#!/usr/bin/env python3
"""Scenario: the admin endpoint is not reached through the proxy itself.

The admin listens on loopback so that only this host's users read
/config, /metrics and the status page. A client the forward listener lets
in (allow_clients may be a whole network) must not read them by asking
the proxy to fetch them: forwarded, tunnelled, or by a name that resolves
to the admin's address.

Client: curl through the forward listener; raw CONNECT.
Origin: the test origin on 127.0.0.1 (echo).
Proxy: a forward listener and an admin on loopback; RETRYPROXY_HOSTS
gives admin.test the address 127.0.0.1 (no DNS query leaves the machine:
the resolver points at a loopback port nobody answers).
Must hold: GET http://127.0.0.1:ADMIN/config, http://admin.test:ADMIN/metrics,
http://[::ffff:127.0.0.1]:ADMIN/ and http://0.0.0.0:ADMIN/config (a
connect to 0.0.0.0 reaches loopback) through the proxy get 403 with a
one-line body naming the admin endpoint, after one try (Retry-Attempts: 1,
tries="forbidden"), and the admin serves none of them, nor are they
counted as upstream errors (no upstream was reached); CONNECT
127.0.0.1:ADMIN gets 403 too; the admin still answers when asked
directly (200), and the same proxy forwards to the origin (200). A name
whose addresses are a refused one (127.0.0.2) and the admin's gets the
refusal's 502, retried, and its failures count against its health (before,
the admin's address tried last made it 403 and a connect made, wiping
the failure count).
Asked directly by a browser for a name that a web page made resolve to
127.0.0.1 (DNS rebinding: Host: rebound.example:ADMIN, or that name in an
absolute-form target), the admin answers 403 naming access.admin_remote,
so that the page cannot read it; a Host that is localhost (or a name
under .localhost) or an address is served; two Host fields get 400, and so
does an HTTP/1.1 request without one (RFC 9112 section 3.2; HTTP/1.0
without one is served). A target that starts with // is an origin-form
path (RFC 9112 section 3.2.1), not a host and a path: //localhost/config
with a rebound Host gets 403, and with a loopback Host 404.
An admin written as an IPv4-mapped IPv6 address, [::ffff:127.0.0.1]:PORT
(a loopback address, so allowed without admin_remote, and reached by
IPv4 connects to 127.0.0.1), is refused the same way, whether the target
names 127.0.0.1 or [::ffff:127.0.0.1] (before, only a target in the
admin's own family was compared, and both were served /config).
"""


import socket

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: debug, format: text }
limits:
  drain_timeout: 2s
defaults:
  retry: { max_attempts: 2, initial_backoff: 10ms, jitter: 0ms }
"""

CONFIG_MAPPED = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: "[::ffff:127.0.0.1]:@PORT1@"
log: { level: debug, format: text }
limits:
  drain_timeout: 2s
defaults:
  retry: { max_attempts: 1 }
"""


def ipv4_mapped_bindable():
    """Whether an IPv6 socket can bind ::ffff:127.0.0.1 (no IPv6 at all, or
    a kernel with bindv6only, cannot)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::ffff:127.0.0.1", 0))
        return True
    except OSError:
        return False


def scenario(t):
    origin = t.origin()
    env = t.hosts_only_env("127.0.0.1 admin.test\n127.0.0.2 mixed.test\n127.0.0.1 mixed.test\n")
    proxy = t.proxy(CONFIG, env=env)
    admin = proxy.port(1)

    def served_by_admin():
        return [ln for ln in proxy.stderr_lines() if "admin: /" in ln]

    for url in ("http://127.0.0.1:%d/config" % admin,
                "http://admin.test:%d/metrics" % admin,
                "http://[::ffff:127.0.0.1]:%d/" % admin,
                "http://0.0.0.0:%d/config" % admin):
        @t.check("through the proxy, %s: 403 after one try, the admin serves nothing" % url)
        def _():
            r = h.curl(url, proxy=proxy.url)
            h.check_error_response(r, 403, ("admin",))
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
            # the access log is written in batches: wait for this request's line
            # rather than take the last one there (absent, or the previous URL's)
            h.eq(h.access_fields(proxy.access_one(url)).get("tries"), "forbidden", "tries")
            h.eq(served_by_admin(), [], "admin requests served")

    @t.check("CONNECT to the admin's address: 403, no tunnel")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
                    % (admin, admin)).encode())
            r = c.read_response()
        h.check_error_response(r, 403, ("admin",))
        h.eq(served_by_admin(), [], "admin requests served")

    @t.check("a refused destination is no upstream error: upstream_errors_total stays 0")
    def _():
        m = h.curl("http://127.0.0.1:%d/metrics" % admin).body.decode()
        for kind in ("connect", "dns", "tls", "reset", "timeout", "malformed"):
            h.eq(h.metric(m, "retryproxy_upstream_errors_total", '{kind="%s"}' % kind), 0,
                 "upstream_errors_total{kind=%s}" % kind)

    @t.check("asked directly, the admin answers; the proxy still forwards to the origin")
    def _():
        r = h.curl("http://127.0.0.1:%d/healthz" % admin)
        h.eq((r.exit_code, r.status), (0, 200), "admin /healthz (%r)" % r)
        r = h.curl(origin.url("/echo?t=forward"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "forwarded to the origin (%r)" % r)

    @t.check("a name with a refused address beside the admin's: the refusal decides (502, "
             "retried), counted against its health, not as a connect made")
    def _():
        url = "http://mixed.test:%d/x" % admin
        served = len(served_by_admin())
        r = h.curl(url, proxy=proxy.url)
        h.eq((r.status, r.header("Retry-Attempts")), (502, "2"), "status and Retry-Attempts (%r)" % r)
        h.ok("refused" in r.body.decode(errors="replace"), "the 502 names the refusal: %r" % r.body)
        h.eq(served_by_admin()[served:], [], "admin requests served")
        line = [ln for ln in h.curl("http://127.0.0.1:%d/upstreams" % admin).body.decode().splitlines()
                if ln.startswith("http://mixed.test:")]
        h.eq(len(line), 1, "the /upstreams line of mixed.test (%r)" % line)
        h.ok(" failures=0 " not in line[0], "no failure counted: %r" % line[0])

    def admin_get(host, target="/config"):
        with h.RawConn(admin) as c:
            c.send(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                    % (target, host)).encode())
            return c.read_response()

    @t.check("a name a web page rebound to 127.0.0.1 (DNS rebinding) gets 403 from the admin; "
             "loopback names and addresses are served")
    def _():
        for host in ("rebound.example:%d" % admin, "admin.test:%d" % admin, "rebound.example"):
            r = admin_get(host)
            h.eq(r.status, 403, "status for Host: %s" % host)
            h.ok(b"admin_remote" in r.body, "the 403 does not say what to do: %r" % r.body)
        r = admin_get("127.0.0.1", "http://rebound.example:%d/config" % admin)
        h.eq(r.status, 403, "status for an absolute-form target naming rebound.example")
        r = admin_get("127.0.0.1:%d\r\nHost: rebound.example" % admin)
        h.eq(r.status, 400, "status for two Host fields")
        with h.RawConn(admin) as c:
            c.send(b"GET /config HTTP/1.1\r\nConnection: close\r\n\r\n")
            h.eq(c.read_response().status, 400, "status for HTTP/1.1 without Host")
        with h.RawConn(admin) as c:
            c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
            h.eq(c.read_response().status, 200, "status for HTTP/1.0 without Host")
        for host in ("127.0.0.1:%d" % admin, "localhost:%d" % admin, "LOCALHOST.",
                     "app.localhost:%d" % admin, "[::1]:%d" % admin, "10.1.2.3"):
            h.eq(admin_get(host).status, 200, "status for Host: %s" % host)

    @t.check("a target starting with // is a path, not a host: //localhost/config with a "
             "rebound Host gets 403, with a loopback Host 404")
    def _():
        # a browser at http://rebound.example:ADMIN//localhost/config sends
        # this target with its own Host
        for target in ("//localhost/config", "//127.0.0.1:%d/metrics?norefresh" % admin,
                       "//localhost/"):
            r = admin_get("rebound.example:%d" % admin, target)
            h.eq(r.status, 403, "status for %s with Host: rebound.example" % target)
            r = admin_get("127.0.0.1:%d" % admin, target)
            h.eq(r.status, 404, "status for %s with Host: 127.0.0.1" % target)
        h.eq(admin_get("127.0.0.1:%d" % admin, "/config?x=//localhost/").status, 200,
             "status for /config?x=//localhost/")

    name = "an admin on [::ffff:127.0.0.1]: through the proxy, 127.0.0.1 and [::ffff:127.0.0.1] get 403"
    if not ipv4_mapped_bindable():
        t.skip(name, "this host cannot bind an IPv4-mapped IPv6 address")
        return
    mapped = t.proxy(CONFIG_MAPPED)
    mapped_admin = mapped.port(1)

    @t.check(name)
    def _():
        for url in ("http://127.0.0.1:%d/config" % mapped_admin,
                    "http://[::ffff:127.0.0.1]:%d/config" % mapped_admin):
            r = h.curl(url, proxy=mapped.url)
            h.check_error_response(r, 403, ("admin",))
            h.eq(h.access_fields(mapped.access_one(url)).get("tries"), "forbidden", "tries")
        h.eq([ln for ln in mapped.stderr_lines() if "admin: /" in ln], [], "admin requests served")
        h.eq(h.curl("http://127.0.0.1:%d/healthz" % mapped_admin).status, 200,
             "the admin asked directly")


h.run(scenario, __doc__)
