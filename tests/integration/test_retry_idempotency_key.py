#!/usr/bin/env python3
"""Scenario: retry.idempotency_key, injected and passed through.

Client: POST, PATCH, PUT and GET requests through a forward proxy (raw
sockets), with and without an Idempotency-Key header of their own.
Origin: scripted per path: 503 then 200, or a reset after reading the
request then 200; it records every request head as received.
Proxy: defaults retry on [503, reset, timeout, connect-failure],
max_attempts 3, 50ms waits, no jitter, idempotency_key none. Route /inject/
sets idempotency_key: inject; route /named/ keeps none but lists the header
Idempotency-Key under when_present.
Must hold:
- on /inject/ a POST without a key is retried, and every try carries one
  Idempotency-Key, a lower case UUID version 4, the same on each try, with
  the same body; another POST gets another key; after a reset it is the
  same key again;
- on /inject/ a POST that has its own key keeps it byte-exact (name case,
  value), no second key is added, and it is retried; a key the client
  names in Connection (hop-by-hop, so removed) is replaced by an injected one;
- on /inject/ a POST with an empty key of its own passes it on as sent,
  gets no second key and is not retried (gave_up=not_idempotent);
- on /observe/ (inject, mode: observe) a POST gets no key and is not
  retried; its access line says would_retry=status;
- on /inject/ PUT and GET (idempotent by method) get no key;
- with none (the default route) a POST with its own key is not retried
  (503 at once, gave_up=not_idempotent) and the key still reaches the
  origin unchanged; on /named/ the same POST is retried, and one without a
  key is not;
- on /named/ a POST whose key the client names in Connection is not
  retried (the key is removed on the way, so nothing makes it safe: 503 at
  once, gave_up=not_idempotent, no key at the origin), and --explain with
  the same headers says idempotent: no and waits: none.
"""

import re
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    on: [503, reset, timeout, connect-failure]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: inject
    match: { path_prefix: /inject/ }
    retry: { idempotency_key: inject }
  - name: observe-inject
    match: { path_prefix: /observe/ }
    retry: { idempotency_key: inject, mode: observe }
  - name: named
    match: { path_prefix: /named/ }
    idempotent:
      when_present:
        - header: Idempotency-Key
"""

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def key_lines(req):
    """The Idempotency-Key field lines of a request head, raw."""
    return [ln for ln in req.head.split(b"\r\n") if ln.lower().startswith(b"idempotency-key:")]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    host = origin.authority
    seen = {}

    def send(method, path, body=b"", headers=(), steps=(503, 200)):
        origin.script(path, list(steps))
        r = h.fetch(proxy.port(), method, origin.url(path), host, headers=headers, body=body)
        time.sleep(0.3 * h.SLOW)
        return r, origin.requests_for(path)

    @t.check("POST on /inject/: retried, one UUID v4 key, the same on every try")
    def _():
        r, reqs = send("POST", "/inject/a", b"amount=10", steps=(503, 503, 200))
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "3", 3),
             "status, Retry-Attempts, requests the origin saw")
        keys = [q.header_all("Idempotency-Key") for q in reqs]
        h.eq([len(k) for k in keys], [1, 1, 1], "Idempotency-Key fields per try")
        h.ok(UUID4.match(keys[0][0]), "key %r is a lower case UUID v4" % keys[0][0])
        h.eq(len({k[0] for k in keys}), 1, "distinct keys over the tries (%r)" % keys)
        h.eq(len({q.body_sha256 for q in reqs}), 1, "distinct bodies over the tries")
        seen["first"] = keys[0][0]

    @t.check("another POST gets another key; after a reset the key is sent again unchanged")
    def _():
        r, reqs = send("POST", "/inject/b", b"amount=11", steps=("/reset/request", 200))
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (200, "2", 2),
             "status, Retry-Attempts, requests the origin saw")
        keys = [q.header("Idempotency-Key") for q in reqs]
        h.ok(keys[0] is not None and keys[0] == keys[1], "same key on both tries (%r)" % keys)
        h.ok(keys[0] != seen["first"], "a new request has a new key (%r)" % keys[0])

    @t.check("a PATCH too; its key is a new one")
    def _():
        r, reqs = send("PATCH", "/inject/c", b'{"a": 1}')
        h.eq((r.status, len(reqs)), (200, 2), "status, requests the origin saw")
        h.ok(UUID4.match(reqs[0].header("Idempotency-Key") or ""), "PATCH got a key")

    @t.check("POST with its own key on /inject/: kept byte-exact, no second key, retried")
    def _():
        own = b"idempotency-KEY:   Order-42 abc"
        r, reqs = send("POST", "/inject/own", b"x",
                       headers=[("idempotency-KEY", "  Order-42 abc")])
        h.eq((r.status, len(reqs)), (200, 2), "status, requests the origin saw")
        for q in reqs:
            h.eq(key_lines(q), [own], "the key field line as the origin got it")

    @t.check("a key the client names in Connection is removed on the way: a new one is injected")
    def _():
        r, reqs = send("POST", "/inject/hop", b"x",
                       headers=[("Connection", "Idempotency-Key"), ("Idempotency-Key", "hop-1")])
        h.eq((r.status, len(reqs)), (200, 2), "status, requests the origin saw")
        keys = [q.header_all("Idempotency-Key") for q in reqs]
        h.ok(all(len(k) == 1 and UUID4.match(k[0]) for k in keys) and keys[0] == keys[1],
             "one injected key, the same on both tries (%r)" % keys)

    @t.check("an empty key of the client's on /inject/: passed on as sent, no second key, "
             "not retried")
    def _():
        r, reqs = send("POST", "/inject/empty", b"x", headers=[("Idempotency-Key", "")])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests the origin saw")
        h.eq(key_lines(reqs[0]), [b"Idempotency-Key: "], "the key field lines at the origin")
        f = h.access_fields(proxy.access_one("/inject/empty"))
        h.eq(f.get("gave_up"), "not_idempotent", "gave_up")

    @t.check("observe mode with inject: nothing retried and no key added, the retry it would "
             "have made counted")
    def _():
        r, reqs = send("POST", "/observe/a", b"x")
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests the origin saw")
        h.eq(key_lines(reqs[0]), [], "key lines at the origin")
        f = h.access_fields(proxy.access_one("/observe/a"))
        h.eq(f.get("would_retry"), "status", "would_retry")

    @t.check("PUT and GET on /inject/ (idempotent by method) get no key")
    def _():
        for method, path in (("PUT", "/inject/put"), ("GET", "/inject/get")):
            r, reqs = send(method, path, b"data" if method == "PUT" else b"")
            h.eq((r.status, len(reqs)), (200, 2), "%s: status, requests" % method)
            h.eq([key_lines(q) for q in reqs], [[], []], "%s: key lines" % method)

    @t.check("idempotency_key none: a POST with a key is not retried, the key passes unchanged")
    def _():
        r, reqs = send("POST", "/plain/own", b"x", headers=[("Idempotency-Key", "k-1")])
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests the origin saw")
        h.eq(key_lines(reqs[0]), [b"Idempotency-Key: k-1"], "key line at the origin")
        f = h.access_fields(proxy.access_one("/plain/own"))
        h.eq(f.get("gave_up"), "not_idempotent", "gave_up")

    @t.check("none, with when_present naming Idempotency-Key: retried with it, not without")
    def _():
        r, reqs = send("POST", "/named/own", b"x", headers=[("Idempotency-Key", "k-2")])
        h.eq((r.status, len(reqs)), (200, 2), "with a key: status, requests")
        h.eq([q.header("Idempotency-Key") for q in reqs], ["k-2", "k-2"], "keys at the origin")
        r, reqs = send("POST", "/named/none", b"x")
        h.eq((r.status, len(reqs)), (503, 1), "without a key: status, requests")
        h.eq(key_lines(reqs[0]), [], "no key added under none")

    @t.check("when_present Idempotency-Key, but the client names the key in Connection: it is "
             "removed on the way, so the POST is not retried, and --explain says idempotent: no")
    def _():
        hop = [("Connection", "Idempotency-Key"), ("Idempotency-Key", "k-3")]
        r, reqs = send("POST", "/named/hop", b"x", headers=hop)
        h.eq((r.status, r.header("Retry-Attempts"), len(reqs)), (503, "1", 1),
             "status, Retry-Attempts, requests the origin saw")
        h.eq(key_lines(reqs[0]), [], "key lines at the origin")
        f = h.access_fields(proxy.access_one("/named/hop"))
        h.eq(f.get("gave_up"), "not_idempotent", "gave_up")
        args = ["-c", proxy.config_path, "--explain", "POST", origin.url("/named/hop")]
        for name, value in hop:
            args += ["-H", "%s: %s" % (name, value)]
        p = h.run_bin(args)
        h.eq(p.returncode, 0, "--explain exit code (stderr %r)" % p.stderr)
        h.ok("idempotent: no\n" in p.stdout and "waits: none\n" in p.stdout,
             "--explain says idempotent: no, waits: none: %r" % p.stdout)
        p = h.run_bin(args[:-4] + ["-H", "Idempotency-Key: k-3"])
        h.ok("idempotent: yes (header Idempotency-Key)\n" in p.stdout,
             "--explain without Connection: yes (header Idempotency-Key): %r" % p.stdout)


h.run(scenario, __doc__)
