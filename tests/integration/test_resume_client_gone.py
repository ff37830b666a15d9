#!/usr/bin/env python3
"""Scenario: the client leaves while its broken download waits to be resumed.

Client: a raw connection GETs /object/<n>, reads the head and the body bytes
the proxy relays before the break, then closes while the resume waits.
Origin: /object/<n> breaks (FIN) after 1 MiB; the resume (if it ever came)
would be answered 206; for the second case the resume is never answered
(/hang).
Proxy: resume on, 5 attempts, a 30 s backoff for the first case (route by
Host), 50 ms for the second.
Must hold:
- the client leaving in the resume's backoff: nothing more reaches the
  origin (one request), the access line says gave_up=client_gone with the
  trail "200 broken=reset", and the resume that was begun and
  never spliced counts in retryproxy_resumes_total{result="failed"} (SPEC:
  every resume counts, ok or failed; README: failed when the response
  ended short instead), never in ok;
- the client leaving while the resume's request waits for its answer: the
  trail ends in "cancelled resumed_at=K" (the try was a resume, as one
  reset before its head says) and resumes_total{result="failed"} counts it
  too;
- the client leaving in the backoff with part of the body still queued in
  the proxy for it (it read nothing; the break came once the kernel's
  buffers were full): the access line's bytes= counts the body bytes
  written to its socket, not those that never left the proxy, as for a
  response cut while relayed.
"""

import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 50ms
    max_backoff: 50ms
    jitter: 0s
    deadline: 120s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: long-backoff
    match: { host: long.test }
    retry: { initial_backoff: 30s, max_backoff: 30s }
"""

MiB = 1 << 20


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def metrics():
        return h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()

    def resumes(route, result):
        return h.metric(metrics(), "retryproxy_resumes_total",
                        '{route="%s",result="%s"}' % (route, result))

    def start(path, host):
        """GET path with Host host on a raw connection; read the head and
        the body up to the break. The connection, still open."""
        c = h.RawConn(proxy.port(0), timeout=10 * h.SLOW)
        c.send(h.request("GET", path, host))
        head = c.read_head()
        h.eq(head.status, 200, "status of the first response")
        c.read_exact(MiB)
        return c

    @t.check("the client leaves in the resume's backoff: counted as a failed resume")
    def _():
        n = 4 * MiB
        path = "/object/%d" % n
        origin.script(path, [path + "?break_at=%d" % MiB, path])
        c = start(path, "long.test")
        h.wait_until(lambda: h.metric(metrics(), "retryproxy_backoff_pending", "") == 1.0,
                     10 * h.SLOW, "the resume waits in its backoff")
        c.close()
        fields = h.access_fields(proxy.access_one(path, timeout=10 * h.SLOW))
        h.eq(fields.get("gave_up"), "client_gone", "gave_up")
        h.eq(fields.get("tries"), "200 broken=reset", "trail")
        time.sleep(0.5 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 1, "requests the origin saw")
        h.eq(resumes("long-backoff", "ok"), 0.0, "resumes ok")
        h.eq(resumes("long-backoff", "failed"), 1.0, "resumes failed")

    @t.check("the client leaves while the resume waits for its answer: a failed resume")
    def _():
        n = 4 * MiB + 1
        path = "/object/%d" % n
        origin.script(path, [path + "?break_at=%d" % MiB, "/hang"])
        c = start(path, "default.test")
        origin.wait_for(lambda o: len(o.requests_for(path)) == 2, 10 * h.SLOW,
                        "the resume reaches the origin")
        k = int(origin.requests_for(path)[1].header("Range")[6:-1])
        c.close()
        fields = h.access_fields(proxy.access_one(path, timeout=10 * h.SLOW))
        # the resume's try is one, answered or not: it says where it began
        h.eq(fields.get("tries"), "200 broken=reset -> wait 50ms -> cancelled resumed_at=%d" % k,
             "trail")
        h.eq(resumes("default", "ok"), 0.0, "resumes ok")
        h.eq(resumes("default", "failed"), 1.0, "resumes failed")

    @t.check("the client leaves in the resume's backoff with the body not all written: bytes= "
             "counts what reached its socket")
    def _():
        def settled(c):
            """The body bytes the proxy wrote to c: those the client holds
            and those the proxy's socket still holds, once neither grows."""
            last = None
            for _ in range(25):
                time.sleep(0.2)
                now = (h.readable(c.sock), h.send_queue(proxy.port(0), c.local_port))
                if now == last:
                    break
                last = now
            return sum(last)

        # how much the kernel takes for a client that reads nothing
        with h.RawConn(proxy.port(0), rcvbuf=h.CAPACITY_RCVBUF) as c:
            c.send(h.request("GET", "/bytes/%d" % (8 * MiB), "long.test"))
            capacity = settled(c)
        # a body that breaks off once the kernel is full and the proxy
        # holds 128 KiB more, under the mark that stops it reading
        n = 8 * MiB + 2
        brk = capacity + (128 << 10)
        path = "/object/%d" % n
        origin.script(path, [path + "?break_at=%d" % brk, path])
        c = h.RawConn(proxy.port(0), timeout=10 * h.SLOW, rcvbuf=h.CAPACITY_RCVBUF)
        c.send(h.request("GET", path + "?unread", "long.test"))
        h.wait_until(lambda: h.metric(metrics(), "retryproxy_backoff_pending", "") == 1.0,
                     10 * h.SLOW, "the resume waits in its backoff")
        written = settled(c)
        c.close()
        fields = h.access_fields(proxy.access_one("unread", timeout=10 * h.SLOW))
        h.eq(fields.get("gave_up"), "client_gone", "gave_up")
        # a window probe may move a few bytes after the last look
        h.ok(written - 1024 <= int(fields["bytes"]) <= written + 16384,
             "bytes=%s where the proxy wrote %d (its head included) of %d queued"
             % (fields["bytes"], written, brk))


h.run(scenario, __doc__)
