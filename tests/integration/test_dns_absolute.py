#!/usr/bin/env python3
"""Scenario: a host written with a trailing dot is an absolute name: the
resolver asks it as it is, never with the search list.

Client: curl through the forward proxy to http://NAME:PORT/ and
http://NAME.:PORT/ (the same name with a trailing dot).
Origin: the test origin on 127.0.0.1 (echo); dnsstub.DnsStub on a
loopback UDP port, named by a resolv.conf (RETRYPROXY_RESOLV_CONF) with
`search corp.test` and `options ndots:5 timeout:1 attempts:1`, as a
Kubernetes pod has; it answers svc.ns.corp.test and public.test with
127.0.0.1 and everything else NXDOMAIN, and records every query. An empty
RETRYPROXY_HOSTS keeps /etc/hosts out.
A second proxy: a sidecar listener whose upstream: is
http://public.test.:PORT and a fleet: whose Redis (a real redis-server on
loopback) is public.test.:PORT.
Must hold: svc.ns (fewer dots than ndots) is found through the search list
(the stub is asked svc.ns.corp.test): 200. svc.ns. is asked only as svc.ns:
502 naming the DNS failure, and no query for svc.ns.corp.test. public.test.
gives 200 with queries for public.test only, none with the search domain;
public.test without the dot is asked with the search domain first (the
resolver's usual order), then as it is: 200. Each spelling is an upstream
of its own: the admin /upstreams list shows public.test. and
public.test apart. The config's absolute names are asked the same way:
the sidecar's upstream public.test. answers 200 and the origin sees
"Host: public.test:PORT" (the dot is left out of Host); the fleet connects
to public.test. (retryproxy_fleet_connected 1); neither is asked with the
search domain.
"""

import os

import harness as h
import dnsstub
from fleet_gauge import wait_gauge
from redisserver import RedisServer

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
  connect_timeout: 3s
defaults:
  retry:
    max_attempts: 1
"""

# the same with a sidecar listener and a fleet, both naming public.test.
CONFIG_ABSOLUTE = CONFIG.replace(
    "  - address: 127.0.0.1:@PORT0@\n",
    "  - address: 127.0.0.1:@PORT0@\n    upstream: http://public.test.:@ORIGIN@\n") + """\
fleet:
  redis: public.test.:@REDIS@
  name: absolute
  sync_interval: 100ms
"""

DNS_WORDS = ("resolve", "dns", "name", "nxdomain", "not known")


def scenario(t):
    origin = t.origin()
    stub = dnsstub.DnsStub(answers={"svc.ns.corp.test": "127.0.0.1", "public.test": "127.0.0.1"},
                           default_mode="nxdomain").start()
    t.defer(stub.stop)
    resolv = os.path.join(t.tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver %s\nsearch corp.test\noptions ndots:5 timeout:1 attempts:1\n"
                % stub.address)
    hosts = os.path.join(t.tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("")
    proxy = t.proxy(CONFIG, env={"RETRYPROXY_RESOLV_CONF": resolv, "RETRYPROXY_HOSTS": hosts})

    def get(host, tag):
        stub.clear()
        r = h.curl("http://%s:%d/echo?t=%s" % (host, origin.port, tag), proxy=proxy.url)
        return r, [q.name for q in stub.queries]

    @t.check("svc.ns (fewer dots than ndots:5): found through the search list, 200")
    def _():
        r, asked = get("svc.ns", "relative")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok("svc.ns.corp.test" in asked, "the stub was not asked svc.ns.corp.test: %r" % asked)

    @t.check("svc.ns. (absolute): asked only as svc.ns, 502 naming the DNS failure")
    def _():
        r, asked = get("svc.ns.", "absolute-nx")
        h.check_error_response(r, 502, DNS_WORDS)
        h.ok(asked and set(asked) == {"svc.ns"}, "queries for svc.ns.: %r" % asked)
        h.eq([q for q in origin.requests if q.query.get("t") == "absolute-nx"], [],
             "requests at the origin")

    @t.check("public.test. (absolute): 200, asked only as public.test")
    def _():
        r, asked = get("public.test.", "absolute")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok(asked and set(asked) == {"public.test"}, "queries for public.test.: %r" % asked)

    @t.check("public.test (relative): the search domain first, then as it is, 200")
    def _():
        r, asked = get("public.test", "relative-public")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        h.ok("public.test.corp.test" in asked and "public.test" in asked
             and asked.index("public.test.corp.test") < asked.index("public.test"),
             "queries for public.test: %r" % asked)

    @t.check("each spelling is an upstream of its own (/upstreams)")
    def _():
        r = h.curl("http://127.0.0.1:%d/upstreams" % proxy.port(1), check=True)
        body = r.body.decode()
        for name in ("http://public.test.:%d" % origin.port, "http://public.test:%d" % origin.port):
            h.ok(name in body, "%s missing from /upstreams: %s" % (name, body[:2000]))

    @t.check("upstream: and fleet.redis written public.test.: asked only as public.test")
    def _():
        redis = RedisServer(t.tmp).start()
        t.defer(redis.stop)
        stub.clear()
        sidecar = t.proxy(CONFIG_ABSOLUTE, env={"RETRYPROXY_RESOLV_CONF": resolv,
                                                "RETRYPROXY_HOSTS": hosts},
                          ORIGIN=str(origin.port), REDIS=str(redis.port))
        wait_gauge([sidecar], 1, 10)
        r = h.curl("http://127.0.0.1:%d/echo?t=configured" % sidecar.port(0))
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%r)" % r)
        seen = [q for q in origin.requests if q.query.get("t") == "configured"]
        h.eq([q.header("host") for q in seen], ["public.test:%d" % origin.port],
             "Host at the origin")
        asked = [q.name for q in stub.queries]
        h.ok(asked and set(asked) == {"public.test"}, "queries: %r" % asked)


h.run(scenario, __doc__, timeout=60)
