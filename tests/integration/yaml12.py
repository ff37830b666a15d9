"""YAML as the proxy reads it, for the tests that read the project's YAML
files themselves.

Importing this module makes sure PyYAML is there: python3-yaml may be
installed for /usr/bin/python3 only, not for the python3 meson found first
on PATH, so the test file is then run again under /usr/bin/python3; where
that cannot help, the test fails naming the missing package. After it,
`import yaml` works as usual."""

import os
import re
import sys

try:
    import yaml
except ImportError:
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("FAIL %s: the yaml module is missing (Debian package python3-yaml; "
          "scripts/install-deps.sh installs it)" % os.path.basename(sys.argv[0]))
    sys.exit(1)


class Loader(yaml.SafeLoader):
    """YAML as libyaml gives it to the proxy: only true/false are booleans
    (PyYAML's YAML 1.1 would read the key `on:` as True)."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                             re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load(stream):
    """One YAML document (text or an open file) read the proxy's way."""
    return yaml.load(stream, Loader=Loader)
