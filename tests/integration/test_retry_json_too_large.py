#!/usr/bin/env python3
"""Scenario: a request that only a json_field condition could make safe to
repeat, with a body too large to keep: the account names the body's size.

Client: POSTs through a forward proxy (raw sockets) to a route whose
idempotency map has when_present json_field etag; replay_buffer 1KiB; an
admin listener for /metrics.
Origin: answers the first try of each path 503, then 200.
Must hold:
- a 4 KiB JSON body (Content-Length, and chunked) with a top-level "etag":
  too large to keep, so the proxy cannot read the etag and the body goes
  once: the client gets the 503 with Retry-Attempts: 1, the origin saw one
  try, and the access line says gave_up=body_too_large (it said
  not_idempotent: the method was never the reason, the body's size was);
  retries_given_up_total{reason="body_too_large"} counts both, and
  {reason="not_idempotent"} none of them;
- unchanged around it: a small JSON body with "etag" is repeated (200 after
  two tries); a small JSON body without it, and a 4 KiB text/plain body
  (not JSON: no json_field condition can apply, nothing needed keeping),
  give up as not_idempotent.
"""

import json
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, replay_buffer: 1KiB }
defaults:
  retry:
    on: [503]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: cond
    match: { path_prefix: /cond/ }
    idempotent:
      when_present:
        - json_field: etag
"""

JSON = [("Content-Type", "application/json")]


def chunked(data, size=512):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def json_body(size, etag=True):
    doc = {"etag": "abc"} if etag else {"other": 1}
    doc["pad"] = ""
    doc["pad"] = "x" * (size - len(json.dumps(doc).encode()))
    return json.dumps(doc).encode()


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    def post(path, body, headers, sent=None):
        """Script path 503 then 200, POST body, and return the response, the
        origin's requests and the access line's fields."""
        origin.script(path, [503, 200])
        r = h.fetch(proxy.port(), "POST", origin.url(path), host, headers=headers, body=body)
        time.sleep(0.2 * h.SLOW)  # a wrong second try would show by now
        return r, origin.requests_for(path), h.access_fields(proxy.access_one(path))

    def given_up(reason):
        text = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()
        return h.metric(text, "retryproxy_retries_given_up_total",
                        '{route="cond",reason="%s"}' % reason)

    def gives_up(path, body, headers, reason, length):
        r, reqs, fields = post(path, body, headers)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "%s: status, attempts" % path)
        h.eq(len(reqs), 1, "%s: tries at the origin" % path)
        h.eq(reqs[0].body_len, length, "%s: body length at the origin" % path)
        h.eq(fields.get("gave_up"), reason, "%s: gave_up" % path)

    @t.check("a JSON body over replay_buffer gives up as body_too_large, with Content-Length "
             "and chunked")
    def _():
        body = json_body(4096)
        gives_up("/cond/large", body, JSON, "body_too_large", len(body))
        gives_up("/cond/large-chunked", chunked(body),
                 JSON + [("Transfer-Encoding", "chunked")], "body_too_large", len(body))
        h.eq(given_up("body_too_large"), 2.0, "given_up_total{reason=body_too_large}")
        h.eq(given_up("not_idempotent"), 0.0, "given_up_total{reason=not_idempotent}")

    @t.check("unchanged: a small JSON body with etag is repeated; one without it, and a large "
             "text body, give up as not_idempotent")
    def _():
        r, reqs, fields = post("/cond/small", json_body(200), JSON)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "small JSON with etag: status, attempts, tries")
        gives_up("/cond/no-etag", json_body(200, etag=False), JSON, "not_idempotent", 200)
        gives_up("/cond/text", b"t" * 4096, [("Content-Type", "text/plain")],
                 "not_idempotent", 4096)
        h.eq(given_up("not_idempotent"), 2.0, "given_up_total{reason=not_idempotent}")
        h.eq(given_up("body_too_large"), 2.0, "given_up_total{reason=body_too_large}")


h.run(scenario, __doc__)
