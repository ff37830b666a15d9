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
    return h.intercepted_tls(proxy_port, "localhost", port, cafile, strict=True)


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
    local = t.local_ca()
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
