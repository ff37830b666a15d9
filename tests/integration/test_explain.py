#!/usr/bin/env python3
"""Scenario: retryproxy --explain METHOD URL [-H ...] [--body FILE].

Client: none for most checks; the test runs the binary with --explain
against the shipped profiles (conf/profiles/cloud-storage.yaml, iam.yaml),
the embedded default or ./conf/retryproxy.yaml found from the working
directory, configs of its own (forward and sidecar listeners, routes by
host, path and method, header conditions, full jitter, a deadline that cuts
the waits, allow_hosts, intercept: with a CA from --make-ca, a small
replay_buffer), and bad descriptions. One check runs the proxy
itself with the policy explained and curl-free raw requests.
Origin: for the last check, one that answers 503 to every try.
Must hold: stdout is exactly the SPEC's lines (route, upstream, idempotent
with its reason, retry_on, max_attempts, deadline, waits) with the waits
computed here from the SPEC's formula: [backoff, min(backoff + jitter,
max_backoff)] per retry, [0, min(backoff, max_backoff)] with full jitter,
at most max_attempts - 1 of them, listed while the sum of the lower bounds
keeps the next try within the deadline; `waits: none` for a request that is
not idempotent or whose body is over replay_buffer (with a note on stderr,
as for a request that asks to switch protocols, whose stdout is a GET's,
as for an https:// URL a forward proxy client would tunnel); a bad method, URL, header line or body file, a config error
and a request the proxy would refuse (allow_hosts: 403, a body over
max_body_bytes: 413, but a refused host or path first, as the proxy does; its own admin address as the destination, from a
forward URL or a sidecar's upstream:, or one of its own listeners from a forward
URL (a CONNECT to itself would nest), which the proxy answers 403 after one
try) or answers itself (TRACE or OPTIONS with Max-Forwards: 0) exit 1; an
answer that cannot be written (stdout on /dev/full) exits 2 naming the error; a
target within limits.max_uri_bytes in the origin-form a sidecar receives is
explained though the URL's absolute form is over it (the proxy serves it),
and the same length in absolute form to the forward listener is 414 in both;
so is a request inside an intercepted tunnel, which arrives in origin-form with a message and nothing on stdout; nothing is listened on or connected to (the
config's listener port is held by the test, and a URL pointing at a socket
of the test gets no connection); the proxy run with the explained policy
makes exactly the explained number of tries, each wait inside its range;
with bodies (replay_buffer 1KiB, spool_max 4KiB, json_field etag), the
explained idempotency and waits are the proxy's: a JSON body within
replay_buffer is idempotent by its etag (a chunked one counted with its
framing), one between replay_buffer and spool_max or under mode: observe
is not, a PUT in the spool is retried and one over spool_max is not (a
chunked one counted with its framing, as the spool file keeps it: 4096
bytes in one chunk are over a 4 KiB spool_max), and the proxy makes
exactly 1 + the explained waits tries for each. The upstream: line names
the upstream as /upstreams does after a real request there (a host in
capitals in lower case, [0:0::1] as [::1]).
"""

import os
import select
import socket
import subprocess

import harness as h

ROOT = h.REPO
GCS = os.path.join(ROOT, "conf", "profiles", "cloud-storage.yaml")
IAM = os.path.join(ROOT, "conf", "profiles", "iam.yaml")
ETC = "/etc/retryproxy/retryproxy.yaml"


def fmt_ms(ms):
    """A duration the way the config writes one (config_values_format_ms)."""
    if ms and ms % 3600000 == 0:
        return "%dh" % (ms // 3600000)
    if ms and ms % 60000 == 0:
        return "%dm" % (ms // 60000)
    if ms % 1000 == 0:
        return "%ds" % (ms // 1000)
    return "%dms" % ms


def spec_waits(initial, multiplier, max_backoff, jitter, deadline, max_attempts):
    """The waits line from the SPEC's formula; jitter None means `full`."""
    out = []
    earliest = 0
    for n in range(max_attempts - 1):
        backoff = min(int(initial * multiplier ** n + 0.5), max_backoff)
        if jitter is None:
            lo, hi = 0, backoff
        else:
            lo, hi = backoff, min(backoff + jitter, max_backoff)
        if earliest + lo > deadline:
            break
        earliest += lo
        out.append("%s-%s" % (fmt_ms(lo), fmt_ms(hi)))
    return " ".join(out) if out else "none"


def lines(route, upstream, idempotent, retry_on, max_attempts, deadline_ms, waits):
    return [
        "route: %s" % route,
        "upstream: %s" % upstream,
        "idempotent: %s" % idempotent,
        "retry_on: %s" % retry_on,
        "max_attempts: %d" % max_attempts,
        "deadline: %s" % fmt_ms(deadline_ms),
        "waits: %s" % waits,
    ]


def explain(args, cwd=None):
    """Run --explain; args are the method and URL with options before or after."""
    args = list(args)
    i = 0
    while i < len(args) and args[i] in ("-c", "-H", "--body"):
        i += 2
    return h.run_bin(args[:i] + ["--explain"] + args[i:], cwd=cwd)


def expect(p, want, what):
    h.eq(p.returncode, 0, "%s: exit code (stderr %r)" % (what, p.stderr))
    h.eq(p.stdout.splitlines(), want, "%s: stdout" % what)


def expect_refused(p, words, what):
    h.eq(p.returncode, 1, "%s: exit code (stdout %r, stderr %r)" % (what, p.stdout, p.stderr))
    h.eq(p.stdout, "", "%s: stdout" % what)
    for w in words:
        h.ok(w in p.stderr, "%s: stderr should say %r: %r" % (what, w, p.stderr))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


DEFAULT_ON = "[5xx, 408, 429, connect-failure, reset, timeout]"

OWN = """\
listen:
  - address: 127.0.0.1:@FWD@
  - address: 127.0.0.1:@SIDE@
    upstream: https://api.example.com
access:
  allow_hosts: ["*.allowed.test", "api.example.com", "127.0.0.1", "side.test"]
defaults:
  retry:
    max_attempts: 4
    initial_backoff: 500ms
    multiplier: 3
    max_backoff: 4s
    jitter: 250ms
    deadline: 1m
routes:
  - name: by-host
    match: { host: "*.allowed.test", path_prefix: /v1/ }
    upstream: http://backend.internal:9000
    idempotent:
      methods: [GET]
      when_present:
        - header: If-Match
        - query: token
  - name: by-method
    match: { methods: [PATCH] }
    retry: { max_attempts: 1 }
  - name: full-jitter
    match: { path_prefix: /full/ }
    retry: { jitter: full, initial_backoff: 1s, multiplier: 2, max_backoff: 3s, max_attempts: 6 }
  - name: short-deadline
    match: { path_prefix: /short/ }
    retry:
      on: [502, 503, timeout]
      initial_backoff: 1s
      multiplier: 2
      max_backoff: 8s
      jitter: 1500ms
      max_attempts: 10
      deadline: 10s
"""

TRIES = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
defaults:
  retry:
    on: [503]
    max_attempts: 4
    initial_backoff: 100ms
    multiplier: 2
    max_backoff: 300ms
    jitter: 50ms
    deadline: 10s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
"""

TRIES_BODY = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
limits: { drain_timeout: 2s, replay_buffer: 1KiB, spool_max: 4KiB, spool_dir: @SPOOL@ }
defaults:
  idempotent:
    methods: [GET, PUT]
    when_present:
      - json_field: etag
  retry:
    on: [503]
    max_attempts: 3
    initial_backoff: 50ms
    multiplier: 1
    max_backoff: 50ms
    jitter: 0s
    deadline: 10s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: trial
    match: { path_prefix: /trial/ }
    retry: { mode: observe }
"""


# Upstreams spelt as a user may: a forward proxy URL's host in capitals or an
# IPv6 address the long way, and a sidecar's upstream: in capitals.
NAMES = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: http://LOCALHOST:@ORIGIN@
admin: 127.0.0.1:@PORT1@
limits: { drain_timeout: 2s }
defaults:
  retry: { max_attempts: 1 }
"""


# The proxy's own admin address as a destination: a forward proxy URL, and a
# sidecar whose upstream: names it by the wildcard (a connect reaches it).
ADMIN_SELF = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: http://0.0.0.0:@PORT1@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
"""


# A body limit and an allow list: a request refused for its host or its path
# and for its Content-Length at once.
REFUSED_TWICE = """\
listen:
  - address: 127.0.0.1:@PORT0@
access: { allow_clients: [127.0.0.0/8], allow_hosts: [allowed.test] }
log: { level: info, format: text }
limits: { drain_timeout: 2s, max_body_bytes: 10 }
"""


# A request-target limit that a sidecar's origin-form request fits and the
# absolute form of the same URL does not.
URI_LIMIT = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits: { drain_timeout: 2s, max_uri_bytes: 100 }
"""


def scenario(t):
    tmp = t.tmp

    @t.check("cloud-storage.yaml: an upload POST with ?ifGenerationMatch=0 is idempotent by the query; "
             "the upload route's waits (max_backoff 64s) stop at the 600s deadline")
    def _():
        url = ("https://storage.googleapis.com/upload/storage/v1/b/my-bucket/o"
               "?uploadType=media&name=photo.jpg&ifGenerationMatch=0")
        p = explain(["POST", url, "-H", "Content-Type: image/jpeg", "-c", GCS])
        waits = spec_waits(1000, 2, 64000, 1000, 600000, 24)
        expect(p, lines("gcs-json-upload", "https://storage.googleapis.com:443",
                        "yes (query ifGenerationMatch)", DEFAULT_ON, 24, 600000, waits), "upload")
        # 1+2+4+8+16+32 + 8 x 64 = 575 s; one more 64 s wait would pass 600 s
        h.eq(len(waits.split()), 14, "number of waits (%s)" % waits)
        h.ok("sidecar listener 127.0.0.1:8080" in p.stderr,
             "stderr should say the sidecar listener gets it: %r" % p.stderr)

    @t.check("a WebSocket handshake: the route's tries as for any GET, and a note on the switch")
    def _():
        ws = ["-H", "Upgrade: websocket", "-H", "Connection: Upgrade"]
        p = explain(["-c", GCS, "GET", "https://storage.googleapis.com/ws"] + ws)
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        h.ok("asks to switch protocols" in p.stderr and "a 101 makes the connection a tunnel"
             in p.stderr, "stderr should note the switch: %r" % p.stderr)
        plain = explain(["-c", GCS, "GET", "https://storage.googleapis.com/ws"])
        h.eq(p.stdout, plain.stdout, "stdout, as for the GET without Upgrade")
        h.ok("switch protocols" not in plain.stderr, "a note without Upgrade: %r" % plain.stderr)

    @t.check("cloud-storage.yaml: the same upload without a precondition is not retried")
    def _():
        url = "https://storage.googleapis.com/upload/storage/v1/b/my-bucket/o?uploadType=media&name=a"
        p = explain(["-c", GCS, "POST", url])
        expect(p, lines("gcs-json-upload", "https://storage.googleapis.com:443", "no",
                        DEFAULT_ON, 24, 600000, "none"), "upload without precondition")

    @t.check("cloud-storage.yaml: an ifGenerationMatch that Go's net/url drops (a malformed "
             "escape, a semicolon) makes the upload no safer")
    def _():
        url = "https://storage.googleapis.com/upload/storage/v1/b/my-bucket/o?uploadType=media"
        for query in ("&ifGenerationMatch=%", "&ifGenerationMatch=0%zz", "&ifGenerationMatch=0;x=1"):
            p = explain(["-c", GCS, "POST", url + query])
            expect(p, lines("gcs-json-upload", "https://storage.googleapis.com:443", "no",
                            DEFAULT_ON, 24, 600000, "none"), "upload with " + query)

    body_etag = write(os.path.join(tmp, "policy-etag.json"),
                      '{"bindings": [{"role": "roles/storage.objectViewer", '
                      '"members": ["allUsers"]}], "etag": "CAE="}\n')
    body_plain = write(os.path.join(tmp, "policy.json"),
                       '{"bindings": [{"role": "roles/storage.objectViewer", '
                       '"members": ["allUsers"]}]}\n')
    body_nested = write(os.path.join(tmp, "set-iam-policy.json"),
                        '{"policy": {"bindings": [], "etag": "BwXhqDpNHYE="}}\n')

    @t.check("cloud-storage.yaml: a bucket setIamPolicy (PUT .../iam) with a top-level etag in the "
             "JSON body is idempotent by json_field etag; waits at the 32s cap")
    def _():
        url = "https://storage.googleapis.com/storage/v1/b/my-bucket/iam"
        p = explain(["-c", GCS, "PUT", url, "-H", "Content-Type: application/json",
                     "--body", body_etag])
        expect(p, lines("gcs-json-metadata-update", "https://storage.googleapis.com:443",
                        "yes (json_field etag)", DEFAULT_ON, 24, 600000,
                        spec_waits(1000, 2, 32000, 1000, 600000, 24)), "setIamPolicy with etag")

    @t.check("cloud-storage.yaml: the same setIamPolicy without an etag: idempotent no, waits none")
    def _():
        url = "https://storage.googleapis.com/storage/v1/b/my-bucket/iam"
        p = explain(["-c", GCS, "PUT", url, "--body", body_plain])
        expect(p, lines("gcs-json-metadata-update", "https://storage.googleapis.com:443", "no",
                        DEFAULT_ON, 24, 600000, "none"), "setIamPolicy without etag")
        p = explain(["-c", GCS, "PUT", url])
        expect(p, lines("gcs-json-metadata-update", "https://storage.googleapis.com:443", "no",
                        DEFAULT_ON, 24, 600000, "none"), "setIamPolicy without a body")

    body_etag_twice = write(os.path.join(tmp, "policy-etag-twice.json"),
                            '{"bindings": [], "etag": "CAE=", "ETag": ""}\n')

    @t.check("cloud-storage.yaml: a setIamPolicy whose etag has an empty twin but for case (the "
             "one Go's and ASP.NET Core's decoders read last): idempotent no, waits none")
    def _():
        url = "https://storage.googleapis.com/storage/v1/b/my-bucket/iam"
        p = explain(["-c", GCS, "PUT", url, "-H", "Content-Type: application/json",
                     "--body", body_etag_twice])
        expect(p, lines("gcs-json-metadata-update", "https://storage.googleapis.com:443", "no",
                        DEFAULT_ON, 24, 600000, "none"), "setIamPolicy with etag and ETag")

    @t.check("iam.yaml: setIamPolicy POST is not retried, its etag inside \"policy\" does not count "
             "(the profile says so); a GET is, with IAM's retry_on and the 300s deadline")
    def _():
        base = "https://iam.googleapis.com/v1/projects/p/serviceAccounts/sa@p.iam.gserviceaccount.com"
        iam_on = "[500, 502, 503, 504, connect-failure]"
        p = explain(["-c", IAM, "POST", base + ":setIamPolicy", "--body", body_nested])
        expect(p, lines("default", "https://iam.googleapis.com:443", "no", iam_on, 20, 300000,
                        "none"), "IAM setIamPolicy")
        p = explain(["-c", IAM, "POST", base + ":setIamPolicy", "--body", body_etag])
        expect(p, lines("default", "https://iam.googleapis.com:443", "no", iam_on, 20, 300000,
                        "none"), "IAM setIamPolicy, top-level etag")
        p = explain(["-c", IAM, "GET", base])
        waits = spec_waits(1000, 2, 32000, 1000, 300000, 20)
        expect(p, lines("default", "https://iam.googleapis.com:443", "yes (method)", iam_on, 20,
                        300000, waits), "IAM GET")
        h.ok(len(waits.split()) < 19, "the deadline, not max_attempts, ends the waits: %s" % waits)
        p = explain(["-c", IAM, "POST", "https://iam.googleapis.com/v1/roles:queryGrantableRoles"])
        expect(p, lines("iam-query-grantable-roles", "https://iam.googleapis.com:443",
                        "yes (method)", iam_on, 20, 300000, waits), "IAM queryGrantableRoles")

    fwd_sock = socket.socket()
    fwd_sock.bind(("127.0.0.1", 0))
    fwd_sock.listen(4)
    t.defer(fwd_sock.close)
    side_port = h.free_port()
    own = write(os.path.join(tmp, "own.yaml"),
                OWN.replace("@FWD@", str(fwd_sock.getsockname()[1]))
                .replace("@SIDE@", str(side_port)))
    own_on = DEFAULT_ON

    @t.check("forward mode: a route by host and path with its own upstream; If-Match and ?token "
             "make a POST idempotent, the first met condition named")
    def _():
        url = "http://svc.allowed.test/v1/items?token=abc"
        p = explain(["-c", own, "POST", url])
        waits = spec_waits(500, 3, 4000, 250, 60000, 4)
        h.eq(waits, "500ms-750ms 1500ms-1750ms 4s-4s", "waits from the formula")
        expect(p, lines("by-host", "http://backend.internal:9000", "yes (query token)", own_on, 4,
                        60000, waits), "query token")
        p = explain(["-c", own, "POST", url, "-H", "if-match: \"v1\""])
        expect(p, lines("by-host", "http://backend.internal:9000", "yes (header If-Match)",
                        own_on, 4, 60000, waits), "If-Match")
        p = explain(["-c", own, "POST", "http://svc.allowed.test/v1/items"])
        expect(p, lines("by-host", "http://backend.internal:9000", "no", own_on, 4, 60000,
                        "none"), "no condition")
        p = explain(["-c", own, "POST", "http://svc.allowed.test/v2/items"])
        expect(p, lines("default", "http://svc.allowed.test:80", "no", own_on, 4, 60000,
                        "none"), "other path: the default route, the URL's origin")
        h.ok("forward proxy listener 127.0.0.1:%d" % fwd_sock.getsockname()[1] in p.stderr,
             "stderr should name the forward listener: %r" % p.stderr)

    @t.check("a URL's #fragment is left out, as clients do: explained as the same URL without it")
    def _():
        url = "http://svc.allowed.test/v1/items?token=abc"
        plain = explain(["-c", own, "POST", url])
        p = explain(["-c", own, "POST", url + "#section-2"])
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        h.eq((p.stdout, p.stderr), (plain.stdout, plain.stderr), "explained as without the fragment")
        h.ok("#" not in p.stderr, "the head explained carries no fragment: %r" % p.stderr)

    @t.check("sidecar mode: a URL of the sidecar's upstream, or of the sidecar listener itself, goes "
             "to the listener's upstream; a method route with max_attempts 1 has no waits")
    def _():
        waits = spec_waits(500, 3, 4000, 250, 60000, 4)
        p = explain(["-c", own, "GET", "https://api.example.com/things"])
        expect(p, lines("default", "https://api.example.com:443", "yes (method)", own_on, 4,
                        60000, waits), "upstream URL")
        h.ok("sidecar listener 127.0.0.1:%d" % side_port in p.stderr,
             "stderr should name the sidecar listener: %r" % p.stderr)
        p = explain(["-c", own, "GET", "http://127.0.0.1:%d/things" % side_port])
        expect(p, lines("default", "https://api.example.com:443", "yes (method)", own_on, 4,
                        60000, waits), "listener URL")
        p = explain(["-c", own, "PATCH", "https://api.example.com/things/1", "-H", "If-Match: x"])
        expect(p, lines("by-method", "https://api.example.com:443", "no", own_on, 1, 60000,
                        "none"), "PATCH route")
        # -H Host: routes match the Host the app sends to a sidecar
        p = explain(["-c", own, "GET", "https://api.example.com/v1/x", "-H", "Host: a.allowed.test"])
        expect(p, lines("by-host", "http://backend.internal:9000", "yes (method)", own_on, 4,
                        60000, waits), "Host header")

    @t.check("sidecar mode: http://localhost:PORT names a sidecar on [::1]:PORT as well as one on "
             "127.0.0.1:PORT (localhost is both), and so does a name under localhost, written "
             "with the root's dot too (localhost., which the proxy itself takes for localhost)")
    def _():
        port = h.free_port()
        for address in ("127.0.0.1", "[::1]"):
            cfg = write(os.path.join(tmp, "localhost-%s.yaml" % address.strip("[]:")),
                        "listen:\n"
                        "  - address: 127.0.0.1:%d\n"
                        "  - address: \"%s:%d\"\n"
                        "    upstream: http://127.0.0.1:%d\n"
                        % (h.free_port(), address, port, h.closed_port()))
            for host in ("localhost", "api.localhost", "API.LocalHost", "localhost.",
                         "api.localhost."):
                p = explain(["-c", cfg, "GET", "http://%s:%d/things" % (host, port)])
                what = "%s, URL host %s" % (address, host)
                h.eq(p.returncode, 0, "%s: exit code (stderr %r)" % (what, p.stderr))
                h.ok("sidecar listener %s:%d" % (address, port) in p.stderr,
                     "%s: stderr should name the sidecar listener: %r" % (what, p.stderr))

    @t.check("sidecar mode: an IPv4-mapped address is its IPv4 one, on the listener's side and "
             "on the URL's, and a URL to 0.0.0.0 or [::] is one to loopback (the sidecar takes "
             "those connections)")
    def _():
        port = h.free_port()
        cases = [("[::ffff:127.0.0.1]", "127.0.0.1"), ("[::ffff:127.0.0.1]", "localhost"),
                 ("127.0.0.1", "[::ffff:127.0.0.1]"), ("0.0.0.0", "[::ffff:127.0.0.1]"),
                 # a connect to the unspecified address reaches loopback
                 ("127.0.0.1", "0.0.0.0"), ("[::1]", "[::]"), ("[::ffff:127.0.0.1]", "0.0.0.0")]
        for address, host in cases:
            cfg = write(os.path.join(tmp, "mapped-%s.yaml" % address.strip("[]:")),
                        "listen:\n"
                        "  - address: 127.0.0.1:%d\n"
                        "  - address: \"%s:%d\"\n"
                        "    upstream: http://127.0.0.1:%d\n"
                        % (h.free_port(), address, port, h.closed_port()))
            p = explain(["-c", cfg, "GET", "http://%s:%d/things" % (host, port)])
            what = "sidecar on %s, URL host %s" % (address, host)
            h.eq(p.returncode, 0, "%s: exit code (stderr %r)" % (what, p.stderr))
            h.ok("sidecar listener %s:%d" % (address, port) in p.stderr,
                 "%s: stderr should name the sidecar listener: %r" % (what, p.stderr))

    @t.check("full jitter lists 0-backoff ranges up to max_attempts - 1; a deadline cuts the list "
             "where the lower bounds pass it; explicit codes in retry_on")
    def _():
        waits = spec_waits(1000, 2, 3000, None, 60000, 6)
        h.eq(waits, "0s-1s 0s-2s 0s-3s 0s-3s 0s-3s", "full jitter waits from the formula")
        p = explain(["-c", own, "GET", "http://x.allowed.test/full/a"])
        expect(p, lines("full-jitter", "http://x.allowed.test:80", "yes (method)", own_on, 6,
                        60000, waits), "full jitter")
        waits = spec_waits(1000, 2, 8000, 1500, 10000, 10)
        # 1 + 2 + 4 = 7 s; the next wait's 8 s would pass the 10 s deadline
        h.eq(waits, "1s-2500ms 2s-3500ms 4s-5500ms", "deadline-cut waits from the formula")
        p = explain(["-c", own, "GET", "http://x.allowed.test/short/a"])
        expect(p, lines("short-deadline", "http://x.allowed.test:80", "yes (method)",
                        "[502, 503, timeout]", 10, 10000, waits), "short deadline")

    @t.check("an https:// URL in forward mode: stderr says a CONNECT is tunnelled blind unless "
             "intercept: lists the host, and that a listed one is handled as shown")
    def _():
        ca_dir = os.path.join(tmp, "ca")
        p = h.run_bin(["--make-ca", ca_dir])
        h.eq(p.returncode, 0, "--make-ca exit code (%s)" % p.stderr)
        conf = write(os.path.join(tmp, "intercept.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\nintercept:\n"
                     "  hosts: [\"api.example.com\"]\n  ca_cert: %s\n  ca_key: %s\n"
                     % (h.free_port(), os.path.join(ca_dir, "ca.pem"),
                        os.path.join(ca_dir, "ca-key.pem")))
        waits = spec_waits(1000, 2, 32000, 1000, 120000, 5)
        p = explain(["-c", conf, "GET", "https://api.example.com/a"])
        expect(p, lines("default", "https://api.example.com:443", "yes (method)", DEFAULT_ON, 5,
                        120000, waits), "intercepted host")
        h.ok("intercept: lists the host" in p.stderr and "blind" not in p.stderr,
             "stderr should say the host is intercepted: %r" % p.stderr)
        p = explain(["-c", conf, "GET", "https://other.example.com/a"])
        expect(p, lines("default", "https://other.example.com:443", "yes (method)", DEFAULT_ON, 5,
                        120000, waits), "host not intercepted")
        h.ok("tunnelled blind" in p.stderr, "stderr should warn of the blind tunnel: %r" % p.stderr)
        p = explain(["-c", conf, "GET", "http://other.example.com/a"])
        h.ok("CONNECT" not in p.stderr, "no CONNECT note for http://: %r" % p.stderr)
        # inside the tunnel the request comes in origin-form: max_uri_bytes
        # holds for that, not for the URL's absolute form
        with open(conf, "a") as f:
            f.write("limits: { max_uri_bytes: 100 }\n")
        path = "/" + "u" * 90
        p = explain(["-c", conf, "GET", "https://api.example.com" + path])
        expect(p, lines("default", "https://api.example.com:443", "yes (method)", DEFAULT_ON, 5,
                        120000, waits), "intercepted host, a 91-byte path")
        p = explain(["-c", conf, "GET", "https://api.example.com/" + "u" * 100])
        expect_refused(p, ["414"], "intercepted host, a 101-byte path")
        p = explain(["-c", conf, "GET", "https://other.example.com" + path])
        expect_refused(p, ["414"], "host not intercepted, absolute form over 100 bytes")

    @t.check("a body over limits.replay_buffer is sent once: waits none, with a note; one over "
             "max_body_bytes is refused with 413, exit 1")
    def _():
        conf = write(os.path.join(tmp, "small-replay.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\nlimits:\n  replay_buffer: 1KiB\n"
                     "  max_body_bytes: 2KiB\n" % h.free_port())
        small = write(os.path.join(tmp, "1k.bin"), "x" * 1024)
        large = write(os.path.join(tmp, "1k1.bin"), "x" * 1025)
        huge = write(os.path.join(tmp, "3k.bin"), "x" * 3072)
        waits = spec_waits(1000, 2, 32000, 1000, 120000, 5)
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", small])
        expect(p, lines("default", "http://a.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        waits), "body at replay_buffer")
        h.ok("replay_buffer" not in p.stderr, "no note at the limit: %r" % p.stderr)
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", large])
        expect(p, lines("default", "http://a.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        "none"), "body over replay_buffer")
        h.ok("replay_buffer" in p.stderr and "1025" in p.stderr,
             "stderr should name replay_buffer and the size: %r" % p.stderr)
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", huge])
        expect_refused(p, ["refuse this request with 413", "max_body_bytes", "3072"],
                       "body over max_body_bytes")
        p = explain(["-c", conf, "PUT", "http://a.test/o", "-H", "Transfer-Encoding: chunked",
                     "--body", huge])
        expect_refused(p, ["refuse this request with 413", "max_body_bytes"],
                       "chunked body over max_body_bytes")

    @t.check("an endless --body (/dev/zero) is read only until it is past every limit that "
             "matters: 413 over max_body_bytes, else sent once, said as 'more than N bytes'")
    def _():
        conf = write(os.path.join(tmp, "endless.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\nlimits:\n  replay_buffer: 1KiB\n"
                     "  max_body_bytes: 2KiB\n" % h.free_port())
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", "/dev/zero"])
        expect_refused(p, ["refuse this request with 413", "max_body_bytes", "more than"],
                       "endless body over max_body_bytes")
        p = explain(["-c", conf, "PUT", "http://a.test/o", "-H", "Transfer-Encoding: chunked",
                     "--body", "/dev/zero"])
        expect_refused(p, ["refuse this request with 413", "more than"],
                       "endless chunked body over max_body_bytes")
        # no max_body_bytes: the spool's limit is the last that matters
        conf = write(os.path.join(tmp, "endless-spool.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\nlimits:\n  replay_buffer: 1KiB\n"
                     "  spool_max: 4KiB\n  spool_dir: %s\n" % (h.free_port(), tmp))
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", "/dev/zero"])
        expect(p, lines("default", "http://a.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        "none"), "endless body, no max_body_bytes")
        h.ok("replay_buffer" in p.stderr and "more than" in p.stderr,
             "stderr should say the body is over the limits: %r" % p.stderr)
        # the default limits (8 MiB replay_buffer, the JSON check's 16 MiB)
        conf = write(os.path.join(tmp, "endless-default.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\n" % h.free_port())
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", "/dev/zero"])
        h.eq(p.returncode, 0, "default limits: exit code (stderr %r)" % p.stderr)
        h.ok("waits: none" in p.stdout.splitlines(), "default limits: %r" % p.stdout)

    @t.check("a config name with a newline or control bytes is printed escaped: one line per key, "
             "no key: value line forged by a query or json_field name")
    def _():
        conf = write(os.path.join(tmp, "escaped.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\ndefaults:\n  idempotent:\n"
                     "    methods: [GET]\n    when_present:\n"
                     "      - query: \"a\\nroute: forged\\r\\x1b[2J\\\\\"\n"
                     "      - json_field: \"e\\ntag\\t\\x7f\\u2028\"\n" % h.free_port())
        p = explain(["-c", conf, "POST", "http://a.test/o?a%0Aroute%3A%20forged%0D%1B%5B2J%5C=1"])
        expect(p, lines("default", "http://a.test:80",
                        "yes (query a\\nroute: forged\\r\\x1b[2J\\\\)", DEFAULT_ON, 5,
                        120000, spec_waits(1000, 2, 32000, 1000, 120000, 5)), "query name")
        body = os.path.join(tmp, "escaped.json")
        with open(body, "w", encoding="utf-8") as f:
            f.write('{"e\\ntag\\t\\u007f\\u2028": "1"}')
        p = explain(["-c", conf, "POST", "http://a.test/o", "-H", "Content-Type: application/json",
                     "--body", body])
        expect(p, lines("default", "http://a.test:80",
                        "yes (json_field e\\ntag\\t\\x7f\\xe2\\x80\\xa8)", DEFAULT_ON, 5,
                        120000, spec_waits(1000, 2, 32000, 1000, 120000, 5)), "json_field name")

    @t.check("retry.idempotency_key: inject makes a POST idempotent by the key; a body over "
             "replay_buffer within spool_max is still retried; mode: observe retries nothing")
    def _():
        conf = write(os.path.join(tmp, "controls.yaml"),
                     "listen:\n  - address: 127.0.0.1:%d\nlimits:\n  replay_buffer: 1KiB\n"
                     "  spool_max: 4KiB\n  spool_dir: %s\nroutes:\n"
                     "  - name: keyed\n    match: { path_prefix: /v1/charges }\n"
                     "    retry: { idempotency_key: inject }\n"
                     "  - name: trial\n    match: { path_prefix: /trial }\n"
                     "    retry: { mode: observe }\n" % (h.free_port(), tmp))
        waits = spec_waits(1000, 2, 32000, 1000, 120000, 5)
        p = explain(["-c", conf, "POST", "http://a.test/v1/charges"])
        expect(p, lines("keyed", "http://a.test:80", "yes (idempotency_key)", DEFAULT_ON, 5,
                        120000, waits), "inject")
        p = explain(["-c", conf, "POST", "http://a.test/other"])
        expect(p, lines("default", "http://a.test:80", "no", DEFAULT_ON, 5, 120000, "none"),
               "no key outside the keyed route")
        spooled = write(os.path.join(tmp, "2k.bin"), "x" * 2048)
        p = explain(["-c", conf, "PUT", "http://a.test/o", "--body", spooled])
        expect(p, lines("default", "http://a.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        waits), "body kept by the spool")
        p = explain(["-c", conf, "GET", "http://a.test/trial/x"])
        expect(p, lines("trial", "http://a.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        "none"), "observe")
        h.ok("observe" in p.stderr, "stderr should say observe: %r" % p.stderr)

    @t.check("a host outside access.allow_hosts: exit 1, the proxy would answer 403")
    def _():
        p = explain(["-c", own, "GET", "http://elsewhere.test/"])
        expect_refused(p, ["403", "allow_hosts"], "allow_hosts")

    @t.check("nothing listens or connects: the listener port is held by the test, and a URL "
             "pointing at the test's socket gets no connection")
    def _():
        target = socket.socket()
        target.bind(("127.0.0.1", 0))
        target.listen(4)
        try:
            url = "http://127.0.0.1:%d/v1/x" % target.getsockname()[1]
            p = explain(["-c", own, "GET", url])
            expect(p, lines("default", "http://127.0.0.1:%d" % target.getsockname()[1],
                            "yes (method)", own_on, 4, 60000,
                            spec_waits(500, 3, 4000, 250, 60000, 4)), "local URL")
            for s in (target, fwd_sock):
                ready, _, _ = select.select([s], [], [], 0.3)
                h.eq(ready, [], "connections waiting on %s" % (s.getsockname(),))
        finally:
            target.close()

    @t.check("-c is honoured before ./conf/retryproxy.yaml, which is used without -c")
    def _():
        cwd = os.path.join(tmp, "with-conf")
        write(os.path.join(cwd, "conf", "retryproxy.yaml"),
              "listen:\n  - address: 127.0.0.1:%d\nroutes:\n  - name: from-cwd-conf\n"
              "    match: { path_prefix: / }\n    retry: { max_attempts: 2 }\n" % h.free_port())
        p = explain(["GET", "http://example.test/a"], cwd=cwd)
        expect(p, lines("from-cwd-conf", "http://example.test:80", "yes (method)", DEFAULT_ON, 2,
                        120000, "1s-2s"), "./conf/retryproxy.yaml")
        h.ok("config ./conf/retryproxy.yaml" in p.stderr, "stderr should name it: %r" % p.stderr)
        p = explain(["-c", own, "GET", "http://x.allowed.test/short/a"], cwd=cwd)
        h.ok(p.stdout.startswith("route: short-deadline\n"), "-c wins: %r" % p.stdout)

    @t.check("no -c and no ./conf: the embedded default (a forward proxy, the default policy)")
    def _():
        cwd = os.path.join(tmp, "empty")
        os.makedirs(cwd)
        if os.path.exists(ETC):
            p = explain(["GET", "http://example.test/a"], cwd=cwd)
            h.ok("config %s" % ETC in p.stderr, "stderr should name %s: %r" % (ETC, p.stderr))
            t.skip("embedded default policy", "%s exists on this machine and comes first" % ETC)
            return
        p = explain(["GET", "http://example.test/a"], cwd=cwd)
        expect(p, lines("default", "http://example.test:80", "yes (method)", DEFAULT_ON, 5, 120000,
                        spec_waits(1000, 2, 32000, 1000, 120000, 5)), "embedded GET")
        h.ok("config <embedded>" in p.stderr, "stderr should say <embedded>: %r" % p.stderr)
        p = explain(["POST", "http://example.test/a", "--body", body_etag], cwd=cwd)
        expect(p, lines("default", "http://example.test:80", "no", DEFAULT_ON, 5, 120000, "none"),
               "embedded POST")

    @t.check("bad descriptions exit 1 with a message and nothing on stdout")
    def _():
        cases = [
            (["GE T", "http://a.allowed.test/"], ["bad method", "GE T"]),
            (["GET", "ftp://a.allowed.test/"], ["bad URL", "ftp://"]),
            (["GET", "/relative"], ["bad URL", "/relative"]),
            (["GET", "http:///nohost"], ["bad URL", "no host"]),
            (["GET", "http://a.allowed.test/a b"], ["bad URL"]),
            (["GET", "http://a.allowed.test:0/"], ["bad request", "400"]),
            (["GET", "http://a.allowed.test/", "-H", "NoColon"], ["bad header line", "NoColon"]),
            (["GET", "http://a.allowed.test/", "-H", "Bad Name: x"], ["bad header line"]),
            (["GET", "http://a.allowed.test/", "-H", "X: a\r\nInjected: b"], ["bad header line"]),
            (["GET", "http://a.allowed.test/", "--body", os.path.join(tmp, "missing.json")],
             ["missing.json", "No such file"]),
            (["CONNECT", "http://a.allowed.test:443/"], ["CONNECT", "never retried"]),
        ]
        for args, words in cases:
            expect_refused(explain(["-c", own] + args), words, " ".join(args))
        # the user's argument comes back escaped: no control byte reaches
        # the terminal, no line of its own
        for args, shown in [
                (["GET", "http://a.allowed.test/\x1b[2J\nretryproxy: ok x"],
                 'bad URL "http://a.allowed.test/\\x1b[2J\\nretryproxy: ok x"'),
                (["GET", "http://a.allowed.test/", "-H", "X: a\r\nInjected: b"],
                 'bad header line "X: a\\r\\nInjected: b"'),
                (["G\x07T", "http://a.allowed.test/"], 'bad method "G\\x07T"'),
                (["GET", "http://a.allowed.test/", "--body",
                  os.path.join(tmp, "m\x1b[2J\nretryproxy: ok x")],
                 "--body %s: No such file" % os.path.join(tmp, "m\\x1b[2J\\nretryproxy: ok x"))]:
            p = explain(["-c", own] + args)
            expect_refused(p, [shown], "escaped %r" % args)
            h.eq(p.stderr.count("\n"), 1, "one line on stderr for %r: %r" % (args, p.stderr))
            h.ok("\x1b" not in p.stderr and "\x07" not in p.stderr and "\r" not in p.stderr,
                 "no control byte on stderr for %r: %r" % (args, p.stderr))
        p = h.run_bin(["-c", own, "--explain", "GET"])
        expect_refused(p, ["--explain"], "--explain without a URL")
        p = h.run_bin(["-c", own, "-H", "A: b"])
        expect_refused(p, ["--explain"], "-H without --explain")

    @t.check("an answer that cannot be written (stdout on /dev/full) is a runtime failure: "
             "exit 2, the reason on stderr, not exit 0")
    def _():
        with open("/dev/full", "w") as full:
            p = subprocess.run([h.BIN, "-c", own, "--explain", "GET", "http://a.allowed.test/"],
                               stdout=full, stderr=subprocess.PIPE, env=h.clean_env(),
                               timeout=20 * h.SLOW, text=True)
        h.eq(p.returncode, 2, "exit code (stderr %r)" % p.stderr)
        h.ok("No space left on device" in p.stderr,
             "stderr should name the write error: %r" % p.stderr)

    @t.check("a bad config: exit 1 with file:line:col, nothing on stdout")
    def _():
        bad = write(os.path.join(tmp, "bad.yaml"),
                    "listen:\n  - address: 127.0.0.1:3128\ndefaults:\n  retry:\n"
                    "    max_backoff: fast\n")
        p = h.run_bin(["-c", bad, "--explain", "GET", "http://a.test/"])
        expect_refused(p, ["bad.yaml:5:18", "max_backoff"], "bad config")

    @t.check("a config path with control bytes is named escaped: the note stays one line")
    def _():
        odd = os.path.join(tmp, "odd\nretryproxy: forged\x1b[2J.yaml")
        with open(own) as src, open(odd, "w") as dst:
            dst.write(src.read())
        p = explain(["-c", odd, "GET", "http://a.allowed.test/"])
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        notes = [ln for ln in p.stderr.splitlines() if "config " in ln]
        h.ok(len(notes) == 1 and "odd\\nretryproxy: forged\\x1b[2J.yaml" in notes[0],
             "the path escaped on the config note: %r" % p.stderr)
        h.ok(not any(ln.startswith("retryproxy: forged") for ln in p.stderr.splitlines()),
             "a forged line on stderr: %r" % p.stderr)

    @t.check("the proxy with the explained policy: exactly the explained tries, "
             "each wait inside its explained range")
    def _():
        origin = t.origin()
        proxy = t.proxy(TRIES)
        path = "/always-503"
        origin.script(path, [503])
        conf = write(os.path.join(tmp, "tries.yaml"),
                     TRIES.replace("@PORT0@", str(h.free_port())))
        p = explain(["-c", conf, "GET", origin.url(path)])
        h.eq(p.returncode, 0, "explain exit code (stderr %r)" % p.stderr)
        waits_line = [l for l in p.stdout.splitlines() if l.startswith("waits: ")]
        h.eq(waits_line, ["waits: 100ms-150ms 200ms-250ms 300ms-300ms"], "explained waits")
        r = h.fetch(proxy.port(), "GET", origin.url(path), origin.authority)
        h.eq(r.status, 503, "status")
        reqs = origin.requests_for(path)
        h.eq(len(reqs), 4, "tries the origin saw (1 + the explained waits)")
        gaps = h.try_gaps(reqs)
        for i, (gap, (lo, hi)) in enumerate(zip(gaps, [(0.1, 0.15), (0.2, 0.25), (0.3, 0.3)])):
            h.ok(lo - 0.02 <= gap <= hi + 0.25 * h.SLOW,
                 "wait %d: %.0f ms, explained %d-%d ms" % (i + 1, gap * 1000, lo * 1000, hi * 1000))

    @t.check("upstream: names the upstream as /upstreams does (host in lower case, an IPv6 "
             "address the short way), for a URL and for a configured upstream:")
    def _():
        origin, other = t.origin(), t.origin()
        proxy = t.proxy(NAMES, ORIGIN=origin.port)
        admin = "http://127.0.0.1:%d" % proxy.port(1)
        side = "http://127.0.0.1:%d" % proxy.port(2)
        # forward proxy requests to another origin than the sidecar's
        cases = [
            ("http://LocalHost:%d/status/200" % other.port, proxy.port(0), True),
            ("http://[0:0::1]:%d/status/200" % other.port, proxy.port(0), True),
            (side + "/status/200", proxy.port(2), False),
        ]
        for url, port, forward in cases:
            p = explain(["-c", proxy.config_path, "GET", url])
            h.eq(p.returncode, 0, "%s: explain exit code (stderr %r)" % (url, p.stderr))
            got = dict(l.split(": ", 1) for l in p.stdout.splitlines())
            authority = url.split("/")[2]
            h.fetch(port, "GET", url if forward else "/status/200", authority)
            named = [l.split(" ")[0] for l in
                     h.curl(admin + "/upstreams", check=True).body.decode().splitlines()]
            h.ok(got.get("upstream") in named, "%s: explained upstream %r is not one /upstreams "
                 "names: %r" % (url, got.get("upstream"), named))

    @t.check("the proxy's own admin address: exit 1 naming the 403 the proxy answers after "
             "one try, never retried, as a forward URL and as a sidecar's upstream:")
    def _():
        proxy = t.proxy(ADMIN_SELF)
        admin = proxy.port(1)
        for url, port, target in (
                ("http://127.0.0.1:%d/metrics" % admin, proxy.port(0), None),
                ("http://[::ffff:127.0.0.1]:%d/config" % admin, proxy.port(0), None),
                ("http://127.0.0.1:%d/config" % proxy.port(2), proxy.port(2), "/config")):
            p = explain(["-c", proxy.config_path, "GET", url])
            expect_refused(p, ["403", "admin"], url)
            r = h.fetch(port, "GET", target or url, url.split("/")[2])
            h.eq((r.status, r.header("Retry-Attempts")), (403, "1"),
                 "%s: the proxy's answer (status, Retry-Attempts)" % url)
        # another port of the same host is an upstream like any other
        p = explain(["-c", proxy.config_path, "GET", "http://127.0.0.1:%d/" % h.closed_port()])
        h.eq(p.returncode, 0, "another port: exit code (stderr %r)" % p.stderr)

    @t.check("one of the proxy's own listeners: exit 1 naming the 403 the proxy answers after "
             "one try (a CONNECT to itself would nest), as a forward URL")
    def _():
        proxy = t.proxy(ADMIN_SELF)
        # (a URL to the sidecar's own address, in either spelling, names
        # the sidecar: what an app pointed at it sends)
        for url in ("http://127.0.0.1:%d/x" % proxy.port(0),
                    "http://[::ffff:127.0.0.1]:%d/x" % proxy.port(0)):
            p = explain(["-c", proxy.config_path, "GET", url])
            expect_refused(p, ["403", "own listener"], url)
            r = h.fetch(proxy.port(0), "GET", url, url.split("/")[2])
            h.eq((r.status, r.header("Retry-Attempts")), (403, "1"),
                 "%s: the proxy's answer (status, Retry-Attempts)" % url)

    @t.check("TRACE or OPTIONS with Max-Forwards: 0: exit 1, the proxy answers it itself "
             "(200, nothing upstream); Max-Forwards: 1, or a GET, is explained")
    def _():
        origin = t.origin()
        proxy = t.proxy(ADMIN_SELF)
        for method in ("TRACE", "OPTIONS"):
            url = origin.url("/mf0-%s" % method)
            p = explain(["-c", proxy.config_path, "-H", "Max-Forwards: 0", method, url])
            expect_refused(p, ["itself", "Max-Forwards"], method)
            r = h.fetch(proxy.port(0), method, url, origin.authority,
                        headers=[("Max-Forwards", "0")])
            h.eq(r.status, 200, "%s: the proxy's answer" % method)
            h.eq(origin.requests_for("/mf0-%s" % method), [], "%s: requests upstream" % method)
        for method, value in (("TRACE", "1"), ("GET", "0")):
            p = explain(["-c", proxy.config_path, "-H", "Max-Forwards: " + value, method,
                         origin.url("/mf")])
            h.eq(p.returncode, 0, "%s, Max-Forwards %s: exit code (stderr %r)"
                 % (method, value, p.stderr))

    @t.check("limits.max_uri_bytes holds for the form the listener receives: a sidecar's "
             "origin-form request within it is explained, the same URL sent in absolute "
             "form to the forward listener is refused 414, as the proxy does")
    def _():
        origin = t.origin()
        proxy = t.proxy(URI_LIMIT, ORIGIN=origin.port)
        path = "/" + "u" * 90
        origin.script(path, [200])
        # the sidecar's upstream: origin-form, 91 bytes of target
        p = explain(["-c", proxy.config_path, "GET", origin.url(path)])
        h.eq(p.returncode, 0, "sidecar: exit code (stderr %r)" % p.stderr)
        h.ok("sidecar listener" in p.stderr, "sidecar: stderr %r" % p.stderr)
        r = h.fetch(proxy.port(2), "GET", path, origin.authority)
        h.eq(r.status, 200, "sidecar: the proxy's answer")
        # another host: absolute form to the forward listener, over 100 bytes
        url = "http://localhost:%d%s" % (origin.port, path)
        p = explain(["-c", proxy.config_path, "GET", url])
        expect_refused(p, ["414"], "forward")
        r = h.fetch(proxy.port(0), "GET", url, "localhost:%d" % origin.port)
        h.eq(r.status, 414, "forward: the proxy's answer")

    @t.check("a request refused both for its host or its path and for a Content-Length over "
             "max_body_bytes gets the status the proxy gives: routing (403, 400) comes "
             "first, as in exchange_new()")
    def _():
        proxy = t.proxy(REFUSED_TWICE)
        body = write(os.path.join(tmp, "refused-twice.bin"), "x" * 100)
        for url, host, status in [("http://denied.test/x", "denied.test", 403),
                                  ("http://allowed.test/a/%zz", "allowed.test", 400),
                                  ("http://allowed.test/x", "allowed.test", 413)]:
            p = explain(["-c", proxy.config_path, "PUT", url, "--body", body])
            expect_refused(p, ["refuse this request with %d" % status], url)
            r = h.fetch(proxy.port(0), "PUT", url, host, body=b"x" * 100)
            h.eq(r.status, status, "%s: the proxy's answer" % url)

    @t.check("the proxy with the explained policy, requests with bodies: exactly the explained "
             "tries and idempotency (json_field only in a body within replay_buffer, never under "
             "observe; the spool only for a request idempotent by its head)")
    def _():
        origin = t.origin()
        spool_dir = os.path.join(tmp, "spool")
        os.makedirs(spool_dir, exist_ok=True)
        proxy = t.proxy(TRIES_BODY, SPOOL=spool_dir)
        small = '{"etag": "e1", "pad": "%s"}' % ("x" * 200)
        near = '{"etag": "e1", "pad": "%s"}' % ("x" * (1015 - 25))
        middle = '{"etag": "e1", "pad": "%s"}' % ("x" * 2000)
        h.eq(len(near), 1015, "near body size")
        chunked = [("Transfer-Encoding", "chunked")]
        # method, path, body, headers, explained idempotent, explained waits
        cases = [
            ("POST", "/small", small, [], "yes (json_field etag)", "50ms-50ms 50ms-50ms"),
            ("POST", "/middle", middle, [], "no", "none"),
            ("PUT", "/spooled", middle, [], "yes (method)", "50ms-50ms 50ms-50ms"),
            ("PUT", "/over-spool", "y" * 5000, [], "yes (method)", "none"),
            ("POST", "/trial/small", small, [], "no", "none"),
            ("POST", "/chunked-small", small, chunked, "yes (json_field etag)",
             "50ms-50ms 50ms-50ms"),
            # 1015 data bytes in one chunk are 1027 with the framing: over 1 KiB
            ("POST", "/chunked-near", near, chunked, "no", "none"),
            ("POST", "/length-near", near, [], "yes (json_field etag)", "50ms-50ms 50ms-50ms"),
            # the spool file keeps the chunk framing as well, and spool_max
            # bounds the file: 4096 data bytes in one chunk are 4109, over 4 KiB
            ("PUT", "/chunked-spool-over", "y" * 4096, chunked, "yes (method)", "none"),
            ("PUT", "/chunked-spool-fits", "y" * 4000, chunked, "yes (method)",
             "50ms-50ms 50ms-50ms"),
        ]
        for method, path, body, headers, idem, waits in cases:
            body_file = write(os.path.join(tmp, "tries-body%s.json" % path.replace("/", "-")),
                              body)
            args = ["-c", proxy.config_path, method, origin.url(path), "--body", body_file]
            for name, value in headers:
                args += ["-H", "%s: %s" % (name, value)]
            p = explain(args)
            h.eq(p.returncode, 0, "%s: explain exit code (stderr %r)" % (path, p.stderr))
            got = dict(l.split(": ", 1) for l in p.stdout.splitlines())
            h.eq((got.get("idempotent"), got.get("waits")), (idem, waits),
                 "%s: explained idempotent, waits (stderr %r)" % (path, p.stderr))
            data = body.encode()
            if headers:
                data = b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"
            origin.script(path, [503])
            r = h.fetch(proxy.port(), method, origin.url(path), origin.authority,
                        headers=headers, body=data)
            h.eq(r.status, 503, "%s: status" % path)
            explained = 1 + (0 if waits == "none" else len(waits.split()))
            h.eq((len(origin.requests_for(path)), r.header("Retry-Attempts")),
                 (explained, str(explained)), "%s: tries the origin saw, Retry-Attempts "
                 "(explained: %d)" % (path, explained))


h.run(scenario, __doc__, timeout=120)
