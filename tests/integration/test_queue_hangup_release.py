#!/usr/bin/env python3
"""Scenario: a request waiting for a connection under
max_upstream_connections, whose client left with its close hidden behind
input the proxy does not read, is found gone by the 500 ms look in the
same loop pass as a pooled connection comes free for it: it is not sent.

Client: raw connections to a sidecar listener capped at 1 connection. One
GET holds the connection, its response held at a gate; a second client
sends a GET and, pipelined behind it, a POST larger than the proxy reads
ahead, waits until all of it is in the proxy's kernel, and closes.
Proxy: max_upstream_connections 1. To put the look and the release in one
pass, its loop is kept busy by a reload of a config with many routes (it
is read and checked in the loop): the second client closes and the first
GET's response reaches the proxy's kernel while it runs, and it runs past
the next look. When it ends, the loop's next pass reads the response
(which pools the connection and lets the waiting GET have it), runs the
look (which finds the close and marks it to be reported at the pass's
end), then releases the waiting GET.
Origin: the recording test origin.
Must hold:
- the first GET gets its 200;
- the waiting GET never reaches the origin, and its access line says no
  try was made (attempts=0): its client was found gone before its try
  (before, the try's own look, finding the close already marked, took it
  for no close at all, and the GET went out on the pooled connection
  ahead of the close's report: attempts=1 tries="cancelled").
"""

import datetime
import os
import signal
import subprocess
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  max_upstream_connections: 1
defaults:
  retry: { try_timeout: 60s }
"""

# How long the reload must keep the loop from running: the close and the
# response come in its first part, and a look falls due in the rest.
STALL = 1.5


def many_routes(base, n):
    return base + "routes:\n" + "".join(
        "  - name: r%d\n    match: { path_prefix: /unused%d/ }\n" % (i, i) for i in range(n))


def log_time(line):
    """The wall-clock time of a proxy log line, in seconds since the epoch."""
    stamp = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    def waiting():
        return h.metric(h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1),
                               check=True).body.decode(), "retryproxy_upstream_waiting")

    # a config whose check takes STALL or more here
    slow = os.path.join(t.tmp, "slow.yaml")
    n = 10000
    while True:
        with open(slow, "w") as f:
            f.write(many_routes(proxy.config_text, n))
        start = time.monotonic()
        subprocess.run([h.BIN, "--check", "-c", slow], capture_output=True, timeout=300)
        if time.monotonic() - start >= STALL or n >= 160000:
            break
        n *= 2

    @t.check("a waiting GET whose hidden close is found in the pass that frees a pooled "
             "connection for it is not sent")
    def _():
        gate = origin.gate("busy")
        busy = h.RawConn(proxy.port(0), timeout=60 * h.SLOW)
        t.defer(busy.close)
        busy.send(h.request("GET", "/bytes/10?hold=busy", "a.example"))
        gate.wait_reached(5 * h.SLOW)
        leaver = h.RawConn(proxy.port(0), timeout=20 * h.SLOW)
        t.defer(leaver.close)
        # the POST is more than the proxy's input takes, less than it and
        # its kernel do: the close comes behind bytes it does not read
        leaver.send(h.request("GET", "/left", "a.example") +
                    h.request("POST", "/behind", "a.example", body=b"x" * (256 << 10)))
        h.wait_until(lambda: waiting() == 1, 5 * h.SLOW, "the GET to wait for the connection")
        h.wait_until(lambda: h.send_queue(leaver.local_port, proxy.port(0)) == 0, 5 * h.SLOW,
                     "the pipelined body all in the proxy's kernel")
        with open(proxy.config_path, "w") as f:
            f.write(h.read_file(slow))
        os.kill(proxy.pid, signal.SIGHUP)
        time.sleep(0.2)
        closed = time.time()
        leaver.close()
        gate.release()
        origin.wait_for(lambda o: o.requests_for("/bytes/10")[0].finished_at is not None,
                        5 * h.SLOW, "the held response sent")
        began = log_time(proxy.wait_log(r"SIGHUP: reloading", timeout=60 * h.SLOW)[-1])
        ended = log_time(proxy.wait_log(r"reload: now running", timeout=60 * h.SLOW)[-1])
        h.ok(began <= closed and ended - closed >= 0.6,
             "the reload kept the loop busy from before the close (reload %.3f, close %.3f) "
             "to past a look after it (reload done %.3f)" % (began, closed, ended))
        h.eq(busy.read_response(timeout=10 * h.SLOW).status, 200, "the busy GET")
        # /metrics now lists every route: the access line instead
        fields = h.access_fields(proxy.access_one("/left"))
        time.sleep(0.3)
        h.eq([q.path for q in origin.requests_for("/left")], [], "the left GET at the origin")
        h.eq((fields["status"], fields["attempts"], fields["tries"]), ("0", "0", "-"),
             "the left GET's status, attempts, tries")


h.run(scenario, __doc__, timeout=280)
