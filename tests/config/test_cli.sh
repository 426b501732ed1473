#!/bin/sh
# CLI test for `shadowrt config`: prints the effective default, lists presets, validates a
# preset and fails with file:line on a broken runtime config or model file.
# usage: test_cli.sh <shadowrt binary>
set -u
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" config > "$TMP/out" 2> "$TMP/err" || fail "default config exited $?: $(cat "$TMP/err")"
grep -q 'model tiny' "$TMP/out" || fail "default model not printed"
grep -q 'attention r=128  hca' "$TMP/out" || fail "ratio 128 -> hca not printed"
grep -q 'tier.l3.*file.*path=./shadowrt-cache' "$TMP/out" || fail "L3 tier not printed"
grep -q '1 window-only, 3 CSA (ratio 4), 2 HCA' "$TMP/out" || fail "tiny schedule not printed"

"$BIN" config --model deepseek-v4-flash | grep -q '2 window-only, 21 CSA (ratio 4), 20 HCA' \
	|| fail "flash schedule"
"$BIN" config --list-presets | grep -qx 'deepseek-v4-pro' || fail "--list-presets"
"$BIN" config --help | grep -q 'usage: shadowrt config' || fail "--help"

printf '[cache]\npage_size = 256\npage_size = 512\n' > "$TMP/broken.ini"
"$BIN" config --config "$TMP/broken.ini" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc -eq 1 ] || fail "broken config exited $rc, expected 1"
grep -q "broken.ini:3: key 'page_size' in \[cache\] is given twice" "$TMP/err" \
	|| fail "unexpected message: $(cat "$TMP/err")"

printf 'hidden_size: 4096\nbogus: 1\n' > "$TMP/m.yaml"
"$BIN" config --model "$TMP/m.yaml" > /dev/null 2> "$TMP/err"
rc=$?
[ $rc -eq 1 ] || fail "broken model exited $rc, expected 1"
grep -q "m.yaml" "$TMP/err" || fail "model error lacks the file: $(cat "$TMP/err")"

printf '[runtime]\nthreads = 1\n[moe]\nplugin = nosuch\n' > "$TMP/noplugin.ini"
"$BIN" config --config "$TMP/noplugin.ini" > /dev/null 2> "$TMP/err"
rc=$?
[ $rc -eq 1 ] || fail "unknown plugin exited $rc, expected 1"
grep -q "noplugin.ini:4: moe plugin 'nosuch': no moe plugin named 'nosuch'" "$TMP/err" \
	|| fail "unknown plugin message: $(cat "$TMP/err")"
printf '[residual]\nplugin = csa\n' > "$TMP/wrongkind.ini"
"$BIN" config --config "$TMP/wrongkind.ini" > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] || fail "plugin of the wrong kind must exit 1"
grep -q "wrongkind.ini:2: residual plugin 'csa'.*attention plugin" "$TMP/err" \
	|| fail "wrong-kind message: $(cat "$TMP/err")"

"$BIN" config --bogus > /dev/null 2>&1
[ $? -eq 2 ] || fail "unknown option must exit 2"

"$BIN" config --model > /dev/null 2> "$TMP/err"
[ $? -eq 2 ] || fail "--model without a value must exit 2"
grep -q -- "--model needs a value" "$TMP/err" || fail "unexpected message: $(cat "$TMP/err")"
# --set on the command line, over the default and --config, key by key
printf '[cache]\npage_size = 512\n' > "$TMP/p.ini"
"$BIN" config --config "$TMP/p.ini" --set cache.prefetch=off --set tier.l3.budget=2GB \
	> "$TMP/out" 2> "$TMP/err" || fail "--set exited $?: $(cat "$TMP/err")"
grep -q 'page_size 512 tokens.*prefetch off' "$TMP/out" || fail "--set/--config overlay: $(cat "$TMP/out")"
grep -q 'tier.l3 .*budget 1.9 GiB' "$TMP/out" || fail "2GB must be 2*10^9 bytes: $(cat "$TMP/out")"
grep -q 'attention r=128  hca' "$TMP/out" || fail "the default's other keys must stay"
# an unknown plugin option: error naming plugin, key, valid options; printed once
"$BIN" config --set attention.csa.kv_dtipe=fp8 > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] || fail "unknown plugin option must exit 1"
grep -q "plugin 'csa' has no option 'kv_dtipe' (did you mean 'kv_dtype'?); its options: kv_dtype, index_dtype" \
	"$TMP/err" || fail "unknown option message: $(cat "$TMP/err")"
# an unknown plugin: did you mean, and the message once (not also logged by the loader)
"$BIN" config --set moe.plugin=fp5 > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] || fail "unknown plugin must exit 1"
grep -q "moe plugin 'fp5' (did you mean 'fp4'?)" "$TMP/err" || fail "plugin dym: $(cat "$TMP/err")"
[ "$(grep -c "no moe plugin named 'fp5'" "$TMP/err")" -eq 1 ] || fail "printed twice: $(cat "$TMP/err")"
# a mapping that serves no layer warns (once)
"$BIN" config --model tiny --set attention.ratio.16=hca > /dev/null 2> "$TMP/err" || fail "ratio.16 must only warn"
[ "$(grep -c "ratio.16 = hca serves no layer of model 'tiny'" "$TMP/err")" -eq 1 ] \
	|| fail "ratio warning: $(cat "$TMP/err")"
"$BIN" config --set cachepage_size=1 > /dev/null 2>&1
[ $? -eq 2 ] || fail "malformed --set must exit 2"
"$BIN" confg > /dev/null 2> "$TMP/err"
grep -q "did you mean 'config'" "$TMP/err" || fail "command dym: $(cat "$TMP/err")"
"$BIN" config --help | grep -q -- '--set SECTION.KEY=VALUE' || fail "--help lacks --set"
# a --set that no runtime config reads says so
"$BIN" config --list-presets --set cache.page_size=512 > /dev/null 2> "$TMP/err" || fail "--list-presets"
grep -q "warning: --set had no effect" "$TMP/err" || fail "unused --set: $(cat "$TMP/err")"
echo "ok"
