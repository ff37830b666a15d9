#!/usr/bin/env python3
"""Scenario: the look at whether an upstream address is the proxy's own
finds the proxy out of file descriptors.

Client: a GET to a sidecar listener on 0.0.0.0 (every address, so a
destination on its port may be this host's own: a loop), whose upstream
is 192.0.2.1 (TEST-NET-1, elsewhere) on that same port. Once the client
is accepted, the proxy's RLIMIT_NOFILE soft limit is lowered to what it
has open, so neither the bind probe nor the interface list can have a
descriptor; no idle pooled connection can give one back.
Origin: none: nothing is connected to, the limit stops it first.
Config: max_attempts 1; health down_after 1, hold false.
Must hold: the GET gets a 502 naming the proxy's shortage (Too many open
files), not a 403 calling 192.0.2.1 the proxy's own listener (a loop,
never retried); the upstream is not marked down for it, no upstream error
is counted. (With descriptors, the check says 192.0.2.1 is elsewhere and
the proxy connects: not tried here, no traffic leaves loopback.)
"""


import harness as h

CONFIG = """\
listen:
  - address: 0.0.0.0:@PORT0@
    upstream: http://192.0.2.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 1s, connect_timeout: 300ms }
health: { down_after: 1, probe_interval: 60s, hold: false }
defaults:
  retry: { max_attempts: 1 }
"""


def scenario(t):
    proxy = t.proxy(CONFIG)
    start = h.fd_count(proxy.pid)
    clients = h.clients_at_fd_limit(t, proxy.pid, proxy.port(0))
    clients[-1].send(h.request("GET", "/x", "app.example"))
    starved = clients[-1].read_response()
    for c in clients:
        c.close()
    h.wait_until(lambda: h.fd_count(proxy.pid) <= start, 3 * h.SLOW, "the clients gone")
    upstreams = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1)).body.decode()
    metrics = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()

    @t.check("no descriptor to tell whether 192.0.2.1 is this host: a 502 naming the proxy's "
             "shortage, not a 403 for a loop")
    def _():
        h.check_error_response(starved, 502, ("too many open files",))
        h.ok(b"own listener" not in starved.body, "refused as a loop: %r" % starved.body)
        fields = h.access_fields(proxy.access_one("/x"))
        h.eq((fields.get("status"), fields.get("tries")), ("502", "refused"), "access line")

    @t.check("the shortage is the proxy's: the upstream is not marked down, no upstream error "
             "counted")
    def _():
        h.eq(upstreams.strip(), "http://192.0.2.1:%d up failures=0 held=0" % proxy.port(0),
             "/upstreams")
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="connect"}'), 0.0,
             "connect errors counted")


h.run(scenario, __doc__, timeout=60)
