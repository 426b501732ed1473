#!/bin/sh
# Every check is also possible from the CLI: `generate --cache` resumes from the prefix a
# previous process left in the file L3 and continues bitwise as the run without cache did
# (its logits are the tail of the first run's), and `run --logits-dir DIR --json` writes the
# tokens and logits of every turn plus a JSON summary.
# usage: test_cli_cache.sh <shadowrt> <tiny checkpoint dir> <source dir>
set -u
BIN=$1 MODEL=$2 SRC=$3
PY=$SRC/.venv/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
P=$("$PY" -c "print(','.join(str(2 + (i * 37) % 500) for i in range(300)))")
gen() { # out.f32 -> tokens on stdout
	"$BIN" generate --model "$MODEL" --cache --set "tier.l3.path=$T/l3" --set cache.page_size=128 \
		--prompt-tokens "$P" --max-new-tokens 4 --no-eos --logits "$T/$1" 2> "$T/$1.err"
}
a=$(gen a.f32) || fail "first generate --cache: $(cat "$T/a.f32.err")"
grep -q "prefix cache hit 0 of 300" "$T/a.f32.err" || fail "first run: $(cat "$T/a.f32.err")"
b=$(gen b.f32) || fail "second generate --cache: $(cat "$T/b.f32.err")"
grep -q "prefix cache hit 256 of 300 prompt tokens (L1 0, L2 0, L3 256)" "$T/b.f32.err" \
	|| fail "second run did not resume from L3: $(cat "$T/b.f32.err")"
[ "$a" = "$b" ] || fail "tokens differ after the resume: $a vs $b"
# a.f32: 300 prompt + 4 generated rows; b.f32: rows 256.. of it, bitwise
"$PY" - "$T/a.f32" "$T/b.f32" <<'PY' || fail "resumed logits are not the tail of the first run's"
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
row = 512 * 4
assert len(a) == 304 * row and len(b) == 48 * row, (len(a), len(b))
assert a[256 * row:] == b
PY

# a mistyped plugin on the engine path: one message, with a "did you mean"
"$BIN" generate --model "$MODEL" --set attention.ratio.4=cas --prompt-tokens 5,6,7 > /dev/null 2> "$T/dym"
[ $? -eq 1 ] || fail "unknown plugin must exit 1"
grep -q "plugin 'cas' (did you mean 'csa'?): no attention plugin named 'cas'" "$T/dym" || fail "dym: $(cat "$T/dym")"
[ "$(grep -c "no attention plugin named" "$T/dym")" -eq 1 ] || fail "printed more than once: $(cat "$T/dym")"

# run --logits-dir --json
"$BIN" run --model "$MODEL" --no-tiers --turns 2 --conversations 2 --reply-tokens 3 -q \
	--logits-dir "$T/logits" --json > "$T/run.json" 2> "$T/run.err" || fail "run: $(cat "$T/run.err")"
"$PY" - "$T/run.json" "$T/logits" <<'PY' || fail "run --json/--logits-dir: $(cat "$T/run.json")"
import json, os, struct, sys
r = json.load(open(sys.argv[1]))
d = sys.argv[2]
assert len(r["requests"]) == 4, r
for q in r["requests"]:
    base = os.path.join(d, "turn%d-conv%d" % (q["turn"], q["conversation"]))
    toks = [int(x) for x in open(base + ".tokens").read().split(",")]
    assert toks == q["reply"] and len(toks) == 3, (toks, q)
    raw = open(base + ".f32", "rb").read()
    assert len(raw) == 3 * 512 * 4
    # greedy (the default temperature 0): each reply token is the argmax of its logits row
    rows = [struct.unpack("512f", raw[k * 2048:(k + 1) * 2048]) for k in range(3)]
    assert [max(range(512), key=lambda v: (row[v], -v)) for row in rows] == toks, (toks, base)
    assert q["hit"] <= q["prompt"]
assert r["requests"][2]["hit"] > 0, r["requests"]   # turn 2 resumes after turn 1's pages
assert r["hit_tokens"] == sum(q["hit"] for q in r["requests"]), r
assert any(p["name"] == "csa.c4_kv" for p in r["pools"]), r
PY
echo "ok"
