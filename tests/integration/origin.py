#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 test origin for retryproxy's integration tests.

In a test:

    origin = Origin().start()            # or Origin(tls=(cert, key))
    origin.script('/p', ['/status/503', '/reset/request', '/bytes/10'])
    origin.on_accept(['reset', 'serve'])   # per connection, before reading
    gate = origin.gate('g1')               # for /gate/g1: gate.wait_reached(), gate.release()
    ... requests go to origin.port ...
    origin.requests[-1].header('Via'); origin.connections[-1].sni
    origin.wait_for(lambda o: len(o.requests) >= 3, timeout=5)
    origin.stop()

Standalone (used by the docker-compose example):

    python3 origin.py --port 8081 [--host 127.0.0.1] [--tls CERT KEY]

What each request gets is chosen by its path (see Origin._dispatch for the
full list; query parameters tune it):

    /status/<code>      that status; body "status <code>\\n" unless it has none
                        (HEAD, 1xx, 204, 304); ?retry_after=V adds Retry-After,
                        ?cl=N puts a Content-Length on a 304 without a body
    /bytes/<n>          n pattern bytes with Content-Length
    /chunked/<n>        n pattern bytes chunked (?chunk=K bytes per chunk,
                        ?trailer=1 adds a trailer field)
    /close/<n>          n pattern bytes with no length: the end is the close
                        (?stall=1: after them, send nothing more, never close;
                        ?unclean=1 on TLS: close without a close_notify, as a
                        cut connection would; every other TLS end has one)
    /echo               JSON describing the request as received (headers in
                        order, body length and sha256, connection id)
    /gate/<name>        ?first=N&rest=M: sends the head and N bytes, sets
                        gate(name).reached, waits for gate(name).release(),
                        then sends M more (?chunked=1 for chunked framing,
                        ?status=N for a status other than 200)
    /slow/<n>           n bytes written one at a time (?delay=S between bytes,
                        ?head=1 drips the head too)
    /delay/<s>          waits s seconds, then 200 "delayed\\n"
    /reset/head         RST after the request head, before reading the body
    /reset/request      RST after reading the whole request
    /early/N            answer N (Connection: close) before reading the body, then close:
                        the unread body turns the close into a reset (?size=S: S
                        pattern bytes with no length, then a reset with no FIN)
    /reset/body         ?n=N: announces N bytes, sends N/2, then RST
    /reset/status       sends half a status line, then RST
    /drop               reads the request, closes (FIN) without answering
    /hang               reads the request, never answers
    /respheaders        a fixed list of tricky response headers (see below)
    /object/<n>         a downloadable object of n bytes, Range-capable: see
                        Origin._object (ETag strong/weak/none, Last-Modified,
                        Range and If-Range honoured or not, ?version=V for
                        other content, ?break_at=N to close or reset after
                        N body bytes)
    /bad/<kind>         a malformed response: cl-dup, te-cl, obs-fold,
                        status, bare-lf, space-colon, bad-chunk; or
                        gzip-chunked: "hello" in Transfer-Encoding: gzip,
                        chunked, valid, but not for an HTTP/1.0 client
    anything else       404 "not found\\n" (or /echo with echo_unknown=True)

Any path also takes ?delay=S (wait before the head), ?hold=NAME (then,
before the head, set gate(NAME).reached and wait for its release()),
?close=1 (close the connection after the response without saying so,
which makes a pooled connection stale), ?conn_close=1 (say Connection:
close and close),
?http10=1 (answer with an HTTP/1.0 status line, and close after it, as
an HTTP/1.0 server without keep-alive does; ?http10=keep: with
Connection: keep-alive, and keep the connection),
?retry_after=V, ?retry_after_ms=V (retry-after-ms), ?should_retry=V
(x-should-retry), ?status=N (for /echo, /bytes, /chunked, /close and
/slow), ?expect=ignore (do not answer Expect: 100-continue) and
?expect=reject (answer it with 417), ?reason=TEXT (the status line's
reason phrase) and ?hdr=Name:Value (one more response header field), so
each scripted try can be told apart.

Every connection is recorded (peer, TLS details, how it ended) and every
request (method, target, version, raw head, headers in order, body length
and sha256, connection id, response bytes sent). Connections are keep-alive
unless the request or the behaviour says otherwise.
"""

import argparse
import gzip
import hashlib
import http
import json
import random
import select
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

# Generated bodies repeat a pseudo-random block of prime length, so a
# duplicated or dropped slice shows in the sha256 whatever the chunking.
PATTERN_PERIOD = 65521
PATTERN = random.Random(20240607).randbytes(PATTERN_PERIOD)
_SEND_CHUNK = 1 << 20
_PATTERN_WIDE = PATTERN * (2 + _SEND_CHUNK // PATTERN_PERIOD)

# "hello" in the gzip coding, the same bytes every run (/bad/gzip-chunked).
GZIP_HELLO = gzip.compress(b"hello", mtime=0)

# Bodies above this are hashed and counted but not kept in memory.
BODY_KEEP_LIMIT = 16 << 20


def pattern_chunks(n, offset=0, chunk=_SEND_CHUNK):
    """Yield memoryviews covering pattern bytes [offset, offset + n)."""
    wide = memoryview(_PATTERN_WIDE)
    pos = offset
    end = offset + n
    while pos < end:
        size = min(chunk, end - pos)
        start = pos % PATTERN_PERIOD
        yield wide[start:start + size]
        pos += size


def pattern_bytes(n, offset=0):
    """The first n pattern bytes (from offset) as one bytes object."""
    return b"".join(bytes(c) for c in pattern_chunks(n, offset))


def object_offset(version):
    """Where /object content of this version starts in the pattern."""
    return (version - 1) * 7919


def pattern_sha256(n):
    """sha256 hex digest of the first n pattern bytes."""
    h = hashlib.sha256()
    for c in pattern_chunks(n):
        h.update(c)
    return h.hexdigest()


class Connection:
    """One accepted connection, as the origin saw it."""

    def __init__(self, cid, peer, tls):
        self.id = cid
        self.peer = peer
        self.tls = tls
        self.sni = None              # server name the client sent, if any
        self.tls_version = None
        self.session_reused = None   # True when the client resumed a session
        self.psk_identities = None   # TLS 1.3: the tickets the ClientHello offered (bytes each)
        self.handshake_error = None
        self.accepted_at = time.monotonic()
        self.request_count = 0
        self.closed = threading.Event()
        self.closed_at = None
        self.close_reason = None     # peer-eof, peer-reset, origin, origin-reset, stop, error: ...
        self.tls_end = None          # TLS: how the peer's side ended, "close_notify" or "unclean"
        self.end_unclean = False     # TLS: end this connection without a close_notify

    def __repr__(self):
        return ("Connection(id=%d peer=%s requests=%d closed=%s)"
                % (self.id, self.peer, self.request_count, self.close_reason))


class Request:
    """One request, as the origin received it."""

    def __init__(self, conn, index, head):
        self.conn_id = conn.id
        self.index = index            # 0 for the first request on its connection
        self.head = head              # raw bytes up to and including CRLF CRLF
        self.method = ""
        self.target = ""
        self.version = ""
        self.path = ""
        self.query = {}
        self.headers = []             # [(name, value)] in order, as sent (latin-1)
        self.anomalies = []           # strictness violations noticed while parsing
        self.framing = "none"         # none, length, chunked
        self.body = bytearray()       # kept up to BODY_KEEP_LIMIT
        self.body_len = 0
        self.body_sha256 = None       # set once the body is complete
        self.trailers = []
        self.chunk_extensions = []    # each chunk-size line's, after its ';'
        self.complete = threading.Event()
        self.sent_bytes = 0           # response bytes written so far, head included
        self.received_at = time.monotonic()
        self.finished_at = None       # when the response was fully sent (or the behaviour ended)
        self.error = None
        self._sha = hashlib.sha256()

    def header(self, name):
        """The first value of a header (case-insensitive), or None."""
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def describe(self):
        return {
            "method": self.method,
            "target": self.target,
            "version": self.version,
            "headers": [[n, v] for n, v in self.headers],
            "body_len": self.body_len,
            "body_sha256": self.body_sha256,
            "framing": self.framing,
            "trailers": [[n, v] for n, v in self.trailers],
            "conn_id": self.conn_id,
            "index": self.index,
        }

    def __repr__(self):
        return "Request(%s %s conn=%d body=%d)" % (self.method, self.target, self.conn_id, self.body_len)


class Gate:
    """Lets a test hold a response half-sent: reached is set when the first
    part is out; the rest goes once release() is called."""

    def __init__(self, name):
        self.name = name
        self.reached = threading.Event()
        self.released = threading.Event()

    def wait_reached(self, timeout=10):
        if not self.reached.wait(timeout):
            raise AssertionError("origin never reached gate %r within %ss" % (self.name, timeout))

    def release(self):
        self.released.set()


class _PeerGone(Exception):
    pass


class _BadRequest(Exception):
    pass


class _Stop(Exception):
    """Raised inside a handler when the connection must end now."""


class _DropConnection(_Stop):
    """Raised inside a handler to close with a FIN and no response."""


def _client_hello_psk(record):
    """The identities (session tickets) in a TLS record holding a
    ClientHello's pre_shared_key extension (RFC 8446 section 4.2.11): a
    list, empty when it offers none, None when the record cannot be read
    as a whole ClientHello."""
    try:
        if record[0] != 22 or record[5] != 1:       # handshake, ClientHello
            return None
        end = 9 + int.from_bytes(record[6:9], "big")
        if end > len(record):
            return None                              # split over records
        i = 9 + 2 + 32                               # legacy_version, random
        i += 1 + record[i]                           # legacy_session_id
        i += 2 + int.from_bytes(record[i:i + 2], "big")  # cipher_suites
        i += 1 + record[i]                           # compression methods
        ext_end = i + 2 + int.from_bytes(record[i:i + 2], "big")
        i += 2
        while i + 4 <= ext_end:
            kind = int.from_bytes(record[i:i + 2], "big")
            size = int.from_bytes(record[i + 2:i + 4], "big")
            i += 4
            if kind == 41:                           # pre_shared_key
                ids_end = i + 2 + int.from_bytes(record[i:i + 2], "big")
                j = i + 2
                identities = []
                while j < ids_end:
                    n = int.from_bytes(record[j:j + 2], "big")
                    identities.append(bytes(record[j + 2:j + 2 + n]))
                    j += 2 + n + 4                   # obfuscated_ticket_age
                return identities
            i += size
        return []
    except IndexError:
        return None


def peek_psk_identities(sock, timeout=10):
    """Read (without taking it off the socket) the client's first TLS
    record and return the tickets its ClientHello offers, as
    _client_hello_psk does; None when the client sent no whole record (it
    closed, or sent something else)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            data = sock.recv(16389, socket.MSG_PEEK)
            if not data or data[0] != 22:
                return None
            if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
                return _client_hello_psk(data[:5 + int.from_bytes(data[3:5], "big")])
            time.sleep(0.002)
    except OSError:
        pass
    return None


def unclean_tls_eof(e):
    """Is e how ssl reports an EOF without a close_notify? SSLEOFError, or
    in Python builds before 3.11.4 (Debian 12's) a plain SSLError whose
    reason is OpenSSL 3's UNEXPECTED_EOF_WHILE_READING."""
    return isinstance(e, ssl.SSLEOFError) or (
        isinstance(e, ssl.SSLError) and getattr(e, "reason", None) == "UNEXPECTED_EOF_WHILE_READING")


def _recv(sock, conn, n):
    """sock.recv(n), b"" at the peer's end; on TLS it notes in conn.tls_end
    whether that end came with a close_notify."""
    try:
        data = sock.recv(n)
    except ssl.SSLError as e:
        if not unclean_tls_eof(e):
            raise
        if conn is not None:
            conn.tls_end = "unclean"
        return b""
    if not data and conn is not None and isinstance(sock, ssl.SSLSocket):
        conn.tls_end = "close_notify"
    return data


class _Reader:
    """Buffered reads on a socket."""

    def __init__(self, sock, conn=None):
        self.sock = sock
        self.conn = conn
        self.buf = bytearray()

    def _fill(self):
        data = _recv(self.sock, self.conn, 65536)
        if not data:
            return False
        self.buf += data
        return True

    def read_head(self, limit=1 << 20):
        """Bytes up to and including the blank line; None on a clean EOF."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = bytes(self.buf[:i + 4])
                del self.buf[:i + 4]
                return head
            if len(self.buf) > limit:
                raise _BadRequest("request head over %d bytes" % limit)
            if not self._fill():
                if self.buf:
                    raise _PeerGone("peer closed in the middle of a request head")
                return None

    def read_line(self, limit=65536):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > limit:
                raise _BadRequest("line over %d bytes" % limit)
            if not self._fill():
                raise _PeerGone("peer closed in the middle of a line")

    def read_some(self, n):
        if not self.buf and not self._fill():
            raise _PeerGone("peer closed in the middle of a body")
        chunk = bytes(self.buf[:n])
        del self.buf[:n]
        return chunk


def _status_line(code, reason=None):
    if reason is None:
        try:
            reason = http.HTTPStatus(code).phrase
        except ValueError:
            reason = "Whatever"
    return "HTTP/1.1 %d %s\r\n" % (code, reason)


class _Exchange:
    """One request being answered: the socket, the parsed request, params."""

    def __init__(self, origin, conn, sock, reader, req):
        self.origin = origin
        self.conn = conn
        self.sock = sock
        self.reader = reader
        self.req = req
        self.params = req.query
        self.keep_alive = True

    def param(self, name, default=None):
        return self.params.get(name, default)

    def send(self, data):
        self.sock.sendall(data)
        self.req.sent_bytes += len(data)

    def head(self, code, headers):
        """Send a status line and header fields (a list of (name, value))."""
        lines = [_status_line(code, self.param("reason"))]
        if self.param("http10"):
            lines[0] = "HTTP/1.0" + lines[0][len("HTTP/1.1"):]
            if self.param("http10") == "keep":
                headers = headers + [("Connection", "keep-alive")]
            else:
                self.keep_alive = False
        if self.param("retry_after") is not None:
            headers = headers + [("Retry-After", self.param("retry_after"))]
        if self.param("retry_after_ms") is not None:
            headers = headers + [("retry-after-ms", self.param("retry_after_ms"))]
        if self.param("should_retry") is not None:
            headers = headers + [("x-should-retry", self.param("should_retry"))]
        if self.param("hdr") is not None:
            name, _, value = self.param("hdr").partition(":")
            headers = headers + [(name.strip(), value.strip())]
        if self.param("conn_close"):
            headers = headers + [("Connection", "close")]
            self.keep_alive = False
        elif self.req.version == "HTTP/1.0" and self.keep_alive:
            headers = headers + [("Connection", "keep-alive")]
        for name, value in headers:
            lines.append("%s: %s\r\n" % (name, value))
        lines.append("\r\n")
        self.send("".join(lines).encode("latin-1"))

    def simple(self, code, body=b"", headers=(), content_type="text/plain"):
        """A complete response with Content-Length (no body for HEAD)."""
        hdrs = [("Content-Type", content_type), ("Content-Length", str(len(body)))] + list(headers)
        self.head(code, hdrs)
        if self.req.method != "HEAD" and body:
            self.send(body)

    def send_pattern(self, n, offset=0):
        for c in pattern_chunks(n, offset):
            self.sock.sendall(c)
            self.req.sent_bytes += len(c)

    def reset(self):
        """Close with RST (SO_LINGER 0) and stop handling this connection."""
        self.origin._reset(self.sock, self.conn)
        raise _Stop()


class Origin:
    """The test origin. Thread-per-connection; all records are guarded by a
    condition variable so tests can wait on them."""

    def __init__(self, host="127.0.0.1", port=0, tls=None, tls_max_version=None,
                 tls_min_version=None, name="origin", echo_unknown=False, backlog=128,
                 num_tickets=None):
        self.host = host
        self.backlog = backlog             # listen queue; raise it for bursts of connections
        self.name = name
        self.echo_unknown = echo_unknown   # unknown paths get /echo instead of 404
        self._requested_port = port
        self.tls = tls
        self._ctx = None
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            # an EOF without close_notify must raise (see _handshake):
            # Debian's Python sets this option on every context
            ctx.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
            ctx.load_cert_chain(tls[0], tls[1])
            if tls_max_version is not None:
                ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
                ctx.minimum_version = tls_min_version or ssl.TLSVersion.MINIMUM_SUPPORTED
                ctx.maximum_version = tls_max_version
            if num_tickets is not None:
                ctx.num_tickets = num_tickets   # TLS 1.3 tickets sent per handshake
            ctx.sni_callback = self._on_sni
            self._ctx = ctx
        self._cond = threading.Condition()
        self._connections = []
        self._requests = []
        self._scripts = {}
        self._accept_script = []
        self._gates = {}
        self._live = {}
        self._threads = []
        self._stopping = threading.Event()
        self._listener = None
        self._hold = None                  # the port's socket between stop_listening and listen_again
        self._id_counter = 0
        self.port = None

    # -- lifecycle ---------------------------------------------------------

    def _socket(self):
        s = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                          socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return s

    def start(self):
        s = self._socket()
        s.bind((self.host, self._requested_port))
        s.listen(self.backlog)
        self._listener = s
        self.port = s.getsockname()[1]
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        t = threading.Thread(target=self._accept_loop, name="%s-accept" % self.name, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self):
        self._stopping.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        with self._cond:
            for g in self._gates.values():
                g.released.set()
            live = list(self._live.values())
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for t in list(self._threads):
            t.join(max(0, deadline - time.monotonic()))

    def stop_listening(self):
        """Close the listening socket only: new connections are refused,
        open ones are still served (an upstream going away under its pooled
        connections). The port stays bound, not listening, until
        listen_again() or stop(), so that the kernel hands it to no other
        socket meanwhile: one listening there would make listen_again
        fail, and a port harness.reserved_port holds for another test's
        server must not get our listener."""
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        hold = self._socket()
        hold.bind((self.host, self.port))
        self._hold = hold

    def listen_again(self):
        """Listen on the same port again after stop_listening()."""
        self._requested_port = self.port
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- addresses ---------------------------------------------------------

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    @property
    def authority(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%d" % (host, self.port)

    def url(self, path="/"):
        return "%s://%s%s" % (self.scheme, self.authority, path)

    # -- programming -------------------------------------------------------

    def script(self, path, steps, then="repeat"):
        """Answer the next requests for path (without query) with these steps,
        one per request. A step is a path with query ('/status/503?retry_after=1')
        or an int (a status code). After the last step: then='repeat' repeats
        it, then='path' falls back to the request's own path."""
        steps = ["/status/%d" % s if isinstance(s, int) else s for s in steps]
        with self._cond:
            self._scripts[path] = {"steps": list(steps), "then": then}

    def on_accept(self, steps):
        """What to do with the next accepted connections, one step each, before
        reading anything: 'serve', 'reset' (RST), 'close' (FIN, then discard
        what arrives), 'hang' (accept and never answer). Afterwards
        connections are served."""
        with self._cond:
            self._accept_script = list(steps)

    def gate(self, name):
        with self._cond:
            if name not in self._gates:
                self._gates[name] = Gate(name)
            return self._gates[name]

    def clear(self):
        """Forget recorded connections and requests (live ones go on)."""
        with self._cond:
            self._connections = []
            self._requests = []

    # -- records -----------------------------------------------------------

    @property
    def connections(self):
        with self._cond:
            return list(self._connections)

    @property
    def requests(self):
        with self._cond:
            return list(self._requests)

    def requests_for(self, path):
        return [r for r in self.requests if r.path == path]

    def wait_for(self, predicate, timeout=10, what="condition"):
        """Wait until predicate(origin) is true; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if predicate(self):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: timed out after %ss waiting for %s (connections=%d requests=%d)"
                                         % (self.name, timeout, what, len(self._connections),
                                            len(self._requests)))
                self._cond.wait(min(left, 0.2))

    def wait_requests(self, n, timeout=10):
        self.wait_for(lambda o: len(o._requests) >= n, timeout, "%d requests" % n)

    def _notify(self):
        with self._cond:
            self._cond.notify_all()

    # -- serving -----------------------------------------------------------

    def _on_sni(self, sslobj, server_name, ctx):
        conn = getattr(sslobj, "_origin_conn", None)
        if conn is not None:
            conn.sni = server_name
        return None

    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return
            with self._cond:
                conn = Connection(self._next_id(), peer, self.tls is not None)
                self._connections.append(conn)
                step = self._accept_script.pop(0) if self._accept_script else "serve"
                self._live[conn.id] = sock
                self._cond.notify_all()
            t = threading.Thread(target=self._serve, args=(sock, conn, step),
                                 name="%s-conn-%d" % (self.name, conn.id), daemon=True)
            self._threads.append(t)
            t.start()

    def _next_id(self):
        self._id_counter += 1
        return self._id_counter

    def _closed(self, conn, reason):
        with self._cond:
            if not conn.closed.is_set():
                conn.close_reason = reason
                conn.closed_at = time.monotonic()
                conn.closed.set()
            self._live.pop(conn.id, None)
            self._cond.notify_all()

    def _reset(self, sock, conn):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass
        self._closed(conn, "origin-reset")

    def _serve(self, sock, conn, step):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if step == "reset":
                self._reset(sock, conn)
                return
            if step == "close":
                # FIN at once; keep reading so unread bytes do not turn it into a RST.
                sock.shutdown(socket.SHUT_WR)
                self._hang(sock, conn)
                return
            if step == "hang":
                self._hang(sock, conn)
                return
            if self._ctx is not None:
                sock = self._handshake(sock, conn)
                if sock is None:
                    return
            reader = _Reader(sock, conn)
            while not self._stopping.is_set():
                if not self._serve_one(sock, conn, reader):
                    break
            if not conn.closed.is_set():
                if isinstance(sock, ssl.SSLSocket) and not conn.end_unclean:
                    # a close_notify first, as servers end TLS; unwrap
                    # waits a little for the peer's own
                    try:
                        sock.settimeout(1)
                        sock = sock.unwrap()
                    except (OSError, ValueError):
                        pass
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                sock.close()
                self._closed(conn, "origin")
        except _DropConnection:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            sock.close()
            self._closed(conn, "origin")
        except _Stop:
            pass
        except _PeerGone as e:
            sock.close()
            self._closed(conn, "peer-eof: %s" % e)
        except ConnectionResetError:
            sock.close()
            self._closed(conn, "peer-reset")
        except OSError as e:
            sock.close()
            self._closed(conn, "stop" if self._stopping.is_set() else "error: %s" % e)
        except Exception as e:  # a bug in a behaviour: say so, never hang the test
            import traceback
            traceback.print_exc()
            sock.close()
            self._closed(conn, "error: %r" % e)
        finally:
            self._notify()

    def _handshake(self, sock, conn):
        sock.settimeout(10)
        conn.psk_identities = peek_psk_identities(sock)
        try:
            # an EOF without close_notify raises, so that _recv can tell it
            tls = self._ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False,
                                        suppress_ragged_eofs=False)
            tls._origin_conn = conn
            tls.do_handshake()
        except (OSError, ssl.SSLError) as e:
            conn.handshake_error = str(e)
            sock.close()
            self._closed(conn, "handshake failed: %s" % e)
            return None
        tls.settimeout(None)
        conn.tls_version = tls.version()
        conn.session_reused = tls.session_reused
        with self._cond:
            self._live[conn.id] = tls
            self._cond.notify_all()
        return tls

    def _hang(self, sock, conn):
        """Hold the connection, reading and discarding, until the peer or stop()
        closes it."""
        sock.settimeout(0.2)
        while not self._stopping.is_set():
            try:
                if not _recv(sock, conn, 65536):
                    sock.close()
                    self._closed(conn, "peer-eof")
                    return
            except socket.timeout:
                continue
            except OSError:
                break
        sock.close()
        self._closed(conn, "stop")

    def _parse_head(self, conn, head):
        with self._cond:
            req = Request(conn, conn.request_count, head)
            conn.request_count += 1
        text = head[:-4]
        if b"\n" in text.replace(b"\r\n", b""):
            req.anomalies.append("bare LF in head")
        lines = text.split(b"\r\n")
        parts = lines[0].decode("latin-1").split(" ")
        if len(parts) != 3:
            raise _BadRequest("bad request line %r" % lines[0])
        req.method, req.target, req.version = parts
        url = urllib.parse.urlsplit(req.target)
        req.path = url.path if not req.target.startswith("/") else req.target.split("?", 1)[0]
        req.query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        for line in lines[1:]:
            if line[:1] in (b" ", b"\t"):
                req.anomalies.append("obs-fold")
                continue
            if b":" not in line:
                raise _BadRequest("header line without colon %r" % line)
            name, value = line.split(b":", 1)
            if name != name.strip():
                req.anomalies.append("whitespace around field name %r" % name)
            req.headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
        return req

    def _choose(self, req):
        """The behaviour path for a request: a script step, or its own target."""
        with self._cond:
            s = self._scripts.get(req.path)
            if s is not None and s["steps"]:
                if len(s["steps"]) > 1 or s["then"] != "repeat":
                    return s["steps"].pop(0)
                return s["steps"][0]
        return req.target

    def _serve_one(self, sock, conn, reader):
        """Read and answer one request; False when the connection must close."""
        head = reader.read_head()
        if head is None:
            sock.close()
            self._closed(conn, "peer-eof")
            return False
        try:
            req = self._parse_head(conn, head)
        except _BadRequest as e:
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\nConnection: close\r\n\r\nbad request\n")
            with self._cond:
                req = Request(conn, conn.request_count, head)
                req.error = str(e)
                self._requests.append(req)
            return False
        behaviour = self._choose(req)
        url = urllib.parse.urlsplit(behaviour)
        # A step's own query parameters add to the request's.
        params = dict(req.query)
        params.update(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        req.query = params
        with self._cond:
            self._requests.append(req)
            self._cond.notify_all()
        ex = _Exchange(self, conn, sock, reader, req)
        conn_hdr = ",".join(req.header_all("Connection")).lower()
        if req.version == "HTTP/1.0":
            ex.keep_alive = "keep-alive" in conn_hdr
        elif "close" in conn_hdr:
            ex.keep_alive = False
        if url.path == "/reset/head":
            ex.reset()
        if url.path.startswith("/early/"):
            # answer before reading the body, then close: the body left
            # unread makes the kernel reset the connection, as servers that
            # refuse an upload do
            code = int(url.path.split("/")[2])
            if ex.param("size") is not None:
                # a body that ends with the connection, and that end a reset
                # with no FIN before it: the close waits until unread body is
                # in the kernel, so the peer can never see a clean end
                ex.head(code, [("Content-Type", "application/octet-stream"),
                               ("Connection", "close")])
                ex.send_pattern(int(ex.param("size")))
                select.select([ex.sock], [], [], 10)
                ex.sock.close()
                ex.origin._closed(ex.conn, "origin-reset")
                raise _Stop()
            else:
                ex.simple(code, b"early %d\n" % code, [("Connection", "close")])
            raise _DropConnection()
        if not self._expect(ex):
            return False
        try:
            self._read_body(ex)
        except _BadRequest as e:
            req.error = str(e)
            ex.simple(400, b"bad request body\n", [("Connection", "close")])
            return False
        delay = ex.param("delay")
        if delay is not None and not url.path.startswith("/slow/"):
            time.sleep(float(delay))
        if ex.param("hold") is not None:
            self._wait_gate(self.gate(ex.param("hold")))
        try:
            self._dispatch(ex, url.path)
        finally:
            req.finished_at = time.monotonic()
        if ex.param("close"):
            return False
        return ex.keep_alive

    def _expect(self, ex):
        """Answer Expect: 100-continue; False when the body must not be read."""
        expect = (ex.req.header("Expect") or "").lower()
        if expect != "100-continue" or ex.req.version != "HTTP/1.1":
            return True
        mode = ex.param("expect")
        if mode == "ignore":
            return True
        if mode == "reject":
            ex.simple(417, b"expectation refused\n", [("Connection", "close")])
            return False
        ex.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _read_body(self, ex):
        req, reader = ex.req, ex.reader
        te = ",".join(req.header_all("Transfer-Encoding")).lower()
        cls = req.header_all("Content-Length")
        if te:
            if te.split(",")[-1].strip() != "chunked":
                raise _BadRequest("transfer-encoding %r" % te)
            req.framing = "chunked"
            while True:
                size_line = reader.read_line()
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise _BadRequest("bad chunk size line %r" % size_line)
                if b";" in size_line:
                    req.chunk_extensions.append(size_line.split(b";", 1)[1])
                if size == 0:
                    break
                remaining = size
                while remaining > 0:
                    piece = reader.read_some(min(remaining, 1 << 20))
                    self._body_piece(req, piece)
                    remaining -= len(piece)
                if reader.read_line() != b"":
                    raise _BadRequest("chunk not followed by CRLF")
            while True:
                line = reader.read_line()
                if line == b"":
                    break
                name, _, value = line.partition(b":")
                req.trailers.append((name.decode("latin-1"), value.strip().decode("latin-1")))
        elif cls:
            if len(set(cls)) != 1 or not cls[0].isdigit():
                raise _BadRequest("content-length %r" % cls)
            length = int(cls[0])
            req.framing = "length"
            left = length
            while left > 0:
                piece = reader.read_some(min(left, 1 << 20))
                self._body_piece(req, piece)
                left -= len(piece)
        req.body_sha256 = req._sha.hexdigest()
        req.complete.set()
        self._notify()

    def _body_piece(self, req, piece):
        req._sha.update(piece)
        req.body_len += len(piece)
        if len(req.body) < BODY_KEEP_LIMIT:
            req.body += piece[:BODY_KEEP_LIMIT - len(req.body)]
        self._notify()

    # -- behaviours ----------------------------------------------------------

    def _dispatch(self, ex, path):
        seg = path.strip("/").split("/")
        kind = seg[0]
        arg = seg[1] if len(seg) > 1 else None
        head_only = ex.req.method == "HEAD"
        if kind == "status":
            code = int(arg)
            if code in (204, 304) or code < 200:
                hdrs = []
                if code == 304:
                    hdrs.append(("ETag", '"v1"'))
                    if ex.param("cl") is not None:
                        hdrs.append(("Content-Length", ex.param("cl")))
                ex.head(code, hdrs)
            else:
                body = ex.param("body", "status %d\n" % code).encode()
                ex.simple(code, body)
        elif kind == "bytes":
            n = int(arg)
            ex.head(int(ex.param("status", 200)),
                    [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
            if not head_only:
                ex.send_pattern(n)
        elif kind == "chunked" and ex.req.version == "HTTP/1.0":
            self._dispatch(ex, "/close/" + arg)
        elif kind == "chunked":
            n = int(arg)
            hdrs = [("Content-Type", "application/octet-stream"), ("Transfer-Encoding", "chunked")]
            if ex.param("trailer"):
                hdrs.append(("Trailer", "X-Checksum"))
            ex.head(int(ex.param("status", 200)), hdrs)
            if not head_only:
                size = int(ex.param("chunk", 1000))
                pos = 0
                while pos < n:
                    k = min(size, n - pos)
                    ex.send(b"%x\r\n" % k + pattern_bytes(k, pos) + b"\r\n")
                    pos += k
                if ex.param("trailer"):
                    ex.send(b"0\r\nX-Checksum: " + pattern_sha256(n).encode() + b"\r\n\r\n")
                else:
                    ex.send(b"0\r\n\r\n")
        elif kind == "close":
            n = int(arg)
            ex.keep_alive = False
            ex.conn.end_unclean = bool(ex.param("unclean"))
            ex.head(int(ex.param("status", 200)), [("Content-Type", "application/octet-stream")])
            if not head_only:
                ex.send_pattern(n)
                if ex.param("stall"):
                    # the body never ends: only a close would end it
                    self._hang(ex.sock, ex.conn)
                    raise _Stop()
        elif kind == "echo":
            body = json.dumps(ex.req.describe()).encode()
            ex.simple(int(ex.param("status", 200)), body, content_type="application/json")
        elif kind == "gate":
            self._gate(ex, arg)
        elif kind == "slow":
            self._slow(ex, int(arg))
        elif kind == "delay":
            time.sleep(float(arg))
            ex.simple(200, b"delayed\n")
        elif kind == "reset":
            if arg == "request":
                ex.reset()
            elif arg == "body":
                n = int(ex.param("n", 100000))
                ex.head(200, [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
                ex.send_pattern(n // 2)
                time.sleep(0.05)
                ex.reset()
            elif arg == "status":
                ex.send(b"HTTP/1.1 20")
                time.sleep(0.05)
                ex.reset()
            else:
                ex.simple(404, b"unknown reset kind\n")
        elif kind == "drop":
            raise _DropConnection()
        elif kind == "hang":
            self._hang(ex.sock, ex.conn)
            raise _Stop()
        elif kind == "object":
            self._object(ex, int(arg))
        elif kind == "respheaders":
            ex.head(200, RESPONSE_HEADERS + [("Content-Length", "3")])
            if not head_only:
                ex.send(b"ok\n")
        elif kind == "bad":
            self._bad(ex, arg)
        elif self.echo_unknown:
            self._dispatch(ex, "/echo")
        else:
            ex.simple(404, b"not found\n")

    def _wait_gate(self, g):
        """Holds the response at the gate until release(). stop() releases
        every gate too, to free the thread; the stopping check comes after
        the wait so that release never sends the rest of a response the
        test meant to break off."""
        g.reached.set()
        while not g.released.wait(0.2):
            if self._stopping.is_set():
                raise _Stop()
        if self._stopping.is_set():
            raise _Stop()

    def _gate(self, ex, name):
        g = self.gate(name)
        first = int(ex.param("first", 1000))
        rest = int(ex.param("rest", 1000))
        chunked = bool(ex.param("chunked"))
        status = int(ex.param("status", 200))
        if chunked:
            ex.head(status, [("Content-Type", "application/octet-stream"),
                             ("Transfer-Encoding", "chunked")])
            ex.send(b"%x\r\n" % first + pattern_bytes(first) + b"\r\n")
        else:
            ex.head(status, [("Content-Type", "application/octet-stream"),
                          ("Content-Length", str(first + rest))])
            ex.send_pattern(first)
        self._wait_gate(g)
        if chunked:
            if rest:
                ex.send(b"%x\r\n" % rest + pattern_bytes(rest, first) + b"\r\n")
            ex.send(b"0\r\n\r\n")
        else:
            ex.send_pattern(rest, first)

    def _object(self, ex, n):
        """A stored object of n bytes, as a download server (or a cloud
        storage media GET) serves it. Its content and validators depend on
        ?version=V (default 1): version V is the pattern from offset
        object_offset(V), its ETag "obj-V-n", its Last-Modified one day
        later per version. Parameters:
          etag=strong|weak|none     the ETag (weak: W/"..."; none: no ETag)
          lm=0                      no Last-Modified
          date=now|lm|none          the Date: now (the default, as servers
                                    send it), the Last-Modified's own
                                    second, or no Date
          ranges=0                  no Accept-Ranges; Range ignored
          ranges=ignore             Accept-Ranges: bytes, but Range ignored
          if_range=ignore           Range honoured even when If-Range no
                                    longer matches (a broken origin)
          cr_shift=S                a 206 starts S bytes later than asked and
                                    says so in Content-Range
          chunked=1                 the whole object, chunked, never a 206
          ce=CODING                 Content-Encoding: CODING (the bytes are
                                    the pattern all the same)
          break_at=N                after N body bytes of this response,
                                    close (break_mode=fin, default) or reset
                                    (break_mode=reset)
          stall_at=N                after N body bytes, send nothing more
                                    (the connection stays open)
          gate=NAME                 with break_at: before the break, set
                                    gate(NAME).reached and wait for its
                                    release()
        Range: bytes=K- and bytes=K-M are answered 206 with Content-Range
        when If-Range (if any) matches the current ETag or Last-Modified,
        else 200 with the whole object; K at or past n gets 416."""
        version = int(ex.param("version", 1))
        etag_kind = ex.param("etag", "strong")
        tag = '"obj-%d-%d"' % (version, n)
        etag = {"strong": tag, "weak": "W/" + tag}.get(etag_kind)
        modified = None
        if ex.param("lm") != "0":
            modified = time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                     time.gmtime(1700000000 + 86400 * version))
        ranges = ex.param("ranges", "1")
        chunked = bool(ex.param("chunked"))
        start, end, status = 0, n, 200
        hdrs = [("Content-Type", "application/octet-stream")]
        if ranges != "0":
            hdrs.append(("Accept-Ranges", "bytes"))
        if etag is not None:
            hdrs.append(("ETag", etag))
        if modified is not None:
            hdrs.append(("Last-Modified", modified))
        if ex.param("ce") is not None:
            hdrs.append(("Content-Encoding", ex.param("ce")))
        date = ex.param("date", "now")
        if date == "now":
            hdrs.append(("Date", time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())))
        elif date == "lm" and modified is not None:
            hdrs.append(("Date", modified))
        wanted = ex.req.header("Range")
        if wanted is not None and ranges == "1" and not chunked:
            if_range = ex.req.header("If-Range")
            current = if_range is None or ex.param("if_range") == "ignore" or \
                (if_range.startswith('"') and if_range == etag) or \
                (not if_range.startswith(('"', 'W/')) and if_range == modified)
            first, _, last = wanted.partition("=")[2].partition("-")
            if current and wanted.startswith("bytes=") and first.isdigit():
                if int(first) >= n:
                    ex.head(416, hdrs + [("Content-Range", "bytes */%d" % n),
                                         ("Content-Length", "0")])
                    return
                start = int(first) + int(ex.param("cr_shift", 0))
                end = min(n, int(last) + 1) if last.isdigit() else n
                status = 206
                hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, n)))
        if chunked:
            hdrs.append(("Transfer-Encoding", "chunked"))
        else:
            hdrs.append(("Content-Length", str(end - start)))
        ex.head(status, hdrs)
        if ex.req.method == "HEAD":
            return
        stop = end - start
        for limit in (ex.param("break_at"), ex.param("stall_at")):
            if limit is not None:
                stop = min(stop, int(limit))
        base = object_offset(version)
        pos = start
        while pos < start + stop:
            k = min(1 << 16, start + stop - pos)
            data = pattern_bytes(k, base + pos)
            ex.send(b"%x\r\n" % k + data + b"\r\n" if chunked else data)
            pos += k
        if stop < end - start:
            if ex.param("stall_at") is not None:
                self._hang(ex.sock, ex.conn)
                raise _Stop()
            if ex.param("gate") is not None:
                self._wait_gate(self.gate(ex.param("gate")))
            time.sleep(0.05)  # let the bytes go out before the close
            if ex.param("break_mode") == "reset":
                ex.reset()
            raise _DropConnection()
        if chunked:
            ex.send(b"0\r\n\r\n")

    def _slow(self, ex, n):
        delay = float(ex.param("delay", 0.01))
        head = (_status_line(int(ex.param("status", 200))) + "Content-Type: application/octet-stream\r\n"
                "Content-Length: %d\r\n\r\n" % n).encode()
        if ex.param("head"):
            for i in range(len(head)):
                ex.send(head[i:i + 1])
                time.sleep(delay)
        else:
            ex.send(head)
        if ex.req.method == "HEAD":
            return
        body = pattern_bytes(n)
        for i in range(n):
            ex.send(body[i:i + 1])
            time.sleep(delay)

    def _bad(self, ex, kind):
        ex.keep_alive = False
        heads = {
            "cl-dup": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            "te-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "obs-fold": b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
            "status": b"HTTP/1.1 two hundred OK\r\nContent-Length: 5\r\n\r\nhello",
            "bare-lf": b"HTTP/1.1 200 OK\r\nX-A: a\nX-B: b\r\nContent-Length: 5\r\n\r\nhello",
            "space-colon": b"HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 5\r\n\r\nhello",
            "bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            "gzip-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n"
                            b"0\r\n\r\n" % (len(GZIP_HELLO), GZIP_HELLO),
        }
        ex.send(heads.get(kind, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))


# Response headers for /respheaders: duplicates, odd case, obs-text, and
# hop-by-hop fields a proxy must remove (X-Hop-Resp is named by Connection).
RESPONSE_HEADERS = [
    ("Content-Type", "text/plain"),
    ("X-Resp", "one"),
    ("Set-Cookie", "a=1; Path=/"),
    ("set-cookie", "b=2; Path=/"),
    ("X-MiXeD-CaSe", "Value  With  Spaces"),
    ("X-Resp", "two"),
    ("X-Obs-Text", "caf\xe9"),
    ("Connection", "X-Hop-Resp"),
    ("X-Hop-Resp", "must not reach the client"),
    ("Keep-Alive", "timeout=5"),
    ("Via", "1.1 origin-via"),
    ("X-Last", "last"),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description="retryproxy fault-injecting test origin")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--quiet", action="store_true", help="do not print one line per request")
    args = ap.parse_args(argv)
    origin = Origin(host=args.host, port=args.port, tls=tuple(args.tls) if args.tls else None)
    origin.start()
    print("origin listening on %s" % origin.url(""), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    signal.signal(signal.SIGINT, lambda *a: done.set())
    seen = 0
    while True:
        stopping = done.wait(0.2)
        if not args.quiet:
            reqs = origin.requests
            for r in reqs[seen:]:
                print("%s %s %s conn=%d" % (r.method, r.target, r.version, r.conn_id), flush=True)
            seen = len(reqs)
        if stopping:
            break
    origin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
