#!/usr/bin/env python3
"""Scenario: readiness notifications to the service manager (sd_notify).

Client: none; the test plays systemd. It binds an AF_UNIX datagram socket,
once at a path in a temp dir and once at an abstract name, and starts the
proxy with NOTIFY_SOCKET pointing there (the abstract one as "@name"). It
sends SIGHUP with a valid config, SIGHUP with an invalid one, then SIGTERM.
Origin: none.
Must hold: READY=1 (with a STATUS=) arrives once the listener accepts; each
SIGHUP gives RELOADING=1 with MONOTONIC_USEC=<this host's CLOCK_MONOTONIC in
microseconds, taken between the signal and the message>, then READY=1, the
failed reload too; SIGTERM gives STOPPING=1; nothing else arrives.
A third proxy runs without -c on the ./conf/retryproxy.yaml of its working
directory; the file is renamed away and the proxy gets SIGHUP: that reload
is refused before any config is read, and still gives RELOADING=1, then
READY=1 (before the fix it sent neither, so a Type=notify-reload manager
waited for its timeout). A fourth does the same while it drains (a
request in flight to an upstream that never answers): that SIGHUP is
ignored as any reload is while draining, and nothing follows STOPPING=1
(before the fix, RELOADING=1 and READY=1 "reload failed, still serving"
did).
"""

import os
import signal
import socket
import subprocess
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 1s
"""


def messages(sock, count, timeout=10):
    """The next count datagrams, each as {VARIABLE: value}."""
    out = []
    deadline = time.monotonic() + timeout * h.SLOW
    while len(out) < count:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096)
        except socket.timeout:
            raise AssertionError("got %d of %d notifications: %r" % (len(out), count, out))
        fields = {}
        for line in data.decode().splitlines():
            if line:
                k, _, v = line.partition("=")
                fields[k] = v
        out.append(fields)
    return out


def monotonic_usec():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def run_one(t, label, bind_name, env_value):
    """One proxy life with NOTIFY_SOCKET=env_value; bind_name is what the
    test's socket binds."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    t.defer(sock.close)
    sock.bind(bind_name)
    proxy = t.proxy(CONFIG, env={"NOTIFY_SOCKET": env_value})

    @t.check("%s: READY=1 with a STATUS once the listener is up" % label)
    def _():
        (m,) = messages(sock, 1)
        h.eq(m.get("READY"), "1", "READY in %r" % m)
        h.ok(m.get("STATUS"), "no STATUS in %r" % m)
        h.ok(h.port_accepts(proxy.port(0)), "the listener does not accept after READY=1")

    def sighup_check(what):
        before = monotonic_usec()
        os.kill(proxy.pid, signal.SIGHUP)
        reloading, ready = messages(sock, 2)
        after = monotonic_usec()
        h.eq(reloading.get("RELOADING"), "1", "RELOADING in the first message %r" % reloading)
        usec = int(reloading.get("MONOTONIC_USEC", "-1"))
        h.ok(before <= usec <= after, "MONOTONIC_USEC %d is not between %d and %d (%s)"
             % (usec, before, after, what))
        h.eq(ready.get("READY"), "1", "READY in the second message %r (%s)" % (ready, what))

    @t.check("%s: SIGHUP -> RELOADING=1 with MONOTONIC_USEC, then READY=1" % label)
    def _():
        sighup_check("valid config")
        proxy.wait_log(r"reload: now running")

    @t.check("%s: a failed reload still ends with READY=1" % label)
    def _():
        with open(proxy.config_path, "a") as f:
            f.write("no_such_key: 1\n")
        sighup_check("invalid config")
        proxy.wait_log(r"keeping the running config")

    @t.check("%s: SIGTERM -> STOPPING=1, and nothing more" % label)
    def _():
        proxy.terminate()
        (m,) = messages(sock, 1)
        h.eq(m, {"STOPPING": "1"}, "message after SIGTERM")
        proxy.proc.wait(timeout=10 * h.SLOW)
        sock.setblocking(False)
        try:
            extra = sock.recv(4096)
        except BlockingIOError:
            extra = None
        h.eq(extra, None, "a message after STOPPING=1")

    t.stop_proxy(proxy)


def start_found(t, name, drain_timeout="1s"):
    """A proxy run without -c from a directory of its own, on the
    ./conf/retryproxy.yaml it finds there, with NOTIFY_SOCKET bound by the
    test. Returns (the file, its port, the socket, the stderr path, the
    process)."""
    cwd = os.path.join(t.tmp, name)
    os.makedirs(os.path.join(cwd, "conf"))
    found = os.path.join(cwd, "conf", "retryproxy.yaml")
    port = h.free_port()
    with open(found, "w") as f:
        f.write(CONFIG.replace("@PORT0@", str(port)).replace(
            "drain_timeout: 1s", "drain_timeout: %s" % drain_timeout))
    path = os.path.join(t.tmp, "notify-%s.sock" % name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    t.defer(sock.close)
    sock.bind(path)
    err_path = os.path.join(t.tmp, "%s.stderr" % name)
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([h.BIN], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                env=h.clean_env({"NOTIFY_SOCKET": path}))

    def stop():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    t.defer(stop)
    return found, port, sock, err_path, proc


def no_sanitizer_report(err_path):
    h.ok(not any(mark in h.read_file(err_path) for mark in h._SANITIZER_MARKERS),
         "sanitizer report: %r" % h.read_file(err_path)[-2000:])


def run_found_config_gone(t):
    """A proxy on ./conf/retryproxy.yaml (no -c) whose file is gone at a
    reload."""
    etc = "/etc/retryproxy/retryproxy.yaml"
    label = "no -c, the config found at the start gone"
    if os.path.exists(etc):
        t.skip(label, "%s exists: a reload would load it" % etc)
        return
    found, port, sock, err_path, proc = start_found(t, "found")

    @t.check("%s: RELOADING=1, then READY=1" % label)
    def _():
        (m,) = messages(sock, 1)
        h.eq(m.get("READY"), "1", "READY in %r" % m)
        os.rename(found, found + ".old")
        before = monotonic_usec()
        proc.send_signal(signal.SIGHUP)
        try:
            reloading, ready = messages(sock, 2)
        except AssertionError as e:
            raise AssertionError("%s; stderr:\n%s" % (e, h.read_file(err_path)[-2000:]))
        h.eq(reloading.get("RELOADING"), "1", "RELOADING in the first message %r" % reloading)
        usec = int(reloading.get("MONOTONIC_USEC", "-1"))
        h.ok(before <= usec <= monotonic_usec(), "MONOTONIC_USEC %d is not after the signal" % usec)
        h.eq(ready.get("READY"), "1", "READY in the second message %r" % ready)
        h.wait_until(lambda: "keeping the running config" in h.read_file(err_path),
                     10 * h.SLOW, "a line saying the running config is kept")
        h.ok(h.port_accepts(port), "the proxy no longer accepts on %d" % port)
        proc.send_signal(signal.SIGTERM)
        h.eq(proc.wait(timeout=20 * h.SLOW), 0, "exit code after SIGTERM")
        no_sanitizer_report(err_path)


def run_found_config_gone_draining(t):
    """A proxy on ./conf/retryproxy.yaml (no -c), draining with a request in
    flight, whose file is gone at a SIGHUP then."""
    etc = "/etc/retryproxy/retryproxy.yaml"
    label = "no -c, the config found at the start gone, SIGHUP while draining"
    if os.path.exists(etc):
        t.skip(label, "%s exists: a reload would load it" % etc)
        return
    found, port, sock, err_path, proc = start_found(t, "found-draining", drain_timeout="3s")
    # an upstream that takes the request and never answers: the drain waits
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.defer(silent.close)
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    silent.settimeout(10 * h.SLOW)

    @t.check("%s: STOPPING=1, and nothing more" % label)
    def _():
        (m,) = messages(sock, 1)
        h.eq(m.get("READY"), "1", "READY in %r" % m)
        client = socket.create_connection(("127.0.0.1", port), timeout=10 * h.SLOW)
        t.defer(client.close)
        target = "127.0.0.1:%d" % silent.getsockname()[1]
        client.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n"
                        % (target, target)).encode())
        upstream, _ = silent.accept()
        t.defer(upstream.close)
        proc.send_signal(signal.SIGTERM)
        (m,) = messages(sock, 1)
        h.eq(m, {"STOPPING": "1"}, "message after SIGTERM")
        os.rename(found, found + ".old")
        proc.send_signal(signal.SIGHUP)
        h.eq(proc.wait(timeout=20 * h.SLOW), 0, "exit code after the drain")
        sock.setblocking(False)
        extra = []
        while True:
            try:
                extra.append(sock.recv(4096))
            except BlockingIOError:
                break
        h.eq(extra, [], "messages after STOPPING=1; stderr:\n%s"
             % h.read_file(err_path)[-2000:])
        no_sanitizer_report(err_path)


def scenario(t):
    path = os.path.join(t.tmp, "notify.sock")
    run_one(t, "socket path", path, path)
    name = "retryproxy-test-notify-%d-%d" % (os.getpid(), time.monotonic_ns())
    run_one(t, "abstract @name", "\0" + name, "@" + name)
    run_found_config_gone(t)
    run_found_config_gone_draining(t)


h.run(scenario, __doc__)
