#!/usr/bin/env python3
"""Scenario: resource limits under pressure: 10,000 idle connections,
limits.max_pending_retries, and running out of file descriptors.

Client: (1) opens 10,000 idle connections to a sidecar listener (the
test's RLIMIT_NOFILE soft limit is raised to its hard limit, which the
proxy inherits; with too low a hard limit the count is scaled down and
said so), sends GETs on new connections and on a few of the idle ones,
then closes them all; (2) 20 concurrent GETs, each to its own path; (3)
against a proxy whose RLIMIT_NOFILE is lowered to 64 once it runs, 100
idle connections, a GET on one of the accepted ones, then after closing
them a GET on a new connection.
Origin: echoes; in (2) each path is scripted 503, then 200, and in a
second round a small origin of the test's sends each path's first 503 as
its head, then 300 ms later its body (a 503 is kept whole before its retry
is scheduled, so this holds every exchange between "may retry" and
"waiting in backoff"), then 200.
Proxy: max_connections 20000; in (2) max_pending_retries 5 with a 2 s
backoff and a generous retry budget; in (3) max_attempts 1.
Must hold: (1) the proxy holds every idle connection (its descriptors
show them) and still answers a new GET with 200 within 3 s, and the idle
connections still work; after they close, its descriptor count returns to
where it was. (2) in both rounds at most 5 requests wait in backoff, and
as all 20 fail together exactly 5 do; those get the 200 after about 2 s
with Retry-Attempts: 2; the other 15 get the origin's 503 at once with
Retry-Attempts: 1 and gave_up=budget in the access log, and the origin saw
them once. (3) the proxy logs the failed accept ("Too many open
files") and keeps running without spinning on the error; a GET on an
accepted connection gets a 5xx answer, not a hang; after the connections
close, a new GET is served with 200 and the descriptor count returns to
where it was.
"""

import os
import resource
import socket
import threading
import time

import harness as h
from rawserver import RawServer, read_request

IDLE_WANTED = 10000
HEADROOM = 1000          # descriptors each process keeps for everything else

CONFIG_IDLE = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 120s
  max_connections: 20000
defaults:
  retry:
    max_attempts: 1
"""

CONFIG_PENDING = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 5s
  max_pending_retries: 5
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 2s
    multiplier: 1
    max_backoff: 2s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 1000, window: 10s }
"""

CONFIG_FDS = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 120s
defaults:
  retry:
    max_attempts: 1
"""

FD_LIMIT = 64
FD_CLIENTS = 100
PENDING = 5
CONCURRENT = 20
BACKOFF = 2.0
TRICKLE_GAP = 0.3     # seconds between a trickled 503's head and body


def raise_nofile():
    """Soft RLIMIT_NOFILE up to the hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        with open("/proc/sys/fs/nr_open") as f:
            target = int(f.read())
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_seconds(pid):
    """User plus system CPU time of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_idle(port, n, limit_s):
    """n connected sockets (fewer if time runs out)."""
    socks = []
    deadline = time.monotonic() + limit_s
    while len(socks) < n and time.monotonic() < deadline:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            raise
        socks.append(s)
    return socks


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    socks.clear()


class TrickleOrigin(RawServer):
    """A keep-alive origin whose first answer for each path is a 503 sent
    as the head, then after TRICKLE_GAP seconds the body; later tries of
    the path get 200. (The shared origin cannot hold a 503's body back.)"""

    def __init__(self):
        self._counts = {}
        super().__init__(backlog=128, conn_timeout=30)

    def tries(self, path):
        with self._lock:
            return self._counts.get(path, 0)

    def serve(self, conn, cid):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while not self._stop.is_set():
            got = read_request(conn, buf)
            if got is None:
                return
            _, target, buf = got
            path = target.split("?")[0]
            with self._lock:
                self._counts[path] = n = self._counts.get(path, 0) + 1
            if n == 1:
                body = b"trickled 503\n"
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body))
                time.sleep(TRICKLE_GAP)
                conn.sendall(body)
            else:
                body = ("ok %s\n" % path).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)


def scenario(t):
    origin = t.origin(backlog=256)
    soft = raise_nofile()
    idle_n = min(IDLE_WANTED, soft - HEADROOM)
    print("RLIMIT_NOFILE soft limit now %d (hard %s): %d idle connections%s"
          % (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1], idle_n,
             "" if idle_n == IDLE_WANTED else
             " (scaled down from %d: each process needs that many plus %d)" % (IDLE_WANTED, HEADROOM)),
          flush=True)

    # -- (1) many idle connections ---------------------------------------------

    proxy = t.proxy(CONFIG_IDLE, ORIGIN=origin.port)
    idle = []
    t.defer(lambda: close_all(idle))
    time.sleep(0.3)
    base_fds = h.fd_count(proxy.pid)

    if idle_n < 100:
        t.skip("idle connections", "RLIMIT_NOFILE allows only %d" % idle_n)
    else:
        @t.check("%d idle connections open and held by the proxy" % idle_n)
        def _():
            start = time.monotonic()
            idle.extend(open_idle(proxy.port(), idle_n, 60 * h.SLOW))
            h.eq(len(idle), idle_n, "connections opened within %ss" % (60 * h.SLOW))
            h.wait_until(lambda: h.fd_count(proxy.pid) >= base_fds + idle_n, 30 * h.SLOW,
                         "the proxy to accept all %d (it holds %d descriptors, %d before)"
                         % (idle_n, h.fd_count(proxy.pid), base_fds))
            print("opened %d connections in %.1fs; proxy holds %d descriptors"
                  % (idle_n, time.monotonic() - start, h.fd_count(proxy.pid)), flush=True)

        @t.check("while they are open, a GET on a new connection returns 200 within 3 s")
        def _():
            h.ok(proxy.alive(), "the proxy is not running")
            for i in range(5):
                r = h.fetch(proxy.port(), "GET", "/echo?busy=%d" % i, "idle.example", timeout=10 * h.SLOW)
                h.eq(r.status, 200, "status of GET %d (body %r)" % (i, r.body))
                h.ok(r.elapsed < 3 * h.SLOW, "GET %d took %.2fs" % (i, r.elapsed))

        @t.check("the idle connections still work (first, middle, last)")
        def _():
            h.eq(len(idle), idle_n, "idle connections")
            for i in (0, idle_n // 2, idle_n - 1):
                c = h.RawConn.over(idle[i], 10 * h.SLOW)
                c.send(h.request("GET", "/echo?idle=%d" % i, "idle.example"))
                r = c.read_response()
                h.eq(r.status, 200, "status on idle connection %d" % i)

        @t.check("after they close, the proxy's descriptor count returns to where it was")
        def _():
            close_all(idle)
            h.wait_until(lambda: h.fd_count(proxy.pid) <= base_fds + 2, 30 * h.SLOW,
                         "the proxy to close them (%d descriptors, %d before)"
                         % (h.fd_count(proxy.pid), base_fds))
            r = h.fetch(proxy.port(), "GET", "/echo?after_idle=1", "idle.example")
            h.eq(r.status, 200, "status after closing")

    t.stop_proxy(proxy)

    # -- (2) max_pending_retries -----------------------------------------------

    slow = TrickleOrigin()
    t.defer(slow.stop)

    def pending_round(label, target_port, tries_of, prefix, body503, gap):
        """20 concurrent GETs whose first try gets a 503 and second a 200;
        checks that at most (and, all being concurrent, exactly) 5 wait.
        gap: seconds the origin takes by design to finish its 503."""
        pend_proxy = t.proxy(CONFIG_PENDING, ORIGIN=target_port)
        barrier = threading.Barrier(CONCURRENT)

        def client(i):
            barrier.wait(10)
            return h.fetch(pend_proxy.port(), "GET", "%s/%d?i=%d" % (prefix, i, i),
                           "pend.example", timeout=15 * h.SLOW)
        results = h.in_threads(CONCURRENT, client, 30 * h.SLOW)
        summary = ["%d: %s" % (i, "%d RA=%s %.2fs" % (r.status, r.header("Retry-Attempts"), r.elapsed)
                                  if isinstance(r, h.Response) else r) for i, r in enumerate(results)]
        ok = [r for r in results if isinstance(r, h.Response)]
        waited = [i for i, r in enumerate(results) if isinstance(r, h.Response) and r.status == 200]
        at_once = [i for i, r in enumerate(results) if isinstance(r, h.Response) and r.status == 503]

        @t.check("%s: every request answered, 200 or 503" % label)
        def _():
            h.eq(len(ok), CONCURRENT, "responses; %s" % summary)
            h.eq(len(waited) + len(at_once), CONCURRENT, "200s and 503s; %s" % summary)

        @t.check("%s: at most max_pending_retries (5) requests waited in backoff" % label)
        def _():
            h.ok(len(waited) <= PENDING, "%d requests waited and got the 200 after the backoff; %s"
                 % (len(waited), summary))

        @t.check("%s: the cap is used: 5 waited (all 20 failed at once)" % label)
        def _():
            h.ok(len(waited) >= PENDING, "only %d waited; %s" % (len(waited), summary))

        @t.check("%s: the waiting ones got the 200 after about 2 s with Retry-Attempts: 2" % label)
        def _():
            for i in waited:
                r = results[i]
                h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts of waiting request %d" % i)
                h.ok(BACKOFF - 0.2 <= r.elapsed <= BACKOFF + 3 * h.SLOW,
                     "waiting request %d took %.2fs, expected about %ss" % (i, r.elapsed, BACKOFF))
                h.eq(tries_of(i), 2, "tries at the origin for request %d" % i)

        @t.check("%s: the others got the 503 at once, Retry-Attempts: 1, gave_up=budget, one try" % label)
        def _():
            for i in at_once:
                r = results[i]
                h.eq((r.header("Retry-Attempts"), r.body), ("1", body503),
                     "Retry-Attempts and body of refused request %d" % i)
                # at once: within a second of the 503 being whole, which
                # the origin makes take gap (a request held in backoff
                # would take gap + BACKOFF)
                h.ok(r.elapsed < gap + 1.0 * h.SLOW, "refused request %d took %.2fs (the origin's 503 "
                     "took %.1fs by design)" % (i, r.elapsed, gap))
                f = h.access_fields(pend_proxy.access_one("%s/%d?" % (prefix, i)))
                h.eq((f.get("status"), f.get("attempts"), f.get("gave_up")), ("503", "1", "budget"),
                     "access log of refused request %d" % i)
                h.eq(tries_of(i), 1, "tries at the origin for request %d" % i)

        t.stop_proxy(pend_proxy)

    for i in range(CONCURRENT):
        origin.script("/pend/%d" % i, [503, 200])
    pending_round("503 at once", origin.port, lambda i: len(origin.requests_for("/pend/%d" % i)), "/pend",
                  b"status 503\n", 0.0)
    pending_round("503 whose body trickles in", slow.port, lambda i: slow.tries("/trickle/%d" % i),
                  "/trickle", b"trickled 503\n", TRICKLE_GAP)

    # -- (3) out of file descriptors -----------------------------------------------

    fd_proxy = t.proxy(CONFIG_FDS, ORIGIN=origin.port)
    fd_clients = []
    t.defer(lambda: close_all(fd_clients))
    time.sleep(0.3)
    before = h.fd_count(fd_proxy.pid)
    hard = resource.prlimit(fd_proxy.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(fd_proxy.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, hard))
    print("proxy #%d: %d descriptors open, RLIMIT_NOFILE soft limit set to %d"
          % (fd_proxy.n, before, FD_LIMIT), flush=True)

    @t.check("%d idle connections against RLIMIT_NOFILE %d: the accept failure is logged"
             % (FD_CLIENTS, FD_LIMIT))
    def _():
        h.ok(before < FD_LIMIT - 10, "the proxy already uses %d descriptors" % before)
        fd_clients.extend(open_idle(fd_proxy.port(), FD_CLIENTS, 30 * h.SLOW))
        h.eq(len(fd_clients), FD_CLIENTS, "connections opened")
        fd_proxy.wait_log(r"accept.*(Too many open files|EMFILE)", timeout=10 * h.SLOW)
        h.ok(fd_proxy.alive(), "the proxy exited")

    @t.check("while out of descriptors the proxy does not spin (CPU under 30% over 2 s)")
    def _():
        c0, w0 = cpu_seconds(fd_proxy.pid), time.monotonic()
        time.sleep(2)
        used = (cpu_seconds(fd_proxy.pid) - c0) / (time.monotonic() - w0)
        h.ok(used < 0.3, "the proxy used %.0f%% of a CPU while out of descriptors" % (100 * used))
        h.ok(fd_proxy.alive(), "the proxy exited")

    @t.check("a GET on an accepted connection while out of descriptors gets a 5xx, not a hang")
    def _():
        c = h.RawConn.over(fd_clients[0], 10 * h.SLOW)
        c.send(h.request("GET", "/echo?nofd=1", "fd.example"))
        r = c.read_response()
        h.ok(500 <= r.status < 600, "status %d (body %r)" % (r.status, r.body))
        h.ok(fd_proxy.alive(), "the proxy exited")

    @t.check("after the connections close, a new GET is served and descriptors return to where they were")
    def _():
        close_all(fd_clients)
        h.wait_until(lambda: h.fd_count(fd_proxy.pid) <= before + 2, 15 * h.SLOW,
                     "the proxy's descriptors to drop back to %d (now %d)" % (before, h.fd_count(fd_proxy.pid)))
        deadline = time.monotonic() + 10 * h.SLOW
        while True:
            try:
                r = h.fetch(fd_proxy.port(), "GET", "/echo?after_fds=1", "fd.example", timeout=5 * h.SLOW)
                break
            except (OSError, AssertionError) as e:
                if time.monotonic() > deadline:
                    raise AssertionError("no answer after the connections closed: %s" % e)
                time.sleep(0.2)
        h.eq(r.status, 200, "status (body %r)" % r.body)
        h.ok(fd_proxy.alive(), "the proxy exited")


h.run(scenario, __doc__, timeout=150)
