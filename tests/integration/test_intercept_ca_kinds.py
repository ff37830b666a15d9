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
  trusting it gets its 200 (leaves name their issuer by name and serial);
- with a CA that expires a few seconds after the proxy loaded it, a CONNECT
  to a listed host after that gets 502 and an error line names the expired
  CA (the leaf is made only when TLS starts, but whether the CA can issue
  one is checked before the 200).
"""

import os
import subprocess
import time

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


def short_lived_ca(directory, seconds):
    """A self-signed CA valid from an hour ago until seconds from now
    (openssl ca sets an exact end, req -x509 only whole days)."""
    key = ec_key(directory, "short-key.pem")
    csr = os.path.join(directory, "short.csr")
    cert = os.path.join(directory, "short.pem")
    conf = os.path.join(directory, "short.cnf")
    with open(conf, "w") as f:
        f.write("[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n"
                "serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n"
                "[p]\ncommonName = supplied\n[v3]\n"
                "basicConstraints = critical,CA:TRUE\n"
                "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n")
    open(os.path.join(directory, "index.txt"), "w").close()
    with open(os.path.join(directory, "serial"), "w") as f:
        f.write("1000\n")
    openssl(directory, "req", "-new", "-key", key, "-out", csr, "-subj", "/CN=short-lived")

    def stamp(t):
        return time.strftime("%y%m%d%H%M%SZ", time.gmtime(t))

    now = time.time()
    openssl(directory, "ca", "-batch", "-config", conf, "-selfsign", "-keyfile", key,
            "-in", csr, "-out", cert, "-extensions", "v3", "-notext",
            "-startdate", stamp(now - 3600), "-enddate", stamp(now + seconds))
    return cert, key, now + seconds


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

    @t.check("a CA that expires while the proxy runs: a CONNECT to a listed host gets 502, "
             "logged, not a 200 and a tunnel that closes at the client's ClientHello")
    def _():
        cert, key, ends = short_lived_ca(pki, 6)
        proxy = t.proxy(CONFIG, TESTCA=certs.ca, CACERT=cert, CAKEY=key)
        time.sleep(max(0, ends - time.time()) + 1.5)
        with h.RawConn(proxy.port()) as c:
            c.send(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                   % (origin.port, origin.port))
            h.eq(c.read_head().status, 502, "the CONNECT's answer")
        proxy.wait_log(r"error intercept: no certificate for localhost: the local CA "
                       r"certificate has expired")


h.run(scenario, __doc__, timeout=60)
