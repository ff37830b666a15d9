"""A TCP server on 127.0.0.1 for upstreams the shared test origin
(origin.py) cannot play: each accepted connection is handed, in a thread
of its own, to the test's code, which writes whatever bytes it likes.

    server = rawserver.RawServer(handler)   # handler(conn, server)
    t.defer(server.stop)

or subclass and override serve(conn, cid). `connections` counts the
accepted connections; cid is the connection's number (1, 2, ...)."""

import socket
import threading


class RawServer:
    def __init__(self, handler=None, backlog=64, conn_timeout=5):
        self.handler = handler
        self.conn_timeout = conn_timeout
        self.connections = 0
        self._conns = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                cid = self.connections
                self._conns.append(conn)
            threading.Thread(target=self._run, args=(conn, cid), daemon=True).start()

    def _run(self, conn, cid):
        conn.settimeout(self.conn_timeout)
        try:
            self.serve(conn, cid)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def serve(self, conn, cid):
        """Handle one connection (it is closed afterwards)."""
        self.handler(conn, self)

    def stop(self):
        """Stop accepting and shut down the connections still open."""
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def read_head(conn):
    """Bytes from conn up to and including the end of a request head (or
    whatever came before EOF)."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            break
        data += got
    return data


def read_request_head(conn, buf=b""):
    """(the lines of the next request head, request line first; what follows
    it in the stream) for a keep-alive connection; buf is what the last call
    left over. None at EOF."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, buf = buf.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), buf


def field(lines, name):
    """The value of a head's first field called name (bytes, any case), as
    bytes without surrounding spaces; None when there is none."""
    for ln in lines[1:]:
        got, _, value = ln.partition(b":")
        if got.strip().lower() == name:
            return value.strip()
    return None


def read_request(conn, buf=b""):
    """(method, target, what follows in the stream) for the next request on
    a keep-alive connection, its Content-Length body read and skipped; buf
    is what the last call left over. None at EOF."""
    got = read_request_head(conn, buf)
    if got is None:
        return None
    lines, buf = got
    method, target = lines[0].split(b" ")[:2]
    length = int(field(lines, b"content-length") or 0)
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    return method.decode("latin-1"), target.decode("latin-1"), buf[length:]


def _read_line(conn, buf):
    while b"\r\n" not in buf[0]:
        data = conn.recv(65536)
        if not data:
            raise OSError("closed in a line")
        buf[0] += data
    line, _, buf[0] = buf[0].partition(b"\r\n")
    return line


def _read_n(conn, buf, n):
    while len(buf[0]) < n:
        data = conn.recv(1 << 20)
        if not data:
            raise OSError("closed in a chunk")
        buf[0] += data
    buf[0] = buf[0][n:]


def read_chunked_body(conn, buf=b""):
    """(how many data bytes a chunked body held, what follows it in the
    stream), reading the body from conn after buf, its trailer section
    included. Raises OSError when the connection closes inside it."""
    state = [buf]
    total = 0
    while True:
        size = int(_read_line(conn, state).split(b";")[0], 16)
        if size == 0:
            while _read_line(conn, state) != b"":
                pass
            return total, state[0]
        _read_n(conn, state, size + 2)
        total += size


def read_chunked_request(conn, before_body=None):
    """Read a request with a chunked body from conn: how many data bytes
    the body held, or None when the connection closed before the head's
    end. before_body(), if given, runs between the head and the body."""
    data = read_head(conn)
    if b"\r\n\r\n" not in data:
        return None
    _, _, rest = data.partition(b"\r\n\r\n")
    if before_body is not None:
        before_body()
    return read_chunked_body(conn, rest)[0]
