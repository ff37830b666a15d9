#!/usr/bin/env python3
"""Scenario: interception with CAs other than the one --make-ca makes.

Client: curl through the proxy (CONNECT, then TLS) to an https origin,
trusting only a root CA.
Origin: the test origin over TLS (certificate of the test CA, which the
proxy trusts through tls.ca_file).
Proxy: intercept.hosts [localhost]; the intercepting CA is, in turn:
- an intermediate CA signed by a root the client trusts, its ca_cert file
  holding the intermediate and then the root;
- a root CA made without subjectKeyIdentifier.
Must hold:
- with the intermediate, curl trusting only the root gets its 200: each
  leaf is sent with the intermediate behind it (a root is never sent);
- with the CA without subjectKeyIdentifier, --check says ok and curl
  trusting it gets its 200 (leaves name their issuer by name and serial).
"""

import os
import subprocess

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
log: { level: info, format: text }
tls:
  ca_file: @TESTCA@
intercept:
  hosts: [localhost]
  ca_cert: @CACERT@
  ca_key: @CAKEY@
limits:
  drain_timeout: 2s
"""


def openssl(directory, *args):
    p = subprocess.run(["openssl"] + list(args), cwd=directory, capture_output=True, text=True)
    h.eq(p.returncode, 0, "openssl %s: %s" % (" ".join(args[:3]), p.stderr))


def ec_key(directory, name):
    path = os.path.join(directory, name)
    openssl(directory, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", path)
    os.chmod(path, 0o600)
    return path


def root_ca(directory, name, *extra):
    """A self-signed CA: (certificate, key)."""
    key = ec_key(directory, name + "-key.pem")
    cert = os.path.join(directory, name + ".pem")
    openssl(directory, "req", "-x509", "-key", key, "-out", cert, "-days", "3",
            "-subj", "/CN=retryproxy test " + name,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", *extra)
    return cert, key


def intermediate_ca(directory, root, root_key):
    """A CA signed by root: (a file with it and then the root, its key)."""
    key = ec_key(directory, "intermediate-key.pem")
    csr = os.path.join(directory, "intermediate.csr")
    cert = os.path.join(directory, "intermediate.pem")
    ext = os.path.join(directory, "intermediate.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:TRUE,pathlen:0\n"
                "keyUsage=critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    openssl(directory, "req", "-new", "-key", key, "-out", csr,
            "-subj", "/CN=retryproxy test intermediate")
    openssl(directory, "x509", "-req", "-in", csr, "-CA", root, "-CAkey", root_key,
            "-set_serial", "7", "-days", "3", "-out", cert, "-extfile", ext)
    bundle = os.path.join(directory, "intermediate-and-root.pem")
    with open(bundle, "w") as out:
        for path in (cert, root):
            with open(path) as f:
                out.write(f.read())
    return bundle, key


def scenario(t):
    certs = t.certs()
    origin = t.origin(tls=(certs.server, certs.server_key))
    pki = os.path.join(t.tmp, "intercept-cas")
    os.makedirs(pki)
    root, root_key = root_ca(pki, "root")
    bundle, intermediate_key = intermediate_ca(pki, root, root_key)
    no_ski, no_ski_key = root_ca(pki, "no-ski", "-addext", "subjectKeyIdentifier=none")

    def fetch_through(ca_cert, ca_key, trusted, tag):
        proxy = t.proxy(CONFIG, TESTCA=certs.ca, CACERT=ca_cert, CAKEY=ca_key)
        r = h.curl("--cacert", trusted, "https://localhost:%d/echo?t=%s" % (origin.port, tag),
                   proxy=proxy.url)
        t.stop_proxy(proxy)
        return r

    @t.check("an intermediate CA: a client trusting only the root gets its 200")
    def _():
        r = fetch_through(bundle, intermediate_key, root, "intermediate")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%s)" % r.stderr[-300:])

    @t.check("a CA without subjectKeyIdentifier: --check ok, and a client trusting it gets its 200")
    def _():
        path = os.path.join(t.tmp, "no-ski.yaml")
        with open(path, "w") as f:
            f.write(CONFIG.replace("@TESTCA@", certs.ca).replace("@CACERT@", no_ski)
                    .replace("@CAKEY@", no_ski_key).replace("@PORT0@", str(h.free_port())))
        p = subprocess.run([h.BIN, "-c", path, "--check"], capture_output=True, text=True)
        h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "--check (%s)" % p.stderr)
        r = fetch_through(no_ski, no_ski_key, no_ski, "no-ski")
        h.eq((r.exit_code, r.status), (0, 200), "curl exit and status (%s)" % r.stderr[-300:])


h.run(scenario, __doc__, timeout=60)
