#!/usr/bin/env python3
"""Scenario: sidecar (reverse) mode and route selection.

Client: curl sends origin-form requests to two sidecar listeners, with
various Host headers, paths and methods.
Origin: three origins A, B and C echoing every path. Listener 0 has upstream A, listener
1 has upstream http://localhost:C. Routes, in order: exact host
exact.example -> B; host *.wild.example -> C; host api.example with
path_prefix /v2/ -> B; path_prefix /split/ for POST -> B; path_prefix
/split/ -> C; exact.example again -> C (shadowed); path_prefix
/keep-listener/ with no upstream.
Must hold: each request reaches the origin its first matching route names
(host compared without port and case-insensitively; *.suffix matches
subdomains at a label boundary only), unmatched requests and routes without
an upstream go to the listener's upstream, and each origin gets
Host: <its upstream authority> and the client's path and query unchanged.
"""

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@A@
  - address: 127.0.0.1:@PORT1@
    upstream: http://localhost:@C@
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 1
routes:
  - name: exact-host
    match: { host: exact.example }
    upstream: http://127.0.0.1:@B@
  - name: wildcard-host
    match:
      host: "*.wild.example"
    upstream: http://127.0.0.1:@C@
  - name: host-and-path
    match: { host: api.example, path_prefix: /v2/ }
    upstream: http://127.0.0.1:@B@
  - name: post-only
    match:
      path_prefix: /split/
      methods: [POST]
    upstream: http://127.0.0.1:@B@
  - name: split-rest
    match: { path_prefix: /split/ }
    upstream: http://127.0.0.1:@C@
  - name: shadowed
    match: { host: exact.example }
    upstream: http://127.0.0.1:@C@
  - name: no-upstream
    match: { path_prefix: /keep-listener/ }
"""


def scenario(t):
    origins = {name: t.origin(name="origin-" + name, echo_unknown=True) for name in "ABC"}
    proxy = t.proxy(CONFIG, A=origins["A"].port, B=origins["B"].port, C=origins["C"].port)
    counter = [0]

    def route(host, path, expect, listener=0, method="GET", expect_host=None):
        """Send one request and assert which origin got it, and how."""
        counter[0] += 1
        tag = "id=%d" % counter[0]
        target = path + ("&" if "?" in path else "?") + tag
        args = ["-X", method, "-H", "Host: " + host, proxy.listener_url(listener, target)]
        if method == "POST":
            args[2:2] = ["--data-binary", "body"]
        r = h.curl(*args)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status for %s %s Host %s (%r)"
             % (method, target, host, r))
        got = {name: [q for q in org.requests if q.query.get("id") == str(counter[0])]
               for name, org in origins.items()}
        where = [name for name, reqs in got.items() if reqs]
        h.eq(where, [expect], "origin that got %s %s with Host %s" % (method, path, host))
        seen = got[expect][0]
        h.eq(seen.target, target, "target at the origin")
        h.eq(seen.method, method, "method at the origin")
        want_host = expect_host or origins[expect].authority
        h.eq(seen.header_all("Host"), [want_host], "Host at the origin")

    @t.check("no route matches: the listener's upstream (A) with Host: 127.0.0.1:A")
    def _():
        route("unrelated.example", "/echo", "A")

    @t.check("exact host goes to its route (B), not to the later shadowing route")
    def _():
        route("exact.example", "/echo", "B")

    @t.check("host match ignores the port and letter case")
    def _():
        route("EXACT.Example:8080", "/echo", "B")

    @t.check("Host with an empty port (RFC 3986: the default one) is served and routed by its name")
    def _():
        route("exact.example:", "/echo", "B")
        route("unrelated.example:", "/echo", "A")

    @t.check("*.suffix matches subdomains at any depth")
    def _():
        route("a.wild.example", "/echo", "C")
        route("deep.a.wild.example:81", "/echo", "C")

    @t.check("*.suffix does not match across a label boundary (xwild.example)")
    def _():
        route("xwild.example", "/echo", "A")

    @t.check("host and path_prefix must both match")
    def _():
        route("api.example", "/v2/echo", "B")
        route("api.example", "/v1/echo", "A")
        route("other.example", "/v2/echo", "A")

    @t.check("methods: POST /split/ takes the POST-only route, GET falls through to the next")
    def _():
        route("x.example", "/split/echo", "B", method="POST")
        route("x.example", "/split/echo", "C", method="GET")

    @t.check("path_prefix is a prefix of the path, not of the text (/splitx does not match /split/)")
    def _():
        route("x.example", "/splitx/echo", "A")

    @t.check("a route without upstream uses the listener's upstream")
    def _():
        route("x.example", "/keep-listener/echo", "A", listener=0)
        route("x.example", "/keep-listener/echo", "C", listener=1,
              expect_host="localhost:%d" % origins["C"].port)

    @t.check("second listener's default upstream http://localhost:C gets Host: localhost:C")
    def _():
        route("unrelated.example", "/echo", "C", listener=1,
              expect_host="localhost:%d" % origins["C"].port)

    @t.check("routes apply on every listener (exact.example on listener 1 goes to B)")
    def _():
        route("exact.example", "/echo", "B", listener=1)


h.run(scenario, __doc__)
