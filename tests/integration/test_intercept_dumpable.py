#!/usr/bin/env python3
"""Scenario: with intercept: the CA key cannot be read out of the proxy's
memory by another process of the same user.

Client: none. The test starts one proxy with intercept: and one without,
then reloads the second with intercept:. For each it asks, from a separate
process of the same user without CAP_SYS_PTRACE, to open /proc/PID/mem (the
kernel's ptrace-attach check, the one gdb and a core dump of the process
also need). When the test runs as root, it first drops CAP_SYS_PTRACE from
its bounding set, so that neither the proxies nor the checking process it
starts have it.
Origin: none.
Must hold: the proxy without intercept: is readable (the control: without
it nothing is proved, and the check is skipped saying so); the proxy with
intercept: is not, from start-up, nor the other one once a reload gave it
intercept:.
"""

import ctypes
import os
import subprocess
import sys

import harness as h

PLAIN = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
"""

INTERCEPT = PLAIN + """\
intercept:
  hosts: ["localhost"]
  ca_cert: @LOCALCA@/ca.pem
  ca_key: @LOCALCA@/ca-key.pem
"""

PR_CAPBSET_DROP = 24
CAP_SYS_PTRACE = 19

CHECKER = """\
import os, sys
try:
    os.close(os.open("/proc/%s/mem" % sys.argv[1], os.O_RDONLY))
    print("readable")
except PermissionError:
    print("denied")
"""


def memory_readable(pid):
    """Whether another process of ours may open /proc/pid/mem."""
    p = subprocess.run([sys.executable, "-c", CHECKER, str(pid)], capture_output=True, text=True,
                       timeout=20)
    h.eq(p.returncode, 0, "checker exit code (%s)" % p.stderr)
    return p.stdout.strip() == "readable"


def scenario(t):
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0:
            t.skip("the proxy's memory is closed to same-user processes",
                   "running as root and cannot drop CAP_SYS_PTRACE (errno %d)"
                   % ctypes.get_errno())
            return
    local = t.local_ca()
    plain = t.proxy(PLAIN)
    intercepting = t.proxy(INTERCEPT, LOCALCA=local)

    if not memory_readable(plain.pid):
        t.skip("the proxy's memory is closed to same-user processes",
               "this system refuses even a dumpable process's memory (Yama ptrace_scope?)")
        return

    @t.check("with intercept: another process of the same user cannot open /proc/PID/mem")
    def _():
        h.ok(not memory_readable(intercepting.pid), "the intercepting proxy's memory is readable")

    @t.check("a reload that adds intercept: closes the memory from then on")
    def _():
        plain.reload(INTERCEPT.replace("@PORT0@", str(plain.port())).replace("@LOCALCA@", local))
        h.ok(not memory_readable(plain.pid), "the reloaded proxy's memory is readable")


h.run(scenario, __doc__)
