#!/usr/bin/env bash
# Configure and build shadowrt into build/ (or $SRT_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${SRT_BUILD_DIR:-$root/build}
jobs=${SRT_JOBS:-$(nproc)}
cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=${SRT_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$bdir" -j"$jobs"
