#!/usr/bin/env python3
"""Scenario: limits.max_upstream_connections caps the connections to one
upstream.

Client: raw connections to sidecar listeners. (1) Six GETs of a slow path
(0.6 s before the head), sent 50 ms apart on six connections, to an
upstream capped at 2. (2) With both connections busy again, a seventh GET
whose client hangs up while it waits. (3) On a second listener and
upstream: two slow GETs (2 s) hold both places and a third GET, on a route
with try_timeout 500ms, waits past it. (4) With both connections idle in
the pool, a POST (not safe to repeat on a pooled connection).
Origin: the recording test origin, which counts its connections; a second
origin for (3) and (4).
Must hold: (1) the origin never has more than 2 connections open at once
and sees exactly 2 in all (the waiting requests reuse them); all six get
200, and reach the origin in the order they were sent; while requests wait,
retryproxy_upstream_waiting counts them. (2) the origin never sees the
request whose client left, nor one whose client pipelined a POST past the
proxy's input limit behind it and then left: that one leaves the queue
while both places are still busy (its close, hidden behind the unread
POST, is looked for every 500 ms), not when a place frees. (3) the waiting GET gets 504 naming the busy
upstream after about try_timeout (Retry-Attempts: 0, no retry), and never
reaches the origin; the slow ones get their 200. (4) the POST gets 200 on a
new connection, and the proxy closed one idle connection to make room. The limit is written by /config.
(5) A second proxy, capped at 1: a GET that got 503 and whose retry waits
for the connection a 5 s request holds gives up at its route's 2 s
deadline with the kept 503 (gave_up=deadline; the retry never reaches the
origin); a retry that waits about 1 s for the connection shows that time in
the trail's wait before the next try, and no more than 2.5 s; a request
on a route whose deadline (1s) comes 1 ms before its try_timeout gets the
deadline's 504 (gave_up=deadline), however late its timer fires. (6) There, with a request waiting
for the connection, a reload raises the cap to 10: the waiting request and
a new one are answered at once, while the first still holds its connection.
(7) There, a client pipelines 30 GETs (50 ms each at the origin) and a POST,
which cannot reuse a pooled connection, waits for the connection: it
reaches the origin next, not after the flow. (8) A third proxy, capped at 1,
to a TLS upstream with a route that does not verify: an idle connection
pooled by the verifying route is closed to make room for a request of the
other route, which gets 200 at once, not a 504 after try_timeout.
(9) A forward proxy, capped at 1: after a GET to http://LOCALHOST:port/,
a GET and a POST to http://localhost:port/ get 200 at once (the GET on the
pooled connection), not a 504 after try_timeout: a host's spellings in any
case are one upstream, with one cap and one pool; a GET to
http://localhost.:port/ (an absolute name, resolved without the search
list) is an upstream of its own, with its own cap and pool, and gets 200
at once too; an upstream configured as
https://LocalHost:port, and a forward request for https://LOCALHOST.:port/,
are verified as, and send SNI, localhost. (10) A fourth proxy, capped at 2:
a GET whose pooled connection turns out stale while the other connection
is busy and another request waits goes again at once, in the place its
stale connection held, ahead of that request (which came after it), on a
new connection; the waiting request then gets the retry's connection once
it is pooled. (11) A fifth proxy, capped at 2, with both
connections idle in the pool, lowered to 1 by a reload: while one request
holds a connection, another waits for it rather than taking the second
idle one; the origin never serves two at once. (12) A sixth proxy, capped
at 3, with three connections idle in the pool, lowered to 1 by a reload: a
POST, which may not reuse one, closes the idle ones that keep the upstream
at or over the new cap and gets 200 at once on a new connection, not a 504
after try_timeout.
"""

import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@ORIGIN2@
admin: 127.0.0.1:@PORT2@
limits:
  drain_timeout: 2s
  max_upstream_connections: 2
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
routes:
  - name: tight
    match: { path_prefix: /t/ }
    retry: { try_timeout: 500ms, max_attempts: 3, initial_backoff: 100ms, jitter: 0s }
"""

CONFIG_ONE = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  max_upstream_connections: @CAP@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    try_timeout: 10s
routes:
  - name: deadline
    match: { path_prefix: /d/ }
    retry: { deadline: 2s, try_timeout: 10s, initial_backoff: 500ms, jitter: 0s, max_attempts: 5 }
  - name: waits
    match: { path_prefix: /w/ }
    retry: { try_timeout: 10s, initial_backoff: 500ms, jitter: 0s, max_attempts: 3 }
  - name: edge
    match: { path_prefix: /e/ }
    retry: { deadline: 1s, try_timeout: 1001ms, initial_backoff: 100ms, jitter: 0s }
"""

CONFIG_FORWARD = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
tls:
  ca_file: @CA@
limits:
  max_upstream_connections: 1
defaults:
  retry: { try_timeout: 2s, max_attempts: 1 }
"""

CONFIG_KEYS = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://localhost:@ORIGIN@
admin: 127.0.0.1:@PORT1@
tls:
  ca_file: @CA@
limits:
  max_upstream_connections: 1
defaults:
  retry: { try_timeout: 2s, max_attempts: 1 }
routes:
  - name: unverified
    match: { path_prefix: /u/ }
    tls: { verify: false }
"""


def max_open_at_once(origin):
    """The most connections the origin had open at one time, from when it
    accepted and saw the end of each."""
    events = []
    for c in origin.connections:
        events.append((c.accepted_at, 1))
        if c.closed_at is not None:
            events.append((c.closed_at, -1))
    most = now = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


def scenario(t):
    origin = t.origin(name="capped-2")
    origin2 = t.origin(name="capped-1")
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, ORIGIN2=origin2.port)

    def metric(name):
        r = h.fetch(proxy.port(2), "GET", "/metrics", "127.0.0.1")
        m = re.search(r"^%s (\d+)$" % name, r.body.decode(), re.M)
        return int(m.group(1)) if m else None

    @t.check("cap 2: six slow GETs at once use 2 connections, all 200, in the order sent")
    def _():
        origin.clear()
        conns = [h.RawConn(proxy.port(0), timeout=20 * h.SLOW) for _ in range(6)]
        for c in conns:
            t.defer(c.close)
        for i, c in enumerate(conns):
            c.send(h.request("GET", "/echo?c=cap%d&delay=0.6" % i, "app.example"))
            time.sleep(0.05)
        waiting = h.wait_until(lambda: metric("retryproxy_upstream_waiting"), 2 * h.SLOW,
                               "retryproxy_upstream_waiting to count the waiting requests")
        h.ok(1 <= waiting <= 4, "retryproxy_upstream_waiting %r while 4 wait" % waiting)
        statuses = [c.read_response(timeout=20 * h.SLOW).status for c in conns]
        h.eq(statuses, [200] * 6, "statuses")
        h.eq([q.query.get("c") for q in origin.requests], ["cap%d" % i for i in range(6)],
             "order the origin received them in")
        h.eq(len(origin.connections), 2, "connections the origin accepted")
        h.ok(max_open_at_once(origin) <= 2, "the origin had %d connections open at once"
             % max_open_at_once(origin))
        h.eq(metric("retryproxy_upstream_waiting"), 0, "retryproxy_upstream_waiting afterwards")

    @t.check("cap 2: a waiting request whose client leaves never reaches the origin")
    def _():
        origin.clear()
        busy = [h.RawConn(proxy.port(0), timeout=20 * h.SLOW) for _ in range(2)]
        for i, c in enumerate(busy):
            t.defer(c.close)
            c.send(h.request("GET", "/echo?c=busy%d&delay=0.8" % i, "app.example"))
        origin.wait_for(lambda o: len(o.requests) == 2, 5 * h.SLOW, "both busy requests")
        leaver = h.RawConn(proxy.port(0))
        leaver.send(h.request("GET", "/echo?c=leaver", "app.example"))
        h.wait_until(lambda: metric("retryproxy_upstream_waiting") == 1, 2 * h.SLOW,
                     "the leaver to wait")
        leaver.close()
        h.wait_until(lambda: metric("retryproxy_upstream_waiting") == 0, 2 * h.SLOW,
                     "the leaver to be dropped from the queue")
        for c in busy:
            h.eq(c.read_response(timeout=10 * h.SLOW).status, 200, "busy request")
        time.sleep(0.3)
        h.eq(sorted(q.query.get("c") for q in origin.requests), ["busy0", "busy1"],
             "requests at the origin")
        h.eq(h.fetch(proxy.port(0), "GET", "/echo?c=after", "app.example").status, 200,
             "a request afterwards")

    @t.check("cap 2: a waiting request whose client pipelined past the input limit and left is "
             "dropped from the queue while both places stay busy, not when one frees")
    def _():
        origin.clear()
        busy = [h.RawConn(proxy.port(0), timeout=30 * h.SLOW) for _ in range(2)]
        for i, c in enumerate(busy):
            t.defer(c.close)
            c.send(h.request("GET", "/echo?c=long%d&delay=%d" % (i, 6 * h.SLOW), "app.example"))
        origin.wait_for(lambda o: len(o.requests) == 2, 5 * h.SLOW, "both busy requests")
        leaver = h.RawConn(proxy.port(0))
        # the GET is whole; the POST behind it is more than the proxy's
        # input takes, less than it and its kernel do: the client's FIN
        # reaches the proxy's kernel behind bytes the proxy does not read
        body = b"x" * (256 << 10)
        leaver.send(h.request("GET", "/echo?c=pipelined-leaver", "app.example") +
                    h.request("POST", "/echo?c=behind", "app.example", body=body))
        h.wait_until(lambda: metric("retryproxy_upstream_waiting") == 1, 2 * h.SLOW,
                     "the leaver to wait")
        h.wait_until(lambda: h.send_queue(leaver.local_port, proxy.port(0)) == 0, 5 * h.SLOW,
                     "the pipelined body all in the proxy's kernel")
        leaver.close()
        left = time.monotonic()
        h.wait_until(lambda: metric("retryproxy_upstream_waiting") == 0, 3 * h.SLOW,
                     "the leaver to be dropped from the queue while both places are busy")
        h.ok(time.monotonic() - left < 5 * h.SLOW, "dropped before a place freed")
        h.eq(len(origin.requests), 2, "requests at the origin while the busy ones run")
        for c in busy:
            h.eq(c.read_response(timeout=30 * h.SLOW).status, 200, "busy request")
        time.sleep(0.3)
        h.eq(sorted(q.query.get("c") for q in origin.requests), ["long0", "long1"],
             "requests at the origin")

    @t.check("both places busy, try_timeout 500ms: a request waiting past it gets 504, not retried")
    def _():
        origin2.clear()
        holds = [h.RawConn(proxy.port(1), timeout=20 * h.SLOW) for _ in range(2)]
        for i, c in enumerate(holds):
            t.defer(c.close)
            c.send(h.request("GET", "/echo?c=hold%d&delay=2" % i, "app.example"))
        origin2.wait_for(lambda o: len(o.requests) == 2, 5 * h.SLOW, "the two slow requests")
        start = time.monotonic()
        r = h.fetch(proxy.port(1), "GET", "/t/waiter", "app.example", timeout=10 * h.SLOW)
        elapsed = time.monotonic() - start
        h.check_error_response(r, 504, ["busy", "max_upstream_connections"])
        h.eq(r.header("Retry-Attempts"), "0", "Retry-Attempts")
        h.ok(0.4 <= elapsed <= 1.5 * h.SLOW, "504 after %.2fs (try_timeout 500ms)" % elapsed)
        for c in holds:
            h.eq(c.read_response(timeout=10 * h.SLOW).status, 200, "a slow request")
        h.eq(origin2.requests_for("/t/waiter"), [], "the waiter at the origin")
        h.eq(len(origin2.connections), 2, "connections at the origin")

    @t.check("both places idle in the pool: a POST closes one and opens its own")
    def _():
        old = list(origin2.connections)
        h.eq(len([c for c in old if not c.closed.is_set()]), 2, "idle pooled connections open")
        r = h.fetch(proxy.port(1), "POST", "/echo?c=post", "app.example", body=b"x")
        h.eq(r.status, 200, "POST status")
        h.eq(len(origin2.connections), 3, "connections at the origin")
        h.wait_until(lambda: len([c for c in old if c.closed.is_set()]) == 1, 3 * h.SLOW,
                     "one idle connection closed by the proxy to make room")
        post = origin2.requests_for("/echo")[-1]
        h.ok(post.conn_id not in [c.id for c in old], "the POST went on a new connection")

    @t.check("/config writes max_upstream_connections")
    def _():
        r = h.fetch(proxy.port(2), "GET", "/config", "127.0.0.1")
        h.ok(re.search(r"^\s+max_upstream_connections: 2$", r.body.decode(), re.M),
             "max_upstream_connections in /config")

    origin1 = t.origin(name="capped-one")
    one = t.proxy(CONFIG_ONE, ORIGIN=origin1.port, CAP=1)

    def one_metric(name):
        r = h.fetch(one.port(1), "GET", "/metrics", "127.0.0.1")
        m = re.search(r"^%s (\d+)$" % name, r.body.decode(), re.M)
        return int(m.group(1)) if m else None

    def hold_connection(delay, tag):
        """A GET that holds the one connection for delay seconds."""
        return h.hold_request(t, one.port(), origin1, delay, tag)

    @t.check("cap 1, deadline 2s: a retry waiting for the connection gives up at the deadline "
             "with the last response kept (gave_up=deadline), never reaching the origin after it")
    def _():
        origin1.script("/d/late", [503])
        b = h.RawConn(one.port(), timeout=20 * h.SLOW)
        t.defer(b.close)
        start = time.monotonic()
        b.send(h.request("GET", "/d/late", "app.example"))
        origin1.wait_for(lambda o: len(o.requests_for("/d/late")) == 1, 5 * h.SLOW,
                         "the first try of /d/late")
        a = hold_connection(5, "holder-d")
        r = b.read_response()
        elapsed = time.monotonic() - start
        h.eq(r.status, 503, "the kept 503 at the deadline")
        h.ok(elapsed <= 3.5 * h.SLOW, "answered after %.2fs (deadline 2s)" % elapsed)
        f = h.access_fields(one.access_one("/d/late"))
        h.eq(f.get("gave_up"), "deadline", "gave_up")
        h.eq(a.read_response().status, 200, "the holder")
        h.eq(len(origin1.requests_for("/d/late")), 1, "tries of /d/late at the origin")

    @t.check("cap 1, deadline 1s, try_timeout 1001ms: a request waiting for the connection "
             "ends at the deadline, which comes first, however late its timer fires")
    def _():
        a = hold_connection(3, "holder-e")
        r = h.fetch(one.port(), "GET", "/e/edge", "app.example", timeout=20 * h.SLOW)
        h.check_error_response(r, 504, ("before the retry deadline",))
        h.eq(h.access_fields(one.access_one("/e/edge")).get("gave_up"), "deadline", "gave_up")
        h.eq(a.read_response().status, 200, "the holder")
        h.eq(origin1.requests_for("/e/edge"), [], "the waiter at the origin")

    @t.check("cap 1: the time a retry waits for the connection is in the trail's wait")
    def _():
        origin1.script("/w/trail", [503, 200])
        b = h.RawConn(one.port(), timeout=20 * h.SLOW)
        t.defer(b.close)
        b.send(h.request("GET", "/w/trail", "app.example"))
        origin1.wait_for(lambda o: len(o.requests_for("/w/trail")) == 1, 5 * h.SLOW,
                         "the first try of /w/trail")
        a = hold_connection(1.5, "holder-w")
        h.eq(b.read_response().status, 200, "the retry's 200")
        h.eq(a.read_response().status, 200, "the holder")
        f = h.access_fields(one.access_one("/w/trail"))
        m = re.match(r"503 -> wait ([\d.]+)(ms|s) -> 200$", f["tries"])
        h.ok(m, "tries %r" % f["tries"])
        waited = float(m.group(1)) * (1 if m.group(2) == "s" else 0.001)
        # the holder's 1.5 s bounds it from above too: a wait counted twice
        # (the backoff and the queue overlapping) reads 2 s or more
        h.ok(1.2 <= waited <= 2.5, "the trail's wait %.2fs covers the backoff and the queue "
             "(~1.5s), once" % waited)


    @t.check("cap 1 raised to 10 by a reload: requests waiting, and new ones, go at once")
    def _():
        a = hold_connection(4, "holder-r")
        b = h.RawConn(one.port(), timeout=20 * h.SLOW)
        t.defer(b.close)
        b.send(h.request("GET", "/echo?c=queued-r", "app.example"))
        h.wait_until(lambda: one_metric("retryproxy_upstream_waiting") == 1, 2 * h.SLOW,
                     "the request to wait")
        capped = one.config_text
        start = time.monotonic()
        one.reload(capped.replace("max_upstream_connections: 1",
                                  "max_upstream_connections: 10"))
        h.eq(b.read_response().status, 200, "the request waiting at the reload")
        r = h.fetch(one.port(), "GET", "/echo?c=after-r", "app.example", timeout=20 * h.SLOW)
        elapsed = time.monotonic() - start
        h.eq(r.status, 200, "a request after the reload")
        h.ok(elapsed < 2.5, "both answered %.2fs after the reload, while the holder (4s) "
             "still holds its connection" % elapsed)
        h.eq(a.read_response().status, 200, "the holder")
        one.reload(capped)


    @t.check("cap 1 with a steady flow of pipelined GETs: a POST waiting for the connection "
             "gets its turn in order, not after the flow")
    def _():
        origin1.clear()
        flow = h.RawConn(one.port(), timeout=20 * h.SLOW)
        t.defer(flow.close)
        n = 30
        flow.send(b"".join(h.request("GET", "/echo?c=flow%d&delay=0.05" % i, "app.example")
                           for i in range(n)))
        origin1.wait_for(lambda o: len(o.requests) >= 3, 5 * h.SLOW, "the flow to start")
        post = h.RawConn(one.port(), timeout=20 * h.SLOW)
        t.defer(post.close)
        post.send(h.request("POST", "/echo?c=post-flow", "app.example", body=b"x"))
        h.wait_until(lambda: one_metric("retryproxy_upstream_waiting") == 1, 2 * h.SLOW,
                     "the POST to wait")
        ahead = len(origin1.requests)
        h.eq(post.read_response().status, 200, "the POST")
        statuses = [flow.read_response().status for _ in range(n)]
        h.eq(statuses, [200] * n, "the flow's statuses")
        order = [q.query.get("c") for q in origin1.requests]
        h.ok(order.index("post-flow") <= ahead + 1,
             "the POST reached the origin after %d GETs of the flow that came after it: %r"
             % (order.index("post-flow") - ahead, order))

    certs = t.certs()
    origin_tls = t.origin(tls=(certs.server, certs.server_key), name="capped-tls")
    keys = t.proxy(CONFIG_KEYS, ORIGIN=origin_tls.port, CA=certs.ca)

    @t.check("cap 1: an idle connection pooled by a route with other TLS settings gives up its "
             "place to a request that cannot reuse it")
    def _():
        h.eq(h.fetch(keys.port(), "GET", "/echo?c=verified", "localhost").status, 200,
             "a GET on the verifying route")
        first = list(origin_tls.connections)
        h.eq(len(first), 1, "connections at the origin")
        origin_tls.script("/u/x", [200])
        r = h.fetch(keys.port(), "GET", "/u/x", "localhost", timeout=20 * h.SLOW)
        h.eq(r.status, 200, "a GET on the route with verify: false")
        h.ok(r.elapsed < 1.5 * h.SLOW, "answered after %.2fs (try_timeout 2s)" % r.elapsed)
        h.wait_until(lambda: first[0].closed.is_set(), 3 * h.SLOW,
                     "the idle connection closed by the proxy to make room")

    spelled = t.proxy(CONFIG_KEYS.replace("https://localhost:", "https://LocalHost:"),
                      ORIGIN=origin_tls.port, CA=certs.ca)

    @t.check("upstream https://LocalHost: SNI and the certificate check use localhost")
    def _():
        before = len(origin_tls.connections)
        r = h.fetch(spelled.port(), "GET", "/echo?c=spelled", "app.example")
        h.eq(r.status, 200, "GET through the verifying route (body %r)" % r.body)
        h.eq([c.sni for c in origin_tls.connections[before:]], ["localhost"], "SNI sent")

    origin_fw = t.origin(name="capped-spellings")
    forward = t.proxy(CONFIG_FORWARD, CA=certs.ca)

    @t.check("forward, cap 1: LOCALHOST and localhost are one upstream, one cap, one pool; "
             "localhost. is another")
    def _():
        def get(host, path, method="GET", body=b""):
            url = "http://%s:%d%s" % (host, origin_fw.port, path)
            r = h.fetch(forward.port(), method, url, "%s:%d" % (host, origin_fw.port),
                        body=body, timeout=20 * h.SLOW)
            h.eq(r.status, 200, "%s %s (body %r)" % (method, url, r.body))
            h.ok(r.elapsed < 1.5 * h.SLOW, "%s %s answered after %.2fs (try_timeout 2s)"
                 % (method, url, r.elapsed))
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts of %s %s" % (method, url))
            return r

        get("LOCALHOST", "/echo?c=upper")
        get("localhost", "/echo?c=lower")
        h.eq(len(origin_fw.connections), 1, "connections at the origin: the GET reused it")
        get("localhost", "/echo?c=post", "POST", b"x")
        h.eq(len(origin_fw.connections), 2, "connections at the origin")
        get("localhost.", "/echo?c=dot")
        h.eq(len(origin_fw.connections), 3, "connections at the origin: localhost. has its own")
        hosts = [q.header("Host") for q in origin_fw.requests]
        h.eq(hosts, ["LOCALHOST:%d" % origin_fw.port, "localhost:%d" % origin_fw.port,
                     "localhost:%d" % origin_fw.port, "localhost.:%d" % origin_fw.port],
             "Host headers as the client wrote them")
        r = h.fetch(forward.port(1), "GET", "/upstreams", "127.0.0.1")
        names = [line.split()[0] for line in r.body.decode().splitlines() if line]
        h.eq(sorted(names), ["http://localhost.:%d" % origin_fw.port,
                             "http://localhost:%d" % origin_fw.port], "/upstreams")

    @t.check("forward: https://LOCALHOST.:port/ is verified as, and sends SNI, localhost")
    def _():
        before = len(origin_tls.connections)
        url = "https://LOCALHOST.:%d/echo?c=spelled-fw" % origin_tls.port
        r = h.fetch(forward.port(), "GET", url, "LOCALHOST.:%d" % origin_tls.port)
        h.eq(r.status, 200, "GET %s (body %r)" % (url, r.body))
        h.eq([c.sni for c in origin_tls.connections[before:]], ["localhost"], "SNI sent")

    origin_st = t.origin(name="capped-stale")
    two = t.proxy(CONFIG_ONE, ORIGIN=origin_st.port, CAP=2)

    def two_metric(name):
        r = h.fetch(two.port(1), "GET", "/metrics", "127.0.0.1")
        m = re.search(r"^%s (\d+)$" % name, r.body.decode(), re.M)
        return int(m.group(1)) if m else None

    @t.check("cap 2: the retry of a stale pooled connection goes at once, ahead of a request "
             "waiting since, on a new connection")
    def _():
        warm = [h.RawConn(two.port(), timeout=20 * h.SLOW) for _ in range(2)]
        for i, c in enumerate(warm):
            t.defer(c.close)
            c.send(h.request("GET", "/echo?c=warm%d&delay=0.3" % i, "app.example"))
        for c in warm:
            h.eq(c.read_response().status, 200, "a warming GET")
        h.eq(len(origin_st.connections), 2, "connections pooled")
        holder = h.RawConn(two.port(), timeout=20 * h.SLOW)
        t.defer(holder.close)
        holder.send(h.request("GET", "/echo?c=holder&delay=5", "app.example"))
        origin_st.wait_for(lambda o: any(q.query.get("c") == "holder" for q in o.requests),
                           5 * h.SLOW, "the holder at the origin")
        # the pooled connection the GET takes is reset a second after its request
        origin_st.script("/w/stale", ["/reset/request?delay=1", 200])
        stale = h.RawConn(two.port(), timeout=20 * h.SLOW)
        t.defer(stale.close)
        stale.send(h.request("GET", "/w/stale", "app.example"))
        origin_st.wait_for(lambda o: len(o.requests_for("/w/stale")) == 1, 5 * h.SLOW,
                           "the first try of /w/stale")
        waiter = h.RawConn(two.port(), timeout=20 * h.SLOW)
        t.defer(waiter.close)
        waiter.send(h.request("GET", "/echo?c=waiter&delay=0.5", "app.example"))
        h.wait_until(lambda: two_metric("retryproxy_upstream_waiting") == 1, 2 * h.SLOW,
                     "the waiter to wait")
        r = stale.read_response()
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "the stale GET's retry")
        h.eq(waiter.read_response().status, 200, "the waiter")
        tries = origin_st.requests_for("/w/stale")
        h.eq(len(tries), 2, "tries of /w/stale at the origin")
        order = [q for q in origin_st.requests
                 if q.path == "/w/stale" or q.query.get("c") == "waiter"]
        h.eq([q.path for q in order], ["/w/stale", "/w/stale", "/echo"],
             "the retry before the waiter at the origin")
        waited = order[2]
        h.ok(tries[1].conn_id not in [c.id for c in origin_st.connections[:2]],
             "the retry went on a connection pooled before")
        h.eq(waited.conn_id, tries[1].conn_id,
             "the waiter on the retry's connection, pooled after it")
        h.eq(holder.read_response().status, 200, "the holder")

    def fill_then_lower(proxy, origin, cap, tag):
        """cap requests at once leave cap connections idle in the pool; then
        a reload lowers the cap to 1."""
        fill = [h.hold_request(t, proxy.port(), origin, 0.5, "%s-%d" % (tag, i))
                for i in range(cap)]
        for c in fill:
            h.eq(c.read_response().status, 200, "a request filling the pool")
        h.eq(len(origin.connections), cap, "connections the origin saw")
        proxy.reload(proxy.config_text.replace("max_upstream_connections: %d" % cap,
                                               "max_upstream_connections: 1"))

    origin_low = t.origin(name="capped-lowered")
    low = t.proxy(CONFIG_ONE, ORIGIN=origin_low.port, CAP=2)

    @t.check("cap 2 lowered to 1 by a reload, two connections idle in the pool: a second "
             "request waits for the one in use, not on the other idle connection")
    def _():
        fill_then_lower(low, origin_low, 2, "fill")
        holder = h.hold_request(t, low.port(), origin_low, 1, "low-holder")
        r = h.fetch(low.port(), "GET", "/echo?c=low-next", "app.example", timeout=20 * h.SLOW)
        h.eq(r.status, 200, "the second request")
        h.eq(holder.read_response().status, 200, "the holder")
        held = [q for q in origin_low.requests if q.query.get("c") == "low-holder"][0]
        nxt = [q for q in origin_low.requests if q.query.get("c") == "low-next"][0]
        h.ok(held.finished_at is not None and nxt.received_at >= held.finished_at - 0.05,
             "the second request reached the origin %.2fs after the holder's response "
             "(not while it was held)" % (nxt.received_at - (held.finished_at or 0)))

    origin_over = t.origin(name="capped-over")
    over = t.proxy(CONFIG_ONE, ORIGIN=origin_over.port, CAP=3)

    @t.check("cap 3 lowered to 1 by a reload, three connections idle in the pool: a POST "
             "closes them to make room and gets 200 at once")
    def _():
        fill_then_lower(over, origin_over, 3, "over")
        r = h.fetch(over.port(), "POST", "/echo?c=over-post", "app.example", body=b"x",
                    timeout=20 * h.SLOW)
        h.eq(r.status, 200, "the POST (body %r)" % r.body)
        post = [q for q in origin_over.requests if q.query.get("c") == "over-post"][0]
        h.eq(post.conn_id, 4, "the POST's connection at the origin (a new one)")
        h.wait_until(lambda: all(c.closed.is_set() for c in origin_over.connections[:3]),
                     3 * h.SLOW, "the three idle connections closed by the proxy")


h.run(scenario, __doc__)
