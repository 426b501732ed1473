#!/bin/sh
# One short fuzz run: run_fuzz.sh EXE NAME RUNS BUILD_DIR SEED_DIR
# Executions are counted (-runs), never timed. New inputs go to a fresh work directory in the
# build tree (never into the seed corpus); a crash leaves BUILD_DIR/fuzz/crashes/NAME-* and
# fails the test.
set -eu
exe=$1 name=$2 runs=$3 bdir=$4 seeds=$5
work="$bdir/fuzz/work/$name"
rm -rf "$work"
mkdir -p "$work" "$bdir/fuzz/crashes"
exec "$exe" -runs="$runs" -seed=1 -max_len=65536 -print_final_stats=1 \
	-artifact_prefix="$bdir/fuzz/crashes/$name-" "$work" "$seeds"
