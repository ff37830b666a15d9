#!/usr/bin/env python3
"""Scenario: a forward proxy's clients name 2000 upstreams that refuse.

Client: 2000 absolute-form GETs, eight at a time on raw sockets, each to
another upstream: http://127.0.X.Y:<port>/ with one port bound on every
address and not listening, so each connect is refused at once (loopback
answers for all of 127.0.0.0/8). Retries are off (max_attempts: 1), so
each upstream is left up with failures=1 and nothing attached.
Origin: none.
Must hold:
- every request gets 502;
- /upstreams keeps at most 1024 upstreams (UPSTREAMS_KEEP in
  src/upstreams.c), the most recently used among them, and /metrics has
  no more retryproxy_upstream_up series than that;
- the status page `/` lists at most 100 upstreams, says how many more
  /upstreams has, and stays under 200 KB;
- one upstream that is down (three requests to it before the flood, with
  nothing attached since) is still listed, and first on the page:
  trimming forgets up ones first.
"""

import concurrent.futures
import re
import socket

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits: { drain_timeout: 2s }
health: { down_after: 3, probe_interval: 10m, hold: false }
defaults:
  retry:
    max_attempts: 1
"""

COUNT = 2000
KEEP = 1024


def refused_port():
    """A port bound on every address and not listening: a connect to
    127.x.y.z there is refused. Kept bound for the whole run."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    h._RESERVED.append(s)
    return s.getsockname()[1]


def host(i):
    return "127.0.%d.%d" % (1 + i // 250, 1 + i % 250)


def scenario(t):
    port = refused_port()
    proxy = t.proxy(CONFIG)
    admin = "http://127.0.0.1:%d" % proxy.port(1)

    # the first one: down (three refused connects) before the flood
    for _ in range(3):
        h.eq(h.forward_get(proxy.port(0), "127.0.0.1:%d" % port), 502, "a request to the first")
    down = "http://127.0.0.1:%d" % port

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: h.forward_get(proxy.port(0), "%s:%d" % (host(i), port)),
                              range(COUNT)))

    @t.check("every request got 502")
    def _():
        h.eq({c: codes.count(c) for c in set(codes)}, {502: COUNT}, "status codes")

    lines = h.curl(admin + "/upstreams", check=True).body.decode().splitlines()

    @t.check("/upstreams keeps at most %d upstreams, the most recently used" % KEEP)
    def _():
        h.ok(len(lines) <= KEEP, "/upstreams has %d lines" % len(lines))
        names = {line.split()[0] for line in lines}
        newest = ["http://%s:%d" % (host(i), port) for i in range(COUNT - 100, COUNT)]
        h.eq([n for n in newest if n not in names], [], "recent upstreams missing")
        h.ok(all(re.match(r"^\S+ (up|down) failures=\d+ held=0$", line) for line in lines),
             "odd lines: %r" % lines[:5])

    @t.check("the down upstream asked for before the flood is still known, and down")
    def _():
        h.ok("%s down failures=3 held=0" % down in lines,
             "no %s down line among %d" % (down, len(lines)))

    @t.check("/metrics has no more upstream series than /upstreams lines")
    def _():
        body = h.curl(admin + "/metrics", check=True).body.decode()
        up = [line for line in body.splitlines() if line.startswith("retryproxy_upstream_up{")]
        h.ok(len(up) <= KEEP, "%d retryproxy_upstream_up series" % len(up))

    @t.check("the status page lists at most 100 upstreams, says how many more, < 200 KB")
    def _():
        r = h.curl(admin + "/", check=True)
        body = r.body.decode()
        h.ok(len(r.body) < 200 * 1024, "/ is %d bytes" % len(r.body))
        rows = re.findall(r'<tr data-upstream="([^"]*)"', body)
        h.eq(len(rows), 100, "upstream rows")
        h.eq(rows[0], down, "the first row: the down upstream")
        total = len(h.curl(admin + "/upstreams", check=True).body.decode().splitlines())
        m = re.search(r'data-key="upstreams_more">and (\d+) more: see', body)
        h.ok(m, "no 'and N more' row")
        h.eq(int(m.group(1)), total - 100, "'and N more' against /upstreams")


h.run(scenario, __doc__, timeout=110)
