#!/usr/bin/env bash
# The main job on the embedded default: install packages, build, then run `shadowrt run`
# (arguments are passed through; see `build/bin/shadowrt run --help`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
SRT_BUILD_DIR="$root/build" "$root/scripts/build.sh"
bin="$root/build/bin/shadowrt"
if "$bin" run --help >/dev/null 2>&1; then
	exec "$bin" run "$@"
fi
# Until the executor lands: show the plugins and check the embedded default configuration.
"$bin" plugins
exec "$bin" config
