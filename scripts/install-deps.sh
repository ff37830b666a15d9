#!/bin/sh
# Install the Debian 12 packages retryproxy needs to build, test and fuzz.
# Runs apt-get only when something is missing; uses sudo when not root.
#
#   install-deps.sh               everything: build, tests, fuzzers
#   install-deps.sh --build-only  what `meson setup` and `ninja` need, no more
#                                 (the container image's build stage uses this)
#   install-deps.sh --run         the build, and curl for the quick start's
#                                 example request (scripts/run.sh)
#   install-deps.sh --bench       what tests/bench/bench.py needs: the build, and
#                                 wrk, HAProxy and nginx to measure against (openssl
#                                 makes certs; tests/bench/floor_relay.c carries wrk
#                                 through a CONNECT)
set -eu

# Enough to configure and build, unit tests included (meson needs cmocka at
# setup time, python3 turns conf/retryproxy.yaml into C, and hiredis is the
# fleet budget's Redis client).
build_packages="build-essential meson ninja-build pkg-config
libevent-dev libssl-dev libyaml-dev libjansson-dev libcmocka-dev python3
libhiredis-dev"

# For the tests and fuzzers: clang and its sanitizer runtime, curl as the test
# client, openssl for the test PKI, python3-yaml to read docker/compose.yaml,
# systemd for `systemd-analyze verify` on the unit, groff-base to render the
# man pages with warnings on, clang-format for the style check, debhelper,
# dpkg-dev and lintian to build and check the Debian package (debian/; it
# needs no fakeroot: Rules-Requires-Root: no), redis-server for the fleet
# budget's tests and simulation, chromium to load the admin status page in a
# real (headless) browser, podman to check that docker/Dockerfile builds
# without a container daemon, gdb to hold the proxy at a point of its exit
# (a SIGTERM that comes then).
test_packages="clang libclang-rt-14-dev curl openssl ca-certificates procps
python3-yaml systemd groff-base clang-format debhelper dpkg-dev lintian
redis-server chromium podman gdb"

case "${1:-}" in
"") packages="$build_packages $test_packages" ;;
--build-only) packages="$build_packages" ;;
--run) packages="$build_packages curl" ;;
--bench) packages="$build_packages wrk haproxy nginx openssl" ;;
*)
	echo "usage: install-deps.sh [--build-only | --run | --bench]" >&2
	exit 1
	;;
esac

missing=""
for p in $packages; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
	sudo=""
else
	sudo="sudo"
fi
echo "install-deps: installing:$missing" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
