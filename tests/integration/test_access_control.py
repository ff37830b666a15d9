#!/usr/bin/env python3
"""Scenario: a forward proxy is never an open proxy (access.allow_clients,
access.allow_hosts, access.admin_remote).

Client: raw sockets, some bound to 127.0.0.2 or to ::1 before connecting,
to a forward listener and a sidecar listener; absolute-form GETs naming
hosts inside and outside allow_hosts (an IP literal, look-alike names,
userinfo, a Host header that disagrees with the URI); CONNECTs; then
--check on configs with a non-loopback admin address.
Origin: echoes; a second origin only for tunnels. The proxy resolves names
from a hosts file of the test's (localhost and api.allowed.test on
127.0.0.1) and sends any other DNS query to a UDP socket of the test's on
loopback, which records it and never answers.
Proxy A: forward and sidecar listeners, allow_clients [127.0.0.1/32],
allow_hosts ["localhost", "*.allowed.test"]. Proxy B: a sidecar listener
on [::1] with the default access settings. Proxy C: the same with
allow_clients ["127.0.0.0/8"].
Must hold: from 127.0.0.2, on either listener, the proxy answers 403 at
once, even before a request, closes, logs a line naming 127.0.0.2 and its
port, and the origin sees nothing; from 127.0.0.1 requests are served;
::1 is served by the default config and refused with 403 when
allow_clients is ["127.0.0.0/8"] (skipped, saying why, where ::1 is
unusable); a forward GET to http://127.0.0.1:PORT/, to look-alikes of the
wildcard, through userinfo or with a disagreeing Host header is refused
(403, or 400 for userinfo) with no DNS query and nothing at the origin,
while localhost (in any letter case) and api.allowed.test are served;
CONNECT to a refused host is 403 and opens nothing, CONNECT to localhost
tunnels; admin on 0.0.0.0 or [::] without access.admin_remote fails
--check with exit 1 and file:line:col pointing at the address, and
starting with it fails the same way; with admin_remote: true (written
before or after admin) --check prints ok; loopback admin addresses pass
without it.
"""

import os
import socket
import threading
import time

import harness as h

CONFIG_A = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
access:
  allow_clients: [127.0.0.1/32]
  allow_hosts: ["localhost", "*.allowed.test"]
limits:
  drain_timeout: 2s
  connect_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

CONFIG_B = """\
listen:
  - address: "[::1]:@PORT0@"
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
"""

CONFIG_C = CONFIG_B.replace("log: {", 'access:\n  allow_clients: ["127.0.0.0/8"]\nlog: {')

# For --check: @ADMIN@ is replaced; admin's value starts on line 3, column 8.
ADMIN_CONFIG = """\
listen:
  - address: 127.0.0.1:3128
admin: @ADMIN@
log: { level: info }
"""
ADMIN_LINE, ADMIN_COL = 3, 8


class DnsSink:
    """A UDP socket on loopback that records the names in DNS queries and
    never answers."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.names = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                msg, _ = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            self.names.append(self._qname(msg))

    @staticmethod
    def _qname(msg):
        labels, pos = [], 12
        while pos < len(msg) and msg[pos] != 0 and len(labels) < 64:
            n = msg[pos]
            labels.append(msg[pos + 1:pos + 1 + n].decode("latin-1"))
            pos += 1 + n
        return ".".join(labels).lower()

    def stop(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def ipv6_loopback_problem():
    """None if a TCP connection over ::1 works here, else why not."""
    if not socket.has_ipv6:
        return "this Python has no IPv6 support"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as srv:
            srv.bind(("::1", 0))
            srv.listen(1)
            with socket.create_connection(("::1", srv.getsockname()[1]), timeout=2):
                pass
    except OSError as e:
        return "::1 is not usable on this machine: %s" % e
    return None


def source_problem(source):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((source, 0))
    except OSError as e:
        return "cannot bind a client socket to %s: %s" % (source, e)
    return None


def scenario(t):
    origin = t.origin()
    tunnel_origin = t.origin(name="tunnel-origin")
    sink = DnsSink()
    t.defer(sink.stop)
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost\n127.0.0.1 api.allowed.test\n")
    resolv = os.path.join(t.tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1:%d\noptions timeout:1 attempts:1\n" % sink.port)
    dns_env = {"RETRYPROXY_HOSTS": hosts, "RETRYPROXY_RESOLV_CONF": resolv}
    proxy = t.proxy(CONFIG_A, env=dns_env, ORIGIN=origin.port)
    fwd, side = proxy.port(0), proxy.port(1)

    def at_origin(tag):
        return [q for q in origin.requests if tag in q.target]

    def refused_request(conn, request, p, log_rx, tag):
        """Send request on conn from a client p does not allow (the proxy
        may have answered and closed already): 403, a log line of p that
        matches log_rx % the client's port (returned), and nothing with
        tag at the origin."""
        with conn as c:
            port = c.local_port
            try:
                c.send(request)
            except OSError:
                pass  # the proxy may have answered and closed already
            r = c.read_response(timeout=5 * h.SLOW)
        h.eq(r.status, 403, "status (body %r)" % r.body)
        lines = p.wait_log(log_rx % port, timeout=5 * h.SLOW)
        time.sleep(0.3 * h.SLOW)
        h.eq(at_origin(tag), [], "requests at the origin from the refused client")
        return lines

    # -- allow_clients --------------------------------------------------------

    no_src = source_problem("127.0.0.2")
    if no_src:
        t.skip("allow_clients checks from 127.0.0.2", no_src)
    else:
        @t.check("from 127.0.0.2 (not in [127.0.0.1/32]): 403 at once, before any request, then close")
        def _():
            with h.RawConn(side, source="127.0.0.2", timeout=5 * h.SLOW) as c:
                start = time.monotonic()
                r = c.read_response(timeout=5 * h.SLOW)
                took = time.monotonic() - start
                h.check_error_response(r, 403, ["allow_clients", "not allowed"])
                h.ok(took < 2 * h.SLOW, "the 403 took %.2fs" % took)
                h.ok(c.closed_within(5 * h.SLOW), "the proxy should close the refused connection")

        @t.check("from 127.0.0.2 with a request on the sidecar listener: 403, nothing at the origin")
        def _():
            refused_request(h.RawConn(side, source="127.0.0.2", timeout=5 * h.SLOW),
                            h.request("GET", "/echo?from=127.0.0.2", "side.example"),
                            proxy, r"\b127\.0\.0\.2:%d\b", "from=127.0.0.2")

        @t.check("from 127.0.0.2 on the forward listener: 403, a log line naming it, nothing at the origin")
        def _():
            lines = refused_request(
                h.RawConn(fwd, source="127.0.0.2", timeout=5 * h.SLOW),
                h.request("GET", "http://localhost:%d/echo?from=fwd-127.0.0.2" % origin.port,
                          "localhost:%d" % origin.port),
                proxy, r"\b127\.0\.0\.2:%d\b", "from=fwd-127.0.0.2")
            h.ok(any("allow_clients" in ln or "403" in ln for ln in lines),
                 "log lines naming the client do not say it was refused: %r" % lines)

    @t.check("from 127.0.0.1: served on both listeners")
    def _():
        r = h.fetch(side, "GET", "/echo?from=127.0.0.1", "side.example")
        h.eq(r.status, 200, "sidecar status (body %r)" % r.body)
        r = h.fetch(fwd, "GET", "http://localhost:%d/echo?from=fwd-127.0.0.1" % origin.port,
                    "localhost:%d" % origin.port)
        h.eq(r.status, 200, "forward status (body %r)" % r.body)
        h.eq(len(at_origin("from=127.0.0.1")) + len(at_origin("from=fwd-127.0.0.1")), 2,
             "requests at the origin")

    # -- allow_hosts ----------------------------------------------------------

    def refused(name, target, host, tag, statuses=(403,)):
        @t.check(name)
        def _():
            before = len(sink.names)
            r = h.fetch(fwd, "GET", target, host)
            h.ok(r.status in statuses, "status %d, expected %s (body %r)" % (r.status, statuses, r.body))
            time.sleep(0.3 * h.SLOW)
            h.eq(at_origin(tag), [], "requests at the origin")
            h.eq(sink.names[before:], [], "DNS queries the proxy sent")

    op = origin.port
    refused("forward GET http://127.0.0.1:PORT/ (an IP literal not in allow_hosts): 403",
            "http://127.0.0.1:%d/echo?ah=ip" % op, "127.0.0.1:%d" % op, "ah=ip")
    refused("forward GET to evilallowed.test (no dot before the suffix): 403, no DNS",
            "http://evilallowed.test:%d/echo?ah=lookalike" % op, "evilallowed.test:%d" % op, "ah=lookalike")
    refused("forward GET to allowed.test.evil.test (suffix in the middle): 403, no DNS",
            "http://allowed.test.evil.test:%d/echo?ah=middle" % op, "allowed.test.evil.test:%d" % op,
            "ah=middle")
    refused("forward GET with userinfo http://localhost@127.0.0.1:PORT/: refused (403 or 400)",
            "http://localhost@127.0.0.1:%d/echo?ah=userinfo" % op, "127.0.0.1:%d" % op, "ah=userinfo",
            (400, 403))
    refused("forward GET http://127.0.0.1:PORT/ with Host: localhost: the URI's host decides, 403",
            "http://127.0.0.1:%d/echo?ah=hosthdr" % op, "localhost:%d" % op, "ah=hosthdr")

    @t.check("the DNS socket works: an allowed name outside the hosts file is looked up there")
    def _():
        # Without this, "no DNS" above could pass because lookups went elsewhere.
        r = h.fetch(fwd, "GET", "http://nohosts.allowed.test:%d/echo?ah=dns" % op,
                    "nohosts.allowed.test:%d" % op, timeout=20 * h.SLOW)
        h.ok(r.status in (502, 504),
             "status %d for a name that cannot resolve (body %r)" % (r.status, r.body))
        h.ok("nohosts.allowed.test" in sink.names, "queries at the DNS socket: %r" % sink.names)

    @t.check("a refused host is named in the log")
    def _():
        proxy.wait_log(r"127\.0\.0\.1.*allow_hosts|allow_hosts.*127\.0\.0\.1", timeout=5 * h.SLOW)

    @t.check("forward GET to http://localhost:PORT/ and http://LocalHost:PORT/: served")
    def _():
        for host in ("localhost", "LocalHost"):
            tag = "ah=name-%s" % host
            r = h.fetch(fwd, "GET", "http://%s:%d/echo?%s" % (host, op, tag), "%s:%d" % (host, op))
            h.eq(r.status, 200, "status for %s (body %r)" % (host, r.body))
            h.eq(len(at_origin(tag)), 1, "requests at the origin for %s" % host)

    @t.check("forward GET to http://api.allowed.test:PORT/ (matches *.allowed.test): served")
    def _():
        r = h.fetch(fwd, "GET", "http://api.allowed.test:%d/echo?ah=wild" % op, "api.allowed.test:%d" % op)
        h.eq(r.status, 200, "status (body %r)" % r.body)
        h.eq(len(at_origin("ah=wild")), 1, "requests at the origin")

    @t.check("CONNECT to a host not in allow_hosts: 403, no connection to it")
    def _():
        for target in ("127.0.0.1:%d" % tunnel_origin.port, "evil.test:%d" % tunnel_origin.port):
            before = len(sink.names)
            with h.RawConn(fwd, timeout=5 * h.SLOW) as c:
                c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
                r = c.read_head(timeout=5 * h.SLOW)
                h.eq(r.status, 403, "CONNECT %s status" % target)
            time.sleep(0.3 * h.SLOW)
            h.eq(tunnel_origin.connections, [], "connections at the tunnel origin after CONNECT %s" % target)
            h.eq(sink.names[before:], [], "DNS queries for CONNECT %s" % target)

    @t.check("CONNECT localhost:PORT: tunnelled")
    def _():
        target = "localhost:%d" % tunnel_origin.port
        with h.RawConn(fwd, timeout=5 * h.SLOW) as c:
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
            r = c.read_head(timeout=5 * h.SLOW)
            h.eq(r.status // 100, 2, "CONNECT status")
            c.send(h.request("GET", "/echo?tunnel=1", target))
            r = c.read_response(timeout=5 * h.SLOW)
            h.eq(r.status, 200, "status through the tunnel")
        h.eq(len([q for q in tunnel_origin.requests if "tunnel=1" in q.target]), 1,
             "requests at the tunnel origin")

    # -- IPv6 loopback ----------------------------------------------------------

    v6 = ipv6_loopback_problem()
    if v6:
        t.skip("::1 allowed by default, refused by [127.0.0.0/8]", v6)
    else:
        default_proxy = t.proxy(CONFIG_B, ORIGIN=origin.port)
        v4_only = t.proxy(CONFIG_C, ORIGIN=origin.port)

        @t.check("from ::1 with the default allow_clients: served")
        def _():
            with h.RawConn(default_proxy.port(0), host="::1", timeout=5 * h.SLOW) as c:
                c.send(h.request("GET", "/echo?v6=default", "v6.example"))
                r = c.read_response()
            h.eq(r.status, 200, "status (body %r)" % r.body)
            h.eq(len(at_origin("v6=default")), 1, "requests at the origin")

        @t.check("from ::1 with allow_clients [127.0.0.0/8]: 403, a log line naming ::1, "
                 "nothing at the origin")
        def _():
            refused_request(h.RawConn(v4_only.port(0), host="::1", timeout=5 * h.SLOW),
                            h.request("GET", "/echo?v6=refused", "v6.example"),
                            v4_only, r"\[?::1\]?:%d\b", "v6=refused")

        @t.check("allow_clients [127.0.0.0/8]: 127.0.0.1 still served")
        def _():
            r = h.fetch(v4_only.port(1), "GET", "/echo?v6=v4client", "v6.example")
            h.eq(r.status, 200, "status (body %r)" % r.body)

    # -- admin_remote -------------------------------------------------------------

    def check_config(name, admin, extra=""):
        path = os.path.join(t.tmp, name)
        with open(path, "w") as f:
            f.write(ADMIN_CONFIG.replace("@ADMIN@", admin) + extra)
        return path, h.run_bin(["--check", "-c", path], cwd=t.tmp)

    for admin in ("0.0.0.0:19901", "\"[::]:19901\""):
        @t.check("admin: %s without admin_remote: --check exits 1 with file:line:col at the address" % admin)
        def _(admin=admin):
            path, p = check_config("admin-remote-%d.yaml" % len(admin), admin)
            h.eq(p.returncode, 1, "exit code (stderr %r)" % p.stderr)
            h.ok("ok" not in p.stdout.split(), "--check printed ok: %r" % p.stdout)
            want = "%s:%d:%d:" % (path, ADMIN_LINE, ADMIN_COL)
            h.ok(want in p.stderr, "stderr should name %s, got %r" % (want, p.stderr))
            h.ok("admin_remote" in p.stderr, "the error should say how to allow it: %r" % p.stderr)

    @t.check("starting with a non-loopback admin and no admin_remote: exit 1, nothing bound")
    def _():
        path, _ = check_config("admin-start.yaml", "0.0.0.0:19901")
        p = h.run_bin(["-c", path], cwd=t.tmp, timeout=20)
        h.eq(p.returncode, 1, "exit code (stderr %r)" % p.stderr[-500:])
        h.ok("%s:%d:%d:" % (path, ADMIN_LINE, ADMIN_COL) in p.stderr, "stderr %r" % p.stderr[-500:])

    @t.check("admin: 0.0.0.0 with access.admin_remote: true, after or before admin: --check ok")
    def _():
        _, p = check_config("admin-remote-after.yaml", "0.0.0.0:19901", "access:\n  admin_remote: true\n")
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "--check (stderr %r)" % p.stderr)
        path = os.path.join(t.tmp, "admin-remote-before.yaml")
        with open(path, "w") as f:
            f.write("access:\n  admin_remote: true\n" + ADMIN_CONFIG.replace("@ADMIN@", "\"[::]:19901\""))
        p = h.run_bin(["--check", "-c", path], cwd=t.tmp)
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "--check with access first (stderr %r)" % p.stderr)

    @t.check("loopback admin addresses pass --check without admin_remote")
    def _():
        for admin in ("127.0.0.1:19901", "127.0.0.2:19901", "\"[::1]:19901\"", "localhost:19901"):
            _, p = check_config("admin-loopback.yaml", admin)
            h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "--check with admin %s (stderr %r)"
                 % (admin, p.stderr))


h.run(scenario, __doc__, timeout=90)
