#!/bin/sh
# Install the Debian 12 packages retryproxy needs to build, test and fuzz.
# Runs apt-get only when something is missing; uses sudo when not root.
set -eu

packages="build-essential meson ninja-build pkg-config
libevent-dev libssl-dev libyaml-dev libjansson-dev libcmocka-dev
clang libclang-rt-14-dev curl openssl ca-certificates python3 procps"

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
