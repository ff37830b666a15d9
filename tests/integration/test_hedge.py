#!/usr/bin/env python3
"""Scenario: hedged GETs against a slow tail, and per-route try timeouts.

Client: raw-socket requests to sidecar listeners, one at a time; curl to
the admin listener for /metrics.
Origin: the test origin with scripted paths, each request taking the next
step: slow first (/delay/2), then fast; all slow (/delay/1); fast 503 while
the first is slow. For the address check, two origins on the same port of
127.0.0.1 and 127.0.0.2, behind one name that the proxy's hosts file
(RETRYPROXY_HOSTS) gives both addresses; the resolver is pointed at a
nameserver on loopback nobody answers, so no query leaves the machine.
Proxy: routes with hedge {after: 200ms, max: 1}, {after: 200ms, max: 2},
{after: 100ms, max: 3} with max_attempts 2; a route with try_timeout 300ms
under limits.try_timeout 5s.
Must hold:
- a slow first answer is beaten by the hedge (a GET, and a HEAD): 200 from the second try
  well before the first would answer, Retry-Attempts: 2, the origin saw
  exactly 2 requests; the losing connection is closed at once (one upstream
  connection open afterwards: the winner's, pooled) and the next request
  goes on the winner's connection; the access line marks the hedge and the
  cancelled try (tries="cancelled -> wait 0ms -> hedge:200");
  retryproxy_hedges_total{route,result="won"} counts it;
- the origin never sees more than 1 + max tries for one request while
  they all hang, and never more than max_attempts;
- max counts hedges in flight at once: with max 1, a hedge reset at once
  leaves its place to another, which beats the slow first try (200 from
  the third try, the trail "hedge:reset -> wait 0ms -> cancelled -> wait
  0ms -> hedge:200", the reset hedge counted as lost); not while a 503
  kept whole waits to decide (max 2: a hedge reset after the other's 503
  starts no third hedge), nor on a route whose retry.on leaves resets out
  (the first try's 200, 2 requests at the origin);
- POST, PUT with If-Match, and a GET with a body are never hedged; nor
  is a GET carrying an Idempotency-Key (a server that honours keys answers
  a second copy 409 while the first is in progress, and that 409 would
  win): the origin sees it once and the client gets its 200;
- a retryable answer (503) on the hedge waits for the first try, whose
  200 the client gets, with no retry after the 503; when the first try is
  reset instead and attempts are spent, the client gets the hedge's 503,
  and retryproxy_hedges_total counts that hedge as won; so does one too large
  to keep (2 MiB, by Content-Length or chunked), unread; when the first
  try then fails, or answers a small 503, that large 503 goes to the
  client whole, with no third try; at a drain's answer time, a race that
  holds such an answer (small and kept, or too large to keep) while the
  first try still hangs gives it to the client rather than being cut when
  the drain ends (gave_up=deadline, note=draining);
- a hedge starts at another resolved address than the try it races;
- retry.try_timeout on a route overrides limits.try_timeout: 504 after two
  300 ms tries there, while the default route waits the 1 s answer out;
- a 503 kept while its hedge raced, whose body then breaks off after the
  hedge was reset: 502, and the trail gives each try its own record
  (tries="reset -> wait 0ms -> hedge:reset"), not the 503 that never
  reached the client;
- a 503 kept whole while its hedge raced, the hedge then timing out: the
  503 decides, not the timeout: with Retry-After past the deadline it goes
  to the client at once (gave_up=deadline, no third try); on a route whose
  retry.on has 503 but not timeout it is retried (200, Retry-Attempts 3);
  its Retry-After counts from when it came, not from when the hedge ended
  (Retry-After 3 at 0.5 s, the hedge ending at 4.2 s: retried at once
  after the backoff, well inside the 7 s deadline);
- at limits.max_upstream_connections (2), with the slow first try on one
  pooled connection and the other place held by an idle pooled connection,
  the hedge closes that idle connection and races on a new one (200 from
  the hedge, not after the first try's 2 s).
- a hedge due while the upstream's health is in doubt (its first connect
  still under way: the name's answer comes from a stub resolver on
  loopback after 600 ms) starts once the upstream is proven, hedge.after
  later at most: the slow first answer is beaten (before, the hedge that
  could not start then was never tried again: 200 after the first try's
  2 s, Retry-Attempts 1).
"""

import time
import urllib.parse

import dnsstub
import harness as h
import origin as origin_mod

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT2@
    upstream: http://twins.test:@TWIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 5s }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: hedged
    match: { path_prefix: /h/ }
    retry: { hedge: { after: 200ms, max: 1 } }
  - name: hedged2
    match: { path_prefix: /h2/ }
    retry: { hedge: { after: 200ms, max: 2 } }
  - name: hedged-no-reset
    match: { path_prefix: /hn/ }
    retry: { on: [5xx, connect-failure, timeout], hedge: { after: 200ms, max: 1 } }
  - name: capped
    match: { path_prefix: /hc/ }
    retry: { max_attempts: 2, hedge: { after: 100ms, max: 3 } }
  - name: quick
    match: { path_prefix: /quick/ }
    retry: { try_timeout: 300ms, max_attempts: 2 }
"""

# one hedge, no retry after it: a kept answer decides alone once it fails
CONFIG_TRAIL = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 5s }
defaults:
  retry:
    max_attempts: 2
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: hedged
    match: { path_prefix: /h/ }
    retry: { hedge: { after: 200ms, max: 1 } }
"""

# a kept 503 whose hedge times out: try_timeout 1s, deadline 3s
CONFIG_KEPT = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 100ms
    max_backoff: 100ms
    jitter: 0s
    deadline: 3s
    try_timeout: 1s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: hedged
    match: { path_prefix: /h/ }
    retry: { hedge: { after: 200ms, max: 1 } }
  - name: hedged-503-only
    match: { path_prefix: /o/ }
    retry: { on: [503], hedge: { after: 200ms, max: 1 } }
  - name: hedged-long
    match: { path_prefix: /long/ }
    retry: { deadline: 7s, try_timeout: 4s, hedge: { after: 200ms, max: 1 } }
"""

# a cap of 2 connections: idle pooled ones hold places a hedge needs
CONFIG_CAP = CONFIG_TRAIL.replace("try_timeout: 5s }", "try_timeout: 5s, max_upstream_connections: 2 }")
assert "max_upstream_connections: 2" in CONFIG_CAP


def admin_metrics(proxy):
    return h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()



def tries_of(proxy, tag):
    return h.access_fields(proxy.access_one(tag))["tries"]


def scenario(t):
    origin = t.origin()
    twin_a = t.origin(host="127.0.0.1", name="twin-a")
    twin_b = t.origin(host="127.0.0.2", port=twin_a.port, name="twin-b")
    env = t.hosts_only_env("127.0.0.1 twins.test\n127.0.0.2 twins.test\n", "hedge-hosts")
    proxy = t.proxy(CONFIG, env=env, ORIGIN=origin.port, TWIN=twin_a.port)
    port = proxy.port(0)

    @t.check("a slow first answer is beaten by the hedge: 200, Retry-Attempts: 2, 2 tries")
    def _():
        origin.script("/h/slow-first", ["/delay/2", "/bytes/10"])
        r = h.fetch(port, "GET", "/h/slow-first", "api.example")
        h.eq((r.status, len(r.body)), (200, 10), "status and body length")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.ok(r.elapsed < 1.0 * h.SLOW, "answered after %.2f s; the first try takes 2 s"
             % r.elapsed)
        h.eq(len(origin.requests_for("/h/slow-first")), 2, "origin requests")

    @t.check("the losing connection is closed at once, never pooled; the winner's is reused")
    def _():
        h.wait_until(lambda: h.metric(admin_metrics(proxy), "retryproxy_connections",
                                    '{side="upstream"}') == 1.0, 1.0 * h.SLOW,
                     "one upstream connection open (the winner's, pooled)")
        loser, winner = origin.requests_for("/h/slow-first")
        r = h.fetch(port, "GET", "/h/next", "api.example")
        h.eq(r.status, 404, "status")
        h.eq(origin.requests_for("/h/next")[0].conn_id, winner.conn_id,
             "the next request's connection")
        conn = [c for c in origin.connections if c.id == loser.conn_id][0]
        conn.closed.wait(5 * h.SLOW)
        h.ok(conn.close_reason in ("peer-reset", "peer-eof") or
             (conn.close_reason or "").startswith("error"),
             "the loser's connection ended %r" % conn.close_reason)

    @t.check("the access line marks the cancelled try and the hedge; hedges_total counts a win")
    def _():
        h.eq(tries_of(proxy, "/h/slow-first"), "cancelled -> wait 0ms -> hedge:200", "tries")
        text = admin_metrics(proxy)
        h.eq(h.metric(text, "retryproxy_hedges_total", '{route="hedged",result="won"}'), 1.0,
             "hedges won")
        h.eq(h.metric(text, "retryproxy_hedges_total", '{route="hedged",result="lost"}'), 0.0,
             "hedges lost")

    @t.check("a HEAD is hedged like a GET: the slow first is beaten, no body either way")
    def _():
        origin.script("/h/head-slow-first", ["/delay/2", "/bytes/10"])
        r = h.fetch(port, "HEAD", "/h/head-slow-first", "api.example")
        h.eq((r.status, r.body, r.header("Content-Length")), (200, b"", "10"),
             "status, body, Content-Length")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.ok(r.elapsed < 1.0 * h.SLOW, "answered after %.2f s; the first try takes 2 s"
             % r.elapsed)
        reqs = origin.requests_for("/h/head-slow-first")
        h.eq([q.method for q in reqs], ["HEAD", "HEAD"], "methods the origin saw")
        h.eq(tries_of(proxy, "/h/head-slow-first"), "cancelled -> wait 0ms -> hedge:200",
             "tries")

    @t.check("the origin never sees more than 1 + max tries for one request")
    def _():
        origin.script("/h2/all-slow", ["/delay/1"])
        r = h.fetch(port, "GET", "/h2/all-slow", "api.example")
        h.eq((r.status, r.body), (200, b"delayed\n"), "response")
        time.sleep(0.6 * h.SLOW)
        h.eq(len(origin.requests_for("/h2/all-slow")), 3, "origin requests (max: 2)")
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_hedges_total",
                    '{route="hedged2",result="lost"}'), 2.0, "hedges lost")

    @t.check("max is hedges in flight at once: with max 1, a hedge reset at once is replaced "
             "while the first try is still slow")
    def _():
        lost = h.metric(admin_metrics(proxy), "retryproxy_hedges_total",
                        '{route="hedged",result="lost"}')
        origin.script("/h/hedge-reset", ["/delay/2", "/reset/request", "/bytes/10"])
        r = h.fetch(port, "GET", "/h/hedge-reset", "api.example")
        h.eq((r.status, len(r.body)), (200, 10), "status and body length")
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.ok(r.elapsed < 1.2 * h.SLOW, "answered after %.2f s; the first try takes 2 s"
             % r.elapsed)
        h.eq(len(origin.requests_for("/h/hedge-reset")), 3, "origin requests")
        h.eq(tries_of(proxy, "/h/hedge-reset"),
             "hedge:reset -> wait 0ms -> cancelled -> wait 0ms -> hedge:200", "tries")
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_hedges_total",
                      '{route="hedged",result="lost"}'), lost + 1, "hedges lost")

    @t.check("a hedge reset at once is not replaced when the route's retry.on leaves resets out")
    def _():
        origin.script("/hn/hedge-reset", ["/delay/2", "/reset/request", "/bytes/10"])
        r = h.fetch(port, "GET", "/hn/hedge-reset", "api.example")
        h.eq((r.status, r.body), (200, b"delayed\n"), "the first try's response")
        time.sleep(0.3 * h.SLOW)
        h.eq(len(origin.requests_for("/hn/hedge-reset")), 2, "origin requests")

    @t.check("a failed try leaves no place to a hedge while a retryable answer waits to decide")
    def _():
        # max 2: the first try is slow, the first hedge is reset late, the
        # second answers 503 (kept whole, it waits for the others); the
        # first hedge's reset then starts no third hedge
        origin.script("/h2/kept-then-reset",
                      ["/delay/1", "/reset/request?delay=0.5", "/status/503", "/bytes/10"])
        r = h.fetch(port, "GET", "/h2/kept-then-reset", "api.example")
        h.eq((r.status, r.body), (200, b"delayed\n"), "the first try's response")
        time.sleep(0.3 * h.SLOW)
        h.eq(len(origin.requests_for("/h2/kept-then-reset")), 3, "origin requests")

    @t.check("every hedge is a try: never more than max_attempts")
    def _():
        origin.script("/hc/all-slow", ["/delay/1"])
        r = h.fetch(port, "GET", "/hc/all-slow", "api.example")
        h.eq(r.status, 200, "status")
        time.sleep(0.5 * h.SLOW)
        h.eq(len(origin.requests_for("/hc/all-slow")), 2, "origin requests (max_attempts: 2)")

    @t.check("POST, PUT with If-Match and a GET with a body are never hedged")
    def _():
        for method, path, headers, body in (
                ("POST", "/h/post", (), b"order"),
                ("PUT", "/h/put", (("If-Match", '"v1"'),), b"doc"),
                ("GET", "/h/get-body", (), b"query")):
            origin.script(path, ["/delay/1"])
            r = h.fetch(port, method, path, "api.example", headers=headers, body=body)
            h.eq(r.status, 200, "%s status" % method)
            h.eq(len(origin.requests_for(path)), 1, "origin requests for %s %s" % (method, path))
            h.eq(r.header("Retry-Attempts"), "1", "%s Retry-Attempts" % method)

    @t.check("a GET with an Idempotency-Key is never hedged: a second copy with the same key "
             "would be answered 409 while the first is in progress")
    def _():
        # what a server that honours keys answers a copy of a request still
        # in progress (409), scripted for the hedge that must not come
        origin.script("/h/keyed", ["/delay/1", "/status/409"])
        r = h.fetch(port, "GET", "/h/keyed", "api.example",
                    headers=(("Idempotency-Key", "order-1234"),))
        h.eq((r.status, r.header("Retry-Attempts")), (200, "1"), "status, Retry-Attempts")
        reqs = origin.requests_for("/h/keyed")
        h.eq(len(reqs), 1, "origin requests for the keyed GET")
        h.eq(reqs[0].header("Idempotency-Key"), "order-1234", "the key at the origin")

    @t.check("a 503 on the hedge waits for the first try, whose 200 the client gets")
    def _():
        origin.script("/h/retryable", ["/delay/1", 503])
        r = h.fetch(port, "GET", "/h/retryable", "api.example")
        h.eq((r.status, r.body), (200, b"delayed\n"), "response")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        time.sleep(0.3 * h.SLOW)
        h.eq(len(origin.requests_for("/h/retryable")), 2, "origin requests (no retry after 503)")
        h.eq(tries_of(proxy, "/h/retryable"), "hedge:503 -> wait 0ms -> 200", "tries")

    @t.check("a hedge's kept 503 that the client gets in the end counts as won")
    def _():
        def hedges(result):
            return h.metric(admin_metrics(proxy), "retryproxy_hedges_total",
                            '{route="capped",result="%s"}' % result)
        won, lost = hedges("won"), hedges("lost")
        # the hedge's 503 is kept while the first try runs; that one is
        # reset, and with max_attempts 2 the 503 goes to the client
        origin.script("/hc/kept-hedge", ["/reset/request?delay=1", "/status/503"])
        r = h.fetch(port, "GET", "/hc/kept-hedge", "api.example")
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (503, b"status 503\n", "2"),
             "status, body, Retry-Attempts")
        h.eq((hedges("won") - won, hedges("lost") - lost), (1.0, 0.0), "hedges won and lost")

    @t.check("a 503 too large to keep on the hedge waits unread for the first try too")
    def _():
        big = 2 << 20  # over the default retry_response_buffer, 1 MiB
        for name, step in (("length", "/bytes/%d?status=503" % big),
                           ("chunked", "/chunked/%d?status=503" % big)):
            path = "/h/large-" + name
            origin.script(path, ["/delay/1", step])
            r = h.fetch(port, "GET", path, "api.example")
            h.eq((r.status, r.body), (200, b"delayed\n"), "%s: response" % name)
            h.eq(r.header("Retry-Attempts"), "2", "%s: Retry-Attempts" % name)
            h.eq(tries_of(proxy, path), "hedge:503 -> wait 0ms -> 200", "%s: tries" % name)
        # the first try fails instead: nothing can beat the 503 now, and it
        # ends retrying, whole, as one too large to keep does alone
        path = "/h/large-last"
        origin.script(path, ["/reset/request?delay=1", "/bytes/%d?status=503" % big])
        r = h.fetch(port, "GET", path, "api.example")
        h.eq((r.status, len(r.body)), (503, big), "status and body length")
        h.ok(r.body == b"".join(bytes(c) for c in origin_mod.pattern_chunks(big)),
             "the 503's body as the origin sent it")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        time.sleep(0.3 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 2, "origin requests (no retry after the 503)")
        fields = h.access_fields(proxy.access_one(path))
        # the trail ends with the answer the client got; the first try may
        # go on a pooled connection: its reset is "stale"
        h.ok(fields["tries"] in ("reset -> wait 0ms -> hedge:503",
                                 "stale -> wait 0ms -> hedge:503"), "tries: %r" % fields)
        h.ok("over retry_response_buffer" in urllib.parse.unquote(fields.get("note", "")),
             "note: %r" % fields)
        # the first try's answer is a retryable one, small enough to keep:
        # the large one still ends retrying, no third try
        path = "/h/large-both"
        origin.script(path, ["/status/503?delay=1", "/bytes/%d?status=503" % big, "/bytes/10"])
        r = h.fetch(port, "GET", path, "api.example")
        h.eq((r.status, len(r.body), r.header("Retry-Attempts")), (503, big, "2"),
             "status, body length, Retry-Attempts")
        time.sleep(0.3 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 2, "origin requests (no retry)")
        h.eq(tries_of(proxy, path), "503 -> wait 0ms -> hedge:503", "tries")

    @t.check("a drain gives what a hedge race holds: the kept 503, the one too large to keep")
    def _():
        draining = t.proxy(CONFIG, env=env, ORIGIN=origin.port, TWIN=twin_a.port)
        big = 2 << 20
        origin.script("/h/drain-kept", ["/hang", "/status/503"])
        origin.script("/h/drain-large", ["/hang", "/bytes/%d?status=503" % big])
        conns = {}
        for path in ("/h/drain-kept", "/h/drain-large"):
            conns[path] = h.RawConn(draining.port(0), timeout=10 * h.SLOW)
            conns[path].send(h.request("GET", path, "api.example"))
        origin.wait_for(lambda o: all(len(o.requests_for(p)) == 2 for p in conns),
                        5 * h.SLOW, "both tries of both requests at the origin")
        time.sleep(0.3 * h.SLOW)  # the hedges' 503s are held by now
        sigterm = time.monotonic()
        draining.terminate()
        # the first tries hang past the drain (try_timeout 5s, drain 2s):
        # without an answer held, both would be cut when it ends
        r = conns["/h/drain-kept"].read_response()
        h.eq((r.status, r.body, r.header("Retry-Attempts")), (503, b"status 503\n", "2"),
             "kept: status, body, Retry-Attempts")
        r = conns["/h/drain-large"].read_response()
        h.eq((r.status, len(r.body), r.header("Retry-Attempts")), (503, big, "2"),
             "too large to keep: status, body length, Retry-Attempts")
        took = time.monotonic() - sigterm
        h.ok(took < 2.0 * h.SLOW, "answered %.2f s after SIGTERM, within the 2 s drain" % took)
        for c in conns.values():
            c.close()
        t.stop_proxy(draining)
        for path in conns:
            f = h.access_fields(draining.access_one(path))
            h.eq((f.get("gave_up"), f.get("note")), ("deadline", "draining"),
                 "%s: gave_up, note" % path)

    @t.check("a hedge starts at another resolved address than the try it races")
    def _():
        twin_a.script("/h/twins", ["/delay/2"])
        twin_b.script("/h/twins", ["/delay/2"])
        r = h.fetch(proxy.port(2), "GET", "/h/twins", "twins.example", timeout=10 * h.SLOW)
        h.eq(r.status, 200, "status")
        h.eq((len(twin_a.requests_for("/h/twins")), len(twin_b.requests_for("/h/twins"))),
             (1, 1), "requests at 127.0.0.1 and 127.0.0.2")

    @t.check("retry.try_timeout on a route overrides limits.try_timeout")
    def _():
        origin.script("/quick/slow", ["/delay/1"])
        r = h.fetch(port, "GET", "/quick/slow", "api.example")
        h.check_error_response(r, 504, ["timeout"])
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.ok(r.elapsed < 1.0 * h.SLOW, "504 after %.2f s (two 300 ms tries)" % r.elapsed)
        origin.script("/plain/slow", ["/delay/1"])
        r = h.fetch(port, "GET", "/plain/slow", "api.example")
        h.eq((r.status, r.body), (200, b"delayed\n"), "the default route waits 1 s out")

    @t.check("a kept 503 that breaks off after its hedge failed: each try keeps its record")
    def _():
        # an origin of its own, stopped to break the kept response off
        breaking = t.origin(name="breaking")
        trail = t.proxy(CONFIG_TRAIL, ORIGIN=breaking.port)
        breaking.script("/h/trail", ["/gate/trail?status=503&first=10&rest=100&delay=0.4",
                                     "/reset/request?delay=0.6"])
        with h.RawConn(trail.port(), timeout=15 * h.SLOW) as c:
            c.send(h.request("GET", "/h/trail", "api.example"))
            breaking.gate("trail").wait_reached(5 * h.SLOW)
            h.wait_until(lambda: len(breaking.requests_for("/h/trail")) == 2, 5 * h.SLOW,
                         "the hedge to reach the origin")
            time.sleep(1.0 * h.SLOW)  # the hedge's reset has come by now
            breaking.stop()  # a FIN in the kept 503's body
            r = c.read_response()
        h.eq(r.status, 502, "status")
        h.eq(tries_of(trail, "/h/trail"), "reset -> wait 0ms -> hedge:reset", "tries")

    @t.check("a kept 503 whose hedge times out decides: Retry-After past the deadline, retry.on")
    def _():
        kept_origin = t.origin(name="kept")
        kept = t.proxy(CONFIG_KEPT, ORIGIN=kept_origin.port)
        kept_origin.script("/h/ra", ["/status/503?retry_after=5&delay=0.5", "/hang",
                                     "/bytes/10"])
        r = h.fetch(kept.port(), "GET", "/h/ra", "api.example")
        h.eq(r.status, 503, "status: Retry-After 5 s would pass the 3 s deadline")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.eq(len(kept_origin.requests_for("/h/ra")), 2, "requests at the origin")
        h.eq(h.access_fields(kept.access_one("/h/ra")).get("gave_up"), "deadline", "gave_up")
        kept_origin.script("/o/x", ["/status/503?delay=0.5", "/hang", "/bytes/10"])
        r = h.fetch(kept.port(), "GET", "/o/x", "api.example")
        h.eq((r.status, len(r.body)), (200, 10), "status: the 503 is in retry.on, the timeout not")
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        kept_origin.script("/long/ra", ["/status/503?retry_after=3&delay=0.5", "/hang",
                                        "/bytes/10"])
        r = h.fetch(kept.port(), "GET", "/long/ra", "api.example")
        h.eq((r.status, len(r.body)), (200, 10), "status: Retry-After 3 s from 0.5 s has passed")
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.ok(r.elapsed < 5.5 * h.SLOW, "answered after %.2f s; the hedge ended at 4.2 s, and "
             "a Retry-After counted from then would end at 7.2 s" % r.elapsed)

    @t.check("at the connection cap, a hedge closes an idle pooled connection to race")
    def _():
        capped_origin = t.origin(name="capped")
        capped = t.proxy(CONFIG_CAP, ORIGIN=capped_origin.port)
        # two requests at once leave both places to idle pooled connections
        conns = [h.RawConn(capped.port()) for _ in range(2)]
        for i, c in enumerate(conns):
            c.send(h.request("GET", "/h/fill%d?delay=0.1" % i, "api.example"))
        for c in conns:
            h.eq(c.read_response().status, 404, "a request filling the pool")
            c.close()
        h.eq(len(capped_origin.connections), 2, "connections at the origin")
        idle = list(capped_origin.connections)
        capped_origin.script("/h/capped", ["/delay/2", "/bytes/10"])
        r = h.fetch(capped.port(), "GET", "/h/capped", "api.example")
        h.eq((r.status, len(r.body)), (200, 10), "status and body length")
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.ok(r.elapsed < 1.0 * h.SLOW, "answered after %.2f s; the first try takes 2 s"
             % r.elapsed)
        h.eq(tries_of(capped, "/h/capped"), "cancelled -> wait 0ms -> hedge:200", "tries")
        first, hedge = capped_origin.requests_for("/h/capped")
        h.ok(first.conn_id in [c.id for c in idle], "the first try went on a pooled connection")
        h.ok(hedge.conn_id not in [c.id for c in idle], "the hedge went on a new connection")
        # the origin's thread for it sees the close a moment after the proxy
        h.wait_until(lambda: any(c.closed.is_set() and c.id != first.conn_id for c in idle),
                     5, "the other idle connection closed to make room")


    # a cold upstream whose name answers slowly: the first try's connect is
    # the one in doubt when the hedge falls due
    stub = dnsstub.DnsStub(answers={"slowdns.test": "127.0.0.1"}).start()
    t.defer(stub.stop)
    stub.delay("slowdns.test", 0.6)
    resolv = stub.write_resolv_conf(t.tmp, "slow-resolv.conf", "timeout:3 attempts:1")
    cold = t.proxy(CONFIG_TRAIL.replace("http://127.0.0.1:@ORIGIN@", "http://slowdns.test:@ORIGIN@"),
                   env={"RETRYPROXY_RESOLV_CONF": resolv}, ORIGIN=origin.port)

    @t.check("a hedge due while the upstream is in doubt starts once it is proven")
    def _():
        origin.script("/h/cold", ["/delay/2", "/bytes/10"])
        r = h.fetch(cold.port(0), "GET", "/h/cold", "api.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status and Retry-Attempts")
        h.ok(r.elapsed < 1.6 * h.SLOW, "answered after %.2f s; the first try takes 2.6 s"
             % r.elapsed)


h.run(scenario, __doc__, timeout=120)
