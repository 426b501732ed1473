#!/bin/sh
# shadowrt ab: A = B gives bitwise-identical logits and tokens (so the tool adds no noise of
# its own); B in the f32 profile diverges and ab measures it; a prompts file is a workload;
# --json is well-formed and complete; --plot writes a PNG; bad input exits 2 with a message.
# usage: test_ab.sh <shadowrt> <tiny checkpoint dir> <source dir>
set -u
BIN=$1 MODEL=$2 SRC=$3
PY=$SRC/.venv/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
small="--model $MODEL --conversations 1 --turns 2 --repeats 2 --max-new-tokens 4 -q
	--set cache.page_size=128"

# shellcheck disable=SC2086
"$BIN" ab $small --layers --json > "$T/same.json" || fail "A = B exited $?"
"$PY" - "$T/same.json" <<'PY' || fail "A = B report: $(cat "$T/same.json")"
import json, sys
r = json.load(open(sys.argv[1]))
tf = r["teacher_forced"]
assert tf["bitwise_equal"] and tf["kl_mean"] == 0 and tf["top1_agreement"] == 1, tf
assert tf["first_divergent"]["position"] == -1, tf
assert tf["positions"] == 340 + 404, tf          # turn 1: 300 + 40, turn 2: 300 + 80 + 24
assert r["free_running"]["token_agreement"] == 1, r["free_running"]
assert r["workload"]["requests"] == 2
for s in ("a", "b"):
    side = r[s]
    assert len(side["prefill_tok_s"]) == 2 and all(x > 0 for x in side["prefill_tok_s"]), side
    assert side["hit_tokens"] == 256, side            # turn 2 resumes after 2 pages of 128
    assert any(p["name"] == "csa.c4_kv" and p["peak_bytes"] > 0 for p in side["pools"]), side
sp = r["speed"]["prefill_ratio_b_over_a"]
assert sp["min"] <= sp["median"] <= sp["max"] and sp["min"] > 0, sp
assert len(r["per_position"]) == 404
pl = r["per_layer_divergence"]          # 6 layers + the head, every row of both requests
assert [x["layer"] for x in pl] == [0, 1, 2, 3, 4, 5, "head"], pl
assert all(x["rows"] == 744 and x["rows_differing"] == 0 and x["max_abs"] == 0 for x in pl), pl
PY

# B in the f32 profile (its own INI file): no rounding, no fake-quant -> different logits
printf '[runtime]\nprofile = f32\n' > "$T/f32.ini"
"$PY" -c "print(','.join(str(2 + i * 7 % 500) for i in range(64)))
print(','.join(str(2 + i * 11 % 500) for i in range(64)))" > "$T/p64.txt"
"$BIN" ab --model "$MODEL" --prompts "$T/p64.txt" --repeats 1 --max-new-tokens 4 -q \
	--set cache.page_size=128 --b "$T/f32.ini" --json --plot "$T/div.png" \
	> "$T/f32.json" || fail "f32 vs reference exited $?"
"$PY" - "$T/f32.json" <<'PY' || fail "f32 report: $(cat "$T/f32.json")"
import json, sys
r = json.load(open(sys.argv[1]))
tf = r["teacher_forced"]
assert not tf["bitwise_equal"] and tf["kl_mean"] > 0 and tf["max_abs_logit"] > 0, tf
assert tf["first_divergent"]["position"] == 0, tf   # rounding differs from the first token on
assert 0 < tf["top1_agreement"] < 1, tf
assert r["b"]["config"].endswith("/f32.ini") and r["a"]["config"] is None, r
assert r["a"]["sets"] == r["b"]["sets"] == ["cache.page_size=128"], r
PY
head -c 8 "$T/div.png" | od -An -c | grep -q 'P   N   G' || fail "--plot wrote no PNG"

# text report and a prompts file workload (ids and text lines)
printf '# two prompts\n5,6,7,8,9,10,11,12\nhello ab\n' > "$T/prompts.txt"
"$BIN" ab --model "$MODEL" --prompts "$T/prompts.txt" --repeats 1 --max-new-tokens 2 -q \
	> "$T/text" || fail "prompts workload exited $?"
grep -q "workload prompts of $T/prompts.txt (2 requests)" "$T/text" || fail "text: $(cat "$T/text")"
grep -q "bitwise identical logits at every position" "$T/text" || fail "text: $(cat "$T/text")"
grep -q "prefill tok/s  A" "$T/text" || fail "no speed line: $(cat "$T/text")"

# a Mooncake trace slice as the workload (requests 1 and 2 share their first 3 blocks)
"$BIN" ab --model "$MODEL" --trace "$SRC/tests/install/data/mini-trace.jsonl" --trace-slice 0:2 \
	--max-prompt 600 --repeats 1 --max-new-tokens 1 -q --json --tiers > "$T/trace.json" \
	|| fail "trace workload"
"$PY" - "$T/trace.json" <<'PY' || fail "trace report: $(cat "$T/trace.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["workload"]["requests"] == 2 and r["teacher_forced"]["positions"] == 1200, r["workload"]
assert r["a"]["hit_tokens"] == 512, r["a"]        # the second request resumes after 2 pages
t = r["a"]["hit_tokens_by_tier"]                  # --tiers: L2/L3 behind L1, hits by tier
assert t["l1"] + t["l2"] + t["l3"] == 512 and t["l1"] == 512, t
PY

# bad input
printf '1,2,9999\n' > "$T/bad.txt"
"$BIN" ab --model "$MODEL" --prompts "$T/bad.txt" -q > /dev/null 2> "$T/err"
[ $? -eq 1 ] || fail "an id outside the vocabulary must fail"
grep -q "bad.txt:1: token id 9999 is outside" "$T/err" || fail "message: $(cat "$T/err")"
"$BIN" ab --a-set nodot > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "malformed --a-set must exit 2"
"$BIN" ab --model "$MODEL" --b-set attention.ratio.4=nosuch -q > /dev/null 2> "$T/err"
[ $? -eq 1 ] || fail "unknown plugin on side B must exit 1"
grep -q "side B" "$T/err" || fail "side B message: $(cat "$T/err")"
echo "ok"
