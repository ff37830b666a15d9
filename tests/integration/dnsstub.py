#!/usr/bin/env python3
"""A tiny DNS server on a loopback port, UDP and TCP, for retryproxy's
tests (standard library only).

In a test:

    stub = DnsStub(answers={"stub-name.test": "127.0.0.1"},
                   modes={"gone.test": "nxdomain", "broken.test": "servfail",
                          "mute.test": "silent"}).start()
    conf = stub.write_resolv_conf(directory)     # nameserver 127.0.0.1:PORT
    ... start the proxy with RETRYPROXY_RESOLV_CONF=conf ...
    stub.queries_for("gone.test")                # [Query(name, qtype, ...)]
    stub.stop()

Names compare case-insensitively (resolvers may randomise the case of the
letters they send, as libevent's evdns does) and without a trailing dot.
For a name in answers, A queries get the IPv4 address, AAAA queries the
IPv6 one when the name has one (answers={"n": ["127.0.0.1", "::1"]}) and an
empty NOERROR answer otherwise. Every other name gets its mode, or
default_mode: "nxdomain" (rcode 3), "servfail" (rcode 2), "refused"
(rcode 5) or "silent" (no answer at all). Every query is recorded, answered
or not, before anything is sent back. The question is echoed byte for byte,
so a case-randomising resolver accepts the answer.

The same port serves TCP (RFC 1035 section 4.2.2: each message after a
2-byte length), answered as UDP is, unless DnsStub(tcp=False), which
leaves the TCP port closed (a connect is refused). A name given
truncate(name, tcp) has its UDP answers sent with TC=1 and no records (as
a server sends an answer too large for 512 bytes), and its TCP ones per
tcp: "answer" (the whole answer), "silent" (read, never answered),
"close" (closed unanswered) or "malformed" (an answer with another ID).
Each Query says how it came (q.transport, "udp" or "tcp").

Standalone, for trying a resolver by hand:

    python3 dnsstub.py --port 5353 --name stub-name.test=127.0.0.1
"""

import argparse
import ipaddress
import os
import socket
import struct
import threading
import time

RCODES = {"noerror": 0, "servfail": 2, "nxdomain": 3, "refused": 5}
TYPE_A = 1
TYPE_AAAA = 28
TYPE_NAMES = {1: "A", 28: "AAAA", 5: "CNAME", 12: "PTR", 15: "MX", 16: "TXT", 33: "SRV", 255: "ANY"}
TYPE_CODES = {"A": TYPE_A, "AAAA": TYPE_AAAA}


class Query:
    """One query as the stub received it."""

    def __init__(self, qid, name, qtype, peer, answer, transport="udp"):
        self.id = qid
        self.name = name              # lower case, no trailing dot
        self.qtype = qtype            # numeric
        self.type = TYPE_NAMES.get(qtype, str(qtype))
        self.peer = peer
        self.answer = answer          # what the stub did: noerror, nxdomain, servfail, refused, silent, bad, truncated
        self.transport = transport    # udp or tcp
        self.at = time.monotonic()

    def __repr__(self):
        return "Query(%s %s %s -> %s)" % (self.transport, self.name, self.type, self.answer)


def _read_name(msg, pos):
    """The question name starting at pos (no compression in questions) and
    the offset after it; ValueError if it is not well formed."""
    labels = []
    while True:
        if pos >= len(msg):
            raise ValueError("name runs past the message")
        n = msg[pos]
        pos += 1
        if n == 0:
            break
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        if pos + n > len(msg):
            raise ValueError("label runs past the message")
        labels.append(msg[pos:pos + n].decode("latin-1"))
        pos += n
    return ".".join(labels), pos


class DnsStub:
    """The stub server: one thread answering UDP queries on 127.0.0.1."""

    def __init__(self, answers=None, modes=None, default_mode="nxdomain", host="127.0.0.1", ttl=5,
                 tcp=True):
        self.host = host
        self.tcp = tcp
        self._truncated = {}
        self._tcp_sock = None
        self._tcp_thread = None
        self._held = []
        self.ttl = ttl
        self.default_mode = default_mode
        self._answers = {}
        self._modes = {}
        self._delays = {}
        self._muted = set()
        for name, addrs in (answers or {}).items():
            self.answer(name, addrs)
        for name, mode in (modes or {}).items():
            self.mode(name, mode)
        self._lock = threading.Lock()
        self._queries = []
        self._sock = None
        self._thread = None
        self._stopping = threading.Event()
        self.port = None

    @staticmethod
    def _key(name):
        return name.lower().rstrip(".")

    def answer(self, name, addrs):
        """Answer name with these addresses (one string or a list; IPv4 ones
        for A, IPv6 ones for AAAA)."""
        if isinstance(addrs, str):
            addrs = [addrs]
        self._answers[self._key(name)] = [ipaddress.ip_address(a) for a in addrs]

    def delay(self, name, seconds, qtype=None):
        """Answer name (only its queries of qtype, "A" or "AAAA", when given)
        only after this many seconds (answered from a timer, so other names
        are not held up)."""
        self._delays[(self._key(name), TYPE_CODES.get(qtype))] = seconds

    def mute(self, name, qtype):
        """Never answer name's queries of qtype ("A" or "AAAA"), as a
        resolver that drops AAAA queries does; its other queries are
        answered as before."""
        self._muted.add((self._key(name), TYPE_CODES[qtype]))

    def truncate(self, name, tcp="answer"):
        """Answer name over UDP with TC=1 and no records; over TCP per tcp:
        answer, silent, close or malformed."""
        if tcp not in ("answer", "silent", "close", "malformed"):
            raise ValueError("unknown tcp behaviour %r" % tcp)
        self._truncated[self._key(name)] = tcp

    def mode(self, name, mode):
        """nxdomain, servfail, refused or silent for name."""
        if mode not in ("nxdomain", "servfail", "refused", "silent"):
            raise ValueError("unknown mode %r" % mode)
        self._modes[self._key(name)] = mode

    # -- lifecycle ---------------------------------------------------------

    def start(self, port=0):
        # the TCP port first when wanted, then UDP on the same number
        for _ in range(50):
            t = None
            if self.tcp:
                t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                t.bind((self.host, port))
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind((self.host, t.getsockname()[1] if t else port))
            except OSError:
                s.close()
                if t is not None:
                    t.close()
                if port:
                    raise
                continue
            break
        else:
            raise OSError("no port free for both UDP and TCP")
        s.settimeout(0.2)
        self._sock = s
        self.port = s.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name="dnsstub", daemon=True)
        self._thread.start()
        if t is not None:
            t.listen(16)
            t.settimeout(0.2)
            self._tcp_sock = t
            self._tcp_thread = threading.Thread(target=self._tcp_loop, name="dnsstub-tcp",
                                                daemon=True)
            self._tcp_thread.start()
        return self

    def stop(self):
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._tcp_thread is not None:
            self._tcp_thread.join(5)
        if self._sock is not None:
            self._sock.close()
        if self._tcp_sock is not None:
            self._tcp_sock.close()
        for c in self._held:
            c.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def write_resolv_conf(self, directory, name="resolv.conf", options="timeout:1 attempts:1"):
        """A resolv.conf naming only this stub; returns its path. The options
        line keeps a resolver's give-up time short and known."""
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write("nameserver %s\n" % self.address)
            if options:
                f.write("options %s\n" % options)
        return path

    # -- records -----------------------------------------------------------

    @property
    def queries(self):
        with self._lock:
            return list(self._queries)

    def queries_for(self, name):
        """Queries whose name is name or starts with name + '.' (a resolver
        may append a search domain)."""
        key = self._key(name)
        return [q for q in self.queries if q.name == key or q.name.startswith(key + ".")]

    def clear(self):
        with self._lock:
            self._queries = []

    # -- serving -----------------------------------------------------------

    def _loop(self):
        while not self._stopping.is_set():
            try:
                msg, peer = self._sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            seen = []
            reply = self._handle(msg, peer, "udp", seen)
            if reply is None:
                continue
            last = seen[0]
            delay = self._delays.get((last.name, last.qtype), self._delays.get((last.name, None)))
            if delay:
                threading.Timer(delay, self._send, (reply, peer)).start()
            else:
                self._send(reply, peer)

    def _send(self, reply, peer):
        try:
            self._sock.sendto(reply, peer)
        except OSError:
            pass

    def _tcp_loop(self):
        while not self._stopping.is_set():
            try:
                conn, peer = self._tcp_sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._tcp_serve, args=(conn, peer), daemon=True).start()

    @staticmethod
    def _recv_exactly(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _tcp_serve(self, conn, peer):
        """One TCP connection: length-prefixed queries until it closes."""
        conn.settimeout(10)
        try:
            while not self._stopping.is_set():
                head = self._recv_exactly(conn, 2)
                if head is None:
                    break
                msg = self._recv_exactly(conn, struct.unpack("!H", head)[0])
                if msg is None:
                    break
                seen = []
                reply = self._handle(msg, peer, "tcp", seen)
                how = self._truncated.get(seen[0].name) if seen else None
                if how == "silent" or reply is None:
                    # held open, unanswered, until the stub stops
                    self._held.append(conn)
                    return
                if how == "close":
                    break
                if how == "malformed":
                    reply = struct.pack("!H", (struct.unpack("!H", reply[:2])[0] + 1) & 0xFFFF) + reply[2:]
                conn.sendall(struct.pack("!H", len(reply)) + reply)
        except OSError:
            pass
        conn.close()

    def _handle(self, msg, peer, transport="udp", seen=None):
        """The reply to msg (None: none is sent); the query it records is
        appended to seen too, when given."""
        if len(msg) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
        if flags & 0x8000 or qdcount != 1:
            with self._lock:
                self._queries.append(Query(qid, "", 0, peer, "bad", transport))
            return None
        try:
            name, pos = _read_name(msg, 12)
        except ValueError:
            with self._lock:
                self._queries.append(Query(qid, "", 0, peer, "bad", transport))
            return None
        if pos + 4 > len(msg):
            return None
        qtype, qclass = struct.unpack("!HH", msg[pos:pos + 4])
        question = msg[12:pos + 4]
        key = self._key(name)
        records = []
        if key in self._answers:
            mode = "noerror"
            want = 4 if qtype == TYPE_A else 6 if qtype == TYPE_AAAA else None
            records = [a for a in self._answers[key] if a.version == want]
        else:
            mode = self._modes.get(key, self.default_mode)
        if (key, qtype) in self._muted:
            mode = "silent"
        truncated = transport == "udp" and key in self._truncated and mode != "silent"
        query = Query(qid, key, qtype, peer, "truncated" if truncated else mode, transport)
        if seen is not None:
            seen.append(query)
        with self._lock:
            self._queries.append(query)
        if mode == "silent":
            return None
        opcode_rd = flags & 0x7900            # opcode and RD, copied
        out_flags = 0x8000 | opcode_rd | 0x0400 | 0x0080 | RCODES[mode]   # QR, AA, RA
        if truncated:
            # TC, and none of the records that did not fit
            return struct.pack("!HHHHHH", qid, out_flags | 0x0200, 1, 0, 0, 0) + question
        head = struct.pack("!HHHHHH", qid, out_flags, 1, len(records), 0, 0)
        body = bytearray(question)
        for addr in records:
            rdata = addr.packed
            body += struct.pack("!HHHIH", 0xC00C, qtype, qclass, self.ttl, len(rdata)) + rdata
        return head + bytes(body)


def main(argv=None):
    ap = argparse.ArgumentParser(description="retryproxy test DNS stub")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", action="append", default=[], metavar="NAME=ADDR[,ADDR]")
    ap.add_argument("--default", default="nxdomain", choices=["nxdomain", "servfail", "refused", "silent"])
    args = ap.parse_args(argv)
    answers = {}
    for spec in args.name:
        name, _, addrs = spec.partition("=")
        answers[name] = addrs.split(",")
    stub = DnsStub(answers=answers, default_mode=args.default)
    # the standalone stub takes the port it is told
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((stub.host, args.port))
    s.settimeout(0.2)
    stub._sock, stub.port = s, args.port
    stub._thread = threading.Thread(target=stub._loop, daemon=True)
    stub._thread.start()
    print("dnsstub on %s" % stub.address, flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.2)
            qs = stub.queries
            for q in qs[seen:]:
                print(q, flush=True)
            seen = len(qs)
    except KeyboardInterrupt:
        pass
    stub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
