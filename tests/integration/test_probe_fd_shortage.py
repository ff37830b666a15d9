#!/usr/bin/env python3
"""Scenario: a down upstream's health probes find the proxy out of file
descriptors: no verdict on the upstream, counted and logged apart from
failed probes.

Proxy: a sidecar to http://127.0.0.1:UP (a reserved port, closed at
first), health { down_after: 1, probe_interval: 200ms, hold: false },
max_attempts 1, nothing pooled; log level debug.
Client: a GET on a kept-alive connection, refused (502): the upstream is
down, and probes begin (refused: failed probes). Then the proxy's
RLIMIT_NOFILE soft limit is lowered to 4 descriptors above what it holds,
and 4 idle clients take them; an origin starts listening on UP. While
the descriptors are gone, every probe finds none for its socket
(EMFILE). Then the idle clients leave.
Must hold: no probe is logged as failed for want of a descriptor ("probe
failed: Too many open files"; before, each was a failed probe, counted in
retryproxy_probes_total{result="fail"}); such probes are counted in
retryproxy_probes_total{result="local_shortage"}, one per line "probe
not made", at least two; the first of the spell is warned about
once, the others at debug level; retryproxy_probes_total{result="fail"}
counts only the probes that were refused (one per "probe failed" line);
the status page's row for the upstream shows the probes by result as
/metrics counts them, local_shortage included (before, ok and fail only);
once descriptors are free, the next probe connects, the upstream is up
and a GET gets 200.
"""

import re
import resource
import time

import harness as h
import origin as origin_mod

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@UP@
admin: 127.0.0.1:@PORT1@
log: { level: debug, format: text }
limits: { drain_timeout: 2s, pool_max_idle: 0 }
health: { down_after: 1, probe_interval: 200ms, hold: false }
defaults:
  retry: { max_attempts: 1 }
"""

ROOM = 4


def scenario(t):
    up = h.reserved_port()
    side = t.proxy(CONFIG, UP=up)
    name = "http://127.0.0.1:%d" % up
    keep = h.RawConn(side.port(0), timeout=5 * h.SLOW)
    t.defer(keep.close)
    keep.send(h.request("GET", "/down", "app.example"))
    down = keep.read_response().status
    side.wait_log(r"upstream %s is down" % name)
    side.wait_log(r"upstream %s: probe failed: Connection refused" % name)

    # a probe's socket lives for a moment: the fewest descriptors seen is
    # what the proxy holds
    samples = []
    for _ in range(5):
        samples.append(h.fd_count(side.pid))
        time.sleep(0.02)
    before = min(samples)
    hard = resource.prlimit(side.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(side.pid, resource.RLIMIT_NOFILE, (before + ROOM, hard))
    fill = []
    t.defer(lambda: [c.close() for c in fill])
    for i in range(ROOM):
        fill.append(h.RawConn(side.port(0), timeout=5 * h.SLOW))
        h.wait_until(lambda: h.fd_count(side.pid) >= before + i + 1, 3 * h.SLOW,
                     "idle client %d accepted" % (i + 1))
    api = origin_mod.Origin(port=up, name="api", echo_unknown=True).start()
    t.defer(api.stop)
    short_at = len(side.stderr_lines())
    side.wait_log(r"upstream %s: probe .*Too many open files" % name, timeout=5 * h.SLOW)
    # a few more probe intervals without a descriptor
    time.sleep(0.7)
    short_lines = side.stderr_lines()[short_at:]
    for c in fill:
        c.close()
    h.wait_until(lambda: h.fd_count(side.pid) <= before, 3 * h.SLOW, "the idle clients gone")
    side.wait_log(r"upstream %s is up" % name, timeout=5 * h.SLOW)
    after = h.fetch(side.port(0), "GET", "/after", "app.example", timeout=5 * h.SLOW).status
    metrics = h.curl("http://127.0.0.1:%d/metrics" % side.port(1), check=True).body.decode()
    page = h.curl("http://127.0.0.1:%d/?norefresh" % side.port(1), check=True).body.decode()
    lines = side.stderr_lines()

    def count(pattern):
        return sum(1 for ln in lines if pattern in ln)

    def probes(result):
        return h.metric(metrics, "retryproxy_probes_total",
                        '{upstream="%s",result="%s"}' % (name, result))

    @t.check("a probe without a descriptor is no failed probe")
    def _():
        h.eq(down, 502, "the GET that marked the upstream down")
        h.eq([ln for ln in short_lines if "probe failed" in ln], [],
             "probes logged as failed while the proxy had no descriptor")
        h.eq(probes("fail"), float(count("probe failed")),
             "retryproxy_probes_total{result=\"fail\"} against the probes logged as failed")

    @t.check("it is counted as local_shortage, warned about once a spell, the rest at debug")
    def _():
        not_made = count("probe not made")
        h.ok(not_made >= 2, "probes logged as not made: %d" % not_made)
        h.eq(probes("local_shortage"), float(not_made),
             "retryproxy_probes_total{result=\"local_shortage\"}")
        warned = [ln for ln in lines if " warn " in ln and "probe not made" in ln]
        h.eq(len(warned), 1, "warnings (%r)" % warned)
        h.ok("Too many open files" in warned[0], "warning: %s" % warned[0])

    @t.check("the status page's upstream row shows the probes not made, as /metrics counts "
             "them")
    def _():
        row = re.search(r'<tr data-upstream="%s">(.*?)</tr>' % re.escape(name), page)
        h.ok(row, "no row for %s on the status page" % name)
        cells = dict(re.findall(r'<td data-key="(probes\.[a-z_]+)"[^>]*>(\d+)</td>',
                                row.group(1)))
        want = {"probes." + r: "%d" % probes(r) for r in ("ok", "fail", "local_shortage")}
        h.eq(cells, want, "probe cells against /metrics")
        h.ok(probes("local_shortage") >= 2, "local_shortage %d" % probes("local_shortage"))

    @t.check("descriptors free again: the next probe connects, up, and a GET gets 200")
    def _():
        h.eq(after, 200, "the GET after the shortage")
        h.eq(probes("ok"), 1.0, "retryproxy_probes_total{result=\"ok\"}")


h.run(scenario, __doc__, timeout=60)
