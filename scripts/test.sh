#!/bin/bash
# Install what is needed, build (plain, ASan+UBSan, and the libFuzzer
# targets) and run every test. Ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh || { echo "install-deps failed"; echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
# Most tests wait on sockets and timers rather than compute (the ASan run
# keeps two cores a quarter busy), so three run at once per core; the
# fuzzers compute, so they run one per core.
cores=$(nproc)
jobs=$((cores * 3))
logdir=$(mktemp -d)

# setup DIR ARGS...: configure a build directory once, then build it.
setup() {
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$logdir/setup-$dir.log" 2>&1 || {
			cat "$logdir/setup-$dir.log"
			return 1
		}
	fi
	ninja -C "$dir"
}

# run_tests DIR ARGS...: run meson test and add its Ok and Fail counts.
run_tests() {
	local dir=$1
	shift
	local out="$logdir/test-$dir.log"
	meson test -C "$dir" --print-errorlogs "$@" 2>&1 | tee "$out"
	local ok fail timeout
	ok=$(awk '/^Ok:/ {print $2}' "$out" | tail -n 1)
	fail=$(awk '/^Fail:/ {print $2}' "$out" | tail -n 1)
	timeout=$(awk '/^Timeout:/ {print $2}' "$out" | tail -n 1)
	if [ -z "$ok" ] && [ -z "$fail" ]; then
		echo "test.sh: no test summary from $dir" >&2
		failed=$((failed + 1))
		return
	fi
	passed=$((passed + ${ok:-0}))
	failed=$((failed + ${fail:-0} + ${timeout:-0}))
}

build_step() {
	if ! setup "$@"; then
		echo "test.sh: build in $1 failed" >&2
		failed=$((failed + 1))
		return 1
	fi
}

if build_step build; then
	run_tests build --num-processes "$jobs"
fi
if build_step build-asan -Db_sanitize=address,undefined -Db_lundef=false; then
	run_tests build-asan --num-processes "$jobs"
fi
if CC=clang build_step build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false; then
	run_tests build-fuzz --suite fuzz --num-processes "$cores"
fi

rm -rf "$logdir"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
