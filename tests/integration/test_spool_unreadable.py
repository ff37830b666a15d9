#!/usr/bin/env python3
"""Scenario: the spool file cannot be read back for a retry.

Client: curl PUTs a 4 MiB random body through a forward proxy with
replay_buffer 64KiB and spool_max 32MiB; the origin answers 503, and while
the request waits its 2 s backoff the test truncates the proxy's (unlinked)
spool file through /proc/PID/fd, as a failing disk would lose it. Then a
second 4 MiB PUT, 503 then 200, with the file left alone.
Origin: answers 503 then 200 per path, and records each body's length and
sha256.
Must hold: the retry's read of the spool fails, and the client gets a 500
naming "request body spool unreadable" with Retry-Attempts: 2 (the retry
was begun when its body could not be read); the proxy logs "cannot read the spooled request body back:
Input/output error"; the origin never receives a whole request whose body
is not the client's (the first try's whole body, nothing more complete);
the spool file is closed; the proxy keeps serving: the second PUT is
retried byte-exact and gets the 200.
"""

import os
import threading

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
  spool_max: 32MiB
  spool_dir: spool
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 2s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG)

    def spool_fds():
        """The proxy's spool files, as /proc/PID/fd/N paths."""
        return ["/proc/%d/fd/%s" % (proxy.pid, fd)
                for fd, _ in h.open_files_under(proxy.pid, spool_dir)]

    def put(path, f):
        args = ["-X", "PUT", "--data-binary", "@" + f, "-H", "Expect:"]
        return h.curl(*args, origin.url(path), proxy=proxy.url, timeout=60 * h.SLOW)

    @t.check("spool truncated during the backoff: 500 'request body spool unreadable', "
             "nothing wrong reaches the origin")
    def _():
        n = 4 * MiB
        f, sha = h.random_body_file(t.tmp, n, "truncated")
        origin.script("/lost", [503, "/echo"])
        result = {}
        client = threading.Thread(target=lambda: result.setdefault("r", put("/lost", f)))
        client.start()
        origin.wait_for(lambda o: [q for q in o.requests_for("/lost") if q.complete.is_set()],
                        timeout=20 * h.SLOW, what="the first try, whole")
        h.wait_until(spool_fds, 5 * h.SLOW, "the spool file open in the proxy")
        for fd_path in spool_fds():
            # through /proc, the unlinked file itself: shorter than written
            with open(fd_path, "r+b") as spool:
                spool.truncate(0)
        client.join(60 * h.SLOW)
        h.ok("r" in result, "curl did not finish")
        r = result["r"]
        h.check_error_response(r, 500, ("request body spool unreadable",))
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        proxy.wait_log(r"PUT \S*/lost: cannot read the spooled request body back: "
                       r"Input/output error")
        whole = [(q.body_len, q.body_sha256) for q in origin.requests_for("/lost")
                 if q.complete.is_set()]
        h.eq(whole, [(n, sha)], "whole requests at the origin (the first try only)")
        h.wait_until(lambda: not spool_fds(), 5 * h.SLOW, "no spool file open")

    @t.check("the proxy keeps serving: a 4 MiB PUT, 503 then 200, retried byte-exact")
    def _():
        n = 4 * MiB
        f, sha = h.random_body_file(t.tmp, n, "kept")
        origin.script("/kept", [503, "/echo"])
        r = put("/kept", f)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        h.eq([(q.body_len, q.body_sha256) for q in origin.requests_for("/kept")],
             [(n, sha)] * 2, "bodies at the origin")


h.run(scenario, __doc__)
