#!/usr/bin/env python3
"""Scenario: the TCP retry of a truncated DNS answer gets an ill-formed
answer from the first nameserver and goes on to the next, as it does after
a refused connect, a timeout or a close.

Client: curl through the forward proxy to http://NAME:PORT/echo.
Origin: the test origin on 127.0.0.1 (echo). Two dnsstub.DnsStub servers,
UDP and TCP, are resolv.conf's two nameservers (RETRYPROXY_RESOLV_CONF,
`options timeout:1 attempts:2`); an empty RETRYPROXY_HOSTS keeps
/etc/hosts out. Both truncate the UDP answers of garbled.test and
broken.test (TC=1, no records). Over TCP the first answers both with
another ID (ill-formed); the second answers garbled.test whole
(127.0.0.1) and broken.test ill-formed too.
Must hold: garbled.test gives 200, asked over TCP of the first nameserver
and then of the second (before, the first's ill-formed answer ended the
lookup with a 502); broken.test, ill-formed at both, is a 502 naming the
ill-formed answer over TCP, both nameservers asked over TCP, and no
request reaches the origin.
"""

import os

import harness as h
import dnsstub

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
  connect_timeout: 5s
defaults:
  retry:
    max_attempts: 1
"""


def scenario(t):
    origin = t.origin()
    first = dnsstub.DnsStub(answers={"garbled.test": "127.0.0.1", "broken.test": "127.0.0.1"})
    first.truncate("garbled.test", tcp="malformed")
    first.truncate("broken.test", tcp="malformed")
    first.start()
    t.defer(first.stop)
    second = dnsstub.DnsStub(answers={"garbled.test": "127.0.0.1", "broken.test": "127.0.0.1"})
    second.truncate("garbled.test")
    second.truncate("broken.test", tcp="malformed")
    second.start()
    t.defer(second.stop)
    conf = os.path.join(t.tmp, "resolv.conf")
    with open(conf, "w") as f:
        f.write("nameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n"
                % (first.address, second.address))
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": conf, "RETRYPROXY_HOSTS": hosts})

    def get(host, tag):
        first.clear()
        second.clear()
        return h.curl("http://%s:%d/echo?t=%s" % (host, origin.port, tag), proxy=proxy.url)

    def asked_over_tcp(stub, name):
        return [q for q in stub.queries_for(name) if q.type == "A" and q.transport == "tcp"]

    @t.check("garbled.test: the first nameserver's TCP answer is ill-formed, the second's "
             "whole: 200")
    def _():
        r = get("garbled.test", "garbled")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.eq((len(asked_over_tcp(first, "garbled.test")), len(asked_over_tcp(second, "garbled.test"))),
             (1, 1), "A questions over TCP to the first and the second nameserver")
        h.eq(len([q for q in origin.requests if q.query.get("t") == "garbled"]), 1,
             "requests at the origin")

    @t.check("broken.test: ill-formed over TCP at both nameservers: 502 naming it")
    def _():
        r = get("broken.test", "broken")
        h.check_error_response(r, 502, ("ill-formed",))
        text = r.body.decode().lower()
        h.ok("over tcp" in text and "nxdomain" not in text,
             "the 502 should name the answer over TCP: %r" % r.body)
        h.eq((len(asked_over_tcp(first, "broken.test")), len(asked_over_tcp(second, "broken.test"))),
             (1, 1), "A questions over TCP to the first and the second nameserver")
        h.eq([q for q in origin.requests if q.query.get("t") == "broken"], [],
             "requests at the origin")


h.run(scenario, __doc__, timeout=60)
