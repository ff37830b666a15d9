#!/usr/bin/env python3
"""Scenario: something between the proxy and Redis (a Redis proxy, or a
server that only speaks RESP) sends a reply nobody asked for, between two
syncs.

hiredis (0.14, Debian 12's) asserts, and so aborts the process, when a
reply that is not an error comes with no command waiting for it. A
misbehaving Redis must cost the fleet budget, never the proxy.

Redis: a redis-server on a free loopback port, reached through a relay
that, once, sends the proxy "+OK" 200 ms after one of Redis's answers when
no command followed it.
Origin: answers 200.
Proxy: fleet: sync_interval 1s, through the relay.
Must hold: the proxy lives on and answers; it warns once, naming an
unrequested reply; it reconnects (through the relay, which does not do it
again) and the gauge is 1 again.
"""

import socket
import threading
import time

import harness as h
from fleet_gauge import wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
defaults:
  retry:
    max_attempts: 2
    budget: { ratio: 0.1, min_per_second: 5, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 1s
"""


def stray_relay(redis_port):
    """A loopback relay to Redis that, once over all its connections,
    sends "+OK" on its own 200 ms after an answer of Redis's that no
    command followed; returns (its port, an Event set once it did)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    sent = threading.Event()
    lock = threading.Lock()

    def serve_one(client):
        upstream = socket.create_connection(("127.0.0.1", redis_port))
        state = {"answered": None, "asked": 0.0}

        def pump(src, dst, mark):
            """Copy src to dst, noting in state[mark] when bytes last went."""
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    dst.close()
                    return
                state[mark] = time.monotonic()
                dst.sendall(data)

        def inject():
            while not sent.is_set():
                time.sleep(0.02)
                answered = state["answered"]
                if (answered is not None and time.monotonic() - answered > 0.2
                        and state["asked"] < answered):
                    with lock:
                        if sent.is_set():
                            return
                        try:
                            client.sendall(b"+OK\r\n")
                        except OSError:
                            return
                        sent.set()

        for fn, args in ((pump, (client, upstream, "asked")),
                         (pump, (upstream, client, "answered")), (inject, ())):
            threading.Thread(target=fn, args=args, daemon=True).start()

    def serve():
        while True:
            client, _ = listener.accept()
            serve_one(client)

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], sent


def scenario(t):
    redis = RedisServer(t.tmp).start()
    t.defer(redis.stop)
    relay_port, sent = stray_relay(redis.port)
    origin = t.origin()
    p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=relay_port)
    wait_gauge([p], 1, 10 * h.SLOW)
    h.ok(sent.wait(10 * h.SLOW), "the relay sent its stray reply")
    time.sleep(0.5)

    @t.check("the proxy lives on and answers")
    def _():
        h.ok(p.alive(), "proxy alive; stderr: %s" % p.stderr_tail(10))
        h.eq(h.curl(p.url + "/status/200").status, 200, "a request's status")

    @t.check("one warning, naming the unrequested reply; the fleet reconnects")
    def _():
        lines = [ln for ln in p.stderr_lines() if "retry budgets are local" in ln]
        h.eq(len(lines), 1, "warnings: %r" % lines)
        h.ok("unrequested reply" in lines[0], "warning: %s" % lines[0])
        wait_gauge([p], 1, 10 * h.SLOW)


h.run(scenario, __doc__, timeout=60)
