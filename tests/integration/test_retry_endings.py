"""Scenario: what the access log says for endings that come after a
retryable answer: one passed on as final while a hedge raced it.

Client: raw-socket GETs to a sidecar listener.
Origin: the test origin with scripted paths: a slow first try (/delay/3)
and a 503 on its hedge with a 5000-byte body, chunked or with a
Content-Length.
Proxy: limits.retry_response_buffer 1KiB; route /h/ hedges after 200ms
(max 1); 100ms waits, no jitter.
Must hold:
- a 503 over retry_response_buffer on the hedge while the first try is in
  flight goes to the client as final (README "Limits"), and the trail ends
  with it whatever its framing: tries="cancelled -> wait 0ms -> hedge:503"
  for a chunked body as for one with a Content-Length.
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
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)
    port = proxy.port(0)

    def tries_of(tag):
        return h.access_fields(proxy.access_one(tag))["tries"]

    @t.check("a 503 over retry_response_buffer on the hedge: final, and last in the trail")
    def _():
        for path, step in (("/h/over-length", "/bytes/5000?status=503"),
                           ("/h/over-chunked", "/chunked/5000?status=503")):
            origin.script(path, ["/delay/3", step])
            r = h.fetch(port, "GET", path, "api.example")
            h.eq((r.status, len(r.body), r.header("Retry-Attempts")), (503, 5000, "2"),
                 "%s: status, body length, Retry-Attempts" % path)
            h.eq(tries_of(path), "cancelled -> wait 0ms -> hedge:503", "%s: tries" % path)


h.run(scenario, __doc__)
