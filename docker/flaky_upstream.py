#!/usr/bin/env python3
"""A deliberately unreliable HTTP upstream for the docker compose demo.

Every request gets one of three outcomes: 503, a reset connection (no
response, TCP RST), or 200 with a small JSON body. By default the outcome is
drawn at random with --fail-ratio and --reset-ratio; --pattern makes it a
fixed cycle instead (for example 503,reset,200), which the tests use. Each
request is printed on stdout with its outcome. --start-delay makes it wait
that many seconds before it binds its port, so that until then connections
to it are refused: an API that is slow to start. Standard library only.
"""

import argparse
import itertools
import json
import random
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OUTCOMES = ("503", "reset", "200")
OUTPUT = threading.Lock()


def say(text):
    """One whole line on stdout: print() from several threads writes the text
    and the newline apart, and lines could interleave."""
    with OUTPUT:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


class Decider:
    """Picks each request's outcome, from a cycle or at random."""

    def __init__(self, pattern, fail_ratio, reset_ratio, seed):
        self.lock = threading.Lock()
        self.count = 0
        self.cycle = itertools.cycle(pattern) if pattern else None
        self.fail_ratio = fail_ratio
        self.reset_ratio = reset_ratio
        self.rng = random.Random(seed)

    def next(self):
        with self.lock:
            self.count += 1
            if self.cycle is not None:
                return self.count, next(self.cycle)
            r = self.rng.random()
            if r < self.reset_ratio:
                return self.count, "reset"
            if r < self.reset_ratio + self.fail_ratio:
                return self.count, "503"
            return self.count, "200"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "flaky-upstream"
    decider = None

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        n, outcome = self.decider.next()
        say("upstream: #%d %s %s -> %s" % (n, self.command, self.path, outcome))
        if outcome == "reset":
            # SO_LINGER with a zero timeout makes close() send RST.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if outcome == "503":
            self._send(503, "text/plain", b"injected failure\n")
            return
        body = json.dumps({"ok": True, "request": n, "method": self.command,
                           "path": self.path}).encode() + b"\n"
        self._send(200, "application/json", body)

    def _send(self, status, ctype, body):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle

    def log_message(self, fmt, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a burst of connections
    # (the requests a proxy held while this server was starting, released
    # at once) would overflow it, and a dropped SYN costs its client a 1s
    # retransmit.
    request_queue_size = 128


def parse_pattern(text):
    if not text:
        return None
    items = [p.strip() for p in text.split(",") if p.strip()]
    for p in items:
        if p not in OUTCOMES:
            raise argparse.ArgumentTypeError("pattern items are %s, got %r" % (", ".join(OUTCOMES), p))
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--fail-ratio", type=float, default=0.3, help="share of requests answered 503")
    ap.add_argument("--reset-ratio", type=float, default=0.1, help="share of connections reset")
    ap.add_argument("--pattern", type=parse_pattern, help="fixed cycle of outcomes, e.g. 503,reset,200")
    ap.add_argument("--seed", type=int, help="seed for the random outcomes")
    ap.add_argument("--start-delay", type=float, default=0.0, metavar="SECONDS",
                    help="wait this long before binding the port (connections are refused until then)")
    args = ap.parse_args()
    if args.start_delay < 0:
        ap.error("--start-delay must not be negative")

    # As PID 1 in a container, SIGTERM is ignored unless handled; set before
    # the start delay so that a stop does not wait for it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Handler.decider = Decider(args.pattern, args.fail_ratio, args.reset_ratio, args.seed)
    if args.start_delay > 0:
        say("upstream: starting; port %d stays closed for %gs" % (args.port, args.start_delay))
        try:
            time.sleep(args.start_delay)
        except KeyboardInterrupt:
            return
    server = Server((args.host, args.port), Handler)
    say("upstream: listening on %s:%d" % server.server_address[:2])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
