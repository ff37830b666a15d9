#!/usr/bin/env python3
"""Scenario: request bodies over replay_buffer kept in a spool file and re-sent.

Client: curl PUTs random bodies from a file through a forward proxy with
replay_buffer 64KiB and spool_max 32MiB, spool_dir "spool" (relative to the
config file): 20 MiB with Content-Length, 3 MiB chunked, 2 MiB with Expect:
100-continue, and 4 MiB through a sidecar listener to a TLS origin; then
bodies over spool_max, by Content-Length and chunked. A second proxy, spool off, streams a 20 MiB PUT once
for comparison.
Origin: answers 503 (after a 1 s Retry-After wait for the 20 MiB one) then
200 per path, and records each body's length and sha256.
Must hold: each spooled PUT ends in 200 with Retry-Attempts: 2 and the
origin received the body twice, byte-exact each time (chunked as chunked),
also over TLS; while the 20 MiB PUT waits between its tries the proxy holds
exactly one open file in the spool directory, with mode 0600 and no name
(the directory stays empty); after every request no file is open there; a
body over spool_max goes once, whole, with gave_up=body_too_large (a
chunked one after the file took its first 32 MiB); the proxy's peak
RSS during the spooled, retried 20 MiB PUT grew no more than during the
streamed one (plus 4 MiB of slack), and both well under the body's size.
"""

import os
import stat
import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT1@
    upstream: https://localhost:@TLS@
log: { level: info, format: text }
tls:
  ca_file: @CA@
limits:
  drain_timeout: 2s
  replay_buffer: 64KiB
  spool_max: @SPOOL_MAX@
  spool_dir: spool
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    retry_after: honor
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20
SLACK = 4 * MiB


def spool_fds(proxy, directory):
    """The proxy's open file descriptors on files in directory: (fd, link)."""
    return h.open_files_under(proxy.pid, directory)


def scenario(t):
    certs = t.certs()
    origin = t.origin()
    tls_origin = t.origin(tls=(certs.server, certs.server_key), name="tls")
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    env = {"ASAN_OPTIONS": "quarantine_size_mb=8"} if h.SANITIZED else None
    proxy = t.proxy(CONFIG, env=env, SPOOL_MAX="32MiB", TLS=tls_origin.port, CA=certs.ca)
    streamed = t.proxy(CONFIG, env=env, SPOOL_MAX="0", TLS=tls_origin.port, CA=certs.ca)

    def put(via, url, file, chunked=False, expect=""):
        args = ["-X", "PUT", "--data-binary", "@" + file, "-H", "Expect: " + expect]
        if chunked:
            args += ["-H", "Transfer-Encoding: chunked"]
        if via is not None:
            return h.curl(*args, url, proxy=via.url, timeout=60 * h.SLOW)
        return h.curl(*args, url, timeout=60 * h.SLOW)

    def same_body(reqs, n, sha, what):
        for i, q in enumerate(reqs):
            h.eq((q.body_len, q.body_sha256), (n, sha),
                 "%s: body length and sha256 at the origin on try %d" % (what, i + 1))

    def no_spool_files(what):
        h.wait_until(lambda: not spool_fds(proxy, spool_dir), 5 * h.SLOW,
                     "no open spool file after %s (%r)" % (what, spool_fds(proxy, spool_dir)))
        h.eq(os.listdir(spool_dir), [], "names in the spool directory after %s" % what)

    def warm_up(p):
        f, _ = h.random_body_file(t.tmp, 4096, "warm")
        origin.script("/warm", ["/echo"])
        r = put(p, origin.url("/warm"), f)
        h.eq(r.status, 200, "warm-up PUT (%r)" % r)

    def peak_growth(p, run):
        """Run run() and return how far the proxy's peak RSS rose above its
        resident size before (bytes)."""
        warm_up(p)
        baseline = p.proc_status()["VmRSS"]
        run()
        return (p.proc_status()["VmHWM"] - baseline) * 1024

    big_file, big_sha = h.random_body_file(t.tmp, 20 * MiB, "big")
    growth = {}

    @t.check("20 MiB PUT, spool off: streamed once, byte-exact (the memory yardstick)")
    def _():
        path = "/spool/streamed"
        origin.script(path, ["/echo"])
        result = {}

        def run():
            result["r"] = put(streamed, origin.url(path), big_file)
        growth["streamed"] = peak_growth(streamed, run)
        h.eq(result["r"].status, 200, "status (%r)" % result["r"])
        same_body(origin.requests_for(path), 20 * MiB, big_sha, "streamed")

    @t.check("20 MiB PUT, 503 (Retry-After: 1) then 200: spooled, sent twice, byte-exact")
    def _():
        path = "/spool/big"
        origin.script(path, ["/status/503?retry_after=1", "/echo"])
        result = {}
        seen = {}

        def watch():
            # between the tries: the body is in one nameless 0600 file
            while "r" not in result:
                reqs = origin.requests_for(path)
                fds = spool_fds(proxy, spool_dir)
                if len(reqs) == 1 and reqs[0].complete.is_set() and fds:
                    seen["fds"] = fds
                    seen["mode"] = stat.S_IMODE(os.stat("/proc/%d/fd/%s" % (proxy.pid, fds[0][0])).st_mode)
                    seen["names"] = os.listdir(spool_dir)
                    return
                time.sleep(0.02)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        def run():
            result["r"] = put(proxy, origin.url(path), big_file)
        growth["spooled"] = peak_growth(proxy, run)
        watcher.join(5)
        r = result["r"]
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        reqs = origin.requests_for(path)
        h.eq(len(reqs), 2, "requests the origin saw")
        same_body(reqs, 20 * MiB, big_sha, "spooled")
        h.ok("fds" in seen, "no spool file was open while the request waited between tries")
        h.eq(len(seen["fds"]), 1, "spool files open between the tries (%r)" % seen["fds"])
        h.eq(seen["mode"], 0o600, "the spool file's mode")
        h.eq(seen["names"], [], "names in the spool directory while the file was open")
        no_spool_files("the 20 MiB PUT")
        fl = h.access_fields(proxy.access_one(path))
        h.eq((fl["status"], fl["attempts"], fl.get("gave_up")), ("200", "2", None),
             "access status, attempts, gave_up")

    @t.check("peak RSS of the spooled, retried 20 MiB PUT within the streamed one's (+4 MiB)")
    def _():
        h.ok("streamed" in growth and "spooled" in growth, "both PUTs must have run: %r" % growth)
        print("peak RSS growth: streamed %.1f MiB, spooled and retried %.1f MiB"
              % (growth["streamed"] / MiB, growth["spooled"] / MiB), flush=True)
        h.ok(growth["spooled"] <= max(growth["streamed"], 0) + SLACK,
             "spooled growth %.1f MiB over streamed %.1f MiB + 4 MiB"
             % (growth["spooled"] / MiB, growth["streamed"] / MiB))
        h.ok(growth["spooled"] < 16 * MiB, "spooled growth %.1f MiB: the body was held in memory"
             % (growth["spooled"] / MiB))

    @t.check("3 MiB chunked PUT, 503 then 200: spooled with its framing, byte-exact twice")
    def _():
        path = "/spool/chunked"
        n = 3 * MiB + 7
        f, sha = h.random_body_file(t.tmp, n, "chunked")
        origin.script(path, [503, "/echo"])
        r = put(proxy, origin.url(path), f, chunked=True)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        reqs = origin.requests_for(path)
        same_body(reqs, n, sha, "chunked")
        h.eq([q.framing for q in reqs], ["chunked"] * 2, "framing at the origin")
        no_spool_files("the chunked PUT")

    @t.check("2 MiB PUT with Expect: 100-continue, 503 then 200: byte-exact twice")
    def _():
        path = "/spool/expect"
        n = 2 * MiB
        f, sha = h.random_body_file(t.tmp, n, "expect")
        origin.script(path, [503, "/echo"])
        r = put(proxy, origin.url(path), f, expect="100-continue")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        same_body(origin.requests_for(path), n, sha, "Expect")
        no_spool_files("the Expect PUT")

    @t.check("4 MiB PUT to a TLS upstream (sidecar), 503 then 200: byte-exact twice over TLS")
    def _():
        path = "/spool/tls"
        n = 4 * MiB + 3
        f, sha = h.random_body_file(t.tmp, n, "tls")
        tls_origin.script(path, [503, "/echo"])
        r = put(None, proxy.listener_url(1, path), f)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        reqs = tls_origin.requests_for(path)
        h.eq(len(reqs), 2, "requests the TLS origin saw")
        same_body(reqs, n, sha, "TLS")
        no_spool_files("the TLS PUT")

    @t.check("a 33 MiB PUT, over spool_max: goes once, whole, gave_up=body_too_large")
    def _():
        path = "/spool/over"
        n = 33 * MiB
        f, sha = h.random_body_file(t.tmp, n, "over")
        origin.script(path, [503, "/echo"])
        r = put(proxy, origin.url(path), f)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts (%r)" % r)
        reqs = origin.requests_for(path)
        h.eq(len(reqs), 1, "requests the origin saw")
        same_body(reqs, n, sha, "over spool_max")
        fl = h.access_fields(proxy.access_one(path))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")
        no_spool_files("the PUT over spool_max")

    @t.check("a 33 MiB chunked PUT passes spool_max on the way: goes once, whole, chunked")
    def _():
        path = "/spool/over-chunked"
        n = 33 * MiB + 5
        f, sha = h.random_body_file(t.tmp, n, "over-chunked")
        origin.script(path, [503, "/echo"])
        r = put(proxy, origin.url(path), f, chunked=True)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts (%r)" % r)
        reqs = origin.requests_for(path)
        h.eq(len(reqs), 1, "requests the origin saw")
        same_body(reqs, n, sha, "chunked over spool_max")
        h.eq(reqs[0].framing, "chunked", "framing at the origin")
        proxy.wait_log(r"PUT \S*/spool/over-chunked: request body not spooled after \d+ bytes: "
                       r"the body is over spool_max")
        fl = h.access_fields(proxy.access_one(path))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")
        no_spool_files("the chunked PUT over spool_max")


h.run(scenario, __doc__, timeout=200)
