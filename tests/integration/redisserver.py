"""A real redis-server for the fleet tests and the fleet simulation
(standard library only): started on a free loopback port with nothing
written to disk, frozen (SIGSTOP), thawed, stopped and restarted on the
same port, with a password when asked; plus a minimal RESP client to look
at what the proxies keep.
"""

import os
import shutil
import signal
import socket
import subprocess
import time

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _free_port():
    # harness's pick: a port from the half of the range that no test holds
    # closed with reserved_port (redis-server binds it with SO_REUSEADDR)
    import harness
    return harness.free_port()


class RedisServer:
    """One redis-server process on 127.0.0.1:port."""

    def __init__(self, directory, port=None, extra_args=(), auth=()):
        self.directory = directory
        self.port = port or _free_port()
        self.extra_args = list(extra_args)  # more redis-server options, as given
        self.auth = list(auth)  # AUTH's arguments for command(), when Redis asks for them
        self.proc = None
        self.log_path = os.path.join(directory, "redis-%d.log" % self.port)

    def start(self, timeout=10):
        if not os.path.exists(REDIS_SERVER):
            raise AssertionError("redis-server not found (Debian: redis-server; "
                                 "scripts/install-deps.sh installs it)")
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.directory,
                "--daemonize", "no", "--logfile", self.log_path] + self.extra_args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.command("PING") == "PONG":
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError("redis-server exited with %s; log %s"
                                     % (self.proc.returncode, self.log_path))
            if time.monotonic() > deadline:
                raise AssertionError("redis-server did not answer on port %d" % self.port)
            time.sleep(0.05)

    def freeze(self):
        """SIGSTOP: connections stay open and nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def command(self, *args, timeout=2):
        """Send one command, return its reply (str, int, list, None), or
        raise RuntimeError for an error reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            f = s.makefile("rb")
            if self.auth:
                s.sendall(_encode(["AUTH"] + self.auth))
                _read_reply(f)
            s.sendall(_encode(args))
            return _read_reply(f)


def _encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def _read_reply(f):
    line = f.readline()
    if not line:
        raise OSError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2].decode("utf-8", "replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise OSError("unexpected reply %r" % line)
