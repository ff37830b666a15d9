#!/usr/bin/env python3
"""retryproxy against HAProxy, side by side, on one core each.

    tests/bench/bench.py [--duration 10] [--rounds 2] [--idle-clients 5000]
                         [--points sidecar-100b-16,...] [--bin build-bench/retryproxy]
                         [--floor]

Installs what it needs from Debian (wrk, haproxy, nginx; scripts/install-deps.sh
--bench) and builds retryproxy as users build it, in build-bench/. Then:

- the proxy under test runs alone on CPU 1; wrk (one thread) and the origin
  (nginx, one worker; for the retry point a HAProxy that answers 503 to the
  first try of each request) share CPU 0;
- for each point, HAProxy and retryproxy take turns (A B A B ...) with wrk
  for --duration seconds; each figure is the median over --rounds;
- CPU us/req is the proxy's own CPU time (/proc/PID/schedstat, user and
  kernel) over the requests wrk completed: with load generator and origin
  sharing the other core, it is the figure that separates proxies;
- load core us/req: all the time CPU 0 was busy (wrk, the origin, the
  kernel's work there) over the requests wrk completed, and how much of the
  run CPU 0 sat idle: when it never idles, it sets req/s, and what it pays
  per request depends on the proxy too (every time the proxy sleeps, the
  next sender pays for its wake-up);
- RSS per idle keep-alive client: fresh proxies, --idle-clients connections
  that each made one request and stay open, (RSS after - RSS before) / N;
- with --floor, floor_relay.c (bytes moved unread, built here with cc) runs
  in the same rounds at the plain sidecar and forward points: the kernel's
  share of any proxy's cost per request on this machine;
- backoff: 10,000 requests waiting in a long backoff: RSS growth and the CPU
  the proxy spends while they wait.

Prints one table of ratios (retryproxy / HAProxy) and the spread between
rounds, which says how noisy this machine was. A benchmark, not a test:
nothing here passes or fails. Traffic stays on 127.0.0.1.
"""

import argparse
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROXY_CPU = "1"
LOAD_CPU = "0"

# Each point: how wrk reaches which origin path through the proxy.
POINTS = {
    "sidecar-100b-16": dict(conns=16, path="/100", mode="sidecar",
                            what="sidecar, 100 B, 16 conns"),
    "sidecar-100b-256": dict(conns=256, path="/100", mode="sidecar",
                             what="sidecar, 100 B, 256 conns"),
    "sidecar-64k-16": dict(conns=16, path="/64k", mode="sidecar",
                           what="sidecar, 64 KiB, 16 conns"),
    "forward-100b-16": dict(conns=16, path="/100", mode="forward",
                            what="forward, 100 B, 16 conns"),
    "forward-64k-16": dict(conns=16, path="/64k", mode="forward",
                           what="forward, 64 KiB, 16 conns"),
    "retried-100b-16": dict(conns=16, path="/100", mode="retry",
                            what="retried (503, then 200), 100 B, 16 conns"),
    "sidecar-https-100b-16": dict(conns=16, path="/100", mode="sidecar_https",
                                  what="sidecar to an https origin, 100 B, 16 conns"),
    "intercept-100b-16": dict(conns=16, path="/100", mode="intercept",
                              what="TLS from the client too (intercepted CONNECT), 100 B, 16 conns"),
}

# Absolute-form, with the Host the URI names (HAProxy refuses a Host that
# differs from the URI's authority).
WRK_FORWARD = """
wrk.path = "http://127.0.0.1:{origin}{path}"
wrk.headers["Host"] = "127.0.0.1:{origin}"
"""

# Every request carries an id of its own, so the retry origin can tell a
# first try (503) from the retry (200).
# Inside an intercepted tunnel every request names the tunnel's host.
WRK_INTERCEPT = """
wrk.headers["Host"] = "127.0.0.1:{origin_tls}"
"""

WRK_RETRY = """
local counter = 0
local prefix = "{prefix}"
request = function()
  counter = counter + 1
  return wrk.format(nil, "{path}", {{["X-Bench-Id"] = prefix .. counter}})
end
"""

NGINX_CONF = """
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {dir}/www;
    location / {{ default_type application/octet-stream; }}
  }}
  server {{
    listen 127.0.0.1:{tls_port} ssl backlog=4096;
    ssl_certificate {dir}/pki/leaf.pem;
    ssl_certificate_key {dir}/pki/leaf.key;
    root {dir}/www;
    location / {{ default_type application/octet-stream; }}
  }}
}}
"""

# The retry point's origin: the first try of each X-Bench-Id gets 503, the
# next one 200 with a 100-byte body.
RETRY_ORIGIN_CONF = """
global
  maxconn 9000
defaults
  mode http
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
frontend origin
  bind 127.0.0.1:{port}
  stick-table type string len 40 size 4m expire 60s store http_req_cnt
  http-request track-sc0 req.hdr(x-bench-id)
  http-request return status 503 content-type text/plain string "try again" if {{ sc_http_req_cnt(0) le 1 }}
  http-request return status 200 content-type application/octet-stream string "{body}"
"""

HAPROXY_CONF = """
global
  maxconn 9000
  nbthread 1
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
  http-reuse safe
frontend sidecar
  bind 127.0.0.1:{sidecar} backlog 4096
  default_backend origin
frontend retry
  bind 127.0.0.1:{retry} backlog 4096
  default_backend retry_origin
frontend sidecar_https
  bind 127.0.0.1:{sidecar_https} backlog 4096
  default_backend origin_tls
frontend intercept
  bind 127.0.0.1:{intercept_tls} ssl crt {pki}/leaf-with-key.pem backlog 4096
  default_backend origin_tls
backend origin
  server o1 127.0.0.1:{origin} maxconn 10000
backend origin_tls
  server t1 127.0.0.1:{origin_tls} ssl verify required ca-file {pki}/ca.pem maxconn 10000
backend retry_origin
  retry-on 503 conn-failure empty-response
  retries 1
  server r1 127.0.0.1:{retry_origin} maxconn 10000
"""

RETRYPROXY_CONF = """
listen:
  - address: 127.0.0.1:{forward}
  - address: 127.0.0.1:{sidecar}
    upstream: http://127.0.0.1:{origin}
  - address: 127.0.0.1:{retry}
    upstream: http://127.0.0.1:{retry_origin}
  - address: 127.0.0.1:{sidecar_https}
    upstream: https://127.0.0.1:{origin_tls}
admin: 127.0.0.1:{admin}
tls:
  ca_file: {pki}/ca.pem
intercept:
  hosts: ["127.0.0.1"]
  ca_cert: {localca}/ca.pem
  ca_key: {localca}/ca-key.pem
log:
  level: info
  format: text
limits:
  max_connections: 20000
  pool_max_idle: 1024
  max_pending_retries: 20000
routes:
  - name: retried
    match: {{ host: "127.0.0.1", path_prefix: /retried }}
    upstream: http://127.0.0.1:{retry_origin}
    retry:
      max_attempts: 2
      initial_backoff: 0ms
      jitter: 0ms
      budget: {{ ratio: 1.0, min_per_second: 100000, window: 1s }}
  - name: waiting
    match: {{ host: "127.0.0.1", path_prefix: /wait }}
    upstream: http://127.0.0.1:{retry_origin}
    retry:
      max_attempts: 2
      initial_backoff: 600s
      max_backoff: 600s
      jitter: 1ms
      deadline: 1200s
      budget: {{ ratio: 1.0, min_per_second: 100000, window: 1s }}
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {proc.args[0]} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"bench: nothing listens on {port}")


def cpu_ns(pid):
    """CPU time of every thread of pid, user and kernel, in nanoseconds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def cpu_split(pid):
    """User and kernel clock ticks and voluntary context switches (sleeps)
    of every thread of pid."""
    user = kernel = sleeps = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            kernel += int(fields[12])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        sleeps += int(line.split()[1])
        except OSError:
            pass
    return user, kernel, sleeps


def cpu_busy(cpu):
    """Busy and total clock ticks of one CPU since boot (/proc/stat); idle
    and iowait are the idle part."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                ticks = [int(x) for x in line.split()[1:]]
                return sum(ticks) - ticks[3] - ticks[4], sum(ticks)
    raise SystemExit(f"bench: no cpu{cpu} in /proc/stat")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def pinned(cpu, argv):
    return ["taskset", "-c", cpu] + argv


def start_group(argv, **kwargs):
    """Start argv as the leader of a process group of its own, so that
    stop_group() also ends what it starts: nginx's worker."""
    return subprocess.Popen(argv, start_new_session=True, **kwargs)


def stop_group(proc):
    """Kill a process started by start_group() and all of its group. Killing
    the leader alone left nginx's worker behind after every run."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class Proxy:
    def __init__(self, name, argv, ports, workdir, env=None):
        self.name = name
        self.ports = ports
        out = open(os.path.join(workdir, f"{name}.log"), "w")
        self.proc = start_group(pinned(PROXY_CPU, argv), stdout=out, stderr=out, env=env)
        for port in ports.values():
            if port is not None:
                wait_port(port, self.proc)

    def stop(self):
        shim = getattr(self, "shim", None)
        if shim is not None:
            stop_group(shim)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        stop_group(self.proc)


def make_pki(directory):
    """A CA and a leaf for 127.0.0.1 and localhost, for the https origin."""
    os.makedirs(directory)

    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=directory, check=True,
                       capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=retryproxy bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign")
    with open(os.path.join(directory, "leaf.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", "7", "-days", "2", "-out", "leaf.pem", "-extfile", "leaf.ext")
    with open(os.path.join(directory, "leaf-with-key.pem"), "wb") as out:
        for name in ("leaf.pem", "leaf.key"):
            with open(os.path.join(directory, name), "rb") as f:
                out.write(f.read())
    return directory


def start_origins(workdir):
    www = os.path.join(workdir, "www")
    os.makedirs(www)
    with open(os.path.join(www, "100"), "wb") as f:
        f.write(b"x" * 100)
    with open(os.path.join(www, "64k"), "wb") as f:
        f.write(os.urandom(32 * 1024).hex().encode())
    ports = {"origin": free_port(), "retry_origin": free_port(), "origin_tls": free_port(),
             "pki": make_pki(os.path.join(workdir, "pki"))}
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=workdir, port=ports["origin"], tls_port=ports["origin_tls"]))
    nginx = start_group(pinned(LOAD_CPU, ["nginx", "-c", conf, "-p", workdir]),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(ports["origin"], nginx)
    conf = os.path.join(workdir, "retry-origin.cfg")
    with open(conf, "w") as f:
        f.write(RETRY_ORIGIN_CONF.format(port=ports["retry_origin"], body="y" * 100))
    retry = start_group(pinned(LOAD_CPU, ["haproxy", "-f", conf, "-db"]),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(ports["retry_origin"], retry)
    return ports, [nginx, retry]


def start_haproxy(workdir, origins):
    ports = {"sidecar": free_port(), "retry": free_port(), "sidecar_https": free_port(),
             "intercept_tls": free_port()}
    conf = os.path.join(workdir, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(HAPROXY_CONF.format(**ports, **origins))
    ports["forward"] = ports["sidecar"]  # absolute-form goes to the same backend
    proxy = Proxy("haproxy", ["haproxy", "-f", conf, "-db"], ports, workdir)
    # HAProxy cannot intercept a CONNECT: its reference for that point is a
    # TLS frontend with the same certificate, reached through the same relay
    # on the load core as retryproxy's tunnels, without the CONNECT
    start_tunnel_shim(proxy, workdir, ports["intercept_tls"])
    return proxy


def start_retryproxy(workdir, origins, binary):
    ports = {"sidecar": free_port(), "retry": free_port(), "forward": free_port(),
             "admin": free_port(), "sidecar_https": free_port()}
    localca = os.path.join(workdir, "local-ca")
    if not os.path.exists(localca):
        subprocess.run([binary, "--make-ca", localca], check=True, capture_output=True)
    conf = os.path.join(workdir, "retryproxy.yaml")
    with open(conf, "w") as f:
        f.write(RETRYPROXY_CONF.format(**ports, **origins, localca=localca))
    proxy = Proxy("retryproxy", [binary, "-c", conf], ports, workdir)
    # wrk speaks no CONNECT: the relay opens a tunnel through the forward
    # listener for each wrk connection, and wrk does TLS with the proxy in it
    start_tunnel_shim(proxy, workdir, ports["forward"], f"127.0.0.1:{origins['origin_tls']}")
    return proxy


def floor_binary(workdir):
    """floor_relay.c, built once per run."""
    binary = os.path.join(workdir, "floor_relay")
    if not os.path.exists(binary):
        subprocess.run(["cc", "-std=c17", "-O2", "-o", binary,
                        os.path.join(REPO, "tests/bench/floor_relay.c")], check=True)
    return binary


def start_tunnel_shim(proxy, workdir, port, authority=None):
    """The TLS point's way in, on the load core: the floor relay in front of
    port, asking for a tunnel to authority first when one is given. Its
    port becomes the proxy's "intercept" port."""
    argv = [floor_binary(workdir), str(free_port()), str(port)]
    if authority is not None:
        argv.append(authority)
    proxy.shim = start_group(pinned(LOAD_CPU, argv), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    proxy.ports["intercept"] = int(argv[1])
    wait_port(proxy.ports["intercept"], proxy.shim)


def start_floor(workdir, origins):
    """The floor relay (floor_relay.c), built here: one origin connection per
    client, bytes moved unread. It answers the plain sidecar and forward
    points (nginx takes absolute-form as it comes)."""
    binary = floor_binary(workdir)
    port = free_port()
    return Proxy("floor", [binary, str(port), str(origins["origin"])],
                 {"sidecar": port, "forward": port}, workdir)


def parse_wrk(text):
    """requests, seconds, req/s, p99 ms, errors from wrk --latency output."""
    def number(pattern, cast=float, default=None):
        m = re.search(pattern, text)
        return cast(m.group(1)) if m else default

    def ms(value, unit):
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]

    m = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M)
    p99 = ms(*m.groups()) if m else float("nan")
    requests = number(r"(\d+) requests in", int, 0)
    seconds_m = re.search(r"requests in ([\d.]+)(us|ms|s|m),", text)
    seconds = ms(*seconds_m.groups()) / 1000.0 if seconds_m else float("nan")
    errors = number(r"Non-2xx or 3xx responses: (\d+)", int, 0)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if sock:
        errors += sum(int(x) for x in sock.groups())
    return dict(requests=requests, seconds=seconds, rps=requests / seconds if seconds else 0,
                p99=p99, errors=errors)


def run_wrk(proxy, point, origins, duration, workdir):
    mode = point["mode"]
    port = proxy.ports["retry" if mode == "retry" else mode]
    path = point["path"]
    argv = ["wrk", "-t1", f"-c{point['conns']}", f"-d{duration}s", "--latency", "--timeout", "10s"]
    script = None
    if mode == "forward":
        script = WRK_FORWARD.format(origin=origins["origin"], path=path)
    elif mode == "retry":
        if proxy.name == "retryproxy":
            path = "/retried" + path
        script = WRK_RETRY.format(prefix=f"{os.getpid()}-{time.monotonic_ns()}-", path=path)
    elif mode == "intercept":
        script = WRK_INTERCEPT.format(origin_tls=origins["origin_tls"])
    if script is not None:
        script_path = os.path.join(workdir, "wrk.lua")
        with open(script_path, "w") as f:
            f.write(script)
        argv += ["-s", script_path]
    scheme = "https" if mode == "intercept" else "http"
    argv.append(f"{scheme}://127.0.0.1:{port}{path if mode != 'forward' else '/'}")
    before, split_before = cpu_ns(proxy.proc.pid), cpu_split(proxy.proc.pid)
    load_before = cpu_busy(LOAD_CPU)
    out = subprocess.run(pinned(LOAD_CPU, argv), capture_output=True, text=True, check=True).stdout
    used = cpu_ns(proxy.proc.pid) - before
    load_busy, load_total = (b - a for a, b in zip(load_before, cpu_busy(LOAD_CPU)))
    user, kernel, sleeps = (b - a for a, b in zip(split_before, cpu_split(proxy.proc.pid)))
    result = parse_wrk(out)
    requests = result["requests"] or float("nan")
    result["cpu_us"] = used / 1000.0 / requests
    # the user/kernel split of that time, by the kernel's tick sampling
    result["user_share"] = user / (user + kernel) if user + kernel else float("nan")
    result["sleeps"] = sleeps / requests
    result["load_us"] = load_busy * 1e6 / os.sysconf("SC_CLK_TCK") / requests
    result["load_idle"] = 1 - load_busy / load_total if load_total else float("nan")
    return result


def idle_clients_rss(proxy, count):
    """Open count keep-alive connections, one request each, and return the
    RSS growth per connection while they sit idle."""
    port = proxy.ports["sidecar"]
    request = b"GET /100 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    warm = socket.create_connection(("127.0.0.1", port))
    warm.sendall(request)
    read_response(warm)
    warm.close()
    time.sleep(0.3)
    before = rss_bytes(proxy.proc.pid)
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request)
        socks.append(s)
        if len(socks) % 200 == 0:
            for t in socks[-200:]:
                read_response(t)
    for t in socks[len(socks) - len(socks) % 200:]:
        read_response(t)
    time.sleep(0.5)
    after = rss_bytes(proxy.proc.pid)
    for s in socks:
        s.close()
    return (after - before) / count


def read_response(sock):
    """Read one response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("bench: connection closed before a response")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(body) < length:
        body += sock.recv(65536)


def backoff_cost(proxy, origins, count=10000):
    """count requests waiting in a 600 s backoff: RSS growth and the CPU the
    proxy spends over 5 s of waiting."""
    port = proxy.ports["retry"]
    before = rss_bytes(proxy.proc.pid)
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /wait/{i} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bench-Id: w{os.getpid()}-{i}\r\n\r\n"
                  .encode())
        socks.append(s)
    admin = proxy.ports["admin"]
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.create_connection(("127.0.0.1", admin)) as a:
            a.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            text = b""
            while True:
                chunk = a.recv(65536)
                if not chunk:
                    break
                text += chunk
        m = re.search(rb"\nretryproxy_backoff_pending (\d+)", text)
        if m and int(m.group(1)) >= count:
            break
        time.sleep(0.2)
    else:
        raise SystemExit("bench: requests did not all reach their backoff")
    rss = rss_bytes(proxy.proc.pid) - before
    cpu_before = cpu_ns(proxy.proc.pid)
    time.sleep(5)
    cpu = (cpu_ns(proxy.proc.pid) - cpu_before) / 1e9 / 5 * 100
    for s in socks:
        s.close()
    return rss, cpu


def ensure_tools(args):
    if not args.no_install:
        subprocess.run(["sh", os.path.join(REPO, "scripts/install-deps.sh"), "--bench"], check=True)
    for tool in ("wrk", "haproxy", "nginx", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} not found")
    if os.cpu_count() < 2:
        raise SystemExit("bench: needs two CPUs (proxy on one, load and origin on the other)")
    if args.bin:
        return args.bin
    build = os.path.join(REPO, "build-bench")
    if not os.path.exists(os.path.join(build, "build.ninja")):
        subprocess.run(["meson", "setup", build, REPO], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(build, "retryproxy")


def median(values):
    return statistics.median(values) if values else float("nan")


def spread(values):
    """Largest relative distance from the median, in percent."""
    m = median(values)
    if not values or m == 0:
        return 0.0
    return max(abs(v - m) for v in values) / m * 100


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per point")
    parser.add_argument("--idle-clients", type=int, default=5000)
    parser.add_argument("--points", default=",".join(POINTS) + ",idle,backoff",
                        help="comma-separated: " + ", ".join(POINTS) + ", idle, backoff")
    parser.add_argument("--bin", help="retryproxy binary (default: build it in build-bench/)")
    parser.add_argument("--no-install", action="store_true", help="skip install-deps.sh --bench")
    parser.add_argument("--floor", action="store_true",
                        help="also run floor_relay.c, bytes moved unread, at the plain "
                        "sidecar and forward points: what the kernel alone costs")
    args = parser.parse_args()
    wanted = args.points.split(",")
    binary = ensure_tools(args)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    workdir = tempfile.mkdtemp(prefix="retryproxy-bench-")
    os.chmod(workdir, 0o755)  # nginx's worker may run as another user
    children = []
    try:
        origins, origin_procs = start_origins(workdir)
        children += origin_procs
        rows = []
        proxies = None
        for name in wanted:
            if name not in POINTS:
                continue
            if proxies is None:
                proxies = [start_haproxy(workdir, origins),
                           start_retryproxy(workdir, origins, binary)]
                if args.floor:
                    proxies.append(start_floor(workdir, origins))
                children += [p.proc for p in proxies]
            point = POINTS[name]
            here = [p for p in proxies
                    if p.name != "floor" or point["mode"] in ("sidecar", "forward")]
            runs = {p.name: [] for p in here}
            for r in range(args.rounds):
                for proxy in here:
                    res = run_wrk(proxy, point, origins, args.duration, workdir)
                    runs[proxy.name].append(res)
                    log(f"{name} round {r + 1} {proxy.name}: {res['rps']:.0f} req/s, "
                        f"{res['cpu_us']:.1f} us/req, p99 {res['p99']:.2f} ms, errors {res['errors']}, "
                        f"load core {res['load_us']:.1f} us/req")
            rows.append((point["what"], runs))
        if proxies:
            for p in proxies:
                p.stop()

        idle = backoff = None
        if "idle" in wanted:
            fresh = [start_haproxy(workdir, origins), start_retryproxy(workdir, origins, binary)]
            children += [p.proc for p in fresh]
            idle = {p.name: idle_clients_rss(p, args.idle_clients) for p in fresh}
            for p in fresh:
                p.stop()
        if "backoff" in wanted:
            rp = start_retryproxy(workdir, origins, binary)
            children.append(rp.proc)
            backoff = backoff_cost(rp, origins)
            rp.stop()
        report(rows, idle, backoff, args)
    finally:
        for proc in children:
            stop_group(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def report(rows, idle, backoff, args):
    print(f"\nretryproxy vs HAProxy {haproxy_version()}: median of {args.rounds} interleaved "
          f"rounds x {args.duration} s; proxy alone on CPU {PROXY_CPU}, wrk -t1 and origin on "
          f"CPU {LOAD_CPU}\n")
    print("| point | HAProxy req/s | retryproxy req/s | req/s ratio | HAProxy CPU us/req "
          "| retryproxy CPU us/req | CPU ratio | HAProxy p99 ms | retryproxy p99 ms | noise |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    plain_cpu = {}
    for what, runs in rows:
        h, r = runs["haproxy"], runs["retryproxy"]
        hr, rr = median([x["rps"] for x in h]), median([x["rps"] for x in r])
        hc, rc = median([x["cpu_us"] for x in h]), median([x["cpu_us"] for x in r])
        hp, rpp = median([x["p99"] for x in h]), median([x["p99"] for x in r])
        noise = max(spread([x["rps"] for x in h]), spread([x["rps"] for x in r]),
                    spread([x["cpu_us"] for x in h]), spread([x["cpu_us"] for x in r]))
        errors = sum(x["errors"] for x in h + r)
        flag = f" ({errors} errors)" if errors else ""
        print(f"| {what}{flag} | {hr:,.0f} | {rr:,.0f} | {rr / hr:.2f}x | {hc:.1f} | {rc:.1f} "
              f"| {rc / hc:.2f}x | {hp:.2f} | {rpp:.2f} | ±{noise:.0f} % |")
        plain_cpu[what] = rc
    print("\nWhere the CPU goes (medians): user and kernel us/req, how often the proxy "
          "slept in epoll_wait per request (each sleep is a wake-up the other core pays for), "
          f"and the load core (CPU {LOAD_CPU}: wrk and the origin): busy us/req and idle share\n")
    print("| point | HAProxy user | HAProxy kernel | HAProxy sleeps/req | HAProxy load core "
          "| retryproxy user | retryproxy kernel | retryproxy sleeps/req | retryproxy load core |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, runs in rows:
        cells = []
        for name in ("haproxy", "retryproxy"):
            cpu = median([x["cpu_us"] for x in runs[name]])
            share = median([x["user_share"] for x in runs[name]])
            load = median([x["load_us"] for x in runs[name]])
            load_idle = median([x["load_idle"] for x in runs[name]])
            cells += [f"{cpu * share:.1f}", f"{cpu * (1 - share):.1f}",
                      f"{median([x['sleeps'] for x in runs[name]]):.3f}",
                      f"{load:.1f} ({load_idle * 100:.1f} % idle)"]
        print(f"| {what} | " + " | ".join(cells) + " |")
    floor_rows = [(what, runs) for what, runs in rows if "floor" in runs]
    if floor_rows:
        print("\nThe floor (floor_relay.c: bytes moved unread, one origin connection per "
              "client, edge-triggered epoll), against HAProxy in the same rounds\n")
        print("| point | floor req/s | req/s ratio | floor CPU us/req | CPU ratio "
              "| floor sleeps/req | retryproxy CPU over the floor |")
        print("|---|---|---|---|---|---|---|")
        for what, runs in floor_rows:
            f, h, r = runs["floor"], runs["haproxy"], runs["retryproxy"]
            fr, hr = median([x["rps"] for x in f]), median([x["rps"] for x in h])
            fc, hc = median([x["cpu_us"] for x in f]), median([x["cpu_us"] for x in h])
            rc = median([x["cpu_us"] for x in r])
            print(f"| {what} | {fr:,.0f} | {fr / hr:.2f}x | {fc:.1f} | {fc / hc:.2f}x "
                  f"| {median([x['sleeps'] for x in f]):.3f} | +{rc - fc:.1f} us |")
    print()
    side = plain_cpu.get(POINTS["sidecar-100b-16"]["what"])
    for fwd, sc in (("forward-100b-16", "sidecar-100b-16"), ("forward-64k-16", "sidecar-64k-16")):
        f, s = plain_cpu.get(POINTS[fwd]["what"]), plain_cpu.get(POINTS[sc]["what"])
        if f and s:
            print(f"forward / sidecar CPU per request, {POINTS[fwd]['what'][9:]}: {f / s:.2f}x")
    https = plain_cpu.get(POINTS["sidecar-https-100b-16"]["what"])
    intercepted = plain_cpu.get(POINTS["intercept-100b-16"]["what"])
    if https and intercepted:
        print(f"intercepted / sidecar-to-https CPU per request (100 B, 16 conns): "
              f"{intercepted / https:.2f}x")
    retried = plain_cpu.get(POINTS["retried-100b-16"]["what"])
    if retried and side:
        print(f"retried / plain CPU per request (100 B, 16 conns): {retried / side:.2f}x")
    if idle:
        print(f"RSS per idle keep-alive client ({args.idle_clients} clients): HAProxy "
              f"{idle['haproxy']:,.0f} B, retryproxy {idle['retryproxy']:,.0f} B")
    if backoff:
        print(f"10,000 requests in backoff: RSS +{backoff[0] / 2**20:.1f} MiB, "
              f"CPU {backoff[1]:.2f} % of a core while waiting")


def haproxy_version():
    out = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout
    m = re.search(r"version (\S+)", out)
    return m.group(1) if m else "?"


if __name__ == "__main__":
    main()
