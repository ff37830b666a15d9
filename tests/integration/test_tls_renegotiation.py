#!/usr/bin/env python3
"""Scenario: a TLS 1.2 upstream that renegotiates after reading the request.

Client: raw HTTP/1.1 to two sidecar listeners.
Origin: renegserver (renegserver.c), TLS 1.2, which reads a request head,
sends a HelloRequest and answers only once the client has renegotiated, as
Apache does for a location with its own client certificate or cipher
settings. Listener 0's asks nothing more in the new handshake; listener 1's
wants a client certificate in it (a full handshake), which the proxy has
none of, so that the origin ends the connection with a handshake_failure
alert after it has read the request. Health is on (down_after 1, hold
false), so that a failure counted against the upstream shows on
/upstreams and in the next request's answer.
Must hold: the renegotiation is made and the answer relayed (200). The
alert of the failed renegotiation is not a refused handshake: the
handshake had ended and the request was read, so it is a TLS error after
the request went, as a reset is: a POST goes once (trail reset,
gave_up=not_idempotent), a GET is retried as a reset is, neither counts
as a connect failure (the upstream stays up with no failure, and the next
request reaches it). Before, the alert was taken for a TLS 1.3 server's
refusal of the handshake: the POST went three times (trail tls) and the
upstream was marked down.
"""

import os
import subprocess
import threading

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: https://127.0.0.1:@PLAIN@
  - address: 127.0.0.1:@PORT1@
    upstream: https://127.0.0.1:@CERT@
admin: 127.0.0.1:@PORT2@
tls: { verify: false }
log: { level: info, format: text }
defaults:
  retry: { max_attempts: 3, initial_backoff: 20ms, jitter: 5ms }
health: { down_after: 1, probe_interval: 60s, hold: false }
"""


class Renegotiating:
    """renegserver in a subprocess; .outcomes lists one line per connection
    ("renegotiated" or "not renegotiated")."""

    def __init__(self, t, cert, key, want_certificate):
        binary = os.environ.get("RETRYPROXY_RENEGSERVER")
        h.ok(binary and os.path.exists(binary),
             "RETRYPROXY_RENEGSERVER names the built server: %r" % binary)
        args = [binary, cert, key] + (["certificate"] if want_certificate else [])
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        t.defer(self._stop)
        self.port = int(self._proc.stdout.readline())
        self.outcomes = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self._proc.stdout:
            self.outcomes.append(line.strip())

    def _stop(self):
        self._proc.kill()
        self._proc.wait()


def scenario(t):
    certs = t.certs()
    plain = Renegotiating(t, certs.server, certs.server_key, False)
    wants = Renegotiating(t, certs.server, certs.server_key, True)
    proxy = t.proxy(CONFIG, PLAIN=plain.port, CERT=wants.port)

    def health_of(origin):
        """The /upstreams line of an origin."""
        text = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(2)).body.decode()
        return [ln for ln in text.splitlines() if ":%d " % origin.port in ln][0]

    def outcomes(tag):
        return [x.split(" ")[0] for x in h.access_fields(proxy.access_one(tag))["tries"]
                .split(" -> ") if not x.startswith("wait")]

    @t.check("a renegotiation the origin waits for is made: 200")
    def _():
        r = h.fetch(proxy.port(0), "GET", "/x?t=plain", "app.example", timeout=10 * h.SLOW)
        h.eq((r.status, r.body), (200, b"renegotiated\n"), "answer")
        h.eq(plain.outcomes, ["renegotiated"], "the origin's view")

    @t.check("a renegotiation refused after the request was read: a POST goes once, "
             "not a failed connect")
    def _():
        r = h.fetch(proxy.port(1), "POST", "/x?t=post", "app.example",
                    headers=[("Content-Length", "0")], timeout=10 * h.SLOW)
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.ok(b"handshake failure" in r.body, "the answer names the alert: %r" % r.body)
        h.eq(outcomes("t=post"), ["reset"], "trail")
        h.wait_until(lambda: len(wants.outcomes) >= 1, 5 * h.SLOW, "the origin's line")
        h.eq(wants.outcomes, ["not renegotiated"], "connections the origin saw")
        h.eq(health_of(wants), "https://127.0.0.1:%d up failures=0 held=0" % wants.port,
             "/upstreams")

    @t.check("the same refusal of a GET is retried as a reset is, the upstream still up")
    def _():
        r = h.fetch(proxy.port(1), "GET", "/x?t=get", "app.example", timeout=10 * h.SLOW)
        h.eq(r.status, 502, "status (body %r)" % r.body)
        h.eq(outcomes("t=get"), ["reset"] * 3, "trail")
        h.ok(b"is down" not in r.body, "the upstream went down: %r" % r.body)
        h.eq(health_of(wants), "https://127.0.0.1:%d up failures=0 held=0" % wants.port,
             "/upstreams")


h.run(scenario, __doc__)
