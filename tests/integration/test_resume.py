#!/usr/bin/env python3
"""Scenario: Range resume of GET downloads that break mid-body (retry.resume).

Client: curl through a sidecar listener, one download at a time (a second
proxy logs JSON); curl to the admin listener for /metrics.
Origin: /object/<n>, a Range-capable download (Accept-Ranges: bytes, a
strong ETag and a Last-Modified by default), scripted per path so that each
try gets the next step: break (FIN or RST) after N body bytes, change the
object (?version=2, a new ETag and content), serve a weak ETag, no ETag,
chunked framing, another range, a 503, or ignore If-Range.
Proxy: defaults with resume on, 5 attempts, 50 ms backoff without jitter,
replay_buffer 64 KiB;
routes (by Host) with max_attempts 2, with a 900ms backoff and a 1s
deadline (the break, after a 200ms delay, leaves no room for the wait),
with resume: false, with try_timeout 500ms, with retry.on
[5xx] (no reset), and with a 5s backoff.
Must hold:
- a 4 MiB download broken at 1 MiB arrives whole, byte-exact (sha256), as
  one 200 response: the origin got Range: bytes=K- (K at most 1 MiB, the
  bytes the client had) and If-Range with the 200's ETag; the log's trail
  shows the break and resumed_at=K; resumes_total{result="ok"} counts it;
- a resume that itself breaks (by RST) is resumed again from the new K;
- a retryable 503 to the resume is retried, then the 206 is spliced;
  x-should-retry counts as on any response: a 503 with false is not
  retried (the body ends short, resumes_total{result="failed"}), a 409
  with true is;
- a body that stalls for the route's try_timeout is resumed too;
- without an ETag the Last-Modified is the If-Range validator, when the
  response's Date is at least a second after it (a strong validator,
  RFC 9110 section 8.8.2.2); with a Date in its own second, or no Date,
  there is no resume (one request at the origin, the body ends short);
- a changed object never yields a mixed body: a 200 with the new ETag
  (If-Range no longer matches), or a 206 with another ETag from an origin
  that ignores If-Range, ends the client's body short, a prefix of the
  first version; resumes_total{result="failed"} counts it;
- a 206 without the 200's strong ETag is not spliced (RFC 9110 section
  15.3.7: a 206 carries the ETag a 200 would; this one is a changed object
  from an origin that ignores If-Range);
- a 206 for another range than asked is not spliced, nor one in another
  Content-Encoding than the 200's (gzip, then br); gzip then gzip is, and
  so is gzip then none with the 200's strong ETag (a 206 to If-Range
  leaves representation fields out, RFC 9110 section 15.3.7);
- a weak ETag, a chunked response, a request with its own Range (answered
  206, or 200 by an origin that ignores it), and a route with resume:
  false get no resume: the origin sees one request;
- a GET whose body is over replay_buffer (64 KiB here; sent once, it cannot
  go again) gets no resume either, and none is counted or logged as
  failed; a GET whose body was kept is resumed, the body sent again;
- a route whose retry.on does not name reset gets no resume either, and
  none is counted or logged as failed: the break is logged as without
  resume, resumes_total{result="failed"} stays 0;
- a break while the upstream is down (health, hold: true) is held until a
  probe connects, even with a pooled connection to it idle: the resume
  reaches the origin only after it listens again, then is spliced on; a
  503 to a resume already at the origin when it was marked down is held
  the same way, not given up;
- resumes count against attempts (max_attempts 2: the second break ends
  the body short, gave_up=attempts) and the deadline (gave_up=deadline);
- a resume waiting in a backoff longer than the drain at SIGTERM is given
  up (the body ends short); the note names the shutdown and no status,
  since the client got no 503;
- the JSON access log carries "broken" and "resumed_at" in the tries.
"""

import hashlib
import re
import threading
import time
import urllib.parse

import harness as h
import origin as o

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: @FORMAT@ }
limits: { drain_timeout: 2s, replay_buffer: 64KiB }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 50ms
    max_backoff: 50ms
    jitter: 0s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: two-tries
    match: { host: two.test }
    retry: { max_attempts: 2 }
  - name: short-deadline
    match: { host: deadline.test }
    retry: { initial_backoff: 900ms, max_backoff: 900ms, deadline: 1s }
  - name: no-resume
    match: { host: off.test }
    retry: { resume: false }
  - name: stall
    match: { host: stall.test }
    retry: { try_timeout: 500ms }
  - name: no-reset
    match: { host: noreset.test }
    retry: { on: [5xx] }
  - name: long-backoff
    match: { host: long.test }
    retry: { initial_backoff: 5s, max_backoff: 5s }
"""

# An upstream that goes down under its pooled connections: one connect
# failure marks it down, and requests for it are held until a probe connects.
CONFIG_HOLD = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
limits: { drain_timeout: 2s }
health: { down_after: 1, probe_interval: 100ms, hold: true }
defaults:
  retry:
    max_attempts: 5
    initial_backoff: 50ms
    max_backoff: 50ms
    jitter: 0s
    deadline: 60s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: once
    match: { path_prefix: /once/ }
    retry: { max_attempts: 1 }
"""

MiB = 1 << 20


def sha(n, version=1):
    return hashlib.sha256(o.pattern_bytes(n, o.object_offset(version))).hexdigest()


def admin_metrics(proxy):
    return h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True).body.decode()



def get(proxy, path, *args):
    return h.curl("http://127.0.0.1:%d%s" % (proxy.port(0), path), *args, timeout=30)


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, FORMAT="text")

    def download(n, steps, host=None):
        """Script /object/n with steps (a query for /object/n, or a whole
        behaviour path), GET it (with this Host); the curl result."""
        path = "/object/%d" % n
        origin.script(path, [s if s.startswith("/") else path + s for s in steps])
        return get(proxy, path, *(["-H", "Host: " + host] if host else []))

    def requests_for(n):
        return origin.requests_for("/object/%d" % n)

    def resumed_after_second_try(n, second, logged):
        """Break /object/n at 1 MiB, answer the first resume as second says
        (logged so in the trail), then 206: the client gets it whole, both
        resumes ask from the same K and the trail marks both resumed_at=K."""
        r = download(n, ["?break_at=%d" % MiB, second, ""])
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = requests_for(n)
        h.eq(len(reqs), 3, "requests the origin saw")
        h.eq(reqs[1].header("Range"), reqs[2].header("Range"), "both resumes ask from K")
        k = int(reqs[2].header("Range")[6:-1])
        h.eq(h.access_fields(proxy.access_one("/object/%d" % n)).get("tries"),
             "200 broken=reset -> wait 50ms -> %s resumed_at=%d -> wait 50ms -> "
             "206 resumed_at=%d" % (logged, k, k), "logged trail")

    def short_prefix(r, n, version=1):
        """The client got a short body that is a prefix of version's bytes."""
        h.ok(r.exit_code != 0, "curl should fail on a short body: %r" % r)
        h.eq(r.status, 200, "status")
        h.ok(len(r.body) < n, "body of %d bytes should be short of %d" % (len(r.body), n))
        h.ok(r.body == o.pattern_bytes(len(r.body), o.object_offset(version)),
             "the short body should be a prefix of version %d" % version)

    def quiet_origin(n, count):
        """The origin saw exactly count requests for /object/n, also a while later."""
        time.sleep(0.5 * h.SLOW)
        h.eq(len(requests_for(n)), count, "requests the origin saw for /object/%d" % n)

    @t.check("a 4 MiB download broken at 1 MiB arrives whole, as one 200")
    def _():
        n = 4 * MiB
        r = download(n, ["?break_at=%d" % MiB, ""])
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(r.status, 200, "status")
        h.eq(len(r.heads), 1, "response heads the client saw")
        h.eq(len(r.body), n, "body length")
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        h.eq(r.header("Content-Length"), str(n), "Content-Length")
        h.eq(r.header("Content-Range"), None, "no Content-Range reaches the client")
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        h.eq(reqs[0].header("Range"), None, "the first try asks for the whole object")
        m = re.fullmatch(r"bytes=(\d+)-", reqs[1].header("Range") or "")
        h.ok(m is not None, "the resume asks for bytes=K-, got %r" % reqs[1].header("Range"))
        k = int(m.group(1))
        h.ok(0 < k <= MiB, "K=%d should be what reached the client, at most 1 MiB" % k)
        h.eq(reqs[1].header("If-Range"), '"obj-1-%d"' % n, "If-Range is the 200's ETag")
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("status"), "200", "logged status")
        h.eq(fields.get("attempts"), "2", "logged attempts")
        h.eq(fields.get("bytes"), str(n), "logged body bytes")
        h.eq(fields.get("tries"), "200 broken=reset -> wait 50ms -> 206 resumed_at=%d" % k,
             "logged trail")
        text = admin_metrics(proxy)
        h.eq(h.metric(text, "retryproxy_resumes_total", '{route="default",result="ok"}'), 1.0,
             "resumes ok")
        h.eq(h.metric(text, "retryproxy_resumes_total", '{route="default",result="failed"}'),
             0.0, "resumes failed")
        h.eq(h.metric(text, "retryproxy_retries_total", '{route="default",cause="reset"}'), 1.0,
             "the resume counts as a retry after a reset")

    @t.check("a resume that breaks (RST) is resumed again from the new K")
    def _():
        n = 4 * MiB + 1
        r = download(n, ["?break_at=%d&break_mode=reset" % MiB, "?break_at=%d" % MiB, ""])
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = requests_for(n)
        h.eq(len(reqs), 3, "requests the origin saw")
        k1 = int(reqs[1].header("Range")[6:-1])
        k2 = int(reqs[2].header("Range")[6:-1])
        h.ok(0 < k1 <= MiB and k1 < k2 <= k1 + MiB, "K grows: %d then %d" % (k1, k2))
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("tries"),
             "200 broken=reset -> wait 50ms -> 206 resumed_at=%d broken=reset -> wait 50ms "
             "-> 206 resumed_at=%d" % (k1, k2), "logged trail")

    @t.check("a 503 to the resume is retried, then the 206 is spliced on")
    def _():
        resumed_after_second_try(3 * MiB, "/status/503", "503")

    @t.check("a resume reset before its answer's head is marked resumed_at=K in the trail too")
    def _():
        resumed_after_second_try(3 * MiB + 1, "/reset/request", "reset")

    @t.check("a body that stalls for try_timeout is resumed like one that broke")
    def _():
        n = 2 * MiB + 11
        r = download(n, ["?stall_at=%d" % MiB, ""], host="stall.test")
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        k = int(reqs[1].header("Range")[6:-1])
        h.eq(h.access_fields(proxy.access_one("/object/%d" % n)).get("tries"),
             "200 broken=timeout -> wait 50ms -> 206 resumed_at=%d" % k, "logged trail")

    @t.check("without an ETag, the Last-Modified is the If-Range validator")
    def _():
        n = 2 * MiB
        r = download(n, ["?etag=none&break_at=%d" % MiB, "?etag=none"])
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        h.ok((reqs[1].header("If-Range") or "").endswith(" GMT"),
             "If-Range should be the Last-Modified date, got %r" % reqs[1].header("If-Range"))

    @t.check("a Last-Modified not a second before the Date, or with no Date, is no validator")
    def _():
        for i, date in enumerate(("lm", "none")):
            n = 2 * MiB + 20 + i
            r = download(n, ["?etag=none&date=%s&break_at=%d" % (date, MiB),
                             "?etag=none&date=%s" % date])
            short_prefix(r, n)
            quiet_origin(n, 1)

    @t.check("a changed ETag on the resume (a 200) never yields a mixed body")
    def _():
        n = 2 * MiB + 1
        r = download(n, ["?break_at=%d" % MiB, "?version=2"])
        short_prefix(r, n)
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.ok("not resumed" in urllib.parse.unquote(fields.get("note", "")), "note: %r" % fields)
        h.ok(fields.get("tries", "").endswith("-> 200 resumed_at=%s" % reqs[1].header("Range")[6:-1]),
             "trail: %r" % fields.get("tries"))
        text = admin_metrics(proxy)
        h.eq(h.metric(text, "retryproxy_resumes_total", '{route="default",result="failed"}'),
             1.0, "resumes failed")

    @t.check("a 206 with another ETag (origin ignores If-Range) is not spliced")
    def _():
        n = 2 * MiB + 2
        r = download(n, ["?break_at=%d" % MiB, "?version=2&if_range=ignore"])
        short_prefix(r, n)
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        note = h.access_fields(proxy.access_one("/object/%d" % n)).get("note", "")
        h.ok("validator" in urllib.parse.unquote(note), "the note names the validator: %r" % note)

    @t.check("a 206 without the 200's strong ETag is not spliced (RFC 9110 section 15.3.7: "
             "a 206 carries the ETag a 200 would)")
    def _():
        n = 2 * MiB + 22
        before = h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                          '{route="default",result="failed"}')
        # an origin that ignores If-Range and leaves the ETag out of its
        # 206: the object changed, which nothing in the 206 says
        r = download(n, ["?break_at=%d" % MiB, "?version=2&etag=none&if_range=ignore"])
        short_prefix(r, n)
        h.eq(len(requests_for(n)), 2, "requests the origin saw")
        note = urllib.parse.unquote(
            h.access_fields(proxy.access_one("/object/%d" % n)).get("note", ""))
        h.ok("not resumed" in note and "ETag" in note, "the note names the ETag: %r" % note)
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                      '{route="default",result="failed"}'), before + 1, "resumes failed")

    @t.check("a 206 in another Content-Encoding than the 200's is not spliced")
    def _():
        n = 2 * MiB + 4
        r = download(n, ["?break_at=%d&ce=gzip" % MiB, "?ce=br"])
        short_prefix(r, n)
        h.eq(len(requests_for(n)), 2, "requests the origin saw")
        note = h.access_fields(proxy.access_one("/object/%d" % n)).get("note", "")
        h.ok("Content-Encoding" in urllib.parse.unquote(note),
             "the note names the coding: %r" % note)
        n = 2 * MiB + 5
        r = download(n, ["?break_at=%d&ce=gzip" % MiB, "?ce=gzip"])
        h.eq((r.exit_code, len(r.body)), (0, n), "gzip then gzip: curl exit code, body length")
        h.ok(r.body == o.pattern_bytes(n, o.object_offset(1)), "gzip then gzip: body spliced whole")

    @t.check("a 206 without the 200's Content-Encoding but with its strong ETag is spliced "
             "(RFC 9110 section 15.3.7: a 206 to If-Range leaves the coding out)")
    def _():
        n = 2 * MiB + 18
        r = download(n, ["?break_at=%d&ce=gzip" % MiB, ""])
        h.eq((r.exit_code, len(r.body)), (0, n), "curl exit code, body length")
        h.ok(r.body == o.pattern_bytes(n, o.object_offset(1)), "body spliced whole")
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        h.eq(reqs[1].header("If-Range"), '"obj-1-%d"' % n, "the resume's If-Range")

    @t.check("a 206 for another range than asked is not spliced")
    def _():
        n = 2 * MiB + 3
        r = download(n, ["?break_at=%d" % MiB, "?cr_shift=1"])
        short_prefix(r, n)
        h.eq(len(requests_for(n)), 2, "requests the origin saw")

    @t.check("a 503 with x-should-retry: false to the resume is not retried")
    def _():
        n = 3 * MiB + 13
        before = h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                        '{route="default",result="failed"}')
        r = download(n, ["?break_at=%d" % MiB, "/status/503?should_retry=false", ""])
        short_prefix(r, n)
        quiet_origin(n, 2)
        k = int(requests_for(n)[1].header("Range")[6:-1])
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("tries"), "200 broken=reset -> wait 50ms -> 503 resumed_at=%d" % k,
             "logged trail")
        h.eq(urllib.parse.unquote(fields.get("note", "")),
             "not resumed at %d: resume answered 503, not retried (x-should-retry: false)" % k,
             "note")
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                    '{route="default",result="failed"}'), before + 1, "resumes failed")

    @t.check("a 409 with x-should-retry: true to the resume is retried, then spliced")
    def _():
        resumed_after_second_try(3 * MiB + 14, "/status/409?should_retry=true", "409")

    @t.check("a weak ETag gets no resume")
    def _():
        n = 2 * MiB + 40
        r = download(n, ["?etag=weak&break_at=%d" % MiB, "?etag=weak"])
        short_prefix(r, n)
        quiet_origin(n, 1)

    @t.check("a chunked response gets no resume")
    def _():
        n = 2 * MiB + 41
        r = download(n, ["?chunked=1&break_at=%d" % MiB, "?chunked=1"])
        h.ok(r.exit_code != 0, "curl should fail on a cut chunked body: %r" % r)
        h.ok(len(r.body) < n, "the body is short")
        quiet_origin(n, 1)

    @t.check("a request with its own Range gets no resume of ours")
    def _():
        n = 2 * MiB + 6
        origin.script("/object/%d" % n, ["/object/%d?break_at=%d" % (n, MiB),
                                         "/object/%d" % n])
        r = get(proxy, "/object/%d" % n, "-r", "10-")
        h.ok(r.exit_code != 0, "curl should fail on the cut 206: %r" % r)
        h.eq(r.status, 206, "the client's own range is answered")
        quiet_origin(n, 1)
        h.eq(requests_for(n)[0].header("Range"), "bytes=10-", "the client's Range went as is")

    @t.check("a request with its own Range answered 200 (Range ignored) gets no resume")
    def _():
        n = 2 * MiB + 12
        origin.script("/object/%d" % n, ["/object/%d?ranges=ignore&break_at=%d" % (n, MiB),
                                         "/object/%d?ranges=ignore" % n])
        r = get(proxy, "/object/%d" % n, "-r", "10-")
        short_prefix(r, n)
        quiet_origin(n, 1)

    @t.check("a GET whose body is over replay_buffer (sent once) gets no resume; "
             "one whose body is kept is resumed with it")
    def _():
        n = 2 * MiB + 23
        before = h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                          '{route="default",result="failed"}')
        big = o.pattern_bytes(100 * 1024)
        origin.script("/object/%d" % n, ["/object/%d?break_at=%d" % (n, MiB),
                                         "/object/%d" % n])
        r = h.curl("http://127.0.0.1:%d/object/%d" % (proxy.port(0), n), "-X", "GET",
                   "--data-binary", "@-", "-H", "Content-Type: application/octet-stream",
                   input=big, timeout=30)
        short_prefix(r, n)
        quiet_origin(n, 1)
        h.eq(requests_for(n)[0].body_len, len(big), "the body went to the origin once")
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(urllib.parse.unquote(fields.get("note", "")), "upstream closed mid-body",
             "the note says the break, not a resume that could never be: %r" % fields)
        h.eq(fields.get("gave_up"), None, "no retry was due: %r" % fields)
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                      '{route="default",result="failed"}'), before, "resumes failed")
        # a body within replay_buffer is kept, and goes again with the resume
        n = 2 * MiB + 24
        small = o.pattern_bytes(1000)
        origin.script("/object/%d" % n, ["/object/%d?break_at=%d" % (n, MiB),
                                         "/object/%d" % n])
        r = h.curl("http://127.0.0.1:%d/object/%d" % (proxy.port(0), n), "-X", "GET",
                   "--data-binary", "@-", "-H", "Content-Type: application/octet-stream",
                   input=small, timeout=30)
        h.eq((r.exit_code, len(r.body)), (0, n), "curl exit code, body length")
        h.ok(r.body == o.pattern_bytes(n, o.object_offset(1)), "body spliced whole")
        reqs = requests_for(n)
        h.eq(len(reqs), 2, "requests the origin saw")
        h.eq([q.body_len for q in reqs], [len(small)] * 2, "the body went with the resume")
        h.ok(reqs[1].header("Range") is not None, "the second request is the resume")

    @t.check("a route with resume: false gets no resume")
    def _():
        n = 2 * MiB + 7
        r = download(n, ["?break_at=%d" % MiB, ""], host="off.test")
        short_prefix(r, n)
        quiet_origin(n, 1)

    @t.check("a break that retry.on does not name is no failed resume")
    def _():
        n = 2 * MiB + 16
        r = download(n, ["?break_at=%d" % MiB, ""], host="noreset.test")
        short_prefix(r, n)
        quiet_origin(n, 1)
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("tries"), "200 broken=reset", "logged trail")
        h.eq(urllib.parse.unquote(fields.get("note", "")), "upstream closed mid-body",
             "the note says the break, not a resume that never was")
        h.eq(h.metric(admin_metrics(proxy), "retryproxy_resumes_total",
                      '{route="no-reset",result="failed"}'), 0.0, "resumes failed")

    @t.check("resumes count against max_attempts")
    def _():
        n = 2 * MiB + 8
        r = download(n, ["?break_at=%d" % MiB, "?break_at=%d" % (MiB // 2), ""],
                     host="two.test")
        short_prefix(r, n)
        quiet_origin(n, 2)
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("gave_up"), "attempts", "gave_up")
        h.eq(fields.get("attempts"), "2", "attempts")
        h.eq(fields.get("bytes"), str(len(r.body)), "logged bytes are what the client got")

    @t.check("a retryable answer to the last allowed resume: the note says it was not retried, "
             "not that the download changed")
    def _():
        n = 2 * MiB + 10
        r = download(n, ["?break_at=%d" % MiB, "/status/503"], host="two.test")
        short_prefix(r, n)
        quiet_origin(n, 2)
        fields = h.access_fields(proxy.access_one("/object/%d" % n))
        h.eq(fields.get("gave_up"), "attempts", "gave_up")
        h.eq(urllib.parse.unquote(fields.get("note", "")),
             "not resumed at %d: resume answered 503, not retried (gave up: attempts)" % MiB, "note")

    @t.check("resumes count against the deadline")
    def _():
        n = 2 * MiB + 9
        # 200ms before the head and 900ms of backoff end past the 1s deadline
        r = download(n, ["?break_at=%d&delay=0.2" % MiB, ""], host="deadline.test")
        short_prefix(r, n)
        quiet_origin(n, 1)
        h.eq(h.access_fields(proxy.access_one("/object/%d" % n)).get("gave_up"), "deadline",
             "gave_up")
        text = admin_metrics(proxy)
        h.eq(h.metric(text, "retryproxy_resumes_total",
                    '{route="short-deadline",result="failed"}'), 1.0, "resumes failed")

    @t.check("a break while the upstream is down holds the resume, not on a pooled connection")
    def _():
        held_origin = t.origin(name="held")
        hproxy = t.proxy(CONFIG_HOLD, ORIGIN=held_origin.port)
        n = 2 * MiB + 15
        path = "/object/%d" % n
        held_origin.script(path, [path + "?break_at=%d&break_mode=reset&gate=held" % MiB, path])
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=get(hproxy, path)))
        thread.start()
        try:
            gate = held_origin.gate("held")
            gate.wait_reached(10 * h.SLOW)
            # a second connection, idle in the proxy's pool once answered
            h.eq(get(hproxy, "/bytes/10").status, 200, "GET on a second connection")
            h.eq(len(held_origin.connections), 2, "connections the origin accepted")
            # the upstream goes away under both; a POST (never pooled) finds
            # it gone and marks it down
            held_origin.stop_listening()
            h.eq(h.curl("-X", "POST", "http://127.0.0.1:%d/once/x" % hproxy.port(0)).status,
                 502, "POST while the port is closed")
            h.wait_until(lambda: " down " in h.curl("http://127.0.0.1:%d/upstreams"
                                                    % hproxy.port(1)).body.decode(),
                         5 * h.SLOW, "the upstream marked down")
            gate.release()
            # held: no resume reaches the origin, not even on the pooled connection
            h.wait_until(lambda: len(held_origin.requests_for(path)) > 1 or
                         h.metric(admin_metrics(hproxy), "retryproxy_held_requests", "") == 1.0,
                         5 * h.SLOW, "the broken download held, or resumed")
            time.sleep(0.5 * h.SLOW)
            h.eq(len(held_origin.requests_for(path)), 1, "requests for the object while down")
            h.eq(h.metric(admin_metrics(hproxy), "retryproxy_held_requests", ""), 1.0,
                 "held requests")
            h.ok(thread.is_alive(), "the download waits while the upstream is down")
        finally:
            held_origin.listen_again()
            thread.join(30 * h.SLOW)
        r = result["r"]
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = held_origin.requests_for(path)
        h.eq(len(reqs), 2, "requests the origin saw")
        k = int(reqs[1].header("Range")[6:-1])
        tries = h.access_fields(hproxy.access_one(path)).get("tries", "")
        m = re.fullmatch(r"200 broken=reset -> wait ([\d.]+)(ms|s) -> 206 resumed_at=%d" % k,
                         tries)
        held_ms = m and float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
        h.ok(m is not None and held_ms >= 500, "trail with the time held: %r" % tries)

    @t.check("a 503 to the resume while the upstream is down is held, then spliced")
    def _():
        held_origin = t.origin(name="held503")
        hproxy = t.proxy(CONFIG_HOLD, ORIGIN=held_origin.port)
        n = 2 * MiB + 17
        path = "/object/%d" % n
        held_origin.script(path, [path + "?break_at=%d" % MiB, "/status/503?hold=late", path])
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=get(hproxy, path)))
        thread.start()
        try:
            # the resume is at the origin, on its own connection, unanswered
            gate = held_origin.gate("late")
            gate.wait_reached(10 * h.SLOW)
            # meanwhile the upstream goes away, and a POST marks it down
            held_origin.stop_listening()
            h.eq(h.curl("-X", "POST", "http://127.0.0.1:%d/once/x" % hproxy.port(0)).status,
                 502, "POST while the port is closed")
            h.wait_until(lambda: " down " in h.curl("http://127.0.0.1:%d/upstreams"
                                                    % hproxy.port(1)).body.decode(),
                         5 * h.SLOW, "the upstream marked down")
            # the 503 comes on the connection made before: held, as any
            # retryable answer's retry while down, not given up
            gate.release()
            h.wait_until(lambda: not thread.is_alive() or
                         h.metric(admin_metrics(hproxy), "retryproxy_held_requests", "") == 1.0,
                         5 * h.SLOW, "the download held, or ended")
            h.ok(thread.is_alive(), "the download waits while the upstream is down")
        finally:
            held_origin.listen_again()
            thread.join(30 * h.SLOW)
        r = result["r"]
        h.eq(r.exit_code, 0, "curl exit code (%r)" % r.stderr)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        reqs = held_origin.requests_for(path)
        h.eq(len(reqs), 3, "requests the origin saw")
        k = int(reqs[2].header("Range")[6:-1])
        tries = h.access_fields(hproxy.access_one(path)).get("tries", "")
        h.ok(re.fullmatch(r"200 broken=reset -> wait 50ms -> 503 resumed_at=%d -> wait [\d.]+m?s "
                          r"-> 206 resumed_at=%d" % (k, k), tries) is not None,
             "trail: %r" % tries)
        h.eq(h.metric(admin_metrics(hproxy), "retryproxy_resumes_total",
                      '{route="default",result="ok"}'), 1.0, "resumes ok")

    @t.check("a resume waiting at SIGTERM is given up; the note names the shutdown, not a "
             "503 the client never got")
    def _():
        dproxy = t.proxy(CONFIG, ORIGIN=origin.port, FORMAT="text")
        n = 2 * MiB + 19
        path = "/object/%d" % n
        origin.script(path, [path + "?break_at=%d" % MiB, path])
        result = {}
        thread = threading.Thread(target=lambda: result.update(
            r=get(dproxy, path, "-H", "Host: long.test")))
        thread.start()
        try:
            h.wait_until(lambda: h.metric(admin_metrics(dproxy), "retryproxy_backoff_pending",
                                          "") == 1.0, 5 * h.SLOW, "the resume in its backoff")
            dproxy.terminate()
        finally:
            thread.join(10 * h.SLOW)
        short_prefix(result["r"], n)
        fields = h.access_fields(dproxy.access_one(path))
        h.eq(urllib.parse.unquote(fields.get("note", "")),
             "not resumed at %d: the proxy is shutting down: no try after attempt 1" % MiB,
             "note")

    @t.check("the JSON access log carries broken and resumed_at in the tries")
    def _():
        jproxy = t.proxy(CONFIG, ORIGIN=origin.port, FORMAT="json")
        n = 2 * MiB + 10
        path = "/object/%d" % n
        origin.script(path, [path + "?break_at=%d" % MiB, path])
        r = get(jproxy, path)
        h.eq(hashlib.sha256(r.body).hexdigest(), sha(n), "body sha256")
        k = int(requests_for(n)[1].header("Range")[6:-1])
        entry = jproxy.access_one(path)
        h.eq(entry["tries"], [{"status": 200, "broken": "reset", "wait_ms": 50},
                              {"status": 206, "resumed_at": k, "wait_ms": 0}], "tries")


h.run(scenario, __doc__)
