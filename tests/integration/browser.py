"""Headless Chromium for the integration tests (standard library only).

    dom = browser.dump_dom(url)                       # the DOM after load, as HTML
                                                      # (fails if the page did not load)
    browser.screenshot(url, path, 1200, 800)          # a PNG of the viewport
    facts = browser.evaluate(url, 390, 844, "JS")     # a JS expression's JSON value,
                                                      # the page laid out at that size
    width, height, colours = browser.png_summary(path)

Every run gets a fresh profile in a temp dir and the flags that keep
Chromium off the network: no first-run, sync, component updates,
background requests or DNS; host names other than loopback resolve to
nothing. Chromium comes from Debian's `chromium` package
(scripts/install-deps.sh installs it); without it these functions fail.
"""

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
import zlib

import harness as h

CHROMIUM = "/usr/bin/chromium"

# Start-up of a browser on a loaded machine (and under the sanitizer run's
# other load) can take many seconds.
TIMEOUT = 90 * h.SLOW

# Keep Chromium quiet and local: nothing it does on its own may leave the
# machine, and any host name but loopback's fails to resolve.
_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--metrics-recording-only",
    "--disable-default-apps", "--disable-extensions", "--disable-breakpad",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection",
    "--no-pings", "--mute-audio", "--hide-scrollbars", "--password-store=basic",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,"
    "CertificateTransparencyComponentUpdater,DialMediaRouteProvider",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


def _profile():
    return tempfile.mkdtemp(prefix="chromium-", dir=h.scratch_dir())


def _env(profile):
    # HOME too: Chromium writes caches and crash dirs under it
    return h.clean_env({"HOME": profile, "XDG_CONFIG_HOME": profile, "XDG_CACHE_HOME": profile})


def _run(args):
    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError("%s is missing: scripts/install-deps.sh installs Debian's "
                             "chromium package" % CHROMIUM)
    profile = _profile()
    try:
        p = subprocess.run([CHROMIUM] + _FLAGS + ["--user-data-dir=" + profile] + args,
                           capture_output=True, timeout=TIMEOUT, env=_env(profile),
                           stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if p.returncode != 0:
        raise AssertionError("chromium %s exited %d:\n%s" % (" ".join(args), p.returncode,
                                                              p.stderr.decode("utf-8", "replace")[-3000:]))
    return p


def dump_dom(url):
    """The page's DOM once loaded, serialized as HTML (--dump-dom). A page
    that did not load fails here: Chromium then prints an empty document,
    or none, and still exits 0."""
    p = _run(["--dump-dom", url])
    dom = p.stdout.decode("utf-8")
    if "</html>" not in dom or "<body></body>" in dom.replace("\n", ""):
        raise AssertionError("chromium --dump-dom %s gave no page (navigation failed?); "
                             "stdout %r, stderr:\n%s"
                             % (url, dom[:500], p.stderr.decode("utf-8", "replace")[-3000:]))
    return dom


def screenshot(url, path, width, height):
    """Write a PNG of the page in a width x height window to path."""
    _run(["--screenshot=" + path, "--window-size=%d,%d" % (width, height), url])
    if not os.path.isfile(path):
        raise AssertionError("chromium wrote no screenshot at %s" % path)


class _Pipe:
    """The DevTools protocol over --remote-debugging-pipe: JSON messages,
    each ended by a NUL byte, written to the browser's fd 3 and read from
    its fd 4."""

    def __init__(self):
        self.profile = _profile()
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # The browser expects the pipe at fds 3 and 4 exactly; bash puts it
        # there (dash takes one-digit fds only). Its ends are moved above 9
        # first, so that one redirection cannot overwrite the source of the
        # other.
        to_browser_r, from_browser_w = (self._above_9(to_browser_r),
                                        self._above_9(from_browser_w))
        shell = 'exec "$0" "$@" 3<&%d 4>&%d' % (to_browser_r, from_browser_w)
        self.stderr_path = os.path.join(self.profile, "stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                ["/bin/bash", "-c", shell, CHROMIUM] + _FLAGS +
                ["--user-data-dir=" + self.profile, "--remote-debugging-pipe", "about:blank"],
                pass_fds=(to_browser_r, from_browser_w), env=_env(self.profile),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buf = b""
        self.next_id = 0
        self.events = []

    @staticmethod
    def _above_9(fd):
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return moved

    def _stderr_tail(self):
        try:
            return h.read_file(self.stderr_path, "rb").decode("utf-8", "replace")[-3000:]
        except OSError:
            return ""

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("chromium did not answer on the DevTools pipe in time:\n"
                                     + self._stderr_tail())
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                data = os.read(self.from_browser, 65536)
                if not data:
                    raise AssertionError("chromium closed the DevTools pipe (exit %s):\n%s"
                                         % (self.proc.poll(), self._stderr_tail()))
                self.buf += data
        message, self.buf = self.buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, deadline=None):
        """Send one command and return its result (events seen meanwhile are kept)."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = deadline or time.monotonic() + TIMEOUT
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError("DevTools %s failed: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method, session, deadline):
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def close(self):
        try:
            self.call("Browser.close", deadline=time.monotonic() + 10)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


def evaluate(url, width, height, expression):
    """Load url in a width x height viewport (a phone's, with its viewport
    meta honoured, below 600 px) and return the value of the JS
    expression once the page has loaded."""
    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError("%s is missing: scripts/install-deps.sh installs Debian's "
                             "chromium package" % CHROMIUM)
    browser = _Pipe()
    try:
        deadline = time.monotonic() + TIMEOUT
        target = browser.call("Target.createTarget", {"url": "about:blank"},
                              deadline=deadline)["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                               deadline=deadline)["sessionId"]
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1,
                      "mobile": width < 600}, session, deadline)
        browser.call("Page.enable", session=session, deadline=deadline)
        browser.call("Page.navigate", {"url": url}, session, deadline)
        browser.wait_event("Page.loadEventFired", session, deadline)
        result = browser.call("Runtime.evaluate",
                              {"expression": expression, "returnByValue": True},
                              session, deadline)
        if "exceptionDetails" in result:
            raise AssertionError("the expression threw: %s" % result["exceptionDetails"])
        return result["result"].get("value")
    finally:
        browser.close()


def _unfilter(data, rows, stride, bpp):
    """The scanlines of a non-interlaced PNG's inflated data, filters undone."""
    out = []
    prev = bytearray(stride)
    pos = 0
    for _ in range(rows):
        kind = data[pos]
        line = bytearray(data[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        if kind == 2:
            line = bytearray((x + y) & 0xFF for x, y in zip(line, prev))
        elif kind != 0:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                if kind == 1:
                    line[i] = (line[i] + a) & 0xFF
                elif kind == 3:
                    line[i] = (line[i] + ((a + prev[i]) >> 1)) & 0xFF
                else:
                    b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else
                                          b if pb <= pc else c)) & 0xFF
        out.append(line)
        prev = line
    return out


def png_summary(path, step=4):
    """(width, height, distinct colours) of an 8-bit RGB or RGBA PNG; the
    colours are counted on every step-th pixel of every step-th row."""
    data = h.read_file(path, "rb")
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("%s is not a PNG" % path)
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise AssertionError("unexpected PNG format depth=%d colour=%d interlace=%d"
                             % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    rows = _unfilter(zlib.decompress(idat), height, width * bpp, bpp)
    colours = set()
    for row in rows[::step]:
        for x in range(0, width * bpp, bpp * step):
            colours.add(bytes(row[x:x + bpp]))
    return width, height, len(colours)
