#!/usr/bin/env python3
"""Scenario: requests that waited for a fresh upstream's first connect,
which then marks the upstream down, are held for it like any other
request and take their places among max_pending_retries.

Client: six GETs at once on raw sockets through a sidecar listener whose
upstream is https://127.0.0.1:<port>, a socket that accepts and never
answers (the TLS handshake hangs until connect_timeout, 500ms).
Origin: none; that silent socket.
Config: health.down_after 1 (hold: true, the default), probe_interval 60s,
limits.max_pending_retries 2, retry.deadline 4s, max_attempts 1.
Must hold: one request connects, five wait for it; its connect fails and
marks the upstream down; its own client gets the connect's 502 at once.
Of the five that waited, two are now held for the down upstream (the
pending places): retryproxy_held_requests 2 (retryproxy_backoff_pending
counts backoffs only: 0); they get the 502 naming the upstream as down at their deadline
(gave_up=deadline); the other three get that 502 at once with
gave_up=budget, as a request arriving at a down upstream past the cap
would. Before, all five stayed held without a place, each until its
deadline.
"""

import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://127.0.0.1:@SILENT@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { connect_timeout: 500ms, drain_timeout: 1s, max_pending_retries: 2 }
health: { down_after: 1, probe_interval: 60s }
defaults:
  retry: { max_attempts: 1, deadline: 4s }
"""


def gauges(admin):
    body = h.curl(admin + "/metrics", check=True).body.decode()
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^retryproxy_(backoff_pending|held_requests) (\d+)$', body, re.M)}


def scenario(t):
    silent = h.silent_port()
    proxy = t.proxy(CONFIG, SILENT=silent)
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    clients = [h.RawConn(proxy.port(0), timeout=10 * h.SLOW) for _ in range(6)]
    for c in clients:
        t.defer(c.close)
    for i, c in enumerate(clients):
        c.send(h.request("GET", "/x?c=%d" % i, "app.example"))
    h.wait_until(lambda: gauges(admin).get("held_requests") == 5, 5 * h.SLOW,
                 "five requests waiting for the first connect (%r)" % gauges(admin))
    proxy.wait_log(r"upstream https://127\.0\.0\.1:\d+ is down", timeout=5 * h.SLOW)
    down_at = time.monotonic()

    @t.check("once the connect marks the upstream down: two held, none in backoff")
    def _():
        h.wait_until(lambda: gauges(admin) == {"held_requests": 2, "backoff_pending": 0},
                     2 * h.SLOW, "held 2, in backoff 0 (%r)" % gauges(admin))

    def answer(i):
        r = clients[i].read_response()
        return r, time.monotonic() - down_at
    answers = h.in_threads(6, answer, 10 * h.SLOW)

    @t.check("the connecting request: 502 from its connect (attempts); of those that waited, "
             "three 502 at once (budget), two 502 at their deadline")
    def _():
        h.eq([a[0].status if isinstance(a, tuple) else a for a in answers], [502] * 6,
             "statuses")
        gave_up = {}
        for i in range(6):
            fields = h.access_fields(proxy.access_one("c=%d" % i))
            gave_up.setdefault(fields.get("gave_up"), []).append(i)
        h.eq(sorted((k, len(v)) for k, v in gave_up.items()),
             [("attempts", 1), ("budget", 3), ("deadline", 2)], "gave_up of the six (%r)" % gave_up)
        for i in gave_up["budget"]:
            h.ok(answers[i][1] < 1.5 * h.SLOW, "request %d refused only after %.1fs"
                 % (i, answers[i][1]))
            h.check_error_response(answers[i][0], 502, ["down"])
        for i in gave_up["deadline"]:
            h.ok(answers[i][1] > 2.0, "request %d answered after %.1fs, before its deadline"
                 % (i, answers[i][1]))
            h.check_error_response(answers[i][0], 502, ["down"])

    @t.check("afterwards every held and pending gauge is 0")
    def _():
        h.wait_until(lambda: set(gauges(admin).values()) == {0}, 5 * h.SLOW,
                     "gauges at 0: %r" % gauges(admin))


h.run(scenario, __doc__)
