#!/usr/bin/env python3
"""Scenario: an upstream name that resolves to two addresses, one of them
bad: staggered connection attempts (RFC 8305), and tries and probes that
each start at another address.

Client: raw-socket GETs to the forward proxy for http://NAME:PORT/...,
some sent from a thread while the upstream is down; curl to the admin
listener for /upstreams and /metrics.
Origin: the proxy's hosts file (RETRYPROXY_HOSTS) gives each name two
addresses on one port; the resolver is pointed at a nameserver on
loopback nobody answers, so no query leaves the machine.
- blackhole.test: 127.0.0.2 first, a listener whose accept queue is full
  so that SYNs get no answer (a dead host behind a firewall, a stale DNS
  record); then 127.0.0.1, the test origin;
- wrong.example: the same over https: a blackhole on 127.0.0.2, then a
  TLS origin on 127.0.0.1 whose certificate names wrong.example (signed
  by the test CA the proxy trusts), behind a sidecar listener;
- wrong.example on a second port: 127.0.0.2 first, a relay to the TLS
  origin that holds the origin's first bytes (its ServerHello) for 600 ms:
  the TCP connection is made at once, the handshake is slow; then
  127.0.0.1, a listener that counts the connections it accepts;
- rotate.test: 127.0.0.1 first, an origin that answers 503 with
  Connection: close (nothing to pool); then 127.0.0.2, one that answers 200;
- probe.test: 127.0.0.1 and 127.0.0.2, two origins that stop listening
  (refused) and listen again.
Proxy: connect_timeout 1s (so 250 ms before the next address starts),
max_attempts 3, backoff 100ms; health down_after 2, probe_interval 1s,
hold true.
Must hold:
- blackhole.test: each GET on a new connection gets 200 from the origin
  in one try (Retry-Attempts 1, access-log attempts=1 tries="200"), well
  under connect_timeout; /upstreams shows the upstream up with no
  failures, however many GETs;
- wrong.example: the same over https, the TLS handshake made with the
  second address;
- blackhole.test with the origin not listening: the upstream goes down
  and holds a GET; once the origin listens again a probe gets past the
  blackholed first address, the upstream comes up and the GET gets 200;
- a slow TLS handshake on a TCP connection made at once is not raced: the
  GET gets 200 in one try after the 600 ms, and the second address sees
  no connection (the delay is for an address that does not answer);
- adminfirst.test: 127.0.0.1 first, where the proxy's admin endpoint
  listens on the port asked for, then an origin on 127.0.0.2 at that port:
  the admin address is skipped as one that failed, and the GET gets the
  origin's 200 (the admin endpoint is never reached through the proxy);
- hedged.test (the same two origins, nothing pooled): after that retry
  (to the second address) is slow,
  its hedge starts at the first address again, not beside it: 200 from
  127.0.0.1 in three tries;
- rotate.test: the retry after the first address's 503 opens its
  connection to the second address first: 200 in two tries, each origin
  saw one request;
- probe.test: each probe starts one address further than the last: after
  one failed probe (which started at 127.0.0.1), the next one connects to
  127.0.0.2, and the held GET, on its third try, starts at 127.0.0.1
  again.
"""

import socket
import threading
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
  - address: 127.0.0.1:@PORT2@
    upstream: https://wrong.example:@TLS@
  - address: 127.0.0.1:@PORT3@
    upstream: https://wrong.example:@SLOW@
admin: 127.0.0.1:@PORT1@
tls: { ca_file: @CA@ }
log: { level: info, format: text }
limits: { drain_timeout: 2s, connect_timeout: 1s, try_timeout: 5s }
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 100ms
    jitter: 0s
    deadline: 10s
    budget: { ratio: 1, min_per_second: 100000, window: 1s }
routes:
  - name: hedged
    match: { path_prefix: /hedged-rotate }
    retry: { hedge: { after: 300ms, max: 1 } }
health:
  down_after: 2
  probe_interval: 1s
  hold: true
"""


def slow_handshake_relay(t, host, port, target_port, delay):
    """Listen on host:port and relay each connection to 127.0.0.1:target_port,
    holding the target's first bytes for delay seconds."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, port))
    lst.listen(8)
    t.defer(lst.close)

    def pump(src, dst, hold):
        try:
            first = True
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if first and hold:
                    time.sleep(hold)
                first = False
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve():
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", target_port))
            threading.Thread(target=pump, args=(c, up, 0), daemon=True).start()
            threading.Thread(target=pump, args=(up, c, delay), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()


def accept_counter(t, host, port):
    """Listen on host:port, accept and close every connection: a list that
    grows by one per connection."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, port))
    lst.listen(8)
    t.defer(lst.close)
    accepted = []

    def serve():
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            accepted.append(c.getpeername())
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    return accepted


def admin_get(proxy, path):
    return h.curl("http://127.0.0.1:%d%s" % (proxy.port(1), path), check=True).body.decode()


def upstream_line(proxy, name):
    """The /upstreams line of one upstream, or None."""
    for line in admin_get(proxy, "/upstreams").splitlines():
        if line.split(" ", 1)[0] == name:
            return line
    return None


def probes(proxy, name, result):
    value = h.metric(admin_get(proxy, "/metrics"), "retryproxy_probes_total",
                     '{upstream="%s",result="%s"}' % (name, result))
    return int(value or 0)


def get(proxy, url, timeout=20):
    host = url.split("/")[2]
    return h.fetch(proxy.port(0), "GET", url, host, timeout=timeout * h.SLOW)


def get_in_thread(proxy, url):
    """Send a GET from a thread: a dict that gets "response" (or "error")."""
    out = {}

    def run():
        try:
            out["response"] = get(proxy, url, timeout=30)
        except Exception as e:  # reported by the check that reads it
            out["error"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    out["thread"] = th
    return out


def joined(out):
    out["thread"].join(30 * h.SLOW)
    if "error" in out:
        raise AssertionError("the GET failed: %r" % out["error"])
    h.ok("response" in out, "the GET did not end")
    return out["response"]


def no_request(origin, since=0):
    """Connections the origin accepted after the first `since` that carried
    no request: the proxy's probes."""
    return [c for c in origin.connections[since:] if c.request_count == 0]


def scenario(t):
    certs = t.certs()
    good = t.origin(host="127.0.0.1", name="good")
    h.blackhole(t, "127.0.0.2", good.port)
    secure = t.origin(host="127.0.0.1", tls=(certs.wrong, certs.wrong_key), name="tls")
    h.blackhole(t, "127.0.0.2", secure.port)
    slow_port = h.free_port()
    slow_handshake_relay(t, "127.0.0.2", slow_port, secure.port, 0.6)
    raced = accept_counter(t, "127.0.0.1", slow_port)
    bad = t.origin(host="127.0.0.1", name="answers-503")
    other = t.origin(host="127.0.0.2", port=bad.port, name="answers-200")
    pa = t.origin(host="127.0.0.1", name="probe-a")
    pb = t.origin(host="127.0.0.2", port=pa.port, name="probe-b")
    env = t.hosts_only_env("127.0.0.2 blackhole.test\n127.0.0.1 blackhole.test\n"
                           "127.0.0.1 rotate.test\n127.0.0.2 rotate.test\n"
                           "127.0.0.1 hedged.test\n127.0.0.2 hedged.test\n"
                           "127.0.0.1 adminfirst.test\n127.0.0.2 adminfirst.test\n"
                           "127.0.0.1 probe.test\n127.0.0.2 probe.test\n"
                           "127.0.0.2 wrong.example\n127.0.0.1 wrong.example\n")
    proxy = t.proxy(CONFIG, env=env, TLS=secure.port, SLOW=slow_port, CA=certs.ca)
    blackholed = "http://blackhole.test:%d" % good.port

    @t.check("a blackholed first address: each GET gets 200 in one try, well under connect_timeout")
    def _():
        for i in range(4):
            tag = "bh%d" % i
            # conn_close: nothing is pooled, every GET makes its own connection
            r = get(proxy, "%s/echo?t=%s&conn_close=1" % (blackholed, tag))
            h.eq(r.status, 200, "%s: status (body %r)" % (tag, r.body[:200]))
            h.eq(r.header("Retry-Attempts"), "1", "%s: Retry-Attempts" % tag)
            h.ok(r.elapsed < 0.8 * h.SLOW,
                 "%s: answered after %.2f s; the second address starts 250 ms in, "
                 "connect_timeout is 1 s" % (tag, r.elapsed))
            f = h.access_fields(proxy.access_one("t=%s&" % tag))
            h.eq((f.get("attempts"), f.get("tries")), ("1", "200"), "%s: access attempts, tries" % tag)
            h.eq(len([q for q in good.requests if q.query.get("t") == tag]), 1,
                 "%s: requests at the origin" % tag)

    @t.check("a blackholed first address: the upstream stays up with no failures (down_after 2)")
    def _():
        h.eq(upstream_line(proxy, blackholed), "%s up failures=0 held=0" % blackholed,
             "/upstreams line")

    @t.check("a blackholed first address over https: 200 in one try, the handshake made "
             "with the second address")
    def _():
        r = h.fetch(proxy.port(2), "GET", "/echo?t=tls&conn_close=1", "app.example",
                    timeout=20 * h.SLOW)
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.ok(r.elapsed < 0.8 * h.SLOW, "answered after %.2f s; connect_timeout is 1 s" % r.elapsed)
        reqs = [q for q in secure.requests if q.query.get("t") == "tls"]
        h.eq(len(reqs), 1, "requests at the TLS origin")
        conn = [c for c in secure.connections if c.id == reqs[0].conn_id][0]
        h.eq(conn.sni, "wrong.example", "SNI")

    @t.check("a blackholed first address: a probe gets past it, the upstream comes back, "
             "the held GET gets 200")
    def _():
        good.stop_listening()
        pending = get_in_thread(proxy, "%s/echo?t=held" % blackholed)
        h.wait_until(lambda: (upstream_line(proxy, blackholed) or "").startswith(blackholed + " down"),
                     5 * h.SLOW, "the upstream to go down")
        h.wait_until(lambda: " held=1" in upstream_line(proxy, blackholed), 5 * h.SLOW,
                     "the GET to be held")
        good.listen_again()
        r = joined(pending)
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts (2 failed, then released)")
        h.ok(probes(proxy, blackholed, "ok") == 1, "probes ok: %d" % probes(proxy, blackholed, "ok"))
        h.ok(upstream_line(proxy, blackholed).startswith(blackholed + " up"),
             "/upstreams: %r" % upstream_line(proxy, blackholed))

    @t.check("a retry starts at the next address: 503 from the first, 200 from the second, "
             "in two tries")
    def _():
        bad.script("/rotate", ["/status/503?conn_close=1"])
        other.script("/rotate", [200])
        r = get(proxy, "http://rotate.test:%d/rotate" % bad.port)
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "2", "Retry-Attempts")
        h.eq((len(bad.requests_for("/rotate")), len(other.requests_for("/rotate"))), (1, 1),
             "requests at 127.0.0.1 (503) and 127.0.0.2 (200)")
        f = h.access_fields(proxy.access_one("/rotate"))
        h.eq(f.get("tries"), "503 -> wait 100ms -> 200", "access tries")

    @t.check("a name whose first address is the admin endpoint: skipped, the next one answers")
    def _():
        beside = t.origin(host="127.0.0.2", port=proxy.port(1), name="beside-admin")
        r = get(proxy, "http://adminfirst.test:%d/echo?t=adminfirst" % proxy.port(1))
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(len([q for q in beside.requests if q.query.get("t") == "adminfirst"]), 1,
             "requests at 127.0.0.2")

    @t.check("a hedge after a retry starts at another address than the try it races")
    def _():
        bad.script("/hedged-rotate", ["/status/503?conn_close=1", "/bytes/10"])
        other.script("/hedged-rotate", ["/delay/2"])
        # a name of its own: nothing pooled from the check before
        r = get(proxy, "http://hedged.test:%d/hedged-rotate" % bad.port)
        h.eq((r.status, len(r.body)), (200, 10), "status and body length (%r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.eq((len(bad.requests_for("/hedged-rotate")), len(other.requests_for("/hedged-rotate"))),
             (2, 1), "requests at 127.0.0.1 (503, then the hedge's 200) and 127.0.0.2 (slow)")

    @t.check("each probe starts one address further: the second probe connects to 127.0.0.2")
    def _():
        name = "http://probe.test:%d" % pa.port
        pa.stop_listening()
        pb.stop_listening()
        # both addresses refuse: two failed tries mark it down, the third is held
        pending = get_in_thread(proxy, "%s/echo?t=probed" % name)
        h.wait_until(lambda: (upstream_line(proxy, name) or "").startswith(name + " down"),
                     5 * h.SLOW, "the upstream to go down")
        # the first probe (from the first address) fails; the second is 1 s later
        h.wait_until(lambda: probes(proxy, name, "fail") >= 1, 5 * h.SLOW, "a failed probe")
        before_a, before_b = len(pa.connections), len(pb.connections)
        pa.listen_again()
        pb.listen_again()
        # the second probe may come (and connect) before this reads the
        # metrics; it must not have come before both listened
        h.eq(probes(proxy, name, "fail"), 1,
             "probes failed when both listen again (the machine was too slow to "
             "catch the gap between two probes)")
        r = joined(pending)
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "3", "Retry-Attempts")
        h.eq(probes(proxy, name, "ok"), 1, "probes ok")
        # the origins record an accepted connection on their own threads
        h.wait_until(lambda: no_request(pa, before_a) or no_request(pb, before_b), 2 * h.SLOW,
                     "the probe's connection at either origin")
        h.eq((len(no_request(pa, before_a)), len(no_request(pb, before_b))), (0, 1),
             "probe connections at 127.0.0.1 and 127.0.0.2 (%r, %r)"
             % (pa.connections[before_a:], pb.connections[before_b:]))
        h.eq((len([q for q in pa.requests if q.query.get("t") == "probed"]),
              len([q for q in pb.requests if q.query.get("t") == "probed"])), (1, 0),
             "the third try's request at 127.0.0.1 and 127.0.0.2")

    @t.check("a slow TLS handshake on a connection made at once is not raced by the next address")
    def _():
        r = h.fetch(proxy.port(3), "GET", "/echo?t=slowtls&conn_close=1", "app.example",
                    timeout=20 * h.SLOW)
        h.eq(r.status, 200, "status (body %r)" % r.body[:200])
        h.eq(r.header("Retry-Attempts"), "1", "Retry-Attempts")
        h.ok(r.elapsed >= 0.6, "answered after %.2f s, the handshake held 600 ms" % r.elapsed)
        h.eq(raced, [], "connections at the second address")

    @t.check("the proxy is still alive")
    def _():
        h.ok(proxy.alive(), "proxy exited")


h.run(scenario, __doc__, timeout=100)
