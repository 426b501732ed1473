#!/usr/bin/env bash
# Replay table of the cache tiers: hit rate, hit / ceiling and replay wall time for
#   L1; L1 + L2; L1 + L2 + L3 with each L3 store (file segments / files with fsync on and off,
#   sqlite, redis), asynchronous batched writes (the default) and, with --before, the old
#   synchronous one-by-one writes,
# with the wall time of each row as a ratio to the L1 + L2 row measured in the same run.
#
# usage: bench/replay_tiers.sh TRACE [--model M] [--limit N] [--before] [--only LIST]
#   BUILD (default build), L1 (4GiB), L2 (16GiB), L3 (200GiB), DIR (a fresh temp dir) from the
#   environment. LIST: comma-separated row names (l1,l2,seg,files,nofsync,sqlite,redis).
# The L3 stores live under DIR and are removed after each row; redis rows start a
# redis-server on a free loopback port and stop it.
set -euo pipefail
trace=${1:?usage: bench/replay_tiers.sh TRACE [--model M] [--limit N] [--before] [--only LIST]}
shift
model=deepseek-v4-flash limit=0 before=0 only=
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--limit) limit=$2; shift 2 ;;
	--before) before=1; shift ;;
	--only) only=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
build=${BUILD:-build}
l1=${L1:-4GiB} l2=${L2:-16GiB} l3=${L3:-200GiB}
dir=${DIR:-$(mktemp -d /tmp/srt-replay-tiers.XXXXXX)}
bin="$build/bin/shadowrt"
common=(replay "$trace" -q --model "$model" --kv-dtype fp8 --index-dtype fp4 --budget "$l1")
[ "$limit" != 0 ] && common+=(--limit "$limit")
base_wall=

want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

row() { # name label args...
	local name=$1 label=$2
	shift 2
	want "$name" || return 0
	local out
	out=$("$bin" "${common[@]}" "$@")
	local hit ratio wall l3w
	hit=$(awk '/^hit rate/ {print $3}' <<<"$out")
	ratio=$(awk '/^hit \/ ceiling/ {print $4}' <<<"$out")
	wall=$(awk '/^wall time/ {print $3}' <<<"$out")
	l3w=$(awk '/^L3 writes/ {print $3, "puts,", $9, "batches,", $23, "waits"}' <<<"$out")
	if [ "$name" = l2 ]; then base_wall=$wall; fi
	local rel=-
	[ -n "$base_wall" ] && rel=$(awk -v a="$wall" -v b="$base_wall" 'BEGIN {printf "%.2f", a / b}')
	printf '| %s | %s | %s | %s s | %s | %s |\n' "$label" "$hit" "$ratio" "$wall" "$rel" "${l3w:--}"
	if grep -q FAILED <<<"$out"; then echo "tier check FAILED in row $name" >&2; exit 1; fi
}

redis_row() { # name label extra-args...
	local name=$1 label=$2
	shift 2
	want "$name" || return 0
	local port pid
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
	pid=$!
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
	row "$name" "$label" "$@" --l3 redis --l3-opt port="$port" --l3-opt host=127.0.0.1
	kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "replay $trace, model $model, L1 $l1, L2 $l2, L3 $l3${limit:+, first $limit requests}"
echo
echo '| tiers | hit | hit / ceiling | replay wall | wall / (L1+L2) | L3 writes |'
echo '|---|---|---|---|---|---|'
row l1 "L1 $l1"
row l2 "+ L2 $l2" --l2 "$l2"
tiers=(--l2 "$l2" --l3-budget "$l3")
modes=(async)
[ "$before" = 1 ] && modes+=(sync)
for m in "${modes[@]}"; do
	w=(--l3-writes "$m")
	row seg "+ L3 file, segments, fsync on ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/seg" --l3-opt layout=segments
	rm -rf "$dir/seg"
	row files "+ L3 file, files, fsync on ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/files"
	rm -rf "$dir/files"
	row nofsync "+ L3 file, files, fsync off ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/nofsync" --l3-opt fsync=off
	rm -rf "$dir/nofsync"
	row sqlite "+ L3 sqlite ($m)" "${tiers[@]}" "${w[@]}" --l3 sqlite --l3-path "$dir/l3.db"
	rm -f "$dir"/l3.db*
	redis_row redis "+ L3 redis ($m)" "${tiers[@]}" "${w[@]}"
done
rm -rf "$dir"
