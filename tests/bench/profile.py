#!/usr/bin/env python3
"""Syscalls and instructions per request, for before/after figures.

    tests/bench/profile.py [--bin build-bench/retryproxy] [--requests 2000]
                           [--conns 16] [--path /100|/64k] [--mode sidecar|forward|retry]
                           [--tool strace|callgrind|both] [--top 25] [--keep DIR]

Runs retryproxy against a local nginx origin (from bench.py), warms it up,
then drives a fixed number of keep-alive requests over --conns connections
from a plain socket client and counts, for those requests only:
- strace -c: each syscall's calls per request;
- valgrind --tool=callgrind: instructions per request (repeatable whatever
  else the machine does), and the functions that cost the most.
Traffic stays on 127.0.0.1.
"""

import argparse
import os
import re
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def open_conns(port, conns, mode, origins, client_tls=None):
    """conns keep-alive connections to the proxy; for intercept, each a
    CONNECT to the https origin with TLS through it (not verified: the
    proxy's CPU is what is measured)."""
    out = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        if mode == "intercept":
            s.sendall(("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                       % origins["origin_tls"]).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if client_tls == "1.2":
                ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        s.setblocking(False)
        out.append(s)
    return out


def drive(socks, path, requests, mode, origins):
    """Send requests keep-alive requests over the connections, each one
    request at a time; wait for every response."""
    sel = selectors.DefaultSelector()
    host = "127.0.0.1"
    if mode == "forward":
        target = f"http://127.0.0.1:{origins['origin']}{path}"
    elif mode == "retry":
        target = "/retried" + path
    else:
        target = path
    if mode == "intercept":
        # inside a tunnel the Host names the CONNECT host and port
        host = f"127.0.0.1:{origins['origin_tls']}"
    sent = 0
    done = 0
    counter = [0]

    def request():
        counter[0] += 1
        return (f"GET {target} HTTP/1.1\r\nHost: {host}\r\n"
                f"X-Bench-Id: p{os.getpid()}-{time.monotonic_ns()}-{counter[0]}\r\n\r\n").encode()

    def send(s, data):
        while data:
            try:
                n = s.send(data)
                data = data[n:]
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                time.sleep(0.0005)

    states = {}
    for s in socks[:min(len(socks), requests)]:
        send(s, request())
        sent += 1
        states[s] = b""
        sel.register(s, selectors.EVENT_READ)
    while done < requests:
        for key, _ in sel.select(timeout=30):
            s = key.fileobj
            buf = states[s]
            while True:
                try:
                    chunk = s.recv(1 << 20)
                except (BlockingIOError, ssl.SSLWantReadError):
                    break
                if not chunk:
                    raise SystemExit("profile: connection closed")
                buf += chunk
                # TLS may hold more already decrypted: select cannot see it
                if not (isinstance(s, ssl.SSLSocket) and s.pending()):
                    break
            while True:
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    break
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", buf[:head_end])
                total = head_end + 4 + (int(m.group(1)) if m else 0)
                if len(buf) < total:
                    break
                buf = buf[total:]
                done += 1
                if sent < requests:
                    send(s, request())
                    sent += 1
            states[s] = buf
    for s in states:
        sel.unregister(s)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--path", default="/100")
    parser.add_argument("--mode", default="sidecar",
                        choices=["sidecar", "forward", "retry", "sidecar_https", "intercept"])
    parser.add_argument("--tool", default="both", choices=["strace", "callgrind", "both"])
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--top", type=int, default=25, help="functions to list")
    parser.add_argument("--client-tls", choices=["1.2", "1.3"], default="1.3",
                        help="intercept: the client's TLS version at most (the bench's "
                             "nginx origin speaks 1.2, so 1.2 compares like with like)")
    parser.add_argument("--keep", metavar="DIR", help="copy the callgrind output to DIR")
    args = parser.parse_args()
    binary = bench.ensure_tools(args)
    workdir = tempfile.mkdtemp(prefix="retryproxy-profile-")
    os.chmod(workdir, 0o755)
    children = []
    try:
        origins, procs = bench.start_origins(workdir)
        children += procs
        tools = ["strace", "callgrind"] if args.tool == "both" else [args.tool]
        for tool in tools:
            run(tool, binary, origins, workdir, args, children)
    finally:
        for proc in children:
            bench.stop_group(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def run(tool, binary, origins, workdir, args, children):
    argv = [binary]
    if tool == "callgrind":
        out = os.path.join(workdir, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--instr-atstart=no"] + argv
    ports = {"sidecar": bench.free_port(), "retry": bench.free_port(),
             "forward": bench.free_port(), "admin": bench.free_port(),
             "sidecar_https": bench.free_port()}
    localca = os.path.join(workdir, "local-ca")
    if not os.path.exists(localca):
        subprocess.run([binary, "--make-ca", localca], check=True, capture_output=True)
    conf = os.path.join(workdir, "retryproxy.yaml")
    with open(conf, "w") as f:
        f.write(bench.RETRYPROXY_CONF.format(**ports, **origins, localca=localca))
    log = open(os.path.join(workdir, f"profile-{tool}.log"), "w")
    proc = bench.start_group(argv + ["-c", conf], stdout=log, stderr=log)
    children.append(proc)
    for p in ports.values():
        bench.wait_port(p, proc, timeout=60)
    port = ports["forward" if args.mode == "intercept" else args.mode]
    socks = open_conns(port, args.conns, args.mode, origins, args.client_tls)
    drive(socks, args.path, args.warmup, args.mode, origins)
    if tool == "strace":
        trace = os.path.join(workdir, "strace.out")
        st = subprocess.Popen(["strace", "-c", "-f", "-o", trace, "-p", str(proc.pid)],
                              stderr=subprocess.DEVNULL)
        time.sleep(1)
        drive(socks, args.path, args.requests, args.mode, origins)
        st.send_signal(2)
        st.wait()
        report_strace(trace, args.requests)
    else:
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        drive(socks, args.path, args.requests, args.mode, origins)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        report_callgrind(workdir, args.requests, args.top)
        if args.keep:
            # for callgrind_annotate --tree=caller: who calls what, and how often
            shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
    for sock in socks:
        sock.close()
    proc.terminate()
    proc.wait(timeout=30)


def report_strace(path, requests):
    with open(path) as f:
        text = f.read()
    print(f"\nsyscalls per request ({requests} requests):")
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m and m.group(2) != "total":
            per = int(m.group(1)) / requests
            total += per
            print(f"  {m.group(2):<16} {per:7.2f}")
    print(f"  {'total':<16} {total:7.2f}")


def report_callgrind(workdir, requests, top):
    files = sorted(f for f in os.listdir(workdir) if f.startswith("callgrind.out"))
    path = os.path.join(workdir, files[-1])
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", path], capture_output=True,
                         text=True).stdout
    m = re.search(r"^([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", out, re.M)
    total = int(m.group(1).replace(",", "")) if m else 0
    print(f"\ninstructions per request ({requests} requests): {total / requests:,.0f}")
    print("top functions (instructions per request):")
    rows = 0
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+)", line)
        if m and "PROGRAM TOTALS" not in line and rows < top:
            print(f"  {int(m.group(1).replace(',', '')) / requests:10,.0f}  {m.group(2)}")
            rows += 1


if __name__ == "__main__":
    main()
