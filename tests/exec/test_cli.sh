#!/bin/sh
# CLI smoke test of `shadowrt generate` and `shadowrt run` on the tiny checkpoint:
# --help of both, a greedy generation with --logits (file size = positions x vocab x 4),
# determinism of two runs, a short run workload with prefix hits, usage errors exit 2.
set -eu
BIN=$1
MODEL=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" generate --help | grep -q -- "--prompt-tokens" || fail "generate --help"
"$BIN" run --help | grep -q -- "--conversations" || fail "run --help"

"$BIN" generate --model "$MODEL" --prompt "hello shadowrt" --max-new-tokens 5 --no-eos \
	--threads 1 --logits "$T/lg.f32" >"$T/out1" 2>"$T/err1" || { cat "$T/err1"; fail "generate"; }
n=$(tr ',' '\n' <"$T/out1" | grep -c .)
[ "$n" -eq 5 ] || fail "expected 5 generated ids, got: $(cat "$T/out1")"
size=$(wc -c <"$T/lg.f32")
# 14 prompt bytes + 5 generated tokens, vocab 512, float32
[ "$size" -eq $(( (14 + 5) * 512 * 4 )) ] || fail "--logits file has $size bytes"
grep -q "tokens/s" "$T/err1" || fail "no timing printed"
"$BIN" generate --model "$MODEL" --prompt "hello shadowrt" --max-new-tokens 5 --no-eos \
	--chunk 3 --threads 2 -q >"$T/out2"
cmp -s "$T/out1" "$T/out2" || fail "greedy output depends on chunk/threads: $(cat "$T/out1") vs $(cat "$T/out2")"
# the L1 pages from the heap instead of huge-page slabs: the same logits, bit for bit
"$BIN" generate --model "$MODEL" --prompt "hello shadowrt" --max-new-tokens 5 --no-eos \
	--threads 1 --set cache.l1_pages=heap --logits "$T/lg_heap.f32" -q >"$T/out3"
cmp -s "$T/lg.f32" "$T/lg_heap.f32" || fail "logits differ with cache.l1_pages=heap"
"$BIN" generate --model "$MODEL" --prompt "x" --set cache.l1_pages=thp >/dev/null 2>"$T/err3" &&
	fail "cache.l1_pages=thp accepted"
grep -q "hugepages or heap" "$T/err3" || fail "l1_pages error: $(cat "$T/err3")"

cd "$T"   # run keeps its L3 files in ./shadowrt-cache
"$BIN" run --model "$MODEL" --turns 2 --conversations 2 --reply-tokens 4 --no-tiers >"$T/run" 2>&1 ||
	{ cat "$T/run"; fail "run"; }
grep -q "hit rate" "$T/run" || fail "run printed no hit rate"
# turn 2 resends turn 1's history (>= 512 tokens with the system prompt): a hit of >= 256
awk '$1 == 2 && $4 + 0 >= 256 { ok = 1 } END { exit !ok }' "$T/run" || { cat "$T/run"; fail "no prefix hit in turn 2"; }
# with an L3 file tier, a second process finds the first one's pages there (turn 1, column
# fromL3)
printf '[tier.l2]\nplugin = none\n[tier.l3]\nplugin = file\npath = %s/l3\nbudget = 1G\n' "$T" >"$T/l3.ini"
"$BIN" run --model "$MODEL" --config "$T/l3.ini" --turns 1 --conversations 2 --reply-tokens 2 >"$T/run1" 2>&1 ||
	{ cat "$T/run1"; fail "run with L3"; }
"$BIN" run --model "$MODEL" --config "$T/l3.ini" --turns 1 --conversations 2 --reply-tokens 2 >"$T/run2" 2>&1 ||
	{ cat "$T/run2"; fail "second run with L3"; }
awk '$1 == 1 && $7 + 0 >= 256 { ok = 1 } END { exit !ok }' "$T/run2" || { cat "$T/run2"; fail "no L3 hit in the second process"; }

set +e
"$BIN" generate --model "$MODEL" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no prompt: exit 2 expected"
"$BIN" run --turns 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--turns 0: exit 2 expected"
"$BIN" generate --model /nonexistent --prompt x 2>"$T/e" >/dev/null; [ $? -eq 1 ] || fail "bad model: exit 1"
grep -q "/nonexistent" "$T/e" || fail "bad model message: $(cat "$T/e")"
echo "exec_cli: ok"
