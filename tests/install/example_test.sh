#!/bin/sh
# The research example end to end against the INSTALLED SDK: `cmake --install` into a
# temporary prefix, build examples/c16-attention out of tree with pkg-config only
# (shadowrt-plugin + shadowrt-ops), then with the installed shadowrt:
#   - check-plugin: every check passes on the tiny-c16 model (ratio-16 layers);
#   - at ratio 128 in the f32 profile its logits match the built-in hca (mean KL < 1e-9):
#     the SDK computes what the built-ins compute;
#   - replay takes it from the runtime config (--set) and caches its own pools;
#   - ab compares two settings of its `window` option: logits are identical up to position
#     31 and first differ at 32, where a 32-token window starts to leave out token 0; per layer
#     (--layers) the residual stream is equal up to the first c16 layer and differs after it.
# usage: example_test.sh <build dir> <source dir> <CMAKE_INSTALL_LIBDIR> <cmake>
set -eu
build=$1 src=$2 libdir=$3 cmake=${4:-cmake}
PY=$src/.venv/bin/python
tmp=$(mktemp -d "${TMPDIR:-/tmp}/srt-example.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix
fail() {
	echo "example test FAILED: $*" >&2
	exit 1
}
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log" >&2; fail "cmake --install"; }
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
cp -R "$src/examples/c16-attention" "$tmp/c16"
make -C "$tmp/c16" >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; fail "make c16"; }
case "$(cat "$tmp/make.log")" in *"$src/"*) fail "c16 was built with the source tree's files" ;; esac
so=$tmp/c16/c16.so
bin=$prefix/bin/shadowrt
unset SHADOWRT_PLUGIN_PATH

"$bin" gen-model "$tmp/c16/tiny-c16.yaml" "$tmp/model" >/dev/null 2>&1 || fail "gen-model tiny-c16"
"$bin" gen-model tiny "$tmp/tiny" >/dev/null 2>&1 || fail "gen-model tiny"

# 1. conformance, every check (page 128 and short prompts keep it quick)
"$bin" check-plugin "$so" --ratio 16 --model "$tmp/model" --config "$tmp/c16/c16.ini" \
	--set cache.page_size=128 --tokens 96 -q --json >"$tmp/check.json" ||
	fail "check-plugin c16: $(cat "$tmp/check.json")"
"$PY" - "$tmp/check.json" <<'PY' || fail "check-plugin report: $(cat "$tmp/check.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["passed"] and r["plugin"] == "c16" and r["ratio"] == 16, r
st = {c["name"]: c["status"] for c in r["checks"]}
assert all(st[k] == "pass" for k in st if k != "divergence"), st
assert st["divergence"] == "skip", st
PY

# 2. the same math as the built-in hca at ratio 128, f32 profile
"$bin" check-plugin "$so" --ratio 128 --model "$tmp/tiny" --profile f32 --only divergence \
	--max-kl 1e-9 -q >"$tmp/div.txt" || fail "c16 vs hca: $(cat "$tmp/div.txt")"
grep -q "vs built-in 'hca'" "$tmp/div.txt" || fail "no comparison with hca: $(cat "$tmp/div.txt")"

# 3. replay with the plugin from the runtime config
"$bin" replay "$src/tests/install/data/mini-trace.jsonl" --model "$tmp/c16/tiny-c16.yaml" \
	--set "attention.ratio.16=$so" -q >"$tmp/replay.txt" 2>&1 || fail "replay: $(cat "$tmp/replay.txt")"
grep -Eq '^c16\.kv +16 ALL' "$tmp/replay.txt" || fail "replay did not cache c16.kv: $(cat "$tmp/replay.txt")"
grep -q 'hit / ceiling   1.0000' "$tmp/replay.txt" || fail "replay hit rate: $(cat "$tmp/replay.txt")"

# 4. ab: window 128 vs 32
printf '%s\n' "$(seq -s, 2 101)" >"$tmp/prompts.txt"
"$bin" ab --model "$tmp/model" --config "$tmp/c16/c16.ini" --set "attention.ratio.16=$so" \
	--a-set attention.c16.window=128 --b-set attention.c16.window=32 --layers \
	--prompts "$tmp/prompts.txt" --repeats 1 --max-new-tokens 2 -q --json >"$tmp/ab.json" ||
	fail "ab: $(cat "$tmp/ab.json")"
"$PY" - "$tmp/ab.json" <<'PY' || fail "ab report: $(cat "$tmp/ab.json")"
import json, sys
r = json.load(open(sys.argv[1]))
tf = r["teacher_forced"]
assert tf["positions"] == 100 and not tf["bitwise_equal"], tf
assert tf["first_divergent"]["position"] == 32, tf
assert all(p["kl_mean"] == 0 for p in r["per_position"][:32]), r["per_position"][:33]
# per layer: c16 serves layers 2 and 4, so the inputs of layers 0-2 are equal and layer 3's
# differ from row 32 on (68 of 100 rows)
pl = r["per_layer_divergence"]
assert [x["rows_differing"] for x in pl[:3]] == [0, 0, 0], pl
assert pl[3]["rows_differing"] == 68 and pl[-1]["layer"] == "head" and pl[-1]["max_abs"] > 0, pl
PY
echo "example test passed"
