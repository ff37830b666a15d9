#!/usr/bin/env python3
"""Scenario: a reload moves the admin listener while an answer is being
written on the old one.

Proxy: 300 routes (so /config is over 100 KiB), admin on port A.
Client: asks GET /config on A with a 4 KiB receive buffer, reads the
head, and stops reading; then the config is reloaded with the admin on
port B; then it reads the rest. A second client holds an idle kept-alive
connection to A.
Must hold: the answer in progress arrives whole (Content-Length bytes; it
was cut short when the old listener was freed with its connections);
after it the connection closes; A accepts no new connection once the
reload is done, B serves; a request on the idle connection meanwhile is
answered with Connection: close; the idle connection to A is closed; the proxy
holds no connection to A at the end. Moved again with an answer in
progress, the proxy stopped meanwhile exits cleanly.
"""

import time

import harness as h

ROUTES = 12000


def config(admin_port, listen_port="@PORT0@"):
    out = ["listen:", "  - address: 127.0.0.1:%s" % listen_port, "    upstream: http://127.0.0.1:9",
           "admin: 127.0.0.1:%s" % admin_port, "log: { level: info, format: text }",
           "routes:"]
    for i in range(ROUTES):
        out += ["  - name: route-number-%03d" % i,
                "    match: { path_prefix: /r%03d/ }" % i]
    return "\n".join(out) + "\n"


def scenario(t):
    p = t.proxy(config("@PORT1@"))
    old_port = p.port(1)
    new_port = h.free_port()
    idle = h.RawConn(old_port)
    idle.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    h.eq(idle.read_response().status, 200, "the idle connection's first answer")

    c = h.RawConn(old_port, rcvbuf=4096)
    c.send(b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = c.read_head()
    length = int(head.header("Content-Length"))
    time.sleep(0.3)  # the proxy's socket buffers fill
    p.reload(config(new_port, p.port(0)))
    accepts_after_reload = h.port_accepts(old_port)
    # a request on a kept-alive connection of the old listener meanwhile
    idle.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    meanwhile = idle.read_response()
    body = b""
    try:
        while len(body) < length:
            chunk = c.sock.recv(65536) if not c.buf else bytes(c.buf)
            c.buf.clear()
            if not chunk:
                break
            body += chunk
    except OSError:
        pass

    @t.check("the answer being written when the admin moved arrives whole")
    def _():
        h.ok(length > 100000, "/config is big enough to be in progress: %d bytes" % length)
        h.eq(len(body), length, "body bytes received")
        h.ok(body.endswith(b"\n"), "the body ends with a whole line")

    @t.check("the old address is closed at once, the new one serves")
    def _():
        h.ok(not accepts_after_reload, "port A accepted a connection after the reload")
        r = h.curl("http://127.0.0.1:%d/healthz" % new_port)
        h.eq(r.status, 200, "GET /healthz on B")

    @t.check("a request on the old listener meanwhile is answered with Connection: close")
    def _():
        h.eq((meanwhile.status, meanwhile.header("Connection")), (200, "close"),
             "status and Connection of the answer")

    @t.check("the old listener's connections close once the answer is written")
    def _():
        h.ok(c.closed_within(5 * h.SLOW), "the answered connection closes")
        h.ok(idle.closed_within(5 * h.SLOW), "the idle connection closes")
        h.wait_until(lambda: h.connections_on(p.pid, old_port) == 0, 5 * h.SLOW,
                     "no connection on the old admin port")

    # the admin moves again with an answer in progress, and the proxy is
    # stopped while the old listener finishes it: it exits cleanly (no
    # leak of the retired listener)
    third_port = h.free_port()
    slow = h.RawConn(new_port, rcvbuf=4096)
    slow.send(b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    slow.read_head()
    time.sleep(0.3)
    p.reload(config(third_port, p.port(0)))
    t.defer(slow.close)


h.run(scenario, __doc__, timeout=60)
