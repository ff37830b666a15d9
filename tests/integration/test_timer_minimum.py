#!/usr/bin/env python3
"""Scenario: a configured duration is a minimum; its timer never ends it
early.

libevent fires timers on a coarse clock (4 ms steps on many kernels), up to
a few ms before their time; each duration below is short (20 ms) and
measured 200 times from the client's side, where it can only look longer
than the proxy's, so that an early end shows with near certainty.
Client: raw sockets to sidecar listeners, one request at a time, timed with
the monotonic clock the test origin stamps its arrivals with.
Origin: the test origin: /hang never answers; /status/200 answers at once;
a hedged path scripted slow (/delay/2) first, then 200.
Proxy: a route with try_timeout 20ms and max_attempts 1; one with
hedge.after 20ms; a second proxy with client_timeout 20ms and
tunnel_idle_timeout 20ms, and a forward listener for CONNECT; a third
with connect_timeout 20ms to a port whose accept queue is full (health
off); a fourth whose upstream refuses connections, down after one
failure, its requests held up to a retry deadline of 20ms.
Must hold, each of 200 times (lower bounds exact, upper bounds generous):
- try_timeout on a new connection (the try's own timer): the 504 comes no
  sooner than 20 ms after the request was sent;
- try_timeout on a pooled connection (the connection's lazy timer): the
  same, for a request that follows a 200 on that connection;
- hedge.after: the hedge reaches the origin no sooner than 20 ms after the
  client sent the request;
- client_timeout: a client that connects and sends nothing is closed no
  sooner than 20 ms after it began to connect;
- tunnel_idle_timeout: a CONNECT tunnel to the origin whose client sends
  one byte through it and nothing more is closed no sooner than 20 ms
  after that byte was sent;
- connect_timeout: the 502 comes no sooner than 20 ms after the request
  was sent;
- the retry deadline of a request held for a down upstream: its 502 comes
  no sooner than 20 ms after the request was sent.
"""

import random
import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 10s }
defaults:
  retry:
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: short-try
    match: { path_prefix: /hang }
    retry: { try_timeout: 20ms, max_attempts: 1 }
  - name: short-try-pooled
    match: { path_prefix: /status/ }
    retry: { try_timeout: 20ms, max_attempts: 1 }
  - name: hedged
    match: { path_prefix: /hedge/ }
    retry: { max_attempts: 2, hedge: { after: 20ms, max: 1 } }
"""

CLIENT_TIMEOUT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, client_timeout: 20ms, tunnel_idle_timeout: 20ms }
"""

CONNECT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@BLACKHOLE@
log: { level: info, format: text }
limits: { drain_timeout: 2s, connect_timeout: 20ms, try_timeout: 10s }
health: { down_after: 0 }
defaults:
  retry: { max_attempts: 1 }
"""

HELD_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@CLOSED@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 1, probe_interval: 60s, hold: true }
defaults:
  retry: { max_attempts: 1, deadline: 20ms }
"""

RUNS = 200
MINIMUM = 0.020            # seconds: every duration configured above
SLACK = 1.0 * h.SLOW       # an upper bound only catches a timer that never fires


def off_beat():
    """A pause of a random part of the coarse clock's step: each run after
    a timer fired would else start just after the clock's step, where an
    early fire cannot show."""
    time.sleep(random.uniform(0, 0.005))


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def timed_status(port, path, status):
        """Seconds from sending GET path to port on a new connection to
        the response, which must have this status."""
        with h.RawConn(port, timeout=10 * h.SLOW) as c:
            off_beat()
            start = time.monotonic()
            c.send(h.request("GET", path, "app.example"))
            r = c.read_response()
            elapsed = time.monotonic() - start
        h.eq(r.status, status, "status of %s (body %r)" % (path, r.body))
        return elapsed

    def timed_504(path, pooled_first):
        """Seconds from sending GET path to its 504, on a new client
        connection; pooled_first: a 200 on the same upstream connection
        first, so that the timed request takes it from the pool."""
        with h.RawConn(proxy.port(), timeout=10 * h.SLOW) as c:
            if pooled_first:
                c.send(h.request("GET", "/status/200", "app.example"))
                h.eq(c.read_response().status, 200, "status of the request before")
            off_beat()
            start = time.monotonic()
            c.send(h.request("GET", path, "app.example"))
            r = c.read_response()
            elapsed = time.monotonic() - start
        h.eq(r.status, 504, "status of %s (body %r)" % (path, r.body))
        return elapsed

    def never_below(samples, what):
        short = ["%.2f ms" % (s * 1000) for s in samples if s < MINIMUM]
        long = ["%.2f ms" % (s * 1000) for s in samples if s > MINIMUM + SLACK]
        h.eq(short, [], "%s that ended before 20 ms (of %d, shortest %.2f ms)"
             % (what, len(samples), min(samples) * 1000))
        h.eq(long, [], "%s that took far longer than 20 ms" % what)

    @t.check("try_timeout 20ms on a new connection never ends the try before 20 ms")
    def _():
        never_below([timed_504("/hang?n=%d" % i, False) for i in range(RUNS)],
                    "tries on new connections")

    @t.check("try_timeout 20ms on a pooled connection never ends the try before 20 ms")
    def _():
        # /status/hang is no status: the origin never answers it either
        origin.script("/status/hang", ["/hang"])
        never_below([timed_504("/status/hang?n=%d" % i, True) for i in range(RUNS)],
                    "tries on pooled connections")

    @t.check("hedge.after 20ms: the hedge never starts before 20 ms")
    def _():
        samples = []
        for i in range(RUNS):
            path = "/hedge/%d" % i
            origin.script(path, ["/delay/2", "/status/200"])
            with h.RawConn(proxy.port(), timeout=10 * h.SLOW) as c:
                off_beat()
                start = time.monotonic()
                c.send(h.request("GET", path, "app.example"))
                r = c.read_response()
            h.eq(r.status, 200, "status of %s" % path)
            reqs = origin.requests_for(path)
            h.eq(len(reqs), 2, "requests for %s at the origin" % path)
            samples.append(reqs[1].received_at - start)
        never_below(samples, "hedges")

    @t.check("client_timeout 20ms never closes a silent client before 20 ms")
    def _():
        quick = t.proxy(CLIENT_TIMEOUT_CONFIG, ORIGIN=origin.port)
        samples = []
        for i in range(RUNS):
            off_beat()
            s = socket.create_connection(("127.0.0.1", quick.port()))
            start = time.monotonic()
            s.settimeout(10 * h.SLOW)
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            samples.append(time.monotonic() - start)
            s.close()
        never_below(samples, "silent clients closed")

    @t.check("tunnel_idle_timeout 20ms never closes a tunnel before 20 ms without traffic")
    def _():
        quick = t.proxy(CLIENT_TIMEOUT_CONFIG, ORIGIN=origin.port)
        samples = []
        for i in range(RUNS):
            with h.RawConn(quick.port(1), timeout=10 * h.SLOW) as c:
                c.send(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"
                       % ((origin.authority.encode(),) * 2))
                h.eq(c.read_head().status, 200, "status of the CONNECT")
                off_beat()
                start = time.monotonic()
                c.send(b"x")
                h.ok(c.closed_within(10 * h.SLOW), "the idle tunnel closed")
                samples.append(time.monotonic() - start)
        never_below(samples, "idle tunnels closed")

    @t.check("connect_timeout 20ms never ends a connect before 20 ms")
    def _():
        quick = t.proxy(CONNECT_CONFIG, BLACKHOLE=h.blackhole(t))
        never_below([timed_status(quick.port(), "/c%d" % i, 502) for i in range(RUNS)],
                    "connects given up")

    @t.check("a retry deadline of 20ms never ends a held request before 20 ms")
    def _():
        quick = t.proxy(HELD_CONFIG, CLOSED=h.closed_port())
        timed_status(quick.port(), "/refused", 502)  # the upstream is down from here
        never_below([timed_status(quick.port(), "/held%d" % i, 502) for i in range(RUNS)],
                    "held requests answered")


h.run(scenario, __doc__, timeout=120)
