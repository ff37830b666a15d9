#!/usr/bin/env python3
"""Scenario: the proxy closes an idle intercepted tunnel.

Client: a Python TLS client through a CONNECT to the proxy, trusting the
proxy's local CA and strict about the end of the stream (an EOF without
close_notify raises SSLEOFError).
Origin: a TLS origin signed by the test CA the proxy trusts.
Must hold: a tunnel idle between requests that the proxy closes, because
client_timeout passed or because a drain began (SIGTERM), ends with the
proxy's close_notify before its FIN (RFC 8446 section 6.1; README: the
proxy ends its side of a tunnel with a TLS close_notify), as one the client
ends itself does: a strict client sees a clean end, not a truncation.
"""

import os
import socket
import ssl
import subprocess
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
limits:
  client_timeout: @CLIENT_TIMEOUT@
  drain_timeout: 5s
"""


def tunnel(proxy_port, port, cafile):
    """A strict TLS connection to localhost:port through the proxy."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (port, port))
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(1)
        h.ok(data, "proxy closed the CONNECT: %r" % head)
        head += data
    h.ok(head.startswith(b"HTTP/1.1 200"), "CONNECT answer %r" % head)
    ctx = ssl.create_default_context(cafile=cafile)
    return ctx.wrap_socket(s, server_hostname="localhost", suppress_ragged_eofs=False)


def one_request(tls, port):
    tls.sendall(b"GET /echo HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
    h.eq(h.RawConn.over(tls).read_response().status, 200, "status")


def ending(tls, timeout):
    """How the proxy ended the connection: close_notify, or not."""
    tls.settimeout(timeout)
    try:
        data = tls.recv(65536)
    except ssl.SSLEOFError:
        return "EOF without close_notify"
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "nothing within %ss" % timeout
    return "close_notify" if not data else "data %r" % data[:100]


def scenario(t):
    certs = t.certs()
    local = os.path.join(t.tmp, "local-ca")
    p = subprocess.run([h.BIN, "--make-ca", local], capture_output=True, text=True)
    h.eq(p.returncode, 0, "--make-ca exit code (%s)" % p.stderr)
    local_ca = os.path.join(local, "ca.pem")
    good = t.origin(tls=(certs.server, certs.server_key), name="good")

    proxy = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, CLIENT_TIMEOUT="1s")

    @t.check("client_timeout ends an idle tunnel with close_notify")
    def _():
        with tunnel(proxy.port(), good.port, local_ca) as tls:
            one_request(tls, good.port)
            started = time.monotonic()
            how = ending(tls, 10 * h.SLOW)
            h.eq(how, "close_notify", "the idle tunnel's end (after %.1fs)"
                 % (time.monotonic() - started))

    draining = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, CLIENT_TIMEOUT="60s")

    @t.check("a drain ends an idle tunnel with close_notify")
    def _():
        with tunnel(draining.port(), good.port, local_ca) as tls:
            one_request(tls, good.port)
            draining.terminate()
            h.eq(ending(tls, 10 * h.SLOW), "close_notify", "the idle tunnel's end")
        t.stop_proxy(draining)


h.run(scenario, __doc__)
