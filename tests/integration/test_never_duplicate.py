#!/usr/bin/env python3
"""Scenario: under a steady rate of resets, an unsafe request never reaches
the origin twice, and every safe one gets through.

Client: 20 threads with keep-alive raw sockets send 1,000 requests, each
with a unique id in its path (/nd/<id>) and, where it has one, in its body:
GET, PUT and DELETE; POST with no condition; and POST with
?ifGenerationMatch=N, which the route's idempotent.when_present makes safe
to repeat. Each request is sent exactly once.
Origin: for every try of every id a fixed pseudo-random choice (seeded,
so the run is reproducible) decides: 30% of tries read the whole request
and then reset the connection (RST, SO_LINGER 0) without answering; the
others answer with /echo, a JSON description of the request as received.
The choices are programmed as per-path scripts before the run, so the test
knows in advance what each try of each id will get.
Proxy: sidecar listener to the origin; max_attempts 6, initial_backoff
10ms, jitter 10ms, a generous retry budget.
Must hold: no unconditioned POST arrives at the origin more than once, and
one whose only try was reset gets a 502 with Retry-Attempts: 1; every
idempotent request (GET, PUT, DELETE, conditional POST) gets a 200, except
an id whose six scripted tries are all resets, which must show six tries at
the origin and a 502 with Retry-Attempts: 6; the origin sees exactly as
many tries as the scripts predict and as Retry-Attempts says; every try
carries the whole request body byte-exact; every 200 the client got is
byte for byte the echo the origin sent for that id's last try; the access
log has one line per request with attempts= matching.
"""

import hashlib
import json
import queue
import random
import re
import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
defaults:
  retry:
    max_attempts: 6
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 100ms
    jitter: 10ms
    budget: { ratio: 1, min_per_second: 1000, window: 10s }
routes:
  - name: nd
    match: { path_prefix: /nd/ }
    idempotent:
      methods: [GET, HEAD, PUT, DELETE]
      when_present:
        - query: ifGenerationMatch
"""

SEED = 20241122
REQUESTS = 1000
THREADS = 20
MAX_ATTEMPTS = 6
FAIL_P = 0.3
KINDS = ("GET", "PUT", "DELETE", "POST", "POST-cond")
RUN_LIMIT = 40          # seconds for the whole load
READ_TIMEOUT = 15       # seconds for one response


def try_fails(rid, k):
    """Whether try k (0-based) of request rid is reset: a fixed choice."""
    return random.Random("%d:%d:%d" % (SEED, rid, k)).random() < FAIL_P


def plan():
    """Every request: id, kind, target, body, scripted steps, and what the
    client must get."""
    pick = random.Random(SEED)
    out = []
    for rid in range(REQUESTS):
        kind = KINDS[pick.randrange(len(KINDS))]
        method = "POST" if kind.startswith("POST") else kind
        target = "/nd/%d?id=%d" % (rid, rid)
        if kind == "POST-cond":
            target += "&ifGenerationMatch=%d" % (1000 + rid)
        body = b""
        if method in ("PUT", "POST"):
            body = ("body of request %d " % rid).encode() + bytes(pick.randrange(256) for _ in range(64))
        fails = [try_fails(rid, k) for k in range(MAX_ATTEMPTS)]
        steps = ["/reset/request" if f else "/echo" for f in fails]
        idempotent = kind != "POST"
        if idempotent:
            ok_at = next((k for k, f in enumerate(fails) if not f), None)
            tries = ok_at + 1 if ok_at is not None else MAX_ATTEMPTS
            status = 200 if ok_at is not None else 502
        else:
            tries = 1
            status = 502 if fails[0] else 200
        out.append({"id": rid, "kind": kind, "method": method, "target": target, "body": body,
                    "steps": steps, "idempotent": idempotent, "tries": tries, "status": status})
    return out


def run_clients(port, requests):
    """Send every request once from THREADS keep-alive connections; return
    {id: Response or an error string}."""
    work = queue.Queue()
    for r in requests:
        work.put(r)
    results = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + RUN_LIMIT * h.SLOW

    def client():
        conn = None
        try:
            while time.monotonic() < stop_at:
                try:
                    r = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    if conn is None:
                        conn = h.RawConn(port, timeout=READ_TIMEOUT * h.SLOW)
                    conn.send(h.request(r["method"], r["target"], "nd.example", body=r["body"]))
                    resp = conn.read_response(r["method"])
                    got = resp
                    if "close" in (resp.header("Connection") or "").lower():
                        conn.close()
                        conn = None
                except Exception as e:  # recorded: the request is never sent again
                    got = "%s: %s" % (type(e).__name__, e)
                    if conn is not None:
                        conn.close()
                    conn = None
                with lock:
                    results[r["id"]] = got
        finally:
            if conn is not None:
                conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.1, stop_at - time.monotonic() + READ_TIMEOUT * h.SLOW + 5))
    return results


def scenario(t):
    requests = plan()
    origin = t.origin(backlog=512)
    for r in requests:
        origin.script("/nd/%d" % r["id"], r["steps"])
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    all_fail = [r["id"] for r in requests if r["idempotent"] and r["status"] == 502]
    n_idem = sum(r["idempotent"] for r in requests)
    print("plan: %s; %d idempotent requests, expected all-%d-failed per request %.2e, "
          "expected count %.2f, this seed has %d (ids %s); %d scripted resets in total"
          % ({k: sum(r["kind"] == k for r in requests) for k in KINDS}, n_idem, MAX_ATTEMPTS,
             FAIL_P ** MAX_ATTEMPTS, n_idem * FAIL_P ** MAX_ATTEMPTS, len(all_fail), all_fail,
             sum(r["steps"][:r["tries"]].count("/reset/request") for r in requests)), flush=True)

    start = time.monotonic()
    results = run_clients(proxy.port(), requests)
    print("load took %.1fs" % (time.monotonic() - start), flush=True)
    time.sleep(0.5 * h.SLOW)  # a wrongly repeated try would arrive now
    seen = {}
    for q in origin.requests:
        m = re.fullmatch(r"/nd/(\d+)", q.path)
        if m:
            seen.setdefault(int(m.group(1)), []).append(q)

    def problems_list(bad, what):
        if bad:
            raise AssertionError("%d %s, e.g.:\n  %s" % (len(bad), what, "\n  ".join(bad[:10])))

    @t.check("every one of the 1,000 requests got a complete response")
    def _():
        bad = ["id %d (%s): %s" % (r["id"], r["kind"], results.get(r["id"], "never sent"))
               for r in requests if not isinstance(results.get(r["id"]), h.Response)]
        problems_list(bad, "requests without a response")

    @t.check("no unconditioned POST reached the origin more than once")
    def _():
        bad = ["id %d: %d tries at the origin (scripted %s)" % (r["id"], len(seen.get(r["id"], [])),
                                                                r["steps"][:3])
               for r in requests if r["kind"] == "POST" and len(seen.get(r["id"], [])) > 1]
        problems_list(bad, "unconditioned POSTs arrived more than once")

    @t.check("an unconditioned POST: reset on its try -> 502 with Retry-Attempts: 1, else 200")
    def _():
        bad = []
        for r in requests:
            if r["kind"] != "POST":
                continue
            got = results.get(r["id"])
            if not isinstance(got, h.Response):
                continue  # reported above
            if (got.status, got.header("Retry-Attempts")) != (r["status"], "1"):
                bad.append("id %d: expected %d with Retry-Attempts: 1, got %d with %r (body %r)"
                           % (r["id"], r["status"], got.status, got.header("Retry-Attempts"),
                              got.body[:120]))
            if len(seen.get(r["id"], [])) != 1:
                bad.append("id %d: %d tries at the origin, expected 1"
                           % (r["id"], len(seen.get(r["id"], []))))
        problems_list(bad, "unconditioned POSTs with the wrong outcome")

    @t.check("every idempotent request got 200 unless all 6 scripted tries were resets (then 502)")
    def _():
        bad = []
        for r in requests:
            if not r["idempotent"]:
                continue
            got = results.get(r["id"])
            if not isinstance(got, h.Response):
                continue
            if got.status != r["status"]:
                bad.append("id %d (%s): expected %d, got %d (body %r); origin saw %d tries"
                           % (r["id"], r["kind"], r["status"], got.status, got.body[:120],
                              len(seen.get(r["id"], []))))
            elif r["status"] == 502:
                h.check_error_response(got, 502)
        problems_list(bad, "idempotent requests with the wrong status")

    @t.check("tries at the origin = scripted tries = Retry-Attempts, for every request")
    def _():
        bad = []
        for r in requests:
            got = results.get(r["id"])
            n = len(seen.get(r["id"], []))
            attempts = got.header("Retry-Attempts") if isinstance(got, h.Response) else None
            if n != r["tries"] or (attempts is not None and attempts != str(n)):
                bad.append("id %d (%s): scripted %s -> expected %d tries; origin saw %d, "
                           "Retry-Attempts %r" % (r["id"], r["kind"], r["steps"], r["tries"], n, attempts))
        problems_list(bad, "requests with the wrong number of tries")

    @t.check("every try at the origin carried the request's method, target and whole body")
    def _():
        bad = []
        for r in requests:
            want_sha = hashlib.sha256(r["body"]).hexdigest()
            for k, q in enumerate(seen.get(r["id"], [])):
                q.complete.wait(2)
                if (q.method, q.target, q.body_len, q.body_sha256) != \
                        (r["method"], r["target"], len(r["body"]), want_sha):
                    bad.append("id %d try %d: %s %s body %d bytes sha %s; sent %s %s %d bytes"
                               % (r["id"], k + 1, q.method, q.target, q.body_len, q.body_sha256,
                                  r["method"], r["target"], len(r["body"])))
        problems_list(bad, "tries that differ from the request sent")

    @t.check("every 200 is byte for byte the echo the origin sent on that id's last try")
    def _():
        bad = []
        for r in requests:
            got = results.get(r["id"])
            if not isinstance(got, h.Response) or got.status != 200:
                continue
            tries = seen.get(r["id"], [])
            if not tries:
                bad.append("id %d: a 200 but the origin never saw it" % r["id"])
                continue
            echo = json.dumps(tries[-1].describe()).encode()
            if got.body != echo:
                bad.append("id %d: body %r; the origin sent %r" % (r["id"], got.body[:160], echo[:160]))
                continue
            said = json.loads(got.body)
            if (said["method"], said["target"]) != (r["method"], r["target"]):
                bad.append("id %d: got the echo of %s %s" % (r["id"], said["method"], said["target"]))
        problems_list(bad, "responses that do not match what the origin sent for their id")

    @t.check("access log: one line per request, attempts= and status= as the client saw")
    def _():
        lines = {}
        for ln in proxy.access_lines():
            f = h.access_fields(ln)
            m = re.match(r"/nd/(\d+)\?", f.get("target", ""))
            if m:
                lines.setdefault(int(m.group(1)), []).append(f)
        bad = []
        for r in requests:
            got = results.get(r["id"])
            entries = lines.get(r["id"], [])
            if len(entries) != 1:
                bad.append("id %d: %d access-log lines" % (r["id"], len(entries)))
                continue
            f = entries[0]
            if isinstance(got, h.Response) and (f.get("status"), f.get("attempts")) != \
                    (str(got.status), got.header("Retry-Attempts")):
                bad.append("id %d: log status=%s attempts=%s, client got %d with Retry-Attempts %r"
                           % (r["id"], f.get("status"), f.get("attempts"), got.status,
                              got.header("Retry-Attempts")))
        problems_list(bad, "requests with a missing or wrong access-log line")

    print("outcomes: %s" % {k: sum(1 for r in requests if r["kind"] == k and isinstance(
        results.get(r["id"]), h.Response) and results[r["id"]].status == 200) for k in KINDS},
        flush=True)


h.run(scenario, __doc__, timeout=90)
