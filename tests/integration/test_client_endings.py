#!/usr/bin/env python3
"""Scenario: how a client connection ends when its response is cut short,
and an HTTP/1.0 client kept alive after the proxy's own error.

Client: raw sockets; HTTP/1.0 and HTTP/1.1 requests to sidecar listeners;
a client that reads a response head and then nothing for longer than
client_timeout; a keep-alive connection that sends a large head after a
reload raised max_header_bytes.
Origin: a raw server that starts a chunked 200 ("hello") and closes in its
middle; one that sends a chunked 200's last chunk and closes inside the
trailer section that follows; one that sends a chunked 200's last chunk
and then an invalid trailer field; one that reads a request to the end of its
connection and notes whether that came as a FIN or a reset; raw servers that answer 200 as soon as they have a request head,
leaving the body unread, one with a Content-Length, one with a body
delimited by the close that stops after a few bytes; the test origin (/close/N: N bytes delimited by the close); a
closed port.
Proxy: client_timeout 1s, max_header_bytes 64KiB, max_attempts 1; one with
client_timeout 2s for the reset's timing; for the
reload, one with client_timeout 60s (the keep-alive connection waits
through the reload, which may take longer than 1 s), max_header_bytes
64KiB, 1MiB after the reload.
Must hold:
- an HTTP/1.0 client, whose chunked response the proxy decodes and
  delimits by closing, sees a reset when the upstream breaks off, never a
  clean close after the cut body (an HTTP/1.1 client gets the chunked
  framing without its last chunk);
- an HTTP/1.1 client whose chunked response the upstream breaks off in
  its trailer section, after the last chunk went out, sees a reset too:
  RFC 9112 section 8 has a chunked body complete once its last chunk
  came, so a clean close would pass the cut response off as whole; and a
  client that leaves in its streamed chunked request body's trailer
  section, after the last chunk went upstream, has the upstream's
  connection reset, never closed cleanly after a body that looks whole;
  so does a trailer section that is invalid (a field name with a space)
  rather than cut, on either side: the client's response ends with a
  reset, and the upstream of a request refused for its trailer has its
  connection reset;
- an HTTP/1.0 client that asked for keep-alive gets the proxy's own 502
  with Connection: keep-alive, and its next request on the connection is
  answered;
- a response that arrives before the request body is all read (the
  proxy then closes, since the body's unread rest would be taken for the
  next request) says Connection: close, and the connection ends after it;
- a request body that stops arriving for client_timeout while a response
  delimited by the close is under way ends that response with a reset,
  never a clean close after which the cut body would look whole;
- a client that stops reading a close-delimited body is cut after
  client_timeout with a reset, not a clean close that would make the cut
  body look whole;
- a client that resets while its response's tail waits in the proxy has
  its connection closed at once (not kept until drain_timeout), also when
  the proxy waits to reset it after a broken-off body (not kept until
  client_timeout);
- a client that takes none of what was sent before a broken-off body is
  reset client_timeout (2s) after the break, neither sooner nor up to
  half as late again (its looks, every 20 ms, come later than that on
  the connection's timer: the wait is timed on the clock, not counted in
  looks);
- a keep-alive connection accepted before a reload that raised
  max_header_bytes sends a 300 KB head afterwards and gets 200 (its input
  limit follows the new config).
"""

import os
import select
import socket
import struct
import time

import harness as h
import rawserver

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@RAW@
  - address: 127.0.0.1:@PORT1@
    upstream: http://127.0.0.1:@DEAD@
  - address: 127.0.0.1:@PORT2@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT3@
    upstream: http://127.0.0.1:@EARLY@
  - address: 127.0.0.1:@PORT4@
    upstream: http://127.0.0.1:@EARLY_UNTIL_CLOSE@
  - address: 127.0.0.1:@PORT5@
    upstream: http://127.0.0.1:@TRAILER_CUT@
  - address: 127.0.0.1:@PORT6@
    upstream: http://127.0.0.1:@ENDINGS@
  - address: 127.0.0.1:@PORT7@
    upstream: http://127.0.0.1:@TRAILER_BAD@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 1s
  max_header_bytes: 64KiB
defaults:
  retry:
    max_attempts: 1
"""

# client_timeout far longer than any wait here
CONFIG_LONG_TIMEOUT = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
log: { level: info, format: text }
limits:
  drain_timeout: 2s
  client_timeout: 60s
  max_header_bytes: 64KiB
defaults:
  retry:
    max_attempts: 1
"""


def chunked_cut(conn, server):
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    time.sleep(0.3)
    conn.shutdown(socket.SHUT_WR)
    time.sleep(0.3)


def trailer_cut(conn, server):
    # the last chunk, then (once the proxy passed it on) the start of a
    # trailer section, and the close inside it
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n")
    time.sleep(0.3)
    conn.sendall(b"X-Checksum: 1")
    time.sleep(0.1)
    conn.shutdown(socket.SHUT_WR)
    time.sleep(0.3)


def trailer_bad(conn, server):
    # the last chunk, then (once the proxy passed it on) a trailer field
    # whose name holds a space: an invalid trailer section, not a cut one
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n")
    time.sleep(0.3)
    conn.sendall(b"X-Check sum: 1\r\n\r\n")
    time.sleep(0.3)


class Endings(rawserver.RawServer):
    """Reads each connection to its end and keeps what came and how it
    ended: (bytes, "FIN" or "RST")."""

    def __init__(self):
        self.ended = []
        super().__init__(conn_timeout=10 * h.SLOW)

    def serve(self, conn, cid):
        data = b""
        try:
            while True:
                got = conn.recv(65536)
                if not got:
                    self.ended.append((data, "FIN"))
                    return
                data += got
        except ConnectionResetError:
            self.ended.append((data, "RST"))


def answer_early(conn, server):
    # a whole 200 after the head, the body left unread; the connection
    # stays open, reading on, as a server that discards the body would
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
    while conn.recv(65536):
        pass


def answer_early_until_close(conn, server):
    # the start of a 200 delimited by the close, after the head alone; the
    # rest would come later, on a connection held open past client_timeout
    rawserver.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nthe start")
    time.sleep(4 * h.SLOW)


def scenario(t):
    raw = rawserver.RawServer(chunked_cut)
    t.defer(raw.stop)
    early = rawserver.RawServer(answer_early, conn_timeout=10 * h.SLOW)
    t.defer(early.stop)
    early_until_close = rawserver.RawServer(answer_early_until_close, conn_timeout=10 * h.SLOW)
    t.defer(early_until_close.stop)
    cut_in_trailer = rawserver.RawServer(trailer_cut)
    t.defer(cut_in_trailer.stop)
    bad_trailer = rawserver.RawServer(trailer_bad)
    t.defer(bad_trailer.stop)
    endings = Endings()
    t.defer(endings.stop)
    origin = t.origin()
    proxy = t.proxy(CONFIG, RAW=raw.port, DEAD=h.closed_port(), ORIGIN=origin.port,
                    EARLY=early.port, EARLY_UNTIL_CLOSE=early_until_close.port,
                    TRAILER_CUT=cut_in_trailer.port, ENDINGS=endings.port,
                    TRAILER_BAD=bad_trailer.port)

    @t.check("HTTP/1.0 client, chunked response cut by the upstream: a reset, not a clean close")
    def _():
        with socket.create_connection(("127.0.0.1", proxy.port(0))) as s:
            s.sendall(b"GET /x HTTP/1.0\r\nHost: a.example\r\n\r\n")
            data, end = h.read_to_end(s)
        h.ok(data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\nhello"),
             "the decoded start of the body: %r" % data)
        h.eq(end, "RST", "how the connection ended")
        with socket.create_connection(("127.0.0.1", proxy.port(0))) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
            data, end = h.read_to_end(s)
        h.ok(data.endswith(b"5\r\nhello\r\n"), "HTTP/1.1: chunked, no last chunk: %r" % data)

    @t.check("HTTP/1.1 client, chunked response cut by the upstream in its trailer section, after "
             "the last chunk went out: a reset, not a clean close")
    def _():
        with socket.create_connection(("127.0.0.1", proxy.port(5))) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: a.example\r\nTE: trailers\r\n\r\n")
            data, end = h.read_to_end(s)
        # RFC 9112 section 8: a chunked body is complete once its last
        # chunk came; a clean close would pass the cut one off as whole
        h.ok(data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"5\r\nhello\r\n0\r\n"),
             "the body up to its last chunk, the trailer's start held: %r" % data)
        h.eq(end, "RST", "how the connection ended")

    @t.check("a client that leaves in its chunked request body's trailer section, after the last "
             "chunk went upstream: the upstream's connection ends with a reset, not a clean close")
    def _():
        with socket.create_connection(("127.0.0.1", proxy.port(6))) as s:
            s.sendall(b"POST /upload HTTP/1.1\r\nHost: a.example\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n")
            time.sleep(0.3)
            s.sendall(b"X-Checksum: 1")
            time.sleep(0.2)
        h.wait_until(lambda: endings.ended, 5, "the upstream's connection ends")
        data, end = endings.ended[0]
        h.ok(data.endswith(b"5\r\nhello\r\n0\r\n"), "the upstream got the last chunk: %r" % data)
        # RFC 9112 section 8: complete once the last chunk came; a FIN would
        # let the upstream act on a request whose client gave up
        h.eq(end, "RST", "how the upstream's connection ended")

    @t.check("HTTP/1.1 client, chunked response whose trailer section is invalid, after the last "
             "chunk went out: a reset, not a clean close")
    def _():
        with socket.create_connection(("127.0.0.1", proxy.port(7))) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: a.example\r\nTE: trailers\r\n\r\n")
            data, end = h.read_to_end(s)
        h.ok(data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"5\r\nhello\r\n0\r\n"),
             "the body up to its last chunk, the invalid trailer held: %r" % data)
        # broken off past the last chunk: a clean close would pass it off
        # as whole, as for a trailer section cut
        h.eq(end, "RST", "how the connection ended")

    @t.check("a streamed chunked request body whose trailer section is invalid, after the last "
             "chunk went upstream: 400 to the client, the upstream's connection reset")
    def _():
        before = len(endings.ended)
        with socket.create_connection(("127.0.0.1", proxy.port(6))) as s:
            s.sendall(b"POST /upload?t=bad-trailer HTTP/1.1\r\nHost: a.example\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n")
            time.sleep(0.3)
            s.sendall(b"X-Check sum: 1\r\n\r\n")
            data, _ = h.read_to_end(s)
        h.ok(data.startswith(b"HTTP/1.1 400 "), "the client's answer: %r" % data[:60])
        h.wait_until(lambda: len(endings.ended) > before, 5, "the upstream's connection ends")
        data, end = endings.ended[before]
        h.ok(b"t=bad-trailer" in data and data.endswith(b"5\r\nhello\r\n0\r\n"),
             "the upstream got the last chunk: %r" % data)
        h.eq(end, "RST", "how the upstream's connection ended")

    @t.check("HTTP/1.0 keep-alive client: the proxy's own 502 says keep-alive, the next request works")
    def _():
        with socket.create_connection(("127.0.0.1", proxy.port(1))) as s:
            s.settimeout(5 * h.SLOW)
            s.sendall(b"GET /x HTTP/1.0\r\nHost: a.example\r\nConnection: keep-alive\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(65536)
                h.ok(chunk, "the connection closed before the 502's head: %r" % head)
                head += chunk
            h.ok(head.startswith(b"HTTP/1.1 502 "), "status line: %r" % head[:40])
            h.ok(b"\r\nConnection: keep-alive\r\n" in head, "502 head: %r" % head)
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            rest = head.split(b"\r\n\r\n", 1)[1]
            while len(rest) < length:
                rest += s.recv(65536)
            s.sendall(b"GET /x HTTP/1.0\r\nHost: a.example\r\nConnection: keep-alive\r\n\r\n")
            again = s.recv(65536)
        h.ok(again.startswith(b"HTTP/1.1 502 "), "the second request's answer: %r" % again[:40])

    @t.check("a response that comes before the request body is all read says Connection: close, "
             "and the connection closes after it")
    def _():
        with h.RawConn(proxy.port(3), timeout=5 * h.SLOW) as c:
            # 1000 of the 100000 bytes announced: the rest never comes
            c.send(h.request("POST", "/upload?t=early", "a.example",
                             [("Content-Length", "100000")]) + b"x" * 1000)
            r = c.read_response()
            h.eq((r.status, r.body), (200, b"early"), "the early response")
            h.eq(r.header("Connection"), "close",
                 "its Connection field (the proxy closes after it: %r)" % r.raw_head)
            h.ok(c.closed_within(3 * h.SLOW), "the connection did not close after the response")

    @t.check("a request body that stalls under a close-delimited response: the response ends "
             "with a reset, not a clean close")
    def _():
        for version in ("HTTP/1.1", "HTTP/1.0"):
            with socket.create_connection(("127.0.0.1", proxy.port(4))) as s:
                # 10 of the 100000 bytes announced, then nothing for longer
                # than client_timeout (1 s)
                s.sendall(h.request("POST", "/upload?t=stall", "a.example",
                                    [("Content-Length", "100000")], version=version)
                          + b"x" * 10)
                data, end = h.read_to_end(s)
            h.ok(data.endswith(b"\r\n\r\nthe start"), "%s: what came: %r" % (version, data))
            h.eq(end, "RST", "%s: how the connection ended after the cut body" % version)

    @t.check("a client that stops reading a close-delimited body is cut with a reset")
    def _():
        size = 64 << 20
        c = h.RawConn(proxy.port(2), rcvbuf=h.CAPACITY_RCVBUF)
        c.send(h.request("GET", "/close/%d?t=stopped" % size, "a.example"))
        c.read_head()
        time.sleep(4.0 * h.SLOW)  # past client_timeout (1 s) twice over
        data, end = h.read_to_end(c.sock)
        got = len(c.buf) + len(data)
        c.close()
        h.ok(got < size, "the client got the whole %d bytes while not reading" % size)
        h.eq(end, "RST", "how the connection ended after %d of %d bytes" % (got, size))

    @t.check("a client that resets while the tail of its response is still queued in the "
             "proxy: its connection closes at once")
    def _():
        def open_fds():
            return len(os.listdir("/proc/%d/fd" % proxy.pid))

        c, _, _ = h.response_tail_in_proxy(proxy, "reset-tail", port=proxy.port(2))
        before = open_fds()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        h.wait_until(lambda: open_fds() < before, 3 * h.SLOW,
                     "the proxy to close the reset client's connection (%d fds open)" % before)

    @t.check("a client that resets while the proxy waits to reset it after a broken-off body: "
             "its connection closes at once, not after client_timeout")
    def _():
        waiting = t.proxy(CONFIG_LONG_TIMEOUT, ORIGIN=origin.port)

        def open_fds():
            return len(os.listdir("/proc/%d/fd" % waiting.pid))

        before = open_fds()
        # an HTTP/1.0 client gets the chunked body decoded, delimited by the
        # close: the break ends it with a reset, once the client has taken
        # what it was sent, which this one, not reading, never does
        c = h.RawConn(waiting.port(), rcvbuf=16 << 10)
        c.send(h.request("GET", "/object/400000?chunked=1&break_at=300000&t=rst-waiting",
                         "a.example", version="HTTP/1.0"))
        waiting.access_one("rst-waiting")
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        h.wait_until(lambda: open_fds() <= before, 3 * h.SLOW,
                     "the proxy to close the reset client's connection (%d fds open)" % before)

    @t.check("a client that takes nothing of what came before a broken-off body is reset after "
             "client_timeout (2s), not half as late again")
    def _():
        quick = t.proxy(CONFIG_LONG_TIMEOUT.replace("client_timeout: 60s", "client_timeout: 2s"),
                        ORIGIN=origin.port)
        # as above: the HTTP/1.0 client's decoded body ends with a reset once
        # it has taken what it was sent, which this one, not reading, never
        # does; it is not read, only watched for the reset (POLLERR/POLLHUP)
        c = h.RawConn(quick.port(), rcvbuf=16 << 10)
        sent = time.monotonic()
        c.send(h.request("GET", "/object/400000?chunked=1&break_at=300000&t=rst-late",
                         "a.example", version="HTTP/1.0"))
        quick.access_one("rst-late")
        logged = time.monotonic()
        watch = select.poll()
        watch.register(c.sock, 0)
        h.ok(watch.poll(10000 * h.SLOW), "a reset within 10 s of the broken-off body")
        reset = time.monotonic()
        c.close()
        h.ok(reset - sent >= 2.0, "reset %.3f s after the request: before client_timeout"
             % (reset - sent))
        # the break came before its line was logged: this is at most the wait
        h.ok(reset - logged < 2.4, "reset %.3f s after the broken-off body's line: client_timeout "
             "is 2 s" % (reset - logged))

    @t.check("a connection from before a reload that raised max_header_bytes sends a larger head")
    def _():
        # client_timeout 60s: with 1 s, a reload slower than that (under
        # load) had the proxy close the idle connection before its next head
        reloaded = t.proxy(CONFIG_LONG_TIMEOUT, ORIGIN=origin.port)
        old = h.RawConn(reloaded.port(), timeout=10 * h.SLOW)
        old.send(h.request("GET", "/bytes/3?t=before", "a.example"))
        h.eq(old.read_response().status, 200, "the first request")
        reloaded.reload(h.read_file(reloaded.config_path)
                        .replace("max_header_bytes: 64KiB", "max_header_bytes: 1MiB"))
        big = [("X-Big-%d" % i, "v" * 10000) for i in range(30)]
        old.send(h.request("GET", "/bytes/3?t=after", "a.example", big))
        r = old.read_response()
        old.close()
        h.eq(r.status, 200, "the 300 KB head's status")


h.run(scenario, __doc__, timeout=90)
