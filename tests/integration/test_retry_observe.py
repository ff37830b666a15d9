#!/usr/bin/env python3
"""Scenario: retry.mode: observe counts and logs what would be retried and
retries nothing.

Client: GETs, a POST, a PUT with a large body and chunked PUTs through a
forward proxy (raw sockets); curl to the admin listener for /metrics.
Origin: scripted per path: 503 then 200, a reset after reading the request
then 200; for the PUT a plain 200 after reading the body. A refused port
stands for an upstream that is down.
Proxy: defaults retry.on [503, reset, connect-failure, timeout],
max_attempts 3, 200ms waits, mode: observe; route /enforce/ sets mode:
enforce. health: down_after 1, hold: true, deadline 10s. replay_buffer
64KiB, spool_max 256KiB.
Must hold:
- a GET answered 503 gets the 503 at once (Retry-Attempts: 1, one request
  at the origin); the access line says would_retry=status and no gave_up;
  retryproxy_would_retry_total{route="default",cause="status"} counts it and
  retryproxy_retries_total does not;
- a reset after the request: 502 at once, would_retry=reset;
- a Range-capable download reset mid-body, which enforce would resume: the
  body ends short at once (one request at the origin), would_retry=reset
  is logged and counted, and no failed resume is counted;
- a POST (not idempotent) answered 503: no would_retry, gave_up=not_idempotent;
- the same 503 GET on /enforce/ is retried (the control);
- a PUT's body streams, even one over replay_buffer that enforce would keep
  in a spool file (limits.spool_max): the origin has the request head
  before the client sent the rest of the body, and no spool file is open
  (on /enforce/ it is kept whole first, in a spool file, so the origin sees
  nothing until the body is complete);
- a chunked PUT answered 503 is judged by the size enforce would have kept:
  over replay_buffer and spool_max, gave_up=body_too_large and no
  would_retry, as on /enforce/; within spool_max, would_retry=status
  (/enforce/ retries it); one whose data is within spool_max but whose
  chunk lines (long extensions) take it past spool_max is over it, since
  the spool file keeps the framing: gave_up=body_too_large, as on /enforce/;
- an upstream that refuses connections: 502 at once with
  would_retry=connect; once it is marked down the next request is not held
  (502 at once, well within the 10s deadline);
- connects that hang (a full listen queue, connect_timeout 1s): a request
  that comes while another's connect is under way (the upstream's health
  in doubt) makes its own connect and gets 502 after it, not a hold until
  the deadline (gave_up=deadline);
- backoff_pending stays 0 throughout;
- limits.max_pending_retries: 0, a cap on other requests' waiting retries,
  does not make observe say gave_up=budget: would_retry=status.
"""

import os
import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, connect_timeout: 1s, replay_buffer: 64KiB, spool_max: 256KiB, spool_dir: @SPOOL@ }
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


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG, SPOOL=spool_dir)
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
        h.eq(h.metric(text, "retryproxy_would_retry_total", '{route="default",cause="status"}'),
             1.0, "would_retry_total status")
        h.eq(h.metric(text, "retryproxy_retries_total", '{route="default",cause="status"}'), 0.0,
             "retries_total status")

    @t.check("reset after the request: 502 at once, would_retry=reset")
    def _():
        r, reqs = send("GET", "/o/reset", ["/reset/request", 200])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (502, "1", 1),
             "status, Retry-Attempts, requests")
        h.eq(h.access_fields(proxy.access_one("/o/reset")).get("would_retry"), "reset",
             "access would_retry")
        h.eq(h.metric(metrics(), "retryproxy_would_retry_total",
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

    def spool_fds():
        """The proxy's open files in the spool directory (unlinked ones too)."""
        return h.open_files_under(proxy.pid, spool_dir)

    def partial_put(path, wait):
        """Send a PUT head and the first 100000 of 200000 body bytes (over
        replay_buffer, within spool_max); return whether the origin had the
        request within wait seconds, before the rest was sent, whether a
        spool file was open then, and the final status."""
        body = b"b" * 200000
        origin.script(path, [200])
        with h.RawConn(proxy.port()) as c:
            c.send(h.request("PUT", origin.url(path), host, body=body)[:-len(body) + 100000])
            try:
                origin.wait_for(lambda o: o.requests_for(path), timeout=wait)
                early = True
            except AssertionError:
                early = False
            spooled = bool(spool_fds())
            c.send(body[100000:])
            r = c.read_response("PUT")
        return early, spooled, r.status

    @t.check("observe streams a PUT body the spool would keep: the origin has the head before "
             "the body is complete, and no spool file is made")
    def _():
        early, spooled, status = partial_put("/o/stream", 5 * h.SLOW)
        h.eq((early, spooled, status), (True, False, 200),
             "origin had the request early, spool file open, final status")
        h.eq(origin.requests_for("/o/stream")[0].body_len, 200000, "body length at the origin")

    @t.check("... while enforce keeps it whole first, in a spool file (the control)")
    def _():
        early, spooled, status = partial_put("/enforce/stream", 1)
        h.eq((early, spooled, status), (False, True, 200),
             "origin had the request early, spool file open, final status")

    def chunked_put(path, size, chunk=10000, ext=b""):
        """A chunked PUT of size data bytes (chunk-byte chunks, each chunk
        line carrying ext) that the origin answers 503, then 200: the final
        status, the requests the origin saw, and the access fields."""
        data = b"c" * size
        framed = b"".join(b"%x" % len(data[i:i + chunk]) + ext + b"\r\n" + data[i:i + chunk]
                          + b"\r\n" for i in range(0, size, chunk)) + b"0\r\n\r\n"
        origin.script(path, [503, 200])
        r = h.fetch(proxy.port(), "PUT", origin.url(path), host,
                    headers=[("Transfer-Encoding", "chunked")], body=framed)
        reqs = origin.requests_for(path)
        h.eq(reqs[0].body_len, size, "%s: body length at the origin" % path)
        f = h.access_fields(proxy.access_one(path))
        return r.status, len(reqs), f.get("would_retry"), f.get("gave_up")

    @t.check("a chunked PUT over replay_buffer and spool_max answered 503: gave_up=body_too_large "
             "as under enforce, not would_retry")
    def _():
        h.eq(chunked_put("/o/chunked-large", 300000), (503, 1, None, "body_too_large"),
             "observe: status, requests, would_retry, gave_up")
        h.eq(chunked_put("/enforce/chunked-large", 300000), (503, 1, None, "body_too_large"),
             "enforce (the control): status, requests, would_retry, gave_up")

    @t.check("a chunked PUT over replay_buffer within spool_max answered 503: would_retry=status, "
             "as enforce keeps it in the spool and retries it")
    def _():
        h.eq(chunked_put("/o/chunked-spooled", 200000), (503, 1, "status", None),
             "observe: status, requests, would_retry, gave_up")
        h.eq(chunked_put("/enforce/chunked-spooled", 200000), (200, 2, None, None),
             "enforce (the control): status, requests, would_retry, gave_up")

    @t.check("a chunked PUT whose data is within spool_max but whose framing is not, answered "
             "503: gave_up=body_too_large as under enforce, whose file keeps the framing")
    def _():
        ext = b";x=" + b"e" * 900
        h.eq(chunked_put("/o/chunked-framed", 200000, 1000, ext), (503, 1, None, "body_too_large"),
             "observe: status, requests, would_retry, gave_up")
        h.eq(chunked_put("/enforce/chunked-framed", 200000, 1000, ext),
             (503, 1, None, "body_too_large"),
             "enforce (the control): status, requests, would_retry, gave_up")

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
        h.eq(h.metric(text, "retryproxy_backoff_pending"), 0.0, "backoff_pending")
        h.eq(h.metric(text, "retryproxy_retries_total", '{route="default",cause="connect"}'), 0.0,
             "retries_total connect")

    @t.check("connects that hang: a second request is not held behind the first one's connect "
             "in doubt (502 after its own connect_timeout, not the 10s deadline)")
    def _():
        port = h.blackhole(t)
        url = "http://127.0.0.1:%d/hang/" % port
        results = {}

        def get(name):
            results[name] = h.fetch(proxy.port(), "GET", url + name, "127.0.0.1:%d" % port,
                                    timeout=30)

        a = threading.Thread(target=get, args=("a",))
        a.start()
        time.sleep(0.3)  # A's connect is under way: the upstream's health is in doubt
        start = time.monotonic()
        get("b")
        took = time.monotonic() - start
        a.join()
        h.eq((results["a"].status, results["b"].status), (502, 502), "statuses of A and B")
        h.ok(took < 2.5 * h.SLOW, "B answered in %.2fs, not held toward the 10s deadline" % took)
        f = h.access_fields(proxy.access_one("/hang/b"))
        h.eq((f.get("gave_up"), f.get("would_retry")), (None, "connect"),
             "B: access gave_up, would_retry")
        h.eq(h.metric(metrics(), "retryproxy_backoff_pending"), 0.0, "backoff_pending")

    @t.check("a download that breaks mid-body, which enforce would resume: the body ends short "
             "at once, would_retry=reset, counted; no resume tried or counted as failed")
    def _():
        n = 2 << 20
        path = "/object/%d" % n
        before = h.metric(metrics(), "retryproxy_would_retry_total",
                          '{route="default",cause="reset"}')
        origin.script(path, [path + "?break_at=%d&break_mode=reset" % (1 << 20), path])
        r = h.curl(origin.url(path), proxy=proxy.url, timeout=30)
        h.ok(r.exit_code != 0 and len(r.body) < n,
             "the body should end short: curl exit %d, %d bytes" % (r.exit_code, len(r.body)))
        time.sleep(0.4 * h.SLOW)
        h.eq(len(origin.requests_for(path)), 1, "requests the origin saw")
        f = h.access_fields(proxy.access_one(path))
        h.eq((f.get("would_retry"), f.get("gave_up"), f["status"]), ("reset", None, "200"),
             "access would_retry, gave_up, status")
        h.eq(f.get("tries"), "200 broken=reset", "the trail")
        text = metrics()
        h.eq(h.metric(text, "retryproxy_would_retry_total", '{route="default",cause="reset"}'),
             before + 1, "would_retry_total reset")
        h.eq(h.metric(text, "retryproxy_resumes_total", '{route="default",result="failed"}'),
             0.0, "resumes_total failed")

    @t.check("limits.max_pending_retries: 0 does not stop observe: a 503 GET says "
             "would_retry=status, no gave_up=budget")
    def _():
        capped = t.proxy(CONFIG.replace("limits: { drain_timeout: 2s,",
                                        "limits: { max_pending_retries: 0, drain_timeout: 2s,"),
                         SPOOL=spool_dir)
        origin.script("/o/capped", [503])
        r = h.fetch(capped.port(), "GET", origin.url("/o/capped"), host)
        h.eq(r.status, 503, "status")
        f = h.access_fields(capped.access_one("/o/capped"))
        h.eq((f.get("would_retry"), f.get("gave_up")), ("status", None),
             "access would_retry, gave_up")


h.run(scenario, __doc__)
