#!/bin/sh
# Quick start: install what is needed, build, and run retryproxy on its
# embedded default config (forward proxy on 127.0.0.1:3128). Only the build
# packages and curl for the README's example: the test tools (chromium,
# podman, a redis-server that starts a service of its own) are
# scripts/test.sh's to install.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh --run
[ -f build/build.ninja ] || meson setup build
ninja -C build
# Run from the build directory, where no ./conf/retryproxy.yaml is found, so
# the binary uses its embedded default unless /etc/retryproxy has a config.
cd build && exec ./retryproxy "$@"
