#!/usr/bin/env python3
"""Scenario: a route's path_prefix cannot be slipped past by spelling.

Client: PUT requests (idempotent by the default map) through a forward
proxy (raw sockets), to paths under /v1/charges/ written as the origin
reads them but not byte for byte: an escaped unreserved letter (%63 for c),
escaped dots (%2e%2e), dot segments (x/../), a doubled slash (merged by
nginx and Apache); and to paths that are another resource (%2563, an
escaped '%'; %2F, an escaped '/', data in one segment for many APIs).
Origin: answers the first try of each path 503, then 200.
Config: defaults retry 503 up to 3 tries with no wait; the route payments
(path_prefix /v1/charges/) has max_attempts: 1; the route cards is
written /v1/%63ards/ in the config.
Must hold: every spelling of /v1/charges/... gets the 503 at once (one try,
route=payments in the access log), and the origin sees the target exactly
as the client wrote it; the other resources take the default route and are
retried to 200; /v1/cards/ matches the route written /v1/%63ards/; a
path with a ".." after an empty segment (nginx, which merges slashes
first, and RFC 3986 readers resolve it differently) or a '%' that is not
an escape gets 400 and reaches no origin.
"""

import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    on: [503]
    max_attempts: 3
    initial_backoff: 0ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: payments
    match: { path_prefix: /v1/charges/ }
    retry: { max_attempts: 1 }
  - name: cards
    match: { path_prefix: /v1/%63ards/ }
    retry: { max_attempts: 1 }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def put(path):
        """PUT path against a 503-then-200 script; the response, the
        origin's requests for it and the request's access-log fields."""
        origin.script(path.split("?", 1)[0], [503, 200])
        r = h.fetch(proxy.port(), "PUT", origin.url(path), host, body=b"amount=10")
        fields = h.access_fields(proxy.access_one(path.split("?", 1)[0]))
        return r, origin.requests_for(path.split("?", 1)[0]), fields

    def on_route(path, route):
        r, reqs, fields = put(path)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"),
             "%s: status, Retry-Attempts (max_attempts 1)" % path)
        h.eq([q.target for q in reqs], [path],
             "%s: the origin saw one try, the target as written" % path)
        h.eq(fields.get("route"), route, "%s: route in the access log" % path)

    def off_route(path):
        r, reqs, fields = put(path)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "%s: status, Retry-Attempts (default route)" % path)
        h.eq(len(reqs), 2, "%s: tries the origin saw" % path)
        h.eq(fields.get("route"), "default", "%s: route in the access log" % path)

    @t.check("/v1/charges/ as written: one try, route payments")
    def _():
        on_route("/v1/charges/a", "payments")

    @t.check("%63 for c, %2e%2e, x/../ segments, //: still route payments, sent as written")
    def _():
        on_route("/v1/%63harges/b", "payments")
        on_route("/v1/%63%68arges/c?x=1", "payments")
        on_route("/v1/x/../charges/d", "payments")
        on_route("/v1/x/%2e%2E/charges/e", "payments")
        on_route("/v1/./charges/f", "payments")
        on_route("/v1//charges/j", "payments")

    @t.check("an escaped '%' or '/' is another resource: default route, retried")
    def _():
        off_route("/v1/%2563harges/g")
        off_route("/v1%2Fcharges/h")

    @t.check("a path origins read two ways, or with a stray %: 400, never sent upstream")
    def _():
        for path in ("/v1/charges//../x", "/v1/charges/y%", "/v1/charges/%zz"):
            origin.clear()
            r = h.fetch(proxy.port(), "PUT", origin.url(path), host, body=b"amount=10")
            h.check_error_response(r, 400)
            time.sleep(0.2 * h.SLOW)
            h.eq(origin.requests, [], "%s: requests the origin saw" % path)

    @t.check("a prefix written /v1/%63ards/ matches /v1/cards/")
    def _():
        on_route("/v1/cards/i", "cards")


if __name__ == "__main__":
    h.run(scenario)
