#!/usr/bin/env python3
"""Scenario: a spool file never outlives its exchange.

Client: raw connections PUT bodies of 4 to 8 MiB (Content-Length) through a
forward proxy with replay_buffer 64KiB and spool_max 32MiB: (1) one sends 2
MiB of an 8 MiB body and hangs up; (2) one hangs up while its request waits
in a 3 s backoff after a 503; (3) one is waiting in a 2 s backoff when the
config is reloaded with the spool off, and a new PUT follows the reload; (4)
one is waiting in a 1 s backoff when the proxy gets SIGTERM.
Origin: answers 503 (with Retry-After for the backoffs) then 200 per path
and records each body's length and sha256.
Must hold: while a body is being spooled or waits for its next try, the
proxy holds one open file in spool_dir, and the directory lists no name;
(1) and (2) within a second of the hang-up no spool file is open, and the
origin never sees a second try of (2); (3) the waiting request finishes
after the reload with 200 and its body byte-exact on both tries, then no
file is open, and the PUT after the reload (spool off) goes once with
gave_up=body_too_large; (4) the waiting request still gets its 200 with the
body byte-exact during the drain, and the proxy exits 0.
"""

import hashlib
import os
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits:
  drain_timeout: 10s
  replay_buffer: 64KiB
  spool_max: @SPOOL_MAX@
  spool_dir: @SPOOL_DIR@
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    retry_after: honor
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

MiB = 1 << 20


def spool_fds(proxy, directory):
    """The proxy's open file descriptors on files in directory."""
    out = []
    fd_dir = "/proc/%d/fd" % proxy.pid
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if link.startswith(directory + "/"):
            out.append(link)
    return out


def scenario(t):
    origin = t.origin()
    spool_dir = os.path.realpath(os.path.join(t.tmp, "spool"))
    os.makedirs(spool_dir, exist_ok=True)
    proxy = t.proxy(CONFIG, SPOOL_MAX="32MiB", SPOOL_DIR=spool_dir)
    host = origin.authority

    def spooling(p=proxy):
        h.wait_until(lambda: spool_fds(p, spool_dir), 5 * h.SLOW, "a spool file open")
        h.eq(os.listdir(spool_dir), [], "names in the spool directory")

    def none_open(what, p=proxy, within=1.0):
        h.wait_until(lambda: not spool_fds(p, spool_dir), within * h.SLOW,
                     "no spool file open %s (%r)" % (what, spool_fds(p, spool_dir)))

    def waiting_put(p, path, n, retry_after):
        """Start a PUT that the origin answers 503 with Retry-After first;
        return its connection, the body's sha256, once the first try is
        answered and the request waits for the next."""
        data = os.urandom(n)
        origin.script(path, ["/status/503?retry_after=%s" % retry_after, "/echo"])
        c = h.RawConn(p.port(), timeout=30 * h.SLOW)
        c.send(h.request("PUT", origin.url(path), host, body=data))
        h.wait_until(lambda: origin.requests_for(path) and origin.requests_for(path)[0].finished_at,
                     10 * h.SLOW, "the first try of %s answered" % path)
        return c, hashlib.sha256(data).hexdigest()

    @t.check("client hangs up after 2 of 8 MiB: the spool file is gone at once")
    def _():
        path = "/cleanup/midbody"
        origin.script(path, ["/echo"])
        c = h.RawConn(proxy.port())
        c.send(h.request("PUT", origin.url(path), host, headers=[("Content-Length", str(8 * MiB))]))
        c.send(os.urandom(2 * MiB))
        spooling()
        c.close()
        none_open("after the client hung up mid-body")
        h.eq(origin.requests_for(path), [], "requests the origin saw")

    @t.check("client hangs up during a 3 s backoff: the file is gone at once, no second try")
    def _():
        path = "/cleanup/backoff"
        c, _ = waiting_put(proxy, path, 4 * MiB, 3)
        spooling()
        c.close()
        none_open("after the client hung up in the backoff")
        time.sleep(3.5)
        h.eq(len(origin.requests_for(path)), 1, "requests the origin saw")
        fl = h.access_fields(proxy.access_one(path))
        h.eq(fl.get("gave_up"), "client_gone", "access gave_up")

    @t.check("reload during a backoff: the waiting PUT is re-sent whole from its file, then it is gone")
    def _():
        path = "/cleanup/reload"
        n = 4 * MiB
        c, sha = waiting_put(proxy, path, n, 2)
        spooling()
        proxy.reload(proxy.config_text.replace("spool_max: 32MiB", "spool_max: 0"))
        h.eq(len(origin.requests_for(path)), 1, "tries before the backoff ended (the reload came in it)")
        r = c.read_response("PUT")
        c.close()
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq([(q.body_len, q.body_sha256) for q in origin.requests_for(path)], [(n, sha)] * 2,
             "bodies at the origin")
        none_open("after the request that spanned the reload")

    @t.check("after that reload (spool off) a 4 MiB PUT goes once: gave_up=body_too_large")
    def _():
        path = "/cleanup/after-reload"
        origin.script(path, [503, "/echo"])
        r = h.fetch(proxy.port(), "PUT", origin.url(path), host, body=os.urandom(4 * MiB), timeout=30 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "1"), "status, Retry-Attempts")
        fl = h.access_fields(proxy.access_one(path))
        h.eq(fl.get("gave_up"), "body_too_large", "access gave_up")
        h.eq(spool_fds(proxy, spool_dir), [], "spool files open")

    @t.check("SIGTERM during a backoff: the waiting PUT finishes whole in the drain; exit 0")
    def _():
        p = t.proxy(CONFIG, SPOOL_MAX="32MiB", SPOOL_DIR=spool_dir)
        path = "/cleanup/drain"
        n = 4 * MiB
        c, sha = waiting_put(p, path, n, 1)
        spooling(p)
        p.terminate()
        r = c.read_response("PUT")
        c.close()
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "status, Retry-Attempts")
        h.eq([(q.body_len, q.body_sha256) for q in origin.requests_for(path)], [(n, sha)] * 2,
             "bodies at the origin")
        p.proc.wait(timeout=10 * h.SLOW)
        h.eq(p.proc.returncode, 0, "exit code")
        h.eq(os.listdir(spool_dir), [], "names in the spool directory")


h.run(scenario, __doc__)
