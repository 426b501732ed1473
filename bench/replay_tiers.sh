#!/usr/bin/env bash
# Replay table of the cache tiers: hit rate, hit / ceiling, replay wall and CPU time for
#   L1; L1 + L2; L1 + L2 + L3 with each L3 store (file segments / files with fsync on and off,
#   sqlite, redis), asynchronous batched writes (the default) and, with --before, the old
#   synchronous one-by-one writes.
#
# Ratios are interleaved A/B measurements in one run: every run of a row with L3 is paired with
# a run of the L1 + L2 row just before it, and the row reports the median over its pairs of
# wall(row) / wall(L1 + L2) and of cpu(row) / cpu(L1 + L2) (cpu = user + system time of the
# whole process, every thread, over the replay's span: what the load of other jobs on a shared
# machine disturbs least). A row whose first run takes longer than 30 s is not repeated.
#
# usage: bench/replay_tiers.sh TRACE [--model M] [--limit N] [--before] [--only LIST]
#                              [--repeat N] [--remat on|off]
#   BUILD (default build), L1 (4GiB), L2 (16GiB), L3 (200GiB), DIR (a fresh temp dir) from the
#   environment. LIST: comma-separated row names (l1,l2,seg,files,nofsync,sqlite,redis).
#   --repeat N: pairs per row (default 3); --remat: replay's --remat (default: replay's, on).
# The L3 stores live under DIR and are removed after each run; redis rows start a
# redis-server on a free loopback port and stop it.
set -euo pipefail
usage="usage: bench/replay_tiers.sh TRACE [--model M] [--limit N] [--before] [--only LIST] [--repeat N] [--remat on|off]"
trace=${1:?$usage}
shift
model=deepseek-v4-flash limit=0 before=0 only= repeat=3 remat=
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--limit) limit=$2; shift 2 ;;
	--before) before=1; shift ;;
	--only) only=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--remat) remat=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
	esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "--repeat '$repeat': expected a positive count" >&2; exit 2; }
build=${BUILD:-build}
l1=${L1:-4GiB} l2=${L2:-16GiB} l3=${L3:-200GiB}
dir=${DIR:-$(mktemp -d /tmp/srt-replay-tiers.XXXXXX)}
bin="$build/bin/shadowrt"
common=(replay "$trace" -q --model "$model" --kv-dtype fp8 --index-dtype fp4 --budget "$l1")
[ "$limit" != 0 ] && common+=(--limit "$limit")
[ -n "$remat" ] && common+=(--remat "$remat")
base=(--l2 "$l2")

want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# One replay: sets out (its output), wall, cpu. Fails the script on a failed tier check.
once() {
	out=$("$bin" "${common[@]}" "$@")
	wall=$(awk '/^wall time/ {print $3}' <<<"$out")
	cpu=$(awk '/^cpu time/ {print $3}' <<<"$out")
	cpu=${cpu:-0} # a build from before the cpu line (BUILD=...): ratios of 0 / 0 show as nan
	if grep -q FAILED <<<"$out"; then echo "tier check FAILED: $*" >&2; exit 1; fi
}

cleanup_store() { # every run starts from an empty store
	rm -rf "$dir/store" "$dir"/l3.db*
	if [ -n "${REDIS_CLI_PORT:-}" ]; then redis-cli -p "$REDIS_CLI_PORT" flushall >/dev/null; fi
}

row() { # name label args...
	local name=$1 label=$2
	shift 2
	want "$name" || return 0
	local walls=() cpus=() rw=() rc=() i n=$repeat
	for ((i = 0; i < n; i++)); do
		local bw= bc=
		if [ "$name" != l1 ] && [ "$name" != l2 ]; then
			once "${base[@]}"
			bw=$wall bc=$cpu
		fi
		once "$@"
		cleanup_store
		walls+=("$wall") cpus+=("$cpu")
		if [ -n "$bw" ]; then
			rw+=("$(awk -v a="$wall" -v b="$bw" 'BEGIN {printf "%.3f", a / b}')")
			rc+=("$(awk -v a="$cpu" -v b="$bc" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "nan"}')")
		fi
		if [ "$i" = 0 ] && awk -v w="$wall" 'BEGIN {exit !(w > 30)}'; then n=1; fi
	done
	local hit ratio l3w mw mc xw=- xc=- all=-
	hit=$(awk '/^hit rate/ {print $3}' <<<"$out")
	ratio=$(awk '/^hit \/ ceiling/ {print $4}' <<<"$out")
	l3w=$(awk '/^L3 writes/ {print $3, "puts,", $9, "batches,", $23, "waits"}' <<<"$out")
	mw=$(printf '%s\n' "${walls[@]}" | median)
	mc=$(printf '%s\n' "${cpus[@]}" | median)
	if [ ${#rw[@]} -gt 0 ]; then
		xw=$(printf '%s\n' "${rw[@]}" | median | xargs printf '%.2f')
		xc=$(printf '%s\n' "${rc[@]}" | median | xargs printf '%.2f')
		all=$(IFS=' '; echo "${rw[*]}")
	fi
	printf '| %s | %s | %s | %.2f s | %.2f s | %s | %s | %s | %s |\n' "$label" "$hit" "$ratio" \
		"$mw" "$mc" "$xw" "$xc" "$all" "${l3w:--}"
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
	REDIS_CLI_PORT=$port row "$name" "$label" "$@" --l3 redis --l3-opt port="$port" \
		--l3-opt host=127.0.0.1
	kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "replay $trace, model $model, L1 $l1, L2 $l2, L3 $l3$([ "$limit" != 0 ] && echo ", first $limit requests")," \
	"remat ${remat:-default}, $repeat interleaved pairs per row (median), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo '| tiers | hit | hit / ceiling | wall | cpu | wall / (L1+L2) | cpu / (L1+L2) | wall ratios | L3 writes |'
echo '|---|---|---|---|---|---|---|---|---|'
row l1 "L1 $l1"
row l2 "+ L2 $l2" "${base[@]}"
tiers=(--l2 "$l2" --l3-budget "$l3")
modes=(async)
[ "$before" = 1 ] && modes+=(sync)
for m in "${modes[@]}"; do
	w=(--l3-writes "$m")
	row seg "+ L3 file, segments, fsync on ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/store" --l3-opt layout=segments
	row files "+ L3 file, files, fsync on ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/store" --l3-opt layout=files
	row nofsync "+ L3 file, files, fsync off ($m)" "${tiers[@]}" "${w[@]}" --l3 file \
		--l3-path "$dir/store" --l3-opt layout=files --l3-opt fsync=off
	row sqlite "+ L3 sqlite ($m)" "${tiers[@]}" "${w[@]}" --l3 sqlite --l3-path "$dir/l3.db"
	redis_row redis "+ L3 redis ($m)" "${tiers[@]}" "${w[@]}"
done
rm -rf "$dir"
