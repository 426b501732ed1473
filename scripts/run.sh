#!/usr/bin/env bash
# The main job on the embedded default: install packages, build, then run `shadowrt run`
# (a multi-turn workload on the synthetic tiny model; arguments are passed through, see
# `build/bin/shadowrt run --help`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SRT_NO_PIP=1 "$root/scripts/deps.sh"   # the main job needs no Python test oracles
SRT_BUILD_DIR="$root/build" "$root/scripts/build.sh"
exec "$root/build/bin/shadowrt" run "$@"
