#!/usr/bin/env python3
"""The client of the docker compose demo: GET requests through retryproxy in
a loop, alternating between its sidecar listener (origin-form, the proxy
knows the upstream) and its forward proxy listener (absolute-form, as a
client with HTTP_PROXY sends). Each result is printed on stdout with the
Retry-Attempts header the proxy adds. Standard library only.
"""

import argparse
import http.client
import signal
import sys
import time


def request(host, port, target, timeout):
    """One GET; returns (status, Retry-Attempts) or raises OSError."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", target)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Retry-Attempts", "-")
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-host", default="127.0.0.1")
    ap.add_argument("--sidecar-port", type=int, default=8080)
    ap.add_argument("--forward-port", type=int, default=3128)
    ap.add_argument("--upstream", default="http://upstream:8080",
                    help="where forward-proxy requests go (the sidecar's upstream is in the proxy's config)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between requests")
    ap.add_argument("--count", type=int, default=0, help="stop after this many requests; 0: never")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    n = 0
    while args.count == 0 or n < args.count:
        n += 1
        path = "/demo/%d" % n
        if n % 2:
            mode, port, target = "sidecar", args.sidecar_port, path
        else:
            mode, port, target = "forward", args.forward_port, args.upstream.rstrip("/") + path
        start = time.monotonic()
        try:
            status, attempts = request(args.proxy_host, port, target, args.timeout)
            outcome = "%d Retry-Attempts: %s" % (status, attempts)
        except (OSError, http.client.HTTPException) as e:
            outcome = "error: %s" % e
        print("client: #%d %s GET %s -> %s (%.2fs)"
              % (n, mode, target, outcome, time.monotonic() - start), flush=True)
        if args.count == 0 or n < args.count:
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
