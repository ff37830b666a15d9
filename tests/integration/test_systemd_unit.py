#!/usr/bin/env python3
"""Scenario: the systemd unit.

Client: none. The test reads systemd/retryproxy.service.in and the unit meson
generated from it ($RETRYPROXY_BUILD_ROOT/retryproxy.service), runs
`systemd-analyze verify` and `systemd-analyze security --offline` on a copy
whose ExecStart names the built binary. (That the binary speaks sd_notify as
Type=notify needs is test_notify.py's scenario.)
Origin: none.
Must hold: the generated unit is the template with the installed paths
filled in; it has every hardening and lifecycle directive the deployment
docs promise (Type=notify, DynamicUser, ProtectSystem=strict, no
capabilities, AF_INET/AF_INET6/AF_UNIX only, TimeoutStopSec above the
default drain_timeout, LimitCORE=0 so that no core file holds the CA key,
...); systemd-analyze finds nothing to complain about (skipped, saying so,
where systemd-analyze is not installed).
"""

import os
import re
import shutil
import subprocess

import harness as h

TEMPLATE = os.path.join(h.REPO, "systemd", "retryproxy.service.in")
CONF = os.path.join(h.REPO, "conf", "retryproxy.yaml")
BUILD_ROOT = os.environ.get("RETRYPROXY_BUILD_ROOT")

# Directives whose value must be exactly this (after whitespace is squeezed).
EXACT = {
    ("Service", "Type"): "notify",
    ("Service", "KillSignal"): "SIGTERM",
    ("Service", "Restart"): "on-failure",
    ("Service", "LimitCORE"): "0",
    ("Service", "DynamicUser"): "yes",
    ("Service", "ConfigurationDirectory"): "retryproxy",
    ("Service", "CapabilityBoundingSet"): "",
    ("Service", "AmbientCapabilities"): "",
    ("Service", "NoNewPrivileges"): "yes",
    ("Service", "ProtectSystem"): "strict",
    ("Service", "ProtectHome"): "yes",
    ("Service", "PrivateTmp"): "yes",
    ("Service", "PrivateDevices"): "yes",
    ("Service", "ProtectKernelTunables"): "yes",
    ("Service", "ProtectKernelModules"): "yes",
    ("Service", "ProtectKernelLogs"): "yes",
    ("Service", "ProtectControlGroups"): "yes",
    ("Service", "RestrictNamespaces"): "yes",
    ("Service", "RestrictRealtime"): "yes",
    ("Service", "RestrictSUIDSGID"): "yes",
    ("Service", "LockPersonality"): "yes",
    ("Service", "MemoryDenyWriteExecute"): "yes",
    ("Service", "SystemCallArchitectures"): "native",
    ("Install", "WantedBy"): "multi-user.target",
}

def parse_unit(text):
    """A unit file as {(section, key): [values in order]}, with backslash
    continuations joined and comments dropped."""
    out = {}
    section = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        if not line or line[0] in "#;":
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
            continue
        key, eq, value = line.partition("=")
        if not eq or section is None:
            raise AssertionError("not a unit file line: %r" % line)
        out.setdefault((section, key.strip()), []).append(" ".join(value.split()))
    return out


def one(unit, section, key):
    values = unit.get((section, key))
    h.ok(values is not None, "[%s] %s= is missing" % (section, key))
    return values[-1]


def seconds(text):
    """A systemd or retryproxy time span (45s, 1min 30s, 500ms, 2m) in seconds."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text):
        h.ok(unit in units or unit == "", "unknown time unit in %r" % text)
        total += float(num) * units.get(unit, 1)
    return total


def conf_limit(key, default):
    """limits.KEY from conf/retryproxy.yaml, read without a YAML library."""
    with open(CONF) as f:
        text = f.read()
    block = re.search(r"^limits:\n((?:[ \t]+.*\n|\n)+)", text, re.M)
    m = block and re.search(r"^\s+%s:\s*(\S+)" % key, block.group(1), re.M)
    return m.group(1) if m else default


def scenario(t):
    generated = os.path.join(BUILD_ROOT or "", "retryproxy.service")
    h.ok(BUILD_ROOT, "RETRYPROXY_BUILD_ROOT is not set (meson test sets it)")
    with open(TEMPLATE) as f:
        template = f.read()
    with open(generated) as f:
        text = f.read()
    unit = parse_unit(text)

    @t.check("the generated unit is the template with absolute @bindir@ and @sysconfdir@ filled in")
    def _():
        left = re.findall(r"@[a-z_]+@", text)
        h.ok(not left, "unsubstituted placeholders left: %r" % left)
        bindir = re.search(r"^ExecStart=(/\S*)/retryproxy ", text, re.M)
        h.ok(bindir, "ExecStart= should start with an absolute path to retryproxy")
        sysconfdir = re.search(r" -c (/\S*)/retryproxy/retryproxy\.yaml$", text, re.M)
        h.ok(sysconfdir, "ExecStart= should pass -c <sysconfdir>/retryproxy/retryproxy.yaml")
        expect = template.replace("@bindir@", bindir.group(1)).replace("@sysconfdir@", sysconfdir.group(1))
        h.eq(text, expect, "generated unit")

    @t.check("[Service] ExecStart runs the binary in the foreground with the system config")
    def _():
        start = unit.get(("Service", "ExecStart"), [])
        h.eq(len(start), 1, "ExecStart= lines")
        h.ok(re.fullmatch(r"/\S+/retryproxy -c /\S+/retryproxy/retryproxy\.yaml", start[0]),
             "ExecStart=%s" % start[0])

    @t.check("[Service] ExecReload checks the config, then sends SIGHUP to the main process")
    def _():
        reload = unit.get(("Service", "ExecReload"), [])
        h.ok(reload, "ExecReload= is missing")
        h.eq(reload[-1], "/bin/kill -HUP $MAINPID", "last ExecReload=")
        config = one(unit, "Service", "ExecStart").split(" -c ", 1)[1]
        for line in reload[:-1]:
            h.ok(re.fullmatch(r"/\S+/retryproxy --check -c " + re.escape(config), line),
                 "an ExecReload= before the kill should be `retryproxy --check -c %s`, got %r"
                 % (config, line))

    @t.check("hardening and lifecycle directives have the documented values")
    def _():
        wrong = []
        for (section, key), want in EXACT.items():
            values = unit.get((section, key))
            if values is None:
                wrong.append("[%s] %s= missing (want %r)" % (section, key, want))
            elif values[-1] != want:
                wrong.append("[%s] %s=%s (want %r)" % (section, key, values[-1], want))
        h.ok(not wrong, "; ".join(wrong))

    @t.check("no capabilities: CapabilityBoundingSet= and AmbientCapabilities= empty, no User=")
    def _():
        for key in ("CapabilityBoundingSet", "AmbientCapabilities"):
            h.eq(unit.get(("Service", key)), [""], key + "= lines")
        for key in ("User", "Group"):
            h.ok(("Service", key) not in unit, "%s= would defeat DynamicUser=yes" % key)

    @t.check("RestrictAddressFamilies is AF_INET AF_INET6 and AF_UNIX (for sd_notify) only")
    def _():
        families = set(" ".join(unit.get(("Service", "RestrictAddressFamilies"), [])).split())
        h.eq(families, {"AF_INET", "AF_INET6", "AF_UNIX"}, "address families")

    @t.check("SystemCallFilter allows @system-service")
    def _():
        filters = unit.get(("Service", "SystemCallFilter"), [])
        h.ok(filters and filters[0].split() == ["@system-service"],
             "first SystemCallFilter= should be @system-service, got %r" % filters)

    @t.check("TimeoutStopSec is longer than conf/retryproxy.yaml's limits.drain_timeout")
    def _():
        stop = seconds(one(unit, "Service", "TimeoutStopSec"))
        drain = seconds(conf_limit("drain_timeout", "30s"))
        h.ok(stop > drain, "TimeoutStopSec=%ss must exceed drain_timeout %ss" % (stop, drain))

    @t.check("LimitNOFILE leaves room for limits.max_connections clients and their upstreams")
    def _():
        nofile = int(one(unit, "Service", "LimitNOFILE"))
        conns = int(conf_limit("max_connections", "10000"))
        h.ok(nofile >= 2 * conns, "LimitNOFILE=%d < 2 x max_connections (%d)" % (nofile, conns))

    @t.check("[Unit] Documentation names both man pages; ordering after network-online.target")
    def _():
        docs = " ".join(unit.get(("Unit", "Documentation"), [])).split()
        for page in ("man:retryproxy(1)", "man:retryproxy.yaml(5)"):
            h.ok(page in docs, "Documentation= should name %s: %r" % (page, docs))
        h.ok("network-online.target" in one(unit, "Unit", "After"), "After=network-online.target")

    # systemd-analyze wants ExecStart's binary to exist, and resolves the
    # Documentation= man pages through MANPATH.
    verify_dir = os.path.join(t.tmp, "unit")
    os.makedirs(verify_dir)
    config_copy = os.path.join(verify_dir, "retryproxy.yaml")
    shutil.copy(CONF, config_copy)
    local = re.sub(r"^(Exec\w+=)/\S*/retryproxy ", lambda m: m.group(1) + h.BIN + " ", text, flags=re.M)
    local = re.sub(r" -c /\S*/retryproxy\.yaml$", " -c " + config_copy, local, flags=re.M)
    local_unit = os.path.join(verify_dir, "retryproxy.service")
    with open(local_unit, "w") as f:
        f.write(local)
    man_root = os.path.join(t.tmp, "man")
    for page, sect in (("retryproxy.1", "man1"), ("retryproxy.yaml.5", "man5")):
        os.makedirs(os.path.join(man_root, sect), exist_ok=True)
        shutil.copy(os.path.join(h.REPO, "man", page), os.path.join(man_root, sect, page))
    analyze = shutil.which("systemd-analyze")

    if analyze is None:
        t.skip("systemd-analyze verify", "systemd-analyze is not installed (Debian package systemd)")
        t.skip("systemd-analyze security", "systemd-analyze is not installed (Debian package systemd)")
    else:
        @t.check("systemd-analyze verify: no errors and no warnings (man pages resolved)")
        def _():
            man = "--man=yes" if shutil.which("man") else "--man=no"
            p = subprocess.run([analyze, "verify", man, local_unit], capture_output=True, text=True,
                               cwd=verify_dir, env=h.clean_env({"MANPATH": man_root}), timeout=60)
            out = (p.stdout + p.stderr).strip()
            h.eq(p.returncode, 0, "exit code (output %r)" % out)
            h.ok(not out, "systemd-analyze verify printed: %s" % out)

        @t.check("systemd-analyze security --offline rates the unit OK (exposure at most 2.0)")
        def _():
            p = subprocess.run([analyze, "security", "--offline=yes", "--no-pager", local_unit],
                               capture_output=True, text=True, cwd=verify_dir, env=h.clean_env(),
                               timeout=60)
            m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", p.stdout + p.stderr)
            h.ok(m, "no exposure level in the output (exit %s): %s" % (p.returncode, p.stderr[-500:]))
            h.ok(float(m.group(1)) <= 2.0, "exposure %s > 2.0:\n%s" % (m.group(1), p.stdout))


h.run(scenario, __doc__)
