#!/usr/bin/env python3
"""A tiny DNS server on a loopback UDP port for retryproxy's tests
(standard library only).

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

    def __init__(self, qid, name, qtype, peer, answer):
        self.id = qid
        self.name = name              # lower case, no trailing dot
        self.qtype = qtype            # numeric
        self.type = TYPE_NAMES.get(qtype, str(qtype))
        self.peer = peer
        self.answer = answer          # what the stub did: noerror, nxdomain, servfail, refused, silent, bad
        self.at = time.monotonic()

    def __repr__(self):
        return "Query(%s %s -> %s)" % (self.name, self.type, self.answer)


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

    def __init__(self, answers=None, modes=None, default_mode="nxdomain", host="127.0.0.1", ttl=5):
        self.host = host
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

    def mode(self, name, mode):
        """nxdomain, servfail, refused or silent for name."""
        if mode not in ("nxdomain", "servfail", "refused", "silent"):
            raise ValueError("unknown mode %r" % mode)
        self._modes[self._key(name)] = mode

    # -- lifecycle ---------------------------------------------------------

    def start(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((self.host, 0))
        s.settimeout(0.2)
        self._sock = s
        self.port = s.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name="dnsstub", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()

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
            reply = self._handle(msg, peer)
            if reply is None:
                continue
            last = self._queries[-1]
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

    def _handle(self, msg, peer):
        if len(msg) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
        if flags & 0x8000 or qdcount != 1:
            with self._lock:
                self._queries.append(Query(qid, "", 0, peer, "bad"))
            return None
        try:
            name, pos = _read_name(msg, 12)
        except ValueError:
            with self._lock:
                self._queries.append(Query(qid, "", 0, peer, "bad"))
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
        with self._lock:
            self._queries.append(Query(qid, key, qtype, peer, mode))
        if mode == "silent":
            return None
        opcode_rd = flags & 0x7900            # opcode and RD, copied
        out_flags = 0x8000 | opcode_rd | 0x0400 | 0x0080 | RCODES[mode]   # QR, AA, RA
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
