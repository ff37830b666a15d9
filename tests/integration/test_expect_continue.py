#!/usr/bin/env python3
"""Scenario: Expect: 100-continue, on bodies the proxy streams and on bodies
it keeps to re-send.

Client: curl posting with Expect: 100-continue; raw sockets that send a
head with Expect: 100-continue and hold the body back until a 100 Continue
arrives (Content-Length and chunked), to a route that streams bodies
(max_attempts 1) and to one that keeps them (a PUT with max_attempts 2);
one whose Expect is named in Connection; one whose upstream answers 417,
and one whose upstream answers 401 before the body; one whose
Content-Length is over max_body_bytes; an HTTP/1.0 one. Through a second
proxy with client_timeout 1s, raw clients that hold their body back
while raw upstreams take longer than that: one answers 403 at once and
sends its body's second half 2.5 s later, one sends its 100 after 2 s.
Origin: echoes what it got; answers Expect with its own 100 Continue, or
with 417 (?expect=reject), or not at all (?expect=ignore); /early/401
answers before reading the body.
Must hold (RFC 9110 section 10.1.1): a streamed body's expectation goes to
the origin, and the client gets exactly the origin's 100 (forwarded, with
Via) before it sends the body, then the final response (from an origin
that ignores Expect, the final response alone once curl stopped waiting
and sent the body); a final status the
origin sends instead reaches the client without any 100, and the body is
never sent; a kept body's expectation is the proxy's to answer (README,
"Deviations"): one 100 of its own, no Expect at the origin, the body
byte-exact; so is one whose Expect the client made hop-by-hop; a body
announced over max_body_bytes gets 413 without 100 Continue and without
being sent; an HTTP/1.0 request gets no 100 Continue; a client with its
expectation forwarded owes no body before the upstream's 100 reaches it,
so neither its wait for the 100 nor its withheld body after a final
status is cut for client_timeout: it gets the late 100, or the whole 403;
but one that stopped waiting, began its body and stalled gets 408 after
client_timeout, as without Expect, not a 504 after try_timeout that blames
an upstream still reading.
"""

import hashlib
import json
import os
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  client_timeout: 5s
  max_body_bytes: 1MiB
  # over it, so that a chunked body no retry needs streams (under it, one
  # is read whole to meet the limit before any try: test_body_limit)
  replay_buffer: 64KiB
defaults:
  retry:
    max_attempts: 1
routes:
  - name: kept
    match: { path_prefix: /echo/kept }
    retry:
      max_attempts: 2
"""

# client_timeout 1s, for a client that waits for the upstream's answer to
# its Expect longer than that, with its body unsent
SHORT_CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  client_timeout: 1s
defaults:
  retry:
    max_attempts: 1
"""

PROXY_100 = b"HTTP/1.1 100 Continue\r\n\r\n"


def answer_instead_slowly(conn, server):
    # a final status at once, no 100 and the body unread; the response's
    # body comes in two parts, the second after more than client_timeout
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 10\r\nConnection: close\r\n\r\nfirst")
    time.sleep(2.5 * h.SLOW)
    conn.sendall(b"-last")
    time.sleep(0.5)


def ignore_expect(conn, server):
    # no answer to the Expect: the body is simply read, as it comes
    rawserver.read_head(conn)
    while conn.recv(65536):
        pass


def continue_late(conn, server):
    # the 100 after more than client_timeout, then the body is read
    data = rawserver.read_head(conn)
    time.sleep(2 * h.SLOW)
    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = data.split(b"\r\n\r\n", 1)[1]
    while len(body) < 5:
        got = conn.recv(65536)
        if not got:
            return
        body += got
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + body)
    time.sleep(0.5)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def expect_fields(seen):
    return [v for n, v in seen["headers"] if n.lower() == "expect"]


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG)
    auth = origin.authority

    def ask(method, path, framing, extra=""):
        """A head with Expect: 100-continue, sent; the open connection."""
        c = h.RawConn(proxy.port())
        c.send(("%s %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\n%s%s\r\n"
                % (method, origin.url(path), auth, extra, framing)).encode())
        return c

    def forwarded_100(c):
        """The interim response before the body: the origin's, passed on."""
        interim = c.read_head(timeout=5)
        h.eq(interim.status, 100, "first response head before the body is sent")
        h.eq(interim.header("Via"), "1.1 retryproxy", "Via on the 100 (the origin's, forwarded)")
        return interim

    def curl_post(size, target, wait_s):
        """curl posting size random bytes with Expect: 100-continue, waiting
        up to wait_s for a 100; its result, once the body reached the origin
        whole (what the origin saw, as JSON, is checked here)."""
        body = os.urandom(size)
        path = os.path.join(t.tmp, "body-%d.bin" % size)
        with open(path, "wb") as f:
            f.write(body)
        r = h.curl("-H", "Expect: 100-continue", "--expect100-timeout", str(wait_s),
                   "--data-binary", "@" + path, origin.url(target), proxy=proxy.url)
        h.eq(r.exit_code, 0, "curl exit (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (len(body), sha(body)), "body at the origin")
        return r, seen

    @t.check("curl, streamed body: the origin's 100 then 200; the origin got Expect and the body")
    def _():
        r, seen = curl_post(300 * 1024, "/echo?t=curl", 10)
        h.eq([s for s, _ in r.heads], [100, 200], "response heads curl saw")
        h.ok(("Via", "1.1 retryproxy") in r.heads[0][1], "the 100 is the origin's: %r" % r.heads[0][1])
        h.eq(expect_fields(seen), ["100-continue"], "Expect at the origin")

    @t.check("curl, streamed body, an origin that ignores Expect: curl sends after its own wait; 200")
    def _():
        r, _seen = curl_post(20 * 1024, "/echo?t=ignored&expect=ignore", 1)
        h.eq([s for s, _ in r.heads], [200], "response heads curl saw")

    @t.check("raw, streamed, Content-Length: one 100, the origin's, before the body; then 200")
    def _():
        with ask("POST", "/echo?t=rawcl", "Content-Length: 11\r\n") as c:
            forwarded_100(c)
            c.send(b"hello world")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (11, sha(b"hello world")), "body at the origin")
        h.eq(expect_fields(seen), ["100-continue"], "Expect at the origin")

    @t.check("raw, streamed, chunked: the origin's 100 before the body, body exact at the origin")
    def _():
        with ask("PUT", "/echo?t=rawchunked", "Transfer-Encoding: chunked\r\n") as c:
            forwarded_100(c)
            c.send(b"6\r\nchunky\r\n0\r\n\r\n")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (6, sha(b"chunky")), "body at the origin")
        h.eq(expect_fields(seen), ["100-continue"], "Expect at the origin")

    @t.check("streamed, the origin answers 417 or 401 instead of 100: that reaches the client, no body sent")
    def _():
        for path, status in (("/echo?t=reject&expect=reject", 417), ("/early/401?t=early", 401)):
            with ask("POST", path, "Content-Length: 5\r\n") as c:
                r = c.read_response(timeout=5, skip_1xx=False)
                h.eq(r.status, status, "the first response head for %s (%r)" % (path, r))
                h.ok(c.closed_within(5), "the connection with the unsent body closes")
            got = origin.requests_for(path.split("?")[0])
            h.eq([req.body_len for req in got if "t=" + path.split("t=")[1].split("&")[0] in req.target],
                 [0], "body bytes at the origin for %s" % path)

    @t.check("kept body (retryable PUT): the proxy's own 100, no Expect at the origin, body exact")
    def _():
        with ask("PUT", "/echo/kept?t=kept", "Content-Length: 11\r\n") as c:
            h.eq(c.read_until(b"\r\n\r\n", timeout=5), PROXY_100, "the proxy's 100")
            c.send(b"hello world")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], seen["body_sha256"]), (11, sha(b"hello world")), "body at the origin")
        h.eq(expect_fields(seen), [], "Expect at the origin")

    @t.check("streamed, Expect named in Connection: not passed on, so the proxy's own 100")
    def _():
        with ask("POST", "/echo?t=hop", "Content-Length: 3\r\n", "Connection: expect\r\n") as c:
            h.eq(c.read_until(b"\r\n\r\n", timeout=5), PROXY_100, "the proxy's 100")
            c.send(b"abc")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "final status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_len"], expect_fields(seen)), (3, []), "body and Expect at the origin")

    @t.check("Content-Length over max_body_bytes with Expect: 413 without 100 and without the body")
    def _():
        before = len(origin.requests)
        with ask("POST", "/echo?t=toolarge", "Content-Length: %d\r\n" % (2 << 20)) as c:
            r = c.read_response(timeout=5, skip_1xx=False)
        h.check_error_response(r, 413)
        h.eq(len(origin.requests), before, "requests that reached the origin")

    @t.check("HTTP/1.0 request with Expect: no 100 Continue, the body is simply read")
    def _():
        with h.RawConn(proxy.port()) as c:
            c.send(("POST %s HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
                    % origin.url("/echo?t=h10")).encode())
            h.ok(c.silent_for(1.0), "the proxy sent something before the body: %r" % bytes(c.buf))
            c.send(b"abcde")
            r = c.read_response(skip_1xx=False)
        h.eq(r.status, 200, "status (%r)" % r)
        seen = json.loads(r.body)
        h.eq((seen["body_sha256"], expect_fields(seen)), (sha(b"abcde"), []), "body and Expect at the origin")

    short = t.proxy(SHORT_CONFIG)

    def ask_raw(serve, length, path="/x"):
        """A streamed POST with Expect and a Content-Length, through the
        proxy with a short client_timeout to a raw upstream that serves
        with serve; the open connection, its body not sent."""
        raw = rawserver.RawServer(serve, conn_timeout=40 * h.SLOW)
        t.defer(raw.stop)
        c = h.RawConn(short.port())
        c.send(("POST http://127.0.0.1:%d%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                % (raw.port, path, raw.port, length)).encode())
        return c

    @t.check("streamed, a final status instead of 100 whose body takes longer than client_timeout: "
             "all of it reaches the client, which owes no body")
    def _():
        with ask_raw(answer_instead_slowly, 1000) as c:
            r = c.read_response(timeout=10 * h.SLOW, skip_1xx=False)
            h.eq((r.status, r.body), (403, b"first-last"), "the response")
            h.ok(c.closed_within(5), "the connection with the unsent body closes")

    @t.check("streamed, the upstream's 100 comes after more than client_timeout: "
             "the client waiting for it gets it, then 200")
    def _():
        with ask_raw(continue_late, 5) as c:
            interim = c.read_head(timeout=10 * h.SLOW)
            h.eq(interim.status, 100, "the first response head")
            c.send(b"hello")
            r = c.read_response(timeout=10 * h.SLOW, skip_1xx=False)
        h.eq((r.status, r.body), (200, b"hello"), "the response")


    @t.check("streamed, an upstream that ignores Expect, a client that stops waiting, sends half "
             "its body and stalls: 408 after client_timeout, not the upstream's 504")
    def _():
        with ask_raw(ignore_expect, 1000, "/stall-after-wait") as c:
            time.sleep(0.3)  # shorter than curl's wait, as any client may choose
            c.send(b"a" * 500)
            start = time.monotonic()
            r = c.read_response(timeout=10 * h.SLOW, skip_1xx=False)
            h.check_error_response(r, 408)
            h.ok(time.monotonic() - start < 5 * h.SLOW, "408 came %.1fs after the stall"
                 % (time.monotonic() - start))
            h.ok(c.closed_within(5), "the connection closes after the 408")
        fields = h.access_fields(short.access_one("stall-after-wait"))
        h.eq(fields.get("status"), "408", "access-log status (%r)" % fields)


h.run(scenario, __doc__)
