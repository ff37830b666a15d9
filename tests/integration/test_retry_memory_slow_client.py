#!/usr/bin/env python3
"""Scenario: a retryable response given back to a client that does not read
it stays within limits.retry_memory until the client has taken it.

Client: raw connections with a 64 KiB receive buffer that send a GET each
and then read nothing; curl to the admin listener for /metrics.
Proxy: retry_response_buffer 8MiB, retry_memory 8MiB, max_attempts 2,
client_timeout 30s (no client is cut while the test looks).
Origin: for each path, a 503 with a 7 MiB body (kept for the retry), then
a reset on the retry: retries end, and the client gets the kept 503.
Must hold:
- the first client's kept 503 is handed to its connection as the client
  reads, as a streamed response is: while the client reads nothing, the
  part not yet written still counts in retryproxy_retry_memory_bytes
  (before, the whole 7 MiB was queued on the connection at once and
  counted nowhere: the gauge read 0);
- so the next clients' 503s, which no longer fit in what retry_memory
  leaves, are passed on as final at once, streamed with backpressure
  (Retry-Attempts: 1), and eight such clients raise the proxy's resident
  memory by less than retry_memory and 4 MiB of slack, 20 MiB under
  sanitizers (before, each client's 7 MiB was kept and queued whole: some
  30 MiB);
- each client, reading at last, gets its 503 whole, byte-exact: the first
  the kept one with Retry-Attempts: 2 (its access line written once the
  503 was queued whole, as for a streamed response), the others with
  Retry-Attempts: 1; then the gauge is back to 0;
- a chunked 503 of 16 MiB, passed on as final once it is found over what
  can be kept: what was read of it while it was kept (8 MiB) goes to the
  client as it reads and counts until written (before, queued at once and
  counted nowhere), and its upstream's rest follows: the client gets the
  whole body, byte-exact, still chunked;
- a kept 503 given back when a queued retry's wait for a connection ends
  (its route's try_timeout, 1s, under max_upstream_connections 1, the one
  connection busy with a slow request of another route), fed to a client
  that reads nothing, no longer counts as a pending retry while it is fed:
  retryproxy_backoff_pending and the route's backoff gauge read 0, and
  with max_pending_retries 1 another request's 503 (from a second origin)
  is retried meanwhile (before, the retry's place stayed taken until the
  client had it all: the gauges read 1, and the other request got its 503
  at once with gave_up=budget).
Under sanitizers the proxy runs with ASAN_OPTIONS quarantine_size_mb=8, as
in test_download_memory, so freed buffers are not hoarded.
"""

import hashlib
import time

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 30s
  retry_response_buffer: 8MiB
  retry_memory: 8MiB
defaults:
  retry:
    max_attempts: 2
    initial_backoff: 50ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

# One connection to the origin; the retry of route q waits for it at most
# its try_timeout (1s), the slow request of the default route not.
QUEUE_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@OTHER@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 30s
  retry_response_buffer: 8MiB
  retry_memory: 8MiB
  max_upstream_connections: 1
  max_pending_retries: 1
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 300ms
    jitter: 0s
    try_timeout: 30s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: q
    match: { path_prefix: /q/ }
    retry: { try_timeout: 1s }
"""

BODY = 7 << 20
MiB = 1 << 20


def scenario(t):
    origin = t.origin()
    env = {"ASAN_OPTIONS": "quarantine_size_mb=8"} if h.SANITIZED else None
    proxy = t.proxy(CONFIG, env=env, ORIGIN=origin.port)

    def gauge():
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()
        return h.metric(text, "retryproxy_retry_memory_bytes")

    def silent_get(path):
        """A GET of path, answered 503 (7 MiB) then reset, from a client
        that reads nothing; the connection."""
        origin.script(path, ["/bytes/%d?status=503" % BODY, "/reset/request"])
        c = h.RawConn(proxy.port(), rcvbuf=64 << 10, timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", path, "a.example"))
        return c

    def take(c, path, attempts):
        """Read the 503 whole on c; its access line."""
        r = c.read_response(timeout=20 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, str(attempts)),
             "%s: status, Retry-Attempts" % path)
        h.eq(hashlib.sha256(r.body).hexdigest(),
             hashlib.sha256(o.pattern_bytes(BODY)).hexdigest(),
             "%s: body sha256 (length %d)" % (path, len(r.body)))
        return h.access_fields(proxy.access_one(path))

    state = {"others": []}

    @t.check("a kept 503 given back to a client that reads nothing still counts in "
             "retry_memory until written")
    def _():
        state["rss"] = proxy.proc_status()["VmRSS"]
        state["first"] = silent_get("/slow/0")
        origin.wait_for(lambda o: len(o.requests_for("/slow/0")) == 2 and
                        all(q.finished_at is not None for q in o.requests_for("/slow/0")),
                        10 * h.SLOW, "the 503 and the reset for /slow/0")
        # the kernel holds a few MiB between the proxy and the client; the
        # rest waits in the proxy, and counts
        h.wait_until(lambda: (gauge() or 0) >= 2 * MiB, 5 * h.SLOW,
                     "retry_memory_bytes to count the kept 503 still queued (it reads %r)"
                     % gauge())
        h.eq(proxy.access_for("/slow/0"), [], "access line before the response was queued whole")

    @t.check("clients not reading cannot take the proxy's memory past retry_memory")
    def _():
        for i in range(1, 8):
            state["others"].append(silent_get("/slow/%d" % i))
            # its 503, no longer kept, streams as far as the client's
            # kernel buffers take it, and no further
            proxy.wait_log(r"/slow/%d: retryable response does not fit in what retry_memory "
                           "leaves" % i, timeout=5 * h.SLOW)
        time.sleep(0.5 * h.SLOW)
        grown = proxy.proc_status()["VmRSS"] - state["rss"]
        # some 8 MiB plain (before: over 30); sanitizers add their shadow
        # and redzones to every byte held
        h.ok(grown * 1024 < (20 if h.SANITIZED else 12) * MiB,
             "resident memory grew by %d KiB with eight clients not reading (retry_memory "
             "8 MiB)" % grown)

    @t.check("each client, reading at last, gets its 503 whole: the first the kept one")
    def _():
        fl = take(state["first"], "/slow/0", 2)
        h.eq((fl["status"], fl["attempts"], fl["bytes"]), ("503", "2", str(BODY)),
             "/slow/0: access status, attempts, bytes")
        for i, c in enumerate(state["others"], 1):
            fl = take(c, "/slow/%d" % i, 1)
            h.ok("retry_memory" in fl.get("note", ""), "/slow/%d: note names retry_memory: %r"
                 % (i, fl))
        h.wait_until(lambda: gauge() == 0, 5 * h.SLOW, "retry_memory_bytes back to 0")

    @t.check("a 503 passed on as final while its body came, to a client that reads nothing: "
             "what was read of it counts until written, then the rest streams")
    def _():
        path = "/over/0"
        size = 16 << 20
        origin.script(path, ["/chunked/%d?status=503&chunk=65536" % size])
        c = h.RawConn(proxy.port(), rcvbuf=64 << 10, timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", path, "a.example"))
        proxy.wait_log(r"%s: retryable response (is over retry_response_buffer|does not fit)" % path,
                       timeout=5 * h.SLOW)
        h.wait_until(lambda: (gauge() or 0) >= 2 * MiB, 5 * h.SLOW,
                     "retry_memory_bytes to count what was read of the 503, still queued "
                     "(it reads %r)" % gauge())
        r = c.read_response(timeout=20 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts"), r.framing), (503, "1", "chunked"),
             "status, Retry-Attempts, framing")
        h.eq(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(o.pattern_bytes(size)).hexdigest(),
             "body sha256 (length %d)" % len(r.body))
        h.wait_until(lambda: gauge() == 0, 5 * h.SLOW, "retry_memory_bytes back to 0")

    @t.check("a kept 503 given back when a queued retry's wait ends, fed to a client that reads "
             "nothing, no longer holds a place among the pending retries")
    def _():
        queue_origin = t.origin()
        other_origin = t.origin()
        queue_proxy = t.proxy(QUEUE_CONFIG, env=env, ORIGIN=queue_origin.port,
                              OTHER=other_origin.port)

        def metrics():
            return h.curl("http://127.0.0.1:%d/metrics" % queue_proxy.port(1),
                          check=True).body.decode()

        queue_origin.script("/q/kept", ["/bytes/%d?status=503" % BODY, "/bytes/10"])
        c = h.RawConn(queue_proxy.port(), rcvbuf=64 << 10, timeout=20 * h.SLOW)
        t.defer(c.close)
        c.send(h.request("GET", "/q/kept", "a.example"))
        queue_origin.wait_for(lambda o: len(o.requests_for("/q/kept")) == 1, 5 * h.SLOW,
                              "the 503")
        # in its backoff, the one connection goes to a slow request
        slow_path = "/delay/%d" % (8 * h.SLOW)
        slow = h.RawConn(queue_proxy.port(), timeout=20 * h.SLOW)
        t.defer(slow.close)
        slow.send(h.request("GET", slow_path, "a.example"))
        queue_origin.wait_for(lambda o: len(o.requests_for(slow_path)) == 1, 5 * h.SLOW,
                              "the slow request")
        h.wait_until(lambda: h.metric(metrics(), "retryproxy_upstream_waiting") == 1,
                     5 * h.SLOW, "the retry queued for the one connection")
        # try_timeout ends the wait: the kept 503 goes to a client that
        # reads nothing, and is fed as it reads
        queue_proxy.wait_log(r"/q/kept: no connection to .* within try_timeout",
                             timeout=5 * h.SLOW)
        h.wait_until(lambda: (h.metric(metrics(), "retryproxy_retry_memory_bytes") or 0) >= MiB,
                     5 * h.SLOW, "the kept 503 still being fed")
        text = metrics()
        h.eq((h.metric(text, "retryproxy_backoff_pending"),
              h.metric(text, "retryproxy_route_backoff_pending", '{route="q"}')), (0, 0),
             "backoff_pending, the route's backoff gauge while it is fed")
        # the one place among the pending retries is free for another
        other_origin.script("/other", ["/status/503", "/status/200"])
        r = h.fetch(queue_proxy.port(2), "GET", "/other", "a.example", timeout=10 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"),
             "another request's 503, retried meanwhile")
        r = c.read_response(timeout=20 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts"), len(r.body)), (503, "1", BODY),
             "the kept 503, whole")

h.run(scenario, __doc__)
