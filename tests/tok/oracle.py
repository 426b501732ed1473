#!/usr/bin/env python3
"""Compare shadowrt's tokenizer with Hugging Face `tokenizers` (the oracle) on a corpus.

  1. ids: `shadowrt tokenize --lines --json` on every corpus line == HF
     Tokenizer.encode(line.decode("utf-8", "replace"), add_special_tokens=False).ids;
  2. model vocabulary only (`--no-added`) on the lines that hold added-token spellings == HF
     with the added tokens taken out of tokenizer.json;
  3. round trip: `shadowrt detokenize --lines --json` of those ids == the line, for every line
     that is valid UTF-8, and == HF's decode of the same ids for every line;
  4. decoding random id sequences (specials, split multi-byte characters) == HF's decode.

usage: oracle.py SHADOWRT TOKENIZER_JSON CORPUS
Exit 0 when everything matches, 1 with the first mismatches printed otherwise.
"""
import json
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer


def run(cmd, data):
    p = subprocess.run(cmd, input=data, capture_output=True)
    if p.returncode:
        sys.exit(f"oracle: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p.stdout


def main():
    shadowrt, tok_path, corpus = sys.argv[1:4]
    with open(corpus, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    texts = [l.decode("utf-8", "replace") for l in lines]
    hf = Tokenizer.from_file(tok_path)
    failures = []

    def fail(kind, i, detail):
        failures.append(f"{kind}: line {i + 1}: {detail}")

    # 1. ids, every line
    out = run([shadowrt, "tokenize", "--tokenizer", tok_path, "--lines", "--json", "--file", corpus], b"")
    c_ids = [json.loads(l) for l in out.decode().split("\n") if l]
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    if len(c_ids) != len(want):
        sys.exit(f"oracle: shadowrt gave {len(c_ids)} lines of ids for {len(want)} corpus lines")
    n_tok = 0
    for i, (c, w) in enumerate(zip(c_ids, want)):
        n_tok += len(w)
        if c != w:
            k = next((j for j in range(min(len(c), len(w))) if c[j] != w[j]), min(len(c), len(w)))
            fail("ids", i, f"{texts[i][:120]!r}: first difference at token {k}: "
                           f"shadowrt {c[max(0, k - 3):k + 5]} vs HF {w[max(0, k - 3):k + 5]}")
    print(f"oracle: ids: {len(lines)} lines, {len(raw)} bytes, {n_tok} tokens compared")

    # 2. model vocabulary only, on the lines with an added-token spelling (or a part of one)
    spec = json.load(open(tok_path, encoding="utf-8"))
    spec["added_tokens"] = []
    hf_plain = Tokenizer.from_str(json.dumps(spec))
    sel = [i for i, t in enumerate(texts) if "<" in t or "\uff5c" in t or "|" in t][:20000]
    data = b"\n".join(lines[i] for i in sel)
    with tempfile.NamedTemporaryFile(suffix=".txt") as tf:
        tf.write(data)
        tf.flush()
        out = run([shadowrt, "tokenize", "--tokenizer", tok_path, "--lines", "--json",
                   "--no-added", "--file", tf.name], b"")
    got = [json.loads(l) for l in out.decode().split("\n") if l]
    want2 = [e.ids for e in hf_plain.encode_batch([texts[i] for i in sel], add_special_tokens=False)]
    if len(got) != len(want2):
        sys.exit(f"oracle: --no-added gave {len(got)} lines for {len(want2)}")
    for j, (c, w) in enumerate(zip(got, want2)):
        if c != w:
            fail("no-added ids", sel[j], f"{texts[sel[j]][:120]!r}: shadowrt {c[:12]} vs HF {w[:12]}")
    print(f"oracle: --no-added: {len(sel)} lines with added-token spellings compared")

    # 3. round trip through detokenize
    ids_in = "\n".join(json.dumps(w) for w in want).encode()
    out = run([shadowrt, "detokenize", "--tokenizer", tok_path, "--lines", "--json"], ids_in)
    dec = [json.loads(l) for l in out.decode().split("\n") if l]
    if len(dec) != len(want):
        sys.exit(f"oracle: detokenize gave {len(dec)} lines for {len(want)}")
    hf_dec = hf.decode_batch(want, skip_special_tokens=False)
    n_valid = 0
    for i, d in enumerate(dec):
        try:
            lines[i].decode("utf-8")
            n_valid += 1
            if d != texts[i]:
                fail("round trip", i, f"{texts[i][:80]!r} came back as {d[:80]!r}")
        except UnicodeDecodeError:
            pass
        if d != hf_dec[i]:
            fail("decode", i, f"shadowrt {d[:80]!r} vs HF {hf_dec[i][:80]!r}")
    print(f"oracle: decode(encode(x)) == x on {n_valid} valid UTF-8 lines; decode == HF on {len(dec)}")

    # 4. random id sequences: split characters, specials, unassigned-free ids
    rng = random.Random(7)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    seqs = []
    for _ in range(3000):
        n = rng.randint(1, 24)
        seqs.append([rng.choice([rng.randrange(vocab), rng.randrange(256), rng.randrange(128000, vocab),
                                 rng.randrange(100, 300)]) for _ in range(n)])
    for skip in (False, True):
        cmd = [shadowrt, "detokenize", "--tokenizer", tok_path, "--lines", "--json"]
        if skip:
            cmd.append("--skip-special")
        out = run(cmd, "\n".join(json.dumps(s) for s in seqs).encode())
        dec = [json.loads(l) for l in out.decode().split("\n") if l]
        ref = hf.decode_batch(seqs, skip_special_tokens=skip)
        for i, (d, r) in enumerate(zip(dec, ref)):
            if d != r:
                fail("random decode" + (" skip-special" if skip else ""), i,
                     f"ids {seqs[i]}: shadowrt {d!r} vs HF {r!r}")
    print(f"oracle: {len(seqs)} random id sequences decoded, with and without --skip-special")

    if failures:
        print(f"oracle: {len(failures)} MISMATCHES; the first ones:")
        for f in failures[:25]:
            print("  " + f)
        return 1
    print("oracle: all identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
