#!/usr/bin/env python3
"""Scenario: the command line.

Client: none; the test runs the binary with --version, --help, --check on a
good and on a bad config, an unknown option, an option that names one
thing given twice, a missing -c file, a config
whose port is taken, and no -c at all from an empty directory and from one
holding conf/retryproxy.yaml; it also stops a running proxy with SIGINT.
Origin: none.
Must hold: --version prints "retryproxy <version>"; --help exits 0 naming
the options; either followed by a stray word or an unknown option, or
beside options that do not go together (-H without --explain, --explain or
--make-ca with --check), is a usage error (exit 1) that answers nothing on
stdout; --check prints "ok" and exits 0 without binding anything (and
without -c names on stderr the config it checked), and exits 2 naming the
error when that "ok" cannot be written (stdout on /dev/full, or a pipe
nobody reads: no death by SIGPIPE), as do
--version, --help and --make-ca (whose files are made all the same); a bad config exits 1
reporting every error as file:line:col (the key for an unknown key, the
value for a bad value), a tls.ca_file holding no certificate included,
for --check as for a start; usage errors exit 1 (-c, --explain, --body
and --make-ca given twice among them, naming the option); an option's value
may be spelt as getopt_long takes it (--config=FILE, -cFILE,
--explain=METHOD URL, --header=VALUE, -HVALUE, --body=FILE, --make-ca=DIR, a
long option shortened to a unique prefix), and a value missing or given to
an option that takes none, an unknown or ambiguous option, or a stray word
is still a usage error naming it; a port in use
exits 2 naming the cause; without -c the proxy says on stderr which config it
used (./conf/retryproxy.yaml first, else /etc/retryproxy/retryproxy.yaml,
else the embedded default), whatever log.level the config sets, and a reload looks again (a ./conf/retryproxy.yaml
written after a start on another config is loaded, with a warning naming
both files; one gone since is not
replaced by the embedded default: the running config stays); SIGINT and
SIGTERM exit 0, and so does a proxy that gets another SIGTERM while it
exits (gdb stops it where it frees what it served with, after the drain,
and it sends itself the signal there): before, the default action freeing
the signal events put back killed it, and the lines not yet written were
lost; a SIGHUP that comes while the config is still being read
(a FIFO the test writes it to only after the signal) does not kill the
proxy, which then starts and serves, and is not lost: once serving, the
proxy reloads (the FIFO read again, a config on another port); SIGUSR1
and SIGUSR2, while the config is read and once the proxy serves, kill
nothing: it starts, logs each as ignored, and still listens.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import harness as h

GOOD = """\
listen:
  - address: 127.0.0.1:@PORT@
log:
  level: info
limits:
  drain_timeout: 1s
"""

# Line 4 column 20 is the value "fast"; line 5 column 1 is the unknown key.
BAD = """\
listen:
  - address: 127.0.0.1:3128
limits:
  connect_timeout: fast
bogus_key: 1
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def start(args, cwd):
    """The binary in the background with stderr to a file."""
    err_path = os.path.join(cwd, "stderr-%d.txt" % time.monotonic_ns())
    err = open(err_path, "wb")
    proc = subprocess.Popen([h.BIN] + args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err,
                            env=h.clean_env())
    err.close()
    return proc, err_path


def start_listening(args, cwd, port):
    """start(), then wait until the proxy listens on port (its signal
    handlers are in place by then) or has exited; stopped if the wait fails."""
    proc, err = start(args, cwd)
    try:
        h.wait_until(lambda: h.listens_on(proc.pid, port) or proc.poll() is not None, 15 * h.SLOW,
                     "the proxy to listen on %d" % port)
    except BaseException:
        finish(proc)
        raise
    return proc, err


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def fifo_writer(fifo, proc, err):
    """The write end of fifo once proc, started with -c fifo, has opened it
    for reading (a non-blocking writer's open fails with ENXIO until then);
    a failed check if proc exited first."""
    fd = None

    def reader_open():
        nonlocal fd
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return proc.poll() is not None
        return True

    h.wait_until(reader_open, 15 * h.SLOW, "the proxy to open its config")
    h.ok(fd is not None, "the proxy exited before reading its config: %r" % read(err))
    return fd


def refused_missing_default_file(cwd):
    """Without -c in cwd, whose ./conf/retryproxy.yaml is a name with no
    file behind it: --check and a start exit 1 naming it, and do not run
    the embedded default."""
    for args in (["--check"], []):
        p = h.run_bin(args, cwd=cwd, timeout=10)
        h.eq((p.returncode, p.stdout), (1, ""), "%s exit code and stdout (stderr %r)"
             % (args, p.stderr))
        h.ok("./conf/retryproxy.yaml: cannot open: No such file or directory" in p.stderr,
             "%s names the file and the cause: %r" % (args, p.stderr))
        h.ok("<embedded>" not in p.stderr, "%s took the embedded default: %r"
             % (args, p.stderr))


def finish(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(20 * h.SLOW)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return "killed"
    return proc.returncode


def scenario(t):
    tmp = t.tmp

    @t.check("--version prints 'retryproxy <version>' and exits 0")
    def _():
        p = h.run_bin(["--version"])
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        h.ok(re.fullmatch(r"retryproxy \d+\.\d+(\.\d+)?\S*\n?", p.stdout),
             "stdout should be 'retryproxy <version>', got %r" % p.stdout)

    @t.check("--help exits 0 and names -c, --check, --version")
    def _():
        p = h.run_bin(["--help"])
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        for opt in ("-c", "--check", "--version", "--help"):
            h.ok(opt in p.stdout, "--help output should mention %s: %r" % (opt, p.stdout))

    @t.check("--help or --version followed by a stray word or an unknown option is a usage "
             "error (exit 1 naming it), not an answer that ignored it")
    def _():
        for args, stray in ((["--help", "x"], "x"), (["--version", "x"], "x"),
                            (["-h", "--no-such-option"], "--no-such-option"),
                            (["--version", "-c"], "-c")):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "exit code of %r (stdout %r)" % (args, p.stdout))
            h.ok(stray in p.stderr, "stderr for %r should name %s: %r" % (args, stray, p.stderr))
            h.eq(p.stdout, "", "nothing answered on stdout for %r" % (args,))
        p = h.run_bin(["-c", "/nonexistent.yaml", "--version"])
        h.eq(p.returncode, 0, "a valid option before --version still lets it answer (stderr %r)"
             % p.stderr)

    @t.check("--help or --version beside options that do not go together (-H without "
             "--explain, --explain or --make-ca with --check) is a usage error naming "
             "why, as without them; beside a valid command line it answers")
    def _():
        for args, why in ((["--version", "-H", "A: b"], "-H and --body go with --explain"),
                          (["--help", "--body", "f"], "-H and --body go with --explain"),
                          (["--help", "--explain", "GET", "http://x/", "--check"],
                           "--explain takes no --check or --make-ca"),
                          (["--version", "--check", "--make-ca", os.path.join(tmp, "no-ca")],
                           "--make-ca takes no other option")):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "exit code of %r (stdout %r)" % (args, p.stdout))
            h.ok(why in p.stderr, "stderr for %r should say %r: %r" % (args, why, p.stderr))
            h.eq(p.stdout, "", "nothing answered on stdout for %r" % (args,))
        h.ok(not os.path.exists(os.path.join(tmp, "no-ca")), "no CA made beside a usage error")
        for args in (["--version", "--explain", "GET", "http://x/"],
                     ["--help", "--make-ca", os.path.join(tmp, "no-ca")]):
            p = h.run_bin(args)
            h.eq(p.returncode, 0, "%r answers (stderr %r)" % (args, p.stderr))
            h.ok(p.stdout != "", "%r answers on stdout" % (args,))
        h.ok(not os.path.exists(os.path.join(tmp, "no-ca")), "--help made no CA")

    @t.check("--check on a good config prints ok, exits 0 and binds nothing (its port is taken)")
    def _():
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            path = write(os.path.join(tmp, "good.yaml"), GOOD.replace("@PORT@", str(taken.getsockname()[1])))
            p = h.run_bin(["-c", path, "--check"])
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        h.eq(p.stdout.strip(), "ok", "stdout")

    @t.check("--check whose ok cannot be written (stdout on /dev/full) exits 2 naming the "
             "error, not 0")
    def _():
        path = write(os.path.join(tmp, "good-full.yaml"), GOOD.replace("@PORT@", str(h.free_port())))
        with open("/dev/full", "w") as full:
            p = subprocess.run([h.BIN, "-c", path, "--check"], stdout=full, stderr=subprocess.PIPE,
                               env=h.clean_env(), timeout=20 * h.SLOW, text=True)
        h.eq(p.returncode, 2, "exit code (stderr %r)" % p.stderr)
        h.ok("--check: cannot write the answer: No space left on device" in p.stderr,
             "the reason on stderr: %r" % p.stderr)

    @t.check("--version, --help and --make-ca whose output cannot be written (stdout on "
             "/dev/full) exit 2 naming the error, not 0; --make-ca's files are made")
    def _():
        ca_dir = os.path.join(tmp, "full-ca")
        for args, option in ((["--version"], "--version"), (["--help"], "--help"),
                             (["--make-ca", ca_dir], "--make-ca")):
            with open("/dev/full", "w") as full:
                p = subprocess.run([h.BIN] + args, stdout=full, stderr=subprocess.PIPE,
                                   env=h.clean_env(), timeout=20 * h.SLOW, text=True)
            h.eq(p.returncode, 2, "%s: exit code (stderr %r)" % (option, p.stderr))
            h.ok("%s: cannot write the answer: No space left on device" % option in p.stderr,
                 "%s: the reason on stderr: %r" % (option, p.stderr))
        h.ok(os.path.exists(os.path.join(ca_dir, "ca.pem")) and
             os.path.exists(os.path.join(ca_dir, "ca-key.pem")), "the CA files were made")

    @t.check("--check, --explain, --version and --help whose stdout is a pipe nobody reads "
             "exit 2 naming the error, not killed by SIGPIPE")
    def _():
        path = write(os.path.join(tmp, "good-pipe.yaml"), GOOD.replace("@PORT@", str(h.free_port())))
        for args, option in ((["-c", path, "--check"], "--check"),
                             (["-c", path, "--explain", "GET", "http://127.0.0.1:1/"], "--explain"),
                             (["--version"], "--version"), (["--help"], "--help")):
            r, w = os.pipe()
            os.close(r)
            try:
                p = subprocess.run([h.BIN] + args, stdout=w, stderr=subprocess.PIPE,
                                   env=h.clean_env(), timeout=20 * h.SLOW, text=True)
            finally:
                os.close(w)
            h.eq(p.returncode, 2, "%s: exit code (stderr %r)" % (option, p.stderr))
            h.ok("%s: cannot write the answer: Broken pipe" % option in p.stderr,
                 "%s: the reason on stderr: %r" % (option, p.stderr))

    @t.check("--check on a bad config exits 1 and reports every error as file:line:col")
    def _():
        path = write(os.path.join(tmp, "bad.yaml"), BAD)
        p = h.run_bin(["-c", path, "--check"])
        h.eq(p.returncode, 1, "exit code")
        h.ok("ok" not in p.stdout.split(), "stdout must not say ok: %r" % p.stdout)
        h.ok(re.search(r"bad\.yaml:4:20: .*connect_timeout", p.stderr),
             "stderr should have bad.yaml:4:20: ...connect_timeout... for the bad duration value: %r" % p.stderr)
        h.ok(re.search(r"bad\.yaml:5:1: .*bogus_key", p.stderr),
             "stderr should have bad.yaml:5:1: ...bogus_key... for the unknown key: %r" % p.stderr)

    @t.check("--check refuses a tls.ca_file that holds no certificate, as a start does")
    def _():
        notpem = write(os.path.join(tmp, "notpem.pem"), "not a certificate\n")
        path = write(os.path.join(tmp, "badca.yaml"),
                     GOOD.replace("@PORT@", str(h.free_port())) + "tls:\n  ca_file: %s\n" % notpem)
        for args in (["-c", path, "--check"], ["-c", path]):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "exit code of %r (stderr %r)" % (args, p.stderr))
            h.ok(re.search(r"badca\.yaml:\d+:\d+: tls\.ca_file: holds no certificate", p.stderr),
                 "stderr should name badca.yaml:line:col and tls.ca_file: %r" % p.stderr)

    @t.check("--check on a config with tls.verify: false prints ok and the warnings a start "
             "logs, naming each route whose upstream certificates go unchecked")
    def _():
        path = write(os.path.join(tmp, "unverified.yaml"),
                     GOOD.replace("@PORT@", str(h.free_port())) +
                     "tls:\n  verify: false\nroutes:\n"
                     "  - name: api\n    match: { path_prefix: /api }\n"
                     "  - name: checked\n    match: { path_prefix: /c }\n"
                     "    tls: { verify: true }\n")
        p = h.run_bin(["-c", path, "--check"])
        h.eq((p.returncode, p.stdout), (0, "ok\n"), "exit code and stdout (stderr %r)" % p.stderr)
        warned = [ln for ln in p.stderr.splitlines() if "tls.verify is false" in ln]
        h.eq(len(warned), 3, "warnings: the top-level tls, routes default and api: %r" % p.stderr)
        h.ok(all(ln.startswith(path + ": warning: ") for ln in warned),
             "each warning names the file: %r" % warned)
        for route in ("default", "api"):
            h.ok(any("route %s: " % route in ln for ln in warned),
                 "no warning names route %s: %r" % (route, warned))
        h.ok(not any("route checked" in ln for ln in warned), "route checked warned: %r" % warned)

    @t.check("--check without -c says on stderr which config it checked")
    def _():
        cwd = os.path.join(tmp, "check-conf")
        write(os.path.join(cwd, "conf", "retryproxy.yaml"), GOOD.replace("@PORT@", "1"))
        p = h.run_bin(["--check"], cwd=cwd)
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "exit code and stdout (%r)" % p.stderr)
        h.ok("checking config: ./conf/retryproxy.yaml" in p.stderr, "stderr: %r" % p.stderr)

    @t.check("no -c, ./conf/retryproxy.yaml a symlink to a missing file (a volume not "
             "mounted): --check and a start exit 1 naming it, not run the embedded default")
    def _():
        cwd = os.path.join(tmp, "dangling-conf")
        os.makedirs(os.path.join(cwd, "conf"))
        os.symlink(os.path.join(tmp, "not-mounted", "retryproxy.yaml"),
                   os.path.join(cwd, "conf", "retryproxy.yaml"))
        refused_missing_default_file(cwd)

    @t.check("no -c, ./conf a symlink to a missing directory (a shared config dir not "
             "there yet): --check and a start exit 1 naming the file, not run the embedded "
             "default")
    def _():
        cwd = os.path.join(tmp, "dangling-conf-dir")
        os.makedirs(cwd)
        os.symlink(os.path.join(tmp, "not-there", "conf"), os.path.join(cwd, "conf"))
        refused_missing_default_file(cwd)

    @t.check("no -c, ./conf a directory the proxy may not look into: --check exits 1 "
             "naming ./conf/retryproxy.yaml, not run the embedded default")
    def _():
        # as root, the proxy runs as nobody, who may not search the directory
        as_nobody = os.geteuid() == 0
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        # the binary's libraries are the system's: a test library path
        # nobody may not read would only stop the loader
        env = {k: v for k, v in h.clean_env().items() if k != "LD_LIBRARY_PATH"}
        if as_nobody:
            probe = subprocess.run(nobody + [h.BIN, "--version"], env=env, capture_output=True,
                                   timeout=10 * h.SLOW, text=True)
            if probe.returncode != 0:
                print("skipped: nobody cannot run %s: %s" % (h.BIN, probe.stderr.strip()))
                return
        cwd = tempfile.mkdtemp(prefix="retryproxy-cli-")
        t.defer(lambda: shutil.rmtree(cwd, ignore_errors=True))
        os.chmod(cwd, 0o755)
        conf = os.path.join(cwd, "conf")
        os.makedirs(conf)
        with open(os.path.join(conf, "retryproxy.yaml"), "w") as f:
            f.write("listen: [{address: 127.0.0.1:1}]\n")
        os.chmod(conf, 0o700 if as_nobody else 0)
        t.defer(lambda: os.chmod(conf, 0o700))
        args = [h.BIN, "--check"]
        if as_nobody:
            args = nobody + args
        p = subprocess.run(args, cwd=cwd, env=env, capture_output=True,
                           timeout=10 * h.SLOW, text=True)
        h.eq((p.returncode, p.stdout), (1, ""), "exit code and stdout (stderr %r)" % p.stderr)
        h.ok("./conf/retryproxy.yaml: cannot open: Permission denied" in p.stderr,
             "names the file and the cause: %r" % p.stderr)

    @t.check("no -c, ./conf a directory (or a symlink to one) without retryproxy.yaml, or a "
             "file: the search goes on to the embedded default")
    def _():
        for name, make in (("plain-dir", lambda conf: os.makedirs(conf)),
                           ("linked-dir", lambda conf: (os.makedirs(conf + "-target"),
                                                        os.symlink(conf + "-target", conf))),
                           ("file", lambda conf: open(conf, "w").close())):
            cwd = os.path.join(tmp, "no-conf-" + name)
            os.makedirs(cwd)
            make(os.path.join(cwd, "conf"))
            if os.path.lexists("/etc/retryproxy/retryproxy.yaml"):
                continue  # the search would stop there instead
            p = h.run_bin(["--check"], cwd=cwd, timeout=10)
            h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "%s: exit code and stdout (%r)"
                 % (name, p.stderr))
            h.ok("checking config: <embedded>" in p.stderr, "%s: stderr %r" % (name, p.stderr))

    @t.check("starting with a bad config exits 1 without listening")
    def _():
        path = os.path.join(tmp, "bad.yaml")
        p = h.run_bin(["-c", path])
        h.eq(p.returncode, 1, "exit code (stderr %r)" % p.stderr)
        h.ok(re.search(r"bad\.yaml:4:20:", p.stderr), "stderr should name bad.yaml:4:20: %r" % p.stderr)

    @t.check("an unknown option exits 1 with a message")
    def _():
        p = h.run_bin(["--no-such-option"])
        h.eq(p.returncode, 1, "exit code")
        h.ok(p.stderr.strip(), "stderr should explain the usage error")

    @t.check("-c, --config, --explain, --body and --make-ca given twice exit 1 naming the option, "
             "whatever the second names")
    def _():
        good = write(os.path.join(tmp, "twice.yaml"), GOOD.replace("@PORT@", "1"))
        for args, option in ((["-c", good, "-c", good, "--check"], "-c"),
                             (["-c", good, "--config", good, "--check"], "--config"),
                             (["--explain", "GET", "http://127.0.0.1/", "--explain", "GET",
                               "http://127.0.0.1/"], "--explain"),
                             (["--explain", "GET", "http://127.0.0.1/", "--body", good, "--body", good],
                              "--body"),
                             (["--make-ca", tmp, "--make-ca", tmp], "--make-ca")):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "exit code of %r (stderr %r)" % (args, p.stderr))
            h.ok("%s given twice" % option in p.stderr, "stderr for %r should say %s was given twice: %r"
                 % (args, option, p.stderr))
            h.ok("ok" not in p.stdout, "nothing checked or explained for %r: %r" % (args, p.stdout))

    @t.check("the getopt_long spellings of an option's value (--config=FILE, -cFILE, "
             "--explain=METHOD URL, -HVALUE, --header=VALUE, --body=FILE, --make-ca=DIR, a long "
             "option shortened to a unique prefix) work as the spaced ones do")
    def _():
        good = write(os.path.join(tmp, "spelt.yaml"), GOOD.replace("@PORT@", "1") +
                     "defaults:\n  idempotent:\n    methods: [GET]\n"
                     "    when_present: [{header: If-Match}]\n")
        for args in (["--config=" + good, "--check"], ["-c" + good, "--check"],
                     ["--conf", good, "--check"], ["--config=" + good, "--ch"]):
            p = h.run_bin(args)
            h.eq((p.returncode, p.stdout), (0, "ok\n"), "%r: exit code and stdout (stderr %r)"
                 % (args, p.stderr))
        url = "http://127.0.0.1:2/x"
        for args in (["-c" + good, "--explain=POST", url, "-HIf-Match: \"v1\""],
                     ["--config=" + good, "--explain", "POST", url, "--header=If-Match: \"v1\""],
                     ["-c", good, "--exp=POST", url, "--head", "If-Match: \"v1\""]):
            p = h.run_bin(args)
            h.eq(p.returncode, 0, "%r: exit code (stderr %r)" % (args, p.stderr))
            h.ok("route: default\n" in p.stdout and "idempotent: yes (header If-Match)\n"
                 in p.stdout, "%r: the header taken, POST idempotent: %r" % (args, p.stdout))
        body = write(os.path.join(tmp, "spelt-body.json"), "{}")
        p = h.run_bin(["-c", good, "--explain=PUT", url, "--body=" + body])
        h.eq(p.returncode, 0, "--body=FILE: exit code (stderr %r)" % p.stderr)
        missing = os.path.join(tmp, "spelt-missing.json")
        p = h.run_bin(["-c", good, "--explain=PUT", url, "--body=" + missing])
        h.eq(p.returncode, 1, "--body=MISSING: exit code (stderr %r)" % p.stderr)
        h.ok("--body %s: No such file" % missing in p.stderr, "names the file: %r" % p.stderr)
        ca_dir = os.path.join(tmp, "spelt-ca")
        p = h.run_bin(["--make-ca=" + ca_dir])
        h.eq(p.returncode, 0, "--make-ca=DIR: exit code (stderr %r)" % p.stderr)
        h.ok(os.path.exists(os.path.join(ca_dir, "ca.pem")), "--make-ca=DIR made ca.pem")

    @t.check("with those spellings, a value missing, a value given to an option that takes "
             "none, an unknown or an ambiguous option, a stray word, or an option given twice "
             "is a usage error (exit 1) naming it")
    def _():
        good = write(os.path.join(tmp, "spelt-twice.yaml"), GOOD.replace("@PORT@", "1"))
        for args, words in ((["--check", "--config"], ["missing or unexpected argument: --config"]),
                            (["--check", "-c"], ["missing or unexpected argument: -c"]),
                            (["--explain=GET"], ["missing or unexpected argument: --explain"]),
                            (["--check=yes"], ["--check=yes"]),
                            (["--version=1"], ["--version=1"]),
                            (["--nope=1"], ["unknown option: --nope=1"]),
                            (["-x"], ["unknown option: -x"]),
                            (["--c", good], ["ambiguous option: --c"]),
                            (["--check", "stray"], ["missing or unexpected argument: stray"]),
                            (["--config=" + good, "-c" + good, "--check"], ["-c given twice"]),
                            (["-c" + good, "--conf=" + good], ["--config given twice"]),
                            (["--config=", "--check"], ["--config: the file name is empty"]),
                            (["--check", "--", "stray"], ["missing or unexpected argument: stray"])):
            p = h.run_bin(args)
            h.eq((p.returncode, p.stdout), (1, ""), "%r: exit code and stdout (stderr %r)"
                 % (args, p.stderr))
            for word in words:
                h.ok(word in p.stderr, "%r: stderr should say %r: %r" % (args, word, p.stderr))
            h.ok("usage: retryproxy" in p.stderr, "%r: the usage follows: %r" % (args, p.stderr))

    @t.check("-c, --body or --make-ca with an empty name (an unset variable, -c \"$CONF\") "
             "exits 1 saying so, with the usage")
    def _():
        for args, said in ((["-c", "", "--check"], "-c: the file name is empty"),
                           (["--config", ""], "--config: the file name is empty"),
                           (["--explain", "GET", "http://127.0.0.1:9/", "--body="],
                            "--body: the file name is empty"),
                           (["--make-ca", ""], "--make-ca: the directory name is empty")):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "exit code of %r (stderr %r)" % (args, p.stderr))
            h.ok(said in p.stderr, "stderr for %r should say %r: %r" % (args, said, p.stderr))
            h.ok("usage: retryproxy" in p.stderr, "%r: the usage follows: %r" % (args, p.stderr))
            h.eq(p.stdout, "", "nothing on stdout for %r" % (args,))

    @t.check("-c with a missing file exits 1 naming the file")
    def _():
        missing = os.path.join(tmp, "does-not-exist.yaml")
        p = h.run_bin(["-c", missing])
        h.eq(p.returncode, 1, "exit code (stderr %r)" % p.stderr)
        h.ok("does-not-exist.yaml" in p.stderr, "stderr should name the file: %r" % p.stderr)

    @t.check("a listen port already in use exits 2 naming the cause")
    def _():
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            path = write(os.path.join(tmp, "taken.yaml"), GOOD.replace("@PORT@", str(port)))
            proc, err = start(["-c", path], tmp)
            try:
                code = proc.wait(15 * h.SLOW)
            except subprocess.TimeoutExpired:
                finish(proc)
                raise AssertionError("proxy kept running although 127.0.0.1:%d is taken" % port)
        h.eq(code, 2, "exit code (stderr %r)" % read(err))
        text = read(err)
        h.ok(re.search(r"in use|%d" % port, text, re.I),
             "stderr should say the address is in use or name it: %r" % text)
        h.ok(re.search(r"taken\.yaml:2:14: listen\[0\]\.address: cannot listen on 127\.0\.0\.1:%d"
                       % port, text),
             "stderr should name file:line:column and the key, as a config error does: %r" % text)

    @t.check("no -c in an empty directory: says on stderr which config it used")
    def _():
        empty = os.path.join(tmp, "empty-cwd")
        os.makedirs(empty)
        etc = "/etc/retryproxy/retryproxy.yaml"
        proc, err = start([], empty)
        try:
            h.wait_until(lambda: "config:" in read(err) or proc.poll() is not None, 10 * h.SLOW,
                         "a 'config:' line on stderr")
        finally:
            finish(proc)
        text = read(err)
        expected = etc if os.path.exists(etc) else "<embedded>"
        h.ok(re.search(r"config: .*" + re.escape(expected), text),
             "stderr should say 'config: %s': %r" % (expected, text))

    def found_conf(name, level, then):
        """No -c, in a directory holding conf/retryproxy.yaml at log.level
        level: the proxy must say it used that file; then(stderr, port)
        checks the rest while it runs; it must exit 0 on SIGTERM."""
        cwd = os.path.join(tmp, name)
        port = h.free_port()
        write(os.path.join(cwd, "conf", "retryproxy.yaml"),
              GOOD.replace("@PORT@", str(port)).replace("level: info", "level: " + level))
        proc, err = start_listening([], cwd, port)
        try:
            h.ok(proc.poll() is None, "proxy exited with %s: %r" % (proc.returncode, read(err)))
            text = read(err)
            h.ok(re.search(r"config: \S*conf/retryproxy\.yaml", text),
                 "stderr should say 'config: ...conf/retryproxy.yaml': %r" % text)
            then(text, port)
        finally:
            code = finish(proc)
        h.eq(code, 0, "exit code after SIGTERM")

    @t.check("no -c with ./conf/retryproxy.yaml present: uses it and listens where it says")
    def _():
        found_conf("with-conf", "info", lambda text, port: h.ok(
            re.search(r"listening on \S*127\.0\.0\.1:%d" % port, text),
            "stderr should say 'listening on 127.0.0.1:%d': %r" % (port, text)))

    @t.check("no -c, ./conf/retryproxy.yaml at log.level warn: still says which config it used")
    def _():
        # log.level still quiets what follows
        found_conf("quiet-conf", "warn", lambda text, port: h.ok(
            "listening on" not in text, "an info line at log.level warn: %r" % text))

    @t.check("no -c: a reload looks for the config again, and loads ./conf/retryproxy.yaml "
             "written since the start")
    def _():
        cwd = os.path.join(tmp, "later-conf")
        os.makedirs(cwd)
        proc, err = start([], cwd)
        try:
            # listening: its signal handlers are in place by then
            h.wait_until(lambda: "listening on" in read(err) or proc.poll() is not None,
                         10 * h.SLOW, "a 'listening on' line on stderr")
            h.ok(proc.poll() is None, "the proxy on its default config exited with %s: %r"
                 % (proc.returncode, read(err)))
            port = h.free_port()
            write(os.path.join(cwd, "conf", "retryproxy.yaml"), GOOD.replace("@PORT@", str(port)))
            proc.send_signal(signal.SIGHUP)
            h.wait_until(lambda: h.listens_on(proc.pid, port) or proc.poll() is not None,
                         15 * h.SLOW, "the proxy to listen on %d" % port)
            h.ok(h.listens_on(proc.pid, port), "not listening on %d: %r" % (port, read(err)))
            h.ok(re.search(r"reloading \S*conf/retryproxy\.yaml", read(err)),
                 "stderr should say 'reloading ...conf/retryproxy.yaml': %r" % read(err))
            # another file than the running one: a warning, naming both
            h.ok(re.search(r" warn .*SIGHUP: reloading \S*conf/retryproxy\.yaml in place of \S+",
                           read(err)),
                 "a warn line should say the reload reads another file: %r" % read(err))
            # the file gone at the next reload (a deploy renaming files into
            # place): the running config stays, not the embedded default
            os.rename(os.path.join(cwd, "conf", "retryproxy.yaml"),
                      os.path.join(cwd, "conf", "retryproxy.yaml.old"))
            proc.send_signal(signal.SIGHUP)
            h.wait_until(lambda: "keeping the running config" in read(err) or
                         proc.poll() is not None, 10 * h.SLOW, "the reload to be refused")
            h.ok(h.listens_on(proc.pid, port), "no longer listening on %d: %r" % (port, read(err)))
        finally:
            code = finish(proc)
        h.eq(code, 0, "exit code after SIGTERM")

    @t.check("no -c: a ./conf/retryproxy.yaml that fails to load is not taken for the running "
             "config: once it is gone, the next reload names the config that runs")
    def _():
        cwd = os.path.join(tmp, "failed-conf")
        os.makedirs(cwd)
        proc, err = start([], cwd)
        try:
            h.wait_until(lambda: "listening on" in read(err) or proc.poll() is not None,
                         10 * h.SLOW, "a 'listening on' line on stderr")
            bad = write(os.path.join(cwd, "conf", "retryproxy.yaml"), BAD)
            proc.send_signal(signal.SIGHUP)
            h.wait_until(lambda: "keeping the running config" in read(err) or
                         proc.poll() is not None, 10 * h.SLOW, "the bad config to be refused")
            os.remove(bad)
            before = len(read(err))
            proc.send_signal(signal.SIGHUP)
            h.wait_until(lambda: "reload" in read(err)[before:] or proc.poll() is not None,
                         10 * h.SLOW, "the second reload on stderr")
            time.sleep(0.2)
            after = read(err)[before:]
            h.ok("conf/retryproxy.yaml" not in after,
                 "the reload after the bad file went names it: %r" % after)
            h.ok(proc.poll() is None, "proxy exited: %r" % read(err))
        finally:
            code = finish(proc)
        h.eq(code, 0, "exit code after SIGTERM")

    @t.check("SIGINT stops a running proxy with exit 0")
    def _():
        port = h.free_port()
        path = write(os.path.join(tmp, "sigint.yaml"), GOOD.replace("@PORT@", str(port)))
        proc, err = start_listening(["-c", path], tmp, port)
        try:
            h.ok(proc.poll() is None, "proxy exited early: %r" % read(err))
            proc.send_signal(signal.SIGINT)
            code = proc.wait(20 * h.SLOW)
        finally:
            finish(proc)
        h.eq(code, 0, "exit code after SIGINT (stderr %r)" % read(err)[-2000:])
        h.ok(not any(m in read(err) for m in h._SANITIZER_MARKERS), "sanitizer report: %r" % read(err))


    @t.check("a SIGTERM that comes while the proxy exits (gdb holds it where it frees what it "
             "serves with) does not kill it: exit 0, 'stopped' logged")
    def _():
        gdb = shutil.which("gdb")
        h.ok(gdb is not None, "gdb is not installed (scripts/install-deps.sh installs it)")
        port = h.free_port()
        path = write(os.path.join(tmp, "exiting.yaml"), GOOD.replace("@PORT@", str(port)))
        out = os.path.join(tmp, "exiting.gdb")
        # at proxy_free the drain is over and the signal events are freed:
        # the proxy sends itself the SIGTERM there, then goes on
        with open(out, "w") as f:
            proc = subprocess.Popen(
                [gdb, "-q", "-batch", "-ex", "handle SIGTERM nostop noprint pass",
                 "-ex", "break proxy_free", "-ex", "run",
                 "-ex", "call (int)kill((int)getpid(), 15)", "-ex", "delete", "-ex", "continue",
                 "--args", h.BIN, "-c", path],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                # LeakSanitizer cannot run under ptrace: the leak check is
                # the other tests'
                env=h.clean_env({"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                                 ":detect_leaks=0"} if h.SANITIZED else None))
        try:
            h.wait_until(lambda: h.port_accepts(port), 30 * h.SLOW, "the proxy listening under gdb")
            inferior = [int(x) for x in subprocess.run(["pgrep", "-P", str(proc.pid)],
                                                       capture_output=True, text=True).stdout.split()]
            h.eq(len(inferior), 1, "the proxy under gdb")
            os.kill(inferior[0], signal.SIGTERM)
            proc.wait(60 * h.SLOW)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = read(out)
        h.ok("Breakpoint 1" in text, "gdb stopped the proxy in proxy_free: %r" % text[-2000:])
        h.ok("exited normally" in text and " info stopped" in text,
             "the proxy exited 0 after logging 'stopped': %r" % text[-2000:])

    @t.check("a SIGHUP while the config is still being read neither kills the proxy nor is "
             "lost: once it serves, it reads the config again")
    def _():
        # The config is a FIFO: the proxy waits in its read until the test
        # writes, so the signal lands while the config loads, deterministically.
        port, port2 = h.free_port(), h.free_port()
        fifo = os.path.join(tmp, "slow-config.yaml")
        os.mkfifo(fifo)
        proc, err = start(["-c", fifo], tmp)
        try:
            fd = fifo_writer(fifo, proc, err)
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)
            # The reload the signal asked for runs in the event loop, which
            # reads a regular file only (it must not wait on a FIFO): one on
            # another port takes the FIFO's name now, the proxy holding the
            # FIFO itself open, and shows that the reload ran.
            regular = fifo + ".new"
            write(regular, GOOD.replace("@PORT@", str(port2)))
            os.replace(regular, fifo)
            try:
                os.write(fd, GOOD.replace("@PORT@", str(port)).encode())
            except BrokenPipeError:
                pass  # the reader is gone: said below
            os.close(fd)
            h.wait_until(lambda: h.listens_on(proc.pid, port2) or proc.poll() is not None,
                         15 * h.SLOW, "the proxy to listen on %d after the reload" % port2)
            h.ok(proc.poll() is None, "the proxy died of the SIGHUP (exit %r, stderr %r)"
                 % (proc.returncode, read(err)[-2000:]))
            h.ok("listening on 127.0.0.1:%d " % port in read(err),
                 "the proxy started on the FIFO's config, port %d: %r" % (port, read(err)[-2000:]))
        finally:
            code = finish(proc)
        h.eq(code, 0, "exit code after SIGTERM (stderr %r)" % read(err)[-2000:])

    @t.check("a SIGTERM or SIGINT while the config is still being read (a FIFO nobody has "
             "written yet) is a clean shutdown: exit 0, at once")
    def _():
        for sig in (signal.SIGTERM, signal.SIGINT):
            fifo = os.path.join(tmp, "unwritten-config-%d.yaml" % sig)
            os.mkfifo(fifo)
            proc, err = start(["-c", fifo], tmp)
            fd = None
            try:
                # the proxy blocks in the FIFO's open until a writer comes
                fd = fifo_writer(fifo, proc, err)
                proc.send_signal(sig)
                try:
                    code = proc.wait(5 * h.SLOW)
                except subprocess.TimeoutExpired:
                    code = "still running"
            finally:
                if fd is not None:
                    os.close(fd)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            h.eq(code, 0, "exit code after %s while starting (stderr %r)"
                 % (signal.Signals(sig).name, read(err)[-2000:]))

    @t.check("SIGUSR1 and SIGUSR2 (other servers' log reopen and reload) neither kill the "
             "proxy nor stop it serving, while its config is read or once it serves")
    def _():
        port = h.free_port()
        fifo = os.path.join(tmp, "usr-config.yaml")
        os.mkfifo(fifo)
        proc, err = start(["-c", fifo], tmp)
        try:
            fd = fifo_writer(fifo, proc, err)
            proc.send_signal(signal.SIGUSR1)
            proc.send_signal(signal.SIGUSR2)
            time.sleep(0.2)
            try:
                os.write(fd, GOOD.replace("@PORT@", str(port)).encode())
            except BrokenPipeError:
                pass  # the reader is gone: said below
            os.close(fd)
            h.wait_until(lambda: h.listens_on(proc.pid, port) or proc.poll() is not None,
                         15 * h.SLOW, "the proxy to listen on %d" % port)
            h.ok(proc.poll() is None, "the proxy died of a SIGUSR while starting (exit %r, "
                 "stderr %r)" % (proc.returncode, read(err)[-2000:]))
            for sig in (signal.SIGUSR1, signal.SIGUSR2):
                proc.send_signal(sig)
                name = signal.Signals(sig).name
                h.wait_until(lambda: "%s: ignored" % name in read(err) or
                             proc.poll() is not None, 5 * h.SLOW, "the proxy to log %s" % name)
                h.ok(proc.poll() is None, "the proxy died of %s (exit %r, stderr %r)"
                     % (name, proc.returncode, read(err)[-2000:]))
            h.ok(h.listens_on(proc.pid, port), "still listening on %d" % port)
        finally:
            code = finish(proc)
        h.eq(code, 0, "exit code after SIGTERM (stderr %r)" % read(err)[-2000:])

    @t.check("a log message carrying a newline and a byte that is not UTF-8 stays one line, "
             "and one JSON object in format json")
    def _():
        # the start line names the config's path, and a path may hold any byte
        odd_dir = os.path.join(os.fsencode(tmp), b"caf\xe9\nnot a log line")
        os.makedirs(odd_dir, exist_ok=True)
        for fmt in ("text", "json"):
            cfg = os.path.join(odd_dir, fmt.encode() + b".yaml")
            port = h.free_port()
            with open(cfg, "w") as f:
                f.write("listen:\n  - address: 127.0.0.1:%d\nlog: { level: info, format: %s }\n"
                        % (port, fmt))
            proc, err = start_listening(["-c", cfg], tmp, port)
            h.eq(finish(proc), 0, "exit code (stderr %r)" % read(err)[-2000:])
            with open(err, "rb") as f:
                lines = f.read().splitlines()
            if fmt == "text":
                bad = [ln for ln in lines if not re.match(rb"\d{4}-\d\d-\d\dT", ln)]
                h.eq(bad, [], "text lines that do not start with a time stamp")
            else:
                bad = []
                for ln in lines:
                    try:
                        json.loads(ln.decode("utf-8"))
                    except ValueError as e:
                        bad.append((ln, str(e)))
                h.eq(bad, [], "JSON lines that do not parse")


h.run(scenario, __doc__)
