#!/usr/bin/env python3
"""Scenario: tries that fail without a response, and which are retried.

Client: GETs and POSTs through a forward proxy (raw sockets) to a closed
port and to origin paths scripted per try; plain-HTTP requests to sidecar
listeners whose upstreams are TLS origins.
Origin: per try, resets after reading the request (/reset/request), never
answers (/hang), sends a malformed status line (/bad/status), answers 503,
or answers normally; a fresh origin closes or resets connections at accept;
a TLS origin whose certificate names only wrong.example; a TLS origin with a
good certificate that resets its first connections during the handshake.
Defaults: max_attempts 3, backoff 100ms doubling, no jitter, try_timeout 1s,
connect_timeout 600ms; upstream health off (down_after: 0), so that every
request makes its own tries (test_health.py covers the shared view).
Must hold: a refused connect is retried up to max_attempts for GET and for
POST (the request never left), then 502 naming the refusal and "3 attempts",
Retry-Attempts: 3, and the access line has attempts=3 and three "refused"
tries; a connect that never completes (a full listen queue) runs into
connect_timeout (600ms) three times, for GET and for POST, then a 502 (a
connect timeout is a connect failure) naming the timeout; a reset after the request is retried for GET (the origin sees
every try, then 200) but not for POST (origin sees exactly 1, client gets
502, gave_up=not_idempotent); a silent origin gives 504 after three
try_timeouts for GET, after one for POST; a malformed response head is
retried for GET like a reset and not for POST; a kept 503 is what the client
gets when the later tries reset or time out, and when a later failure is
not retryable on its route (on: [503], then a reset); connections closed or reset at
accept are retried; a certificate for the wrong host gives 502 at once
(Retry-Attempts: 1, one connection, tries "tls-verify"); a handshake reset
is retried even for a POST, whose body then arrives once and whole; a pooled
connection that fails when reused is tried again at once (no backoff) on a
new connection, logged as "stale", while a POST never takes a pooled
connection.
"""

import hashlib
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: https://127.0.0.1:@WRONG@
  - address: 127.0.0.1:@PORT2@
    upstream: https://127.0.0.1:@GOOD@
log: { level: info, format: text }
tls: { ca_file: @CA@ }
limits:
  drain_timeout: 2s
  try_timeout: 1s
  connect_timeout: 600ms
health: { down_after: 0 }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    multiplier: 2
    max_backoff: 1s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: only503
    match: { path_prefix: /only503/ }
    retry: { on: [503] }
  - name: long-wait
    match: { path_prefix: /stale/ }
    retry: { initial_backoff: 2s, max_backoff: 2s }
"""

TRY_TIMEOUT = 1.0
CONNECT_TIMEOUT = 0.6


def scenario(t):
    certs = t.certs()
    origin = t.origin()
    wrong = t.origin(tls=(certs.wrong, certs.wrong_key), name="wrong")
    good = t.origin(tls=(certs.server, certs.server_key), name="good")
    proxy = t.proxy(CONFIG, WRONG=wrong.port, GOOD=good.port, CA=certs.ca)
    dead = h.closed_port()

    def send(method, path, body=b"", o=None):
        o = o or origin
        return h.fetch(proxy.port(), method, o.url(path), o.authority, body=body)

    def seen(path, o=None, settle=0.4):
        time.sleep(settle * h.SLOW)
        return len((o or origin).requests_for(path))

    def access(tag):
        return h.access_fields(proxy.access_one(tag))

    def outcomes(tag):
        """The outcome of each try in the access-log trail of tag, without the waits."""
        return access(tag)["tries"].split(" -> ")[::2]

    def scripted(path, steps, attempts, method="GET", body=b""):
        """Send method to path, scripted at the origin with steps; check
        it took `attempts` tries (Retry-Attempts and the requests the origin
        saw) and return the response."""
        origin.script(path, steps)
        r = send(method, path, body=body)
        h.eq(r.header("Retry-Attempts"), str(attempts), "Retry-Attempts (status %s)" % r.status)
        h.eq(seen(path), attempts, "requests the origin saw")
        return r

    def kept_503(r):
        """r is the first try's 503, kept while later tries failed."""
        h.eq((r.status, r.header_all("X-Try"), r.body), (503, ["1"], b"kept-503"), "status, X-Try, body")

    @t.check("GET to a closed port: 3 refused tries, then 502 naming the refusal and 3 attempts")
    def _():
        r = h.fetch(proxy.port(), "GET", "http://127.0.0.1:%d/f/refused-get" % dead,
                    "127.0.0.1:%d" % dead)
        h.check_error_response(r, 502, ["refused", "connect"])
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.ok(b"3 attempts" in r.body, "body should say 3 attempts: %r" % r.body)
        f = access("/f/refused-get")
        h.eq((f["status"], f["attempts"]), ("502", "3"), "access status, attempts")
        h.eq(f["tries"], "refused -> wait 100ms -> refused -> wait 200ms -> refused", "access tries")

    @t.check("POST to a closed port is repeated too (it never left): 502 after 3 attempts")
    def _():
        r = h.fetch(proxy.port(), "POST", "http://127.0.0.1:%d/f/refused-post" % dead,
                    "127.0.0.1:%d" % dead, body=b"a=1&b=2")
        h.check_error_response(r, 502, ["refused", "connect"])
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        f = access("/f/refused-post")
        h.eq((f["method"], f["status"], f["attempts"]), ("POST", "502", "3"),
             "access method, status, attempts")
        h.eq(f["tries"].split(" -> ")[::2], ["refused"] * 3, "tries in %r" % f["tries"])

    @t.check("GET and POST to a port that never completes a connect: 3 connect timeouts each")
    def _():
        port = h.blackhole(t)
        for method, tag in (("GET", "/f/ct-get"), ("POST", "/f/ct-post")):
            r = h.fetch(proxy.port(), method, "http://127.0.0.1:%d%s" % (port, tag),
                        "127.0.0.1:%d" % port, body=b"x=1" if method == "POST" else b"")
            h.check_error_response(r, 502, ["timeout", "time"])
            h.eq(r.header("Retry-Attempts"), "3", "%s: Retry-Attempts" % method)
            h.ok(r.elapsed >= 3 * CONNECT_TIMEOUT + 0.3 - 0.05,
                 "%s: answered after %.2f s; 3 x 600 ms + waits is 2.1 s" % (method, r.elapsed))
            h.eq(outcomes(tag), ["connect-timeout"] * 3, "%s: tries" % method)

    @t.check("GET, origin resets after reading the request twice, then 200: 200 after 3 tries")
    def _():
        r = scripted("/f/reset-get", ["/reset/request", "/reset/request", 200], 3)
        h.eq(r.status, 200, "status")
        h.eq(outcomes("/f/reset-get"), ["reset", "reset", "200"], "tries")

    @t.check("GET, origin resets every try: 502 after 3, origin saw 3")
    def _():
        r = scripted("/f/reset-all", ["/reset/request"], 3)
        h.check_error_response(r, 502, ["reset", "closed"])
        h.ok(b"3 attempts" in r.body, "body should say 3 attempts: %r" % r.body)

    @t.check("POST without a condition, origin resets after reading it: not repeated, 502")
    def _():
        r = scripted("/f/reset-post", ["/reset/request", 200], 1, "POST", b"charge=1")
        h.check_error_response(r, 502, ["reset", "closed"])
        f = access("/f/reset-post")
        h.eq((f["attempts"], f.get("gave_up")), ("1", "not_idempotent"), "access attempts, gave_up")

    @t.check("GET to a silent origin: 504 after 3 try_timeouts (origin saw 3)")
    def _():
        r = scripted("/f/hang-get", ["/hang"], 3)
        h.check_error_response(r, 504, ["timeout", "time"])
        h.ok(b"3 attempts" in r.body, "body should say 3 attempts: %r" % r.body)
        h.ok(r.elapsed >= 3 * TRY_TIMEOUT + 0.3 - 0.05,
             "504 after %.2f s; 3 x 1 s + waits is 3.3 s" % r.elapsed)
        h.eq(outcomes("/f/hang-get"), ["timeout"] * 3, "tries")

    @t.check("POST to a silent origin: 504 after one try_timeout (origin saw 1)")
    def _():
        r = scripted("/f/hang-post", ["/hang"], 1, "POST", b"x=1")
        h.check_error_response(r, 504, ["timeout", "time"])
        h.ok(r.elapsed < TRY_TIMEOUT + 0.5 * h.SLOW, "504 after %.2f s" % r.elapsed)

    @t.check("GET, malformed status line twice, then 200: retried like a reset, 200 after 3")
    def _():
        r = scripted("/f/bad-get", ["/bad/status", "/bad/status", 200], 3)
        h.eq(r.status, 200, "status")
        h.eq(outcomes("/f/bad-get"), ["malformed", "malformed", "200"], "tries")

    @t.check("POST, malformed status line: not repeated, 502")
    def _():
        origin.script("/f/bad-post", ["/bad/status", 200])
        r = send("POST", "/f/bad-post", body=b"x=1")
        h.check_error_response(r, 502)
        h.eq(seen("/f/bad-post"), 1, "requests the origin saw")

    @t.check("503, then reset, reset: the client gets the kept 503 with Retry-Attempts: 3")
    def _():
        # conn_close: the resets come on new connections, not as a stale pooled one
        r = scripted("/f/kept-reset", ["/status/503?hdr=X-Try:1&body=kept-503&conn_close=1",
                                       "/reset/request", "/reset/request"], 3)
        kept_503(r)
        h.eq(access("/f/kept-reset")["tries"], "503 -> wait 100ms -> reset -> wait 200ms -> reset",
             "tries")

    @t.check("503, then two try_timeouts: the client gets the kept 503, not a 504")
    def _():
        r = scripted("/f/kept-hang", ["/status/503?hdr=X-Try:1&body=kept-503", "/hang"], 3)
        kept_503(r)

    @t.check("route with on: [503]: 503, then a reset (not retryable there): the kept 503, 2 attempts")
    def _():
        # the 503 closes its connection, so the reset comes on a new one
        # (on a pooled one it would count as stale and go again at once)
        r = scripted("/only503/a", ["/status/503?hdr=X-Try:1&body=kept-503&conn_close=1",
                                    "/reset/request", 200], 2)
        kept_503(r)

    @t.check("connections closed, then reset at accept: GET retried, 200 after 3")
    def _():
        fresh = t.origin(name="fresh")
        fresh.on_accept(["close", "reset"])
        r = send("GET", "/bytes/10", o=fresh)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts")
        h.eq(len(fresh.connections), 3, "connections the origin accepted")

    @t.check("pooled connection reset when reused: GET goes again at once on a new connection")
    def _():
        fresh = t.origin(name="pool")
        fresh.script("/stale/a", [200, "/reset/request", 200])
        r1 = send("GET", "/stale/a", o=fresh)
        h.eq(r1.status, 200, "first GET (leaves its connection in the pool)")
        r = send("GET", "/stale/a", o=fresh)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        reqs = fresh.requests_for("/stale/a")
        h.eq(len(reqs), 3, "requests the origin saw")
        h.eq(reqs[1].conn_id, reqs[0].conn_id, "the second GET went on the pooled connection")
        h.ok(reqs[2].conn_id not in (reqs[0].conn_id,), "the retry took a new connection")
        gap = h.try_gaps(reqs[1:])[0]
        h.ok(gap < 1.0, "the retry came %.2f s after the stale connection failed; no 2 s backoff "
             "is due for a stale pooled connection" % gap)
        # the line is written at the end of the loop pass that sent the answer
        h.wait_until(lambda: len(proxy.access_for("/stale/a")) >= 2, 5 * h.SLOW,
                     "the second access line for /stale/a")
        lines = proxy.access_for("/stale/a")
        h.eq(len(lines), 2, "access lines for /stale/a")
        f = h.access_fields(lines[1])
        h.eq((f["attempts"], f["tries"].split(" -> ")[::2]), ("2", ["stale", "200"]), "attempts, tries")

    @t.check("a POST after a GET to the same origin does not take the pooled connection")
    def _():
        fresh = t.origin(name="pool2", echo_unknown=True)
        r1 = send("GET", "/get-first", o=fresh)
        h.eq(r1.status, 200, "GET")
        r2 = send("POST", "/post-after", body=b"x=1", o=fresh)
        h.eq(r2.status, 200, "POST")
        get_conn = fresh.requests_for("/get-first")[0].conn_id
        post_conn = fresh.requests_for("/post-after")[0].conn_id
        h.ok(post_conn != get_conn, "the POST went on the GET's pooled connection %d" % get_conn)

    @t.check("TLS certificate for the wrong host: 502 at once naming it, 1 attempt, 1 connection")
    def _():
        r = h.fetch(proxy.port(1), "GET", "/f/tls-wrong", "app.local")
        h.check_error_response(r, 502, ["certificate", "verif", "host"])
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.ok(r.elapsed < 1.0 * h.SLOW, "502 after %.2f s" % r.elapsed)
        time.sleep(0.4 * h.SLOW)
        h.eq(len(wrong.connections), 1, "connections the wrong-host origin saw")
        h.eq(len(wrong.requests), 0, "requests the wrong-host origin saw")
        h.eq(access("/f/tls-wrong")["tries"], "tls-verify", "tries")

    @t.check("TLS handshake reset twice: a POST is repeated (never sent); body arrives once, whole")
    def _():
        body = bytes(range(256)) * 1200
        good.on_accept(["reset", "reset"])
        r = h.fetch(proxy.port(2), "POST", "/echo?f=tls-post", "app.local", body=body)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "3"), "status, Retry-Attempts (%r)" % r)
        reqs = good.requests_for("/echo")
        h.eq(len(reqs), 1, "requests the origin got")
        h.eq(reqs[0].body_sha256, hashlib.sha256(body).hexdigest(), "body sha256 at the origin")
        h.eq(outcomes("f=tls-post"), ["tls", "tls", "200"], "tries")


h.run(scenario, __doc__)
