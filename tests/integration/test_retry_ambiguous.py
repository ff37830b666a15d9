#!/usr/bin/env python3
"""Scenario: Retry-Ambiguous on a final 412 (or 409 with a key) after a try
whose request went out and got no answer.

Client: POSTs (with If-Match, or none) and a GET through a forward proxy
(raw sockets).
Origin: scripted per path: a reset after reading the whole request, or no
answer at all (/hang), then 412 or 409; or 503 then 412; or a 412 with
x-should-retry: true before or after tries with no answer.
Proxy: retry.on [503, reset, timeout], max_attempts 3, 50ms waits,
try_timeout 400ms. Route /cond/ lists header If-Match under when_present;
route /inject/ has idempotency_key: inject. A second proxy with the same
config logs JSON.
Must hold:
- a POST made retryable by If-Match whose first try was reset after the
  request reached the origin (or timed out with no answer), and whose
  second try gets 412, reaches the client as 412 with `Retry-Ambiguous:
  true`; its access line says ambiguous=true (and "ambiguous": true in
  JSON);
- the same with a 409 only when the request had a key (/inject/): a 409 for
  the If-Match POST carries no Retry-Ambiguous;
- no Retry-Ambiguous when the earlier try got an answer (503), when the 412
  comes on the first try, or for a GET (idempotent by its method);
- only a response from a try after the lost one is ambiguous: a 412 with
  x-should-retry: true kept from try 1, delivered after tries 2 and 3 time
  out, has no Retry-Ambiguous; one kept from try 2 after try 1 timed out
  has it.
"""

import json

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: @FORMAT@ }
limits: { drain_timeout: 2s }
defaults:
  retry:
    on: [503, reset, timeout]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    try_timeout: 400ms
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: cond
    match: { path_prefix: /cond/ }
    idempotent:
      when_present:
        - header: If-Match
  - name: inject
    match: { path_prefix: /inject/ }
    retry: { idempotency_key: inject }
"""

IF_MATCH = [("If-Match", '"v1"')]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, FORMAT="text")
    host = origin.authority

    def send(method, path, steps, headers=IF_MATCH, port=None):
        origin.script(path, list(steps))
        return h.fetch(port or proxy.port(), method, origin.url(path), host, headers=headers,
                       body=b"" if method == "GET" else b"payload")

    def access(tag):
        return h.access_fields(proxy.access_one(tag))

    @t.check("If-Match POST: reset after the request, then 412: Retry-Ambiguous, ambiguous=true")
    def _():
        r = send("POST", "/cond/reset412", ["/reset/request", 412])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (412, "2", "true"), "status, Retry-Attempts, Retry-Ambiguous")
        h.eq(len(r.header_all("Retry-Ambiguous")), 1, "Retry-Ambiguous fields")
        f = access("/cond/reset412")
        h.eq((f["status"], f.get("ambiguous")), ("412", "true"), "access status, ambiguous")

    @t.check("If-Match POST: no answer within try_timeout, then 412: Retry-Ambiguous")
    def _():
        r = send("POST", "/cond/hang412", ["/hang", 412])
        h.eq((r.status, r.header("Retry-Ambiguous")), (412, "true"),
             "status, Retry-Ambiguous")
        h.eq(access("/cond/hang412").get("ambiguous"), "true", "access ambiguous")

    @t.check("If-Match POST: 503 then 412: the first try was answered, nothing ambiguous")
    def _():
        r = send("POST", "/cond/answered", [503, 412])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (412, "2", None), "status, Retry-Attempts, Retry-Ambiguous")
        h.eq(access("/cond/answered").get("ambiguous"), None, "access ambiguous")

    @t.check("If-Match POST: 412 on the first try, or a 409 (no key) after a reset: not ambiguous")
    def _():
        r = send("POST", "/cond/first", [412])
        h.eq((r.status, r.header("Retry-Ambiguous")), (412, None), "412 at once")
        r = send("POST", "/cond/reset409", ["/reset/request", 409])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (409, "2", None), "409 without a key")

    @t.check("POST with an injected key: reset, then 409 (or 412): Retry-Ambiguous")
    def _():
        r = send("POST", "/inject/reset409", ["/reset/request", 409], headers=())
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (409, "2", "true"), "409 with a key")
        h.eq(access("/inject/reset409").get("ambiguous"), "true", "access ambiguous")
        r = send("POST", "/inject/reset412", ["/reset/request", 412], headers=())
        h.eq((r.status, r.header("Retry-Ambiguous")), (412, "true"), "412 with a key")

    @t.check("If-Match POST: a 412 kept from try 1 (x-should-retry: true), then tries that time "
             "out: the 412 came before the lost tries, nothing ambiguous")
    def _():
        r = send("POST", "/cond/412-first", ["/status/412?should_retry=true", "/hang"])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (412, "3", None), "status, Retry-Attempts, Retry-Ambiguous")
        f = access("/cond/412-first")
        h.eq((f.get("ambiguous"), f["tries"].split(" -> ")[0::2]),
             (None, ["412", "timeout", "timeout"]), "access ambiguous, tries")

    @t.check("If-Match POST: a timeout, then a 412 kept (x-should-retry: true), then a timeout: "
             "the 412 came after a lost try: Retry-Ambiguous")
    def _():
        r = send("POST", "/cond/412-second",
                 ["/hang", "/status/412?should_retry=true", "/hang"])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (412, "3", "true"), "status, Retry-Attempts, Retry-Ambiguous")
        h.eq(access("/cond/412-second").get("ambiguous"), "true", "access ambiguous")

    @t.check("GET (idempotent by method): reset, then 412: not ambiguous")
    def _():
        r = send("GET", "/cond/get", ["/reset/request", 412])
        h.eq((r.status, r.header("Retry-Attempts"), r.header("Retry-Ambiguous")),
             (412, "2", None), "status, Retry-Attempts, Retry-Ambiguous")

    @t.check('JSON log: "ambiguous": true')
    def _():
        jproxy = t.proxy(CONFIG, FORMAT="json")
        r = send("POST", "/cond/json", ["/reset/request", 412], port=jproxy.port())
        h.eq((r.status, r.header("Retry-Ambiguous")), (412, "true"), "status, Retry-Ambiguous")
        entry = jproxy.access_one("/cond/json")
        h.eq((entry["status"], entry.get("ambiguous")), (412, True),
             "JSON status, ambiguous (%s)" % json.dumps(entry))
        r = send("POST", "/cond/json-plain", [503, 412], port=jproxy.port())
        h.ok("ambiguous" not in jproxy.access_one("/cond/json-plain"),
             "no ambiguous key when not ambiguous")


h.run(scenario, __doc__)
