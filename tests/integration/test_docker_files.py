#!/usr/bin/env python3
"""Scenario: the container image and the docker compose demo, without docker.

Client: docker/example_client.py and docker/startup_app.py, run here on
loopback, and the test itself reading docker/Dockerfile,
docker/compose.yaml and the configs in docker/, and GETs of the proxy's
admin /upstreams (http.client).
Origin: docker/flaky_upstream.py on loopback, answering a fixed cycle of
503, reset, 200 (and, in a second check, its random default mode); and as
compose's slow-api: no failures injected, started after the app, with a
--start-delay of 3 s before it binds its port.
Must hold: compose.yaml names an existing Dockerfile, build context and
mounted files, publishes ports on 127.0.0.1 only, gives the proxy a stop
grace period longer than its drain_timeout, and points the proxy at the
compose services by name; the Dockerfile's build stage runs
scripts/install-deps.sh (the script the README's quick start runs) and
meson, its runtime stage is debian:12-slim with a non-root USER, a
HEALTHCHECK and the Debian packages of every shared library the binary
needs, and it uses no BuildKit-only syntax (podman builds it too); podman
build --isolation=chroot --format docker (the README's command), on a
stand-in context with the real Dockerfile.dockerignore and the runtime
stage's HEALTHCHECK, STOPSIGNAL and USER, leaves .git, build trees and
__pycache__ out and keeps those three; both configs pass `retryproxy --check`; the health check script says
healthy only on a 200 from /healthz; and the compose demo, with its
addresses moved to loopback, shows every request retried to a 200 in the
client's output and in the proxy's access log.
The start-up scenario (compose's slow-api and app): slow-api is
flaky_upstream.py with --start-delay and no failures injected; the app
depends on the proxy being healthy and not on slow-api, and calls a
sidecar listener whose upstream is slow-api; the demo config sets health
down_after, probe_interval and hold: true explicitly, and the route of
slow-api has a deadline longer than its start delay. Run on loopback with
the compose commands (the start delay cut to 3 s), the app started first
and slow-api once the proxy holds the app's requests:
it exits 0, every request got a 2xx, each POST reached slow-api exactly
once, /upstreams showed slow-api down with requests held and then up with
failures=0 held=0, and the proxy logged it going down and up.
"""

import http.client
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time

import harness as h
import yaml12  # first: it may run this file again under /usr/bin/python3
import yaml

DOCKER = os.path.join(h.REPO, "docker")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
DEMO_CONFIG = os.path.join(DOCKER, "retryproxy.yaml")
IMAGE_CONFIG = os.path.join(DOCKER, "image-default.yaml")
HEALTHCHECK = os.path.join(DOCKER, "healthcheck.sh")
CONTAINER_CONFIG = "/etc/retryproxy/retryproxy.yaml"
# retryproxy first; every other one runs a mounted script.
DEMO_SERVICES = ("retryproxy", "upstream", "client", "slow-api", "app")
# The start-up scenario on loopback: slow-api's --start-delay here.
START_DELAY = 3

# Shared libraries debian:12-slim has without installing anything.
BASE_PACKAGES = {"libc6", "libgcc-s1"}


def load(path):
    with open(path) as f:
        return yaml12.load(f)


def seconds(text):
    """A compose or retryproxy duration (15s, 1m30s, 500ms) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(text))
    h.ok(parts and "".join(a + b for a, b in parts) == str(text), "not a duration: %r" % text)
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_stages(text):
    """[(base image, alias, [(INSTRUCTION, args)])] with continuations joined
    and comments dropped."""
    stages = []
    logical = ""
    lines = text.splitlines()
    instructions = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not logical):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        word, _, args = logical.partition(" ")
        instructions.append((word.upper(), " ".join(args.split())))
        logical = ""
    for word, args in instructions:
        if word == "FROM":
            parts = args.split()
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append((parts[0], alias, []))
        else:
            h.ok(stages, "instruction %s before FROM" % word)
            stages[-1][2].append((word, args))
    return stages


def apt_packages(run_args):
    """Package names an `apt-get install` in a RUN installs."""
    out = []
    for segment in run_args.split("&&"):
        words = shlex.split(segment)
        if "apt-get" in words and "install" in words:
            for w in words[words.index("install") + 1:]:
                if not w.startswith("-"):
                    out.append(w)
    return out


def ldd_packages(binary):
    """{Debian package: [library]} for the shared libraries binary loads,
    or None without ldd or dpkg."""
    if not (shutil.which("ldd") and shutil.which("dpkg")):
        return None
    p = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    h.eq(p.returncode, 0, "ldd exit code (%r)" % p.stderr)
    found = {}
    for lib in re.findall(r"=> (/\S+)", p.stdout):
        owner = None
        for candidate in (os.path.realpath(lib), lib, re.sub(r"^/usr", "", os.path.realpath(lib))):
            q = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True, timeout=30)
            if q.returncode == 0:
                owner = q.stdout.split(":", 1)[0].strip()
                break
        h.ok(owner, "no Debian package owns %s" % lib)
        found.setdefault(owner, []).append(os.path.basename(lib))
    return found


def arg(command, flag):
    """The value after flag in a compose command list."""
    h.ok(flag in command, "%s not in %r" % (flag, command))
    return command[command.index(flag) + 1]


def with_args(command, **values):
    """A compose command list with the values of some --flags replaced
    (keyword proxy_host is --proxy-host); the image's paths of the demo
    scripts become the repository's."""
    out = list(command)
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        h.ok(flag in out, "%s not in %r" % (flag, command))
        out[out.index(flag) + 1] = str(value)
    out = [os.path.join(DOCKER, os.path.basename(c)) if c.startswith("/demo/") else c for c in out]
    h.eq(out[0], "python3", "the command's program")
    return [sys.executable] + out[1:]


def upstream_token(service):
    """The substitution name for a compose service's port in loopback_config."""
    return re.sub(r"[^A-Z0-9]", "_", service.upper())


def loopback_config(t, conf):
    """The demo config moved to loopback: listener i on @PORTi@, admin on
    @PORT9@, each upstream URL keeps its compose service's name with its port
    as @SERVICE@ (upstream_token), and a hosts file for RETRYPROXY_HOSTS that
    maps each of those names to 127.0.0.1. Returns (yaml text, env)."""
    names = set()

    def move(url):
        m = re.fullmatch(r"(https?://)([^/:]+):\d+/?", url)
        h.ok(m, "upstream URL %r" % url)
        names.add(m.group(2))
        return "%s%s:@%s@" % (m.group(1), m.group(2), upstream_token(m.group(2)))

    conf = yaml.safe_load(yaml.safe_dump(conf))
    for i, entry in enumerate(conf["listen"]):
        entry["address"] = "127.0.0.1:@PORT%d@" % i
        if "upstream" in entry:
            entry["upstream"] = move(entry["upstream"])
    for route in conf.get("routes") or []:
        if "upstream" in route:
            route["upstream"] = move(route["upstream"])
    conf["admin"] = "127.0.0.1:@PORT9@"
    hosts = os.path.join(t.tmp, "hosts-%d" % time.monotonic_ns())
    with open(hosts, "w") as f:
        f.write("".join("127.0.0.1 %s\n" % n for n in sorted(names)))
    return yaml.safe_dump(conf, sort_keys=False), {"RETRYPROXY_HOSTS": hosts}


def admin_get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def start_process(t, args, what):
    """A helper process with output to a file; stopped at the end."""
    log_path = os.path.join(t.tmp, "%s-%d.log" % (what, time.monotonic_ns()))
    log = open(log_path, "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=h.clean_env(),
                            stdin=subprocess.DEVNULL)
    log.close()

    def stop():
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    t.defer(stop)
    return proc, log_path


def start_upstream(t, *extra):
    port = h.free_port()
    proc, log = start_process(t, [sys.executable, os.path.join(DOCKER, "flaky_upstream.py"),
                                  "--host", "127.0.0.1", "--port", str(port)] + list(extra), "upstream")
    h.wait_until(lambda: h.port_accepts(port) or proc.poll() is not None, 10, "flaky_upstream to listen")
    h.ok(proc.poll() is None, "flaky_upstream exited: %s" % h.read_file(log))
    return port, log


class StubAdmin:
    """A loopback server that answers every request with one fixed reply, or
    never answers when reply is None."""

    def __init__(self, reply):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.reply is None:
                self.held.append(conn)
                continue
            conn.settimeout(5)
            try:
                conn.recv(4096)
                conn.sendall(self.reply)
            except OSError:
                pass
            conn.close()

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


# What docker/Dockerfile may use so that podman (buildah) builds it as docker
# does: the classic instructions, and no BuildKit-only flags or heredocs.
PORTABLE_INSTRUCTIONS = {"FROM", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK",
                         "STOPSIGNAL", "ENTRYPOINT", "CMD", "ENV", "ARG", "LABEL", "VOLUME"}
PORTABLE_FLAGS = {"COPY": {"--from", "--chown"}, "RUN": set(),
                  "HEALTHCHECK": {"--interval", "--timeout", "--start-period", "--retries"}}


# The test's images live in a storage of its own under its temporary
# directory (set in scenario), not in the machine's.
PODMAN_STORAGE = []


def podman(*args, timeout=120):
    return subprocess.run(["podman"] + PODMAN_STORAGE + list(args), capture_output=True,
                          text=True, timeout=timeout * h.SLOW)


def podman_cannot_build(tmp):
    """Why podman cannot build even a one-file image here (some sandboxes
    refuse the mounts it needs to unpack a layer), or None when it can."""
    ctx = os.path.join(tmp, "podman-probe")
    os.makedirs(ctx, exist_ok=True)
    with open(os.path.join(ctx, "a"), "w") as f:
        f.write("a\n")
    with open(os.path.join(ctx, "Containerfile"), "w") as f:
        f.write("FROM scratch\nCOPY a /a\n")
    tag = "localhost/retryproxy-podman-probe:%d" % os.getpid()
    probe = podman("build", "--isolation=chroot", "--pull=never", "-f",
                   os.path.join(ctx, "Containerfile"), "-t", tag, ctx)
    if probe.returncode != 0:
        return probe.stderr.strip()[-300:]
    podman("rmi", "-f", tag)
    return None


def podman_context(tmp, runtime):
    """A build context for podman shaped like the repository: docker/Dockerfile
    (FROM scratch, COPY of the whole context, and the real runtime stage's
    HEALTHCHECK, STOPSIGNAL and USER), the real docker/Dockerfile.dockerignore
    beside it, and files it must keep out (.git, build trees, __pycache__)
    and in (sources)."""
    ctx = os.path.join(tmp, "podman-context")
    files = {".git/HEAD": "ref\n", "build/build.ninja": "x\n", "build-asan/x.o": "x\n",
             "src/__pycache__/m.pyc": "x\n", "src/main.c": "int main;\n",
             "docker/healthcheck.sh": "#!/bin/sh\n"}
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(ctx, path)), exist_ok=True)
        with open(os.path.join(ctx, path), "w") as f:
            f.write(text)
    shutil.copy(os.path.join(DOCKER, "Dockerfile.dockerignore"), os.path.join(ctx, "docker"))
    kept = ["%s %s" % (w, a) for w, a in runtime if w in ("HEALTHCHECK", "STOPSIGNAL", "USER")]
    with open(os.path.join(ctx, "docker", "Dockerfile"), "w") as f:
        f.write("FROM scratch\nCOPY . /ctx\n" + "\n".join(kept) + "\n")
    return ctx


def healthcheck(addr, timeout=10):
    return subprocess.run([HEALTHCHECK, addr], capture_output=True, text=True, timeout=timeout)


def scenario(t):
    compose = load(COMPOSE)
    demo = load(DEMO_CONFIG)
    services = compose.get("services") or {}
    stages = dockerfile_stages(h.read_file(DOCKERFILE))

    @t.check("compose.yaml has the services retryproxy, upstream, client, slow-api and app")
    def _():
        h.ok(set(DEMO_SERVICES) <= set(services), "services: %r" % sorted(services))

    @t.check("compose.yaml builds retryproxy from the repository root with docker/Dockerfile")
    def _():
        build = services["retryproxy"]["build"]
        context = os.path.normpath(os.path.join(DOCKER, build["context"]))
        h.eq(context, h.REPO, "build context")
        h.eq(os.path.normpath(os.path.join(context, build["dockerfile"])), DOCKERFILE, "dockerfile")

    @t.check("every file compose.yaml mounts exists; docker/retryproxy.yaml is the proxy's config")
    def _():
        mounts = {}
        for name, svc in services.items():
            for vol in svc.get("volumes", []):
                src, target = vol.split(":")[:2]
                if src.startswith((".", "/")):
                    path = os.path.normpath(os.path.join(DOCKER, src))
                    h.ok(os.path.isfile(path), "%s mounts %s, which does not exist" % (name, path))
                    mounts[(name, target)] = path
        h.eq(mounts.get(("retryproxy", CONTAINER_CONFIG)), DEMO_CONFIG, "file mounted at " + CONTAINER_CONFIG)
        for name in DEMO_SERVICES[1:]:
            command = services[name]["command"]
            scripts = [c for c in command if c.endswith(".py")]
            h.ok(scripts and all((name, s) in mounts for s in scripts),
                 "%s runs %r but does not mount it" % (name, scripts))

    @t.check("compose.yaml publishes ports on 127.0.0.1 only, and each is a listener of the demo config")
    def _():
        listen_ports = {int(entry["address"].rsplit(":", 1)[1]) for entry in demo["listen"]}
        published = services["retryproxy"].get("ports", [])
        h.ok(published, "retryproxy publishes no port")
        for spec in published:
            parts = str(spec).split(":")
            h.ok(len(parts) == 3 and parts[0] == "127.0.0.1",
                 "%r should be 127.0.0.1:HOST:CONTAINER (published beyond loopback, the private "
                 "ranges in access.allow_clients could open the proxy)" % spec)
            h.ok(int(parts[2]) in listen_ports, "%r publishes a port nothing listens on" % spec)
        for name in DEMO_SERVICES[1:]:
            h.ok(not services[name].get("ports"), "%s needs no published port" % name)

    @t.check("the proxy's stop_grace_period is longer than the demo config's drain_timeout")
    def _():
        grace = seconds(services["retryproxy"]["stop_grace_period"])
        drain = seconds(demo.get("limits", {}).get("drain_timeout", "30s"))
        h.ok(grace > drain, "stop_grace_period %ss <= drain_timeout %ss" % (grace, drain))

    @t.check("the demo config's upstreams are compose services, on the port each listens on")
    def _():
        urls = [e["upstream"] for e in demo["listen"] if "upstream" in e]
        urls += [r["upstream"] for r in demo.get("routes") or [] if "upstream" in r]
        h.ok(urls, "no upstream in the demo config")
        for url in urls:
            m = re.fullmatch(r"https?://([^/:]+):(\d+)/?", url)
            h.ok(m and m.group(1) in services, "%s does not name a compose service" % url)
            command = services[m.group(1)]["command"]
            port = command[command.index("--port") + 1]
            h.eq(m.group(2), port, "port of %s (service %s listens on --port %s)" % (url, m.group(1), port))

    @t.check("both configs in docker/ pass retryproxy --check")
    def _():
        for path in (DEMO_CONFIG, IMAGE_CONFIG):
            p = h.run_bin(["--check", "-c", path])
            h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "%s (stderr %r)" % (path, p.stderr))

    @t.check("both configs keep the admin listener on loopback and clients to loopback and private ranges")
    def _():
        allowed = {"127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}
        for path in (DEMO_CONFIG, IMAGE_CONFIG):
            conf = load(path)
            h.ok(str(conf.get("admin", "")).startswith("127.0.0.1:"), "%s: admin %r" % (path, conf.get("admin")))
            h.ok(not conf.get("access", {}).get("admin_remote", False), "%s: admin_remote" % path)
            clients = set(conf["access"]["allow_clients"])
            h.ok(clients <= allowed, "%s: allow_clients beyond loopback and private ranges: %r"
                 % (path, sorted(clients - allowed)))

    @t.check("Dockerfile: build stage on debian:12 runs scripts/install-deps.sh, the script the quick start runs, and meson")
    def _():
        h.ok(len(stages) >= 2, "expected a build stage and a runtime stage, got %d" % len(stages))
        base, alias, body = stages[0]
        h.eq(base, "debian:12", "build stage base image")
        h.ok(alias, "the build stage needs a name for COPY --from")
        runs = " && ".join(a for w, a in body if w == "RUN")
        h.ok(re.search(r"\bscripts/install-deps\.sh\b", runs), "build stage does not run scripts/install-deps.sh")
        h.ok(re.search(r"\bscripts/install-deps\.sh\b",
                       h.read_file(os.path.join(h.REPO, "scripts", "run.sh"))),
             "scripts/run.sh (the README quick start) no longer runs scripts/install-deps.sh")
        # running the proxy needs what building does and curl for the
        # README's example, not the test tools (chromium, podman, a
        # redis-server that starts a service)
        h.ok(re.search(r"\bscripts/install-deps\.sh --run\b",
                       h.read_file(os.path.join(h.REPO, "scripts", "run.sh"))),
             "scripts/run.sh installs more than the build and curl (no --run)")
        h.ok(re.search(r'^--run\) packages="\$build_packages curl" ;;$',
                       h.read_file(os.path.join(h.REPO, "scripts", "install-deps.sh")), re.M),
             "install-deps.sh --run is not the build packages and curl")
        h.ok("./scripts/run.sh" in h.read_file(os.path.join(h.REPO, "README.md")),
             "the README does not use scripts/run.sh")
        h.ok(re.search(r"\bmeson setup\b", runs) and re.search(r"\bninja\b", runs), "build stage: meson setup and ninja")

    runtime_base, _alias, runtime = stages[-1]

    @t.check("Dockerfile: runtime stage on debian:12-slim runs as a non-root USER with a HEALTHCHECK")
    def _():
        h.eq(runtime_base, "debian:12-slim", "runtime base image")
        users = [a for w, a in runtime if w == "USER"]
        h.ok(users, "no USER in the runtime stage")
        user = users[-1].split(":")[0]
        h.ok(user not in ("root", "0"), "USER %s is root" % users[-1])
        checks = [a for w, a in runtime if w == "HEALTHCHECK"]
        h.eq(len(checks), 1, "HEALTHCHECK instructions")
        h.ok(" CMD " in " " + checks[0] and "NONE" not in checks[0], "HEALTHCHECK %r" % checks[0])

    @t.check("Dockerfile: COPY sources exist, the health check script and config land where they are used")
    def _():
        copies = {}
        for word, args in runtime:
            if word != "COPY":
                continue
            parts = args.split()
            if any(p.startswith("--from") for p in parts):
                copies[parts[-1]] = "stage"
                continue
            src, dst = parts[-2], parts[-1]
            h.ok(os.path.exists(os.path.join(h.REPO, src)), "COPY source %s does not exist" % src)
            copies[dst] = os.path.join(h.REPO, src)
        h.eq(copies.get(CONTAINER_CONFIG), IMAGE_CONFIG, "file copied to " + CONTAINER_CONFIG)
        h.eq(copies.get("/usr/bin/retryproxy"), "stage", "the binary copied from the build stage")
        check = [a for w, a in runtime if w == "HEALTHCHECK"][0]
        script = re.search(r'CMD \["([^"]+)"', check).group(1)
        h.eq(copies.get(script), HEALTHCHECK, "HEALTHCHECK runs " + script)
        h.ok(os.access(HEALTHCHECK, os.X_OK), "docker/healthcheck.sh is not executable")
        command = " ".join(a for w, a in runtime if w in ("ENTRYPOINT", "CMD"))
        h.ok("/usr/bin/retryproxy" in command and CONTAINER_CONFIG in command,
             "ENTRYPOINT/CMD should run /usr/bin/retryproxy -c %s: %r" % (CONTAINER_CONFIG, command))
        exposed = {int(p.split("/")[0]) for w, a in runtime if w == "EXPOSE" for p in a.split()}
        ports = {int(e["address"].rsplit(":", 1)[1]) for e in load(IMAGE_CONFIG)["listen"]}
        h.eq(exposed, ports, "EXPOSE vs the image config's listeners")

    @t.check("Dockerfile.dockerignore keeps build trees and .git out of the build context")
    def _():
        patterns = h.read_file(os.path.join(DOCKER, "Dockerfile.dockerignore")).split()
        for want in (".git", "build*/"):
            h.ok(want in patterns, "%s not ignored: %r" % (want, patterns))

    @t.check("Dockerfile: only instructions and flags podman (buildah) builds too, no BuildKit-only syntax")
    def _():
        text = h.read_file(DOCKERFILE)
        h.ok(not re.match(r"\s*#\s*(syntax|escape|check)\s*=", text, re.I),
             "a parser directive on the first line: %r" % text.splitlines()[0])
        for _base, _alias, body in stages:
            for word, args in body:
                h.ok(word in PORTABLE_INSTRUCTIONS, "instruction %s" % word)
                h.ok(not args.startswith("<<"), "a heredoc in %s %s" % (word, args[:40]))
                flags = []
                for token in args.split():
                    if not token.startswith("--"):
                        break
                    flags.append(token.split("=")[0])
                allowed = PORTABLE_FLAGS.get(word, set())
                h.ok(set(flags) <= allowed, "%s %s: flags %r (podman builds with %r)"
                     % (word, args[:60], flags, sorted(allowed)))

    PODMAN_STORAGE[:] = ["--root", os.path.join(t.tmp, "podman-root"),
                         "--runroot", os.path.join(t.tmp, "podman-run"),
                         "--storage-driver", "vfs"]
    if shutil.which("podman") is None:
        t.fail("podman builds with the ignore file and keeps the HEALTHCHECK",
               "podman is not installed; scripts/install-deps.sh installs it")
    elif podman("info").returncode != 0:
        t.skip("podman builds with the ignore file and keeps the HEALTHCHECK",
               "podman cannot run here: %s" % podman("info").stderr.strip()[-300:])
    elif podman_cannot_build(t.tmp) is not None:
        t.skip("podman builds with the ignore file and keeps the HEALTHCHECK",
               "podman cannot build any image here, not even FROM scratch with one COPY: %s"
               % podman_cannot_build(t.tmp))
    else:
        @t.check("podman build --isolation=chroot --format docker (README): docker/Dockerfile.dockerignore "
                 "keeps .git, build trees and __pycache__ out; HEALTHCHECK, STOPSIGNAL, USER kept")
        def _():
            ctx = podman_context(t.tmp, runtime)
            tag = "localhost/retryproxy-podman-check:%d" % os.getpid()
            built = podman("build", "--isolation=chroot", "--format", "docker", "--pull=never",
                           "-f", os.path.join(ctx, "docker", "Dockerfile"), "-t", tag, ctx)
            h.eq(built.returncode, 0, "podman build exit code\n%s" % built.stderr[-2000:])
            container = "retryproxy-podman-check-%d" % os.getpid()
            try:
                h.eq(podman("create", "--name", container, tag, "/none").returncode, 0,
                     "podman create")
                export = subprocess.run("podman %s export %s | tar -t" % (" ".join(PODMAN_STORAGE), container),
                                        shell=True,
                                        capture_output=True, text=True, timeout=60 * h.SLOW)
                h.eq(export.returncode, 0, "podman export | tar -t (%r)" % export.stderr)
                paths = set(p.rstrip("/") for p in export.stdout.split())
                h.ok("ctx/src/main.c" in paths, "sources left out: %r" % sorted(paths))
                for gone in ("ctx/.git", "ctx/build", "ctx/build-asan", "ctx/src/__pycache__"):
                    h.ok(gone not in paths, "%s is in the image: %r" % (gone, sorted(paths)))
                inspect = podman("image", "inspect", "--format",
                                 "{{json .HealthCheck}}|{{.Config.StopSignal}}|{{.Config.User}}", tag)
                h.eq(inspect.returncode, 0, "podman image inspect (%r)" % inspect.stderr)
                health, stop, user = inspect.stdout.strip().split("|")
                check = [a for w, a in runtime if w == "HEALTHCHECK"][0]
                want = json.loads(re.search(r"CMD (\[.*\])", check).group(1))
                h.eq(json.loads(health).get("Test"), ["CMD"] + want, "the image's health check")
                h.eq(stop, [a for w, a in runtime if w == "STOPSIGNAL"][0], "STOPSIGNAL")
                h.eq(user, [a for w, a in runtime if w == "USER"][-1], "USER")
            finally:
                podman("rm", "-f", container)
                podman("rmi", "-f", tag)

    packages = ldd_packages(h.BIN)
    if packages is None:
        t.skip("runtime packages cover the binary's shared libraries", "ldd or dpkg is not installed")
    else:
        @t.check("the runtime stage installs the Debian package of every shared library the binary loads")
        def _():
            installed = set()
            for word, args in runtime:
                if word == "RUN":
                    installed |= set(apt_packages(args))
            h.ok("ca-certificates" in installed, "ca-certificates (the trust store) is not installed")
            missing = {}
            for pkg, libs in packages.items():
                if pkg in installed or pkg in BASE_PACKAGES:
                    continue
                if h.SANITIZED and re.match(r"lib(asan|ubsan|lsan|stdc\+\+)", pkg):
                    continue
                missing[pkg] = libs
            h.ok(not missing, "not installed in the runtime stage: %r (have %r)" % (missing, sorted(installed)))

    @t.check("healthcheck.sh: healthy on 200, unhealthy on 503, on a refused connection and on silence")
    def _():
        ok = StubAdmin(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        draining = StubAdmin(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\n\r\ndraining\n")
        silent = StubAdmin(None)
        try:
            p = healthcheck("127.0.0.1:%d" % ok.port)
            h.eq(p.returncode, 0, "on 200 (stderr %r)" % p.stderr)
            p = healthcheck("127.0.0.1:%d" % draining.port)
            h.eq(p.returncode, 1, "on 503")
            h.ok("503" in p.stderr, "should say what /healthz answered: %r" % p.stderr)
            p = healthcheck("127.0.0.1:%d" % h.closed_port())
            h.eq(p.returncode, 1, "on a refused connection")
            start = time.monotonic()
            p = healthcheck("127.0.0.1:%d" % silent.port)
            h.eq(p.returncode, 1, "when nothing is answered")
            h.ok(time.monotonic() - start < 6, "gave up on silence only after %.1fs" % (time.monotonic() - start))
        finally:
            for s in (ok, draining, silent):
                s.close()

    @t.check("flaky_upstream.py in its default random mode answers some 503s, resets some and serves some")
    def _():
        port, log = start_upstream(t, "--fail-ratio", "0.4", "--reset-ratio", "0.2", "--seed", "7")
        seen = {"200": 0, "503": 0, "reset": 0}
        for i in range(40):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", "/r/%d" % i)
                resp = conn.getresponse()
                resp.read()
                seen[str(resp.status)] += 1
            except (ConnectionResetError, http.client.RemoteDisconnected):
                seen["reset"] += 1
            finally:
                conn.close()
        h.ok(all(seen.values()), "outcomes over 40 requests: %r" % seen)

    @t.check("the compose demo on loopback: every request is retried to a 200, in the client's output and the proxy's log")
    def _():
        up_port, up_log = start_upstream(t, "--pattern", "503,reset,200")
        conf = load(DEMO_CONFIG)
        text, env = loopback_config(t, conf)
        proxy = t.proxy(text, env=env, **{upstream_token("upstream"): up_port,
                                          upstream_token("slow-api"): h.closed_port()})
        sidecar = [i for i, e in enumerate(conf["listen"]) if e.get("upstream", "").startswith("http://upstream:")][0]
        forward = [i for i, e in enumerate(conf["listen"]) if "upstream" not in e][0]
        client = services["client"]["command"]
        upstream_url = client[client.index("--upstream") + 1]
        h.ok(upstream_url.startswith("http://upstream:"), "client --upstream %r" % upstream_url)
        p = subprocess.run([sys.executable, os.path.join(DOCKER, "example_client.py"),
                            "--proxy-host", "127.0.0.1", "--sidecar-port", str(proxy.port(sidecar)),
                            "--forward-port", str(proxy.port(forward)),
                            "--upstream", "http://upstream:%d" % up_port, "--count", "4", "--interval", "0"],
                           capture_output=True, text=True, timeout=60 * h.SLOW, env=h.clean_env())
        h.eq(p.returncode, 0, "client exit code (stderr %r)" % p.stderr)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("client: #")]
        h.eq(len(lines), 4, "client lines (%r)" % p.stdout)
        for ln in lines:
            h.ok(re.search(r"-> 200 Retry-Attempts: 3 ", ln),
                 "client line %r; upstream log:\n%s" % (ln, h.read_file(up_log)))
        h.ok(any(" sidecar " in ln for ln in lines) and any(" forward " in ln for ln in lines),
             "both listeners used: %r" % lines)
        for n in range(1, 5):
            entry = proxy.access_one("/demo/%d" % n)
            fields = h.access_fields(entry) if isinstance(entry, str) else entry
            h.eq((str(fields.get("status")), str(fields.get("attempts"))), ("200", "3"),
                 "status and attempts in the access log for /demo/%d (%r)" % (n, entry))
        p = healthcheck("127.0.0.1:%d" % proxy.port(9))
        h.eq(p.returncode, 0, "healthcheck.sh against the proxy's admin listener (stderr %r)" % p.stderr)


    slow_api = services.get("slow-api") or {}
    app = services.get("app") or {}

    @t.check("start-up scenario: slow-api is flaky_upstream.py with --start-delay and no failures injected")
    def _():
        command = slow_api["command"]
        h.ok(any(c.endswith("/flaky_upstream.py") for c in command), "slow-api runs %r" % command)
        h.eq((float(arg(command, "--fail-ratio")), float(arg(command, "--reset-ratio"))), (0.0, 0.0),
             "slow-api's --fail-ratio and --reset-ratio")
        h.ok("--pattern" not in command, "slow-api injects a --pattern: %r" % command)
        interval = seconds(re.search(r"--interval=(\S+)",
                                     [a for w, a in runtime if w == "HEALTHCHECK"][0]).group(1))
        h.ok(float(arg(command, "--start-delay")) > interval,
             "slow-api's --start-delay %s is not longer than the HEALTHCHECK interval %ss the app may "
             "wait for the proxy to be healthy: the API could be up before the app starts"
             % (arg(command, "--start-delay"), interval))

    @t.check("start-up scenario: the app waits for the proxy to be healthy, not for slow-api, and "
             "calls a sidecar listener whose upstream is slow-api")
    def _():
        h.eq(app.get("depends_on"), {"retryproxy": {"condition": "service_healthy"}}, "app's depends_on")
        deps = services["retryproxy"].get("depends_on") or []
        h.ok(isinstance(deps, list) or (deps.get("slow-api") or {}).get("condition", "service_started")
             == "service_started",
             "retryproxy may wait for slow-api's container to start, no more: %r" % deps)
        command = app["command"]
        h.ok(any(c.endswith("/startup_app.py") for c in command), "app runs %r" % command)
        h.eq(arg(command, "--proxy-host"), "retryproxy", "app's --proxy-host")
        port = int(arg(command, "--port"))
        listeners = [e for e in demo["listen"] if int(e["address"].rsplit(":", 1)[1]) == port]
        h.eq(len(listeners), 1, "listeners on the app's --port %d" % port)
        h.ok(re.fullmatch(r"http://slow-api:\d+/?", listeners[0].get("upstream", "")),
             "the app's listener %r should be a sidecar for slow-api" % listeners[0])
        h.ok(int(arg(command, "--posts")) >= 1 and int(arg(command, "--gets")) >= 2,
             "the app should send several GETs and at least one POST: %r" % command)

    @t.check("start-up scenario: the demo config sets health down_after, probe_interval and hold: true, "
             "and slow-api's route outlasts its start delay")
    def _():
        health = demo.get("health") or {}
        h.eq(sorted(health), ["down_after", "hold", "probe_interval"], "keys of health:")
        h.ok(int(health["down_after"]) > 0, "down_after 0 turns health off")
        h.ok(health["hold"] is True, "hold: %r" % health["hold"])
        h.ok(0 < seconds(health["probe_interval"]) <= 1, "probe_interval %r" % health["probe_interval"])
        routes = [r for r in demo.get("routes") or []
                  if re.fullmatch(r"http://slow-api:\d+/?", r.get("upstream", ""))]
        h.eq(len(routes), 1, "routes to slow-api")
        deadline = seconds(routes[0]["retry"]["deadline"])
        delay = float(arg(slow_api["command"], "--start-delay"))
        interval = seconds(re.search(r"--interval=(\S+)",
                                     [a for w, a in runtime if w == "HEALTHCHECK"][0]).group(1))
        h.ok(deadline > delay + interval,
             "route %s: deadline %ss is not longer than slow-api's --start-delay %ss plus the "
             "HEALTHCHECK interval %ss" % (routes[0]["name"], deadline, delay, interval))
        timeout = float(arg(app["command"], "--timeout")) if "--timeout" in app["command"] else 90.0
        h.ok(timeout > deadline, "the app's --timeout %ss is not longer than the route's deadline %ss"
             % (timeout, deadline))

    @t.check("start-up scenario on loopback: the app starts %d s before slow-api and never sees an error; "
             "each POST arrives once; slow-api went down and up" % START_DELAY)
    def _():
        # closed for START_DELAY, and no other test's socket may take it then
        slow_port = h.reserved_port()
        conf = load(DEMO_CONFIG)
        text, env = loopback_config(t, conf)
        proxy = t.proxy(text, env=env, **{upstream_token("upstream"): h.closed_port(),
                                          upstream_token("slow-api"): slow_port})
        listener = [i for i, e in enumerate(conf["listen"])
                    if e.get("upstream", "").startswith("http://slow-api:")][0]
        name = "http://slow-api:%d" % slow_port
        app_proc, app_log = start_process(t, with_args(app["command"], proxy_host="127.0.0.1",
                                                       port=proxy.port(listener)), "app")
        # While slow-api's port is closed: /upstreams shows it down, the app's requests held.
        # slow-api is started only once that is seen: started with the app, its start delay
        # raced the app's own start-up and three refused connects, and on a busy machine
        # the wait ran out first (or slow-api listened before it ever went down).
        seen = []

        def down_and_held():
            status, body = admin_get(proxy.port(9), "/upstreams")
            line = [ln for ln in body.splitlines() if ln.startswith(name + " ")]
            seen.append(line)
            return line and re.fullmatch(re.escape(name) + r" down failures=\d+ held=([1-9]\d*)", line[0])
        try:
            h.wait_until(down_and_held, 30 * h.SLOW, "/upstreams to show %s down with requests held" % name)
        except AssertionError as e:
            raise AssertionError("%s (saw %r); app output:\n%s\nproxy log:\n%s"
                                 % (e, seen[-3:], h.read_file(app_log), proxy.stderr_tail()))
        h.ok(app_proc.poll() is None, "the app ended while slow-api was not up yet: %s" % h.read_file(app_log))
        api_proc, api_log = start_process(t, with_args(slow_api["command"], host="127.0.0.1", port=slow_port,
                                                       start_delay=START_DELAY), "slow-api")
        started = time.monotonic()
        code = app_proc.wait(30 * h.SLOW)
        took = time.monotonic() - started
        out = h.read_file(app_log)
        api_out = h.read_file(api_log)
        print(out + api_out, end="", flush=True)
        h.eq(code, 0, "app exit code; app output:\n%s\nslow-api output:\n%s\nproxy log:\n%s"
             % (out, api_out, proxy.stderr_tail()))
        h.ok(took >= START_DELAY - 0.5, "the app ended %.1fs after start, before slow-api listened" % took)
        command = app["command"]
        gets, posts = int(arg(command, "--gets")), int(arg(command, "--posts"))
        lines = re.findall(r"^app: #\d+ (GET|POST) (\S+) -> (.*)$", out, re.M)
        h.eq(len(lines), gets + posts, "app result lines:\n%s" % out)
        for method, target, outcome in lines:
            h.ok(re.match(r"2\d\d Retry-Attempts: \d+ ", outcome), "%s %s -> %s" % (method, target, outcome))
        h.ok(re.search(r"^app: all %d requests got a 2xx" % (gets + posts), out, re.M), "app summary:\n%s" % out)
        # Each request reached slow-api, each POST exactly once.
        for method, target, _outcome in lines:
            arrived = re.findall(r"^upstream: #\d+ %s %s -> 200$" % (method, re.escape(target)), api_out, re.M)
            if method == "POST":
                h.eq(len(arrived), 1, "POST %s arrivals at slow-api:\n%s" % (target, api_out))
            else:
                h.ok(arrived, "GET %s never reached slow-api:\n%s" % (target, api_out))
        for method, target, _outcome in lines:
            entry = proxy.access_one(target)
            fields = h.access_fields(entry) if isinstance(entry, str) else entry
            h.eq((str(fields.get("status")), str(fields.get("route"))), ("200", "slow-api"),
                 "status and route in the access log for %s (%r)" % (target, entry))
        proxy.wait_log(r"warn.*upstream %s is down" % re.escape(name))
        proxy.wait_log(r"info.*upstream %s is up" % re.escape(name))
        status, body = admin_get(proxy.port(9), "/upstreams")
        h.ok(re.search(r"^%s up failures=0 held=0$" % re.escape(name), body, re.M),
             "/upstreams after start-up:\n%s" % body)


h.run(scenario, __doc__)
