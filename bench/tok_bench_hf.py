#!/usr/bin/env python3
"""One timed round of HF tokenizers encoding a corpus, for bench/tok_bench (which interleaves
these rounds with its own). Each line is encoded separately (encode_batch over the lines, the
Rust core on RAYON_NUM_THREADS=1 threads, as tok_bench sets it); prints
"<seconds> <tokens>" of the fastest of --reps passes after one warm-up pass.

usage: tok_bench_hf.py TOKENIZER_JSON CORPUS [--reps N]
"""
import sys
import time

from tokenizers import Tokenizer


def main():
    tok_path, corpus = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 1
    tok = Tokenizer.from_file(tok_path)
    with open(corpus, "rb") as f:
        lines = [l.decode("utf-8", "replace") for l in f.read().split(b"\n")]
    tok.encode_batch(lines[:2000], add_special_tokens=False)  # warm-up (cache, allocator)
    best, ntok = None, 0
    for _ in range(reps):
        t0 = time.perf_counter()
        enc = tok.encode_batch(lines, add_special_tokens=False)
        dt = time.perf_counter() - t0
        ntok = sum(len(e.ids) for e in enc)
        best = dt if best is None or dt < best else best
    print(f"{best:.6f} {ntok}")


if __name__ == "__main__":
    main()
