#!/usr/bin/env python3
"""Scenario: Redis answers one route's sync with an error while the other
routes' syncs of the same round are still out.

The proxy drops the connection from inside that reply's callback; hiredis
then calls the other routes' callbacks with no reply. Their leases must
not be taken as spent: a route that made no retry owes nothing.

Redis: a redis-server on a free loopback port, turned into a read-only
replica (REPLICAOF 127.0.0.1 1: its writes, and so every sync, fail with
READONLY) once each route holds a lease, then back to a primary
(REPLICAOF NO ONE). A MONITOR connection records every command it runs.
Origin: answers 200.
Proxy: three routes, each with a fleet budget of min_per_second 20 (a
lease without traffic); fleet: sync_interval 100ms.
Must hold: after the READONLY warning and the reconnect, every sync reports
0 retries owed (the last argument of the script's call; it was the route's
whole lease before the fix), and the routes get leases again.
Then one route's key is made a string (another program's key of that
name): its sync fails with WRONGTYPE, and the one warning names the key, so
that the operator knows which to delete; deleted, the fleet answers again.
"""

import re
import socket
import threading

import harness as h
from fleet_gauge import wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: debug, format: text }
defaults:
  retry:
    max_attempts: 2
    budget: { ratio: 0.1, min_per_second: 20, window: 10s }
routes:
  - name: first
    match: { path_prefix: /first/ }
  - name: second
    match: { path_prefix: /second/ }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
"""

GRANT = r"fleet checkout: route (\S+): reported \d+ requests, granted (\d+) of"


class Monitor:
    """The commands Redis runs, as MONITOR reports them: one list of
    arguments per command."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        f = self.sock.makefile("rb")
        for line in f:
            self.lines.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    def commands(self, name):
        out = []
        for line in list(self.lines):
            args = re.findall(r'"((?:[^"\\]|\\.)*)"', line)
            if args and args[0].upper() == name:
                out.append(args)
        return out

    def close(self):
        self.sock.close()


def grants(proxy):
    """(route, tokens granted) of every sync answered so far."""
    return [(m.group(1), int(m.group(2)))
            for m in (re.search(GRANT, ln) for ln in proxy.stderr_lines()) if m]


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    origin = t.origin()
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port)
    wait_gauge([p], 1, 10 * h.SLOW)
    h.wait_until(lambda: {r for r, g in grants(p) if g > 0} >= {"first", "second", "default"},
                 5 * h.SLOW, "a lease for every route (grants so far: %r)" % grants(p)[-6:])
    monitor = Monitor(redis.port)
    t.defer(monitor.close)

    redis.command("REPLICAOF", "127.0.0.1", "1")
    p.wait_log(r"retry budgets are local", timeout=5 * h.SLOW)
    failed_at = len(monitor.lines)
    redis.command("REPLICAOF", "NO", "ONE")
    p.wait_log(r"answers again", timeout=10 * h.SLOW)
    answered = len(grants(p))
    h.wait_until(lambda: len(grants(p)) >= answered + 6, 5 * h.SLOW, "two rounds answered")

    @t.check("the syncs were refused with READONLY (the scenario is what it claims)")
    def _():
        warning = [ln for ln in p.stderr_lines() if "retry budgets are local" in ln]
        h.ok(warning and "READONLY" in warning[0], "warning: %r" % warning)

    @t.check("no retry was made, so no sync after the error reports one owed")
    def _():
        calls = [args for name in ("EVALSHA", "EVAL") for args in monitor.commands(name)]
        h.ok(len(calls) >= 6, "syncs Redis saw: %d" % len(calls))
        owed = [(args[3], args[-1]) for args in calls if args[-1] != "0"]
        h.eq(owed, [], "(key, owed) of syncs reporting retries owed (%d syncs, %d lines "
             "before the error)" % (len(calls), failed_at))
        h.eq(len(origin.requests), 0, "requests at the origin")

    @t.check("every route gets a lease again once Redis answers")
    def _():
        h.eq({r for r, g in grants(p)[answered:] if g > 0}, {"first", "second", "default"},
             "routes granted tokens after the reconnect")

    key = "retryproxy:{checkout}:second:10000"
    redis.command("SET", key, "not a hash")
    p.wait_log(r"retry budgets are local", timeout=5 * h.SLOW, count=2)

    @t.check("a sync refused with WRONGTYPE: the warning names the route's key")
    def _():
        warning = [ln for ln in p.stderr_lines() if "retry budgets are local" in ln][-1]
        h.ok("WRONGTYPE" in warning and key in warning, "warning: %s" % warning)

    @t.check("the key deleted: the fleet answers again")
    def _():
        redis.command("DEL", key)
        p.wait_log(r"answers again", timeout=15 * h.SLOW, count=2)


h.run(scenario, __doc__, timeout=60)
