#!/bin/sh
# Check that every C file follows .clang-format; prints the offending lines.
# Fix with: clang-format -i src/*.[ch] tests/unit/*.c tests/fuzz/*.c
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
	echo "check-format: clang-format is not installed (scripts/install-deps.sh installs it)" >&2
	exit 1
fi
clang-format --dry-run --Werror src/*.c src/*.h tests/unit/*.c tests/fuzz/*.c
