#!/usr/bin/env python3
"""Scenario: upstream health. An upstream that is not there is marked down
after a few connect failures, probed, and its requests are held until it
is back, instead of each retrying on its own.

Client: raw-socket GETs and POSTs (each with a unique id) to sidecar
listeners, many at once from threads; curl to the admin listener for
/upstreams and /metrics.
Origin: the test origin, started on an upstream port only after the
requests were sent (the docker-compose app that starts before its API);
another that answers 503 and is then stopped.
Proxy: health down_after 3, probe_interval 500ms, hold true (the SPEC
defaults); max_attempts 5, backoff 100ms. A second proxy has hold: false,
a third max_pending_retries 2.
Must hold:
- the compose start-up: 20 GETs and 5 unconditioned POSTs sent while the
  upstream's port is closed, the origin starting 3 s later: all 25 get the
  origin's 200, each POST reaches the origin exactly once, and they are
  answered soon after the origin starts (released at once, not on their
  own backoff); during the outage /upstreams shows the upstream down with
  the requests held, retryproxy_upstream_up is 0 and
  retryproxy_held_requests counts them; the proxy's connection attempts
  during the outage (requests' connect failures plus failed probes) stay
  within down_after + 3 s / probe_interval and a little slack, not a
  stream of retries per request; the down and up transitions are logged
  (warn, then info); afterwards the upstream is up with failures=0 held=0;
- hold: false: the request whose tries marked the upstream down gets 502
  naming it as down, with gave_up=upstream_down, at once after the try
  that marked it (before, only after the next backoff, 18 s); once down, a
  request is answered 502 at once, naming the upstream as down, with
  Retry-Attempts: 0 and no gave_up;
- a GET held before its first try (its trail is the one 200) logs the time
  it was held as waited_ms (before, that time showed nowhere but in
  duration_ms); one whose first try was refused has the hold in its trail,
  and at most the moment it waited behind the connect that found the
  upstream out (under 500 ms) as waited_ms;
- a held request whose deadline passes gets 502 naming the upstream as
  down, gave_up=deadline, Retry-Attempts = the tries made; one that had a
  retryable response before the upstream went away gets that response
  (the kept 503) instead;
- a held request whose client leaves is dropped: held goes back to 0, the
  access line says gave_up=client_gone, and the request never reaches the
  origin when it comes back;
- held requests count against max_pending_retries: past it, 502 at once
  with gave_up=budget;
- a held upload whose body (over replay_buffer) waits unread behind the
  proxy's input limit, whose client then leaves, is dropped too (before,
  nothing read the client's connection, so its close went unseen and the
  request kept its place until its deadline): gave_up=client_gone, and
  the place among the pending retries goes to the next request; so is a
  held GET whose client pipelined a next request past that limit (its
  body unread), then left (before, the GET kept its place until its
  deadline and was logged status=502 gave_up=deadline), and one whose
  client pipelined past that limit only after the GET was held (before,
  the look was planned only at the hold's start: held to its deadline);
- a request whose own tries marked the upstream down (3 refused) is held,
  then retried when the upstream is back: 200 with Retry-Attempts: 4, and
  retryproxy_retries_total counts 3 (the try after the hold too);
- any response head resets the failure count;
- a reload that shortens probe_interval while an upstream is down has it
  probed within the new interval, not after the old one (60 s), and a
  request from before the reload (a retry after its Retry-After, held
  then) does not bring the old interval back for the probes after that.
"""

import re
import threading
import time

import harness as h
import origin as origin_mod

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@API@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@GONE@
  - address: 127.0.0.1:@PORT3@
    upstream: http://127.0.0.1:@FLAKY@
  - address: 127.0.0.1:@PORT4@
    upstream: http://127.0.0.1:@LEAVE@
  - address: 127.0.0.1:@PORT5@
    upstream: http://127.0.0.1:@REVIVE@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  connect_timeout: 1s
health:
  down_after: 3
  probe_interval: 500ms
  hold: true
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 100ms
    multiplier: 2
    max_backoff: 1s
    jitter: 0s
    deadline: 20s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: short
    match: { path_prefix: /short/ }
    retry: { deadline: 1500ms }
  - name: kept
    match: { path_prefix: /kept/ }
    retry: { max_attempts: 6, initial_backoff: 100ms, multiplier: 1, deadline: 2s }
  - name: revive
    match: { path_prefix: /revive/ }
"""

CONFIG_NO_HOLD = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@GONE@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 3, probe_interval: 500ms, hold: false }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 20ms
    multiplier: 30
    max_backoff: 20s
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

CONFIG_PENDING = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@GONE@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s, max_pending_retries: 2 }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    deadline: 20s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

DOWN_AFTER = 3
PROBE_INTERVAL = 0.5
OUTAGE = 3.0
GETS = 20
POSTS = 5


def admin_get(proxy, path):
    return h.curl("http://127.0.0.1:%d%s" % (proxy.port(1), path), check=True).body.decode()



def upstream_line(proxy, port):
    for line in admin_get(proxy, "/upstreams").splitlines():
        if line.startswith("http://127.0.0.1:%d " % port):
            return line
    return None


def held(proxy, port):
    line = upstream_line(proxy, port)
    m = re.search(r" held=(\d+)$", line or "")
    return int(m.group(1)) if m else -1


def send_all(port, requests):
    """Send each (method, target, body) on its own connection from its own
    thread; returns {target: Response or error text} once all are answered."""
    results = {}
    lock = threading.Lock()

    def one(method, target, body):
        try:
            got = h.fetch(port, method, target, "api.example", body=body, timeout=30 * h.SLOW)
            got.done_at = time.monotonic()
        except Exception as e:  # recorded and reported
            got = "%s: %s" % (type(e).__name__, e)
        with lock:
            results[target] = got

    threads = [threading.Thread(target=one, args=r, daemon=True) for r in requests]
    for th in threads:
        th.start()
    return threads, results


def scenario(t):
    api_port = h.reserved_port()
    gone_port = h.closed_port()
    leave_port = h.reserved_port()
    flaky = t.origin(name="flaky")
    flaky.script("/kept/x", [503])
    revive_port = h.reserved_port()
    proxy = t.proxy(CONFIG, API=api_port, GONE=gone_port, FLAKY=flaky.port, LEAVE=leave_port,
                    REVIVE=revive_port)

    requests = [("GET", "/app/get?id=%d" % i, b"") for i in range(GETS)]
    requests += [("POST", "/app/post?id=%d" % i, b"order %d" % i) for i in range(POSTS)]
    sent_at = time.monotonic()
    threads, results = send_all(proxy.port(0), requests)
    time.sleep(OUTAGE - 1.0)
    during_upstreams = upstream_line(proxy, api_port)
    during_metrics = admin_get(proxy, "/metrics")
    time.sleep(max(0.0, sent_at + OUTAGE - time.monotonic()))
    api = origin_mod.Origin(port=api_port, name="api", echo_unknown=True).start()
    t.defer(api.stop)
    started_at = time.monotonic()
    for th in threads:
        th.join(30 * h.SLOW)
    after_metrics = admin_get(proxy, "/metrics")
    name = "http://127.0.0.1:%d" % api_port
    print("outage: /upstreams said %r; answers %.2f-%.2f s after the origin started"
          % (during_upstreams,
             min((r.done_at - started_at for r in results.values() if isinstance(r, h.Response)),
                 default=-1),
             max((r.done_at - started_at for r in results.values() if isinstance(r, h.Response)),
                 default=-1)), flush=True)

    @t.check("compose start-up: all 20 GETs and 5 POSTs get the origin's 200")
    def _():
        h.eq(len(results), GETS + POSTS, "answers")
        bad = {k: v if not isinstance(v, h.Response) else v.status
               for k, v in results.items() if not isinstance(v, h.Response) or v.status != 200}
        h.eq(bad, {}, "requests without a 200")

    @t.check("compose start-up: each POST reached the origin exactly once, with its body")
    def _():
        for i in range(POSTS):
            got = [r for r in api.requests if r.target == "/app/post?id=%d" % i]
            h.eq(len(got), 1, "origin requests for POST id %d" % i)
            h.eq(got[0].body, b"order %d" % i, "POST id %d body" % i)

    @t.check("compose start-up: held requests are released at once when a probe connects")
    def _():
        late = max(r.done_at - started_at for r in results.values() if isinstance(r, h.Response))
        h.ok(late < PROBE_INTERVAL + 1.0 * h.SLOW,
             "the last answer came %.2f s after the origin started" % late)

    @t.check("compose start-up: /upstreams and the metrics showed the upstream down, requests held")
    def _():
        h.ok(during_upstreams is not None and during_upstreams.startswith(name + " down "),
             "/upstreams during the outage: %r" % during_upstreams)
        m = re.search(r"held=(\d+)$", during_upstreams or "")
        h.ok(m is not None and int(m.group(1)) >= GETS + POSTS - 3,
             "held during the outage: %r" % during_upstreams)
        h.eq(h.metric(during_metrics, "retryproxy_upstream_up", '{upstream="%s"}' % name), 0.0,
             "retryproxy_upstream_up during the outage")
        h.ok((h.metric(during_metrics, "retryproxy_held_requests") or 0) >= GETS + POSTS - 3,
             "retryproxy_held_requests during the outage: %s"
             % h.metric(during_metrics, "retryproxy_held_requests"))

    @t.check("compose start-up: connection attempts during the outage stay near "
             "down_after + outage / probe_interval")
    def _():
        refused = h.metric(after_metrics, "retryproxy_upstream_errors_total", '{kind="connect"}')
        probes_failed = h.metric(after_metrics, "retryproxy_probes_total",
                               '{upstream="%s",result="fail"}' % name)
        probes_ok = h.metric(after_metrics, "retryproxy_probes_total",
                           '{upstream="%s",result="ok"}' % name)
        bound = DOWN_AFTER + OUTAGE / PROBE_INTERVAL + 2
        print("outage: %d request connects refused, %d probes failed, %d connected; bound %.0f"
              % (refused, probes_failed, probes_ok, bound), flush=True)
        h.ok(refused + probes_failed <= bound,
             "%d refused connects + %d failed probes during a %.0f s outage; at most %.0f expected"
             % (refused, probes_failed, OUTAGE, bound))
        h.ok(refused >= DOWN_AFTER, "only %d refused connects marked it down" % refused)
        h.eq(probes_ok, 1.0, "probes that connected")

    @t.check("compose start-up: a request held before its first try logs the time held "
             "(waited_ms), which its one-try trail cannot show")
    def _():
        lines = [f for f in map(h.access_fields, proxy.access_lines())
                 if f.get("target", "").startswith("/app/get?id=")]
        h.eq(len(lines), GETS, "access lines of the GETs")
        first = [f for f in lines if f.get("tries") == "200"]
        h.ok(first, "no GET was held before its first try: %r" % [f.get("tries") for f in lines])
        for f in first:
            h.ok("waited_ms" in f, "no waited_ms on %r" % f)
            h.ok(int(f["duration_ms"]) - 500 <= int(f["waited_ms"]) <= int(f["duration_ms"]),
                 "waited_ms %s for a request of %s ms held until the origin started"
                 % (f["waited_ms"], f["duration_ms"]))
        # the hold after a refused first try is in the trail; before that
        # try a request may have waited a moment behind the one connect
        # that finds out whether the upstream is there (health in doubt)
        tried = [f for f in lines if f.get("tries") != "200"]
        h.ok(all(int(f.get("waited_ms", "0")) < 500 for f in tried),
             "the hold in waited_ms of a request whose wait is in its trail: %r" % tried)

    @t.check("compose start-up: down logged as a warning, up at info; then up, failures=0 held=0")
    def _():
        proxy.wait_log(r"warn.*upstream %s is down" % re.escape(name))
        proxy.wait_log(r"info.*upstream %s is up" % re.escape(name))
        h.eq(upstream_line(proxy, api_port), name + " up failures=0 held=0", "/upstreams after")
        after = admin_get(proxy, "/metrics")
        h.eq(h.metric(after, "retryproxy_upstream_up", '{upstream="%s"}' % name), 1.0,
             "retryproxy_upstream_up after")
        h.eq(h.metric(after, "retryproxy_held_requests"), 0.0, "retryproxy_held_requests after")

    @t.check("a held request whose deadline passes: 502 naming the upstream as down, "
             "gave_up=deadline")
    def _():
        r = h.fetch(proxy.port(2), "GET", "/short/a", "api.example", timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ["127.0.0.1:%d" % gone_port, "down"])
        entry = h.access_fields(proxy.access_one("/short/a"))
        h.eq(entry.get("gave_up"), "deadline", "gave_up")
        h.eq(r.header("Retry-Attempts"), entry.get("attempts"), "Retry-Attempts = tries made")
        # the time held after the last try, which no try ended
        h.ok(entry.get("tries") != "-" and 700 <= int(entry.get("waited_after_ms", "0")) <= 1500,
             "waited_after_ms in %r" % entry)
        h.ok(1.2 <= r.elapsed <= 1.5 + 2.0 * h.SLOW, "answered after %.2f s, deadline 1.5 s"
             % r.elapsed)

    @t.check("a held request whose upstream answered 503 before it went away gets that 503")
    def _():
        def stop_after_first():
            # once the 503 is sent whole: the retries then find the port closed
            flaky.wait_for(lambda o: o.requests and o.requests[0].finished_at is not None,
                           timeout=10 * h.SLOW, what="the first 503 sent")
            flaky.stop()
        stopper = threading.Thread(target=stop_after_first, daemon=True)
        stopper.start()
        r = h.fetch(proxy.port(3), "GET", "/kept/x", "api.example", timeout=10 * h.SLOW)
        h.eq((r.status, r.body), (503, b"status 503\n"), "response")
        entry = h.access_fields(proxy.access_one("/kept/x"))
        h.eq(entry.get("gave_up"), "deadline", "gave_up")
        h.ok(entry["tries"].startswith("503 -> "), "tries: %s" % entry["tries"])

    @t.check("a held request whose client leaves is dropped and never reaches the origin")
    def _():
        c = h.RawConn(proxy.port(4))
        c.send(h.request("GET", "/leave/me", "api.example"))
        h.wait_until(lambda: held(proxy, leave_port) == 1, 10 * h.SLOW, "the request held")
        c.close()
        h.wait_until(lambda: held(proxy, leave_port) == 0, 5 * h.SLOW, "held back to 0")
        entry = h.access_fields(proxy.access_one("/leave/me"))
        h.eq(entry.get("gave_up"), "client_gone", "gave_up")
        back = origin_mod.Origin(port=leave_port, name="leave").start()
        t.defer(back.stop)
        r = h.fetch(proxy.port(4), "GET", "/leave/after", "api.example", timeout=10 * h.SLOW)
        h.eq(r.status, 404, "a later request reaches the origin")
        h.eq([q.target for q in back.requests], ["/leave/after"], "origin requests")

    @t.check("a request held after its own tries marked the upstream down is retried when it "
             "is back, and that try counts in retries_total")
    def _():
        got = {}
        th = threading.Thread(target=lambda: got.update(r=h.fetch(
            proxy.port(5), "GET", "/revive/x", "api.example", timeout=20 * h.SLOW)), daemon=True)
        th.start()
        h.wait_until(lambda: held(proxy, revive_port) == 1, 10 * h.SLOW, "the request held")
        back = origin_mod.Origin(port=revive_port, name="revive", echo_unknown=True).start()
        t.defer(back.stop)
        th.join(20 * h.SLOW)
        h.eq((got["r"].status, got["r"].header("Retry-Attempts")), (200, str(DOWN_AFTER + 1)),
             "status and Retry-Attempts")
        text = admin_get(proxy, "/metrics")
        h.eq(h.metric(text, "retryproxy_tries_total", '{route="revive"}'), DOWN_AFTER + 1.0,
             "tries_total")
        h.eq(h.metric(text, "retryproxy_retries_total", '{route="revive",cause="connect"}'),
             float(DOWN_AFTER), "retries_total{cause=connect}: every try after a failed one")

    @t.check("any response head resets the failure count")
    def _():
        # two refused connects, then an answer: failures back to 0, still up
        port = h.reserved_port()
        p = t.proxy(CONFIG_PENDING.replace("max_pending_retries: 2", "max_pending_retries: 100")
                    .replace("max_attempts: 5", "max_attempts: 2"), GONE=port)
        r = h.fetch(p.port(0), "GET", "/twice", "api.example", timeout=10 * h.SLOW)
        h.eq(r.status, 502, "two refused tries")
        line = upstream_line(p, port)
        h.eq(line, "http://127.0.0.1:%d up failures=2 held=0" % port, "/upstreams")
        o = origin_mod.Origin(port=port, name="reset").start()
        t.defer(o.stop)
        r = h.fetch(p.port(0), "GET", "/status/200", "api.example", timeout=10 * h.SLOW)
        h.eq(r.status, 200, "status")
        h.eq(upstream_line(p, port), "http://127.0.0.1:%d up failures=0 held=0" % port,
             "/upstreams")
        t.stop_proxy(p)

    nohold = t.proxy(CONFIG_NO_HOLD, GONE=gone_port)

    @t.check("hold: false: once down, 502 at once naming the upstream, Retry-Attempts: 0")
    def _():
        first = h.fetch(nohold.port(), "GET", "/nohold/1", "api.example", timeout=30 * h.SLOW)
        h.check_error_response(first, 502, ["127.0.0.1:%d is down" % gone_port])
        h.eq(first.header("Retry-Attempts"), str(DOWN_AFTER), "tries before it went down")
        # its next retry was refused: retrying stopped short of max_attempts,
        # at once, not after the 18 s backoff that would have come before it
        # (waits 20ms, 600ms: the third refused connect marks it down)
        h.ok(first.elapsed < 3 * h.SLOW, "answered after %.3f s" % first.elapsed)
        f = h.access_fields(nohold.access_one("/nohold/1"))
        h.eq((f.get("gave_up"), f.get("tries")),
             ("upstream_down", "refused -> wait 20ms -> refused -> wait 600ms -> refused"),
             "gave_up and trail of the request whose retry was refused")
        r = h.fetch(nohold.port(), "GET", "/nohold/2", "api.example", timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ["127.0.0.1:%d" % gone_port, "down"])
        h.eq(r.header("Retry-Attempts"), "0", "Retry-Attempts")
        h.ok(r.elapsed < 0.2 * h.SLOW, "answered after %.3f s" % r.elapsed)
        f = h.access_fields(nohold.access_one("/nohold/2"))
        h.eq((f.get("note"), f.get("gave_up")), ("upstream%20down", None),
             "note, gave_up (a first try refused gave nothing up)")

    pending = t.proxy(CONFIG_PENDING, GONE=h.closed_port())

    @t.check("held requests count against max_pending_retries: past it, 502 with gave_up=budget")
    def _():
        conns = []
        for i in range(2):
            c = h.RawConn(pending.port(0))
            c.send(h.request("GET", "/pending/%d" % i, "api.example"))
            conns.append(c)
        h.wait_until(lambda: "held=2" in admin_get(pending, "/upstreams"), 10 * h.SLOW,
                     "two requests held")
        r = h.fetch(pending.port(0), "GET", "/pending/over", "api.example", timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ["down"])
        h.eq(h.access_fields(pending.access_one("/pending/over")).get("gave_up"), "budget", "gave_up")
        for c in conns:
            c.close()

    @t.check("a reload that shortens probe_interval probes a down upstream within the new one")
    def _():
        port = h.reserved_port()
        slow = CONFIG_NO_HOLD.replace("down_after: 3, probe_interval: 500ms",
                                      "down_after: 1, probe_interval: 60s")
        p = t.proxy(slow, GONE=port)
        r = h.fetch(p.port(0), "GET", "/reloaded/1", "api.example", timeout=10 * h.SLOW)
        h.check_error_response(r, 502, ["down"])
        back = origin_mod.Origin(port=port, name="reloaded").start()
        t.defer(back.stop)
        p.reload(h.read_file(p.config_path).replace("probe_interval: 60s",
                                                    "probe_interval: 500ms"))
        # the probe set for 60 s after the failure comes within the new 500 ms
        p.wait_log(r"upstream http://127\.0\.0\.1:%d is up" % port, timeout=5 * h.SLOW)
        r = h.fetch(p.port(0), "GET", "/status/200", "api.example", timeout=10 * h.SLOW)
        h.eq(r.status, 200, "status once it is up")
        t.stop_proxy(p)

    @t.check("a request from before a reload does not bring the old probe_interval back")
    def _():
        # the upstream answers a 503 with Retry-After, then goes away; another
        # request's refused connect marks it down; the reload shortens
        # probe_interval from 60s; then the first request's retry (under the
        # config it came with) is held: the probes go on every 300 ms
        port = h.reserved_port()
        conf = (CONFIG_PENDING.replace("max_pending_retries: 2", "max_pending_retries: 100")
                .replace("deadline: 20s", "deadline: 12s")
                + "health: { down_after: 1, probe_interval: 60s, hold: true }\n")
        first = origin_mod.Origin(port=port, name="before-reload").start()
        t.defer(first.stop)
        first.script("/old/ra", ["/status/503?retry_after=%d" % (2 * h.SLOW), "/bytes/10"])
        p = t.proxy(conf, GONE=port)
        got = {}
        th = threading.Thread(target=lambda: got.update(r=h.fetch(
            p.port(0), "GET", "/old/ra", "api.example", timeout=30 * h.SLOW)), daemon=True)
        th.start()
        first.wait_for(lambda o: o.requests and o.requests[0].finished_at is not None,
                       timeout=10 * h.SLOW, what="the 503 sent")
        first.stop()
        other = threading.Thread(target=lambda: h.fetch(
            p.port(0), "GET", "/old/other", "api.example", timeout=30 * h.SLOW), daemon=True)
        other.start()
        p.wait_log(r"upstream http://127\.0\.0\.1:%d is down" % port, timeout=5 * h.SLOW)
        p.reload(h.read_file(p.config_path).replace("probe_interval: 60s",
                                                    "probe_interval: 300ms"))
        h.ok(not got, "the first request still waits its Retry-After: %r" % got)
        # the retry is held too, then a probe or two fail after it
        h.wait_until(lambda: held(p, port) == 2, 10 * h.SLOW, "both requests held")
        time.sleep(1.0)
        back = origin_mod.Origin(port=port, name="after-reload")
        back.script("/old/ra", ["/bytes/10"])
        back.start()
        t.defer(back.stop)
        back_at = time.monotonic()
        th.join(30 * h.SLOW)
        h.eq((got["r"].status, len(got["r"].body)), (200, 10), "status and body length")
        took = time.monotonic() - back_at
        h.ok(took < 2.0 * h.SLOW, "answered %.2f s after the upstream came back; probes "
             "every 300 ms" % took)
        other.join(10 * h.SLOW)
        t.stop_proxy(p)

    def held_proxy(limits=""):
        """A proxy that holds requests for a closed port, one pending retry
        at most (limits: more of its limits, "key: value,"); it and the port."""
        port = h.closed_port()
        conf = (CONFIG_PENDING.replace("max_pending_retries: 2", "max_pending_retries: 1")
                .replace("limits: {", "limits: {" + limits)
                + "health: { down_after: 1, probe_interval: 300ms, hold: true }\n")
        return t.proxy(conf, GONE=port), port

    def dropped_when_client_leaves(p, port, c, path, behind):
        """Client c, whose request for path is held and behind which
        (behind: what) waits unread, closes once that is all in the proxy's
        kernel: the request is dropped (gave_up=client_gone) and its place
        among the pending retries freed, so the next is held."""
        h.wait_until(lambda: h.send_queue(c.local_port, p.port(0)) == 0, 5 * h.SLOW,
                     "%s all in the proxy's kernel" % behind)
        c.close()
        h.wait_until(lambda: held(p, port) == 0, 5 * h.SLOW,
                     "held back to 0 after the client left (%r)" % upstream_line(p, port))
        entry = h.access_fields(p.access_one(path))
        h.eq(entry.get("gave_up"), "client_gone", "gave_up")
        c2 = h.RawConn(p.port(0))
        t.defer(c2.close)
        c2.send(h.request("GET", "/next", "api.example"))
        h.wait_until(lambda: held(p, port) == 1, 5 * h.SLOW, "the next request held")
        t.stop_proxy(p)

    @t.check("a held request whose client leaves with its body unread (over replay_buffer) "
             "is dropped too, its place among the pending retries freed")
    def _():
        p, port = held_proxy(" replay_buffer: 1KiB,")
        c = h.RawConn(p.port(0))
        # more than the proxy's input takes, less than it and its kernel
        # do: the client's FIN reaches the proxy's kernel behind it
        body = b"x" * (256 << 10)
        c.send(h.request("POST", "/upload", "api.example",
                         headers=[("Content-Length", str(len(body)))], body=body))
        h.wait_until(lambda: held(p, port) == 1, 10 * h.SLOW, "the upload held")
        dropped_when_client_leaves(p, port, c, "/upload", "the body")

    @t.check("a held GET whose client pipelined a next request past the input limit, then "
             "left, is dropped too, its place among the pending retries freed")
    def _():
        p, port = held_proxy()
        c = h.RawConn(p.port(0))
        # the GET is whole; the POST behind it is more than the proxy's
        # input takes, less than it and its kernel do
        body = b"x" * (256 << 10)
        c.send(h.request("GET", "/pipelined", "api.example") +
               h.request("POST", "/behind", "api.example", body=body))
        h.wait_until(lambda: held(p, port) == 1, 10 * h.SLOW, "the GET held")
        dropped_when_client_leaves(p, port, c, "/pipelined", "the pipelined request")

    @t.check("a held GET whose client pipelines a next request past the input limit only "
             "once it is held, then leaves, is dropped too")
    def _():
        p, port = held_proxy()
        c = h.RawConn(p.port(0))
        c.send(h.request("GET", "/late", "api.example"))
        # held with nothing behind it: the input fills only afterwards
        h.wait_until(lambda: held(p, port) == 1, 10 * h.SLOW, "the GET held")
        body = b"x" * (256 << 10)
        c.send(h.request("POST", "/behind", "api.example", body=body))
        dropped_when_client_leaves(p, port, c, "/late", "the pipelined request")

h.run(scenario, __doc__, timeout=120)
