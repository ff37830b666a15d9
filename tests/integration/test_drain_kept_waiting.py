#!/usr/bin/env python3
"""Scenario: at the drain's answer time, a request that waits (held for a
down upstream, or queued for a connection) with a retryable response kept
from an earlier try gets that response, and stops waiting.

Client: raw connections; one GET per proxy that gets its kept 503, and one
request that hangs upstream to keep the drain going until drain_timeout.
Proxy: drain_timeout 8s (its answer time 0.8 s before it), health
down_after 1 with hold; for the queue, max_upstream_connections 1.
Origin: for the held request, a raw server that answers 503 once and then
stops listening (the retry's connect is refused, the upstream goes down);
for the queued one, the test origin (a 503, then /hang for the request that
takes the one connection during the backoff).
Must hold, for each:
- at the answer time the client gets the kept 503 (Retry-Attempts 2 for
  the held one, whose retry's connect was refused; 1 for the queued one,
  whose retry never started), and its line says gave_up=deadline
  note=draining;
- the request is no longer counted as waiting once it is answered: held=0
  on /upstreams and retryproxy_held_requests 0 for the held one,
  retryproxy_upstream_waiting 0 for the queued one, and the route's gauges
  0 (before, the kept response was handed to the client while the request
  stayed in its upstream's queue: held=1 and the gauges stuck at 1, and the
  queue kept a waiter whose exchange was freed: the proxy crashed when the
  /hang connection's place went to it at drain_timeout);
- the proxy exits 0 at drain_timeout.
"""

import harness as h
import rawserver

HELD_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UP@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 8s }
health: { down_after: 1, probe_interval: 300ms, hold: true }
defaults:
  retry:
    max_attempts: 5
    # the raw server has stopped listening well before the retry
    initial_backoff: 500ms
    jitter: 0s
    deadline: 60s
    budget: { ratio: 1, min_per_second: 1000, window: 1s }
"""

QUEUED_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 8s, max_upstream_connections: 1 }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 1s
    jitter: 0s
    deadline: 60s
    try_timeout: 60s
    budget: { ratio: 1, min_per_second: 1000, window: 1s }
"""


def answer_503_then_stop(conn, server):
    # one 503, then no listener: the retry's connect is refused
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n"
                 b"Connection: close\r\n\r\nbusy!")
    server.sock.close()


def scenario(t):
    def admin(proxy, path):
        return h.curl("http://127.0.0.1:%d%s" % (proxy.port(1), path), check=True).body.decode()

    def answered_kept(proxy, c, body, attempts):
        """SIGTERM; c's request gets its kept 503 at the answer time; then
        /upstreams and /metrics, in the time the drain has left."""
        proxy.terminate()
        r = c.read_response(timeout=15 * h.SLOW)
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (503, body, attempts),
             "status, body, Retry-Attempts of the kept 503")
        return admin(proxy, "/upstreams"), admin(proxy, "/metrics")

    @t.check("a held request with a kept 503 answered at the drain's answer time is no longer "
             "held")
    def _():
        up = rawserver.RawServer(answer_503_then_stop)
        t.defer(up.stop)
        origin = t.origin()
        proxy = t.proxy(HELD_CONFIG, UP=up.port, ORIGIN=origin.port)
        name = "http://127.0.0.1:%d" % up.port
        c = h.RawConn(proxy.port(0), timeout=15 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/held", "a.example"))
        h.wait_until(lambda: "%s down failures=1 held=1" % name in admin(proxy, "/upstreams"),
                     5 * h.SLOW, "the GET held for its down upstream")
        # keeps the drain going past the answer time
        keep = h.RawConn(proxy.port(2), timeout=15 * h.SLOW)
        t.defer(keep.close)
        keep.send(h.request("GET", "/hang", "a.example"))
        origin.wait_for(lambda o: len(o.requests_for("/hang")) == 1, 5 * h.SLOW, "/hang")
        upstreams, metrics = answered_kept(proxy, c, b"busy!", "2")
        h.ok("%s down failures=1 held=0" % name in upstreams,
             "held=0 once answered: %r" % upstreams)
        h.eq(h.metric(metrics, "retryproxy_held_requests"), 0, "retryproxy_held_requests")
        h.eq(h.metric(metrics, "retryproxy_route_held_requests", '{route="default"}'), 0,
             "retryproxy_route_held_requests")
        fl = h.access_fields(proxy.access_one("/held"))
        h.eq((fl["status"], fl["gave_up"], fl.get("note")), ("503", "deadline", "draining"),
             "access status, gave_up, note")
        # the drain ends at drain_timeout, cutting /hang: the proxy exits 0
        t.stop_proxy(proxy)

    @t.check("a queued retry with a kept 503 answered at the drain's answer time is no longer "
             "queued")
    def _():
        origin = t.origin()
        proxy = t.proxy(QUEUED_CONFIG, ORIGIN=origin.port)
        origin.script("/queued", ["/status/503", "/bytes/10"])
        c = h.RawConn(proxy.port(0), timeout=15 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/queued", "a.example"))
        origin.wait_for(lambda o: len(o.requests_for("/queued")) == 1, 5 * h.SLOW, "the 503")
        # during the backoff, the one connection goes to a request that hangs
        keep = h.RawConn(proxy.port(0), timeout=15 * h.SLOW)
        t.defer(keep.close)
        keep.send(h.request("GET", "/hang", "a.example"))
        origin.wait_for(lambda o: len(o.requests_for("/hang")) == 1, 5 * h.SLOW, "/hang")
        h.wait_until(lambda: h.metric(admin(proxy, "/metrics"),
                                      "retryproxy_upstream_waiting") == 1,
                     5 * h.SLOW, "the retry queued for the one connection")
        upstreams, metrics = answered_kept(proxy, c, b"status 503\n", "1")
        h.eq(h.metric(metrics, "retryproxy_upstream_waiting"), 0, "retryproxy_upstream_waiting")
        h.eq(h.metric(metrics, "retryproxy_route_queued", '{route="default"}'), 0,
             "retryproxy_route_queued")
        fl = h.access_fields(proxy.access_one("/queued"))
        h.eq((fl["status"], fl["gave_up"], fl.get("note")), ("503", "deadline", "draining"),
             "access status, gave_up, note")
        h.eq(len(origin.requests_for("/queued")), 1, "tries at the origin")
        # the drain ends at drain_timeout, cutting /hang, whose connection's
        # place then goes to the next waiter, if the queue still had one
        t.stop_proxy(proxy)


h.run(scenario, __doc__, timeout=80)
