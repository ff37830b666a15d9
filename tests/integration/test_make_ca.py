#!/usr/bin/env python3
"""Scenario: `retryproxy --make-ca DIR` and a config that uses the CA it made.

Client: none but the command line, openssl and, at the end, curl to the
admin listener of a proxy started with intercept:.
Origin: none.
Must hold: --make-ca creates DIR (and its parents) with ca.pem mode 0644 and
ca-key.pem mode 0600, whatever the umask, and prints both paths and the
intercept: lines to add, never the key; for a DIR with a space and a quote
the paths in the text are one shell word each and the intercept: lines,
pasted into a config file, pass --check; `openssl x509 -text` shows an X.509
v3 CA (basicConstraints critical CA:TRUE, keyUsage critical Certificate
Sign) with the subject O=retryproxy, CN=retryproxy local CA (<host>);
`openssl pkey` reads an EC P-256 key whose public half is the
certificate's; a second --make-ca into the same directory, or one finding
only one of the two files, exits 1 naming the file and leaves the files
byte-identical; --make-ca without DIR or with other options is a usage
error; --help names it. A config whose intercept: points at the made files
(relative to the config file) passes --check; once the key is chmod 0644
--check exits 1 with `FILE:LINE:COL: intercept.ca_key: readable by group or
others (mode 0644): chmod 600 it` at the ca_key value; a key from another
CA fails at ca_key too; a CA made with openssl ca that has expired, or is
not valid until 2099, fails --check at ca_cert with the file and the date.
A running proxy with intercept: shows in /config the hosts and the two
paths, no key material, and the dump passes --check.
"""

import os
import re
import shlex
import stat
import subprocess

import harness as h

OPENSSL = "openssl"

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 1s
intercept:
  hosts: ["api.example.com", "*.googleapis.com"]
  ca_cert: @CERT@
  ca_key: @KEY@
"""

# Line 4 column 11 is the ca_key value.
CHECKED = """\
intercept:
  hosts: [api.example.com]
  ca_cert: ca/ca.pem
  ca_key: ca/ca-key.pem
"""


# openssl ca, to make self-signed CAs with chosen dates (openssl req -x509
# cannot date one in the past or the future).
DATED_CA_CNF = """\
[ ca ]
default_ca = dated
[ dated ]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any_name
x509_extensions = ca_ext
unique_subject = no
[ any_name ]
commonName = supplied
[ ca_ext ]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""


def openssl(*args):
    p = subprocess.run([OPENSSL] + list(args), capture_output=True, text=True, timeout=30)
    h.eq(p.returncode, 0, "openssl %s exit code (stderr %r)" % (" ".join(args), p.stderr))
    return p.stdout


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def make_ca(directory, umask=None):
    """--make-ca directory, under umask if given."""
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([h.BIN, "--make-ca", directory], capture_output=True, text=True,
                          timeout=20 * h.SLOW, env=h.clean_env(), preexec_fn=preexec)


def scenario(t):
    tmp = t.tmp
    ca_dir = os.path.join(tmp, "deep", "ca")
    cert = os.path.join(ca_dir, "ca.pem")
    key = os.path.join(ca_dir, "ca-key.pem")
    made = make_ca(ca_dir)

    @t.check("--make-ca DIR exits 0, makes DIR and its parents, prints the paths and intercept: lines")
    def _():
        h.eq(made.returncode, 0, "exit code (stderr %r)" % made.stderr)
        h.ok(os.path.isdir(ca_dir), "%s was not made" % ca_dir)
        for text in (cert, key, "intercept:", "ca_cert: " + cert, "ca_key: " + key, "hosts:"):
            h.ok(text in made.stdout, "stdout should have %r:\n%s" % (text, made.stdout))
        h.ok("PRIVATE KEY" not in made.stdout + made.stderr, "the key was printed")

    @t.check("a DIR with a space and a quote: the printed intercept: lines, pasted into a config, "
             "pass --check; the paths in the text are one shell word each")
    def _():
        spaced = os.path.join(tmp, "my CA's dir")
        spaced_cert = os.path.join(spaced, "ca.pem")
        p = make_ca(spaced)
        h.eq(p.returncode, 0, "exit code (stderr %r)" % p.stderr)
        lines = p.stdout.splitlines()
        start = lines.index("intercept:")
        snippet = "\n".join(lines[start:start + 4]) + "\n"
        h.ok(snippet.splitlines()[-1].startswith("  ca_key: "), "the intercept: lines:\n" + snippet)
        conf = os.path.join(tmp, "spaced.yaml")
        with open(conf, "w") as f:
            f.write(snippet)
        c = h.run_bin(["--check", "-c", conf])
        h.eq((c.returncode, c.stdout.strip()), (0, "ok"),
             "--check of\n%s(stderr %r)" % (snippet, c.stderr))
        for pattern in (r"certificate: (.*) \(mode 0644\)", r"trust (.*): curl --cacert"):
            m = re.search(pattern, p.stdout)
            h.ok(m, "stdout should match %r:\n%s" % (pattern, p.stdout))
            h.eq(shlex.split(m.group(1)), [spaced_cert], "the path in %r" % m.group(0))
        m = re.search(r"private key: (.*) \(mode 0600\)", p.stdout)
        h.eq(shlex.split(m.group(1)), [os.path.join(spaced, "ca-key.pem")], "the key's path")

    @t.check("ca.pem is mode 0644 and ca-key.pem 0600")
    def _():
        h.eq(oct(mode(cert)), oct(0o644), "ca.pem mode")
        h.eq(oct(mode(key)), oct(0o600), "ca-key.pem mode")

    @t.check("the modes hold under umask 077 and umask 000 too")
    def _():
        for umask in (0o077, 0o000):
            d = os.path.join(tmp, "umask-%03o" % umask)
            p = make_ca(d, umask)
            h.eq(p.returncode, 0, "exit code under umask %03o (stderr %r)" % (umask, p.stderr))
            h.eq(oct(mode(os.path.join(d, "ca.pem"))), oct(0o644), "ca.pem mode, umask %03o" % umask)
            h.eq(oct(mode(os.path.join(d, "ca-key.pem"))), oct(0o600),
                 "ca-key.pem mode, umask %03o" % umask)

    @t.check("openssl x509 -text: v3, CA:TRUE critical, Certificate Sign critical, the subject")
    def _():
        text = openssl("x509", "-in", cert, "-noout", "-text")
        h.ok(re.search(r"Version: 3 \(0x2\)", text), "not X.509 v3:\n" + text)
        h.ok(re.search(r"X509v3 Basic Constraints: critical\n\s+CA:TRUE", text),
             "basicConstraints should be critical CA:TRUE:\n" + text)
        h.ok(re.search(r"X509v3 Key Usage: critical\n\s+Certificate Sign, CRL Sign", text),
             "keyUsage should be critical Certificate Sign, CRL Sign:\n" + text)
        h.ok("X509v3 Subject Key Identifier" in text, "no subjectKeyIdentifier:\n" + text)
        subject = openssl("x509", "-in", cert, "-noout", "-subject", "-nameopt", "RFC2253")
        h.ok(re.fullmatch(r"subject=CN=retryproxy local CA \([^)]+\),O=retryproxy\n", subject),
             "subject %r" % subject)
        issuer = openssl("x509", "-in", cert, "-noout", "-issuer", "-nameopt", "RFC2253")
        h.eq(issuer.split("=", 1)[1], subject.split("=", 1)[1], "issuer (self-signed)")
        h.ok("ecdsa-with-SHA256" in text, "not signed with ECDSA SHA-256:\n" + text)

    @t.check("openssl verifies the certificate against itself as a CA")
    def _():
        out = openssl("verify", "-x509_strict", "-CAfile", cert, cert)
        h.ok(out.strip().endswith("OK"), "openssl verify: %r" % out)

    @t.check("openssl pkey reads an EC P-256 key, and it is the certificate's")
    def _():
        text = openssl("pkey", "-in", key, "-noout", "-text")
        h.ok("ASN1 OID: prime256v1" in text or "NIST CURVE: P-256" in text,
             "not a P-256 key:\n" + re.sub(r"priv:(\n\s+[0-9a-f:]+)+", "priv: ...", text))
        h.eq(openssl("x509", "-in", cert, "-noout", "-pubkey"), openssl("pkey", "-in", key, "-pubout"),
             "the certificate's public key vs the key's")

    before = {p: h.read_file(p, "rb") for p in (cert, key)}

    @t.check("a second --make-ca into the same directory exits 1 and changes nothing")
    def _():
        p = make_ca(ca_dir)
        h.eq(p.returncode, 1, "exit code (stdout %r)" % p.stdout)
        h.ok("already exists" in p.stderr and "ca.pem" in p.stderr,
             "stderr should say which file exists: %r" % p.stderr)
        for path, data in before.items():
            h.eq(h.read_file(path, "rb"), data, "%s after the refusal" % path)
        h.eq(sorted(os.listdir(ca_dir)), ["ca-key.pem", "ca.pem"], "files in the directory")

    @t.check("--make-ca finding only one of the files exits 1 and makes not the other")
    def _():
        for present in ("ca.pem", "ca-key.pem"):
            d = os.path.join(tmp, "only-" + present)
            os.makedirs(d)
            with open(os.path.join(d, present), "w") as f:
                f.write("mine\n")
            p = make_ca(d)
            h.eq(p.returncode, 1, "exit code with only %s (stdout %r)" % (present, p.stdout))
            h.ok(present + " already exists" in p.stderr, "stderr should name %s: %r" % (present, p.stderr))
            h.eq(os.listdir(d), [present], "files beside %s" % present)
            h.eq(h.read_file(os.path.join(d, present)), "mine\n", present + " content")

    @t.check("--make-ca without DIR, or with -c or --check, is a usage error (exit 1)")
    def _():
        for args in (["--make-ca"], ["--make-ca", os.path.join(tmp, "x"), "--check"],
                     ["-c", "/dev/null", "--make-ca", os.path.join(tmp, "y")]):
            p = h.run_bin(args)
            h.eq(p.returncode, 1, "%s exit code (stdout %r)" % (args, p.stdout))
            h.ok("--make-ca" in p.stderr, "%s: stderr should name --make-ca: %r" % (args, p.stderr))
        h.ok(not os.path.exists(os.path.join(tmp, "x")) and not os.path.exists(os.path.join(tmp, "y")),
             "a refused --make-ca made its directory")

    @t.check("--help names --make-ca")
    def _():
        p = h.run_bin(["--help"])
        h.eq(p.returncode, 0, "exit code")
        h.ok("--make-ca DIR" in p.stdout, "--help: %r" % p.stdout)

    conf_dir = os.path.join(tmp, "conf")
    os.makedirs(conf_dir)
    conf = os.path.join(conf_dir, "retryproxy.yaml")
    with open(conf, "w") as f:
        f.write(CHECKED)
    conf_ca = os.path.join(conf_dir, "ca")
    made_conf_ca = make_ca(conf_ca)

    @t.check("a config with intercept: naming the made files, relative to it, passes --check")
    def _():
        h.eq(made_conf_ca.returncode, 0, "--make-ca exit code (stderr %r)" % made_conf_ca.stderr)
        p = h.run_bin(["--check", "-c", conf], cwd="/")
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "exit code and stdout (stderr %r)" % p.stderr)

    @t.check("--check fails at the ca_key value once the key is chmod 0644")
    def _():
        os.chmod(os.path.join(conf_ca, "ca-key.pem"), 0o644)
        try:
            p = h.run_bin(["--check", "-c", conf])
        finally:
            os.chmod(os.path.join(conf_ca, "ca-key.pem"), 0o600)
        h.eq(p.returncode, 1, "exit code (stdout %r)" % p.stdout)
        want = "%s:4:11: intercept.ca_key: readable by group or others (mode 0644): chmod 600 it" % conf
        h.ok(want in p.stderr.splitlines(), "stderr should have the line %r: %r" % (want, p.stderr))
        h.ok("PRIVATE KEY" not in p.stderr, "the key was printed")

    @t.check("--check fails at ca_key for another CA's key, and at ca_cert for a missing file")
    def _():
        path = os.path.join(conf_dir, "other.yaml")
        with open(path, "w") as f:
            f.write(CHECKED.replace("ca/ca-key.pem", key))
        p = h.run_bin(["--check", "-c", path])
        h.eq(p.returncode, 1, "exit code (stdout %r)" % p.stdout)
        h.ok(re.search(r"^%s:4:11: intercept\.ca_key: does not match the certificate$" % re.escape(path),
                       p.stderr, re.M), "stderr: %r" % p.stderr)
        with open(path, "w") as f:
            f.write(CHECKED.replace("ca/ca.pem", "ca/nothing.pem"))
        p = h.run_bin(["--check", "-c", path])
        h.eq(p.returncode, 1, "exit code (stdout %r)" % p.stdout)
        h.ok(re.search(r"^%s:3:12: intercept\.ca_cert: cannot read .*nothing\.pem" % re.escape(path),
                       p.stderr, re.M), "stderr: %r" % p.stderr)

    @t.check("--check fails at ca_cert, naming the file and the date, for a CA that has expired "
             "or is not valid yet (made with openssl ca)")
    def _():
        pki = os.path.join(tmp, "dated")
        os.makedirs(pki)
        with open(os.path.join(pki, "ca.cnf"), "w") as f:
            f.write(DATED_CA_CNF)
        for name, start, end, words in (
                ("expired", "20200101000000Z", "20200201000000Z", "expired on 2020-02-01 00:00:00 UTC"),
                ("future", "20990101000000Z", "20991231000000Z",
                 "is not valid before 2099-01-01 00:00:00 UTC")):
            with open(os.path.join(pki, "index.txt"), "w") as f:
                f.write("")
            with open(os.path.join(pki, "serial"), "w") as f:
                f.write("01\n")
            dated_cert = os.path.join(pki, name + ".pem")
            dated_key = os.path.join(pki, name + "-key.pem")
            csr = os.path.join(pki, name + ".csr")
            p = subprocess.run([OPENSSL, "req", "-new", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dated_key,
                                "-out", csr, "-subj", "/CN=dated CA"],
                               cwd=pki, capture_output=True, text=True, timeout=30)
            h.eq(p.returncode, 0, "openssl req (%s)" % p.stderr)
            os.chmod(dated_key, 0o600)
            p = subprocess.run([OPENSSL, "ca", "-batch", "-config", "ca.cnf", "-selfsign",
                                "-keyfile", dated_key, "-in", csr, "-out", dated_cert, "-notext",
                                "-startdate", start, "-enddate", end],
                               cwd=pki, capture_output=True, text=True, timeout=30)
            h.eq(p.returncode, 0, "openssl ca (%s)" % p.stderr)
            path = os.path.join(pki, name + ".yaml")
            with open(path, "w") as f:
                f.write(CHECKED.replace("ca/ca.pem", dated_cert).replace("ca/ca-key.pem", dated_key))
            p = h.run_bin(["--check", "-c", path])
            h.eq(p.returncode, 1, "%s: exit code (stdout %r)" % (name, p.stdout))
            want = "%s:3:12: intercept.ca_cert: the CA certificate %s %s" % (path, dated_cert, words)
            h.ok(any(l.startswith(want) for l in p.stderr.splitlines()),
                 "%s: stderr should have a line starting %r: %r" % (name, want, p.stderr))

    proxy = t.proxy(CONFIG, CERT=cert, KEY=key)
    admin = "http://127.0.0.1:%d" % proxy.port(1)

    @t.check("/config of a running proxy with intercept: shows the hosts and paths, no key")
    def _():
        r = h.curl(admin + "/config", check=True)
        h.eq(r.status, 200, "status")
        text = r.body.decode()
        block = "intercept:\n  hosts: [api.example.com, '*.googleapis.com']\n  ca_cert: %s\n  ca_key: %s\n" % (cert, key)
        h.ok(block in text, "/config should have\n%s\nin:\n%s" % (block, text))
        h.ok("PRIVATE KEY" not in text, "/config shows the key:\n" + text)
        secret = "".join(l for l in before[key].decode().splitlines() if not l.startswith("-----"))
        h.ok(secret[10:40] not in text, "/config shows key material")
        path = os.path.join(tmp, "dumped.yaml")
        with open(path, "w") as f:
            f.write(text)
        p = h.run_bin(["--check", "-c", path])
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "--check on the dump (stderr %r)" % p.stderr)


h.run(scenario, __doc__)
