#!/usr/bin/env python3
"""Scenario: name resolution of forward-proxy upstreams through the proxy's
own non-blocking resolver, against a DNS stub on loopback.

Client: curl through the forward proxy to http://NAME:PORT/ for names the
stub answers (127.0.0.1, or ::1 then 127.0.0.1), names it answers NXDOMAIN,
SERVFAIL or not at all, a name only the hosts file given in
RETRYPROXY_HOSTS knows, a name only the machine's /etc/hosts knows, and,
on a proxy with access.allow_hosts, names inside and outside the list
(also as CONNECT).
Origin: the test origin on 127.0.0.1 (echo); dnsstub.DnsStub on a
loopback UDP port, named by RETRYPROXY_RESOLV_CONF (`nameserver
127.0.0.1:PORT`, options timeout:1 attempts:1), records every query.
RETRYPROXY_HOSTS names a test hosts file, so no DNS query ever leaves the
machine and /etc/hosts plays no part.
Must hold: a stub-answered name gives 200 from the origin; a name with an
IPv6 address nobody listens on and an IPv4 one still works (the next
address is tried); an NXDOMAIN name gives 502 naming the DNS failure, is
retried like a connect failure (Retry-Attempts and access-log attempts =
max_attempts 3, for a POST too: the request never left), and every try
asked the stub again; SERVFAIL, REFUSED and a silent server give 502 naming the
resolution failure once the resolver gives up (before connect_timeout 3s),
each in its own words ("REFUSED"; "timed out, or SERVFAIL at every attempt"
for the other two, which libevent 2.1 cannot tell apart: it takes a SERVFAIL
as a timeout; before, all three were "non-recoverable failure in name
resolution"),
and the resolver still answers normal names right after; with a resolver
slower than connect_timeout (1s), the try ends at connect_timeout with a 502
naming DNS, counted as kind="dns"; behind a resolver that drops AAAA
queries, a name's A answer is used after RFC 8305's resolution delay (a
request gets 200 within connect_timeout 1s, where the resolver's own skew
is 3 s; when that address refuses, the 502 at connect_timeout names the
refusal), and an AAAA answer that comes 0.3 s after connecting began (to a
blackholed IPv4 address) adds its address to the attempts: 200 from the
IPv6 origin in one try, and an A answer 0.3 s after an AAAA one whose
address refuses is waited for: 200 from 127.0.0.1; an address literal is
never asked of DNS; a name in
RETRYPROXY_HOSTS resolves with no DNS query; localhost and names under
.localhost, which that hosts file lacks, resolve to loopback with no DNS
query (before, the stub was asked, and its answer, 127.0.0.9, used); a name only /etc/hosts knows is
looked up in DNS (the stub sees it), because RETRYPROXY_HOSTS replaces
/etc/hosts; without RETRYPROXY_HOSTS, a name /etc/hosts gives 127.0.0.1
resolves from it with no DNS query; a host outside access.allow_hosts gets 403 and the stub never
sees a query for it; a reload (SIGHUP) reads the hosts file and resolv.conf
again and forgets the answers kept for limits.dns_cache: a name the hosts
file moved from 127.0.0.1 to 127.0.0.2 (where nothing listens) within
dns_cache of its last answer gets 502 for a POST after the reload, and 200 once it is
moved back (and a hosts file that cannot be read at a reload leaves
what it said in force); a name only a second stub answers gets 502 until resolv.conf
names that stub and the proxy is reloaded, then 200; a resolv.conf caught
empty or without a nameserver line at a reload (rewritten in place) keeps
that stub in force (200; before, libevent then asked 127.0.0.1); a lookup in flight
over a reload is sent again and ends (200).
"""

import os
import threading
import time

import harness as h
import dnsstub

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  connect_timeout: 3s
  try_timeout: 10s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    jitter: 10ms
routes:
  - name: one-try
    match: { host: "*.once.test" }
    retry: { max_attempts: 1 }
"""

# The resolver (5s x 2 attempts) is slower than connect_timeout (1s).
CONFIG_SHORT_CONNECT = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
  connect_timeout: 1s
defaults:
  retry:
    max_attempts: 1
"""

CONFIG_ALLOW = """\
listen:
  - address: 127.0.0.1:@PORT0@
access:
  allow_hosts: ["allowed.test", "*.ok.test"]
limits:
  drain_timeout: 2s
  connect_timeout: 3s
defaults:
  retry:
    max_attempts: 1
"""

# Names with one family's answer slow or dropped (RFC 8305's resolution
# delay): a resolver that takes its time, and a connect_timeout long
# enough for an attempt that hangs and the next address after it.
CONFIG_LATE_FAMILY = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  connect_timeout: 5s
defaults:
  retry:
    max_attempts: 1
"""

# Answers kept far longer than the checks take: only a reload forgets them.
CONFIG_RELOAD = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  connect_timeout: 3s
  dns_cache: 60s
defaults:
  retry:
    max_attempts: 1
"""

# A cold start: many requests for a fresh upstream at once, more than
# max_pending_retries, while its first connect (slow DNS) is in doubt.
CONFIG_COLD = """\
listen:
  - address: 127.0.0.1:@PORT0@
limits:
  drain_timeout: 2s
  connect_timeout: 3s
  max_pending_retries: 2
"""

DNS_WORDS = ("resolve", "dns", "name", "nxdomain", "not known")


def etc_hosts_only_name(exclude):
    """A name the machine's /etc/hosts lists (other than localhost and
    those in exclude), or None."""
    try:
        with open("/etc/hosts") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            if name.lower() not in ("localhost", "localhost.localdomain") and name.lower() not in exclude:
                return name
    return None


def etc_hosts_loopback_name():
    """A name other than localhost that /etc/hosts gives only 127.0.0.1,
    or None."""
    try:
        with open("/etc/hosts") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    addrs = {}
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            addrs.setdefault(name.lower(), set()).add(fields[0])
    for name, got in addrs.items():
        if got == {"127.0.0.1"} and name not in ("localhost", "localhost.localdomain"):
            return name
    return None


def a_queries(stub, name):
    return [q for q in stub.queries_for(name) if q.type == "A"]


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(
        answers={"stub-name.test": "127.0.0.1", "dual.test": ["::1", "127.0.0.1"],
                 "allowed.test": "127.0.0.1", "sub.ok.test": "127.0.0.1",
                 "evil-ok.test": "127.0.0.1", "other.test": "127.0.0.1",
                 "after.once.test": "127.0.0.1",
                 # what a resolver that was asked would answer: nothing listens there
                 "localhost": "127.0.0.9", "app.localhost": "127.0.0.9"},
        modes={"broken.once.test": "servfail", "mute.once.test": "silent",
               "refusing.once.test": "refused",
               "mute-slow.test": "silent"},
        default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = stub.write_resolv_conf(t.tmp, "resolv-fast.conf", "timeout:1 attempts:1")
    resolv_slow = stub.write_resolv_conf(t.tmp, "resolv-slow.conf", "timeout:5 attempts:2")
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 hostsonly.test\n")
    env = {"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts}
    proxy = t.proxy(CONFIG, env=env)

    def url(host, path):
        return "http://%s:%d%s" % (host, origin.port, path)

    def timed_get(host, tag, p):
        """A GET of /echo?t=tag on host through p: (curl result, seconds taken)."""
        start = time.monotonic()
        r = h.curl(url(host, "/echo?t=" + tag), proxy=p.url)
        return r, time.monotonic() - start

    @t.check("a name the stub answers (127.0.0.1): 200 from the origin, and the stub was asked")
    def _():
        r = h.curl(url("stub-name.test", "/echo?t=stub"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.eq(len([q for q in origin.requests if q.query.get("t") == "stub"]), 1, "requests at the origin")
        h.ok(a_queries(stub, "stub-name.test"), "no A query for stub-name.test reached the stub: %r"
             % stub.queries)

    @t.check("a name with ::1 (nobody listens) and 127.0.0.1: the next address is tried, 200")
    def _():
        r = h.curl(url("dual.test", "/echo?t=dual"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts (the fallback is within one try)")

    @t.check("NXDOMAIN: 502 naming the DNS failure, 3 tries (header and access log), the stub asked each try")
    def _():
        r = h.curl(url("nx-name.test", "/echo?t=nx"), proxy=proxy.url)
        h.check_error_response(r, 502, DNS_WORDS)
        h.ok("nx-name.test" in r.body.decode("latin-1"), "the error should name the host: %r" % r.body)
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        entry = h.access_fields(proxy.access_one("t=nx"))
        h.eq(entry.get("attempts"), "3", "access-log attempts (%r)" % entry)
        h.eq(entry.get("tries", "").count("dns"), 3, "dns failures in the access-log trail (%r)" % entry)
        h.ok(len(a_queries(stub, "nx-name.test")) >= 3,
             "the stub saw %d A queries for nx-name.test over 3 tries: %r"
             % (len(a_queries(stub, "nx-name.test")), stub.queries_for("nx-name.test")))
        h.eq([q for q in origin.requests if q.query.get("t") == "nx"], [], "requests at the origin")

    @t.check("NXDOMAIN for a POST: retried too (the request provably never left), 3 tries")
    def _():
        before = len(a_queries(stub, "nx-post.test"))
        r = h.curl("--data-binary", "payload", url("nx-post.test", "/echo?t=nxpost"), proxy=proxy.url)
        h.check_error_response(r, 502, DNS_WORDS)
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.ok(len(a_queries(stub, "nx-post.test")) - before >= 3,
             "A queries for nx-post.test: %r" % stub.queries_for("nx-post.test"))

    for host, tag, words, said, what in (
            ("broken.once.test", "servfail", DNS_WORDS, "SERVFAIL",
             "SERVFAIL: 502 naming the resolution failure once the resolver gives up, before connect_timeout"),
            ("refusing.once.test", "refused", DNS_WORDS, "REFUSED",
             "REFUSED: 502 naming the refusal, not SERVFAIL nor a timeout"),
            ("mute.once.test", "mute", DNS_WORDS + ("timeout", "timed out"), "timed out",
             "a silent DNS server: 502 naming the resolution failure once the resolver gives up")):
        @t.check(what)
        def _(host=host, tag=tag, words=words, said=said):
            r, took = timed_get(host, tag, proxy)
            h.check_error_response(r, 502, words)
            h.ok(said in r.body.decode("latin-1"), "the 502 should say %r: %r" % (said, r.body))
            h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts (route one-try)")
            h.ok(took < 3 * h.SLOW, "502 took %.1fs; the resolver gives up after about 1s" % took)
            h.ok(a_queries(stub, host), "the stub saw no query for %s" % host)

    @t.check("a name with a label over 63 bytes, which no DNS question can carry: 502 saying so, "
             "not a server's FORMERR, and the stub asked nothing")
    def _():
        host = "a" * 64 + ".test"
        r = h.curl(url(host, "/echo?t=longlabel"), proxy=proxy.url)
        h.check_error_response(r, 502, DNS_WORDS)
        h.ok("cannot be asked of DNS" in r.body.decode("latin-1"), "the 502's reason: %r" % r.body)
        h.eq(stub.queries_for(host), [], "DNS queries for the name")

    @t.check("after SERVFAIL and silence, a good name resolves at once (the stub is not written off)")
    def _():
        r, took = timed_get("after.once.test", "after", proxy)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok(took < 2 * h.SLOW, "took %.1fs" % took)

    @t.check("a name in RETRYPROXY_HOSTS resolves with no DNS query: 200")
    def _():
        r = h.curl(url("hostsonly.test", "/echo?t=hostsfile"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        time.sleep(0.2)
        h.eq(stub.queries_for("hostsonly.test"), [], "DNS queries for a hosts-file name")

    @t.check("localhost and a name under .localhost, which the hosts file lacks, are loopback "
             "with no DNS query (RFC 6761 section 6.3): 200")
    def _():
        for host in ("localhost", "app.localhost", "App.Localhost."):
            r = h.curl(url(host, "/echo?t=localhost"), proxy=proxy.url)
            h.eq((r.exit_code, r.status), (0, 200), "curl exit and status for %s (%r)" % (host, r))
        time.sleep(0.2)
        h.eq(stub.queries_for("localhost") + stub.queries_for("app.localhost"), [],
             "DNS queries for localhost names")

    # before the next check, whose proxy then probes the name it marks down, asking DNS
    loopback_name = etc_hosts_loopback_name()
    if loopback_name is None:
        t.skip("without RETRYPROXY_HOSTS, /etc/hosts is read", "/etc/hosts gives no name but localhost 127.0.0.1")
    else:
        etc = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv})

        @t.check("without RETRYPROXY_HOSTS, a name /etc/hosts gives 127.0.0.1 (%s) resolves from it: "
                 "200, no DNS query" % loopback_name)
        def _():
            start = time.monotonic()
            r = h.curl(url(loopback_name, "/echo?t=etcdefault"), proxy=etc.url)
            h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
            time.sleep(0.2)
            h.eq([q for q in stub.queries_for(loopback_name) if q.at >= start], [],
                 "DNS queries for a name /etc/hosts lists (the default hosts file)")

    name = etc_hosts_only_name({"hostsonly.test"})
    if name is None:
        t.skip("a name only /etc/hosts knows goes to DNS", "/etc/hosts lists no name but localhost")
    else:
        @t.check("a name only /etc/hosts lists (%s) is looked up in DNS: RETRYPROXY_HOSTS replaces /etc/hosts"
                 % name)
        def _():
            r = h.curl(url(name, "/echo?t=etchosts"), proxy=proxy.url)
            h.ok(a_queries(stub, name),
                 "the stub saw no query for %r: the proxy took it from /etc/hosts although "
                 "RETRYPROXY_HOSTS=%s names another file (got %s %r)" % (name, hosts, r.status, r.body[:120]))
            h.check_error_response(r, 502, DNS_WORDS)

    @t.check("the proxy still serves a plain request after all of that; an address literal is "
             "never a DNS question, for either family")
    def _():
        r = h.curl(url("127.0.0.1", "/echo?t=final"), proxy=proxy.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok(proxy.alive(), "proxy exited")
        h.eq(stub.queries_for("127.0.0.1"), [], "DNS queries for 127.0.0.1")

    slow = t.proxy(CONFIG_SHORT_CONNECT, env={"RETRYPROXY_RESOLV_CONF": resolv_slow,
                                              "RETRYPROXY_HOSTS": hosts})

    @t.check("resolver slower than connect_timeout (1s): the try ends at connect_timeout with an error")
    def _():
        r, took = timed_get("mute-slow.test", "muteslow", slow)
        h.check_error_response(r, 502, ("dns",))
        h.ok(0.8 <= took < 3 * h.SLOW, "the error came after %.1fs; connect_timeout is 1s" % took)
        h.ok(a_queries(stub, "mute-slow.test"), "the stub saw no query for mute-slow.test")
        # the name never resolved: a DNS failure, not a connect's
        metrics = h.curl("http://127.0.0.1:%d/metrics" % slow.port(1), check=True).body.decode()
        h.ok((h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="dns"}') or 0) >= 1,
             "retryproxy_upstream_errors_total{kind=\"dns\"} did not count it")
        h.eq(h.metric(metrics, "retryproxy_upstream_errors_total", '{kind="connect"}') or 0, 0,
             "retryproxy_upstream_errors_total{kind=\"connect\"}")

    @t.check("a resolver that drops AAAA queries: the A answer is used after the resolution "
             "delay, not after the resolver's skew (3 s): 200 in one try within connect_timeout 1s")
    def _():
        stub.answer("mute6.test", "127.0.0.1")
        stub.mute("mute6.test", "AAAA")
        r, took = timed_get("mute6.test", "mute6", slow)
        h.eq((r.exit_code, r.status, r.header("Retry-Attempts")), (0, 200, "1"),
             "curl exit, status and Retry-Attempts (%r, after %.1fs)" % (r, took))
        h.ok([q for q in stub.queries_for("mute6.test") if q.type == "AAAA"],
             "the stub saw no AAAA query for mute6.test: %r" % stub.queries_for("mute6.test"))

    @t.check("a resolver that drops AAAA queries and an A address that refuses: at "
             "connect_timeout (1s) the 502 names the refusal, not a timeout")
    def _():
        stub.answer("mute6-refused.test", "127.0.0.1")
        stub.mute("mute6-refused.test", "AAAA")
        closed = h.free_port()
        r = h.curl("http://mute6-refused.test:%d/echo?t=mute6r" % closed, proxy=slow.url)
        h.check_error_response(r, 502, ("refused",))
        h.wait_until(lambda: slow.access_for("t=mute6r"), 5 * h.SLOW, "the access line")
        entry = h.access_fields(slow.access_for("t=mute6r")[0])
        h.eq(entry.get("tries"), "refused", "access-log tries (%r)" % entry)

    late = t.proxy(CONFIG_LATE_FAMILY, env={"RETRYPROXY_RESOLV_CONF": resolv_slow,
                                            "RETRYPROXY_HOSTS": hosts})

    @t.check("an AAAA answer that comes after connecting began: its address joins the attempts "
             "(A: a blackholed 127.0.0.2, AAAA 0.3 s later: ::1, the origin): 200 in one try")
    def _():
        try:
            origin6 = t.origin(host="::1", name="origin-v6")
        except OSError as e:
            t.skip("late AAAA answer", "::1 is not usable here: %s" % e)
            return
        h.blackhole(t, "127.0.0.2", origin6.port)
        stub.answer("late6.test", ["127.0.0.2", "::1"])
        stub.delay("late6.test", 0.3, "AAAA")
        r = h.curl("http://late6.test:%d/echo?t=late6" % origin6.port, proxy=late.url)
        h.eq((r.exit_code, r.status, r.header("Retry-Attempts")), (0, 200, "1"),
             "curl exit, status and Retry-Attempts (%r)" % r)
        h.eq(len([q for q in origin6.requests if q.query.get("t") == "late6"]), 1,
             "requests at the IPv6 origin")
        h.wait_until(lambda: late.access_for("t=late6"), 5 * h.SLOW, "the access line")
        entry = h.access_fields(late.access_for("t=late6")[0])
        h.eq(entry.get("tries"), "200", "access-log tries (%r)" % entry)

    @t.check("an AAAA answer first whose address refuses (no IPv6 listener), the A answer "
             "0.3 s later: the connect waits for it and gets 200 from 127.0.0.1 in one try")
    def _():
        stub.answer("v6first.test", ["::1", "127.0.0.1"])
        stub.delay("v6first.test", 0.3, "A")
        r = h.curl(url("v6first.test", "/echo?t=v6first"), proxy=late.url)
        h.eq((r.exit_code, r.status, r.header("Retry-Attempts")), (0, 200, "1"),
             "curl exit, status and Retry-Attempts (%r)" % r)
        h.eq(len([q for q in origin.requests if q.query.get("t") == "v6first"]), 1,
             "requests at the origin")

    # a reload reads the resolver's files again
    stub2 = dnsstub.DnsStub(answers={"only2.test": "127.0.0.1"}, default_mode="nxdomain").start()
    t.defer(stub2.stop)
    moving_hosts = os.path.join(t.tmp, "hosts-moving")
    moving_resolv = stub.write_resolv_conf(t.tmp, "resolv-moving.conf", "timeout:1 attempts:1")
    with open(moving_hosts, "w") as f:
        f.write("127.0.0.1 moving.test\n")
    moving = t.proxy(CONFIG_RELOAD,
                     env={"RETRYPROXY_RESOLV_CONF": moving_resolv, "RETRYPROXY_HOSTS": moving_hosts})

    def write(path, text):
        with open(path + ".new", "w") as f:
            f.write(text)
        os.rename(path + ".new", path)

    # POSTs, which never take a pooled connection: each connects anew
    @t.check("a reload reads the hosts file again and forgets kept answers: a POST to "
             "moving.test, moved to 127.0.0.2 (nothing listens) within dns_cache, gets 502, "
             "moved back 200")
    def _():
        r = h.curl("--data-binary", "x", url("moving.test", "/echo?t=moving1"), proxy=moving.url)
        h.eq(r.status, 200, "status before the move (%r)" % r)
        write(moving_hosts, "127.0.0.2 moving.test\n")
        moving.reload()
        r = h.curl("--data-binary", "x", url("moving.test", "/echo?t=moving2"), proxy=moving.url)
        h.check_error_response(r, 502, ("refused",))
        write(moving_hosts, "127.0.0.1 moving.test\n")
        moving.reload()
        r = h.curl("--data-binary", "x", url("moving.test", "/echo?t=moving3"), proxy=moving.url)
        h.eq(r.status, 200, "status once moved back (%r)" % r)

    @t.check("a hosts file that cannot be read at a reload leaves its entries in force: 200, "
             "and a warning")
    def _():
        os.rename(moving_hosts, moving_hosts + ".away")
        try:
            moving.reload()
            r = h.curl("--data-binary", "x", url("moving.test", "/echo?t=moving4"),
                       proxy=moving.url)
            h.eq(r.status, 200, "status (%r)" % r)
            moving.wait_log("cannot read the hosts file")
        finally:
            os.rename(moving_hosts + ".away", moving_hosts)

    @t.check("a reload reads resolv.conf again: a name only a second stub answers, 502, then "
             "200 once resolv.conf names that stub")
    def _():
        r = h.curl(url("only2.test", "/echo?t=only2a"), proxy=moving.url)
        h.check_error_response(r, 502, DNS_WORDS)
        write(moving_resolv, "nameserver %s\noptions timeout:1 attempts:1\n" % stub2.address)
        moving.reload()
        r = h.curl(url("only2.test", "/echo?t=only2b"), proxy=moving.url)
        h.eq(r.status, 200, "status after the reload (%r)" % r)
        h.ok([q for q in stub2.queries_for("only2.test") if q.type == "A"],
             "the second stub saw no A query for only2.test: %r" % stub2.queries)

    @t.check("a resolv.conf caught half rewritten at a reload (empty, or no nameserver line) "
             "leaves the nameservers in force: 200, and a warning")
    def _():
        with open(moving_resolv) as f:
            kept = f.read()
        try:
            for i, text in enumerate(["", "options timeout:1\n"]):
                write(moving_resolv, text)
                moving.reload()
                r = h.curl("--data-binary", "x", url("only2.test", "/echo?t=half%d" % i),
                           proxy=moving.url)
                h.eq(r.status, 200, "status with resolv.conf %r (%r)" % (text, r))
            moving.wait_log("names no nameserver; the resolver keeps what it read before")
        finally:
            write(moving_resolv, kept)
            moving.reload()

    @t.check("a lookup in flight over a reload is asked again and ends: 200")
    def _():
        stub2.answer("late2.test", "127.0.0.1")
        stub2.delay("late2.test", 0.6)
        got = []
        th = threading.Thread(target=lambda: got.append(
            h.curl(url("late2.test", "/echo?t=late2"), proxy=moving.url)))
        th.start()
        h.wait_until(lambda: stub2.queries_for("late2.test"), 5 * h.SLOW, "the first question")
        moving.reload()
        th.join(20 * h.SLOW)
        h.eq([r.status for r in got], [200], "status (%r)" % got)
        h.ok(moving.alive(), "proxy exited")

    cold = t.proxy(CONFIG_COLD, env=env)

    @t.check("a cold start: 8 requests at once for a fresh upstream whose name takes 0.5 s to "
             "resolve wait for its first connect, and all get 200 in one try, although "
             "max_pending_retries is 2 (waiting for a connect in doubt is not a retry)")
    def _():
        stub.answer("cold.test", "127.0.0.1")
        stub.delay("cold.test", 0.5)
        results = h.in_threads(8, lambda i: h.curl(url("cold.test", "/echo?t=cold%d" % i),
                                                   proxy=cold.url), 30 * h.SLOW)
        got = [(r.status, r.header("Retry-Attempts")) if isinstance(r, h.CurlResult) else r
               for r in results]
        h.eq(got, [(200, "1")] * 8, "status and Retry-Attempts of each")
        h.wait_until(lambda: len(cold.access_for("t=cold")) == 8, 10 * h.SLOW,
                     "8 access-log lines")
        lines = cold.access_for("t=cold")
        h.ok(not any("gave_up" in line for line in lines), "no request gave up: %r" % lines)

    allow = t.proxy(CONFIG_ALLOW, env=env)

    @t.check("allow_hosts: a listed name (allowed.test) is resolved and served, 200")
    def _():
        r = h.curl(url("allowed.test", "/echo?t=allowed"), proxy=allow.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok(a_queries(stub, "allowed.test"), "the stub saw no query for allowed.test")

    @t.check("allow_hosts *.ok.test: sub.ok.test is served, 200")
    def _():
        r = h.curl(url("sub.ok.test", "/echo?t=subok"), proxy=allow.url)
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)

    for host, what in (("other.test", "a name outside the list"),
                       ("evil-ok.test", "a name that only ends like *.ok.test")):
        @t.check("allow_hosts: %s (%s) gets 403 and the stub never sees a query for it" % (what, host))
        def _(host=host):
            r = h.curl(url(host, "/echo?t=deny-%s" % host), proxy=allow.url)
            h.check_error_response(r, 403)
            time.sleep(0.3)
            h.eq(stub.queries_for(host), [], "DNS queries for %s" % host)
            h.eq([q for q in origin.requests if q.query.get("t") == "deny-" + host], [], "requests at the origin")

    @t.check("allow_hosts: CONNECT other.test:PORT gets 403 and no DNS query")
    def _():
        before = len(stub.queries_for("other.test"))
        with h.RawConn(allow.port()) as c:
            authority = "other.test:%d" % origin.port
            c.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
            r = c.read_response(method="CONNECT")
        h.eq(r.status, 403, "status (%r)" % r)
        time.sleep(0.3)
        h.eq(stub.queries_for("other.test")[before:], [], "DNS queries for other.test")


h.run(scenario, __doc__, timeout=100)
