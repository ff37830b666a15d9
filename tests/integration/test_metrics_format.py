#!/usr/bin/env python3
"""Scenario: /metrics is valid Prometheus text exposition (format 0.0.4).

Client: through a sidecar listener, a GET that is retried once (503, then
200), a GET whose upstream refuses connections (502 at once: the route
allows one attempt) and a plain GET; then curl GET /metrics on the admin
listener.
Origin: /fmt/retry answers 503 then 200; /fmt/ok answers 200; the route
"dead" points at a closed port.
Must hold: the scrape passes a strict checker written here: every family
has # HELP and # TYPE before its samples and its samples together; metric
and label names match the format's syntax, label values use only the \\\\,
\\" and \\n escapes, values are numbers (NaN and +-Inf allowed), no series
appears twice, counters are not negative; each histogram has _bucket
samples with an le label in increasing order, counts non-decreasing, ending
in le="+Inf" equal to _count, and a _sum and _count. The checker rejects a
set of known-bad texts first, so that a pass means something. If promtool
is installed, `promtool check metrics` must accept the scrape too.
"""

import math
import re
import shutil
import subprocess

import harness as h

CONFIG = """\
listen:
  - address: 127.0.0.1:@PORT0@
    upstream: http://127.0.0.1:@ORIGIN@
admin: 127.0.0.1:@PORT1@
limits:
  drain_timeout: 2s
  connect_timeout: 1s
defaults:
  retry:
    max_attempts: 3
    initial_backoff: 50ms
    jitter: 0s
routes:
  - name: dead
    match: { path_prefix: /dead/ }
    upstream: http://127.0.0.1:@CLOSED@
    retry: { max_attempts: 1 }
"""

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_value(text):
    """A sample value as Go's ParseFloat takes it in the format; ValueError
    otherwise."""
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf"))
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise ValueError("not a number: %r" % text)
    return float(text)


def parse_sample(line):
    """(name, [(label, value)], value) of a sample line; ValueError when the
    syntax is wrong."""
    m = METRIC_NAME.match(line)
    if not m:
        raise ValueError("bad metric name")
    name, i, labels = m.group(0), m.end(), []
    if i < len(line) and line[i] == "{":
        i += 1
        while True:
            if line[i] == "}":
                i += 1
                break
            lm = LABEL_NAME.match(line, i)
            if not lm:
                raise ValueError("bad label name at column %d" % (i + 1))
            i = lm.end()
            if line[i:i + 2] != '="':
                raise ValueError("expected =\" after label %s" % lm.group(0))
            i += 2
            val = []
            while True:
                if i >= len(line):
                    raise ValueError("unterminated label value")
                c = line[i]
                if c == "\\":
                    esc = line[i + 1:i + 2]
                    if esc not in ("\\", '"', "n"):
                        raise ValueError("bad escape \\%s in label value" % esc)
                    val.append({"\\": "\\", '"': '"', "n": "\n"}[esc])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                elif c == "\n":
                    raise ValueError("raw newline in label value")
                else:
                    val.append(c)
                    i += 1
            labels.append((lm.group(0), "".join(val)))
            if line[i] == ",":
                i += 1
            elif line[i] != "}":
                raise ValueError("expected , or } after a label")
    if line[i:i + 1] != " ":
        raise ValueError("expected one space before the value")
    parts = line[i + 1:].split(" ")
    if len(parts) not in (1, 2) or "" in parts:
        raise ValueError("expected a value and an optional timestamp")
    value = parse_value(parts[0])
    if len(parts) == 2 and not re.fullmatch(r"-?\d+", parts[1]):
        raise ValueError("bad timestamp %r" % parts[1])
    names = [n for n, _ in labels]
    if len(set(names)) != len(names):
        raise ValueError("a label name appears twice")
    if any(n.startswith("__") for n in names):
        raise ValueError("label names starting with __ are reserved")
    return name, labels, value


def family_of(name, types):
    """The family a sample name belongs to: a histogram's _bucket, _sum and
    _count go to the histogram."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
            return base
    return name


def check_exposition(text):
    """Every problem found in an exposition, as 'line N: ...' strings."""
    problems = []
    if text and not text.endswith("\n"):
        problems.append("the text does not end with a newline")
    helps, types, seen_series = {}, {}, set()
    finished, current = set(), None
    samples = {}   # family -> [(name, labels, value, lineno)]
    for n, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        if line == "":
            problems.append("line %d: empty line" % n)
            continue
        if line.startswith("#"):
            m = re.match(r"# (HELP|TYPE) (\S+)(?: (.*))?$", line)
            if not m:
                continue   # a plain comment
            kind, name, rest = m.group(1), m.group(2), m.group(3) or ""
            if not METRIC_NAME.fullmatch(name):
                problems.append("line %d: bad metric name %r in %s" % (n, name, kind))
            if kind == "HELP":
                if name in helps:
                    problems.append("line %d: second HELP for %s" % (n, name))
                if re.search(r"\\[^\\n]", rest):
                    problems.append("line %d: HELP may escape only \\\\ and \\n" % n)
                helps[name] = n
            else:
                if name in types:
                    problems.append("line %d: second TYPE for %s" % (n, name))
                if rest not in TYPES:
                    problems.append("line %d: unknown type %r" % (n, rest))
                if name in samples:
                    problems.append("line %d: TYPE for %s after its samples" % (n, name))
                types[name] = rest
            if name != current:
                if current is not None:
                    finished.add(current)
                if name in finished:
                    problems.append("line %d: %s comes back after other families" % (n, name))
                current = name
            continue
        try:
            name, labels, value = parse_sample(line)
        except (ValueError, IndexError) as e:
            problems.append("line %d: %s: %r" % (n, e, line))
            continue
        fam = family_of(name, types)
        if fam != current:
            if current is not None:
                finished.add(current)
            if fam in finished:
                problems.append("line %d: samples of %s are not together" % (n, fam))
            current = fam
        if fam not in types:
            problems.append("line %d: sample of %s before (or without) its TYPE" % (n, fam))
        if fam not in helps:
            problems.append("line %d: sample of %s before (or without) its HELP" % (n, fam))
        key = (name, tuple(sorted(labels)))
        if key in seen_series:
            problems.append("line %d: series %s%r appears twice" % (n, name, labels))
        seen_series.add(key)
        if types.get(fam) == "counter" and (value < 0 or math.isnan(value)):
            problems.append("line %d: counter %s is %r" % (n, name, value))
        samples.setdefault(fam, []).append((name, labels, value, n))
    for fam, kind in types.items():
        if kind == "histogram":
            problems += check_histogram(fam, samples.get(fam, []))
    return problems


def check_histogram(fam, rows):
    """Buckets per label set: le increasing, counts non-decreasing, +Inf last
    and equal to _count; _sum and _count present."""
    problems = []
    groups = {}
    for name, labels, value, n in rows:
        rest = tuple(sorted((k, v) for k, v in labels if k != "le"))
        g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
        if name == fam + "_bucket":
            le = dict(labels).get("le")
            if le is None:
                problems.append("line %d: %s_bucket without le" % (n, fam))
                continue
            try:
                g["buckets"].append((parse_value(le), value, n))
            except ValueError:
                problems.append("line %d: le=%r is not a number" % (n, le))
        elif name == fam + "_sum":
            g["sum"] = value
        elif name == fam + "_count":
            g["count"] = value
        else:
            problems.append("line %d: %s is not part of histogram %s" % (n, name, fam))
    if not groups:
        problems.append("histogram %s has no samples" % fam)
    for rest, g in groups.items():
        what = "%s%s" % (fam, dict(rest) if rest else "")
        if g["sum"] is None or g["count"] is None:
            problems.append("%s: _sum or _count missing" % what)
        b = g["buckets"]
        if not b or b[-1][0] != math.inf:
            problems.append("%s: the last bucket is not le=\"+Inf\"" % what)
        for (le1, c1, _), (le2, c2, n2) in zip(b, b[1:]):
            if le2 <= le1:
                problems.append("line %d: %s: le not increasing (%r after %r)" % (n2, what, le2, le1))
            if c2 < c1:
                problems.append("line %d: %s: bucket counts go down (%r after %r)" % (n2, what, c2, c1))
        if b and g["count"] is not None and b[-1][1] != g["count"]:
            problems.append("%s: +Inf bucket %r differs from _count %r" % (what, b[-1][1], g["count"]))
    return problems


GOOD_SNIPPET = """\
# HELP x_total A counter.
# TYPE x_total counter
x_total{a="q\\"uo\\\\te\\n"} 3
# HELP h A histogram.
# TYPE h histogram
h_bucket{le="0.5"} 1
h_bucket{le="+Inf"} 2
h_sum 0.7
h_count 2
"""

# Each must give at least one problem.
BAD_SNIPPETS = {
    "sample before TYPE": "# HELP a A.\na 1\n# TYPE a gauge\n",
    "no HELP": "# TYPE a gauge\na 1\n",
    "bad metric name": "# HELP 1a A.\n# TYPE 1a gauge\n1a 1\n",
    "bad label name": "# HELP a A.\n# TYPE a gauge\na{1x=\"v\"} 1\n",
    "bad escape": "# HELP a A.\n# TYPE a gauge\na{x=\"\\t\"} 1\n",
    "unquoted label": "# HELP a A.\n# TYPE a gauge\na{x=v} 1\n",
    "value not a number": "# HELP a A.\n# TYPE a gauge\na one\n",
    "duplicate series": "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",
    "family split": "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n# HELP b B.\n# TYPE b gauge\nb 1\na{x=\"2\"} 1\n",
    "negative counter": "# HELP a A.\n# TYPE a counter\na -1\n",
    "buckets going down": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
                          "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
    "no +Inf bucket": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n",
    "+Inf differs from count": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
    "no _count": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\n",
    "no final newline": "# HELP a A.\n# TYPE a gauge\na 1",
    "two spaces": "# HELP a A.\n# TYPE a gauge\na  1\n",
}


def scenario(t):
    origin = t.origin()
    proxy = t.proxy(CONFIG, ORIGIN=origin.port, CLOSED=h.closed_port())
    scraped = {}

    @t.check("the checker accepts a good exposition and rejects each known-bad one")
    def _():
        h.eq(check_exposition(GOOD_SNIPPET), [], "problems in the good snippet")
        for name, text in BAD_SNIPPETS.items():
            h.ok(check_exposition(text), "the checker found nothing wrong with %r" % name)

    @t.check("traffic: a retried GET (503, 200), a 502 from a refused upstream, a plain GET")
    def _():
        origin.script("/fmt/retry", [503, 200])
        r = h.fetch(proxy.port(0), "GET", "/fmt/retry", "app.example")
        h.eq((r.status, r.header("Retry-Attempts")), (200, "2"), "retried GET")
        r = h.fetch(proxy.port(0), "GET", "/dead/x", "app.example")
        h.eq(r.status, 502, "GET to the refused upstream")
        r = h.fetch(proxy.port(0), "GET", "/status/200", "app.example")
        h.eq(r.status, 200, "plain GET")

    @t.check("the scrape passes the strict format checker")
    def _():
        r = h.curl("http://127.0.0.1:%d/metrics" % proxy.port(1), check=True)
        h.eq(r.status, 200, "status")
        text = r.body.decode("utf-8")
        scraped["text"] = text
        problems = check_exposition(text)
        h.eq(problems, [], "format problems (scrape below)\n" + text)
        for needle in ('retryproxy_requests_total{route="dead",code="502"} 1',
                       'retryproxy_retries_total{route="default",cause="status"} 1',
                       "retryproxy_request_duration_seconds_bucket{le=\"+Inf\"} 3",
                       "retryproxy_tries_per_request_count 3"):
            h.ok(needle in text, "%r missing from the scrape:\n%s" % (needle, text))

    promtool = shutil.which("promtool")
    if promtool is None:
        t.skip("promtool check metrics", "promtool is not installed; the checker above stands in")
    else:
        @t.check("promtool check metrics accepts the scrape")
        def _():
            h.ok("text" in scraped, "no scrape to check")
            p = subprocess.run([promtool, "check", "metrics"], input=scraped["text"].encode(),
                               capture_output=True, timeout=30)
            h.eq(p.returncode, 0, "promtool exit code (%s)" % (p.stdout + p.stderr).decode())


h.run(scenario, __doc__)
