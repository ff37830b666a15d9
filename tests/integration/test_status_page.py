#!/usr/bin/env python3
"""Scenario: the status page `/` on the admin listener, read by a real browser.

Client: raw requests through a sidecar listener on five routes: "flaky"
(503 then 200; a reset then 200; 503 three times), "writes" (a POST the
origin answers 503: not retried), "hedged" (a first try slower than the
hedge), "dead" (its upstream a closed port: refused until it is marked
down, then refused at once) and the default route (a plain 200). Then,
with no traffic left in flight, headless Chromium (Debian's package, a
fresh profile, no network beyond loopback) loads http://<admin>/ with
--dump-dom, takes screenshots at 1200x800 and at a phone's 390x844, and
lays the page out at both sizes through the DevTools pipe. With
STATUS_PAGE_SCREENSHOTS=<dir> in the environment the screenshots are
copied there (that is how doc/status-page.png is made).
Origin: the test origin with scripted paths.
Must hold:
- GET / is 200 text/html; charset=utf-8 with Cache-Control: no-store,
  X-Content-Type-Options: nosniff, a Content-Security-Policy that allows
  the inline CSS and nothing else (the layout checks below see that CSS
  applied in Chromium), and a meta refresh of 2 s, loads nothing from elsewhere (no script, no
  stylesheet link, no image, no url()), and HEAD / has the GET's fields
  and no body;
- the DOM has one row per route /metrics counts, and in it requests,
  success rate (2xx+3xx+101 over all final responses, cut, not rounded, to one decimal), tries,
  retries by each cause, give-ups by each reason and hedges won and lost
  equal to /metrics scraped just before and just after; the totals,
  backoffs pending and held requests likewise; one row per upstream
  /upstreams lists, with its state, failures and held requests, and its
  probes by result (ok, fail, local_shortage) as /metrics counts them; the
  dead upstream shows as down;
- the traffic moved what it should (so the comparison is not of zeros):
  retries by status and reset, a give-up on attempts and not_idempotent,
  a hedge won;
- both screenshots are PNGs of the window's size with many colours (the
  page drew, not a blank); at 1200x800 the route table fits without
  scrolling sideways, at 390 px the page does not scroll sideways and
  each route is a stacked card. The screenshots and layouts load
  /?norefresh (the same page without its meta refresh, so a reload cannot
  pull the document away mid-step); the DOM dump loads / itself and must
  have the refresh;
- with requests in flight, on a second proxy (health.hold: true): one GET
  held for a down upstream (route "held", a closed port) and one waiting
  in a 60 s backoff after a 503 (route "backoff"). The DOM's tiles, the
  two routes' "now" cells and the down upstream's held cell equal /metrics
  and /upstreams, and are 1, not 0; once the clients leave, all go back
  to 0.
"""

import html.parser
import json
import os
import re
import shutil

import browser
import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 2, probe_interval: 10m, hold: false }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 20ms
    jitter: 0s
routes:
  - name: flaky
    match: { path_prefix: /flaky/ }
  - name: writes
    match: { path_prefix: /writes/ }
  - name: hedged
    match: { path_prefix: /hedged/ }
    retry: { hedge: { after: 200ms, max: 1 } }
  - name: dead
    match: { path_prefix: /dead/ }
    upstream: http://127.0.0.1:@CLOSED@
"""

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
CAUSES = ("status", "connect", "reset", "timeout")
REASONS = ("attempts", "deadline", "not_idempotent", "body_too_large", "client_gone", "budget",
           "upstream_busy", "upstream_down", "upstream_http10")


def scrape(admin):
    """/metrics as {(name, ((label, value), ...)): float}."""
    r = h.curl(admin + "/metrics", check=True)
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#"):
            m = SAMPLE.match(line)
            h.ok(m, "unparsable metrics line %r" % line)
            out[(m.group(1), tuple(sorted(LABEL.findall(m.group(2) or ""))))] = float(m.group(3))
    return out


def series(samples, name):
    """{labels dict as a tuple of items: value} of one metric."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def upstream_lines(admin):
    """/upstreams as {name: (state, failures, held)}."""
    out = {}
    for line in h.curl(admin + "/upstreams", check=True).body.decode().splitlines():
        m = re.match(r"^(\S+) (up|down) failures=(\d+) held=(\d+)$", line)
        h.ok(m, "unparsable /upstreams line %r" % line)
        out[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)))
    return out


def rate_text(ok, requests):
    """The success rate as the page shows it: cut, not rounded, to the
    tenth, so that a page with a failure never says 100.0%."""
    return "%d.%d%%" % divmod(int(ok) * 1000 // int(requests), 10)


def route_numbers(samples, route):
    """What the page's row for route must show, from /metrics."""
    codes = {dict(labels)["code"]: v for labels, v in
             series(samples, "retryproxy_requests_total").items()
             if dict(labels)["route"] == route}
    requests = sum(codes.values())
    ok = sum(v for c, v in codes.items() if int(c) == 101 or 200 <= int(c) < 400)
    row = {"requests": "%d" % requests,
           "success_rate": rate_text(ok, requests) if requests else "\u2013",
           "tries": "%d" % value(samples, "retryproxy_tries_total", route=route),
           "hedges.won": "%d" % value(samples, "retryproxy_hedges_total", route=route, result="won"),
           "hedges.lost": "%d" % value(samples, "retryproxy_hedges_total", route=route,
                                       result="lost"),
           "backoff_pending": "%d" % value(samples, "retryproxy_route_backoff_pending",
                                           route=route),
           "held": "%d" % value(samples, "retryproxy_route_held_requests", route=route),
           "queued": "%d" % value(samples, "retryproxy_route_queued", route=route)}
    for cause in CAUSES:
        row["retries." + cause] = "%d" % value(samples, "retryproxy_retries_total", route=route,
                                                cause=cause)
    for reason in REASONS:
        row["gave_up." + reason] = "%d" % value(samples, "retryproxy_retries_given_up_total",
                                                route=route, reason=reason)
    return row


class PageParser(html.parser.HTMLParser):
    """Rows by data-route and data-upstream, each {data-key: text}; tiles
    (elements with data-key outside a row) as {data-key: text}."""

    def __init__(self):
        super().__init__()
        self.routes, self.upstreams, self.tiles = {}, {}, {}
        self.row = None      # the dict of the row being read
        self.key = None      # the data-key whose text is being read
        self.depth = 0       # open elements inside that keyed element
        self.text = ""
        self.tags = []       # every start tag, for the no-external-assets check

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr" and "data-route" in a:
            self.row = self.routes.setdefault(a["data-route"], {})
        elif tag == "tr" and "data-upstream" in a:
            self.row = self.upstreams.setdefault(a["data-upstream"], {})
        if self.key is not None:
            self.depth += 1
        elif "data-key" in a:
            self.key, self.depth, self.text = a["data-key"], 0, ""

    def handle_endtag(self, tag):
        if self.key is not None:
            if self.depth == 0:
                (self.row if self.row is not None else self.tiles)[self.key] = self.text.strip()
                self.key = None
            else:
                self.depth -= 1
        if tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.key is not None:
            self.text += data


def traffic(t, origin, proxy, admin):
    """Send the scenario's requests and wait until nothing is in flight."""
    port = proxy.port(0)
    origin.script("/flaky/a", [503, 200])
    origin.script("/flaky/b", ["/reset/request", 200])
    origin.script("/flaky/c", [503])
    origin.script("/writes/x", [503])
    origin.script("/hedged/slow", ["/delay/2", 200])
    # /flaky/b first, on a new connection: a reset on a pooled one would be
    # a stale connection, sent again at once, not a retry
    for target in ("/flaky/b", "/flaky/a", "/flaky/c", "/hedged/slow", "/status/200"):
        h.fetch(port, "GET", target, "app.example")
    h.fetch(port, "POST", "/writes/x", "app.example", body=b"order=1")
    for _ in range(3):
        h.fetch(port, "GET", "/dead/x", "app.example")

    def settled():
        samples = scrape(admin)
        return (value(samples, "retryproxy_backoff_pending") == 0
                and value(samples, "retryproxy_held_requests") == 0
                and "down" in [s for s, _, _ in upstream_lines(admin).values()])
    h.wait_until(settled, 10 * h.SLOW, "no backoff or held request left, the dead upstream down")


def scenario(t):
    origin = t.origin()
    closed = h.closed_port()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, CLOSED=closed)
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    dead = "http://127.0.0.1:%d" % closed

    @t.check("before any request: the page says so, in a table with no rows")
    def _():
        r = h.curl(admin + "/", check=True)
        h.eq(r.status, 200, "status")
        body = r.body.decode()
        h.ok("No requests yet." in body, "no 'No requests yet.' in:\n%s" % body[-2000:])

    traffic(t, origin, proxy, admin)

    @t.check("GET / is self-contained HTML with a strict CSP and nosniff, not cached, "
             "refreshing every 2 s; HEAD has no body")
    def _():
        r = h.curl(admin + "/", check=True)
        h.eq(r.status, 200, "status")
        h.eq(r.header("Content-Type"), "text/html; charset=utf-8", "Content-Type")
        h.eq(r.header("Cache-Control"), "no-store", "Cache-Control")
        h.eq(r.header("X-Content-Type-Options"), "nosniff", "X-Content-Type-Options")
        h.eq(r.header("Content-Security-Policy"),
             "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
             "form-action 'none'; frame-ancestors 'none'", "Content-Security-Policy")
        body = r.body.decode("utf-8")
        h.ok(body.startswith("<!DOCTYPE html>"), "no doctype: %r" % body[:80])
        h.ok(re.search(r'<meta http-equiv="refresh" content="2">', body), "no 2 s meta refresh")
        p = PageParser()
        p.feed(body)
        for tag, a in p.tags:
            h.ok(tag not in ("script", "link", "img", "iframe", "object", "embed"),
                 "the page loads or runs <%s %r>" % (tag, a))
            h.ok("src" not in a, "<%s src=%r>" % (tag, a.get("src")))
            h.ok(a.get("href", "/").startswith("/"), "a link elsewhere: %r" % a.get("href"))
        h.ok("url(" not in body and "@import" not in body, "the CSS loads something")
        with h.RawConn(proxy.port(1)) as c:
            c.send(h.request("HEAD", "/", "127.0.0.1"))
            head = c.read_response("HEAD")
            h.eq((head.status, head.header("Content-Length")), (200, "%d" % len(r.body)),
                 "HEAD /: status, Content-Length")
            h.ok(c.silent_for(0.3), "HEAD / sent a body: %r" % bytes(c.buf[:200]))

    before = scrape(admin)
    ups_before = upstream_lines(admin)
    dom = browser.dump_dom(admin + "/")
    after = scrape(admin)
    ups_after = upstream_lines(admin)
    page = PageParser()
    page.feed(dom)

    @t.check("the traffic moved the counters the page is compared on")
    def _():
        for name, labels in (("retryproxy_retries_total", {"route": "flaky", "cause": "status"}),
                             ("retryproxy_retries_total", {"route": "flaky", "cause": "reset"}),
                             ("retryproxy_retries_given_up_total",
                              {"route": "flaky", "reason": "attempts"}),
                             ("retryproxy_retries_given_up_total",
                              {"route": "writes", "reason": "not_idempotent"}),
                             ("retryproxy_hedges_total", {"route": "hedged", "result": "won"})):
            h.ok(value(after, name, **labels) >= 1, "%s%r is %s" % (name, labels,
                                                                    value(after, name, **labels)))
        h.eq(ups_after.get(dead, ("missing",))[0], "down", "%s on /upstreams" % dead)

    @t.check("the DOM Chromium built is the live page: it has the 2 s meta refresh")
    def _():
        h.ok(re.search(r'<meta http-equiv="refresh" content="2">', dom),
             "no meta refresh in the DOM: %r" % dom[:600])

    @t.check("/?norefresh is the same page without the refresh")
    def _():
        r = h.curl(admin + "/?norefresh", check=True)
        body = r.body.decode()
        h.eq((r.status, r.header("Content-Type")), (200, "text/html; charset=utf-8"),
             "status, Content-Type")
        h.ok('http-equiv="refresh"' not in body, "a refresh in /?norefresh")
        snap = PageParser()
        snap.feed(body)
        h.eq(sorted(snap.routes), sorted(page.routes), "route rows")

    @t.check("the DOM Chromium built has a row per route with the numbers /metrics has")
    def _():
        routes = sorted({dict(labels)["route"] for labels in
                         series(after, "retryproxy_tries_total")})
        h.eq(sorted(page.routes), routes, "route rows (DOM) against routes in /metrics")
        h.ok({"flaky", "writes", "hedged", "dead", "default"} <= set(routes),
             "routes in /metrics: %s" % routes)
        for route in routes:
            want = route_numbers(after, route)
            h.eq(want, route_numbers(before, route),
                 "/metrics for %s moved while the page loaded; no traffic was running" % route)
            h.eq(page.routes[route], want, "row %s: DOM against /metrics" % route)

    @t.check("the totals, backoffs pending and held requests in the DOM equal /metrics")
    def _():
        requests = sum(series(after, "retryproxy_requests_total").values())
        codes = [(int(dict(labels)["code"]), v)
                 for labels, v in series(after, "retryproxy_requests_total").items()]
        ok = sum(v for c, v in codes if c == 101 or 200 <= c < 400)
        want = {
            "requests": "%d" % requests,
            "success_rate": rate_text(ok, requests),
            "retries": "%d" % sum(series(after, "retryproxy_retries_total").values()),
            "gave_up": "%d" % sum(series(after, "retryproxy_retries_given_up_total").values()),
            "backoff_pending": "%d" % value(after, "retryproxy_backoff_pending"),
            "held_requests": "%d" % value(after, "retryproxy_held_requests"),
            "upstreams_down": "%d of %d" % (
                sum(1 for v in series(after, "retryproxy_upstream_up").values() if v == 0),
                len(series(after, "retryproxy_upstream_up"))),
        }
        got = {k: page.tiles.get(k) for k in want}
        h.eq(got, want, "tiles: DOM against /metrics")
        h.eq(page.tiles.get("serving"), "serving", "serving/draining")

    @t.check("the DOM has a row per upstream with its state, failures and held requests")
    def _():
        h.eq(sorted(page.upstreams), sorted(ups_after), "upstream rows against /upstreams")
        h.ok(dead in page.upstreams and len(page.upstreams) >= 2,
             "upstream rows: %s" % sorted(page.upstreams))
        for name, (state, failures, held) in ups_after.items():
            row = page.upstreams[name]
            h.eq(row.get("state"), state, "%s state" % name)
            h.eq(row.get("held"), "%d" % held, "%s held" % name)
            low, high = sorted((ups_before[name][1], failures))
            h.ok(low <= int(row.get("failures", -1)) <= high,
                 "%s failures %s, /upstreams said %d then %d"
                 % (name, row.get("failures"), ups_before[name][1], failures))
            for result in ("ok", "fail", "local_shortage"):
                low, high = (value(s, "retryproxy_probes_total", upstream=name, result=result)
                             for s in (before, after))
                cell = row.get("probes." + result)
                h.ok(cell is not None and low <= int(cell) <= high,
                     "%s probes %s: %s on the page, /metrics said %d then %d"
                     % (name, result, cell, low, high))

    for width, height in ((1200, 800), (390, 844)):
        @t.check("a %dx%d screenshot is a PNG of that size with the page drawn on it"
                 % (width, height))
        def _():
            path = os.path.join(t.tmp, "status-%d.png" % width)
            browser.screenshot(admin + "/?norefresh", path, width, height)
            got_width, got_height, colours = browser.png_summary(path)
            h.eq((got_width, got_height), (width, height), "PNG size")
            h.ok(colours >= 16, "only %d colours: a blank page?" % colours)
            keep = os.environ.get("STATUS_PAGE_SCREENSHOTS")
            if keep:
                # how doc/status-page.png is made (a relative dir is from the
                # source root): see README "The status page"
                shutil.copy(path, os.path.join(h.REPO, keep,
                                              "status-page-%dx%d.png" % (width, height)))

    layout = ("JSON.stringify({page: document.documentElement.scrollWidth, view: innerWidth,"
              " routes: [document.querySelector('#routes').parentElement.scrollWidth,"
              " document.querySelector('#routes').parentElement.clientWidth],"
              " row: getComputedStyle(document.querySelector('#routes tbody tr')).display,"
              " cells: document.querySelectorAll('#routes tbody tr[data-route] td').length})")

    @t.check("at 1200x800 the route table fits without scrolling sideways")
    def _():
        facts = json.loads(browser.evaluate(admin + "/?norefresh", 1200, 800, layout))
        h.ok(facts["page"] <= 1200, "the page scrolls sideways: %r" % facts)
        h.ok(facts["routes"][0] <= facts["routes"][1], "the route table scrolls: %r" % facts)
        h.eq(facts["row"], "table-row", "a route row's display")
        h.ok(facts["cells"] > 0, "no route cells: %r" % facts)

    @t.check("at 390x844 (a phone) nothing scrolls sideways and each route is a stacked card")
    def _():
        facts = json.loads(browser.evaluate(admin + "/?norefresh", 390, 844, layout))
        # against the phone's width, not innerWidth: a mobile browser widens
        # its layout viewport to a page too wide for it
        h.ok(facts["page"] <= 390 and facts["view"] == 390,
             "the page is wider than the phone: %r" % facts)
        h.ok(facts["routes"][0] <= facts["routes"][1], "the route table scrolls: %r" % facts)
        h.eq(facts["row"], "block", "a route row's display")

    in_flight(t)


IN_FLIGHT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 1s }
health: { down_after: 1, probe_interval: 10m, hold: true }
defaults:
  retry:
    max_attempts: 3
    jitter: 0s
    deadline: 300s
routes:
  - name: held
    match: { path_prefix: /held/ }
    upstream: http://127.0.0.1:@CLOSED@
  - name: backoff
    match: { path_prefix: /backoff/ }
    retry: { initial_backoff: 60s, max_backoff: 60s }
"""


def in_flight(t):
    """A request held for a down upstream and one in a long backoff while
    the page is loaded: the gauges on the page must be theirs."""
    origin = t.origin()
    closed = h.closed_port()
    proxy = t.proxy(IN_FLIGHT_CONFIG, ORIGIN=origin.port, CLOSED=closed)
    admin = "http://127.0.0.1:%d" % proxy.port(1)
    dead = "http://127.0.0.1:%d" % closed
    origin.script("/backoff/x", [503, 200])
    clients = [h.RawConn(proxy.port(0)), h.RawConn(proxy.port(0))]
    gauges = ("retryproxy_held_requests", "retryproxy_backoff_pending",
              "retryproxy_route_held_requests", "retryproxy_route_backoff_pending")
    try:
        clients[0].send(h.request("GET", "/held/x", "app.example"))
        clients[1].send(h.request("GET", "/backoff/x", "app.example"))

        def both_waiting():
            samples = scrape(admin)
            return (value(samples, "retryproxy_held_requests") == 1
                    and value(samples, "retryproxy_backoff_pending") == 1)
        h.wait_until(both_waiting, 10 * h.SLOW, "one request held and one in backoff")
        before = scrape(admin)
        ups_before = upstream_lines(admin)
        dom = browser.dump_dom(admin + "/")
        after = scrape(admin)
        ups_after = upstream_lines(admin)
        page = PageParser()
        page.feed(dom)

        @t.check("in flight: /metrics did not move while the page loaded")
        def _():
            for name in gauges:
                h.eq(series(after, name), series(before, name), name)
            h.eq(ups_after, ups_before, "/upstreams")

        @t.check("in flight: the tiles show 1 held request and 1 backoff pending, as /metrics")
        def _():
            want = {"backoff_pending": "%d" % value(after, "retryproxy_backoff_pending"),
                    "held_requests": "%d" % value(after, "retryproxy_held_requests")}
            h.eq(want, {"backoff_pending": "1", "held_requests": "1"}, "/metrics gauges")
            h.eq({k: page.tiles.get(k) for k in want}, want, "tiles: DOM against /metrics")

        @t.check("in flight: each route's now cells equal /metrics: held 1 on held, "
                 "backoff 1 on backoff")
        def _():
            for route, backoff, held in (("held", "0", "1"), ("backoff", "1", "0")):
                want = route_numbers(after, route)
                h.eq((want["backoff_pending"], want["held"]), (backoff, held),
                     "/metrics gauges of route %s" % route)
                h.eq(page.routes.get(route), want, "row %s: DOM against /metrics" % route)

        @t.check("in flight: the down upstream's row holds 1 request, as /upstreams says")
        def _():
            h.eq(ups_after.get(dead), ("down", 1, 1), "%s on /upstreams" % dead)
            row = page.upstreams.get(dead, {})
            h.eq((row.get("state"), row.get("held")), ("down", "1"), "%s row" % dead)
    finally:
        for c in clients:
            c.close()

    @t.check("in flight: once the clients leave, the gauges go back to 0")
    def _():
        def zero():
            samples = scrape(admin)
            return all(v == 0 for n in gauges for v in series(samples, n).values())
        h.wait_until(zero, 10 * h.SLOW, "every held and backoff gauge at 0")


h.run(scenario, __doc__, timeout=300)

