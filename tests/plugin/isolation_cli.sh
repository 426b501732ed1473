#!/bin/sh
# Plugin isolation at the command line (issue 9, item 6): a directory of hostile plugins (a
# probe that crashes, one that calls exit(), a constructor that crashes) on the search path
# takes no command down. `plugins` and `config` list and name them; `generate` and `replay`
# load in-process only the plugins their config needs and print the same results as without
# them. A probe that never returns is killed after SHADOWRT_PLUGIN_PROBE_TIMEOUT (set here
# from SRT_TEST_HANG_TIMEOUT, default 3 s; the outcome is asserted, not the time).
set -eu
BIN=$1
MODEL=$2
HOSTILE=$3
HANG=$4
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset SHADOWRT_PLUGIN_PATH || true

# generate: same tokens with and without the hostile directory on the search path
"$BIN" generate --model "$MODEL" --prompt "isolation" --max-new-tokens 3 --no-eos --threads 1 \
	-q >"$T/ref" 2>"$T/ref.err" || { cat "$T/ref.err"; fail "generate"; }
SHADOWRT_PLUGIN_PATH=$HOSTILE "$BIN" generate --model "$MODEL" --prompt "isolation" \
	--max-new-tokens 3 --no-eos --threads 1 -q >"$T/out" 2>"$T/err" ||
	{ cat "$T/err"; fail "generate with hostile plugins on the search path (exit $?)"; }
cmp -s "$T/ref" "$T/out" || fail "generate output changed: $(cat "$T/ref") vs $(cat "$T/out")"

# replay (cache only) of a two-request trace
printf '%s\n' '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}' \
	'{"timestamp": 1, "input_length": 600, "output_length": 2, "hash_ids": [1, 3]}' >"$T/t.jsonl"
SHADOWRT_PLUGIN_PATH=$HOSTILE "$BIN" replay "$T/t.jsonl" --model "$MODEL" >"$T/replay" 2>&1 ||
	{ cat "$T/replay"; fail "replay with hostile plugins on the search path"; }

# config: validates and names what it uses
SHADOWRT_PLUGIN_PATH=$HOSTILE "$BIN" config --model "$MODEL" >"$T/config" 2>&1 ||
	{ cat "$T/config"; fail "config with hostile plugins on the search path"; }

# plugins: lists each hostile one, by name, with what it did
SHADOWRT_PLUGIN_PATH=$HOSTILE "$BIN" plugins >"$T/plugins" 2>&1 ||
	{ cat "$T/plugins"; fail "plugins with hostile plugins on the search path"; }
grep -q "attention plugin 'fx-crash' crashed in its probe (signal 4" "$T/plugins" ||
	{ cat "$T/plugins"; fail "crashing probe not named"; }
grep -q "attention plugin 'fx-exit' called exit(3) in its probe" "$T/plugins" ||
	{ cat "$T/plugins"; fail "exiting probe not named"; }
grep -q "ctor_crash.so: .* while being loaded" "$T/plugins" ||
	{ cat "$T/plugins"; fail "crashing constructor not named"; }

# a probe that blocks: killed, named, the command finishes
SHADOWRT_PLUGIN_PROBE_TIMEOUT=${SRT_TEST_HANG_TIMEOUT:-3} SHADOWRT_PLUGIN_PATH=$HANG \
	"$BIN" plugins >"$T/hang" 2>&1 || { cat "$T/hang"; fail "plugins with a hanging probe"; }
grep -q "attention plugin 'fx-hang' did not finish within .* in its probe (killed" "$T/hang" ||
	{ cat "$T/hang"; fail "hanging probe not named"; }
echo "plugin isolation: ok"
