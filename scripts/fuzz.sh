#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz) with clang into build-fuzz/ (or $SRT_FUZZ_BUILD_DIR)
# and run each for SRT_FUZZ_RUNS executions (default 20000; counted, never timed).
# Longer runs: see README "Fuzzing". Exits 0 with a note when clang is not installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${SRT_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${SRT_JOBS:-$(nproc)}
cc=${SRT_FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}
if [ -z "$cc" ]; then
	echo "fuzz: clang not found: fuzz targets not built (apt-get install clang libfuzzer-14-dev)" >&2
	exit 0
fi
runs=${SRT_FUZZ_RUNS:-20000}
CC=$cc cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSRT_FUZZ=ON -DSRT_CUDA=OFF \
	-DSRT_FUZZ_RUNS="$runs" >/dev/null
cmake --build "$bdir" -j"$jobs" --target fuzz_all
(cd "$bdir" && ctest --output-on-failure -j"$jobs" -L fuzz)
