#!/usr/bin/env python3
"""How much a fleet of retryproxy sidecars amplifies an outage, with and
without `fleet:`.

    tests/bench/fleet_sim.py [--bin build/retryproxy] [--proxies 1,4,16,64]
                             [--rate 400] [--duration 10]

For each N, starts N proxies on loopback in front of one origin that
answers every request with 503, and drives --rate client requests per
second, spread evenly over the proxies, for --duration seconds: once with
local budgets only, once with `fleet:` on a redis-server the script starts
(flushed between runs). Every proxy has the default budget (ratio 0.2,
min_per_second 3, window 10s), max_attempts 5 and short backoffs, so a
request's retries happen within the run. Prints, for each N, the
amplification: tries the origin saw / client requests.

A benchmark, not a test (CI does not run it). Traffic stays on 127.0.0.1.
"""

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from redisserver import RedisServer  # noqa: E402

CONFIG = """\
listen:
  - address: 127.0.0.1:{port}
    upstream: http://127.0.0.1:{origin}
admin: 127.0.0.1:{admin}
log: {{ level: warn, format: text }}
limits:
  drain_timeout: 1s
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 100ms
    jitter: 10ms
    budget: {{ ratio: 0.2, min_per_second: 3, window: 10s }}
{fleet}"""

FLEET = """\
fleet:
  redis: 127.0.0.1:{redis}
  name: sim
  sync_interval: 100ms
"""


class FailingOrigin:
    """Answers 503 to every request, keep-alive, and counts them."""

    def __init__(self):
        self.tries = 0
        self.server = None
        self.port = None

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                self.tries += 1
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def start(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]


async def one_request(port, stats):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /outage HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        stats["answered" if data.startswith(b"HTTP/1.1 503") else "other"] += 1
    except (OSError, asyncio.TimeoutError):
        stats["errors"] += 1


async def drive(ports, rate, duration):
    """rate requests per second for duration seconds, round robin over
    ports; returns how many were sent and how they ended."""
    stats = {"answered": 0, "other": 0, "errors": 0}
    tasks = []
    total = int(rate * duration)
    start = time.monotonic()
    for i in range(total):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one_request(ports[i % len(ports)], stats)))
    await asyncio.gather(*tasks)
    return total, stats


def free_ports(count):
    """count distinct free ports: the sockets stay bound until all are
    picked, so no port is handed out twice."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def spawn_proxy(binary, i, origin_port, redis_port, tmp):
    port, admin = free_ports(2)
    fleet = FLEET.format(redis=redis_port) if redis_port else ""
    path = os.path.join(tmp, "proxy-%d.yaml" % i)
    with open(path, "w") as f:
        f.write(CONFIG.format(port=port, origin=origin_port, admin=admin, fleet=fleet))
    log = open(os.path.join(tmp, "proxy-%d.log" % i), "wb")
    proc = subprocess.Popen([binary, "-c", path], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=log)
    return [proc, port, admin, log]


def start_proxies(binary, n, origin_port, redis_port, tmp):
    """n proxies, each on ports of its own; one that cannot bind (another
    program took a port in between) is started again on others."""
    procs = [spawn_proxy(binary, i, origin_port, redis_port, tmp) for i in range(n)]
    for i, p in enumerate(procs):
        for _ in range(3):
            while p[0].poll() is None and "retryproxy_backoff_pending" not in metrics(p[2]):
                time.sleep(0.05)
            if p[0].poll() != 2:
                break
            p[3].close()
            procs[i] = p = spawn_proxy(binary, i, origin_port, redis_port, tmp)
    return procs


def metrics(admin):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def wait_ready(procs, fleet, timeout=60):
    deadline = time.monotonic() + timeout
    for proc, port, admin, _ in procs:
        want = "retryproxy_fleet_connected 1" if fleet else "retryproxy_backoff_pending"
        while want not in metrics(admin):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("a proxy did not get ready (exit code %s)" % proc.poll())
            time.sleep(0.05)


def stop_proxies(procs):
    for proc, _, _, _ in procs:
        proc.terminate()
    for proc, _, _, log in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def run_one(binary, n, redis, rate, duration, tmp):
    origin = FailingOrigin()
    await origin.start()
    if redis is not None:
        redis.command("FLUSHALL")
    procs = start_proxies(binary, n, origin.port, redis.port if redis else None, tmp)
    try:
        await asyncio.get_running_loop().run_in_executor(None, wait_ready, procs,
                                                        redis is not None)
        sent, stats = await drive([p[1] for p in procs], rate, duration)
        await asyncio.sleep(1.0)  # retries still in backoff
    finally:
        stop_proxies(procs)
        origin.server.close()
    return sent, origin.tries, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "retryproxy"))
    ap.add_argument("--proxies", default="1,4,16,64")
    ap.add_argument("--rate", type=float, default=400.0, help="client requests per second")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of load per run")
    args = ap.parse_args()
    counts = [int(x) for x in args.proxies.split(",")]
    tmp = tempfile.mkdtemp(prefix="fleet-sim-")
    redis = RedisServer(tmp).start()
    rows = []
    try:
        for n in counts:
            row = [n]
            for use_fleet in (False, True):
                sent, tries, stats = asyncio.run(run_one(args.bin, n, redis if use_fleet else None,
                                                         args.rate, args.duration, tmp))
                if stats["answered"] != sent:
                    print("  note: N=%d fleet=%s: %r" % (n, use_fleet, stats), flush=True)
                row += [sent, tries, tries / sent]
                print("N=%d %s: %d requests, %d origin tries, amplification %.3f"
                      % (n, "fleet" if use_fleet else "local", sent, tries, tries / sent),
                      flush=True)
            rows.append(row)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| proxies | client requests | origin tries, local budgets | amplification "
          "| origin tries, fleet | amplification |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, sent, local, amp_local, _, fleet, amp_fleet in rows:
        print("| %d | %d | %d | %.2f | %d | %.2f |" % (n, sent, local, amp_local, fleet, amp_fleet))


if __name__ == "__main__":
    main()
