#!/usr/bin/env python3
"""The app of the docker compose demo's start-up scenario: it starts before
the API it calls is listening, and never sees an error.

At start it sends its first requests at once, each on its own connection
from its own thread: several GETs and POSTs without any precondition (no
If-Match, no Idempotency-Key), through a retryproxy sidecar listener whose
upstream is the slow-starting API. While the API's port is closed the proxy
marks it down and holds the requests; when a probe connects they are sent,
each POST once. Each result is printed on stdout with the Retry-Attempts
header the proxy adds. The exit code is 0 only if every request got a 2xx.
Standard library only.
"""

import argparse
import http.client
import json
import os
import signal
import sys
import threading
import time


def request(host, port, method, target, body, timeout):
    """One request; returns (status, Retry-Attempts) or raises."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Retry-Attempts", "-")
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081, help="the proxy's sidecar listener for the API")
    ap.add_argument("--gets", type=int, default=5, help="GET requests to send")
    ap.add_argument("--posts", type=int, default=1, help="POST requests to send (at least 1)")
    ap.add_argument("--timeout", type=float, default=90.0,
                    help="seconds to wait for each answer; longer than the API takes to start")
    args = ap.parse_args()
    if args.posts < 1 or args.gets < 0:
        ap.error("--posts must be at least 1 and --gets not negative")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    run = os.urandom(4).hex()             # tells this run's requests apart in the API's log
    plan = [("GET", "/api/items/%d?run=%s" % (i + 1, run), None) for i in range(args.gets)]
    plan += [("POST", "/api/orders?run=%s&order=%d" % (run, i + 1),
              json.dumps({"order": i + 1, "item": i + 1}).encode()) for i in range(args.posts)]

    lock = threading.Lock()
    failed = []
    start = time.monotonic()
    print("app: starting; %d requests to %s:%d at once" % (len(plan), args.proxy_host, args.port),
          flush=True)

    def one(n, method, target, body):
        try:
            status, attempts = request(args.proxy_host, args.port, method, target, body, args.timeout)
            outcome = "%d Retry-Attempts: %s" % (status, attempts)
            good = 200 <= status < 300
        except (OSError, http.client.HTTPException) as e:
            outcome = "error: %s" % (e or type(e).__name__)
            good = False
        with lock:
            if not good:
                failed.append(n)
            print("app: #%d %s %s -> %s (%.2fs)" % (n, method, target, outcome, time.monotonic() - start),
                  flush=True)

    threads = [threading.Thread(target=one, args=(n,) + r, daemon=True) for n, r in enumerate(plan, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    if failed:
        print("app: %d of %d requests did not get a 2xx: #%s"
              % (len(failed), len(plan), ", #".join(str(n) for n in sorted(failed))), flush=True)
        return 1
    print("app: all %d requests got a 2xx in %.2fs; the app saw no error"
          % (len(plan), time.monotonic() - start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
