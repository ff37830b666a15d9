#!/usr/bin/env python3
"""Scenario: the Debian package built from debian/.

Client: none. The test copies the source tree (the files git knows, plus
untracked ones it does not ignore) into a temporary directory and runs
`dpkg-buildpackage -us -uc -b` there, so nothing is written into the
repository or next to it; then it reads the .deb with `dpkg-deb -c`, `-I`,
`-e` and `-x`, and runs lintian on it.
Origin: none.
Must hold: the build succeeds, runs the unit tests (unless
DEB_BUILD_OPTIONS has nocheck) and writes retryproxy_<version>_<arch>.deb,
the version being debian/changelog's, whose upstream part is the binary's
(meson.build's project version). The package holds /usr/bin/retryproxy, both
man pages, /etc/retryproxy/retryproxy.yaml (conf/retryproxy.yaml, and a
conffile), the systemd unit in /lib/systemd/system (run as the user
retryproxy: DynamicUser= names it after the unit), every profile of
conf/profiles in /usr/share/retryproxy/profiles and the copyright file, and
no test or fuzz program. Its postinst makes the
retryproxy system user and enables the unit without starting it (an upgrade
only try-restarts it), its prerm stops the unit on removal, its postrm
removes the user on purge. The unpacked binary prints `ok` for `--check` on
the unpacked conffile and on every unpacked profile. lintian reports no
error (warnings are printed, not failed).
Skipped (exit 77, saying why) under sanitizers, where the package would be
the same, and where dpkg-buildpackage or debhelper is not installed
(scripts/install-deps.sh installs them).
"""

import glob
import gzip
import os
import re
import shutil
import stat
import subprocess
import sys

import harness as h

PROFILES = os.path.join(h.REPO, "conf", "profiles")
CONF = os.path.join(h.REPO, "conf", "retryproxy.yaml")
MAN_PAGES = {"usr/share/man/man1/retryproxy.1.gz": os.path.join(h.REPO, "man", "retryproxy.1"),
             "usr/share/man/man5/retryproxy.yaml.5.gz": os.path.join(h.REPO, "man", "retryproxy.yaml.5")}
UNIT = "lib/systemd/system/retryproxy.service"

# Time limits, seconds: the scenario's covers its steps' together, and
# tests/integration/meson.build's timeout covers the scenario's plus the
# harness's cleanup (60 s).
BUILD_S = 480     # dpkg-buildpackage, niced, beside the rest of the suite
CLEAN_S = 60      # debian/rules clean
LINTIAN_S = 180
OTHER_S = 120     # every other step (dpkg-deb, --check, copying the tree), each 30 s at most
SCENARIO_S = BUILD_S + CLEAN_S + LINTIAN_S + OTHER_S


def skip_file(reason):
    """Skip the whole file: meson counts exit 77 as skipped."""
    print("SKIP %s: %s" % (os.path.basename(sys.argv[0]), reason), flush=True)
    sys.exit(77)


def source_files():
    """The source tree's files, relative to it: git's tracked and untracked
    but not ignored files, or, outside a git checkout, every file but build
    trees."""
    p = subprocess.run(["git", "-C", h.REPO, "ls-files", "-z", "--cached", "--others",
                        "--exclude-standard"], capture_output=True, timeout=60)
    if p.returncode == 0:
        return [f for f in p.stdout.decode().split("\0") if f]
    files = []
    for root, dirs, names in os.walk(h.REPO):
        rel = os.path.relpath(root, h.REPO)
        if rel == ".":
            dirs[:] = [d for d in dirs if not d.startswith("build") and d != ".git"]
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return files


def copy_tree(dest):
    for rel in source_files():
        src = os.path.join(h.REPO, rel)
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet in git
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel), follow_symlinks=False)


def tree_files(top):
    """Every file and symlink under top, relative to it."""
    out = set()
    for root, dirs, names in os.walk(top):
        out.update(os.path.relpath(os.path.join(root, n), top) for n in names)
        out.update(os.path.relpath(os.path.join(root, d), top) for d in dirs
                   if os.path.islink(os.path.join(root, d)))
    return out


def not_ignored(paths):
    """Those of paths (relative to the repository) that the repository's
    ignore rules do not ignore; None outside a git checkout."""
    p = subprocess.run(["git", "-C", h.REPO, "check-ignore", "--no-index", "--stdin", "-z"],
                       input="\0".join(sorted(paths)).encode(), capture_output=True, timeout=60)
    if p.returncode not in (0, 1):
        return None
    ignored = set(f for f in p.stdout.decode().split("\0") if f)
    return sorted(set(paths) - ignored)


def run(cmd, timeout=30, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def scenario(t):
    top = os.path.join(t.tmp, "pkg")
    src = os.path.join(top, "retryproxy")
    copy_tree(src)
    copied = tree_files(src)

    changelog_version = run(["dpkg-parsechangelog", "-l", os.path.join(src, "debian", "changelog"),
                             "-S", "Version"]).stdout.strip()
    arch = run(["dpkg-architecture", "-qDEB_HOST_ARCH"]).stdout.strip()
    deb = os.path.join(top, "retryproxy_%s_%s.deb" % (changelog_version, arch))
    build = {}

    @t.check("debian/changelog's upstream version is the binary's (meson.build's project version)")
    def _():
        binary_version = h.run_bin(["--version"]).stdout.split()[-1]
        h.ok(re.fullmatch(r"[0-9][0-9.]*-[0-9]+", changelog_version),
             "debian/changelog version %r: want UPSTREAM-REVISION" % changelog_version)
        h.eq(changelog_version.rsplit("-", 1)[0], binary_version, "upstream version")

    @t.check("debian/control's Build-Depends are scripts/install-deps.sh's build_packages")
    def _():
        control = h.read_file(os.path.join(h.REPO, "debian", "control"))
        m = re.search(r"^Build-Depends:((?:.*\n)(?:[ \t].*\n)*)", control, re.M)
        h.ok(m, "debian/control has no Build-Depends")
        build_depends = {d.split()[0] for d in m.group(1).replace("\n", " ").split(",") if d.strip()}
        build_depends.discard("debhelper-compat")
        script = h.read_file(os.path.join(h.REPO, "scripts", "install-deps.sh"))
        m = re.search(r'^build_packages="([^"]*)"', script, re.M)
        h.ok(m, "scripts/install-deps.sh has no build_packages")
        # build-essential is implied for every Debian build.
        h.eq(sorted(build_depends), sorted(set(m.group(1).split()) - {"build-essential"}),
             "Build-Depends against build_packages")

    @t.check("dpkg-buildpackage -us -uc -b builds retryproxy_<version>_<arch>.deb in a copy of the tree")
    def _():
        env = h.clean_env({"LC_ALL": "C.UTF-8"})
        env.pop("MAKEFLAGS", None)
        # Niced: the other tests of the suite run beside this build.
        p = run(["nice", "-n", "10", "dpkg-buildpackage", "-us", "-uc", "-b", "-jauto"], timeout=BUILD_S,
                cwd=src, env=env)
        build["log"] = p.stdout + p.stderr
        h.eq(p.returncode, 0, "dpkg-buildpackage exit code; its output ends:\n%s" % build["log"][-4000:])
        debs = sorted(os.path.basename(f) for f in glob.glob(os.path.join(top, "*.deb")))
        h.ok(os.path.isfile(deb), "want %s; built: %s" % (os.path.basename(deb), debs))

    if not os.path.isfile(deb):
        return

    left = sorted(tree_files(src) - copied)

    @t.check("what the build leaves in the tree is all ignored by git (.gitignore)")
    def _():
        h.ok(left, "the build left nothing in the tree: the check would see nothing")
        loose = not_ignored(left)
        if loose is None:
            print("     not a git checkout: the ignore rules are not checked", flush=True)
            return
        h.eq(loose, [], "build outputs git would show as untracked (add them to .gitignore)")

    @t.check("debian/rules clean (as README says) removes what the build left")
    def _():
        p = run(["debian/rules", "clean"], timeout=CLEAN_S, cwd=src,
                env=h.clean_env({"LC_ALL": "C.UTF-8"}))
        h.eq(p.returncode, 0, "debian/rules clean exit code; output:\n%s"
             % (p.stdout + p.stderr)[-2000:])
        h.eq(sorted(tree_files(src) - copied), [], "files left after the clean")

    if "nocheck" in os.environ.get("DEB_BUILD_OPTIONS", ""):
        t.skip("the build runs the unit tests", "DEB_BUILD_OPTIONS has nocheck")
    else:
        @t.check("the build runs the unit tests (meson test --suite unit), none failing")
        def _():
            log = build["log"]
            h.ok(re.search(r"meson test .*--suite unit", log), "no `meson test --suite unit` in the build")
            ok, fail = re.search(r"^Ok:\s+(\d+)", log, re.M), re.search(r"^Fail:\s+(\d+)", log, re.M)
            h.ok(ok and fail, "no meson test summary in the build output")
            h.ok(int(ok.group(1)) > 0 and int(fail.group(1)) == 0,
                 "unit tests: Ok %s, Fail %s" % (ok.group(1), fail.group(1)))

    listing = {}
    for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6:
            listing[fields[5].split(" -> ")[0].lstrip(".").lstrip("/").rstrip("/")] = fields[0]

    @t.check("dpkg-deb -c: binary, man pages, conffile, unit, profiles and copyright are in the package")
    def _():
        want = ["usr/bin/retryproxy", "etc/retryproxy/retryproxy.yaml", UNIT,
                "usr/share/doc/retryproxy/copyright"] + list(MAN_PAGES)
        profiles = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PROFILES, "*.yaml")))
        h.ok(profiles, "no profiles in conf/profiles")
        want += ["usr/share/retryproxy/profiles/" + p for p in profiles]
        missing = [w for w in want if w not in listing]
        h.ok(not missing, "missing %s; the package holds %s" % (missing, sorted(listing)))
        h.ok(listing["usr/bin/retryproxy"].startswith("-rwxr-xr-x"),
             "usr/bin/retryproxy mode %s" % listing["usr/bin/retryproxy"])

    @t.check("dpkg-deb -c: no test or fuzz program, nothing left under /usr/lib/systemd")
    def _():
        stray = [p for p in listing if re.search(r"(^|/)(test_|fuzz_)", p) or p.startswith("usr/lib/systemd")]
        h.ok(not stray, "unexpected files: %s" % stray)

    info = run(["dpkg-deb", "-I", deb]).stdout

    @t.check("dpkg-deb -I: the config is a conffile, and postinst, prerm and postrm are there")
    def _():
        for member in ("conffiles", "postinst", "prerm", "postrm"):
            h.ok(re.search(r"^\s+\d+ bytes,\s+\d+ lines\s+\*?\s*%s\b" % member, info, re.M),
                 "no %s in dpkg-deb -I:\n%s" % (member, info))
        ctrl = os.path.join(t.tmp, "control")
        p = run(["dpkg-deb", "-e", deb, ctrl])
        h.eq(p.returncode, 0, "dpkg-deb -e exit code (stderr %r)" % p.stderr)
        conffiles = h.read_file(os.path.join(ctrl, "conffiles")).split()
        h.eq(conffiles, ["/etc/retryproxy/retryproxy.yaml"], "conffiles")

    fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Depends",
                  "Recommends"]).stdout

    @t.check("control: package, version and architecture match the file name; it depends on adduser and libssl3")
    def _():
        f = dict(re.findall(r"^(\w+): (.*)$", fields, re.M))
        h.eq((f.get("Package"), f.get("Version"), f.get("Architecture")),
             ("retryproxy", changelog_version, arch), "Package, Version, Architecture")
        depends = [d.split()[0] for d in f.get("Depends", "").split(", ")]
        for pkg in ("adduser", "libssl3", "libevent-2.1-7", "libyaml-0-2", "libjansson4"):
            h.ok(pkg in depends, "Depends lacks %s: %s" % (pkg, f.get("Depends")))

    @t.check("control: it recommends ca-certificates, the system trust store https:// upstreams "
             "are verified against by default (libssl3 does not bring it)")
    def _():
        f = dict(re.findall(r"^(\w+): (.*)$", fields, re.M))
        wanted = [d.split()[0] for field in ("Depends", "Recommends")
                  for d in f.get(field, "").split(", ") if d.strip()]
        h.ok("ca-certificates" in wanted, "neither Depends nor Recommends names ca-certificates: %r"
             % f)

    ctrl = os.path.join(t.tmp, "control")

    def script(name):
        return h.read_file(os.path.join(ctrl, name))

    @t.check("maintainer scripts: valid sh; postinst makes the system user and enables the unit without starting it")
    def _():
        for name in ("postinst", "prerm", "postrm"):
            p = run(["sh", "-n", os.path.join(ctrl, name)])
            h.eq(p.returncode, 0, "sh -n %s (stderr %r)" % (name, p.stderr))
        postinst = script("postinst")
        h.ok(re.search(r"adduser --system --group\b[^\n]*(\\\n[^\n]*)*\bretryproxy\b", postinst),
             "postinst does not run adduser --system --group ... retryproxy:\n%s" % postinst)
        h.ok(re.search(r"deb-systemd-helper enable 'retryproxy\.service'", postinst),
             "postinst does not enable the unit:\n%s" % postinst)
        starts = re.findall(r"deb-systemd-invoke (\S+) 'retryproxy\.service'", postinst)
        h.eq(starts, ["try-restart"], "deb-systemd-invoke actions in postinst (try-restart on upgrade only)")
        h.ok(re.search(r'if \[ -n "\$2" \]; then\s+deb-systemd-invoke try-restart', postinst),
             "the try-restart is not limited to upgrades:\n%s" % postinst)

    @t.check("maintainer scripts: prerm stops the unit on removal; postrm removes the user on purge")
    def _():
        prerm = script("prerm")
        h.ok(re.search(r'"\$1" = "remove".*\n\s*deb-systemd-invoke stop retryproxy\.service', prerm),
             "prerm does not stop the unit on remove:\n%s" % prerm)
        postrm = script("postrm")
        h.ok(re.search(r'"\$1" = "purge"', postrm) and re.search(r"deluser [^\n]*--system retryproxy", postrm),
             "postrm does not remove the user on purge:\n%s" % postrm)

    root = os.path.join(t.tmp, "root")

    @t.check("dpkg-deb -x: the unpacked binary prints ok for --check on the unpacked conffile")
    def _():
        p = run(["dpkg-deb", "-x", deb, root])
        h.eq(p.returncode, 0, "dpkg-deb -x exit code (stderr %r)" % p.stderr)
        binary = os.path.join(root, "usr", "bin", "retryproxy")
        h.ok(os.stat(binary).st_mode & stat.S_IXOTH, "unpacked binary is not executable")
        p = run([binary, "--check", "-c", os.path.join(root, "etc", "retryproxy", "retryproxy.yaml")],
                timeout=20, env=h.clean_env())
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "exit code and stdout (stderr %r)" % p.stderr)

    @t.check("the unpacked profiles pass --check, and conffile and man pages are the repository's")
    def _():
        binary = os.path.join(root, "usr", "bin", "retryproxy")
        unpacked = sorted(glob.glob(os.path.join(root, "usr", "share", "retryproxy", "profiles", "*.yaml")))
        h.eq([os.path.basename(p) for p in unpacked],
             sorted(os.path.basename(p) for p in glob.glob(os.path.join(PROFILES, "*.yaml"))),
             "unpacked profiles against conf/profiles")
        for path in unpacked:
            p = run([binary, "--check", "-c", path], timeout=20, env=h.clean_env())
            h.eq((p.returncode, p.stdout.strip()), (0, "ok"),
                 "%s: exit code and stdout (stderr %r)" % (os.path.basename(path), p.stderr))
        h.eq(h.read_file(os.path.join(root, "etc", "retryproxy", "retryproxy.yaml"), "rb"),
             h.read_file(CONF, "rb"), "packaged /etc/retryproxy/retryproxy.yaml")
        for packaged, repo in MAN_PAGES.items():
            with gzip.open(os.path.join(root, packaged)) as f:
                h.eq(f.read(), h.read_file(repo, "rb"), packaged)

    @t.check("the packaged unit runs /usr/bin/retryproxy on /etc/retryproxy/retryproxy.yaml as the user retryproxy")
    def _():
        unit = h.read_file(os.path.join(root, UNIT))
        for line in ("ExecStart=/usr/bin/retryproxy -c /etc/retryproxy/retryproxy.yaml", "DynamicUser=yes",
                     "WantedBy=multi-user.target"):
            h.ok(re.search("^" + re.escape(line) + "$", unit, re.M), "want the line %r in:\n%s" % (line, unit))
        # With DynamicUser= and no User=, systemd names the user after the
        # unit, and uses the static user of that name postinst makes.
        h.ok(not re.search(r"^\s*User=", unit, re.M), "a User= line would rename the user:\n%s" % unit)
        h.eq(os.path.basename(UNIT), "retryproxy.service", "unit name (the user's name)")

    if shutil.which("lintian") is None:
        t.skip("lintian reports no error", "lintian is not installed (scripts/install-deps.sh installs it)")
        return

    @t.check("lintian reports no error")
    def _():
        p = run(["lintian", "--tag-display-limit", "0", deb], timeout=LINTIAN_S, env=h.clean_env())
        out = p.stdout + p.stderr
        for line in out.splitlines():
            if re.match(r"[WI]: ", line):
                print("     lintian: %s" % line, flush=True)
        errors = [line for line in out.splitlines() if line.startswith("E: ")]
        h.ok(not errors, "lintian errors:\n%s" % "\n".join(errors))
        h.ok(p.returncode == 0 or errors, "lintian exit code %d: %s" % (p.returncode, out[-2000:]))


if h.SANITIZED:
    skip_file("the package is built the same way whatever the build tree; it is checked in the plain build")
for tool, package in (("dpkg-buildpackage", "dpkg-dev"), ("dh", "debhelper"), ("dpkg-deb", "dpkg")):
    if shutil.which(tool) is None:
        skip_file("%s is not installed (Debian package %s; scripts/install-deps.sh installs it)"
                  % (tool, package))
h.run(scenario, __doc__, timeout=SCENARIO_S)
