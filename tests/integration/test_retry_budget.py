#!/usr/bin/env python3
"""Scenario: the retry budget stops a retry storm, and retries come back
once the window has passed.

Client: 4 threads, each sending a GET every 200 ms on a new connection to a
sidecar listener (20 requests/s) for 8.6 s, each with a unique id; then,
after the window has passed, one more GET.
Origin: answers every storm request with 503 (body "status 503"); after the
storm it is healthy: the last GET's path is scripted 503, then 200.
Proxy: max_attempts 5, initial_backoff 10ms, no jitter; budget ratio 0.2,
min_per_second 3, window 10s. The storm lasts 8.6 s so that all of it,
retries included, falls inside one window, where the spec's bound is exact.
Must hold: the origin sees at most (1 + 0.2) x N + 3 x 10 storm tries for
N client requests (not up to 5 x N), and at least N + 30 (the budget's
floor is spent, not withheld); every storm request gets the origin's 503
unchanged; the access log has one line per request, each either
attempts=5 gave_up=attempts or fewer attempts with gave_up=budget, its
attempts summing to the origin's count; once the budget is spent,
responses come back at once with Retry-Attempts: 1 and gave_up=budget;
after the window has passed, a GET scripted 503 then 200 gets the 200 with
Retry-Attempts: 2.
"""

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
    max_attempts: 5
    initial_backoff: 10ms
    multiplier: 2
    max_backoff: 50ms
    jitter: 0s
    budget: { ratio: 0.2, min_per_second: 3, window: 10s }
"""

RATIO = 0.2
MIN_PER_SECOND = 3
WINDOW = 10.0
MAX_ATTEMPTS = 5
THREADS = 4
PERIOD = 0.2            # seconds between one thread's requests
PER_THREAD = 43         # requests per thread: 8.6 s of load, inside one window
QUICK = 1.0             # seconds: an answer without waiting


def storm(port):
    """Run the load; returns [(id, started_at, elapsed, Response or error)]."""
    results = []
    lock = threading.Lock()
    t0 = time.monotonic() + 0.1
    def client(i):
        for k in range(PER_THREAD):
            at = t0 + k * PERIOD + i * PERIOD / THREADS
            time.sleep(max(0.0, at - time.monotonic()))
            rid = k * THREADS + i
            start = time.monotonic()
            try:
                got = h.fetch(port, "GET", "/storm?id=%d" % rid, "budget.example", timeout=10 * h.SLOW)
            except Exception as e:  # recorded and reported
                got = "%s: %s" % (type(e).__name__, e)
            with lock:
                results.append((rid, start, time.monotonic() - start, got))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(PER_THREAD * PERIOD + 30 * h.SLOW)
    return sorted(results)


def scenario(t):
    origin = t.origin()
    origin.script("/storm", [503])
    proxy = t.proxy(CONFIG, ORIGIN=origin.port)

    results = storm(proxy.port())
    time.sleep(0.5 * h.SLOW)
    n = len(results)
    storm_tries = origin.requests_for("/storm")
    retries = len(storm_tries) - n
    bound = (1 + RATIO) * n + MIN_PER_SECOND * WINDOW
    span = storm_tries[-1].received_at - storm_tries[0].received_at if storm_tries else 0.0
    print("storm: %d client requests, %d tries at the origin over %.1fs (%d retries); "
          "budget bound %.1f tries; without a budget up to %d"
          % (n, len(storm_tries), span, retries, bound, MAX_ATTEMPTS * n), flush=True)

    @t.check("every storm request got an answer")
    def _():
        h.eq(n, THREADS * PER_THREAD, "requests sent")
        bad = [(rid, got) for rid, _, _, got in results if not isinstance(got, h.Response)]
        h.eq(bad, [], "requests without a response")

    @t.check("the whole storm, retries included, fell inside one budget window")
    def _():
        h.ok(span < WINDOW, "tries spread over %.1fs; the bound below assumes one window" % span)

    @t.check("origin tries <= (1 + ratio) x requests + min_per_second x window, not max_attempts x")
    def _():
        h.ok(len(storm_tries) <= bound,
             "origin saw %d tries for %d requests; the budget allows at most %.1f (%d retries, "
             "allowed %.1f)" % (len(storm_tries), n, bound, retries, bound - n))

    @t.check("the budget's floor is spent: at least min_per_second x window retries happened")
    def _():
        h.ok(retries >= MIN_PER_SECOND * WINDOW,
             "only %d retries during a 100%% failure storm; the budget allows %.1f"
             % (retries, bound - n))

    @t.check("every storm request got the origin's 503 unchanged")
    def _():
        bad = ["id %d: %d %r" % (rid, got.status, got.body) for rid, _, _, got in results
               if isinstance(got, h.Response) and (got.status, got.body) != (503, b"status 503\n")]
        h.eq(bad, [], "responses other than the origin's 503")

    @t.check("access log: each request either ran out of attempts or gave_up=budget; attempts add up")
    def _():
        lines = {}
        for ln in proxy.access_lines():
            f = h.access_fields(ln)
            m = re.match(r"/storm\?id=(\d+)$", f.get("target", ""))
            if m:
                lines.setdefault(int(m.group(1)), []).append(f)
        bad = []
        total = 0
        for rid, _, _, got in results:
            entries = lines.get(rid, [])
            if len(entries) != 1:
                bad.append("id %d: %d access-log lines" % (rid, len(entries)))
                continue
            f = entries[0]
            attempts = int(f.get("attempts", "0"))
            total += attempts
            why = f.get("gave_up")
            if not ((attempts == MAX_ATTEMPTS and why == "attempts") or
                    (attempts < MAX_ATTEMPTS and why == "budget")):
                bad.append("id %d: attempts=%d gave_up=%s" % (rid, attempts, why))
            elif isinstance(got, h.Response) and got.header("Retry-Attempts") != str(attempts):
                bad.append("id %d: log attempts=%d, Retry-Attempts %r"
                           % (rid, attempts, got.header("Retry-Attempts")))
        h.eq(bad[:10], [], "access-log problems (%d in all)" % len(bad))
        h.eq(total, len(storm_tries), "attempts in the access log vs tries at the origin")
        h.ok(any(f[0].get("gave_up") == "budget" for f in lines.values()),
             "no gave_up=budget in the access log")

    @t.check("once the budget is spent, answers come at once: Retry-Attempts: 1, gave_up=budget")
    def _():
        late = [(rid, el, got) for rid, start, el, got in results
                if start - results[0][1] > 3.0 and isinstance(got, h.Response)]
        h.ok(len(late) > 50, "only %d requests after the first 3 s" % len(late))
        one = [x for x in late if x[2].header("Retry-Attempts") == "1"]
        h.ok(len(one) >= 0.5 * len(late),
             "only %d of %d requests after the first 3 s were answered after one try"
             % (len(one), len(late)))
        slow = [(rid, round(el, 2)) for rid, el, _ in one if el > QUICK * h.SLOW]
        h.eq(slow, [], "requests answered after one try that took over %ss" % QUICK)
        for rid, _, _ in one[:20]:
            f = h.access_fields(proxy.access_one("/storm?id=%d" % rid))
            h.eq((f.get("attempts"), f.get("gave_up")), ("1", "budget"), "id %d access log" % rid)

    @t.check("after the window has passed, retries resume: 503 then 200 -> 200, Retry-Attempts: 2")
    def _():
        last = storm_tries[-1].received_at if storm_tries else time.monotonic()
        time.sleep(max(0.0, last + WINDOW + 1.0 - time.monotonic()))
        origin.script("/probe", [503, 200])
        r = h.fetch(proxy.port(), "GET", "/probe?after=1", "budget.example", timeout=10 * h.SLOW)
        h.eq(r.status, 200, "status (body %r)" % r.body)
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.eq(len(origin.requests_for("/probe")), 2, "probe tries at the origin")


h.run(scenario, __doc__, timeout=90)
