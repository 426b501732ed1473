#!/bin/sh
# check-plugin catches what it claims to. A wrapper of the real csa plugin (faulty_attn.so)
# with no defect passes every check; each injected defect fails the check made for it, with
# exit status 1, and --json reports the same. Page size 128 keeps the prompts short.
# usage: test_check_plugin.sh <shadowrt> <tiny checkpoint dir> <faulty_attn.so> <plugin dir>
set -u
BIN=$1 MODEL=$2 FAULTY=$3 PDIR=$4
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common="--model $MODEL --ratio 4 --tokens 96 -q --set cache.page_size=128
	--set attention.faulty_attn.inner=$PDIR/srt_attn_csa.so"

# the built-in csa itself passes everything (divergence: skipped, it is the config's own)
"$BIN" check-plugin csa --model "$MODEL" --tokens 96 -q --set cache.page_size=128 --json \
	> "$T/csa.json" || fail "csa failed check-plugin: $(cat "$T/csa.json")"
"$(dirname "$0")/../../.venv/bin/python" - "$T/csa.json" <<'PY' || fail "csa JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["passed"] is True and r["kind"] == "attention" and r["ratio"] == 4, r
names = [c["name"] for c in r["checks"]]
assert names == ["pools", "chunk", "decode", "resume-l1", "resume-l2", "resume-l3", "batch",
                 "threads", "guard", "divergence"], names
st = {c["name"]: c["status"] for c in r["checks"]}
assert all(st[k] == "pass" for k in names if k != "divergence"), st
assert st["divergence"] == "skip", st
PY

# a faithful wrapper, out of tree by path: passes, and its logits equal the built-in csa's
# shellcheck disable=SC2086
"$BIN" check-plugin "$FAULTY" $common --set attention.faulty_attn.fault=none \
	--only pools,chunk,batch,guard,divergence --json > "$T/none" || fail "wrapper without defect: $(cat "$T/none")"
"$(dirname "$0")/../../.venv/bin/python" - "$T/none" <<'PY' || fail "wrapper report: $(cat "$T/none")"
import json, sys
r = json.load(open(sys.argv[1]))
d = [c for c in r["checks"] if c["name"] == "divergence"][0]
assert d["status"] == "pass" and "'csa'" in d["detail"], d
assert d["divergence"]["bitwise_equal"] and d["divergence"]["kl_mean"] == 0, d
PY
# shellcheck disable=SC2086
"$BIN" check-plugin "$FAULTY" $common --set attention.faulty_attn.fault=chunk --only divergence \
	--max-kl 0 > "$T/kl" 2>&1
[ $? -eq 1 ] || fail "--max-kl 0 must fail a diverging plugin: $(cat "$T/kl")"
grep -Eq "^  divergence +FAIL .*vs built-in 'csa'" "$T/kl" || fail "max-kl: $(cat "$T/kl")"

expect_fail() { # fault check
	# shellcheck disable=SC2086
	"$BIN" check-plugin "$FAULTY" $common --set attention.faulty_attn.fault="$1" --only "$2" \
		> "$T/out" 2>&1
	rc=$?
	[ $rc -eq 1 ] || fail "fault $1: exit $rc, expected 1: $(cat "$T/out")"
	grep -Eq "^  $2 +FAIL" "$T/out" || fail "fault $1 not caught by $2: $(cat "$T/out")"
}
expect_fail chunk chunk
expect_fail chunk decode
expect_fail batch batch
expect_fail overflow guard
expect_fail pools pools
grep -q "declared twice" "$T/out" || fail "pools message: $(cat "$T/out")"

# a residual plugin: plain in place of mhc is invariant and measurably different
"$BIN" check-plugin plain --model "$MODEL" --tokens 64 -q --set cache.page_size=128 \
	--only chunk,batch,divergence > "$T/plain" 2>&1 || fail "plain: $(cat "$T/plain")"
grep -Eq "^  divergence +pass .*vs built-in 'mhc'" "$T/plain" || fail "plain vs mhc: $(cat "$T/plain")"
grep -q "(bitwise equal)" "$T/plain" && fail "plain and mhc cannot be equal: $(cat "$T/plain")"

# usage errors
"$BIN" check-plugin csa --only chunkk > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "unknown check must exit 2"
grep -q "did you mean 'chunk'" "$T/err" || fail "unknown check message: $(cat "$T/err")"
"$BIN" check-plugin csa --model "$MODEL" --ratio 16 > /dev/null 2> "$T/err"
[ $? -eq 1 ] || fail "a ratio the model lacks must exit 1"
grep -q "no layer of compress ratio 16" "$T/err" || fail "ratio message: $(cat "$T/err")"
echo "ok"
