#!/usr/bin/env python3
"""Scenario: SIGHUP reloads the config.

Client: raw GETs through a sidecar listener. Route "r" (path /r/) sends to
origin A, with a 1.5 s backoff (4.5 s under sanitizers) before its second
try. Then the config file is rewritten and the proxy gets SIGHUP, three
times: (1) route r now sends to origin B; (2) an invalid file (a bad
duration at a known line and column), then one whose route's deadline is
shorter than its backoff; (3) the listener moves to another
port; (4) allow_clients no longer lets loopback in.
Origin: A answers the first try of /r/slow with 503, then 200; B echoes.
Must hold: (1) a request already waiting in backoff when the reload comes
finishes under the old config: its second try goes to A too, and the client
gets A's 200; a request on a new connection goes to B at once; a second
request on a keep-alive connection opened before the reload goes to B too.
(2) the invalid config is refused with a log line naming file:line:col and
a line saying the running config is kept; requests still go to B; so is
the one whose deadline no backoff fits in, naming routes[0].retry.initial_backoff.
(3) the new port listens and serves, the old one no longer accepts, and an
idle keep-alive connection accepted on the old listener is closed. (4) with
access.allow_clients narrowed to exclude loopback, an idle connection is
closed, a request in flight finishes, the next request on its connection
and a new connection get 403.
Then a second proxy whose one listener moves by reload between addresses
on one port: 127.0.0.1:P to 0.0.0.0:P (which cannot listen while the old
socket does) and back, serving after each (127.0.0.2:P answers only while
the wildcard listens); a move whose bind fails (another socket holds
127.0.0.3:P) is refused with the address and cause logged, and the old
listener is back and serving; the error names file:line:column and the
key (listen[N].address, or admin), as a config error does; each move logs
the old listener's close once.
A third proxy (listeners P0 and P1, admin P2) has its admin moved by
reload onto P1 while the listener there is dropped: when a new listener's
bind then fails, P1 is a listener again and the admin answers on P2; when
nothing fails, the admin answers on P1, P0 still proxies and P2 is closed.
"""

import os
import re
import socket
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:{port}
    upstream: http://127.0.0.1:{default}
log: {{ level: info }}
access: {{ allow_clients: [{clients}] }}
limits:
  drain_timeout: 3s
routes:
  - name: r
    match: {{ path_prefix: /r/ }}
    upstream: http://127.0.0.1:{upstream}
    retry: {{ max_attempts: 2, initial_backoff: {backoff}, jitter: 0s }}
"""

LOOPBACK = '127.0.0.0/8, "::1/128"'

# Route r's backoff: the reload and a new request must fit in it, so it
# scales with the sanitizers' slowness.
BACKOFF_S = 1.5 * h.SLOW
BACKOFF = "%dms" % (BACKOFF_S * 1000)


def scenario(t):
    a = t.origin(name="origin-A", echo_unknown=True)
    b = t.origin(name="origin-B", echo_unknown=True)
    a.script("/r/slow", [503, 200])
    proxy = t.proxy(CONFIG.format(port="@PORT0@", default=a.port, upstream=a.port,
                                  backoff=BACKOFF, clients=LOOPBACK))
    port = proxy.port(0)

    reload = proxy.reload

    def get(path, conn=None):
        if conn is None:
            return h.fetch(port, "GET", path, "app.example")
        conn.send(h.request("GET", path, "app.example"))
        return conn.read_response()

    ports = {}
    keepalive = h.RawConn(port)
    t.defer(keepalive.close)
    slow = h.RawConn(port)
    t.defer(slow.close)

    @t.check("before the reload: route r goes to A")
    def _():
        r = get("/r/before", keepalive)
        h.eq(r.status, 200, "status")
        h.eq(len(a.requests_for("/r/before")), 1, "requests for /r/before at A")

    @t.check("SIGHUP during a backoff: new requests go to B, the waiting one finishes at A")
    def _():
        slow.send(h.request("GET", "/r/slow", "app.example"))
        a.wait_for(lambda o: len(o.requests_for("/r/slow")) == 1, 5 * h.SLOW, "the first try at A")
        sent = time.monotonic()
        reload(CONFIG.format(port=port, default=a.port, upstream=b.port, backoff=BACKOFF,
                             clients=LOOPBACK))
        r = get("/r/new")
        h.eq(r.status, 200, "status of a new request after the reload")
        h.eq((len(a.requests_for("/r/new")), len(b.requests_for("/r/new"))), (0, 1),
             "requests for /r/new at A, B")
        took = time.monotonic() - sent
        h.ok(took < BACKOFF_S - 0.1, "the reload and the new request took %.2f s, longer than "
             "the %.1f s backoff; the test cannot tell the configs apart" % (took, BACKOFF_S))
        r = slow.read_response(timeout=10 * h.SLOW)
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "the waiting request's status, attempts")
        h.eq((len(a.requests_for("/r/slow")), len(b.requests_for("/r/slow"))), (2, 0),
             "tries of /r/slow at A, B")

    @t.check("a keep-alive connection opened before the reload sends its next request to B")
    def _():
        r = get("/r/after", keepalive)
        h.eq(r.status, 200, "status")
        h.eq((len(a.requests_for("/r/after")), len(b.requests_for("/r/after"))), (0, 1),
             "requests for /r/after at A, B")

    @t.check("an invalid config is refused naming file:line:col; the old one keeps serving")
    def _():
        bad = CONFIG.format(port=port, default=a.port, upstream=a.port, backoff="soon",
                            clients=LOOPBACK)
        lines = bad.splitlines()
        line = next(i for i, ln in enumerate(lines, 1) if "soon" in ln)
        col = lines[line - 1].index("soon") + 1
        reload(bad, r"keeping the running config")
        where = "%s:%d:%d:" % (os.path.basename(proxy.config_path), line, col)
        hits = [ln for ln in proxy.stderr_lines() if where in ln and "initial_backoff" in ln]
        h.ok(hits, "no log line with %s ...initial_backoff; stderr:\n%s" % (where, proxy.stderr_tail()))
        r = get("/r/still")
        h.eq(r.status, 200, "status")
        h.eq((len(a.requests_for("/r/still")), len(b.requests_for("/r/still"))), (0, 1),
             "requests for /r/still at A, B (B: the config before the bad one)")

    @t.check("a deadline no wait fits in is refused naming file:line:col and the key; the old "
             "config keeps serving")
    def _():
        good = CONFIG.format(port=port, default=a.port, upstream=a.port, backoff=BACKOFF,
                             clients=LOOPBACK)
        bad = good.replace("jitter: 0s }", "jitter: 0s, deadline: 1s }")
        h.ok(bad != good, "the config template changed: no deadline was added")
        lines = bad.splitlines()
        line = next(i for i, ln in enumerate(lines, 1) if "deadline: 1s" in ln)
        # blamed on the route's initial_backoff, which the same mapping sets
        col = lines[line - 1].index("initial_backoff: ") + len("initial_backoff: ") + 1
        reload(bad, r"keeping the running config")
        where = ("%s:%d:%d: routes[0].retry.initial_backoff: initial_backoff (%s) is not "
                 "shorter than deadline (1s)" % (os.path.basename(proxy.config_path), line, col,
                                                 BACKOFF))
        hits = [ln for ln in proxy.stderr_lines() if where in ln]
        h.ok(hits, "no log line with %s; stderr:\n%s" % (where, proxy.stderr_tail()))
        r = get("/r/still-deadline")
        h.eq(r.status, 200, "status")
        h.eq((len(a.requests_for("/r/still-deadline")), len(b.requests_for("/r/still-deadline"))),
             (0, 1), "requests at A, B (B: the config before the refused ones)")

    @t.check("a listener address change binds the new port, closes the old and its idle connections")
    def _():
        idle = h.RawConn(port)
        t.defer(idle.close)
        h.eq(get("/r/idle", idle).status, 200, "request on the old listener")
        new_port = h.free_port()
        reload(CONFIG.format(port=new_port, default=a.port, upstream=b.port, backoff=BACKOFF,
                             clients=LOOPBACK))
        h.wait_until(lambda: h.listens_on(proxy.pid, new_port), 5 * h.SLOW,
                     "the proxy to listen on the new port %d" % new_port)
        h.ok(not h.listens_on(proxy.pid, port), "the proxy still listens on the old port %d" % port)
        h.ok(not h.port_accepts(port), "the old port %d still accepts connections" % port)
        r = h.fetch(new_port, "GET", "/r/moved", "app.example")
        h.eq(r.status, 200, "status on the new port")
        h.eq(len(b.requests_for("/r/moved")), 1, "requests for /r/moved at B")
        h.ok(idle.closed_within(3 * h.SLOW),
             "an idle connection of the removed listener stayed open")
        ports["now"] = new_port

    @t.check("access.allow_clients narrowed: idle connections close, a busy one gets 403 next")
    def _():
        port = ports["now"]
        idle, busy = h.RawConn(port), h.RawConn(port)
        t.defer(idle.close)
        t.defer(busy.close)
        h.eq(get("/r/idle2", idle).status, 200, "a request before the reload")
        busy.send(h.request("GET", "/r/busy?delay=1", "app.example"))
        b.wait_for(lambda o: o.requests_for("/r/busy"), 5 * h.SLOW, "the slow request at B")
        reload(CONFIG.format(port=port, default=b.port, upstream=b.port, backoff=BACKOFF,
                             clients="192.0.2.0/24"))
        h.ok(idle.closed_within(3 * h.SLOW), "the idle connection of a now refused client stayed open")
        h.eq(busy.read_response(timeout=10 * h.SLOW).status, 200, "the request in flight")
        h.eq(get("/r/refused", busy).status, 403, "the next request on that connection")
        h.eq(h.fetch(port, "GET", "/r/refused", "app.example").status, 403, "a new connection")
        h.eq(b.requests_for("/r/refused"), [], "refused requests at B")

    # A second proxy, whose one listener moves between addresses on a port.
    mover = t.proxy(CONFIG.format(port="@PORT0@", default=b.port, upstream=b.port,
                                  backoff=BACKOFF, clients=LOOPBACK))
    mport = mover.port(0)

    def reload_mover(address, outcome=r"reload: now running"):
        text = CONFIG.format(port=mport, default=b.port, upstream=b.port, backoff=BACKOFF,
                             clients=LOOPBACK).replace("127.0.0.1:%d" % mport, address, 1)
        mover.reload(text, outcome)

    def serves(host, tag):
        with h.RawConn(mport, host=host) as c:
            c.send(h.request("GET", "/r/" + tag, "app.example"))
            return c.read_response().status

    def closes_logged(address, since):
        """The log lines since the since'th that say address's listener closed."""
        return [ln for ln in mover.stderr_lines()[since:]
                if re.search(r"closed listener %s(\s|$)" % re.escape(address), ln)]

    @t.check("reload moves a listener 127.0.0.1:P -> 0.0.0.0:P -> 127.0.0.1:P, serving after "
             "each; each move logs the old listener's close once")
    def _():
        h.ok(not h.port_accepts(mport, host="127.0.0.2"), "127.0.0.2:P accepts before the move")
        before = len(mover.stderr_lines())
        reload_mover("0.0.0.0:%d" % mport)
        h.eq(len(closes_logged("127.0.0.1:%d" % mport, before)), 1,
             "lines saying 127.0.0.1:P closed:\n%s" % mover.stderr_tail())
        h.eq(serves("127.0.0.1", "wild1"), 200, "status on 127.0.0.1:P with the wildcard listener")
        h.eq(serves("127.0.0.2", "wild2"), 200, "status on 127.0.0.2:P (only a wildcard takes it)")
        before = len(mover.stderr_lines())
        reload_mover("127.0.0.1:%d" % mport)
        h.eq(len(closes_logged("0.0.0.0:%d" % mport, before)), 1,
             "lines saying 0.0.0.0:P closed:\n%s" % mover.stderr_tail())
        h.eq(serves("127.0.0.1", "back"), 200, "status on 127.0.0.1:P after moving back")
        h.ok(not h.port_accepts(mport, host="127.0.0.2"), "127.0.0.2:P still accepts")
        h.eq([len(b.requests_for("/r/" + tag)) for tag in ("wild1", "wild2", "back")], [1, 1, 1],
             "requests at the origin")

    @t.check("a move whose bind fails keeps the old listener serving and logs the error")
    def _():
        # Another socket on 127.0.0.3:P makes 0.0.0.0:P fail even once the
        # proxy's own 127.0.0.1:P is closed.
        blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.defer(blocker.close)
        blocker.bind(("127.0.0.3", mport))
        blocker.listen(1)
        reload_mover("0.0.0.0:%d" % mport, outcome=r"reload: cannot apply")
        h.ok(any(re.search(r"cannot listen on 0\.0\.0\.0:%d: .*in use" % mport, ln)
                 for ln in mover.stderr_lines()), "an error naming the address and the cause")
        h.ok(any(re.search(r"%s:2:14: listen\[0\]\.address: cannot listen on 0\.0\.0\.0:%d: "
                           % (re.escape(mover.config_path), mport), ln)
                 for ln in mover.stderr_lines()),
             "the error names file:line:column and the key, as a config error does:\n%s"
             % mover.stderr_tail())
        h.ok(h.listens_on(mover.pid, mport), "the proxy listens on port P")
        h.eq(serves("127.0.0.1", "kept"), 200, "status on the kept 127.0.0.1:P")
        blocker.close()
        h.ok(not h.port_accepts(mport, host="127.0.0.2"), "127.0.0.2:P accepts: not the old listener")
        reload_mover("0.0.0.0:%d" % mport)
        h.eq(serves("127.0.0.2", "after"), 200, "the move works once the port is free")

    # A third proxy: the admin moves by reload onto the port of a listener
    # the same reload drops.
    ADMIN_CONFIG = """\
listen:
  - address: 127.0.0.1:{p0}
    upstream: http://127.0.0.1:{origin}
{second}admin: 127.0.0.1:{admin}
log: {{ level: info }}
"""
    SECOND = "  - address: 127.0.0.1:{p}\n    upstream: http://127.0.0.1:{origin}\n"
    mover2 = t.proxy(ADMIN_CONFIG.format(p0="@PORT0@", origin=b.port, admin="@PORT2@",
                                         second=SECOND.format(p="@PORT1@", origin=b.port)))
    p0, p1, p2 = mover2.port(0), mover2.port(1), mover2.port(2)

    def answers(port, tag):
        """'admin' or 'proxy': who answers GET /metrics?tag on port."""
        r = h.fetch(port, "GET", "/metrics?" + tag, "127.0.0.1")
        h.eq(r.status, 200, "status of /metrics on port %d" % port)
        return "admin" if b"retryproxy_" in r.body else "proxy"

    @t.check("a reload moving the admin onto a dropped listener's port that then fails: "
             "both back as they were")
    def _():
        blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.defer(blocker.close)
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        taken = blocker.getsockname()[1]
        mover2.reload(ADMIN_CONFIG.format(p0=p0, origin=b.port, admin=p1,
                                                second=SECOND.format(p=taken, origin=b.port)),
                    r"reload: cannot apply")
        h.eq([answers(p0, "a0"), answers(p1, "a1"), answers(p2, "a2")],
             ["proxy", "proxy", "admin"], "who answers on P0, P1, P2")
        h.ok(any(re.search(r"%s:4:14: listen\[1\]\.address: cannot listen on 127\.0\.0\.1:%d: "
                           % (re.escape(mover2.config_path), taken), ln)
                 for ln in mover2.stderr_lines()),
             "the error names file:line:column and the key:\n%s" % mover2.stderr_tail())
        # the admin's own new address taken: refused, naming admin: where it is
        mover2.reload(ADMIN_CONFIG.format(p0=p0, origin=b.port, admin=taken,
                                          second=SECOND.format(p=p1, origin=b.port)),
                      r"reload: cannot apply")
        h.ok(any(re.search(r"%s:6:8: admin: cannot listen on admin address 127\.0\.0\.1:%d: "
                           % (re.escape(mover2.config_path), taken), ln)
                 for ln in mover2.stderr_lines()),
             "the admin's error names file:line:column and the key:\n%s" % mover2.stderr_tail())
        h.eq([answers(p0, "a3"), answers(p1, "a4"), answers(p2, "a5")],
             ["proxy", "proxy", "admin"], "who answers on P0, P1, P2 after the admin's refusal")
        blocker.close()

    @t.check("a reload moves the admin onto the port of a listener it drops")
    def _():
        mover2.reload(ADMIN_CONFIG.format(p0=p0, origin=b.port, admin=p1, second=""))
        h.eq([answers(p0, "b0"), answers(p1, "b1")], ["proxy", "admin"], "who answers on P0, P1")
        h.ok(not h.port_accepts(p2), "the old admin port still accepts")
        made_way = [ln for ln in mover2.stderr_lines()
                    if "closed listener 127.0.0.1:%d to listen on 127.0.0.1:%d" % (p1, p1) in ln]
        h.eq(len(made_way), 2, "lines saying the listener made way, one per reload")
        closed = [ln for ln in mover2.stderr_lines()
                  if re.search(r"closed listener 127\.0\.0\.1:%d(\s|$)" % p1, ln)]
        h.eq(closed, made_way, "lines saying P1's listener closed: each close once")


h.run(scenario, __doc__)
