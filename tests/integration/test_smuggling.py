#!/usr/bin/env python3
"""Scenario: request smuggling and malformed requests, one raw connection
per case, against a sidecar listener, then again inside an intercepted
HTTPS tunnel.

Client: for each row of the table CASES, a fresh TCP connection to a
sidecar listener that sends the row's bytes in one write: Content-Length
and Transfer-Encoding together (either order), duplicate, comma-joined,
signed, hex, empty, fractional, leading-zero or overflowing Content-Length,
Content_Length and Transfer_Encoding (an origin mapping '_' to '-' would
see a second framing field), every wrong
Transfer-Encoding (identity, xchunked, chunked twice, gzip, gzip before
chunked (501), a trailing or
leading comma, an empty second field, in HTTP/1.0, through obs-fold, a
vertical tab, space before the colon), bad chunk lines (overflow, non-hex, negative, leading space, 0x,
empty, bad extensions, data longer than the size, bare LF or CR), bare LF
and bare CR in the request line, fields and the blank line, obs-fold, NUL,
DEL and control bytes in values, names and targets, a backslash in the
target, bad field names,
userinfo in an absolute URI, bad Host fields, bad method tokens, bad
HTTP versions, HTTP/0.9 and the HTTP/2 preface, a target over
max_uri_bytes (1 KiB), a head over max_header_bytes (4 KiB), too many
fields, an unknown Expect, and pipelines: valid requests followed by a bad
one, a bad one followed by a valid one, chunked and Content-Length bodies
followed in the same segment by bytes that form a request, a request inside
chunk data; and a few valid controls (duplicate identical Content-Length,
upper-case CHUNKED, valid chunk extensions and trailers, a GET with a
body, HTTP/1.0 without Host). Then, outside the table: a chunked body whose
bad chunk comes 0.5 s after the head and a good chunk, and a body the
client cuts short with a FIN.
Then the same inside a tunnel: for each row a fresh CONNECT
localhost:<port> to the forward listener, which intercepts it, a TLS 1.2
handshake trusting the proxy's local CA (made with retryproxy --make-ca),
and the row's bytes in one write inside, with "Host: a.example" made the
tunnel's authority; the rows tunnel_cases() lists carry their own bytes
there (the Host rows name the tunnel's host with the same defect, the
requests inside chunk data name it with the chunk size to match, the
absolute URI with userinfo names the tunnel's authority), and rows that
exist only in the tunnel send absolute-form (to the tunnel's own origin,
served; to another, 421; to the tunnel's with another Host, 400),
authority-form (CONNECT), asterisk-form with another Host, and another Host,
alone or after a valid request or body in the same write. Also in the
tunnel: the late bad chunk, a body cut by a TCP FIN without close_notify,
and with TLS 1.3 a request (and a CL+TE one) sent in the same write as the
client's Finished.
Origin: the recording test origin (/echo), behind the sidecar listener;
for the tunnel a TLS origin for localhost signed by the test CA, which the
proxy trusts through tls.ca_file; max_attempts 1, client_timeout 3s.
Must hold: each row gets exactly its expected answers: a refusal is the
row's status (400, 413, 414, 417, 431, 501, or 505 where the row allows it)
with a one-line text/plain body, Retry-Attempts and Connection: close, and
then the connection closes; valid requests before it are answered 200 in
order; the origin receives exactly the row's expected requests (the valid
prefix), each once, bodies exact, never a refused request or bytes merged
from the next one; over the whole run the origin sees no request that no
row expects; a row refused "or served" (Either) passes only if, when
served, the origin read the body exactly as the proxy did. Inside the
tunnel every row holds the same way at the TLS origin and gets exactly the
statuses it got outside (the same alternative of an Either); a request
whose Host is not the tunnel's host, or a CONNECT, is a 400, and one whose
absolute-form target names another origin a 421, and neither reaches the
origin, also when it follows a valid one (an absolute-form target naming
the tunnel's origin is served); a request
in the same write as the client's TLS 1.3 Finished is answered like any
other. A body that breaks or stops after the head went upstream never
reaches the origin complete, outside or inside the tunnel. Afterwards the
proxy still serves a normal GET and keep-alive, on the sidecar listener
and inside a tunnel, and exits cleanly on SIGTERM.
"""

import os
import socket
import ssl
import time

import dnsstub
import harness as h

# Listener 0 is the sidecar the plain rows go to; listener 1 is a forward
# listener where a CONNECT to localhost is intercepted with the local CA
# and the requests inside go to https://localhost:<port>, a TLS origin
# signed by the test CA.
CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
  - address: 127.0.0.1:@PORT1@
tls:
  ca_file: @TESTCA@
intercept:
  hosts: ["localhost"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
limits:
  drain_timeout: 2s
  client_timeout: 3s
  max_uri_bytes: 1KiB
  max_header_bytes: 4KiB
defaults:
  retry:
    max_attempts: 1
"""

HOST = b"Host: a.example\r\n"


def req(tag, method=b"GET", fields=b"", body=b"", version=b"HTTP/1.1", host=HOST):
    """A request for /echo?c=TAG with these extra field lines (each ending
    in CRLF) and body bytes sent as they are."""
    return (method + b" /echo?c=" + tag.encode() + b" " + version + b"\r\n" + host + fields
            + b"\r\n" + body)


def chunked(tag, body, method=b"PUT", fields=b""):
    """A chunked request whose body bytes (chunk lines included) are given raw."""
    return req(tag, method, fields + b"Transfer-Encoding: chunked\r\n", body)


class Either:
    """A row that may be answered in more than one acceptable way; each
    alternative is (expect, origin)."""

    def __init__(self, why, *alternatives):
        self.why = why
        self.alternatives = alternatives


CLOSE = "close"   # the proxy closes the connection without answering

GOOD_CHUNKS = b"5\r\nhello\r\n0\r\n\r\n"
SMUGGLED = b"GET /echo?c=smuggled HTTP/1.1\r\nHost: a.example\r\n\r\n"
BAD_NEXT = (b"POST /echo?c=bad-next HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
IN_CHUNK = b"GET /echo?c=inside-chunk HTTP/1.1\r\nHost: a.example\r\n\r\n"

# (name, raw bytes, expect, origin)
#   expect: a status (the connection is refused with it, then closed), a
#           tuple of statuses (any one of them), a list of statuses (one
#           response each, in order; a final one >= 400 closes), CLOSE, or
#           Either(why, (expect, origin), ...)
#   origin: the requests the origin must receive, in order: the c= tag, or
#           (tag, body) when the body must be exact
CASES = [
    # -- Content-Length and Transfer-Encoding ---------------------------------
    ("cl-then-te", req("cl-then-te", b"POST", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                       b"0\r\n\r\n"), 400, []),
    ("te-then-cl", req("te-then-cl", b"POST", b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                       b"0\r\n\r\n"), 400, []),
    ("te-with-cl-zero", req("te-with-cl-zero", b"POST", b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
                            GOOD_CHUNKS), 400, []),
    ("te-cl-classic-smuggle", req("te-cl-classic-smuggle", b"POST",
                                  b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                                  b"%x\r\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n"), 400, []),
    ("cl-differ", req("cl-differ", b"POST", b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"), 400, []),
    ("cl-comma-differ", req("cl-comma-differ", b"POST", b"Content-Length: 5, 6\r\n", b"hello!"), 400, []),
    ("cl-dup-identical", req("cl-dup-identical", b"POST", b"Content-Length: 5\r\nContent-Length: 5\r\n",
                             b"hello"), 200, [("cl-dup-identical", b"hello")]),
    ("cl-plus", req("cl-plus", b"POST", b"Content-Length: +5\r\n", b"hello"), 400, []),
    ("cl-minus", req("cl-minus", b"POST", b"Content-Length: -5\r\n", b"hello"), 400, []),
    ("cl-inner-space", req("cl-inner-space", b"POST", b"Content-Length: 1 0\r\n", b"helloworld"), 400, []),
    ("cl-hex", req("cl-hex", b"POST", b"Content-Length: 0x5\r\n", b"hello"), 400, []),
    ("cl-empty", req("cl-empty", b"POST", b"Content-Length: \r\n", b"hello"), 400, []),
    ("cl-fraction", req("cl-fraction", b"POST", b"Content-Length: 5.0\r\n", b"hello"), 400, []),
    ("cl-leading-zero", req("cl-leading-zero", b"POST", b"Content-Length: 05\r\n", b"hello"), 400, []),
    ("cl-double-zero", req("cl-double-zero", b"POST", b"Content-Length: 00\r\n", b""), 400, []),
    ("cl-leading-zero-list", req("cl-leading-zero-list", b"POST", b"Content-Length: 12, 012\r\n",
                                 b"hello world!"), 400, []),
    ("cl-zero-valid", req("cl-zero-valid", b"POST", b"Content-Length: 0\r\n", b""), 200, [("cl-zero-valid", b"")]),
    ("cl-underscore", req("cl-underscore", b"POST", b"Content-Length: 5\r\nContent_Length: 0\r\n", b"hello"),
     400, []),
    ("te-underscore", req("te-underscore", b"POST", b"Content-Length: 5\r\nTransfer_Encoding: chunked\r\n",
                          b"0\r\n\r\n"), 400, []),
    ("te-underscore-lower", req("te-underscore-lower", b"PUT", b"transfer_encoding: chunked\r\n", GOOD_CHUNKS),
     400, []),
    ("cl-overflow", req("cl-overflow", b"POST", b"Content-Length: 99999999999999999999999\r\n", b"hello"),
     (400, 413), []),
    ("te-chunked-identity", req("te-chunked-identity", b"PUT", b"Transfer-Encoding: chunked, identity\r\n",
                                GOOD_CHUNKS), 400, []),
    ("te-identity", req("te-identity", b"PUT", b"Transfer-Encoding: identity\r\n", b""), 400, []),
    ("te-xchunked", req("te-xchunked", b"PUT", b"Transfer-Encoding: xchunked\r\n", GOOD_CHUNKS), 400, []),
    ("te-chunked-twice-list", req("te-chunked-twice-list", b"PUT", b"Transfer-Encoding: chunked, chunked\r\n",
                                  GOOD_CHUNKS), 400, []),
    ("te-chunked-twice-fields", req("te-chunked-twice-fields", b"PUT",
                                    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                                    GOOD_CHUNKS), 400, []),
    ("te-gzip", req("te-gzip", b"PUT", b"Transfer-Encoding: gzip\r\n", b"hello"), 400, []),
    # a coding before chunked: one the proxy cannot decode, and an origin
    # that knows no gzip coding might read no body and take the chunks for
    # a request
    ("te-gzip-chunked", req("te-gzip-chunked", b"PUT", b"Transfer-Encoding: gzip, chunked\r\n",
                            GOOD_CHUNKS), 501, []),
    ("te-gzip-then-chunked-fields", req("te-gzip-then-chunked-fields", b"PUT",
                                        b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                                        GOOD_CHUNKS), 501, []),
    ("te-chunked-gzip", req("te-chunked-gzip", b"PUT", b"Transfer-Encoding: chunked, gzip\r\n", GOOD_CHUNKS),
     400, []),
    ("te-trailing-comma", req("te-trailing-comma", b"PUT", b"Transfer-Encoding: chunked,\r\n", GOOD_CHUNKS),
     Either("refused, or read as chunked with the origin reading it the same way: RFC 9110 5.6.1 "
            "lets a recipient ignore an empty list element, but field lines go upstream byte-exact",
            (400, []), (200, [("te-trailing-comma", b"hello")])), None),
    ("te-leading-comma", req("te-leading-comma", b"PUT", b"Transfer-Encoding: , chunked\r\n", GOOD_CHUNKS),
     Either("refused, or read as chunked with the origin reading it the same way",
            (400, []), (200, [("te-leading-comma", b"hello")])), None),
    ("te-then-empty-te-field", req("te-then-empty-te-field", b"PUT",
                                   b"Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n", GOOD_CHUNKS),
     Either("refused, or read as chunked with the origin reading it the same way",
            (400, []), (200, [("te-then-empty-te-field", b"hello")])), None),
    ("te-in-http10", req("te-in-http10", b"PUT", b"Transfer-Encoding: chunked\r\n", GOOD_CHUNKS,
                         version=b"HTTP/1.0"), 400, []),
    ("te-obs-fold", req("te-obs-fold", b"PUT", b"Transfer-Encoding:\r\n chunked\r\n", GOOD_CHUNKS), 400, []),
    ("te-space-before-colon", req("te-space-before-colon", b"PUT", b"Transfer-Encoding : chunked\r\n",
                                  GOOD_CHUNKS), 400, []),
    ("te-vertical-tab", req("te-vertical-tab", b"PUT", b"Transfer-Encoding: \x0bchunked\r\n", GOOD_CHUNKS),
     400, []),
    ("te-upper-case-valid", req("te-upper-case-valid", b"PUT", b"Transfer-Encoding: CHUNKED\r\n", GOOD_CHUNKS),
     200, [("te-upper-case-valid", b"hello")]),
    # -- chunk lines -------------------------------------------------------------
    ("chunk-size-17-hex-digits", chunked("chunk-size-17-hex-digits", b"10000000000000005\r\nhello\r\n0\r\n\r\n"),
     400, []),
    ("chunk-size-non-hex", chunked("chunk-size-non-hex", b"zz\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-size-negative", chunked("chunk-size-negative", b"-5\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-size-leading-space", chunked("chunk-size-leading-space", b" 5\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-size-0x", chunked("chunk-size-0x", b"0x5\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-size-empty", chunked("chunk-size-empty", b"\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-ext-unterminated-quote", chunked("chunk-ext-unterminated-quote",
                                             b"5;a=\"unterminated\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-ext-empty-name", chunked("chunk-ext-empty-name", b"5;=x\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-ext-space-in-name", chunked("chunk-ext-space-in-name", b"5;a b\r\nhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-ext-valid", chunked("chunk-ext-valid", b"5;a=b;c=\"d e\"\r\nhello\r\n0\r\n\r\n"),
     200, [("chunk-ext-valid", b"hello")]),
    ("chunk-missing-crlf-after-data", chunked("chunk-missing-crlf-after-data", b"5\r\nhelloXX0\r\n\r\n"),
     400, []),
    ("chunk-data-longer-than-size", chunked("chunk-data-longer-than-size", b"3\r\nhello\r\n0\r\n\r\n"),
     400, []),
    ("chunk-lines-bare-lf", chunked("chunk-lines-bare-lf", b"5\nhello\n0\n\n"), 400, []),
    ("chunk-size-bare-cr", chunked("chunk-size-bare-cr", b"5\rhello\r\n0\r\n\r\n"), 400, []),
    ("chunk-data-end-bare-lf", chunked("chunk-data-end-bare-lf", b"5\r\nhello\n0\r\n\r\n"), 400, []),
    ("chunk-trailer-bare-lf", chunked("chunk-trailer-bare-lf", b"5\r\nhello\r\n0\r\nX-T: a\n\r\n"), 400, []),
    ("chunk-trailer-valid", chunked("chunk-trailer-valid", b"5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n"),
     200, [("chunk-trailer-valid", b"hello")]),
    # -- line endings ------------------------------------------------------------
    ("request-line-bare-lf", b"GET /echo?c=request-line-bare-lf HTTP/1.1\n" + HOST + b"\r\n", 400, []),
    ("field-bare-lf", req("field-bare-lf", fields=b"X-A: a\nX-B: b\r\n"), 400, []),
    ("all-bare-lf", b"GET /echo?c=all-bare-lf HTTP/1.1\nHost: a.example\nX-A: a\n\n", 400, []),
    ("request-line-bare-cr", b"GET /echo?c=request-line-bare-cr HTTP/1.1\r" + HOST + b"\r\n", 400, []),
    ("field-bare-cr", req("field-bare-cr", fields=b"X-A: a\rb\r\n"), 400, []),
    ("blank-line-bare-lf", b"GET /echo?c=blank-line-bare-lf HTTP/1.1\r\n" + HOST + b"\n\r\n", 400, []),
    # -- field syntax ------------------------------------------------------------
    ("obs-fold-space", req("obs-fold-space", fields=b"X-A: a\r\n b\r\n"), 400, []),
    ("obs-fold-tab", req("obs-fold-tab", fields=b"X-A: a\r\n\tb\r\n"), 400, []),
    ("first-field-leading-space", b"GET /echo?c=first-field-leading-space HTTP/1.1\r\n X-A: a\r\n" + HOST
     + b"\r\n", 400, []),
    ("nul-in-value", req("nul-in-value", fields=b"X-A: a\x00b\r\n"), 400, []),
    ("nul-in-name", req("nul-in-name", fields=b"X-\x00A: b\r\n"), 400, []),
    ("nul-in-target", b"GET /echo?c=nul-in-target\x00x HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("del-in-value", req("del-in-value", fields=b"X-A: a\x7fb\r\n"), 400, []),
    ("control-in-value", req("control-in-value", fields=b"X-A: a\x01b\r\n"), 400, []),
    ("control-in-target", b"GET /echo?c=control-in-target\x01 HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("backslash-in-target", b"GET /echo?c=backslash-in-target\\..\\x HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("backslash-path", b"GET /\\echo?c=backslash-path HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("tab-in-target", b"GET /echo?c=tab-in-target\tx HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("del-in-target", b"GET /echo?c=del-in-target\x7f HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("escape-in-target", b"GET /echo?c=escape-in-target\x1b[0m HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("space-in-target", b"GET /echo?c=space-in-target x HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("space-before-colon", req("space-before-colon", fields=b"X-A : a\r\n"), 400, []),
    ("tab-before-colon", req("tab-before-colon", fields=b"X-A\t: a\r\n"), 400, []),
    ("empty-field-name", req("empty-field-name", fields=b": value\r\n"), 400, []),
    ("field-name-at-sign", req("field-name-at-sign", fields=b"X@Y: 1\r\n"), 400, []),
    ("field-name-space", req("field-name-space", fields=b"X Y: 1\r\n"), 400, []),
    ("field-name-non-ascii", req("field-name-non-ascii", fields=b"X-\xe9: 1\r\n"), 400, []),
    ("field-without-colon", req("field-without-colon", fields=b"X-A a\r\n"), 400, []),
    # -- target and Host ---------------------------------------------------------
    ("absolute-uri-userinfo", b"GET http://user:pw@a.example/echo?c=absolute-uri-userinfo HTTP/1.1\r\n"
     + HOST + b"\r\n", 400, []),
    ("target-fragment", b"GET /echo?c=target-fragment#frag HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("target-not-origin-form", b"GET echo?c=target-not-origin-form HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("host-with-space", req("host-with-space", host=b"Host: a example\r\n"), 400, []),
    ("host-with-at", req("host-with-at", host=b"Host: user@a.example\r\n"), 400, []),
    ("host-bad-port", req("host-bad-port", host=b"Host: a.example:80x\r\n"), 400, []),
    ("host-port-too-big", req("host-port-too-big", host=b"Host: a.example:99999\r\n"), 400, []),
    ("host-list", req("host-list", host=b"Host: a.example, b.example\r\n"), 400, []),
    ("host-twice", req("host-twice", host=b"Host: a.example\r\nHost: b.example\r\n"), 400, []),
    ("host-missing-http11", req("host-missing-http11", host=b""), 400, []),
    ("host-empty", req("host-empty", host=b"Host: \r\n"), 400, []),
    ("host-missing-http10-valid", req("host-missing-http10-valid", host=b"", version=b"HTTP/1.0"),
     200, ["host-missing-http10-valid"]),
    # -- method and version ------------------------------------------------------
    ("method-at-sign", req("method-at-sign", method=b"G@T"), 400, []),
    ("method-empty", b" /echo?c=method-empty HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    ("method-non-ascii", req("method-non-ascii", method=b"G\xc9T"), 400, []),
    ("method-with-slash", req("method-with-slash", method=b"GET/"), 400, []),
    ("version-lower-case", req("version-lower-case", version=b"http/1.1"), 400, []),
    # RFC 9112 section 2.3: a higher minor version is served as 1.1
    ("version-1.2", req("version-1.2", version=b"HTTP/1.2"), 200, ["version-1.2"]),
    # RFC 9110 section 15.6.6: another major version is 505
    ("version-2.0", req("version-2.0", version=b"HTTP/2.0"), 505, []),
    ("version-0.9", req("version-0.9", version=b"HTTP/0.9"), 505, []),
    ("version-no-minor", req("version-no-minor", version=b"HTTP/1"), 400, []),
    ("version-leading-zero", req("version-leading-zero", version=b"HTTP/01.1"), 400, []),
    ("http-0.9", b"GET /echo?c=http-0.9\r\n",
     Either("an HTTP/0.9 client cannot read a 400 anyway", (400, []), (CLOSE, [])), None),
    ("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, []),
    ("request-line-double-space", b"GET  /echo?c=request-line-double-space HTTP/1.1\r\n" + HOST + b"\r\n",
     400, []),
    ("request-line-trailing-space", b"GET /echo?c=request-line-trailing-space HTTP/1.1 \r\n" + HOST + b"\r\n",
     400, []),
    ("request-line-tab", b"GET\t/echo?c=request-line-tab HTTP/1.1\r\n" + HOST + b"\r\n", 400, []),
    # -- sizes and expectations --------------------------------------------------
    ("uri-over-max", b"GET /echo?c=uri-over-max&x=" + b"a" * 2000 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414, []),
    ("head-over-max", req("head-over-max", fields=b"".join(b"X-Filler-%02d: %s\r\n" % (i, b"v" * 80)
                                                            for i in range(60))), 431, []),
    ("too-many-fields", req("too-many-fields", fields=b"".join(b"X%d: v\r\n" % i for i in range(200))),
     431, []),
    ("expect-unknown", req("expect-unknown", fields=b"Expect: something-else\r\n"), 417, []),
    # -- pipelines and bytes after a body ----------------------------------------
    ("pipeline-then-garbage", req("pipeline-then-garbage-1") + b"XYZ\r\n\r\n",
     [200, 400], ["pipeline-then-garbage-1"]),
    ("pipeline-then-cl-te", req("pipeline-then-cl-te-1") + BAD_NEXT, [200, 400], ["pipeline-then-cl-te-1"]),
    ("pipeline-two-then-obs-fold", req("pipeline-two-then-obs-fold-1") + req("pipeline-two-then-obs-fold-2")
     + req("pipeline-two-then-obs-fold-3", fields=b"X-A: a\r\n b\r\n"),
     [200, 200, 400], ["pipeline-two-then-obs-fold-1", "pipeline-two-then-obs-fold-2"]),
    ("pipeline-then-http10-te", req("pipeline-then-http10-te-1")
     + req("pipeline-then-http10-te-2", b"PUT", b"Transfer-Encoding: chunked\r\n", GOOD_CHUNKS,
           version=b"HTTP/1.0"), [200, 400], ["pipeline-then-http10-te-1"]),
    ("pipeline-bad-then-valid", req("pipeline-bad-then-valid-1", fields=b"X-A : a\r\n")
     + req("pipeline-bad-then-valid-2"), 400, []),
    ("chunked-then-request", chunked("chunked-then-request-1", GOOD_CHUNKS)
     + req("chunked-then-request-2"), [200, 200],
     [("chunked-then-request-1", b"hello"), ("chunked-then-request-2", b"")]),
    ("chunked-then-bad-request", chunked("chunked-then-bad-request-1", GOOD_CHUNKS) + BAD_NEXT,
     [200, 400], [("chunked-then-bad-request-1", b"hello")]),
    ("cl-body-then-request", req("cl-body-then-request-1", b"POST", b"Content-Length: 5\r\n", b"hello")
     + req("cl-body-then-request-2"), [200, 200],
     [("cl-body-then-request-1", b"hello"), ("cl-body-then-request-2", b"")]),
    ("cl-body-then-garbage", req("cl-body-then-garbage-1", b"POST", b"Content-Length: 5\r\n", b"hello")
     + b"hello again\r\n\r\n", [200, 400], [("cl-body-then-garbage-1", b"hello")]),
    ("request-inside-chunk-data", chunked("request-inside-chunk-data", b"%x\r\n" % len(IN_CHUNK) + IN_CHUNK
                                          + b"\r\n0\r\n\r\n"), 200, [("request-inside-chunk-data", IN_CHUNK)]),
    ("get-with-cl-body", req("get-with-cl-body", b"GET", b"Content-Length: 5\r\n", b"hello"),
     200, [("get-with-cl-body", b"hello")]),
]


# -- the same rows inside an intercepted tunnel ---------------------------------
#
# Inside a tunnel to localhost:<port> only requests whose Host names the
# tunnel's host, and whose absolute-form target (if any) its origin, are
# accepted; anything else is 400 (421 for another origin). Every row is
# sent there with each field line "Host: a.example" made "Host:
# localhost:<port>"; the rows in tunnel_cases' own carry their own bytes
# there (a Host the plain row spells differently, a request inside chunk
# data whose size changes with it, an absolute URI) and say why; the rows
# after CASES exist only in the tunnel. Every row taken from CASES must
# also get the statuses it got outside the tunnel.

TUNNEL_HOST = "localhost"
OTHER_HOST = b"Host: b.example\r\n"


def tunnel_cases(authority):
    """The rows as they go inside a tunnel to authority (b"localhost:PORT"):
    (name, raw bytes, expect, origin, why the bytes or expectation differ
    from the plain row or None)."""
    host = b"Host: " + authority + b"\r\n"
    smuggled = SMUGGLED.replace(HOST, host)
    in_chunk = IN_CHUNK.replace(HOST, host)
    own = {
        "te-cl-classic-smuggle": (
            req("te-cl-classic-smuggle", b"POST", b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                b"%x\r\n" % len(smuggled) + smuggled + b"\r\n0\r\n\r\n", host=host), 400, [],
            "the request in the chunk names the tunnel's host; the chunk size follows its length"),
        "request-inside-chunk-data": (
            chunked_to(host, "request-inside-chunk-data", b"%x\r\n" % len(in_chunk) + in_chunk
                       + b"\r\n0\r\n\r\n"), 200, [("request-inside-chunk-data", in_chunk)],
            "the request in the chunk names the tunnel's host; the chunk size follows its length"),
        "all-bare-lf": (
            b"GET /echo?c=all-bare-lf HTTP/1.1\nHost: " + authority + b"\nX-A: a\n\n", 400, [],
            "its Host line names the tunnel's authority and ends in a bare LF like the others"),
        "absolute-uri-userinfo": (
            b"GET https://user:pw@" + authority + b"/echo?c=absolute-uri-userinfo HTTP/1.1\r\n" + host
            + b"\r\n", 400, [],
            "userinfo in an absolute URI naming the tunnel's authority"),
        "host-with-space": (req("host-with-space", host=b"Host: local host\r\n"), 400, [],
                            "a space inside the tunnel's host name"),
        "host-with-at": (req("host-with-at", host=b"Host: user@" + authority + b"\r\n"), 400, [],
                         "userinfo before the tunnel's authority"),
        "host-bad-port": (req("host-bad-port", host=b"Host: localhost:80x\r\n"), 400, [],
                          "the tunnel's host name with a bad port"),
        "host-port-too-big": (req("host-port-too-big", host=b"Host: localhost:99999\r\n"), 400, [],
                              "the tunnel's host name with a port over 65535"),
        "host-list": (req("host-list", host=b"Host: " + authority + b", b.example\r\n"), 400, [],
                      "a list whose first element is the tunnel's authority"),
    }
    rows = []
    for name, raw, expect, want in CASES:
        if name in own:
            raw, expect, want, why = own.pop(name)
        else:
            raw, why = raw.replace(HOST, host), None
            h.ok(b"a.example" not in raw, "row %s still names a.example in the tunnel" % name)
        rows.append((name, raw, expect, want, why))
    h.eq(sorted(own), [], "tunnel rows naming no plain row")
    rows += [
        ("tunnel-host-other", req("tunnel-host-other", host=OTHER_HOST), 400, [],
         "a Host naming another host"),
        ("tunnel-absolute-form", b"GET https://" + authority + b"/echo?c=tunnel-absolute-form HTTP/1.1\r\n"
         + host + b"\r\n", 200, ["tunnel-absolute-form"],
         "absolute-form naming the tunnel's own origin: served as its origin-form"),
        ("tunnel-absolute-form-other", b"GET http://b.example/echo?c=tunnel-absolute-form-other HTTP/1.1\r\n"
         + host + b"\r\n", 421, [], "absolute-form naming another origin: misdirected"),
        ("tunnel-absolute-form-other-host", b"GET https://" + authority
         + b"/echo?c=tunnel-absolute-form-other-host HTTP/1.1\r\n" + OTHER_HOST + b"\r\n", 400, [],
         "absolute-form naming the tunnel, its Host another host"),
        ("tunnel-connect", b"CONNECT b.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n", 400, [],
         "a CONNECT (authority-form) inside the tunnel"),
        ("tunnel-asterisk-form", b"OPTIONS * HTTP/1.1\r\n" + OTHER_HOST + b"\r\n", 400, [],
         "asterisk-form with a Host naming another host"),
        ("tunnel-pipeline-then-other-host", req("tunnel-pipeline-then-other-host-1", host=host)
         + req("tunnel-pipeline-then-other-host-2", host=OTHER_HOST), [200, 400],
         ["tunnel-pipeline-then-other-host-1"], "the Host is checked on every request, not the first"),
        ("tunnel-pipeline-then-absolute", req("tunnel-pipeline-then-absolute-1", host=host)
         + b"GET http://b.example/echo?c=tunnel-pipeline-then-absolute-2 HTTP/1.1\r\n" + OTHER_HOST + b"\r\n",
         [200, 421], ["tunnel-pipeline-then-absolute-1"], "the target is checked on every request"),
        ("tunnel-chunked-then-other-host", chunked_to(host, "tunnel-chunked-then-other-host-1", GOOD_CHUNKS)
         + req("tunnel-chunked-then-other-host-2", host=OTHER_HOST), [200, 400],
         [("tunnel-chunked-then-other-host-1", b"hello")], "a request after a chunked body naming another host"),
        ("tunnel-cl-body-then-other-host", req("tunnel-cl-body-then-other-host-1", b"POST",
                                               b"Content-Length: 5\r\n", b"hello", host=host)
         + req("tunnel-cl-body-then-other-host-2", host=OTHER_HOST), [200, 400],
         [("tunnel-cl-body-then-other-host-1", b"hello")],
         "a request after a Content-Length body naming another host"),
    ]
    return rows


def chunked_to(host, tag, body):
    """chunked() with another Host field line."""
    return req(tag, b"PUT", b"Transfer-Encoding: chunked\r\n", body, host=host)


def open_tunnel(proxy_port, authority, context, timeout, with_finished=False):
    """A RawConn over TLS inside an intercepted tunnel: CONNECT authority on
    the forward listener, its 200, then the handshake with context (which
    trusts the proxy's local CA). with_finished holds back the client's
    last handshake flight and sends it in the same write as the first
    bytes the test sends (see HeldFinished)."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise AssertionError("the proxy closed the CONNECT: %r" % head)
            head += chunk
        h.ok(head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n"), "CONNECT answer %r" % head)
        if with_finished:
            tls = HeldFinished(s, context, TUNNEL_HOST)
        else:
            tls = context.wrap_socket(s, server_hostname=TUNNEL_HOST)
    except BaseException:
        s.close()
        raise
    return h.RawConn.over(tls, timeout=timeout)


class HeldFinished:
    """A TLS client over memory BIOs with the socket calls RawConn uses. The
    handshake runs up to the client's last flight (its Finished in TLS
    1.3), which is held back and goes out in one write with the first
    application bytes, as a client that writes its request right after the
    handshake may put them in one segment."""

    def __init__(self, sock, context, server_hostname):
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_hostname)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if self.outgoing.pending:
                    sock.sendall(self.outgoing.read())
                data = sock.recv(65536)
                if not data:
                    raise AssertionError("the proxy closed the connection during the handshake")
                self.incoming.write(data)
        self.held = self.outgoing.read()
        h.ok(self.held, "the client's last handshake flight to hold back")

    def version(self):
        return self.tls.version()

    def sendall(self, data):
        self.tls.write(data)
        self.sock.sendall(self.held + self.outgoing.read())
        self.held = b""

    def recv(self, n):
        while True:
            try:
                return self.tls.read(n)
            except ssl.SSLZeroReturnError:
                return b""
            except ssl.SSLWantReadError:
                data = self.sock.recv(65536)
                if not data:
                    return b""
                self.incoming.write(data)

    def settimeout(self, timeout):
        self.sock.settimeout(timeout)

    def getsockname(self):
        return self.sock.getsockname()

    def close(self):
        self.sock.close()


def observe(port, raw, first_wait=5, next_wait=1.0, connect=None):
    """Send raw on a fresh connection (to port, or the RawConn that
    connect(timeout) opens); read responses until the proxy closes or goes
    quiet. Returns (responses, closed, leftover bytes)."""
    responses = []
    closed = False
    with connect(first_wait) if connect else h.RawConn(port, timeout=first_wait) as c:
        c.send(raw)
        while True:
            try:
                responses.append(c.read_response(timeout=first_wait if not responses else next_wait))
            except h.ReadTimeout:
                break
            except AssertionError:
                closed = True       # EOF before a whole response
                break
            except (ValueError, IndexError) as e:
                raise AssertionError("unparseable response from the proxy (%s): %r" % (e, bytes(c.buf[:300])))
            if c.eof:
                closed = True
                break
        if not closed:
            closed = c.closed_within(0.5)
        leftover = bytes(c.buf)
    return responses, closed, leftover


def describe(responses, closed, leftover):
    return "statuses %r, closed=%s, leftover %r, bodies %r" % (
        [r.status for r in responses], closed, leftover[:80], [r.body[:80] for r in responses])


def check_answers(expect, responses, closed, leftover):
    """AssertionError unless the answers fit expect (not an Either)."""
    seen = describe(responses, closed, leftover)
    if expect == CLOSE:
        h.ok(not responses and closed, "expected the connection closed without an answer; got %s" % seen)
        return
    if isinstance(expect, list):
        statuses = expect
    elif isinstance(expect, tuple):
        h.ok(len(responses) == 1 and responses[0].status in expect,
             "expected one response with a status in %r; got %s" % (expect, seen))
        statuses = [responses[0].status]
    else:
        statuses = [expect]
    h.eq([r.status for r in responses], statuses, "statuses (%s)" % seen)
    h.eq(leftover, b"", "bytes after the last response")
    final = responses[-1]
    for r in responses:
        h.ok(r.header("Retry-Attempts") is not None, "Retry-Attempts missing on the %d" % r.status)
    if final.status >= 400:
        h.check_error_response(final, final.status)
        h.ok("close" in (final.header("Connection") or "").lower(),
             "a refusal should say Connection: close, got %r" % final.headers)
        h.ok(closed, "the connection should close after the refusal (%s)" % seen)


def tag_of(q):
    return q.query.get("c") if isinstance(q.query, dict) else None


def check_origin(want, new):
    """AssertionError unless the origin's new requests are exactly want."""
    got = [(tag_of(q), bytes(q.body)) for q in new]
    h.eq([g[0] for g in got], [w if isinstance(w, str) else w[0] for w in want],
         "requests at the origin (tags), got %r" % got)
    for w, g, q in zip(want, got, new):
        if not isinstance(w, str):
            h.eq(g[1], w[1], "body the origin received for %s" % w[0])
        h.eq((q.error, q.anomalies), (None, []), "origin-side parse problems in %s" % g[0])


def row_label(name, expect, want):
    """A check's name for a row; records nothing."""
    if isinstance(expect, Either):
        return "%s: one of %s (%s)" % (name, " / ".join(repr(a[0]) for a in expect.alternatives), expect.why)
    return "%s: %r, origin gets %s" % (name, expect, [w if isinstance(w, str) else w[0] for w in want]
                                       or "nothing")


def row_tags(expect, want):
    """Every c= tag the row allows at the origin."""
    wants = [w for _, w in expect.alternatives] if isinstance(expect, Either) else [want]
    return [item if isinstance(item, str) else item[0] for w in wants for item in w]


def run_row(origin, send, expect, want):
    """Send the row (send() observes it), then check the answers and what
    reached origin. Returns the statuses the client got."""
    before = len(origin.requests)
    responses, closed, leftover = send()
    time.sleep(0.15 * h.SLOW)
    new = origin.requests[before:]
    statuses = [r.status for r in responses]
    if not isinstance(expect, Either):
        check_answers(expect, responses, closed, leftover)
        check_origin(want, new)
        return statuses
    problems = []
    for alt_expect, alt_want in expect.alternatives:
        found = []
        for fn, args in ((check_answers, (alt_expect, responses, closed, leftover)),
                         (check_origin, (alt_want, new))):
            try:
                fn(*args)
            except AssertionError as e:
                found.append(str(e))
        if not found:
            return statuses
        problems.append("as %r: %s" % (alt_expect, "; ".join(found)))
    raise AssertionError("no acceptable answer:\n" + "\n".join(problems))


def scenario(t):
    origin = t.origin()
    certs = t.certs()
    tls_origin = t.origin(tls=(certs.server, certs.server_key), name="tls-origin")
    local_ca = t.local_ca()
    stub = dnsstub.DnsStub().start()
    t.defer(stub.stop)
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": stub.write_resolv_conf(t.tmp)}, ORIGIN=origin.port,
                    TESTCA=certs.ca, LOCALCA=local_ca)
    port = proxy.port()
    forward = proxy.port(1)
    authority = b"%s:%d" % (TUNNEL_HOST.encode(), tls_origin.port)
    tunnel_host = b"Host: " + authority + b"\r\n"
    # The rows go over TLS 1.2, where the client sends nothing before the
    # proxy's Finished, so a row's bytes never arrive with the end of the
    # proxy's handshake; that case is the TLS 1.3 checks' (context13).
    context = ssl.create_default_context(cafile=os.path.join(local_ca, "ca.pem"))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context13 = ssl.create_default_context(cafile=os.path.join(local_ca, "ca.pem"))
    context13.minimum_version = ssl.TLSVersion.TLSv1_3
    expected_tags = {}
    outside = {}          # row name -> the statuses the plain row got

    def tunnel(timeout=10):
        return open_tunnel(forward, authority, context, timeout)

    h.ok(len(CASES) >= 60, "the table should have at least 60 rows, has %d" % len(CASES))
    names = [c[0] for c in CASES]
    h.eq(len(set(names)), len(names), "distinct row names")

    for name, raw, expect, want in CASES:
        for tag in row_tags(expect, want):
            expected_tags[tag] = 1

        @t.check(row_label(name, expect, want))
        def _(name=name, raw=raw, expect=expect, want=want):
            outside[name] = run_row(origin, lambda: observe(port, raw), expect, want)

    @t.check("over the whole run the origin saw only the requests some row expects, each once")
    def _():
        time.sleep(0.3 * h.SLOW)
        tags = [tag_of(q) for q in origin.requests]
        unexpected = [x for x in tags if x not in expected_tags]
        h.eq(unexpected, [], "requests no row expects (refused or smuggled ones that got through)")
        dup = sorted({x for x in tags if tags.count(x) > 1})
        h.eq(dup, [], "rows whose requests reached the origin more than once")

    def incomplete_at_origin(tag, at=origin):
        """The origin's records for tag: none, or ones whose body never
        completed (the proxy cut the upstream connection)."""
        time.sleep(0.5 * h.SLOW)
        reqs = [q for q in at.requests if tag_of(q) == tag]
        done = [q for q in reqs if q.complete.is_set() and q.error is None]
        h.eq([(q.method, bytes(q.body)) for q in done], [],
             "requests the origin received complete (the proxy finished a broken body for it)")

    @t.check("a bad chunk 0.5s after the head and a good chunk: 400 or a cut, the origin never gets a "
             "complete request")
    def _():
        with h.RawConn(port) as c:
            c.send(chunked("late-bad-chunk", b"5\r\nhello\r\n"))
            time.sleep(0.5)
            c.send(b"zz\r\nworld\r\n0\r\n\r\n")
            got = c.read_to_close(timeout=5)
        h.ok(got == b"" or got.startswith(b"HTTP/1.1 400 "), "client got %r" % got[:200])
        incomplete_at_origin("late-bad-chunk")

    @t.check("a body cut short by the client (5 of 10 bytes, then FIN): the origin never gets a complete "
             "request")
    def _():
        with h.RawConn(port) as c:
            c.send(req("short-body", b"PUT", b"Content-Length: 10\r\n", b"hello"))
            time.sleep(0.3)
            c.sock.shutdown(1)
            c.read_to_close(timeout=5)
        incomplete_at_origin("short-body")

    # -- the same inside an intercepted tunnel ---------------------------------------
    rows = tunnel_cases(authority)
    tunnel_tags = {}
    names = [r[0] for r in rows]
    h.eq(len(set(names)), len(names), "distinct tunnel row names")
    plain_names = set(c[0] for c in CASES)

    for name, raw, expect, want, why in rows:
        for tag in row_tags(expect, want):
            tunnel_tags[tag] = 1
        label = "in the tunnel: " + row_label(name, expect, want)
        if why:
            label += " [%s]" % why
        if name in plain_names:
            label += ", the statuses it got outside"

        # a plain row that failed is reported already: then only the
        # row's own expectation is checked here
        @t.check(label)
        def _(name=name, raw=raw, expect=expect, want=want):
            got = run_row(tls_origin, lambda: observe(None, raw, connect=tunnel), expect, want)
            if name in outside:
                h.eq(got, outside[name], "statuses inside the tunnel (expected those outside it)")

    # TLS 1.3: the client's Finished and its first request in one write, as
    # a client that writes its request right after the handshake may send
    # them
    for name, raw, expect, want in (
            ("tls13-finished-with-request", req("tls13-finished-with-request", host=tunnel_host), 200,
             ["tls13-finished-with-request"]),
            ("tls13-finished-with-cl-te", req("tls13-finished-with-cl-te", b"POST",
                                             b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                                             b"0\r\n\r\n", host=tunnel_host), 400, [])):
        for tag in row_tags(expect, want):
            tunnel_tags[tag] = 1

        @t.check("in the tunnel, TLS 1.3, the bytes in the same write as the client's Finished: "
                 + row_label(name, expect, want))
        def _(raw=raw, expect=expect, want=want):
            def connect(timeout):
                c = open_tunnel(forward, authority, context13, timeout, with_finished=True)
                h.eq(c.sock.version(), "TLSv1.3", "TLS version")
                return c
            run_row(tls_origin, lambda: observe(None, raw, connect=connect), expect, want)

    @t.check("in the tunnel: over the whole run the TLS origin saw only the requests some row expects, "
             "each once")
    def _():
        time.sleep(0.3 * h.SLOW)
        tags = [tag_of(q) for q in tls_origin.requests]
        unexpected = [x for x in tags if x not in tunnel_tags]
        h.eq(unexpected, [], "requests no row expects (refused or smuggled ones that got through)")
        dup = sorted({x for x in tags if tags.count(x) > 1})
        h.eq(dup, [], "rows whose requests reached the origin more than once")

    @t.check("in the tunnel: a bad chunk 0.5s after the head and a good chunk: 400 or a cut, the origin "
             "never gets a complete request")
    def _():
        with tunnel() as c:
            c.send(chunked_to(tunnel_host, "tunnel-late-bad-chunk", b"5\r\nhello\r\n"))
            time.sleep(0.5)
            c.send(b"zz\r\nworld\r\n0\r\n\r\n")
            got = c.read_to_close(timeout=5)
        h.ok(got == b"" or got.startswith(b"HTTP/1.1 400 "), "client got %r" % got[:200])
        incomplete_at_origin("tunnel-late-bad-chunk", tls_origin)

    @t.check("in the tunnel: a body cut short by a TCP FIN without close_notify (5 of 10 bytes): the "
             "origin never gets a complete request")
    def _():
        with tunnel() as c:
            c.send(req("tunnel-short-body", b"PUT", b"Content-Length: 10\r\n", b"hello",
                       host=tunnel_host))
            time.sleep(0.3)
            socket.socket.shutdown(c.sock, socket.SHUT_WR)     # under the TLS layer
            try:
                c.read_to_close(timeout=5)
            except ssl.SSLError:
                pass        # the proxy may end a truncated TLS stream with an alert
        incomplete_at_origin("tunnel-short-body", tls_origin)

    @t.check("after the table the proxy is alive and serves a normal GET (curl)")
    def _():
        h.ok(proxy.alive(), "the proxy exited")
        r = h.curl(proxy.listener_url(0, "/echo?c=final"))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)

    @t.check("a keep-alive connection serves three requests in a row after the table")
    def _():
        with h.RawConn(port) as c:
            for i in range(3):
                c.send(req("final-keepalive-%d" % i))
                r = c.read_response()
                h.eq(r.status, 200, "status of request %d" % i)

    @t.check("in the tunnel: a keep-alive tunnel serves three requests in a row after the table")
    def _():
        with tunnel() as c:
            for i in range(3):
                c.send(req("final-tunnel-keepalive-%d" % i, host=tunnel_host))
                r = c.read_response()
                h.eq(r.status, 200, "status of request %d" % i)
        h.eq([tag_of(q) for q in tls_origin.requests[-3:]], ["final-tunnel-keepalive-%d" % i for i in range(3)],
             "the last requests at the TLS origin")


h.run(scenario, __doc__, timeout=150)
