#!/bin/sh
# Software prefetches survive compilation. GCC's IPA pure-const pass takes a helper made of
# prefetches alone for a pure (or const) function and deletes each call of it that it did
# not inline, silently: the indexer once ran with no key prefetch at all (cold keys stalled
# it, a third of its time at 64K tokens of context) and most GEMV kernels without the
# prefetch of their first tiles. The helpers are always_inline now; this checks the
# optimized binaries still hold the instructions:
#   OPS_SO:   at least 8 functions with a prefetch loop (a prefetch, then the 64-byte step;
#             12 with the fix, 4 before it);
#   PLUGIN:   prefetches in the indexer's FP4 scoring (srt_attn_ix_score_fp4, srt_attn_qk_fp4
#             and the functions they did not inline): one on each path, VNNI and batch.
# x86-64 only; skipped (77) elsewhere or without objdump.
# usage: check_prefetch.sh OPS_SO PLUGIN_SO
set -eu
case "$(uname -m)" in x86_64) ;; *) echo "skip: not x86-64"; exit 77 ;; esac
command -v objdump >/dev/null 2>&1 || { echo "skip: no objdump"; exit 77; }
fail=0
loops=$(objdump -d --no-show-raw-insn "$1" | awk '
	/^[0-9a-f]+ <[^>]*>:$/ { f = $2 }
	/prefetch/ { p = 1; next }
	p && /add +\$0x40,/ { seen[f] = 1 }
	{ p = 0 }
	END { n = 0; for (k in seen) n++; print n }')
if [ "$loops" -lt 8 ]; then
	echo "FAIL: $1: $loops functions with a prefetch loop (want at least 8)"
	fail=1
else
	echo "ok: $1: $loops functions with a prefetch loop"
fi
n=$(objdump -d --no-show-raw-insn "$2" | awk '
	/^[0-9a-f]+ <[^>]*>:$/ { f = $2; gsub(/[<>:]/, "", f);
		inix = f ~ /^(srt_attn_ix_score_fp4|srt_attn_qk_fp4|ix_keys|ix_scores_vnni|ix_prefetch)/ }
	inix && /prefetch/ { n++ }
	END { print n + 0 }')
if [ "$n" -lt 2 ]; then
	echo "FAIL: $2: $n prefetch instructions in the indexer's FP4 scoring (want 2 or more)"
	fail=1
else
	echo "ok: $2: $n prefetch instructions in the indexer's FP4 scoring"
fi
exit $fail
