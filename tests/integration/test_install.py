#!/usr/bin/env python3
"""Scenario: `meson install` and the man pages it installs.

Client: none. The test runs `meson install --destdir TMP` from the build
tree the tests run in ($RETRYPROXY_BUILD_ROOT), then looks at what landed
under TMP, and reads man/retryproxy.1 and man/retryproxy.yaml.5.
Origin: none.
Must hold: the binary lands in <bindir>, the default config in
<sysconfdir>/retryproxy, the man pages in <mandir>/man1 and man5, and the
systemd unit in <prefix>/lib/systemd/system, with ExecStart naming exactly
those installed paths, and every file of conf/profiles in
<datadir>/retryproxy/profiles; no test or fuzz program is installed; the
installed binary accepts the installed config. The man pages render with groff or
mandoc with warnings on and none printed (the renderer check is skipped,
saying so, when neither is installed; the structure checks always run).
retryproxy(1) names every option of --help, every exit code and signal,
and every environment variable the sources read; retryproxy.yaml(5)
documents every key of conf/retryproxy.yaml with that file's value as its
default, names every key the config loader knows, and every route key it
documents is accepted by `--check`.
"""

import json
import os
import re
import shutil
import stat
import subprocess

import harness as h
import yaml12  # first: it may run this file again under /usr/bin/python3
import yaml

BUILD_ROOT = os.environ.get("RETRYPROXY_BUILD_ROOT")
MAN1 = os.path.join(h.REPO, "man", "retryproxy.1")
MAN5 = os.path.join(h.REPO, "man", "retryproxy.yaml.5")
CONF = os.path.join(h.REPO, "conf", "retryproxy.yaml")

# man(7) macros and the few requests these pages may use.
MACROS = {"TH", "SH", "SS", "TP", "PP", "LP", "P", "IP", "HP", "RS", "RE", "B", "I", "BR", "RB",
          "BI", "IB", "RI", "IR", "SM", "SB", "EX", "EE", "UR", "UE", "MT", "ME", "br", "sp",
          "nf", "fi", "ad", "na", "ne", "in", "ti", "\\\""}
SECTIONS = {
    MAN1: ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "SIGNALS", "EXIT STATUS", "FILES",
           "ENVIRONMENT", "SEE ALSO"],
    MAN5: ["NAME", "SYNOPSIS", "DESCRIPTION", "KEYS", "SEE ALSO"],
}




def unroff(text):
    """Roff escapes these pages use, turned back into plain text."""
    for esc, plain in (("\\fB", ""), ("\\fI", ""), ("\\fR", ""), ("\\fP", ""), ("\\-", "-"),
                       ("\\(dq", '"'), ("\\(aq", "'"), ("\\(ti", "~"), ("\\(mu", "x"),
                       ("\\(ha", "^"), ("\\&", ""), ("\\e", "\\"), ("\\c", "")):
        text = text.replace(esc, plain)
    return text


def man_keys(text):
    """The key entries of retryproxy.yaml(5): {path: (paragraph, default or None)}.
    An entry is `.TP`, then `.B path`, then its paragraph, which may say
    `Default: \\fBvalue\\fP`."""
    lines = text.splitlines()
    keys = {}
    for i, line in enumerate(lines[:-1]):
        if line != ".TP" or not lines[i + 1].startswith(".B "):
            continue
        path = unroff(lines[i + 1][3:].strip().strip('"'))
        if not re.fullmatch(r"[a-z_]+(\[\])?(\.[a-z_]+(\[\])?)*", path):
            continue
        body = []
        for ln in lines[i + 2:]:
            if re.match(r"\.(TP|SH|SS|PP)\b", ln):
                break
            body.append(ln)
        para = "\n".join(body)
        m = re.search(r"Default: \\fB(.*?)\\fP", para)
        keys[path] = (para, unroff(m.group(1)) if m else None)
    return keys


def flatten(node, prefix=""):
    """conf/retryproxy.yaml as {dotted path: value}; lists of mappings become
    path[] and are descended into, other lists are values."""
    out = {}
    for k, v in node.items():
        path = prefix + k
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                for sub, val in flatten(item, path + "[].").items():
                    out.setdefault(sub, val)
        else:
            out[path] = v
    return out


def loader_key_names():
    """Every key name in the config loader's tables (src/config*.c)."""
    names = set()
    for name in os.listdir(os.path.join(h.REPO, "src")):
        if name.startswith("config") and name.endswith(".c"):
            names |= set(re.findall(r'\{\s*\.name\s*=\s*"([a-z_]+)"',
                                    h.read_file(os.path.join(h.REPO, "src", name))))
    return names


def meson_options(build_root):
    p = subprocess.run(["meson", "introspect", "--buildoptions", build_root], capture_output=True,
                       text=True, timeout=60)
    h.eq(p.returncode, 0, "meson introspect exit code (stderr %r)" % p.stderr)
    return {o["name"]: o["value"] for o in json.loads(p.stdout)}


def scenario(t):
    h.ok(BUILD_ROOT, "RETRYPROXY_BUILD_ROOT is not set (meson test sets it)")
    h.ok(shutil.which("meson"), "meson is not on PATH")
    opts = meson_options(BUILD_ROOT)
    prefix = opts["prefix"]

    def under(*parts):
        """An install path: later absolute parts win, like meson's / operator."""
        return os.path.join(prefix, *parts)

    bindir, sysconfdir, mandir = under(opts["bindir"]), under(opts["sysconfdir"]), under(opts["mandir"])
    expected = {
        "binary": os.path.join(bindir, "retryproxy"),
        "config": os.path.join(sysconfdir, "retryproxy", "retryproxy.yaml"),
        "man1": os.path.join(mandir, "man1", "retryproxy.1"),
        "man5": os.path.join(mandir, "man5", "retryproxy.yaml.5"),
        "unit": under("lib", "systemd", "system", "retryproxy.service"),
    }
    dest = os.path.join(t.tmp, "destdir")

    def staged(path):
        return dest + path

    @t.check("meson install --destdir succeeds from the test's build tree")
    def _():
        p = subprocess.run(["meson", "install", "-C", BUILD_ROOT, "--no-rebuild", "--destdir", dest],
                           capture_output=True, text=True, timeout=120, env=h.clean_env())
        h.eq(p.returncode, 0, "exit code (stdout %r, stderr %r)" % (p.stdout[-1500:], p.stderr[-1500:]))

    installed = set()
    for root, _dirs, files in os.walk(dest):
        for name in files:
            installed.add(os.path.join(root, name)[len(dest):])

    @t.check("binary, config, both man pages and the systemd unit are installed where the layout says")
    def _():
        missing = ["%s (%s)" % (path, what) for what, path in expected.items() if path not in installed]
        h.ok(not missing, "not installed: %s; installed: %s" % (missing, sorted(installed)))

    @t.check("every file of conf/profiles is installed in <datadir>/retryproxy/profiles, unchanged")
    def _():
        profiles_dir = os.path.join(under(opts["datadir"]), "retryproxy", "profiles")
        names = sorted(os.listdir(os.path.join(h.REPO, "conf", "profiles")))
        h.ok(any(n.endswith(".yaml") for n in names), "no profiles in conf/profiles: %s" % names)
        for name in names:
            path = os.path.join(profiles_dir, name)
            h.ok(path in installed, "%s is not installed" % path)
            h.eq(h.read_file(staged(path), "rb"), h.read_file(os.path.join(h.REPO, "conf", "profiles", name), "rb"),
                 "installed " + path)

    @t.check("no test or fuzz program is installed")
    def _():
        stray = [p for p in installed if re.search(r"(^|/)(test_|fuzz_)", p)]
        h.ok(not stray, "installed test programs: %s" % stray)

    @t.check("the installed binary is executable and the installed config is conf/retryproxy.yaml")
    def _():
        mode = os.stat(staged(expected["binary"])).st_mode
        h.ok(mode & stat.S_IXUSR and mode & stat.S_IXOTH, "binary mode %o" % mode)
        h.eq(h.read_file(staged(expected["config"]), "rb"), h.read_file(CONF, "rb"), "installed config")
        for key, src in (("man1", MAN1), ("man5", MAN5)):
            h.eq(h.read_file(staged(expected[key]), "rb"), h.read_file(src, "rb"), "installed " + key)

    @t.check("the installed binary accepts the installed config (--check prints ok)")
    def _():
        p = subprocess.run([staged(expected["binary"]), "--check", "-c", staged(expected["config"])],
                           capture_output=True, text=True, timeout=20 * h.SLOW, env=h.clean_env())
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "exit code and stdout (stderr %r)" % p.stderr)

    @t.check("the installed unit's ExecStart names the installed binary and config")
    def _():
        unit = h.read_file(staged(expected["unit"]))
        want = "ExecStart=%s -c %s" % (expected["binary"], expected["config"])
        h.ok(re.search("^" + re.escape(want) + "$", unit, re.M),
             "want the line %r in:\n%s" % (want, unit))

    # -- the man pages ---------------------------------------------------------

    pages = {MAN1: h.read_file(MAN1), MAN5: h.read_file(MAN5)}
    version = h.run_bin(["--version"]).stdout.split()[-1]

    @t.check("man pages: .TH names the page, its section and the binary's version")
    def _():
        for path, text in pages.items():
            first = text.splitlines()[0]
            m = re.fullmatch(r'\.TH (\S+) (\d) \d{4}-\d{2}-\d{2} "retryproxy (\S+)" "[^"]+"', first)
            h.ok(m, "%s: first line should be .TH NAME SECTION DATE \"retryproxy VERSION\" "
                 "\"TITLE\": %r" % (path, first))
            name, section = os.path.basename(path).rsplit(".", 1)
            h.eq((m.group(1), m.group(2)), (name.upper(), section), "%s: .TH name and section" % path)
            h.eq(m.group(3), version, "%s: version in .TH (retryproxy --version)" % path)

    @t.check("man pages: only man(7) macros, and the expected sections in order")
    def _():
        for path, text in pages.items():
            for n, line in enumerate(text.splitlines(), 1):
                if line.startswith("'"):
                    raise AssertionError("%s:%d: a line may not start with '" % (path, n))
                if line.startswith("."):
                    macro = re.match(r"\.(\\\"|\S*)", line).group(1)
                    h.ok(macro in MACROS, "%s:%d: unknown macro .%s" % (path, n, macro))
                h.ok(not line.endswith((" ", "\t")), "%s:%d: trailing white space" % (path, n))
            found = [unroff(m.strip('"')) for m in re.findall(r"^\.SH (.+)$", text, re.M)]
            order = [s for s in found if s in SECTIONS[path]]
            h.eq(order, SECTIONS[path], "%s: sections" % path)

    groff, mandoc = shutil.which("groff"), shutil.which("mandoc")
    if groff is None and mandoc is None:
        t.skip("man pages render without warnings",
               "neither groff (Debian groff-base) nor mandoc is installed")
    else:
        @t.check("man pages render without warnings (%s)" % ("groff -ww" if groff else "mandoc -T lint"))
        def _():
            for path in pages:
                if groff:
                    cmd = [groff, "-man", "-ww", "-z", "-Tutf8", path]
                else:
                    cmd = [mandoc, "-T", "lint", "-W", "warning", path]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                out = (p.stdout + p.stderr).strip()
                h.ok(p.returncode == 0 and not out, "%s: exit %s: %s" % (" ".join(cmd), p.returncode, out))

    @t.check("retryproxy(1) names every option of --help, exit codes 0/1/2 and the signals")
    def _():
        text = unroff(pages[MAN1])
        usage = h.run_bin(["--help"]).stdout
        options = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", usage))
        h.ok({"-c", "--check", "--version", "--help"} <= options, "--help options: %r" % options)
        options_section = text.split("\n.SH OPTIONS", 1)[1].split("\n.SH ", 1)[0]
        missing = [o for o in sorted(options) if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o),
                                                                options_section)]
        h.ok(not missing, "OPTIONS does not describe %s" % missing)
        exit_section = text.split("\n.SH EXIT STATUS", 1)[1].split("\n.SH ", 1)[0]
        for code in ("0", "1", "2"):
            h.ok(re.search(r"^\.B %s$" % code, exit_section, re.M), "EXIT STATUS lacks %s" % code)
        signals = text.split("\n.SH SIGNALS", 1)[1].split("\n.SH ", 1)[0]
        for sig in ("SIGTERM", "SIGINT", "SIGHUP"):
            h.ok(sig in signals, "SIGNALS lacks %s" % sig)

    @t.check("retryproxy(1) ENVIRONMENT names every variable the sources read, and the OpenSSL and systemd ones")
    def _():
        text = unroff(pages[MAN1])
        env_section = text.split("\n.SH ENVIRONMENT", 1)[1].split("\n.SH ", 1)[0]
        names = {"SSL_CERT_FILE", "SSL_CERT_DIR", "NOTIFY_SOCKET"}
        for name in os.listdir(os.path.join(h.REPO, "src")):
            if name.endswith((".c", ".h")):
                names |= set(re.findall(r'"(RETRYPROXY_[A-Z_]+)"', h.read_file(os.path.join(h.REPO, "src", name))))
        missing = sorted(n for n in names if n not in env_section)
        h.ok(not missing, "ENVIRONMENT does not describe %s" % missing)

    keys = man_keys(pages[MAN5])
    conf = flatten(yaml12.load(h.read_file(CONF)))

    @t.check("retryproxy.yaml(5) documents every key of conf/retryproxy.yaml with its value as the default")
    def _():
        problems = []
        for path, value in sorted(conf.items()):
            if path not in keys:
                problems.append("%s: not documented" % path)
                continue
            default = keys[path][1]
            if default is None:
                problems.append("%s: no 'Default: \\fB...\\fP'" % path)
            elif yaml12.load(default) != value:
                problems.append("%s: man page says %r, conf/retryproxy.yaml has %r" % (path, default, value))
        h.ok(not problems, "\n".join(problems))

    @t.check("retryproxy.yaml(5) names every key of the config loader's tables")
    def _():
        components = set()
        for path in keys:
            components |= set(re.sub(r"\[\]", "", path).split("."))
        missing = sorted(loader_key_names() - components)
        h.ok(not missing, "keys the loader knows but the man page does not: %s" % missing)

    @t.check("every routes[] key retryproxy.yaml(5) documents is accepted by --check")
    def _():
        route_keys = sorted(k for k in keys if k.startswith("routes[]."))
        h.ok(len(route_keys) >= 10, "too few routes[] keys documented: %s" % route_keys)
        samples = {
            "name": "r1", "match.host": "*.example.com", "match.path_prefix": "/v1/",
            "match.methods": ["POST"], "upstream": "https://api.example.com",
            "tls.ca_file": None, "tls.verify": True, "idempotent.methods": ["GET"],
            "idempotent.when_present": [{"header": "If-Match"}, {"query": "ifGenerationMatch"},
                                        {"json_field": "etag"}],
        }
        retry = {k.split(".", 2)[2]: v for k, v in conf.items() if k.startswith("defaults.retry.")}
        route = {}
        for key in route_keys:
            rel = key[len("routes[]."):]
            if rel == "retry":
                value = {}
                for sub, v in retry.items():
                    node = value
                    parts = sub.split(".")
                    for p in parts[:-1]:
                        node = node.setdefault(p, {})
                    node[parts[-1]] = v
            else:
                h.ok(rel in samples, "no sample value for documented key %s" % key)
                value = samples[rel]
            node = route
            parts = rel.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        path = os.path.join(t.tmp, "routes.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({"routes": [route]}, f)
        p = h.run_bin(["--check", "-c", path])
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"),
             "--check on a route using every documented key (stderr %r; config %r)" % (p.stderr, route))


h.run(scenario, __doc__)
