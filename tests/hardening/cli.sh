#!/bin/sh
# Small bugs of issue 9 item 8 at the command line, each a case that failed before its fix:
#   --temperature / --top-p nan and inf were accepted;
#   --prompt-tokens "" leaked 4 bytes (checked under valgrind when installed; the ASan build
#     checks it through LeakSanitizer at exit);
#   a killed preset generation left <cache>/<preset>.tmp.<pid> (220 MB for flash) for ever;
#   `config --model DIR` hung in open() when DIR/config.json is a FIFO;
#   `replay /dev/zero` grew without bound;
# and no error message repeats a word ("the the").
set -eu
BIN=$1
SANITIZED=${2:-0}   # 1: an ASan build (LeakSanitizer checks leaks at exit; no valgrind)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset SHADOWRT_PLUGIN_PATH || true

# --temperature / --top-p: finite numbers only (exit 2, usage error)
for v in nan NaN inf -inf infinity 1e999; do
	rc=0; "$BIN" generate --model tiny --prompt x --temperature "$v" >"$T/o" 2>&1 || rc=$?
	[ "$rc" -eq 2 ] || fail "--temperature $v: exit $rc: $(cat "$T/o")"
	grep -q "expected a finite number >= 0" "$T/o" || fail "--temperature $v: $(cat "$T/o")"
done
for v in nan inf; do
	rc=0; "$BIN" generate --model tiny --prompt x --top-p "$v" >"$T/o" 2>&1 || rc=$?
	[ "$rc" -eq 2 ] || fail "--top-p $v: exit $rc: $(cat "$T/o")"
done

# the engine options of run, serve, generate and chat: one parser, one message, exit 2
for cmd in run serve generate chat; do
	for opt in "--threads x" "--threads 4097" "--profile bf16"; do
		rc=0; "$BIN" $cmd $opt >"$T/o" 2>&1 </dev/null || rc=$?
		[ "$rc" -eq 2 ] || fail "$cmd $opt: exit $rc: $(cat "$T/o")"
		case $opt in
		--threads*) want="expected an integer in \[0, 4096\]" ;;
		*) want="expected reference or f32" ;;
		esac
		grep -q "shadowrt $cmd: ${opt%% *} '${opt#* }': $want" "$T/o" ||
			fail "$cmd $opt: $(cat "$T/o")"
	done
done

# --prompt-tokens "": a usage error, and nothing leaked
rc=0; "$BIN" generate --model tiny --prompt-tokens "" >"$T/o" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--prompt-tokens '': exit $rc: $(cat "$T/o")"
if [ "$SANITIZED" != 1 ] && command -v valgrind >/dev/null 2>&1; then
	rc=0
	valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \
		"$BIN" generate --model tiny --prompt-tokens "" >"$T/o" 2>&1 || rc=$?
	[ "$rc" -eq 2 ] || { cat "$T/o"; fail "--prompt-tokens '' under valgrind: exit $rc (99 = leak)"; }
fi

# A preset generation that was killed left its private directory; the next one removes it
# (a directory of a live process stays).
cache="$T/xdg/shadowrt/models"
mkdir -p "$cache"
dead=$(sh -c 'echo $$')   # that shell has exited: no such process
mkdir "$cache/tiny.tmp.$dead"
head -c 100000 /dev/zero >"$cache/tiny.tmp.$dead/.model.safetensors.tmp.$dead"
echo '{}' >"$cache/tiny.tmp.$dead/config.json"
mkdir "$cache/tiny.tmp.$$"
XDG_CACHE_HOME="$T/xdg" "$BIN" generate --model tiny --prompt-tokens 1,2 --max-new-tokens 1 \
	--threads 1 -q >"$T/o" 2>&1 || { cat "$T/o"; fail "generate --model tiny"; }
[ ! -e "$cache/tiny.tmp.$dead" ] || fail "stale $cache/tiny.tmp.$dead was not removed"
[ -d "$cache/tiny.tmp.$$" ] || fail "the directory of a live process was removed"
[ -f "$cache/tiny/config.json" ] || fail "no generated checkpoint"

# replay --l3 file: one process, so the segment layout unless --l3-opt layout= says otherwise
printf '{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 3]}\n' >"$T/t.jsonl"
"$BIN" replay "$T/t.jsonl" --budget 4GiB --l2 none --l3 file --l3-path "$T/l3s" >"$T/o" 2>&1 ||
	fail "replay --l3 file: $(cat "$T/o")"
[ -d "$T/l3s/seg" ] || fail "replay --l3 file did not use the segment layout: $(ls -R "$T/l3s")"
"$BIN" replay "$T/t.jsonl" --budget 4GiB --l2 none --l3 file --l3-path "$T/l3f" \
	--l3-opt layout=files >"$T/o" 2>&1 || fail "replay --l3-opt layout=files: $(cat "$T/o")"
[ ! -e "$T/l3f/seg" ] || fail "--l3-opt layout=files was overridden"

# config --model DIR with a FIFO config.json: refused at once
mkdir "$T/fifo"
mkfifo "$T/fifo/config.json"
rc=0; "$BIN" config --model "$T/fifo" >"$T/o" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "config on a FIFO: exit $rc"
grep -q "config.json: not a regular file (a FIFO)" "$T/o" || fail "config on a FIFO: $(cat "$T/o")"

# replay /dev/zero: refused after one bounded line (it grew to 1 GB, then read ENOMEM as the
# end of the trace and exited 0)
rc=0; "$BIN" replay /dev/zero >"$T/o" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "replay /dev/zero: exit $rc: $(cat "$T/o")"
grep -q "/dev/zero:1: line longer than 1048576 bytes" "$T/o" || fail "replay /dev/zero: $(cat "$T/o")"

# Error messages: no word twice in a row across a range of failures.
printf 'hidden_size: 1\n' >"$T/bad.yaml"
printf '[runtime]\nthreads = x\n' >"$T/bad.ini"
printf '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}\n' >"$T/bad.jsonl"
mkdir "$T/ck"
cp "$cache/tiny/config.json" "$T/ck/"
printf 'not a safetensors file' >"$T/ck/model.safetensors"
{
	"$BIN" generate --model /nonexistent --prompt hi || true
	"$BIN" generate --model "$T/bad.yaml" --prompt hi || true
	"$BIN" generate --model "$T/ck" --prompt hi || true
	"$BIN" generate --model tiny --prompt hi --config "$T/bad.ini" || true
	XDG_CACHE_HOME="$T/xdg" "$BIN" generate --model tiny --prompt-tokens 999999 || true
	"$BIN" config --model "$T/bad.yaml" || true
	"$BIN" config --config "$T/bad.ini" || true
	"$BIN" replay "$T/bad.jsonl" || true
	"$BIN" replay /nonexistent.jsonl || true
	"$BIN" gen-model nosuch "$T/g" || true
	"$BIN" run --model "$T/ck" || true
	"$BIN" plugins --plugin-dir "$T/nonexistent" || true
} >"$T/msgs" 2>&1
if grep -niE '\b([a-z]{2,})[[:space:]]+\1\b' "$T/msgs" >"$T/dups"; then
	cat "$T/dups"
	fail "a message repeats a word"
fi
echo "hardening cli: ok"
