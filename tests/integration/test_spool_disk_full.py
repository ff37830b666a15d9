#!/usr/bin/env python3
"""Scenario: the spool file cannot be written (a file size limit, as a full disk).

Client: curl PUTs random bodies through a forward proxy with replay_buffer
64KiB and spool_max 32MiB while the proxy process runs under RLIMIT_FSIZE
(set from outside with prlimit): 4 MiB with Content-Length and 3 MiB
chunked under a 1 MiB limit (the write fails mid-body), and 4 MiB under a
limit of 200 KiB above the log's own size (the log file is under the same
limit); then the limit is lifted.
Origin: answers 503 then 200 per path (one path 200 at once), and records
each body's length and sha256.
Must hold: the proxy does not die of SIGXFSZ; it logs how much of the body
the file took before "File too large"; under the limit each request
goes to the origin once, whole and byte-exact (the spooled part from the
file, the rest streamed), the client gets the origin's 503 with
Retry-Attempts: 1, the access line says attempts=1 gave_up=body_too_large,
retryproxy_retries_given_up_total{reason="body_too_large"} counts each;
a request whose only answer is 200 still gets it; no spool file stays open;
with the limit lifted the next spooled PUT is retried again, byte-exact.
A second proxy's spool_dir is an 8 MiB tmpfs (mounted by the test, as
root): a 16 MiB PUT with Content-Length, 503 then 200, never puts its bytes
on that disk (less than 1 MiB used throughout, sampled every half
millisecond; before, the file filled the 8 MiB until ENOSPC) and goes once,
whole (503, Retry-Attempts: 1, gave_up=body_too_large, the log naming "No
space left on device"); a 6 MiB one is spooled there and retried,
byte-exact.
--check under a file size limit of 0 (a file can be made, not written, as on
a full disk) refuses spool_dir with "File too large"; without it, ok.
"""

import os
import re
import resource
import subprocess
import threading
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
  spool_max: 32MiB
  spool_dir: spool
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20


def gave_up_body_too_large(port):
    r = h.curl("http://127.0.0.1:%d/metrics" % port, check=True)
    m = re.search(r'^retryproxy_retries_given_up_total\{route="default",reason="body_too_large"\} (\d+)$',
                  r.body.decode(), re.M)
    # a route's series appear with its first request
    return int(m.group(1)) if m else 0


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG)

    def limit(nbytes):
        # the soft limit only, so that it can be lifted again without privilege
        hard = resource.prlimit(proxy.pid, resource.RLIMIT_FSIZE)[1]
        resource.prlimit(proxy.pid, resource.RLIMIT_FSIZE, (nbytes, hard))

    def put(path, n, steps, chunked=False):
        f, sha = h.random_body_file(t.tmp, n, path.strip("/").replace("/", "-"))
        origin.script(path, steps)
        args = ["-X", "PUT", "--data-binary", "@" + f, "-H", "Expect:"]
        if chunked:
            args += ["-H", "Transfer-Encoding: chunked"]
        r = h.curl(*args, origin.url(path), proxy=proxy.url, timeout=60 * h.SLOW)
        return r, origin.requests_for(path), sha

    def went_once(path, n, steps, status, chunked=False, most=MiB):
        before = gave_up_body_too_large(proxy.port(1))
        r, reqs, sha = put(path, n, steps, chunked)
        h.ok(proxy.alive(), "the proxy died (SIGXFSZ?):\n" + proxy.stderr_tail())
        h.eq((r.status, r.header("Retry-Attempts")), (status, "1"), "status, Retry-Attempts (%r)" % r)
        h.eq(len(reqs), 1, "requests the origin saw")
        h.eq((reqs[0].body_len, reqs[0].body_sha256), (n, sha), "body length and sha256 at the origin")
        if chunked:
            h.eq(reqs[0].framing, "chunked", "framing at the origin")
        # the file took part of the body, then the limit stopped it
        line = proxy.wait_log(r"PUT \S*%s: request body not spooled after \d+ bytes: File too large"
                              % re.escape(path))[0]
        spooled = int(re.search(r"after (\d+) bytes", line).group(1))
        h.ok(0 < spooled <= most, "spooled %d bytes before the limit (%d at most)" % (spooled, most))
        fl = h.access_fields(proxy.access_one(path))
        if status == 503:
            h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")
            h.eq(gave_up_body_too_large(proxy.port(1)), before + 1, "body_too_large give-ups counted")
        h.wait_until(lambda: not h.open_files_under(proxy.pid, spool_dir),
                     5 * h.SLOW, "no spool file open after %s" % path)

    @t.check("--check under a file size limit of 0 (as a full disk, where an empty file can "
             "still be made): refused, naming spool_dir")
    def _():
        config = os.path.join(t.tmp, "check.yaml")
        with open(config, "w") as f:
            f.write("listen:\n  - address: 127.0.0.1:1\nlimits:\n  replay_buffer: 64KiB\n"
                    "  spool_max: 32MiB\n  spool_dir: spool\n")

        def no_file_room():
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))

        r = subprocess.run([h.BIN, "--check", "-c", config], env=h.clean_env(), capture_output=True,
                           text=True, timeout=20 * h.SLOW, preexec_fn=no_file_room)
        h.eq(r.returncode, 1, "exit code of --check (stdout %r, stderr %r)" % (r.stdout, r.stderr))
        h.ok(re.search(r"limits\.spool_dir: cannot make a spool file in .*: File too large", r.stderr),
             "--check names spool_dir and the error: %r" % r.stderr)
        r = h.run_bin(["--check", "-c", config])
        h.eq((r.returncode, r.stdout.strip()), (0, "ok"), "--check without the limit (%r)" % r.stderr)

    limit(MiB)

    @t.check("1 MiB file limit, 4 MiB PUT, 503 then 200: goes once, whole, gave_up=body_too_large")
    def _():
        went_once("/full/cl", 4 * MiB, [503, "/echo"], 503)

    @t.check("1 MiB file limit, 3 MiB chunked PUT: goes once, whole, chunked, gave_up=body_too_large")
    def _():
        went_once("/full/chunked", 3 * MiB + 11, [503, "/echo"], 503, chunked=True)

    @t.check("1 MiB file limit, 4 MiB PUT the origin takes at once: 200, once, whole")
    def _():
        went_once("/full/ok", 4 * MiB, ["/echo"], 200)

    @t.check("a limit 200 KiB above the log's size: the spool stops early; once, whole")
    def _():
        # the log file is under the same limit: it keeps its room
        log_size = os.path.getsize(proxy.stderr_path)
        limit(log_size + 200 * 1024)
        went_once("/full/early", 4 * MiB, [503, "/echo"], 503, most=log_size + 200 * 1024)

    @t.check("limit lifted: a 4 MiB PUT, 503 then 200, is spooled and retried again, byte-exact")
    def _():
        limit(resource.prlimit(proxy.pid, resource.RLIMIT_FSIZE)[1])
        n = 4 * MiB
        r, reqs, sha = put("/full/lifted", n, [503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        h.eq([(q.body_len, q.body_sha256) for q in reqs], [(n, sha)] * 2, "bodies at the origin")

    small_disk(t, origin)


def small_disk(t, origin):
    """A second proxy whose spool_dir is an 8 MiB tmpfs (mounted here: this
    needs root; without it the checks are skipped)."""
    mnt = os.path.join(t.tmp, "small")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % (8 * MiB), "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        t.skip("an 8 MiB spool disk", "cannot mount a tmpfs: %s" % r.stderr.strip())
        return
    t.defer(lambda: subprocess.run(["umount", "-l", mnt], check=True))
    proxy = t.proxy(CONFIG.replace("spool_dir: spool", "spool_dir: small\n  spool_total: 0"))

    def used():
        st = os.statvfs(mnt)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def put(path, n, steps):
        f, sha = h.random_body_file(t.tmp, n, path.strip("/").replace("/", "-"))
        origin.script(path, steps)
        most = [used()]
        done = threading.Event()

        def watch():
            while not done.is_set():
                most[0] = max(most[0], used())
                time.sleep(0.0005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            r = h.curl("-X", "PUT", "--data-binary", "@" + f, "-H", "Expect:", origin.url(path),
                       proxy=proxy.url, timeout=60 * h.SLOW)
        finally:
            done.set()
            watcher.join()
        return r, origin.requests_for(path), sha, most[0]

    @t.check("8 MiB spool disk, a 16 MiB PUT (Content-Length), 503 then 200: never written to "
             "the disk, goes once, whole, gave_up=body_too_large")
    def _():
        n = 16 * MiB
        r, reqs, sha, most = put("/small/big", n, [503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts (%r)" % r)
        h.eq([(q.body_len, q.body_sha256) for q in reqs], [(n, sha)], "bodies at the origin")
        # before, the file took the disk's 8 MiB before the body went once
        h.ok(most < MiB, "the spool disk had %d bytes used at most during the request" % most)
        proxy.wait_log(r"PUT \S*/small/big: .*No space left on device")
        fl = h.access_fields(proxy.access_one("/small/big"))
        h.eq((fl["attempts"], fl.get("gave_up")), ("1", "body_too_large"), "access attempts, gave_up")

    @t.check("8 MiB spool disk, a 6 MiB PUT, 503 then 200: spooled and retried, byte-exact")
    def _():
        n = 6 * MiB
        r, reqs, sha, most = put("/small/fits", n, [503, "/echo"])
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts (%r)" % r)
        h.eq([(q.body_len, q.body_sha256) for q in reqs], [(n, sha)] * 2, "bodies at the origin")
        h.ok(most >= n, "the spool disk had %d bytes used at most during the request" % most)
        h.wait_until(lambda: used() < MiB, 5 * h.SLOW, "the spool disk given back")


h.run(scenario, __doc__)
