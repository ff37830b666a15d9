#!/usr/bin/env python3
"""Scenario: what the access log and the metrics say for endings that come
after a retryable answer: one passed on as final while a hedge raced it,
one whose body stalled while it was kept, and a retry's final response
that the client leaves in the middle of.

Client: raw-socket GETs to a sidecar listener; curl to the admin listener
for /metrics.
Origin: the test origin with scripted paths: a slow first try that is
reset after 1 s, and a 503 on its hedge with a 5000-byte body, chunked or
with a Content-Length; a 503 whose body stops after 10 of its 20 bytes (a gate
never released), then 200; a 503, then a 200 whose body stops after 10 of
its 20 bytes.
Proxy: limits.retry_response_buffer 1KiB; route /h/ hedges after 200ms
(max 1); route /to/ retries on [503, timeout] only, with try_timeout
500ms; the default route retries on everything, 100ms waits, no jitter.
Must hold:
- a 503 over retry_response_buffer on the hedge waits for the first try
  in flight, and once that fails goes to the client as final (README
  "Limits"), and the trail ends with it whatever its framing (found over
  the buffer at its head or while its body is read):
  tries="reset -> wait 0ms -> hedge:503" for a chunked body as for one
  with a Content-Length;
- a kept 503 whose body stalls for try_timeout is a timeout, as a relayed
  body's stall is (README "Resuming broken downloads": `timeout` for a body
  that stalled): on a route whose retry.on is [503, timeout] it is retried
  (200, Retry-Attempts: 2, tries="timeout -> wait 100ms -> 200"), and
  retryproxy_upstream_errors_total counts a timeout, not a reset;
- a client that leaves in the body of the 200 its retry got ends a request
  whose retrying had ended: no gave_up in its access line, and
  retryproxy_retries_given_up_total{reason="client_gone"} does not count it.
"""

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, try_timeout: 10s, retry_response_buffer: 1KiB }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: hedged
    match: { path_prefix: /h/ }
    retry: { hedge: { after: 200ms, max: 1 } }
  - name: timeout-only
    match: { path_prefix: /to/ }
    retry: { on: [503, timeout], try_timeout: 500ms }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    port = proxy.port(0)

    def metric(name, labels):
        """One series' value, 0 while the route has had no request."""
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        return h.metric(text, name, labels) or 0.0

    def tries_of(tag):
        return h.access_fields(proxy.access_one(tag))["tries"]

    @t.check("a 503 over retry_response_buffer on the hedge: final, and last in the trail")
    def _():
        for path, step in (("/h/over-length", "/bytes/5000?status=503"),
                           ("/h/over-chunked", "/chunked/5000?status=503")):
            origin.script(path, ["/reset/request?delay=1", step])
            r = h.fetch(port, "GET", path, "api.example")
            h.eq((r.status, len(r.body), r.header("Retry-Attempts")), (503, 5000, "2"),
                 "%s: status, body length, Retry-Attempts" % path)
            # the first try may go on a pooled connection: its reset is "stale"
            h.ok(tries_of(path) in ("reset -> wait 0ms -> hedge:503",
                                    "stale -> wait 0ms -> hedge:503"),
                 "%s: tries %r" % (path, tries_of(path)))

    @t.check("a kept 503 whose body stalls is a timeout: retried on [503, timeout]")
    def _():
        timeouts = metric("retryproxy_upstream_errors_total", '{kind="timeout"}')
        resets = metric("retryproxy_upstream_errors_total", '{kind="reset"}')
        origin.script("/to/stall", ["/gate/stall?first=10&rest=10&status=503", 200])
        r = h.fetch(port, "GET", "/to/stall", "api.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq(len(origin.requests_for("/to/stall")), 2, "origin requests")
        h.eq(tries_of("/to/stall"), "timeout -> wait 100ms -> 200", "tries")
        h.eq(metric("retryproxy_upstream_errors_total", '{kind="timeout"}') - timeouts, 1.0,
             "upstream errors of kind timeout")
        h.eq(metric("retryproxy_upstream_errors_total", '{kind="reset"}') - resets, 0.0,
             "upstream errors of kind reset")
        origin.gate("stall").release()

    @t.check("a client gone in the body of its retry's 200: no gave_up")
    def _():
        gone = metric("retryproxy_retries_given_up_total", '{route="default",reason="client_gone"}')
        origin.script("/left/mid-body", [503, "/gate/left?first=10&rest=10"])
        with h.RawConn(port) as c:
            c.send(h.request("GET", "/left/mid-body", "api.example"))
            head = c.read_head()
            h.eq((head.status, head.header("Retry-Attempts")), (200, "2"),
                 "status, Retry-Attempts")
            origin.gate("left").wait_reached(5 * h.SLOW)
        f = h.access_fields(proxy.access_one("/left/mid-body"))
        h.eq((f["tries"], f.get("gave_up")), ("503 -> wait 100ms -> 200", None),
             "tries, gave_up")
        h.eq(metric("retryproxy_retries_given_up_total",
                    '{route="default",reason="client_gone"}') - gone, 0.0,
             "given up for client_gone")
        origin.gate("left").release()


h.run(scenario, __doc__)
