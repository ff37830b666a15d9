#!/usr/bin/env python3
"""Scenario: the retry trail in the access log, as text and as JSON.

Client: GETs through two forward proxies with the same routes, one logging
text and one JSON.
Origin: per path, 503, 503, 200; or 503 on every try; or 503 then 200 on a
route whose wait is over a second; or 503, 503, 200 on a route with jitter.
Route /fixed/: initial 200ms, multiplier 2, no jitter, max_attempts 3;
/even/: 100ms each, max_attempts 6;
/long/: initial 1100ms, max_attempts 2; /jit/: initial 100ms, multiplier 2,
jitter 150ms, max_attempts 3.
Must hold: text: attempts=3 status=200 and tries="503 -> wait 200ms -> 503
-> wait 400ms -> 200" with no gave_up; exhausted: status=503 attempts=3, the
trail ending in 503 and gave_up=attempts; a wait over a second prints as
1.1s; duration_ms covers the waits. JSON: the same as objects: tries is
[{status 503, wait_ms 200}, {status 503, wait_ms 400}, {status 200, wait_ms
0}], gave_up absent on success and "attempts" when exhausted (also for three
refused connects, logged as {"error": "refused"}); with jitter each wait_ms
is within [backoff, backoff + jitter] and matches the gap the origin saw
(within generous slack); five 503s then a 200 on /even/, twice: each
backoff lasts at least the 100 ms logged, as the origin sees the gap
between tries (less 1 ms for the log's whole milliseconds), and
duration_ms is never below the sum of the waits listed; a client that
leaves during a backoff leaves the
time it waited in waited_after_ms, the trail's last wait_ms 0 as every
last one (gave_up client_gone), and a try the
client's leaving cut short is in the trail as cancelled; a 200 whose chunked
body is seen broken in the read that brought its head is one malformed try
in the trail (one entry per try), not a 200 followed by a malformed entry.
"""

import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: @FORMAT@ }
limits: { drain_timeout: 2s }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 200ms
    multiplier: 2
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: fixed
    match: { path_prefix: /fixed/ }
  - name: long
    match: { path_prefix: /long/ }
    retry: { initial_backoff: 1100ms, max_attempts: 2 }
  - name: many
    match: { path_prefix: /many/ }
    retry: { initial_backoff: 10ms, multiplier: 1, max_attempts: 20 }
  - name: even
    match: { path_prefix: /even/ }
    retry: { initial_backoff: 100ms, multiplier: 1, max_attempts: 6 }
  - name: jit
    match: { path_prefix: /jit/ }
    retry: { initial_backoff: 100ms, jitter: 150ms }
"""

SLACK = 0.25 * h.SLOW


def scenario(t):
    origin = t.origin()
    text = t.proxy(CONFIG, FORMAT="text")
    jsonp = t.proxy(CONFIG, FORMAT="json")
    host = origin.authority

    def get(proxy, path, steps, status):
        if steps:
            origin.script(path, steps)
        r = h.fetch(proxy.port(), "GET", origin.url(path), host)
        h.eq(r.status, status, "status of %s" % path)
        return r

    @t.check("text: 503, 503, 200 -> attempts=3 tries=\"503 -> wait 200ms -> 503 -> wait 400ms -> 200\"")
    def _():
        get(text, "/fixed/t-ok", [503, 503, 200], 200)
        f = h.access_fields(text.access_one("/fixed/t-ok"))
        h.eq((f["status"], f["attempts"], f["route"]), ("200", "3", "fixed"), "status, attempts, route")
        h.eq(f["tries"], "503 -> wait 200ms -> 503 -> wait 400ms -> 200", "tries")
        h.ok("gave_up" not in f, "gave_up on a success: %r" % f)
        h.ok(int(f["duration_ms"]) >= 600, "duration_ms %s should cover 600 ms of waits" % f["duration_ms"])

    @t.check("text: 503 on every try -> status=503 attempts=3, trail ends in 503, gave_up=attempts")
    def _():
        get(text, "/fixed/t-all", [503], 503)
        f = h.access_fields(text.access_one("/fixed/t-all"))
        h.eq((f["status"], f["attempts"], f.get("gave_up")), ("503", "3", "attempts"),
             "status, attempts, gave_up")
        h.eq(f["tries"], "503 -> wait 200ms -> 503 -> wait 400ms -> 503", "tries")
        h.eq(f["bytes"], "11", "bytes (the given-back 503's body, 'status 503\\n')")

    @t.check("text: a wait over a second prints in seconds: \"503 -> wait 1.1s -> 200\"")
    def _():
        get(text, "/long/t", [503, 200], 200)
        f = h.access_fields(text.access_one("/long/t"))
        h.eq((f["attempts"], f["tries"]), ("2", "503 -> wait 1.1s -> 200"), "attempts, tries")

    @t.check("json: 503, 503, 200 -> tries with wait_ms 200, 400, 0; no gave_up")
    def _():
        get(jsonp, "/fixed/j-ok", [503, 503, 200], 200)
        o = jsonp.access_one("/fixed/j-ok")
        h.eq((o["status"], o["attempts"], o["route"]), (200, 3, "fixed"), "status, attempts, route")
        h.eq(o["tries"], [{"status": 503, "wait_ms": 200}, {"status": 503, "wait_ms": 400},
                          {"status": 200, "wait_ms": 0}], "tries")
        h.ok("gave_up" not in o, "gave_up on a success: %r" % o)
        h.ok(o["duration_ms"] >= 600, "duration_ms %s should cover 600 ms of waits" % o["duration_ms"])

    @t.check("json: 503 on every try -> gave_up \"attempts\", three 503 tries, last wait_ms 0")
    def _():
        get(jsonp, "/fixed/j-all", [503], 503)
        o = jsonp.access_one("/fixed/j-all")
        h.eq((o["status"], o["attempts"], o.get("gave_up")), (503, 3, "attempts"),
             "status, attempts, gave_up")
        h.eq(o["tries"], [{"status": 503, "wait_ms": 200}, {"status": 503, "wait_ms": 400},
                          {"status": 503, "wait_ms": 0}], "tries")

    @t.check("json: a closed port -> three {error: refused} tries, wait_ms 200, 400, 0; gave_up attempts")
    def _():
        dead = h.closed_port()
        r = h.fetch(jsonp.port(), "GET", "http://127.0.0.1:%d/fixed/j-refused" % dead,
                    "127.0.0.1:%d" % dead)
        h.eq((r.status, r.header("Retry-Attempts")), (502, "3"), "status, Retry-Attempts")
        o = jsonp.access_one("/fixed/j-refused")
        h.eq((o["status"], o["attempts"], o.get("gave_up")), (502, 3, "attempts"),
             "status, attempts, gave_up")
        h.eq(o["tries"], [{"error": "refused", "wait_ms": 200}, {"error": "refused", "wait_ms": 400},
                          {"error": "refused", "wait_ms": 0}], "tries")

    @t.check("json and text: a 200 whose chunked body is seen broken with its head is one "
             "malformed try in the trail, not a 200 and then a malformed one")
    def _():
        get(jsonp, "/fixed/j-badchunk", ["/bad/bad-chunk", "/bytes/3"], 200)
        o = jsonp.access_one("/fixed/j-badchunk")
        h.eq((o["status"], o["attempts"]), (200, 2), "status, attempts")
        h.eq(o["tries"], [{"error": "malformed", "wait_ms": 200}, {"status": 200, "wait_ms": 0}],
             "tries (one entry per try, as attempts counts them)")
        get(text, "/fixed/t-badchunk", ["/bad/bad-chunk", "/bytes/3"], 200)
        f = h.access_fields(text.access_one("/fixed/t-badchunk"))
        h.eq((f["attempts"], f["tries"]), ("2", "malformed -> wait 200ms -> 200"), "attempts, tries")

    @t.check("text: 20 tries (max_attempts 20) are all in the trail, the last one last")
    def _():
        origin.script("/many/t", ["/status/503"] * 19 + ["/status/503?hdr=X-Last:1"])
        r = get(text, "/many/t", [], 503)
        h.eq((r.header("Retry-Attempts"), r.header("X-Last")), ("20", "1"), "Retry-Attempts, X-Last")
        f = h.access_fields(text.access_one("/many/t"))
        h.eq(f["attempts"], "20", "attempts")
        listed = f["tries"].split(" -> ")[::2]
        h.eq(len(listed), 20, "tries listed in the trail (it ends %r)" % f["tries"][-40:])
        h.eq(f["tries"], " -> wait 10ms -> ".join(["503"] * 20), "tries")

    @t.check("json: 20 tries (max_attempts 20) -> 20 entries, wait_ms 10 each, the last 0")
    def _():
        origin.script("/many/j", [503])
        get(jsonp, "/many/j", [503], 503)
        o = jsonp.access_one("/many/j")
        h.eq(o["attempts"], 20, "attempts")
        h.eq(len(o["tries"]), 20, "entries in tries (one per try; the last two listed: %r)"
             % o["tries"][-2:])
        h.eq(o["tries"][-1], {"status": 503, "wait_ms": 0}, "last entry")
        h.eq(o["tries"][:-1], [{"status": 503, "wait_ms": 10}] * 19, "other entries")

    @t.check("json: each backoff lasts at least the wait its trail logs (a timer on a coarse "
             "clock must not end it early), and duration_ms is never below the waits listed")
    def _():
        short, under = [], []
        for i in range(2):
            path = "/even/j-dur%d" % i
            get(jsonp, path, [503] * 5 + [200], 200)
            o = jsonp.access_one(path)
            waits = [tr["wait_ms"] for tr in o["tries"]]
            h.eq(waits, [100] * 5 + [0], "waits in the trail of %s" % path)
            gaps = h.try_gaps(origin.requests_for(path))
            h.eq(len(gaps), 5, "gaps between the tries of %s at the origin" % path)
            # the log's whole milliseconds may round a wait's start down by 1 ms
            short += ["%s: %.1f ms" % (path, g * 1000) for g in gaps if g * 1000 < 99]
            if o["duration_ms"] < sum(waits):
                under.append((path, o["duration_ms"]))
        h.eq(short, [], "backoffs of 100 ms the origin saw end early")
        h.eq(under, [], "requests whose duration_ms is below the 500 ms of waits they list")

    @t.check("json: with jitter, each wait_ms is in [backoff, backoff + 150] and matches the gap seen")
    def _():
        get(jsonp, "/jit/j", [503, 503, 200], 200)
        o = jsonp.access_one("/jit/j")
        waits = [tr.get("wait_ms") for tr in o["tries"]]
        h.eq([tr.get("status") for tr in o["tries"]], [503, 503, 200], "statuses in tries")
        h.eq(waits[-1], 0, "last wait_ms")
        for w, base in zip(waits, (100, 200)):
            h.ok(isinstance(w, int) and base <= w <= base + 150,
                 "wait_ms %r outside [%d, %d]; tries %r" % (w, base, base + 150, o["tries"]))
        gaps = h.try_gaps(origin.requests_for("/jit/j"))
        for i, (w, g) in enumerate(zip(waits, gaps)):
            h.ok(w / 1000 - 0.02 <= g <= w / 1000 + SLACK,
                 "wait %d: logged %d ms, the origin saw a gap of %d ms" % (i + 1, w, g * 1000))

    @t.check("json: the client leaves 300 ms into a 1.1 s backoff: waited_after_ms is the time "
             "waited, the trail's last wait_ms 0, gave_up client_gone")
    def _():
        origin.script("/long/j-gone", [503])
        with h.RawConn(jsonp.port()) as c:
            c.send(h.request("GET", origin.url("/long/j-gone"), host))
            origin.wait_for(lambda o: o.requests_for("/long/j-gone"), 5 * h.SLOW, "the first try")
            time.sleep(0.3)
        o = jsonp.access_one("/long/j-gone")
        h.eq((o["attempts"], o.get("gave_up"), len(o["tries"])), (1, "client_gone", 1),
             "attempts, gave_up, tries in %r" % o)
        h.eq(o["tries"][0]["wait_ms"], 0, "the trail's last wait_ms")
        w = o.get("waited_after_ms")
        h.ok(w is not None and 250 <= w < 1000,
             "waited_after_ms %r is not the time waited (300 ms)" % w)

    @t.check("json: a try cut short by the client leaving is in the trail, as attempts counts it")
    def _():
        with h.RawConn(jsonp.port()) as c:
            c.send(h.request("GET", origin.url("/delay/2?t=cut"), host))
            origin.wait_for(lambda o: [q for q in o.requests_for("/delay/2")
                                       if q.query.get("t") == "cut"], 5 * h.SLOW, "the try")
        o = jsonp.access_one("t=cut")
        h.eq((o["attempts"], [x.get("error") for x in o["tries"]]), (1, ["cancelled"]),
             "attempts and the trail in %r" % o)

    @t.check("text: with jitter, waits under a second print like \"wait 180ms\"")
    def _():
        time.sleep(0.1)
        get(text, "/jit/t", [503, 503, 200], 200)
        f = h.access_fields(text.access_one("/jit/t"))
        parts = f["tries"].split(" -> ")
        h.eq(len(parts), 5, "trail parts in %r" % f["tries"])
        h.eq(parts[0::2], ["503", "503", "200"], "statuses in %r" % f["tries"])
        for p in parts[1::2]:
            h.ok(p.startswith("wait ") and p.endswith("ms") and p[5:-2].isdigit(),
                 "wait %r should read like 'wait 180ms' (under a second)" % p)


h.run(scenario, __doc__)
