#!/usr/bin/env python3
"""Scenario: the proxy's close_notify at the end of an intercepted tunnel
goes out even when the socket cannot take it at once.

Client: a Python TLS client through a CONNECT to the proxy, trusting the
proxy's local CA and strict about the end of the stream (an EOF without
close_notify raises SSLEOFError).
Origin: a TLS origin signed by the test CA the proxy trusts.
Proxy: a preloaded library (tests/integration/notifyblock.c) refuses the
write of its next close_notify once, as a socket whose buffer is full
refuses it (EAGAIN), while a flag file exists.
Must hold: a client that sends part of a request head and closes its side
(a FIN, after which it still reads) gets the proxy's 400 and then its
close_notify before the FIN: a clean end, although the close_notify had to
wait for the socket (before, the proxy closed as soon as the 400 was
written, and a close_notify the socket did not take then was lost: the
client saw a truncation). The connection still closes once it is sent.
So does a tunnel closed between requests: by the client's FIN (no
close_notify of its own), or by client_timeout (1 s on a second proxy).
And one whose client's FIN comes while the proxy lingers after the answer
to a request with Connection: close, its close_notify still waiting for
the socket (refused while a second flag file exists): the close_notify
goes once the socket takes it (before, the FIN freed the connection and
the close_notify was lost).
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


def read_to_end(tls, timeout):
    """What came until the end, and how the end came: close_notify, or not."""
    tls.settimeout(timeout)
    got = b""
    while True:
        try:
            data = tls.recv(65536)
        except ssl.SSLEOFError:
            return got, "EOF without close_notify"
        except ssl.SSLError as e:
            # OpenSSL 3's report of the same: an EOF where a record was due
            return got, "TLS error %s" % (e.reason or e)
        except ConnectionResetError:
            return got, "reset"
        except socket.timeout:
            return got, "nothing more within %ss" % timeout
        if not data:
            return got, "close_notify"
        got += data


def scenario(t):
    certs = t.certs()
    local = t.local_ca()
    local_ca = os.path.join(local, "ca.pem")
    origin = t.origin(tls=(certs.server, certs.server_key), name="origin")
    shim = os.environ.get("RETRYPROXY_NOTIFYBLOCK")
    h.ok(shim and os.path.exists(shim), "RETRYPROXY_NOTIFYBLOCK names the built library: %r" % shim)
    flag = os.path.join(t.tmp, "close_notify_blocks")
    hold = os.path.join(t.tmp, "close_notify_held")
    asan = os.environ.get("ASAN_OPTIONS")
    env = {"LD_PRELOAD": shim, "RETRYPROXY_NOTIFYBLOCK_FILE": flag,
           "RETRYPROXY_NOTIFYBLOCK_HOLD_FILE": hold,
           "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    proxy = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, CLIENT_TIMEOUT="10s", env=env)

    def client_connections():
        text = h.curl(proxy.listener_url(1, "/metrics")).body.decode()
        return h.metric(text, "retryproxy_connections", '{side="client"}')

    def ended_with_close_notify(how, what, refused=True):
        """The proxy's close_notify ended the tunnel (after its first write
        was refused, when the flag file was set) and the connection is gone."""
        if refused:
            h.ok(not os.path.exists(flag), "the close_notify's first write was refused")
        h.eq(how, "close_notify", what)
        h.wait_until(lambda: client_connections() == 0, 5 * h.SLOW,
                     'the connection closed (retryproxy_connections{side="client"} 0)')

    @t.check("a head cut by the client's FIN in a tunnel: the 400, then a close_notify that "
             "waited for the socket")
    def _():
        with h.intercepted_tls(proxy.port(), "localhost", origin.port, local_ca,
                               strict=True) as tls:
            tls.sendall(b"GET /echo?t=cut HTTP/1.1\r\nHost: localhost:%d\r\nX-Half: a"
                        % origin.port)
            with open(flag, "w"):
                pass
            # a FIN under TLS (no close_notify of the client's): it still reads
            socket.socket.shutdown(tls, socket.SHUT_WR)
            got, how = read_to_end(tls, 5 * h.SLOW)
        h.ok(got.startswith(b"HTTP/1.1 400 "), "the answer: %r" % got[:200])
        ended_with_close_notify(how, "the tunnel's end after the 400")

    @t.check("a client that closes its side between requests in a tunnel: the proxy's "
             "close_notify, though it waited for the socket")
    def _():
        with h.intercepted_tls(proxy.port(), "localhost", origin.port, local_ca,
                               strict=True) as tls:
            tls.sendall(b"GET /echo?t=between HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                        % origin.port)
            h.eq(h.RawConn.over(tls).read_response().status, 200, "status")
            with open(flag, "w"):
                pass
            socket.socket.shutdown(tls, socket.SHUT_WR)
            got, how = read_to_end(tls, 5 * h.SLOW)
        h.eq(got, b"", "what came after the response")
        ended_with_close_notify(how, "the tunnel's end")

    @t.check("a client's FIN while the proxy lingers after Connection: close, its close_notify "
             "waiting for the socket: the close_notify still goes")
    def _():
        with h.intercepted_tls(proxy.port(), "localhost", origin.port, local_ca,
                               strict=True) as tls:
            with open(hold, "w"):
                pass
            try:
                tls.sendall(b"GET /echo?t=linger HTTP/1.1\r\nHost: localhost:%d\r\n"
                            b"Connection: close\r\n\r\n" % origin.port)
                h.eq(h.RawConn.over(tls).read_response().status, 200, "status")
                # the proxy lingers now, its close_notify refused: the FIN
                # comes meanwhile
                time.sleep(0.3)
                socket.socket.shutdown(tls, socket.SHUT_WR)
                time.sleep(0.5)
            finally:
                os.unlink(hold)
            got, how = read_to_end(tls, 5 * h.SLOW)
        h.eq(got, b"", "what came after the response")
        ended_with_close_notify(how, "the tunnel's end", refused=False)

    quick = t.proxy(CONFIG, TESTCA=certs.ca, LOCALCA=local, CLIENT_TIMEOUT="1s", env=env)

    @t.check("client_timeout ends an idle tunnel with a close_notify that waited for the socket")
    def _():
        with h.intercepted_tls(quick.port(), "localhost", origin.port, local_ca,
                               strict=True) as tls:
            tls.sendall(b"GET /echo?t=idle HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                        % origin.port)
            with open(flag, "w"):
                pass
            h.eq(h.RawConn.over(tls).read_response().status, 200, "status")
            got, how = read_to_end(tls, 10 * h.SLOW)
        h.eq(got, b"", "what came after the response")
        h.ok(not os.path.exists(flag), "the close_notify's first write was refused")
        h.eq(how, "close_notify", "the idle tunnel's end")


h.run(scenario, __doc__)
