"""What a fleet test asks a proxy's admin listener (the proxy's second
listener, port(1)): a page, and retryproxy_fleet_connected."""

import re

import harness as h


def admin_get(proxy, path):
    return h.curl("http://127.0.0.1:%d%s" % (proxy.port(1), path), check=True).body.decode()


def fleet_gauge(proxy):
    """retryproxy_fleet_connected, or None when the proxy has no fleet."""
    m = re.search(r"^retryproxy_fleet_connected (\S+)$", admin_get(proxy, "/metrics"), re.M)
    return None if m is None else int(m.group(1))


def wait_gauge(proxies, value, timeout):
    h.wait_until(lambda: all(fleet_gauge(p) == value for p in proxies), timeout,
                 "retryproxy_fleet_connected %d on every proxy (now %s)"
                 % (value, [fleet_gauge(p) for p in proxies]))
