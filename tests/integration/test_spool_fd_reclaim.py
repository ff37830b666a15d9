#!/usr/bin/env python3
"""Scenario: a request body's spool file finds the proxy out of file
descriptors while idle pooled upstream connections hold some.

Client: two GETs at once through a sidecar listener leave two idle pooled
upstream connections. The proxy's client then connects to the same
listener; the proxy's RLIMIT_NOFILE soft limit is lowered to what it has
open, and the client sends a PUT of 200 KiB (Content-Length), over
replay_buffer (64 KiB), under spool_max (4 MiB).
Origin: the test origin, answering the PUT 503, then /echo.
Must hold: the spool file gets its descriptor by closing the idle pooled
connections, as an upstream connect's socket does (the log says so, and
nothing says a spool file could not be made): the body is spooled, and
the PUT is retried, byte-exact on both tries, and gets 200 with
Retry-Attempts: 2, its access line without gave_up. (Before, the spool
file failed with "Too many open files" and the body went once, not
retried: the client got the 503, gave_up=body_too_large, and the pooled
connections were closed a moment later for the upstream connect.)
"""

import hashlib
import os
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UP@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, replay_buffer: 64KiB, spool_max: 4MiB, spool_dir: @SPOOL@ }
defaults:
  retry: { max_attempts: 3, initial_backoff: 50ms, max_backoff: 50ms, jitter: 0s }
"""


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir)
    proxy = t.proxy(CONFIG, UP=origin.port, SPOOL=spool_dir)
    # two at once, so that two upstream connections stay pooled
    pooled = h.two_pooled(proxy.port(0), "app.example")
    # the GETs' client connections closed; their upstream ones stay pooled
    time.sleep(0.3)
    client = h.clients_at_fd_limit(t, proxy.pid, proxy.port(0))[-1]
    body = os.urandom(200 * 1024)
    sha = hashlib.sha256(body).hexdigest()
    origin.script("/upload", [503, "/echo"])
    client.send(h.request("PUT", "/upload", "app.example", body=body))
    starved = h.status_of(lambda: client.read_response())

    @t.check("the pooled GETs before the shortage: 200")
    def _():
        h.eq(pooled, [200, 200], "the GETs")

    @t.check("no descriptor for the spool file: idle pooled connections are closed for it, "
             "and the PUT is spooled and retried")
    def _():
        h.ok(not isinstance(starved, str), "the PUT got no response: %s" % starved)
        h.eq((starved.status, starved.header("Retry-Attempts")), (200, "2"),
             "status and Retry-Attempts (%r)" % (starved.body[:200],))
        reqs = origin.requests_for("/upload")
        h.eq([(q.body_len, q.body_sha256) for q in reqs], [(len(body), sha)] * 2,
             "the body at the origin on each try")
        lines = proxy.stderr_lines()
        h.ok(not any("cannot make a spool file" in line for line in lines),
             "the log says the spool file could not be made")
        h.ok(any("out of file descriptors: closed 2 idle upstream connections" in line
                 for line in lines), "no log line of the pooled connections closed")
        fields = h.access_fields(proxy.access_one("/upload"))
        h.eq((fields.get("status"), fields.get("gave_up")), ("200", None), "access line")


h.run(scenario, __doc__, timeout=60)
