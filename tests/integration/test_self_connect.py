#!/usr/bin/env python3
"""Scenario: a connect to a port on this host where nothing listens meets
itself.

When the kernel picks the destination's own port as a connect's ephemeral
source port, TCP's simultaneous open connects the socket to itself, and
the connect succeeds: before, the proxy then read its own request back as
the upstream's answer (a 502 'invalid response', counted as a malformed
upstream answer, and a POST, which never reached any upstream, not
retried), tunnelled a CONNECT to itself (200, then the client's bytes
echoed back), and took such a probe of a down upstream for the upstream
being back.

Client: raw sockets to a forward listener.
Origin: none listens on the destinations; the test origin answers once
that nothing else changed.
Proxy: preloaded with selfconnect.c, which binds each connect to
127.0.0.1 on a listed port to that same address and port first, as the
kernel's pick would (a rare event made certain).
Must hold: each such connect is a refusal (Connection refused), as it
would be without the coincidence: a GET gets 502 naming it, tries
"refused"; a POST is tried again (nothing was sent); a CONNECT gets 502,
not a tunnel; a probe of a down upstream on such a port fails and the
upstream stays down; the fleet's connect to a Redis on such a port is
refused too, logged as "Connection refused" (before: its SCRIPT LOAD came
back to it and was logged as an unexpected reply from Redis); so is a DNS
question's retry over TCP, after a truncated answer, to a nameserver port
where nothing listens for TCP (a stub that serves UDP only): the 502 says
the retry could not connect (before: its own question came back to it and
was read as an ill-formed answer).
"""

import os
import time

import dnsstub
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 1s }
health: { down_after: @DOWN_AFTER@, probe_interval: 100ms, hold: false }
defaults:
  retry: { max_attempts: @ATTEMPTS@, initial_backoff: 50ms, jitter: 0s }
"""

# a sidecar's upstream is never forgotten, down or not: probed until back
SIDECAR = """\
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@PROBED@
"""

# a Redis nothing listens for: every connect meets itself
FLEET = """\
fleet: { redis: "127.0.0.1:@REDIS@", name: selfconnect, sync_interval: 100ms }
"""


def scenario(t):
    shim = os.environ.get("RETRYPROXY_SELFCONNECT")
    h.ok(shim and os.path.exists(shim), "RETRYPROXY_SELFCONNECT names the built library: %r"
         % shim)
    get_port, post_port, connect_port, probe_port, redis_port = (h.free_port()
                                                                 for _ in range(5))
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"LD_PRELOAD": shim,
           "RETRYPROXY_SELFCONNECT_PORTS": "%d,%d,%d,%d,%d" % (get_port, post_port,
                                                              connect_port, probe_port,
                                                              redis_port),
           "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    origin = t.origin()
    # UDP only: its port takes no TCP connection, and the proxy's retry over
    # TCP of the truncated answer meets itself there
    stub = dnsstub.DnsStub(answers={"big.test": "127.0.0.1"}, tcp=False)
    stub.truncate("big.test")
    # the AAAA question unanswered: the shim would make its TCP retry
    # take the port the A question's retry already holds
    stub.mute("big.test", "AAAA")
    stub.start()
    t.defer(stub.stop)
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    resolver_env = dict(env, RETRYPROXY_SELFCONNECT_PORTS=str(stub.port),
                        RETRYPROXY_RESOLV_CONF=stub.write_resolv_conf(t.tmp),
                        RETRYPROXY_HOSTS=hosts)
    proxy = t.proxy(CONFIG, env=env, DOWN_AFTER=0, ATTEMPTS=2)
    health = t.proxy(CONFIG.replace("admin:", SIDECAR + "admin:"), env=env, DOWN_AFTER=1,
                     ATTEMPTS=1, PROBED=probe_port)
    fleet = t.proxy(CONFIG + FLEET, env=env, DOWN_AFTER=0, ATTEMPTS=2, REDIS=redis_port)

    @t.check("a GET whose connect meets itself: 502 naming a refused connection, tried "
             "again, never read back as a malformed answer")
    def _():
        authority = "127.0.0.1:%d" % get_port
        r = h.fetch(proxy.port(0), "GET", "http://%s/get" % authority, authority,
                    timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ("connection refused",))
        tries = h.access_fields(proxy.access_one("%s/get" % authority)).get("tries")
        h.eq([x for x in (tries or "").split(" -> ") if not x.startswith("wait")],
             ["refused", "refused"], "tries (%r)" % tries)
        metrics = h.fetch(proxy.port(1), "GET", "/metrics", "127.0.0.1").body.decode()
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="malformed"}'), 0.0,
             "malformed answers counted")

    @t.check("a POST whose connect meets itself never reached an upstream: tried again")
    def _():
        target = "http://127.0.0.1:%d/post" % post_port
        r = h.fetch(proxy.port(0), "POST", target, "127.0.0.1:%d" % post_port,
                    headers=[("Content-Length", "2")], body=b"ab", timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ("connection refused",))
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")

    @t.check("a CONNECT whose connect meets itself: 502, no tunnel to itself")
    def _():
        authority = "127.0.0.1:%d" % connect_port
        with h.RawConn(proxy.port(0)) as c:
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
            # a 200 would open the tunnel: its head alone is read
            r = c.read_head()
            h.eq(r.status, 502, "CONNECT status")
            h.ok(b"Connection refused" in c.read_exact(int(r.header("Content-Length"))),
                 "the 502 names the refusal")

    @t.check("a probe of a down upstream whose connect meets itself fails: the upstream "
             "stays down")
    def _():
        r = h.fetch(health.port(2), "GET", "/down", "app.example", timeout=10 * h.SLOW)
        h.eq(r.status, 502, "status of the request that marks it down")
        time.sleep(0.6 * h.SLOW)  # several probe intervals
        upstreams = h.fetch(health.port(1), "GET", "/upstreams", "127.0.0.1").body.decode()
        h.ok("http://127.0.0.1:%d down" % probe_port in upstreams, "/upstreams: %r" % upstreams)
        metrics = h.fetch(health.port(1), "GET", "/metrics", "127.0.0.1").body.decode()
        h.eq(h.metric(metrics, "retryproxy_probes_total",
                      '{upstream="http://127.0.0.1:%d",result="ok"}' % probe_port) or 0.0, 0.0,
             "probes that connected")

    @t.check("the fleet's connect to a Redis that meets itself is refused, not read as a "
             "reply")
    def _():
        line = "fleet selfconnect: redis 127.0.0.1:%d: Connection refused" % redis_port
        h.wait_until(lambda: line in fleet.stderr() or "unexpected reply" in fleet.stderr(),
                     5 * h.SLOW, "the fleet's first connect to end")
        h.ok(line in fleet.stderr() and "unexpected reply" not in fleet.stderr(),
             "log: %r" % [x for x in fleet.stderr_lines() if "fleet" in x])
        metrics = h.fetch(fleet.port(1), "GET", "/metrics", "127.0.0.1").body.decode()
        h.eq(h.metric(metrics, "retryproxy_fleet_connected"), 0.0, "fleet connected")

    @t.check("a DNS retry over TCP whose connect meets itself could not connect; its own "
             "question is not read back as an ill-formed answer")
    def _():
        resolver = t.proxy(CONFIG, env=resolver_env, DOWN_AFTER=0, ATTEMPTS=1)
        authority = "big.test:%d" % origin.port
        r = h.fetch(resolver.port(0), "GET", "http://%s/echo?dns" % authority, authority,
                    timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ("could not connect",))
        h.ok(b"ill-formed" not in r.body, "the 502 names an ill-formed answer: %r" % r.body)
        h.eq([(q.transport, q.answer) for q in stub.queries_for("big.test") if q.type == "A"],
             [("udp", "truncated")], "big.test's A questions the stub saw")
        h.eq([q for q in origin.requests if q.query.get("dns") is not None], [],
             "requests at the origin")

    @t.check("a destination nothing lists still connects and is answered")
    def _():
        r = h.fetch(proxy.port(0), "GET", origin.url("/echo"), "127.0.0.1:%d" % origin.port,
                    timeout=10 * h.SLOW)
        h.eq(r.status, 200, "status from the origin")


h.run(scenario, __doc__)
