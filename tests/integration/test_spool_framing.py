#!/usr/bin/env python3
"""Scenario: spool_max bounds the spool file, chunk framing included.

Client: a raw chunked PUT through a forward proxy with replay_buffer
64KiB, spool_max 1MiB and spool_total 64MiB: 512 KiB of data in 512
chunks of 1,024 bytes, each chunk line carrying a 3,000-byte extension,
so the body as it travels (and as a spool file keeps it) is about 2 MiB.
Origin: 503, then /echo; every body's length is recorded.
Must hold: the body is not kept past spool_max: it goes to the origin once,
whole, the client gets the 503 with Retry-Attempts: 1 and the log says
the body is over spool_max; retryproxy_spool_bytes is back to 0.
"""

import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
  spool_max: 1MiB
  spool_total: 64MiB
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority

    @t.check("2 MiB of chunk framing around 512 KiB of data: over spool_max, sent once")
    def _():
        origin.script("/framed", [503, "/echo"])
        ext = b";x=" + b"a" * 3000
        body = b"".join(b"400" + ext + b"\r\n" + b"z" * 1024 + b"\r\n" for _ in range(512))
        body += b"0\r\n\r\n"
        h.ok(len(body) > 2 * (1 << 20) - 100000, "body size on the wire %d" % len(body))
        r = h.fetch(proxy.port(0), "PUT", origin.url("/framed"), host,
                    headers=[("Transfer-Encoding", "chunked")], body=body, timeout=30)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        time.sleep(0.3 * h.SLOW)
        reqs = origin.requests_for("/framed")
        h.eq([q.body_len for q in reqs], [512 * 1024], "data bytes the origin read")
        h.ok(any(re.search(r"not spooled after \d+ bytes: the body is over spool_max", ln)
                 for ln in proxy.stderr_lines()), "the log names spool_max")
        metrics = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1)).body.decode()
        h.ok(re.search(r"^retryproxy_spool_bytes 0$", metrics, re.M),
             "spool gauge back to 0: %s" % re.findall(r"^retryproxy_spool_bytes.*$", metrics, re.M))


if __name__ == "__main__":
    h.run(scenario)
