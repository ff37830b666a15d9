#!/usr/bin/env python3
"""Scenario: the shipped configurations load.

Client: none; the test runs `$RETRYPROXY_BIN --check -c FILE` for every
*.yaml in conf/profiles/ and in conf/ (the default config), found from this
file's own location in the repository.
Origin: none.
Must hold: each file prints exactly "ok" on stdout and exits 0; every
listen address and the admin address in it are on loopback; conf/profiles/
holds at least one profile (an empty directory is a failure, not a pass).
One PASS or FAIL line per file.
"""

import glob
import os
import re

import harness as h

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROFILES = os.path.join(ROOT, "conf", "profiles")
CONF = os.path.join(ROOT, "conf")

# `address:` of a listen item and the top-level `admin:`, outside comments;
# a value may be quoted, and a comment may follow it.
_ADDRESS = re.compile(r"^\s*(?:-\s*)?address:\s*[\"']?([^\"'#\s]+)")
_ADMIN = re.compile(r"^admin:\s*[\"']?([^\"'#\s]+)")
_LOOPBACK = re.compile(r"^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\]|localhost):\d+$")


def addresses(path):
    """(line number, address) for every listen and admin address in path."""
    found = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("#"):
                continue
            m = _ADDRESS.match(line) or _ADMIN.match(line)
            if m:
                found.append((n, m.group(1)))
    return found


def scenario(t):
    profiles = sorted(glob.glob(os.path.join(PROFILES, "*.yaml")))
    if not profiles:
        t.fail("conf/profiles/ holds profiles",
               "no *.yaml file in %s: the profiles are missing, so nothing here would be checked"
               % PROFILES)
    files = profiles + sorted(glob.glob(os.path.join(CONF, "*.yaml")))

    for path in files:
        rel = os.path.relpath(path, ROOT)

        @t.check("%s: --check prints ok and exits 0, addresses on loopback" % rel)
        def _():
            p = h.run_bin(["--check", "-c", path], cwd=ROOT)
            h.ok(p.returncode == 0 and p.stdout.strip() == "ok",
                 "retryproxy --check -c %s exited %d with stdout %r; stderr:\n%s"
                 % (rel, p.returncode, p.stdout, p.stderr.rstrip()))
            found = addresses(path)
            h.ok(found, "%s: no listen or admin address found to check" % rel)
            for n, addr in found:
                h.ok(_LOOPBACK.match(addr),
                     "%s:%d: %s is not a loopback address (shipped configs listen on loopback only)"
                     % (rel, n, addr))


h.run(scenario, __doc__, timeout=60)
