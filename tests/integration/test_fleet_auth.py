#!/usr/bin/env python3
"""Scenario: the fleet's Redis asks for a password, as managed Redis
services do. A proxy logs in with fleet.password_file (and fleet.username
for an ACL user); a wrong or missing password leaves it on its local
budgets, saying why, until a reload brings the right one.

Redis: a redis-server with requirepass (the default user's password) and an
ACL user "retryproxy" with a password of its own.
Origin: answers every /fail request with 503.
Proxies (admin listener each; max_attempts 3, short backoffs; budget ratio
0.2, min_per_second 5; fleet: sync_interval 100ms): one with the default
user's password file; one with username retryproxy and its password file;
one whose file holds a wrong password; one with no password at all.
Must hold:
- the first two report retryproxy_fleet_connected 1, and Redis lists two
  connections logged in as their users;
- /config shows username and password_file but no password, and no
  password appears in any proxy's log;
- the wrong password: one warning naming AUTH and WRONGPASS, gauge 0, and a
  failing idempotent request still gets its retries (Retry-Attempts 3);
- no password: one warning naming NOAUTH, gauge 0;
- the wrong password's file rewritten with the right one, then SIGHUP: the
  proxy logs in (gauge 1);
- through a relay that delays each of Redis's answers by 300 ms (under the
  500 ms reply deadline), a proxy with the password still connects: the
  deadline is per answer, not one for the connect, AUTH and SCRIPT LOAD;
- a proxy started while Redis is down, then Redis started asking for a
  password the proxy has not: one warning for the refused connections,
  one more naming NOAUTH (a debug line only before the fix), and none
  when Redis goes away again (a reason already given).
"""

import os
import queue
import re
import socket
import threading
import time

import harness as h
from fleet_gauge import admin_get, fleet_gauge, wait_gauge
from redisserver import RedisServer

DEFAULT_PASSWORD = "default pass: 7 words & symbols!"
USER_PASSWORD = "user-secret-4f2a"

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 20ms
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 5, window: 10s }
fleet:
  redis: 127.0.0.1:@REDIS@
  name: checkout
  sync_interval: 100ms
@LOGIN@"""


REPLY_DELAY = 0.3


def slow_relay(redis_port):
    """A loopback relay to Redis that sends on each of Redis's answers
    REPLY_DELAY after it came, in order; returns its port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def pump(src, dst, delay):
        due = queue.Queue()

        def writer():
            while True:
                at, data = due.get()
                time.sleep(max(0.0, at - time.monotonic()))
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=writer, daemon=True).start()
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            due.put((time.monotonic() + delay, data))
            if not data:
                return

    def serve():
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", redis_port))
            threading.Thread(target=pump, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, REPLY_DELAY),
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def scenario(t):
    redis = RedisServer(t.tmp, extra_args=["--requirepass", DEFAULT_PASSWORD,
                                           "--user", "retryproxy", "on", ">" + USER_PASSWORD,
                                           "~*", "&*", "+@all"],
                        auth=[DEFAULT_PASSWORD]).start()
    t.defer(redis.stop)
    origin = t.origin()
    origin.script("/fail", [503])

    def secret(name, text):
        path = os.path.join(t.tmp, name)
        with open(path, "w") as f:
            f.write(text + "\n")
        return path

    default_file = secret("default-password", DEFAULT_PASSWORD)
    user_file = secret("user-password", USER_PASSWORD)
    wrong_file = secret("wrong-password", "not-the-password")

    def proxy(login):
        return t.proxy(CONFIG, ORIGIN=origin.port, REDIS=redis.port, LOGIN=login)

    by_default = proxy("  password_file: %s\n" % default_file)
    by_user = proxy("  username: retryproxy\n  password_file: %s\n" % user_file)
    wrong = proxy("  password_file: %s\n" % wrong_file)
    anonymous = proxy("")
    proxies = [by_default, by_user, wrong, anonymous]

    @t.check("the right password, as the default user or as an ACL user: connected")
    def _():
        wait_gauge([by_default], 1, 10 * h.SLOW)
        wait_gauge([by_user], 1, 10 * h.SLOW)
        users = re.findall(r" user=(\S+)", redis.command("CLIENT", "LIST"))
        h.eq(sorted(u for u in users if u == "retryproxy"), ["retryproxy"],
             "connections as retryproxy (%r)" % users)

    @t.check("/config names username and password_file, never the password; no log line does")
    def _():
        config = admin_get(by_user, "/config")
        h.ok(re.search(r"^  username: retryproxy\n  password_file: %s$" % re.escape(user_file),
                       config, re.M), "/config:\n" + config)
        for p in proxies:
            text = admin_get(p, "/config") + p.stderr()
            for pw in (DEFAULT_PASSWORD, USER_PASSWORD, "not-the-password"):
                h.ok(pw not in text, "a password in /config or the log of port %d" % p.port())

    @t.check("a wrong password: one warning naming AUTH and WRONGPASS, gauge 0, local retries")
    def _():
        lines = wrong.wait_log(r"retry budgets are local", timeout=10 * h.SLOW)
        h.ok("AUTH refused" in lines[0] and "WRONGPASS" in lines[0], "warning: %s" % lines[0])
        h.eq(fleet_gauge(wrong), 0, "fleet gauge")
        r = h.fetch(wrong.port(), "GET", "/fail?n=1", "fleet.example", timeout=10 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (503, "3"), "status and Retry-Attempts")
        h.eq(len([ln for ln in wrong.stderr_lines() if "retry budgets are local" in ln]), 1,
             "warnings however many reconnects failed")

    @t.check("no password for a Redis that asks for one: a warning naming NOAUTH, gauge 0")
    def _():
        lines = anonymous.wait_log(r"retry budgets are local", timeout=10 * h.SLOW)
        h.ok("NOAUTH" in lines[0], "warning: %s" % lines[0])
        h.eq(fleet_gauge(anonymous), 0, "fleet gauge")

    @t.check("the password file rewritten, then SIGHUP: the proxy logs in")
    def _():
        with open(wrong_file, "w") as f:
            f.write(DEFAULT_PASSWORD + "\n")
        wrong.reload()
        wait_gauge([wrong], 1, 10 * h.SLOW)
        wrong.wait_log(r"connected to redis|answers again", timeout=10 * h.SLOW)

    @t.check("Redis answering each command in 300 ms, behind AUTH: the proxy connects")
    def _():
        relayed = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=slow_relay(redis.port),
                          LOGIN="  password_file: %s\n" % default_file)
        wait_gauge([relayed], 1, 10 * h.SLOW)

    @t.check("Redis down, then up asking for a password: a warning for each reason, once")
    def _():
        late = RedisServer(t.tmp, extra_args=["--requirepass", DEFAULT_PASSWORD],
                           auth=[DEFAULT_PASSWORD])
        p = t.proxy(CONFIG, ORIGIN=origin.port, REDIS=late.port, LOGIN="")
        p.wait_log(r"retry budgets are local", timeout=10 * h.SLOW)
        time.sleep(1.0)  # reconnects refused, 100 ms apart and more
        late.start()
        t.defer(late.stop)
        p.wait_log(r"redis .*NOAUTH", timeout=10 * h.SLOW)
        time.sleep(2.0)  # reconnects refused with NOAUTH
        late.stop()
        time.sleep(2.0)  # refused again, a reason already given
        warnings = [ln for ln in p.stderr_lines() if "fleet checkout" in ln and " warn " in ln]
        h.ok("refused" in warnings[0].lower(), "the first names the refused connection: %r"
             % warnings)
        h.eq(len([ln for ln in warnings if "refused" in ln.lower()]), 1,
             "warnings naming the refused connection (%r)" % warnings)
        h.eq(len([ln for ln in warnings if "NOAUTH" in ln]), 1,
             "warnings naming NOAUTH (%r)" % warnings)
        # Redis stopping may close a connection the proxy has just opened:
        # a reason of its own, once
        reasons = [ln.split(": ", 2)[-1] for ln in warnings]
        h.eq(len(reasons), len(set(reasons)), "a reason warned about twice: %r" % warnings)


h.run(scenario, __doc__, timeout=90)
