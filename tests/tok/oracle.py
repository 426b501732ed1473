#!/usr/bin/env python3
"""Compare shadowrt's tokenizer with Hugging Face `tokenizers` (the oracle) on a corpus.

  1. ids: `shadowrt tokenize --lines --json` on every corpus line == HF
     Tokenizer.encode(line.decode("utf-8", "replace"), add_special_tokens=False).ids;
  2. model vocabulary only (`--no-added`) on the lines that hold added-token spellings == HF
     with the added tokens taken out of tokenizer.json;
  3. round trip: `shadowrt detokenize --lines --json` of those ids == the line, for every line
     that is valid UTF-8, and == HF's decode of the same ids for every line;
  4. decoding random id sequences (specials, split multi-byte characters) == HF's decode;
  5. every Split behaviour (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous;
     six combinations with invert) put on the file's first and third splits: ids == HF's on
     800 lines;
  6. lstrip / rstrip / single_word added tokens: ids == HF's.

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
    spec_orig = json.loads(json.dumps(spec))
    spec["added_tokens"] = []
    hf_plain = Tokenizer.from_str(json.dumps(spec))
    sel = [i for i, t in enumerate(texts) if "<" in t or "\uff5c" in t or "|" in t][:8000]
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
    # HF's decode on every line that is not valid UTF-8 and on every 5th other line (the round
    # trip to the original text already covers the valid lines)
    dsel = [i for i in range(len(dec)) if i % 5 == 0 or "\ufffd" in texts[i]]
    hf_dec = dict(zip(dsel, hf.decode_batch([want[i] for i in dsel], skip_special_tokens=False)))
    n_valid = 0
    for i, d in enumerate(dec):
        try:
            lines[i].decode("utf-8")
            n_valid += 1
            if d != texts[i]:
                fail("round trip", i, f"{texts[i][:80]!r} came back as {d[:80]!r}")
        except UnicodeDecodeError:
            pass
        if i in hf_dec and d != hf_dec[i]:
            fail("decode", i, f"shadowrt {d[:80]!r} vs HF {hf_dec[i][:80]!r}")
    print(f"oracle: decode(encode(x)) == x on {n_valid} valid UTF-8 lines; decode == HF on {len(hf_dec)}")

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

    # 5. the other Split behaviours, as HF implements them
    sub = list(range(0, len(lines), max(1, len(lines) // 800)))[:800]
    sub_data = b"\n".join(lines[i] for i in sub)
    pts = spec_orig["pre_tokenizer"]["pretokenizers"]
    with tempfile.NamedTemporaryFile(suffix=".txt") as tt:
        tt.write(sub_data)
        tt.flush()
        for beh, inv in [("Isolated", True), ("Removed", False), ("MergedWithPrevious", True),
                         ("MergedWithNext", False), ("Contiguous", False), ("Contiguous", True)]:
            if True:
                for k in (0, 2):
                    pts[k]["behavior"], pts[k]["invert"] = beh, inv
                with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as tj:
                    json.dump(spec_orig, tj, ensure_ascii=False)
                    tj.flush()
                    out = run([shadowrt, "tokenize", "--tokenizer", tj.name, "--lines", "--json",
                               "--file", tt.name], b"")
                    ref = [e.ids for e in Tokenizer.from_file(tj.name).encode_batch(
                        [texts[i] for i in sub], add_special_tokens=False)]
                got = [json.loads(l) for l in out.decode().split("\n") if l]
                for j, (c, w) in enumerate(zip(got, ref)):
                    if c != w:
                        fail(f"split {beh} invert={inv}", sub[j],
                             f"{texts[sub[j]][:80]!r}: shadowrt {c[:10]} vs HF {w[:10]}")
    print(f"oracle: 6 split behaviour / invert variants: {len(sub)} lines each compared")

    # 6. added-token flags as HF applies them: lstrip on <think>, rstrip on </think>, both on
    # <｜Assistant｜>, single_word on <｜User｜>, on the lines with '<' and a few made for it
    for k in (0, 2):
        pts[k]["behavior"], pts[k]["invert"] = "Isolated", False
    for t in spec_orig["added_tokens"]:
        c = t["content"]
        t["lstrip"] = c in ("<think>", "<\uff5cAssistant\uff5c>")
        t["rstrip"] = c in ("</think>", "<\uff5cAssistant\uff5c>")
        t["single_word"] = c == "<\uff5cUser\uff5c>"
    made = ["a <think> b", "a  <think>b", " </think>  x", "x</think>\t\ty", "w<\uff5cUser\uff5c>w",
            "w <\uff5cUser\uff5c> w", "<\uff5cUser\uff5c>", "\u00e9<\uff5cUser\uff5c>", "1<\uff5cUser\uff5c>",
            "\u3000<think>\u3000</think>\u3000", "<think><think>  </think></think>",
            " \t<\uff5cAssistant\uff5c>\u2003 x"]
    fl = [texts[i] for i in range(len(texts)) if "<" in texts[i]][:3000] + made
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as tj, \
            tempfile.NamedTemporaryFile(suffix=".txt") as tt:
        json.dump(spec_orig, tj, ensure_ascii=False)
        tj.flush()
        tt.write("\n".join(fl).encode())
        tt.flush()
        out = run([shadowrt, "tokenize", "--tokenizer", tj.name, "--lines", "--json", "--file",
                   tt.name], b"")
        ref = [e.ids for e in Tokenizer.from_file(tj.name).encode_batch(fl, add_special_tokens=False)]
    got = [json.loads(l) for l in out.decode().split("\n") if l]
    if len(got) != len(ref):
        fail("added-token flags", 0, f"{len(got)} lines of ids for {len(ref)}")
    for j, (c, w) in enumerate(zip(got, ref)):
        if c != w:
            fail("added-token flags", j, f"{fl[j][:80]!r}: shadowrt {c[:12]} vs HF {w[:12]}")
    print(f"oracle: lstrip / rstrip / single_word: {len(fl)} lines compared")

    if failures:
        print(f"oracle: {len(failures)} MISMATCHES; the first ones:")
        for f in failures[:25]:
            print("  " + f)
        return 1
    print("oracle: all identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
