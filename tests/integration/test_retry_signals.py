#!/usr/bin/env python3
"""Scenario: what a response says about retrying it: retry-after-ms,
x-should-retry, and Retry-Attempt on the tries after the first.

Client: GETs and a POST through a forward proxy (raw sockets).
Origin: scripted per path: 503 or 429 with retry-after-ms (alone, or with
a longer or shorter Retry-After), 503 with x-should-retry: false, 409 and
200 with x-should-retry: true, then 200; it records every request head.
Proxy: retry.on [503, reset] (not 429, not 409), max_attempts 3, 50ms
waits, no jitter, retry_after honor. Route /ignore/ has retry_after:
ignore; route /attempt/ has attempt_header: true.
Must hold:
- retry-after-ms: 700 lengthens the 50ms wait to at least 700ms; with
  Retry-After: 1 as well the longer (1 s) counts; with Retry-After: 0 the
  600ms of retry-after-ms counts; under retry_after: ignore the wait stays
  near 50ms;
- a field repeated: the longest of the waits the copies ask for counts
  (retry-after-ms 100 then 600; Retry-After 1 then 0);
- x-should-retry: false on a 503: passed on at once, one try; so is one
  whose copies say true, then false (false wins), and one whose one line
  says `true, false`; `TRUE,true` on a 409 retries it;
- x-should-retry: true on a 409 (not in retry.on) of a GET: retried, and
  on a 429 with retry-after-ms the wait is honoured too; on a POST (not
  idempotent) it is not retried; on a 200 it changes nothing;
- attempt_header: the first try carries no Retry-Attempt, the second
  `Retry-Attempt: 2`, the third `Retry-Attempt: 3`, each once; other
  routes send none.
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
    on: [503, reset]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: ignore
    match: { path_prefix: /ignore/ }
    retry: { retry_after: ignore }
  - name: attempt
    match: { path_prefix: /attempt/ }
    retry: { attempt_header: true }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def send(path, steps, method="GET"):
        origin.script(path, list(steps))
        r = h.fetch(proxy.port(), method, origin.url(path), host,
                    body=b"x" if method == "POST" else b"")
        time.sleep(0.2 * h.SLOW)
        return r, origin.requests_for(path)

    def gap_of(path, steps, low, high, what):
        r, reqs = send(path, steps)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "%s: status, Retry-Attempts, requests" % what)
        gap = h.try_gaps(reqs)[0]
        h.ok(low <= gap <= high, "%s: waited %.0f ms, want %.0f to %.0f ms"
             % (what, gap * 1000, low * 1000, high * 1000))

    @t.check("retry-after-ms: 700 lengthens the 50ms wait")
    def _():
        gap_of("/ms/a", ["/status/503?retry_after_ms=700", 200], 0.65, 0.7 + 0.4 * h.SLOW,
               "retry-after-ms 700")

    @t.check("with Retry-After as well the longer wait counts")
    def _():
        gap_of("/ms/b", ["/status/503?retry_after_ms=300&retry_after=1", 200], 0.95,
               1 + 0.4 * h.SLOW, "Retry-After 1, retry-after-ms 300")
        gap_of("/ms/c", ["/status/503?retry_after_ms=600&retry_after=0", 200], 0.55,
               0.6 + 0.4 * h.SLOW, "Retry-After 0, retry-after-ms 600")

    @t.check("a repeated Retry-After or retry-after-ms: the longest wait counts")
    def _():
        gap_of("/ms/d", ["/status/503?retry_after_ms=100&hdr=retry-after-ms:600", 200], 0.55,
               0.6 + 0.4 * h.SLOW, "retry-after-ms 100, then 600")
        gap_of("/ms/e", ["/status/503?retry_after=1&hdr=Retry-After:0", 200], 0.95,
               1 + 0.4 * h.SLOW, "Retry-After 1, then 0")

    @t.check("retry_after: ignore leaves retry-after-ms out too")
    def _():
        gap_of("/ignore/a", ["/status/503?retry_after_ms=2000", 200], 0.02, 0.05 + 0.4 * h.SLOW,
               "ignored retry-after-ms 2000")

    @t.check("x-should-retry: false on a 503: passed on at once")
    def _():
        r, reqs = send("/sr/false", ["/status/503?should_retry=false", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests")
        h.eq(r.header("x-should-retry"), "false", "the header reaches the client")
        f = h.access_fields(proxy.access_one("/sr/false"))
        h.eq(f.get("gave_up"), None, "not a give-up: the response said final")

    @t.check("x-should-retry: true, then false: in doubt, passed on at once")
    def _():
        r, reqs = send("/sr/both", ["/status/503?should_retry=true&hdr=x-should-retry:false", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests")

    @t.check("x-should-retry: a list on one line reads as that many copies")
    def _():
        # RFC 9110 section 5.3: a line joined from two copies means the same
        r, reqs = send("/sr/line", ["/status/503?should_retry=true,%20false", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "true, false on a 503: status, Retry-Attempts, requests")
        r, reqs = send("/sr/line409", ["/status/409?should_retry=TRUE,true", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "TRUE,true on a 409: status, Retry-Attempts, requests")

    @t.check("x-should-retry: true on a 409 of a GET: retried; on a 429, retry-after-ms too")
    def _():
        r, reqs = send("/sr/true409", ["/status/409?should_retry=true", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "409: status, Retry-Attempts, requests")
        f = h.access_fields(proxy.access_one("/sr/true409"))
        h.eq(f["tries"].split(" -> ")[0], "409", "the trail starts with the 409")
        gap_of("/sr/true429", ["/status/429?should_retry=true&retry_after_ms=500", 200], 0.45,
               0.5 + 0.4 * h.SLOW, "429 with x-should-retry and retry-after-ms 500")

    @t.check("x-should-retry: true on a POST's 409: not retried (not idempotent)")
    def _():
        r, reqs = send("/sr/post", ["/status/409?should_retry=true", 200], method="POST")
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (409, "1", 1),
             "status, Retry-Attempts, requests")
        f = h.access_fields(proxy.access_one("/sr/post"))
        h.eq(f.get("gave_up"), "not_idempotent", "gave_up")

    @t.check("x-should-retry: true on a 200: it is the answer; TRUE and tRuE read alike")
    def _():
        r, reqs = send("/sr/ok", ["/status/200?should_retry=true", 503])
        h.eq((r.status, len(reqs)), (200, 1), "200: status, requests")
        r, reqs = send("/sr/case", ["/status/404?should_retry=tRuE", 200])
        h.eq((r.status, len(reqs)), (200, 2), "404 with tRuE: status, requests")

    @t.check("attempt_header: no Retry-Attempt on the first try, then 2 and 3")
    def _():
        r, reqs = send("/attempt/a", [503, 503, 503])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "3", 3),
             "status, Retry-Attempts, requests")
        h.eq([q.header_all("Retry-Attempt") for q in reqs], [[], ["2"], ["3"]],
             "Retry-Attempt per try")
        h.ok(reqs[1].head.endswith(b"Retry-Attempt: 2\r\n\r\n"), "the field ends the head")

    @t.check("attempt_header: a reset first try, then Retry-Attempt: 2; other routes send none")
    def _():
        r, reqs = send("/attempt/b", ["/reset/request", 200])
        h.eq([q.header_all("Retry-Attempt") for q in reqs], [[], ["2"]], "Retry-Attempt per try")
        r, reqs = send("/plain/a", [503, 200])
        h.eq([q.header_all("Retry-Attempt") for q in reqs], [[], []], "no Retry-Attempt")


h.run(scenario, __doc__)
