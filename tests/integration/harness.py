"""Shared machinery for retryproxy's integration tests (standard library only).

A test file describes one scenario and runs named checks:

    import harness as h

    def scenario(t):
        origin = t.origin()
        proxy = t.proxy(CONFIG, ORIGIN=origin.port)

        @t.check("a GET through the proxy returns the origin's body")
        def _():
            r = h.curl(origin.url("/bytes/10"), proxy=proxy.url)
            h.eq(r.status, 200, "status")

    h.run(scenario, __doc__)

Checks run as they are declared; each prints PASS or FAIL with the reason,
and the file exits 1 if any failed. Everything started through `t` (origins,
proxies, temp dirs) is stopped at the end, also on failure, timeout or
SIGTERM, and a proxy that crashed, did not exit 0 on SIGTERM, or printed a
sanitizer report fails the run.

The proxy binary comes from $RETRYPROXY_BIN (meson test sets it);
$RETRYPROXY_SANITIZED=1 says it was built with sanitizers.
"""

import fcntl
import hashlib
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import origin as origin_mod  # noqa: E402

# The source tree, for tests that read or run the project's own files.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CURL = "/usr/bin/curl"
BIN = os.environ.get("RETRYPROXY_BIN")
SANITIZED = os.environ.get("RETRYPROXY_SANITIZED") == "1"

# Start-up and shutdown are slower under sanitizers.
SLOW = 3 if SANITIZED else 1

# Environment variables that would make curl or the proxy use another proxy
# or another trust store than the test says.
_PROXY_ENV = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
              "ALL_PROXY", "no_proxy", "NO_PROXY", "ftp_proxy", "FTP_PROXY")
_TRUST_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE")

_SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                      "ERROR: UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer",
                      "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")


class ReadTimeout(AssertionError):
    """Nothing arrived on a RawConn within its timeout."""


class TestTimeout(BaseException):
    """The whole file ran out of time (a BaseException so checks cannot
    swallow it)."""


def clean_env(extra=None, keep_trust=False):
    """os.environ without proxy settings (and without trust-store overrides
    unless keep_trust), plus extra."""
    env = dict(os.environ)
    for k in _PROXY_ENV:
        env.pop(k, None)
    if not keep_trust:
        for k in _TRUST_ENV:
            env.pop(k, None)
    env.update(extra or {})
    return env


def read_file(path, mode="r"):
    """The whole content of a file (bytes with mode="rb")."""
    with open(path, mode) as f:
        return f.read()


# -- assertions -------------------------------------------------------------

def eq(actual, expected, what):
    if actual != expected:
        raise AssertionError("%s: expected %r, got %r" % (what, expected, actual))


def ok(cond, msg):
    if not cond:
        raise AssertionError(msg)


def fd_count(pid):
    """How many file descriptors process pid has open."""
    return len(os.listdir("/proc/%d/fd" % pid))


def fds_dense(pid):
    """Whether process pid's descriptors are numbered 0 to n-1, no gap: then
    a RLIMIT_NOFILE soft limit of n leaves it none to open."""
    fds = [int(fd) for fd in os.listdir("/proc/%d/fd" % pid)]
    return max(fds) + 1 == len(fds)


def clients_at_fd_limit(t, pid, port):
    """Idle clients of port until process pid's descriptors have no gap
    (each accept takes the lowest free number), then its RLIMIT_NOFILE soft
    limit lowered to their count: every number below the limit is taken, so
    its next socket fails (an accept would too). The clients, closed at the
    test's end; the last is the one to use."""
    clients = []
    t.defer(lambda: [c.close() for c in clients])
    while not clients or not fds_dense(pid):
        before = fd_count(pid)
        clients.append(RawConn(port, timeout=5 * SLOW))
        wait_until(lambda: fd_count(pid) == before + 1, 3 * SLOW,
                   "client %d accepted" % len(clients))
    hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (fd_count(pid), hard))
    return clients


def two_pooled(port, host):
    """Two GETs through port at once (the origin's /echo holds each 0.3 s, so
    both are open together), so that two upstream connections stay pooled
    once they are answered. Their statuses, or what each got instead."""
    statuses = [None, None]

    def get(i):
        statuses[i] = status_of(lambda: fetch(port, "GET", "/echo?delay=0.3&t=%d" % i, host,
                                              timeout=5 * SLOW).status)
    getters = [threading.Thread(target=get, args=(i,)) for i in range(2)]
    for g in getters:
        g.start()
    for g in getters:
        g.join()
    return statuses


def status_of(fn):
    """fn()'s result, or the error it raised as text: a check can then say
    what a request got instead of the scenario stopping at it."""
    try:
        return fn()
    except (ReadTimeout, AssertionError, OSError) as e:
        return "%s: %s" % (type(e).__name__, e)


def wait_until(predicate, timeout, what, interval=0.05):
    """Poll predicate() until true; AssertionError naming what on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


def in_threads(count, work, timeout):
    """work(i) for i in range(count), each in a daemon thread, all started
    before any is waited for. Waits up to timeout seconds for them all;
    returns what each returned, "Name: text" for an exception it raised, or
    None for one still running."""
    results = [None] * count

    def run(i):
        try:
            results[i] = work(i)
        except Exception as e:  # returned to the caller, which reports it
            results[i] = "%s: %s" % (type(e).__name__, e)
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    return results


# -- ports ------------------------------------------------------------------

def metric(text, name, labels=""):
    """The value of one series in a /metrics page (labels as written there,
    e.g. '{route="a"}'), or None when it is not there."""
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


_GIVEN_PORTS = set()


def _ephemeral_range():
    """The kernel's range for ports picked by bind(0) and connect()."""
    try:
        low, high = (int(x) for x in read_file("/proc/sys/net/ipv4/ip_local_port_range").split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return low, high


# free_port hands out ports of the upper half of the ephemeral range,
# reserved_port holds ports of the lower half. A port free_port gave is
# bound later, by another process and with SO_REUSEADDR (the proxy's
# listeners, redis-server), and a port reserved_port holds lets exactly
# such a bind through; with one pool for both, another test's proxy could
# start listening on a port a test holds closed (seen: test_health's
# origin failing to bind its reserved port with EADDRINUSE, with the suite
# run six tests at a time). The halves keep the two apart across
# processes.
_SPLIT = (sum(_ephemeral_range()) + 1) // 2


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (the kernel's pick, in the upper
    half of the ephemeral range: see _SPLIT), never one this run was given
    before: the kernel may hand the same free port to two calls in a row,
    and a config's @PORT0@ and @PORT1@ must differ."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(200):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port >= _SPLIT and port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port
    raise RuntimeError("no port this run has not used yet")


_RESERVED = []


def closed_port():
    """A port where a connect is refused, reserved for the rest of the run:
    it stays bound (without listen) so no other test can start listening
    there."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return s.getsockname()[1]


def silent_port():
    """A port whose connections the kernel completes and nobody ever reads
    or answers (a TLS handshake there hangs), held for the rest of the run."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    _RESERVED.append(s)
    return s.getsockname()[1]


def reserved_port():
    """A port for a server a test starts later (one that stays closed for a
    while first): bound now with SO_REUSEADDR, never listening, and kept
    for the rest of the run, so that the kernel hands it to no other test's
    socket meanwhile, while a server binding it with SO_REUSEADDR (Python's
    HTTPServer does) still can. Connects to it are refused until then. It
    is below _SPLIT, so no test was given it by free_port to bind later
    (the kernel picks there first for a socket with SO_REUSEADDR)."""
    rejected = []
    try:
        for _ in range(200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] < _SPLIT:
                _RESERVED.append(s)
                return s.getsockname()[1]
            rejected.append(s)  # held until the end, so the kernel picks another
    finally:
        for s in rejected:
            s.close()
    raise RuntimeError("no port below %d to reserve" % _SPLIT)


def _tcp_inodes(port, listening):
    """The inodes of TCP sockets on local port port: listening ones, or
    (listening False) every other, the connections accepted there."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and (cols[3] == "0A") == listening and \
                    int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _socket_inodes(pid):
    """The inodes of the sockets process pid holds a descriptor of."""
    held = []
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return held
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            held.append(link[8:-1])
    return held


def connections_on(pid, port):
    """How many connections accepted on local port port process pid holds
    (via /proc)."""
    inodes = _tcp_inodes(port, listening=False)
    return sum(1 for inode in _socket_inodes(pid) if inode in inodes)


def listens_on(pid, port, stderr_text=None):
    """Whether process pid has a listening socket on port (via /proc); where
    /proc/net is unavailable, fall back to the proxy's own 'listening on'
    log line and a connect probe."""
    if os.path.exists("/proc/net/tcp"):
        inodes = _tcp_inodes(port, listening=True)
        return bool(inodes) and any(inode in inodes for inode in _socket_inodes(pid))
    text = stderr_text() if stderr_text else ""
    return bool(re.search(r"listening on \S*:%d\b" % port, text)) and port_accepts(port)


def open_files_under(pid, directory):
    """Process pid's open files inside directory, unlinked ones too, as
    (fd number, link) pairs."""
    out = []
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if link.startswith(directory + "/"):
            out.append((fd, link))
    return out


def random_body_file(directory, n, name):
    """n random bytes written to directory/name: (its path, their sha256)."""
    data = os.urandom(n)
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path, hashlib.sha256(data).hexdigest()


def stop_listening(sock):
    """Close a listening socket that a thread may be blocked accepting on:
    shutdown first, since a close alone leaves it listening until that
    accept returns."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def port_accepts(port, host="127.0.0.1", timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def blackhole(t, host="127.0.0.1", port=0):
    """Listen on host:port (a free port for 0) with a full accept queue that
    is never taken from: a connect there is neither accepted nor refused, so
    it runs into connect_timeout. Returns the port."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, port))
    lst.listen(0)
    port = lst.getsockname()[1]
    held = [lst]
    t.defer(lambda: [s.close() for s in held])
    for _ in range(64):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        held.append(c)
        c.connect_ex((host, port))
        _, writable, _ = select.select([], [c], [], 0.3)
        if not writable:
            return port
    raise AssertionError("could not fill the accept queue of %s:%d" % (host, port))


# -- certificates -------------------------------------------------------------

class Certs:
    """Test PKI made with the openssl CLI in dir:
    ca, ca_key            the test CA
    server, server_key    localhost, 127.0.0.1, ::1, signed by ca
    wrong, wrong_key      only wrong.example, signed by ca
    other_ca              a second CA nobody trusts
    unknown, unknown_key  localhost, 127.0.0.1, signed by other_ca"""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca, self.ca_key = self._ca("ca", "retryproxy test CA")
        self.other_ca, self.other_ca_key = self._ca("other-ca", "retryproxy untrusted CA")
        self.server, self.server_key = self._leaf(
            "server", "localhost", "DNS:localhost,IP:127.0.0.1,IP:::1", self.ca, self.ca_key)
        self.wrong, self.wrong_key = self._leaf(
            "wrong", "wrong.example", "DNS:wrong.example", self.ca, self.ca_key)
        self.unknown, self.unknown_key = self._leaf(
            "unknown", "localhost", "DNS:localhost,IP:127.0.0.1", self.other_ca, self.other_ca_key)

    def _openssl(self, *args):
        p = subprocess.run(["openssl"] + list(args), cwd=self.dir, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("openssl %s failed: %s" % (" ".join(args), p.stderr))

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        key, cert = self._path(name + ".key"), self._path(name + ".pem")
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                      "-nodes", "-keyout", key, "-out", cert, "-days", "3", "-subj", "/CN=" + cn,
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return cert, key

    def _leaf(self, name, cn, san, ca, ca_key):
        key, csr, cert = self._path(name + ".key"), self._path(name + ".csr"), self._path(name + ".pem")
        ext = self._path(name + ".ext")
        with open(ext, "w") as f:  # san None: the subject's CN alone names the host
            f.write(("subjectAltName=%s\n" % san if san else "") + "basicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        self._openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial",
                      str(int.from_bytes(os.urandom(8), "big")), "-days", "3", "-out", cert,
                      "-extfile", ext)
        return cert, key


# -- curl ---------------------------------------------------------------------

class CurlResult:
    def __init__(self, exit_code, heads, body, stderr, write_out):
        self.exit_code = exit_code
        self.heads = heads            # [(status, [(name, value)])] for every response head, 1xx included
        self.body = body
        self.stderr = stderr
        self.write_out = write_out    # what -w printed
        final = heads[-1] if heads else (None, [])
        self.status, self.headers = final

    def header(self, name):
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def __repr__(self):
        return "CurlResult(exit=%s status=%s body=%r stderr=%r)" % (
            self.exit_code, self.status, self.body[:200], self.stderr[-300:])


def _parse_header_dump(data):
    heads = []
    for block in re.split(rb"\r?\n\r?\n", data):
        lines = [ln for ln in block.split(b"\r\n") if ln]
        if not lines or not lines[0].startswith(b"HTTP/"):
            continue
        status = int(lines[0].split()[1])
        fields = []
        for ln in lines[1:]:
            name, _, value = ln.partition(b":")
            fields.append((name.decode("latin-1"), value.strip().decode("latin-1")))
        heads.append((status, fields))
    return heads


def curl(*args, proxy=None, timeout=20, input=None, env=None, check=False):
    """Run curl with args and return a CurlResult. proxy='http://...' adds -x.
    The environment carries no proxy settings and no ~/.curlrc is read."""
    tmp = tempfile.mkdtemp(prefix="curl-", dir=scratch_dir())
    try:
        hdr, body = os.path.join(tmp, "head"), os.path.join(tmp, "body")
        cmd = [CURL, "-q", "-s", "-S", "--max-time", str(timeout), "-D", hdr, "-o", body]
        if proxy:
            cmd += ["-x", proxy]
        else:
            cmd += ["--noproxy", "*"]
        cmd += list(args)
        p = subprocess.run(cmd, capture_output=True, input=input, env=clean_env(env),
                           timeout=timeout + 10)
        with open(hdr, "rb") if os.path.exists(hdr) else open(os.devnull, "rb") as f:
            heads = _parse_header_dump(f.read())
        with open(body, "rb") if os.path.exists(body) else open(os.devnull, "rb") as f:
            data = f.read()
        result = CurlResult(p.returncode, heads, data, p.stderr.decode("utf-8", "replace"),
                            p.stdout.decode("utf-8", "replace"))
        if check and p.returncode != 0:
            raise AssertionError("curl %s failed: %r" % (" ".join(args), result))
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def curl_multi(urls, proxy=None, timeout=30, extra=()):
    """One curl process fetching urls in order over as few connections as
    curl manages. Returns (exit_code, [(status, num_connects)], stderr)."""
    cmd = [CURL, "-q", "-s", "-S", "--max-time", str(timeout)]
    cmd += ["-x", proxy] if proxy else ["--noproxy", "*"]
    cmd += list(extra)
    for u in urls:
        cmd += ["-o", os.devnull, "-w", "%{http_code} %{num_connects}\\n", u]
    p = subprocess.run(cmd, capture_output=True, env=clean_env(), timeout=timeout + 10)
    rows = []
    for line in p.stdout.decode().splitlines():
        code, conns = line.split()
        rows.append((int(code), int(conns)))
    return p.returncode, rows, p.stderr.decode("utf-8", "replace")


# -- raw HTTP client ------------------------------------------------------------

class Response:
    def __init__(self, version, status, reason, headers, raw_head):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers        # [(name, value)] in order
        self.raw_head = raw_head
        self.body = b""
        self.framing = None           # length, chunked, close, none

    def header(self, name):
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def __repr__(self):
        return "Response(%s %r body=%r)" % (self.status, self.headers, self.body[:200])


class RawConn:
    """A plain socket client for what curl cannot express: malformed
    requests, pipelining, slow reading, timing of partial responses."""

    def __init__(self, port, host="127.0.0.1", timeout=10, source=None, rcvbuf=None):
        """Connect to host:port, from the address source when given; with
        rcvbuf, a receive buffer of that size that the kernel does not grow
        (SO_RCVBUF, set before connecting so that the window agrees)."""
        if rcvbuf is None:
            sock = socket.create_connection((host, port), timeout=timeout,
                                            source_address=(source, 0) if source else None)
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.settimeout(timeout)
            if source:
                sock.bind((source, 0))
            sock.connect((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._adopt(sock, timeout)

    def _adopt(self, sock, timeout):
        self.sock = sock
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False

    @classmethod
    def over(cls, sock, timeout=10):
        """A RawConn over a socket that is already connected."""
        c = cls.__new__(cls)
        c._adopt(sock, timeout)
        return c

    @property
    def local_port(self):
        return self.sock.getsockname()[1]

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fill(self, timeout=None):
        timeout = timeout if timeout is not None else self.timeout
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            raise ReadTimeout("nothing more from the proxy within %ss; unread so far: %r"
                              % (timeout, bytes(self.buf[:300])))
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_until(self, marker, timeout=None):
        while marker not in self.buf:
            if not self._fill(timeout):
                raise AssertionError("connection closed before %r; got %r" % (marker, bytes(self.buf[:300])))
        i = self.buf.index(marker) + len(marker)
        out = bytes(self.buf[:i])
        del self.buf[:i]
        return out

    def read_exact(self, n, timeout=None):
        while len(self.buf) < n:
            if not self._fill(timeout):
                raise AssertionError("connection closed after %d of %d bytes" % (len(self.buf), n))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_to_close(self, timeout=None):
        while self._fill(timeout):
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def read_head(self, timeout=None):
        raw = self.read_until(b"\r\n\r\n", timeout)
        lines = raw[:-4].split(b"\r\n")
        version, status, reason = (lines[0].decode("latin-1").split(" ", 2) + [""])[:3]
        headers = []
        for ln in lines[1:]:
            name, _, value = ln.partition(b":")
            headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
        return Response(version, int(status), reason, headers, raw)

    def read_response(self, method="GET", timeout=None, skip_1xx=True):
        """One whole response; framing per RFC 9112 section 6.3."""
        while True:
            r = self.read_head(timeout)
            if not (skip_1xx and 100 <= r.status < 200):
                break
        te = ",".join(r.header_all("Transfer-Encoding")).lower()
        cl = r.header("Content-Length")
        if method == "HEAD" or r.status in (204, 304) or r.status < 200:
            r.framing = "none"
        elif te:
            r.framing = "chunked"
            body = bytearray()
            while True:
                size = int(self.read_until(b"\r\n", timeout)[:-2].split(b";")[0], 16)
                if size == 0:
                    while self.read_until(b"\r\n", timeout) != b"\r\n":
                        pass
                    break
                body += self.read_exact(size, timeout)
                eq(self.read_exact(2, timeout), b"\r\n", "chunk terminator")
            r.body = bytes(body)
        elif cl is not None:
            r.framing = "length"
            r.body = self.read_exact(int(cl), timeout)
        else:
            r.framing = "close"
            r.body = self.read_to_close(timeout)
        return r

    def closed_within(self, timeout):
        """True if the peer closes (EOF or reset) within timeout; data that
        arrives meanwhile is kept in buf."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not self._fill(max(0.05, deadline - time.monotonic())):
                    return True
            except ReadTimeout:
                return False
            except OSError:
                return True
        return False

    def silent_for(self, seconds):
        """True if nothing arrives and the connection stays open for seconds."""
        try:
            self.sock.settimeout(seconds)
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except OSError:
            return False
        self.buf += data
        return False


def send_queue(local_port, remote_port):
    """Bytes the kernel holds to send on the loopback TCP socket from
    local_port to remote_port (tx_queue in /proc/net/tcp), or None."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if (int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)) == \
                    (local_port, remote_port):
                return int(fields[4].split(":")[0], 16)
    return None


def readable(sock):
    """Bytes waiting in the socket's receive buffer."""
    return struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0" * 4))[0]


def read_slowly(conn, size, step=64 << 10, every=0.1, seconds=3.5):
    """A body of size bytes from a RawConn (over a plain or a TLS socket)
    whose head was read, taken as a slow client does: step bytes every
    `every` seconds for `seconds`, then the rest at once. Fails if the
    connection closes first; returns the body."""
    body = bytearray(conn.buf)
    conn.buf.clear()
    start = time.monotonic()

    def recv_to(n):
        while len(body) < n:
            conn.sock.settimeout(10)
            data = conn.sock.recv(min(n - len(body), 1 << 20))
            ok(data, "connection closed after %.1fs, at %d of %d bytes"
               % (time.monotonic() - start, len(body), size))
            body.extend(data)

    while time.monotonic() - start < seconds and len(body) < size:
        recv_to(min(len(body) + step, size))
        time.sleep(every)
    recv_to(size)
    return bytes(body)


def check_cut_for_not_reading(proxy, tag, client_timeout_ms):
    """The request whose target holds tag was cut because its client stopped
    reading, one client_timeout after the proxy's write blocked (less a tick
    of the coarse clock the proxy's timers run on), or, on a loaded machine,
    two: at the test's 1 s scale the kernel may still move bytes at the
    quarter mark (a window reopened without the client reading, seen
    through a zero-window probe), which the proxy takes as reading."""
    f = access_fields(proxy.access_one(tag, timeout=(client_timeout_ms / 1000 + 5) * SLOW))
    eq(f.get("note"), "client%20stopped%20reading", "access note")
    ok(client_timeout_ms - 10 <= int(f["duration_ms"]) < 2 * client_timeout_ms + 700 * SLOW,
       "cut after %sms (client_timeout %dms)" % (f["duration_ms"], client_timeout_ms))


# The clients of kernel_capacity and response_tail_in_proxy have a receive
# buffer the kernel does not grow: grown, it would depend on how much one
# read happened to copy.
CAPACITY_RCVBUF = 64 << 10


def kernel_capacity(port):
    """How many bytes of a response the kernel holds between the proxy on
    port and a client that stopped reading: the proxy socket's send queue
    plus the client's receive buffer, once they stop growing. The proxy's
    upstream must be an origin.py (its /bytes/N)."""
    with RawConn(port, rcvbuf=CAPACITY_RCVBUF) as c:
        c.send(request("GET", "/bytes/%d?capacity" % (16 << 20), "a.example"))
        c.read_head()
        last = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = (send_queue(port, c.local_port), readable(c.sock))
            if now == last:
                break
            last = now
        return len(c.buf) + sum(last)


def response_tail_in_proxy(proxy, tag, port=None):
    """A RawConn to the proxy whose GET /bytes/N?tag-K was answered whole
    (its access line is logged) while the client read nothing, with the
    last 16 to 200 KiB of the response still queued in the proxy: more
    than the kernel holds between the proxy and the client, and less than
    the proxy queues for a client before it waits for it to drain (256
    KiB). How much the kernel holds depends on how the writes were cut into
    segments, so the size is tried and corrected until the tail fits.
    Returns the connection (its tail_target is the GET's target: two tries
    may ask for the same N), N, and when the access line was seen."""
    port = proxy.port() if port is None else port
    size = kernel_capacity(port) + (96 << 10)
    tried = []
    for attempt in range(8):
        target = "/bytes/%d?%s-%d" % (size, tag, attempt)
        c = RawConn(port, rcvbuf=CAPACITY_RCVBUF)
        c.send(request("GET", target, "a.example"))
        c.read_head()
        deadline = time.monotonic() + 0.5
        while not proxy.access_for(target) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = time.monotonic()
        if proxy.access_for(target):
            waiting = size - (send_queue(port, c.local_port) + readable(c.sock) + len(c.buf))
            if (16 << 10) <= waiting <= (200 << 10):
                c.tail_target = target  # tries may repeat a size: this one's own
                return c, size, seen
            tried.append((size, waiting))
            size += (96 << 10) - waiting
        else:
            tried.append((size, "not queued whole"))
            size -= 128 << 10  # the proxy stopped reading: too much for it to queue
        c.close()
    raise AssertionError("no response size left 16-200 KiB in the proxy; (size, bytes left "
                         "in the proxy) tried: %r" % tried)


def read_to_end(sock, timeout=5):
    """Everything the socket gives, and how it ended: "RST", "FIN" or
    "open" (nothing more within timeout)."""
    sock.settimeout(timeout * SLOW)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return data, "RST"
        except socket.timeout:
            return data, "open"
        if not chunk:
            return data, "FIN"
        data += chunk


def request(method, target, host, headers=(), body=b"", version="HTTP/1.1"):
    """Bytes of a well-formed request."""
    lines = ["%s %s %s" % (method, target, version)]
    if host is not None:
        lines.append("Host: " + host)
    lines += ["%s: %s" % hv for hv in headers]
    if body and not any(n.lower() in ("content-length", "transfer-encoding") for n, _ in headers):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def forward_get(proxy_port, authority, timeout=None):
    """One absolute-form GET http://AUTHORITY/ on its own connection to a
    forward listener (Connection: close); the status code."""
    with RawConn(proxy_port, timeout=timeout or 20 * SLOW) as c:
        c.send(request("GET", "http://%s/" % authority, authority, headers=[("Connection", "close")]))
        return c.read_response().status


def access_fields(line):
    """The key=value fields of a text access-log line as a dict; a quoted
    value (tries="503 -> wait 1.0s -> 200") is taken whole, without quotes."""
    return {k: (q if v == "" else v)
            for k, q, v in re.findall(r'(\w+)=(?:"([^"]*)"|(\S*))', line)}


def try_gaps(requests):
    """Seconds from the end of each response the origin sent to the arrival
    of the next request's head: the waits between tries as the origin saw
    them (origin.Request records, in arrival order). The origin's thread
    notes a response's end after sending it (a reset included), so the
    proxy may have retried before it does: that is waited for."""
    wait_until(lambda: all(r.finished_at is not None for r in requests[:-1]), 5 * SLOW,
               "the origin to note the end of each response but the last")
    return [b.received_at - a.finished_at for a, b in zip(requests, requests[1:])]


def hold_request(t, port, origin, delay, tag):
    """A GET /echo?c=tag&delay=delay on a new RawConn to port (closed when
    the test ends), which the origin holds for delay seconds: returns the
    connection once the origin has the request."""
    c = RawConn(port, timeout=20 * SLOW)
    t.defer(c.close)
    c.send(request("GET", "/echo?c=%s&delay=%s" % (tag, delay), "app.example"))
    origin.wait_for(lambda o: any(q.query.get("c") == tag for q in o.requests), 5 * SLOW,
                    "the request %s at the origin" % tag)
    return c


def fetch(port, method, target, host, headers=(), body=b"", timeout=20):
    """One request on a new RawConn to port, its whole response back (a
    Response, with .elapsed: seconds from sending to the end of the body)."""
    with RawConn(port, timeout=timeout) as c:
        start = time.monotonic()
        c.send(request(method, target, host, headers, body))
        r = c.read_response(method)
        r.elapsed = time.monotonic() - start
        return r


def check_error_response(resp, status, reason_words=None):
    """A proxy-made error (a Response or a CurlResult): status, text/plain,
    exact Content-Length, Retry-Attempts, one line of text ending in a
    newline, naming the reason when reason_words are given."""
    eq(resp.status, status, "status (body %r)" % resp.body)
    ct = resp.header("Content-Type") or ""
    ok(ct.lower().startswith("text/plain"), "Content-Type should be text/plain, got %r" % ct)
    eq(resp.header("Content-Length"), str(len(resp.body)), "Content-Length vs body length")
    ok(resp.header("Retry-Attempts") is not None, "Retry-Attempts missing on the error response")
    ok(resp.body.endswith(b"\n") and resp.body.count(b"\n") == 1 and len(resp.body) > 1,
       "body should be exactly one non-empty line ending in \\n, got %r" % resp.body)
    if reason_words:
        text = resp.body.decode("utf-8", "replace").lower()
        ok(any(w in text for w in reason_words),
           "body %r should name the reason (one of %r)" % (resp.body, reason_words))


# -- the proxy under test ---------------------------------------------------------

class Proxy:
    """One retryproxy process started with a YAML config.

    The config text may use @PORT0@..@PORT9@ for the proxy's own listening
    ports (allocated here, waited on until they accept), and @NAME@ for any
    keyword given to TestRun.proxy (e.g. ORIGIN=origin.port)."""

    def __init__(self, run, config, env=None, wait=True, **subst):
        self.run = run
        self.template = config
        self.subst = {k: str(v) for k, v in subst.items()}
        self.env_extra = env or {}
        self.proc = None
        self.ports = {}
        self.n = run._next_id()
        self.config_path = os.path.join(run.tmp, "proxy-%d.yaml" % self.n)
        self.stderr_path = os.path.join(run.tmp, "proxy-%d.stderr" % self.n)
        self.stdout_path = os.path.join(run.tmp, "proxy-%d.stdout" % self.n)
        self.stopped_by_us = False
        self.exit_problem = None
        self.wait_ready = wait

    # The proxy binds ports we picked a moment before; another test may
    # take one in between, so a bind failure at start is retried.
    def start(self):
        for attempt in range(3):
            self._write_config()
            self._spawn()
            if not self.wait_ready:
                return self
            try:
                self._wait_listening()
                return self
            except _BindRace:
                self.proc.wait()
                continue
        raise AssertionError("proxy could not bind its ports after 3 attempts:\n" + self.stderr_tail())

    def _write_config(self):
        text = self.template
        self.ports = {}
        for i in sorted(set(re.findall(r"@PORT(\d)@", text))):
            self.ports[int(i)] = free_port()
            text = text.replace("@PORT%s@" % i, str(self.ports[int(i)]))
        for k, v in self.subst.items():
            text = text.replace("@%s@" % k, v)
        left = re.findall(r"@[A-Z_0-9]+@", text)
        if left:
            raise RuntimeError("config template has unsubstituted %s" % left)
        self.config_text = text
        with open(self.config_path, "w") as f:
            f.write(text)

    def _spawn(self):
        env = clean_env(self.env_extra)
        if getattr(self, "stderr_file", None) is not None:
            self.stderr_file.close()
            self.stdout_file.close()
        if "ASAN_OPTIONS" in self.env_extra and "ASAN_OPTIONS" in os.environ:
            env["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"] + ":" + self.env_extra["ASAN_OPTIONS"]
        self.stderr_file = open(self.stderr_path, "wb")
        self.stdout_file = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen([BIN, "-c", self.config_path], stdin=subprocess.DEVNULL,
                                     stdout=self.stdout_file, stderr=self.stderr_file, env=env,
                                     cwd=self.run.tmp)

    def _wait_listening(self):
        """Wait until the proxy itself listens on every allocated port. A
        connect probe is not enough: another test may own a port the proxy
        failed to bind."""
        deadline = time.monotonic() + 15 * SLOW
        pending = set(self.ports.values())
        while pending:
            code = self.proc.poll()
            if code is not None:
                err = self.stderr()
                if code == 2 and re.search(r"in use|bind", err, re.I):
                    raise _BindRace()
                raise AssertionError("proxy exited with code %s during start-up:\n%s\nconfig:\n%s"
                                     % (code, self.stderr_tail(), self.config_text))
            for p in list(pending):
                if listens_on(self.proc.pid, p, self.stderr):
                    pending.discard(p)
            if time.monotonic() > deadline:
                raise AssertionError("proxy did not listen on ports %s within %ss:\n%s"
                                     % (sorted(pending), 15 * SLOW, self.stderr_tail()))
            time.sleep(0.05)

    @property
    def pid(self):
        return self.proc.pid

    def port(self, i=0):
        return self.ports[i]

    @property
    def url(self):
        """The first listener as a proxy URL for curl -x."""
        return "http://127.0.0.1:%d" % self.ports[0]

    def listener_url(self, i, path="/"):
        return "http://127.0.0.1:%d%s" % (self.ports[i], path)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def reload(self, text=None, outcome=r"reload: now running"):
        """SIGHUP, with the config file rewritten to text first when given,
        and wait for one more stderr line matching outcome than before."""
        if text is not None:
            with open(self.config_path, "w") as f:
                f.write(text)
            self.config_text = text
        n = len([ln for ln in self.stderr_lines() if re.search(outcome, ln)]) + 1
        os.kill(self.pid, signal.SIGHUP)
        self.wait_log(outcome, timeout=10 * SLOW, count=n)

    # -- logs -------------------------------------------------------------

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stderr_lines(self):
        """The complete lines of stderr. A read can catch the proxy's write of
        a batch of lines half done (the file grows a page at a time), so a
        last line without its newline is left for the next read."""
        text = self.stderr()
        return text[:text.rfind("\n") + 1].splitlines()

    def stderr_tail(self, n=40):
        return "\n".join("    | " + ln for ln in self.stderr().splitlines()[-n:])

    def wait_log(self, pattern, timeout=10, count=1):
        """Wait until at least count stderr lines match the regex; return them."""
        rx = re.compile(pattern)

        def found():
            hits = [ln for ln in self.stderr_lines() if rx.search(ln)]
            return hits if len(hits) >= count else None
        try:
            return wait_until(found, timeout, "log line %r" % pattern)
        except AssertionError:
            raise AssertionError("no%s stderr line matching %r within %ss; stderr:\n%s"
                                 % (" %d" % count if count > 1 else "", pattern, timeout, self.stderr_tail()))

    def access_lines(self):
        """Access-log lines: text lines with the word 'access' and a method=
        field, or JSON objects with a 'method' key (parsed)."""
        out = []
        for ln in self.stderr_lines():
            s = ln.strip()
            if s.startswith("{"):
                try:
                    obj = json.loads(s)
                except ValueError:
                    continue
                if isinstance(obj, dict) and "method" in obj:
                    out.append(obj)
            elif re.search(r"\baccess\b", s) and "method=" in s:
                out.append(s)
        return out

    def access_for(self, tag):
        """Access-log entries (as access_lines gives them) whose target
        contains tag."""
        out = []
        for entry in self.access_lines():
            target = entry.get("target", "") if isinstance(entry, dict) else \
                access_fields(entry).get("target", "")
            if tag in target:
                out.append(entry)
        return out

    def access_one(self, tag, timeout=10):
        """Wait for the access-log entry of the one request whose target
        contains tag; fail if there is more than one."""
        wait_until(lambda: self.access_for(tag), timeout * SLOW,
                   "an access-log entry for %r; stderr:\n%s" % (tag, self.stderr_tail()))
        got = self.access_for(tag)
        eq(len(got), 1, "access-log entries for %r (%r)" % (tag, got))
        return got[0]

    # -- process state ----------------------------------------------------

    def proc_status(self):
        """/proc/PID/status as a dict; memory values in KiB as ints."""
        out = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                v = v.strip()
                if v.endswith(" kB"):
                    out[k] = int(v[:-3])
                else:
                    out[k] = v
        return out

    def terminate(self):
        """Send SIGTERM now and return at once, for a test that watches the
        drain; stop() later waits for the exit and checks it as usual."""
        self.stopped_by_us = True
        self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        """SIGTERM (unless terminate() sent it), wait, SIGKILL as a last
        resort. Returns a problem description or None."""
        if self.proc is None:
            return None
        problems = []
        code = self.proc.poll()
        if code is not None and not self.stopped_by_us:
            problems.append("proxy had already exited with code %s before the test stopped it" % code)
        else:
            if code is None and not self.stopped_by_us:
                self.stopped_by_us = True
                self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=20 * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
                problems.append("proxy did not exit within %ss of SIGTERM; killed" % (20 * SLOW))
            else:
                if code != 0:
                    problems.append("proxy exited with code %s after SIGTERM (expected 0)" % code)
        self.stderr_file.close()
        self.stdout_file.close()
        err = self.stderr()
        if any(m in err for m in _SANITIZER_MARKERS):
            problems.append("sanitizer report in proxy stderr")
        if problems:
            self.exit_problem = "; ".join(problems) + ":\n" + self.stderr_tail(60)
        return self.exit_problem


class _BindRace(Exception):
    pass


# -- running a scenario -------------------------------------------------------------

_SCRATCH = None


def scratch_dir():
    global _SCRATCH
    if _SCRATCH is None:
        _SCRATCH = tempfile.mkdtemp(prefix="retryproxy-it-")
    return _SCRATCH


class TestRun:
    def __init__(self, name):
        self.name = name
        self.results = []
        self.tmp = scratch_dir()
        self._cleanups = []
        self._id = 0
        self._certs = None
        self._local_ca = None
        self.proxies = []

    def _next_id(self):
        self._id += 1
        return self._id

    def defer(self, fn):
        """Run fn at the end, in reverse order of registration."""
        self._cleanups.append(fn)
        return fn

    def check(self, name):
        """Decorator: run the function now as a named check."""
        def deco(fn):
            start = time.monotonic()
            try:
                fn()
            except AssertionError as e:
                self._record(name, False, str(e), start)
            except Exception as e:
                self._record(name, False, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()), start)
            else:
                self._record(name, True, "", start)
            return fn
        return deco

    def _record(self, name, passed, msg, start):
        took = time.monotonic() - start
        self.results.append((name, passed, msg))
        if passed:
            print("PASS %s (%.1fs)" % (name, took), flush=True)
        else:
            print("FAIL %s (%.1fs)\n     %s" % (name, took, msg.replace("\n", "\n     ")), flush=True)

    def skip(self, name, reason):
        """Say a check was not run and why (it counts neither way)."""
        print("SKIP %s: %s" % (name, reason), flush=True)

    def fail(self, name, msg):
        self._record(name, False, msg, time.monotonic())

    # -- resources ------------------------------------------------------------------

    def hosts_only_env(self, hosts_text, name="hosts"):
        """The environment for a proxy that resolves names from hosts_text
        alone (RETRYPROXY_HOSTS), its resolver pointed at a loopback port
        where nothing answers, so that no DNS query leaves the machine."""
        hosts = os.path.join(self.tmp, name)
        with open(hosts, "w") as f:
            f.write(hosts_text)
        resolv = os.path.join(self.tmp, name + "-resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver 127.0.0.1:%d\noptions timeout:1 attempts:1\n" % closed_port())
        return {"RETRYPROXY_HOSTS": hosts, "RETRYPROXY_RESOLV_CONF": resolv}

    def certs(self):
        if self._certs is None:
            self._certs = Certs(os.path.join(self.tmp, "pki"))
        return self._certs

    def local_ca(self):
        """The proxy's own CA for intercept: (ca.pem, ca-key.pem), made once
        per run with retryproxy --make-ca; returns its directory."""
        if self._local_ca is None:
            self._local_ca = make_local_ca(os.path.join(self.tmp, "local-ca"))
        return self._local_ca

    def origin(self, **kw):
        o = origin_mod.Origin(**kw).start()
        self.defer(o.stop)
        return o

    def proxy(self, config, env=None, wait=True, **subst):
        p = Proxy(self, config, env=env, wait=wait, **subst)
        self.proxies.append(p)
        self.defer(lambda: self._stop_proxy(p))
        return p.start()

    def _stop_proxy(self, p):
        if getattr(p, "_stop_checked", False):
            return
        p._stop_checked = True
        problem = p.stop()
        label = "proxy #%d exits cleanly on SIGTERM, no crash or sanitizer report" % p.n
        if problem:
            self.fail(label, problem)
        else:
            self._record(label, True, "", time.monotonic())

    def stop_proxy(self, p):
        """Stop a proxy now (recording whether it exited cleanly)."""
        self._stop_proxy(p)

    def cleanup(self):
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except BaseException as e:
                self.fail("cleanup", "%s: %s" % (type(e).__name__, e))
        self.kill_leftovers()

    def kill_leftovers(self):
        """Last resort: no proxy may outlive the test file."""
        for p in self.proxies:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()


def _on_alarm(signum, frame):
    raise TestTimeout("the test file ran out of time")


def _on_term(signum, frame):
    raise TestTimeout("killed by signal %d" % signum)


def run(scenario, doc=None, timeout=100, needs_proxy=True):
    """Run scenario(t) as a test file and exit with its verdict."""
    name = os.path.basename(sys.argv[0])
    if doc:
        print(doc.strip(), flush=True)
        print("-" * 60, flush=True)
    if needs_proxy:
        if not BIN:
            print("FAIL %s: RETRYPROXY_BIN is not set; set it to the retryproxy binary "
                  "(meson test does this)" % name, flush=True)
            sys.exit(1)
        if not (os.path.isfile(BIN) and os.access(BIN, os.X_OK)):
            print("FAIL %s: RETRYPROXY_BIN=%s is not an executable file" % (name, BIN), flush=True)
            sys.exit(1)
    t = TestRun(name)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    signal.alarm(timeout * SLOW)
    try:
        scenario(t)
    except TestTimeout as e:
        t.fail("scenario", "%s (after %ss)" % (e, timeout * SLOW))
    except AssertionError as e:
        t.fail("scenario setup", str(e))
    except Exception as e:
        t.fail("scenario setup", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()))
    finally:
        signal.alarm(30 * SLOW + 30)
        try:
            t.cleanup()
        except TestTimeout as e:
            t.fail("cleanup", str(e))
            t.kill_leftovers()
        signal.alarm(0)
        shutil.rmtree(scratch_dir(), ignore_errors=True)
    failed = [r for r in t.results if not r[1]]
    if not t.results:
        print("FAIL %s: no checks ran" % name)
        sys.exit(1)
    print("-" * 60)
    print("%s: %d checks, %d failed" % (name, len(t.results), len(failed)), flush=True)
    sys.exit(1 if failed else 0)


def run_bin(args, cwd=None, env=None, timeout=20, input=None):
    """Run the proxy binary to completion (for command-line checks)."""
    return subprocess.run([BIN] + list(args), cwd=cwd, env=clean_env(env), capture_output=True,
                          timeout=timeout * SLOW, input=input, text=True)


def make_local_ca(directory):
    """A CA for intercept: made with retryproxy --make-ca in directory;
    returns the directory."""
    p = run_bin(["--make-ca", directory])
    eq(p.returncode, 0, "--make-ca exit code (%s)" % p.stderr)
    return directory


def strict_eof(context):
    """Make context's connections raise ssl.SSLEOFError on an EOF without a
    TLS close_notify (with suppress_ragged_eofs=False), so that a test can
    tell a cut from a clean end. Debian's Python sets
    OP_IGNORE_UNEXPECTED_EOF on every new context, which turns such an EOF
    into a clean one; other builds do not. Returns context."""
    context.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    return context


def intercepted_tls(proxy_port, host, port, cafile, server_hostname=None, strict=False,
                    timeout=10, alpn=None):
    """A TLS connection to host:port through a CONNECT to the proxy, which
    intercepts it, the client trusting cafile (strict: an EOF without
    close_notify raises) and offering the ALPN protocols alpn (a list).
    Returns the SSL socket; a failed handshake raises its ssl.SSLError."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    try:
        s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                   % (host, port, host, port)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)  # not one byte past the head: the TLS handshake's
            if not chunk:
                raise AssertionError("the proxy closed the CONNECT: %r" % head)
            head += chunk
        ok(head.startswith(b"HTTP/1.1 200") and b"\r\nDate: " in head,
           "CONNECT answer (a 200 with a Date) %r" % head)
        context = ssl.create_default_context(cafile=cafile)
        if strict:
            strict_eof(context)
        if alpn is not None:
            context.set_alpn_protocols(alpn)
        return context.wrap_socket(s, server_hostname=server_hostname or host,
                                   suppress_ragged_eofs=not strict)
    except BaseException:
        s.close()
        raise

