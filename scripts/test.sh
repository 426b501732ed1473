#!/usr/bin/env bash
# The whole test suite: install packages, build, run every test under ctest, then build the
# unit tests again with AddressSanitizer + UndefinedBehaviorSanitizer and run them (all but
# the model-level suite, label `model`, whose bitwise-invariance runs take ~10 min under ASan;
# run it there by hand with `ctest --test-dir build-asan -L model`), and the libFuzzer targets
# for a short run each (scripts/fuzz.sh; clang builds them in build-fuzz/).
#
# No fixed per-test time limits (a loaded 2-core machine exceeds any): SRT_TEST_TIMEOUT=<s>
# adds a per-test ctest limit for a CI that wants to bound a hung run (off by default).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit=()
if [ -n "${SRT_TEST_TIMEOUT:-}" ]; then
	limit=(--timeout "$SRT_TEST_TIMEOUT")
fi
"$root/scripts/deps.sh"
jobs=${SRT_JOBS:-$(nproc)}

echo "== build (RelWithDebInfo) ==" >&2
SRT_BUILD_DIR="$root/build" "$root/scripts/build.sh"
echo "== tests ==" >&2
(cd "$root/build" && ctest --output-on-failure -j"$jobs" "${limit[@]}")

echo "== fuzz targets (short runs, by execution count) ==" >&2
if [ "${SRT_SKIP_FUZZ:-0}" != 1 ]; then
	"$root/scripts/fuzz.sh"
fi

if [ "${SRT_SKIP_ASAN:-0}" != 1 ]; then
	echo "== unit tests under ASan + UBSan ==" >&2
	SRT_BUILD_DIR="$root/build-asan" SRT_BUILD_TYPE=Debug "$root/scripts/build.sh" -DSRT_SANITIZE=ON -DSRT_CUDA=OFF
	(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j"$jobs" -L unit -LE model "${limit[@]}")
fi
