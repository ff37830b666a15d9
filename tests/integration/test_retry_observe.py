#!/usr/bin/env python3
"""Scenario: retry.mode: observe counts and logs what would be retried and
retries nothing.

Client: GETs, a POST and a PUT with a large body through a forward proxy
(raw sockets); curl to the admin listener for /metrics.
Origin: scripted per path: 503 then 200, a reset after reading the request
then 200; for the PUT a plain 200 after reading the body. A refused port
stands for an upstream that is down.
Proxy: defaults retry.on [503, reset, connect-failure, timeout],
max_attempts 3, 200ms waits, mode: observe; route /enforce/ sets mode:
enforce. health: down_after 1, hold: true, deadline 10s.
Must hold:
- a GET answered 503 gets the 503 at once (Retry-Attempts: 1, one request
  at the origin); the access line says would_retry=status and no gave_up;
  retryproxy_would_retry_total{route="default",cause="status"} counts it and
  retryproxy_retries_total does not;
- a reset after the request: 502 at once, would_retry=reset;
- a POST (not idempotent) answered 503: no would_retry, gave_up=not_idempotent;
- the same 503 GET on /enforce/ is retried (the control);
- a PUT's body streams: the origin has the request head before the client
  sent the rest of the body (on /enforce/ it is kept whole first, so the
  origin sees nothing until the body is complete);
- an upstream that refuses connections: 502 at once with
  would_retry=connect; once it is marked down the next request is not held
  (502 at once, well within the 10s deadline);
- backoff_pending stays 0 throughout.
"""

import re
import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 1, probe_interval: 5s, hold: true }
defaults:
  retry:
    on: [503, reset, connect-failure, timeout]
    max_attempts: 3
    initial_backoff: 200ms
    multiplier: 1
    jitter: 0s
    deadline: 10s
    mode: observe
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: enforce
    match: { path_prefix: /enforce/ }
    retry: { mode: enforce }
"""


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def metrics():
        return h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()

    def send(method, path, steps, body=b""):
        origin.script(path, list(steps))
        r = h.fetch(proxy.port(), method, origin.url(path), host, body=body)
        time.sleep(0.4 * h.SLOW)
        return r, origin.requests_for(path)

    @t.check("503 to a GET: passed at once, would_retry=status, counted, not retried")
    def _():
        # conn_close: no pooled connection is left for the next check, whose
        # reset must be on a new one (a pooled connection found closed is
        # replaced at once in every mode, as a stale one)
        r, reqs = send("GET", "/o/a", ["/status/503?conn_close=1", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests the origin saw")
        f = h.access_fields(proxy.access_one("/o/a"))
        h.eq((f.get("would_retry"), f.get("gave_up"), f["attempts"]), ("status", None, "1"),
             "access would_retry, gave_up, attempts")
        text = metrics()
        h.eq(metric(text, "retryproxy_would_retry_total", '{route="default",cause="status"}'),
             1.0, "would_retry_total status")
        h.eq(metric(text, "retryproxy_retries_total", '{route="default",cause="status"}'), 0.0,
             "retries_total status")

    @t.check("reset after the request: 502 at once, would_retry=reset")
    def _():
        r, reqs = send("GET", "/o/reset", ["/reset/request", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (502, "1", 1),
             "status, Retry-Attempts, requests")
        h.eq(h.access_fields(proxy.access_one("/o/reset")).get("would_retry"), "reset",
             "access would_retry")
        h.eq(metric(metrics(), "retryproxy_would_retry_total",
                    '{route="default",cause="reset"}'), 1.0, "would_retry_total reset")

    @t.check("POST answered 503: no would_retry, gave_up=not_idempotent")
    def _():
        r, reqs = send("POST", "/o/post", [503, 200], body=b"x")
        h.eq((r.status, len(reqs)), (503, 1), "status, requests")
        f = h.access_fields(proxy.access_one("/o/post"))
        h.eq((f.get("would_retry"), f.get("gave_up")), (None, "not_idempotent"),
             "access would_retry, gave_up")

    @t.check("the same GET on a route with mode: enforce is retried")
    def _():
        r, reqs = send("GET", "/enforce/a", [503, 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "status, Retry-Attempts, requests")
        h.eq(h.access_fields(proxy.access_one("/enforce/a")).get("would_retry"), None,
             "no would_retry under enforce")

    def partial_put(path, wait):
        """Send a PUT head and the first 1000 of 200000 body bytes; return
        whether the origin had the request within wait seconds, before the
        rest was sent, and the final status."""
        body = b"b" * 200000
        origin.script(path, [200])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("PUT", origin.url(path), host, body=body)[:-len(body) + 1000])
            try:
                origin.wait_for(lambda o: o.requests_for(path), timeout=wait)
                early = True
            except AssertionError:
                early = False
            c.send(body[1000:])
            r = c.read_response("PUT")
        return early, r.status

    @t.check("observe streams a PUT body: the origin has the head before the body is complete")
    def _():
        early, status = partial_put("/o/stream", 5 * h.SLOW)
        h.eq((early, status), (True, 200), "origin had the request early, final status")
        h.eq(origin.requests_for("/o/stream")[0].body_len, 200000, "body length at the origin")

    @t.check("... while enforce keeps it whole first (the control)")
    def _():
        early, status = partial_put("/enforce/stream", 1)
        h.eq((early, status), (False, 200), "origin had the request early, final status")

    @t.check("a refused upstream: 502 at once, would_retry=connect; down, the next is not held")
    def _():
        port = h.closed_port()
        url = "http://127.0.0.1:%d/down/a" % port
        r = h.fetch(proxy.port(), "GET", url, "127.0.0.1:%d" % port)
        h.eq((r.status, r.header("Retry-Attempts")), (502, "1"), "first: status, attempts")
        h.eq(h.access_fields(proxy.access_one("/down/a")).get("would_retry"), "connect",
             "access would_retry")
        start = time.monotonic()
        r = h.fetch(proxy.port(), "GET", url.replace("/a", "/b"), "127.0.0.1:%d" % port)
        took = time.monotonic() - start
        h.eq(r.status, 502, "second: status")
        h.ok(took < 2 * h.SLOW, "second answered in %.2fs, not held toward the 10s deadline"
             % took)
        text = metrics()
        h.eq(metric(text, "retryproxy_backoff_pending"), 0.0, "backoff_pending")
        h.eq(metric(text, "retryproxy_retries_total", '{route="default",cause="connect"}'), 0.0,
             "retries_total connect")


h.run(scenario, __doc__)
