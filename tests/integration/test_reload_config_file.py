#!/usr/bin/env python3
"""Scenario: SIGHUP when the config's path no longer names a regular file.

Proxy: a sidecar listener to an origin, admin on. Its config file is then
replaced, once by a FIFO nobody writes to, once by a symlink to
/dev/zero, and the proxy gets SIGHUP each time.
Must hold: the reload is refused at once, logged as
"FILE: cannot read: ... not a regular file", and the old config kept: the
proxy does not wait in the FIFO's open (which would stop the event loop
for good: no request, no /healthz, not even SIGTERM) nor read /dev/zero
until memory runs out; /healthz and the listener keep answering, and
/metrics counts the refused reloads. A regular file put back then
reloads as usual.
"""

import os
import time

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
log: { level: info }
"""


def scenario(t):
    origin = t.origin(name="origin", echo_unknown=True)
    p = t.proxy(CONFIG, ORIGIN=origin.port)
    admin = p.port(1)

    def serving(what):
        start = time.monotonic()
        r = h.fetch(admin, "GET", "/healthz", "127.0.0.1", timeout=5 * h.SLOW)
        h.eq(r.status, 200, "/healthz %s" % what)
        h.ok(time.monotonic() - start < 2 * h.SLOW, "/healthz %s answered at once" % what)
        r = h.fetch(p.port(0), "GET", "/x", "app.example", timeout=5 * h.SLOW)
        h.eq(r.status, 200, "a request through the listener %s" % what)

    def refused(kind):
        failed = len([ln for ln in p.stderr_lines() if "keeping the running config" in ln])
        p.reload(outcome=r"keeping the running config")
        h.eq(len([ln for ln in p.stderr_lines() if "keeping the running config" in ln]),
             failed + 1, "one more refused reload")
        h.ok(any("%s: cannot read:" % p.config_path in ln and "not a regular file" in ln
                 for ln in p.stderr_lines()),
             "the refusal names the file and says it is not a regular file: %s"
             % p.stderr_tail(5))
        serving("after the reload of a %s" % kind)

    @t.check("a config path that is now a FIFO nobody writes: the reload is refused at "
             "once and the proxy keeps serving")
    def _():
        os.unlink(p.config_path)
        os.mkfifo(p.config_path)
        refused("FIFO")

    @t.check("a config path that is now /dev/zero: the reload is refused at once, nothing "
             "read")
    def _():
        os.unlink(p.config_path)
        os.symlink("/dev/zero", p.config_path)
        refused("/dev/zero")

    @t.check("/metrics counts both refused reloads")
    def _():
        text = h.fetch(admin, "GET", "/metrics", "127.0.0.1").body.decode()
        h.eq(h.metric(text, "retryproxy_config_reloads_total", '{result="failed"}'), 2,
             "reloads_total failed")
        h.eq(h.metric(text, "retryproxy_config_last_reload_successful"), 0,
             "last_reload_successful")

    @t.check("a regular file put back reloads as usual")
    def _():
        os.unlink(p.config_path)
        p.reload(p.config_text)
        serving("after the good reload")


h.run(scenario, __doc__)
