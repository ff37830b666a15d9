#!/usr/bin/env python3
"""Scenario: the gauges and give-ups around the connection-cap queue
(limits.max_upstream_connections: 1).

Client: raw connections to one listener; the admin listener's /metrics and
status page.
Origin: the recording test origin, scripted per path; a gate holds a
response half-sent.
Must hold:
(1) A 503 whose retry waits for the one connection (held by a slow GET)
    and a first try waiting behind it are queued, not in backoff:
    retryproxy_backoff_pending 0, retryproxy_route_backoff_pending 0,
    retryproxy_route_queued 1 on each of the two routes,
    retryproxy_upstream_waiting 2; the status page's Queued tile says 2,
    each route's queued cell 1 and backoff 0, and the upstream's "waiting
    for a connection" cell 2. All three get 200; then every gauge is 0.
(2) A retry whose wait for the connection passes its route's try_timeout
    (1 s) gives up: the kept 503 goes out with gave_up=upstream_busy,
    retryproxy_retries_given_up_total{reason="upstream_busy"} counts it,
    the retry never reaches the origin, and the JSON line's waited_after_ms
    is the backoff plus the queue (about 1.5 s, not more than 2.5 s), the
    trail's last wait_ms 0.
(3) A chunked 503 of 8 KiB over retry_response_buffer (1 KiB), stalled
    mid-body: while it is relayed as the final response, its route's
    backoff gauge and retryproxy_backoff_pending are 0; then the client
    gets all 8 KiB.
(4) The held path reads the same as (2): a request held for a down
    upstream (a closed port, down after one failed connect) until its
    1.5 s deadline gets 502 with gave_up=deadline, and its JSON line's
    waited_after_ms counts the backoff and the time held (about 1.5 s).
(5) A client that leaves while its request waits reads the same: one whose
    retry has been held for a down upstream (another closed port) for
    about 0.8 s, and one whose retry has waited behind the connection cap
    for about 0.8 s after its 0.5 s backoff, are logged with
    gave_up=client_gone and a JSON waited_after_ms that counts the time
    waited (as a backoff the client leaves does), not the planned backoff
    alone; every gauge is 0 again after.
"""

import re
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: json }
limits:
  drain_timeout: 2s
  max_upstream_connections: 1
  retry_response_buffer: 1KiB
health: { down_after: 1, probe_interval: 10m, hold: true }
defaults:
  retry: { try_timeout: 10s, max_attempts: 3, initial_backoff: 500ms, jitter: 0s }
routes:
  - name: waits
    match: { path_prefix: /w/ }
    retry: { try_timeout: 10s, initial_backoff: 500ms, jitter: 0s, max_attempts: 3 }
  - name: busy
    match: { path_prefix: /b/ }
    retry: { try_timeout: 1s, initial_backoff: 500ms, jitter: 0s, max_attempts: 3 }
  - name: keep
    match: { path_prefix: /k/ }
    retry: { try_timeout: 10s, initial_backoff: 500ms, jitter: 0s, max_attempts: 3 }
  - name: down
    match: { path_prefix: /h/ }
    upstream: http://127.0.0.1:@CLOSED@
    retry: { deadline: 1500ms, initial_backoff: 100ms, jitter: 0s, max_attempts: 10 }
  - name: gone
    match: { path_prefix: /g/ }
    upstream: http://127.0.0.1:@CLOSED2@
    retry: { deadline: 30s, initial_backoff: 100ms, jitter: 0s, max_attempts: 10 }
"""


def scenario(t):
    origin = t.origin(name="queued")
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, CLOSED=h.closed_port(),
                    CLOSED2=h.closed_port())
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    upstream = "http://127.0.0.1:%d" % origin.port

    def metrics():
        body = h.curl(admin + "/metrics", check=True).body.decode()
        return {m.group(1): int(m.group(2)) for m in
                re.finditer(r"^(retryproxy_\S+) (\d+)$", body, re.M)}

    def route(name, route_name):
        return metrics().get('%s{route="%s"}' % (name, route_name))

    def cell(html, key):
        m = re.search(r'data-key="%s"[^>]*>([^<]*)<' % re.escape(key), html)
        return m.group(1) if m else None

    def row(html, attr, name):
        m = re.search(r'<tr %s="%s">(.*?)</tr>' % (attr, re.escape(name)), html, re.S)
        return m.group(1) if m else ""

    def hold_connection(delay, tag):
        return h.hold_request(t, proxy.port(0), origin, delay, tag)

    @t.check("cap 1: a retry and a first try waiting for the connection are queued, "
             "not in backoff, on /metrics and on the status page")
    def _():
        origin.script("/w/q", [503, 200])
        b = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(b.close)
        b.send(h.request("GET", "/w/q", "app.example"))
        origin.wait_for(lambda x: len(x.requests_for("/w/q")) == 1, 5 * h.SLOW,
                        "the first try of /w/q")
        holder = hold_connection(3, "holder-q")
        c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/echo?c=first-q", "app.example"))
        h.wait_until(lambda: metrics().get("retryproxy_upstream_waiting") == 2, 5 * h.SLOW,
                     "the retry and the first try waiting for the connection")
        now = metrics()
        page = h.curl(admin + "/?norefresh", check=True).body.decode()
        h.eq(now.get("retryproxy_backoff_pending"), 0, "retryproxy_backoff_pending")
        for name in ("waits", "default"):
            h.eq((now.get('retryproxy_route_backoff_pending{route="%s"}' % name),
                  now.get('retryproxy_route_queued{route="%s"}' % name),
                  now.get('retryproxy_route_held_requests{route="%s"}' % name)),
                 (0, 1, 0), "route %s: backoff, queued, held" % name)
        h.eq((cell(page, "queued"), cell(page, "backoff_pending")), ("2", "0"),
             "the Queued and Backoffs pending tiles")
        for name in ("waits", "default"):
            r = row(page, "data-route", name)
            h.eq((cell(r, "backoff_pending"), cell(r, "queued")), ("0", "1"),
                 "route %s's backoff and queued cells" % name)
        h.eq(cell(row(page, "data-upstream", upstream), "waiting"), "2",
             "the upstream's waiting-for-a-connection cell")
        h.eq([x.read_response().status for x in (holder, b, c)], [200, 200, 200],
             "the holder, the retry, the first try")
        h.wait_until(lambda: all(v == 0 for k, v in metrics().items()
                                 if re.match(r"retryproxy_(route_)?(backoff_pending|queued|"
                                             r"held_requests|upstream_waiting)\b", k)),
                     5 * h.SLOW, "every backoff, queued, held and waiting gauge at 0")

    @t.check("cap 1: a retry whose wait for the connection passes try_timeout gives up "
             "(gave_up=upstream_busy) with the kept 503")
    def _():
        origin.script("/b/x", [503])
        b = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(b.close)
        start = time.monotonic()
        b.send(h.request("GET", "/b/x", "app.example"))
        origin.wait_for(lambda x: len(x.requests_for("/b/x")) == 1, 5 * h.SLOW,
                        "the first try of /b/x")
        holder = hold_connection(4, "holder-b")
        r = b.read_response()
        elapsed = time.monotonic() - start
        h.eq(r.status, 503, "the kept 503")
        h.ok(elapsed < 3.5 * h.SLOW, "answered after %.2fs (backoff 0.5s, try_timeout 1s)"
             % elapsed)
        f = proxy.access_one("/b/x")
        h.eq((f.get("gave_up"), f.get("attempts")), ("upstream_busy", 1), "gave_up, attempts")
        tries = f.get("tries", [])
        h.eq([x.get("status") for x in tries], [503], "the trail's tries")
        h.eq(tries[-1].get("wait_ms"), 0, "the trail's last wait_ms")
        waited = f.get("waited_after_ms", 0) / 1000.0
        h.ok(1.2 <= waited <= 2.5, "waited_after_ms %.2fs is the backoff and the queue "
             "(~1.5s), counted once" % waited)
        h.eq(route("retryproxy_retries_given_up_total", 'busy",reason="upstream_busy'), 1,
             "retries_given_up_total upstream_busy")
        h.eq(holder.read_response().status, 200, "the holder")
        h.eq(len(origin.requests_for("/b/x")), 1, "tries of /b/x at the origin")

    @t.check("a 503 over retry_response_buffer relayed as final holds no backoff place")
    def _():
        gate = origin.gate("keep-big")
        origin.script("/k/big", ["/gate/keep-big?first=4096&rest=4096&chunked=1&status=503"])
        c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/k/big", "app.example"))
        gate.wait_reached(5 * h.SLOW)
        try:
            proxy.wait_log("retryable response is over retry_response_buffer",
                           timeout=5 * h.SLOW)
            now = metrics()
            h.eq((now.get('retryproxy_route_backoff_pending{route="keep"}'),
                  now.get("retryproxy_backoff_pending")), (0, 0),
                 "route keep's backoff gauge and retryproxy_backoff_pending while relaying")
        finally:
            gate.release()
        r = c.read_response()
        h.eq(r.status, 503, "status")
        h.eq(r.body, o.pattern_bytes(8192), "body (8192 pattern bytes)")

    @t.check("held for a down upstream until the deadline: the JSON line's waited_after_ms "
             "counts the time held, as the connection queue's does")
    def _():
        r = h.fetch(proxy.port(0), "GET", "/h/x", "app.example", timeout=20 * h.SLOW)
        h.eq(r.status, 502, "status")
        f = proxy.access_one("/h/x")
        h.eq(f.get("gave_up"), "deadline", "gave_up")
        tries = f.get("tries", [])
        h.eq(len(tries), 1, "tries %r" % tries)
        h.eq(tries[-1].get("wait_ms"), 0, "the trail's last wait_ms")
        waited = f.get("waited_after_ms", 0) / 1000.0
        h.ok(1.2 <= waited <= 2.5, "waited_after_ms %.2fs is the backoff and the time "
             "held (~1.5s)" % waited)

    def left_while_waiting(path, gauge):
        """The client of path leaves 0.8 s after its request is counted in
        gauge (held or queued); its access-log entry."""
        c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", path, "app.example"))
        h.wait_until(lambda: metrics().get(gauge) == 1, 5 * h.SLOW, gauge + " at 1")
        time.sleep(0.8)
        c.close()
        f = proxy.access_one(path)
        h.eq((f.get("gave_up"), f.get("status"), f.get("attempts")), ("client_gone", 0, 1),
             "gave_up, status, attempts of %r" % f)
        return f

    @t.check("a client that leaves while its retry is held: the JSON line's waited_after_ms "
             "counts the time held")
    def _():
        f = left_while_waiting("/g/x", 'retryproxy_route_held_requests{route="gone"}')
        tries = f.get("tries", [])
        h.eq([(x.get("error"), x.get("wait_ms")) for x in tries], [("refused", 0)],
             "the trail's tries")
        waited = f.get("waited_after_ms", 0) / 1000.0
        h.ok(0.7 <= waited <= 4.0, "waited_after_ms %.2fs is the time held (~0.8s)"
             % waited)

    @t.check("a client that leaves while its retry is queued: the JSON line's waited_after_ms "
             "counts the backoff and the time queued")
    def _():
        origin.script("/w/gone", [503, 200])
        path = "/w/gone"
        c = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", path, "app.example"))
        origin.wait_for(lambda x: len(x.requests_for(path)) == 1, 5 * h.SLOW,
                        "the first try of " + path)
        holder = hold_connection(6, "holder-gone")
        h.wait_until(lambda: metrics().get('retryproxy_route_queued{route="waits"}') == 1,
                     5 * h.SLOW, "the retry queued")
        time.sleep(0.8)
        c.close()
        f = proxy.access_one(path)
        h.eq((f.get("gave_up"), f.get("status"), f.get("attempts")), ("client_gone", 0, 1),
             "gave_up, status, attempts of %r" % f)
        tries = f.get("tries", [])
        h.eq([(x.get("status"), x.get("wait_ms")) for x in tries], [(503, 0)],
             "the trail's tries")
        waited = f.get("waited_after_ms", 0) / 1000.0
        h.ok(1.2 <= waited <= 4.5, "waited_after_ms %.2fs is the backoff and the time "
             "queued (~1.3s)" % waited)
        h.eq(holder.read_response().status, 200, "the holder")
        h.eq(len(origin.requests_for(path)), 1, "tries of %s at the origin" % path)
        h.wait_until(lambda: all(v == 0 for k, v in metrics().items()
                                 if re.match(r"retryproxy_(route_)?(backoff_pending|queued|"
                                             r"held_requests|upstream_waiting)\b", k)),
                     5 * h.SLOW, "every backoff, queued, held and waiting gauge at 0")


h.run(scenario, __doc__)
