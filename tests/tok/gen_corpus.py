#!/usr/bin/env python3
"""Write the tokenizer test corpus: at least N lines (bytes, separated by b"\\n", no trailing
newline), deterministic for a given seed.

Half of it is text found on the machine (licence texts and documentation as English prose,
Python, C headers, shell, CMake and Perl sources as code), the rest is generated: CJK text,
numbers and digit runs, whitespace runs and every kind of line break (except \\n, the
separator), emoji (ZWJ sequences, skin tones, flags), combining marks and other scripts,
every added/special token of the tokenizer inside text, near-miss spellings of them, random
bytes (invalid UTF-8), and a few very long lines (long words, long runs) that exercise the
long-word paths.

usage: gen_corpus.py TOKENIZER_JSON OUT [--lines N] [--seed S]
"""
import argparse
import glob
import json
import os
import random

WORDS = ("the of and to in is was for on that with as by at from this be are or it an which "
         "not have has had but were their they all can more one also been other its into "
         "time only new would some two may first about when these there after over such "
         "cache token model layer prefix attention expert memory page tier request batch "
         "thread kernel decode prefill latency throughput sequence window compressed").split()

SPACES = [" ", "  ", "\t", "\r", "\r\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85",
          "\u00a0", "\u1680", "\u2000", "\u2002", "\u2003", "\u2009", "\u200a", "\u200b",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", " \r", "\r ", "\t \t"]


def machine_text(rng, limit):
    """Lines of prose and code from files that a Debian system has; sorted, then sampled."""
    pats = ["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
            "/usr/lib/python3*/*.py", "/usr/lib/python3*/*/*.py", "/usr/include/*.h",
            "/usr/include/*/*.h", "/usr/share/cmake*/Modules/*.cmake", "/usr/bin/*",
            "/usr/share/perl/*/*.pm", "/etc/*.conf"]
    files = []
    for p in pats:
        files.extend(sorted(glob.glob(p)))
    rng.shuffle(files)
    out = []
    for f in files:
        if len(out) >= limit:
            break
        try:
            if not os.path.isfile(f) or os.path.getsize(f) > 4 << 20:
                continue
            with open(f, "rb") as fh:
                data = fh.read(200_000)
        except OSError:
            continue
        if b"\0" in data:  # binaries
            continue
        lines = data.split(b"\n")
        take = min(len(lines), 300, limit - len(out))
        start = rng.randrange(0, max(1, len(lines) - take + 1))
        out.extend(lines[start:start + take])
    return out


def rand_chars(rng, ranges, n):
    s = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        s.append(chr(rng.randint(lo, hi)))
    return "".join(s)


CJK = [(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x3400, 0x4DBF),
       (0x9FA6, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF), (0xFF01, 0xFF5E), (0x3000, 0x303F)]
EMOJI = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
         (0x2600, 0x26FF), (0x2700, 0x27BF), (0x1FA70, 0x1FAFF)]
SCRIPTS = [(0x0400, 0x04FF), (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F),
           (0x0E00, 0x0E7F), (0x0370, 0x03FF), (0x10A0, 0x10FF), (0x0530, 0x058F),
           (0x1E00, 0x1EFF), (0x0100, 0x024F), (0x2100, 0x214F), (0x2190, 0x21FF),
           (0x2200, 0x22FF), (0x1D400, 0x1D7FF), (0x0080, 0x00FF), (0x2460, 0x24FF),
           (0x0660, 0x0669), (0x06F0, 0x06F9), (0x0966, 0x096F), (0xFF10, 0xFF19),
           (0x2070, 0x209F), (0x2150, 0x218F), (0x1F100, 0x1F1FF)]
COMBINING = [(0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F),
             (0x0483, 0x0489), (0x0591, 0x05BD), (0x093A, 0x094F)]


def prose(rng, n):
    w = [rng.choice(WORDS) for _ in range(n)]
    for i in range(len(w)):
        r = rng.random()
        if r < 0.08:
            w[i] = w[i].capitalize()
        elif r < 0.12:
            w[i] += rng.choice(",.;:!?")
        elif r < 0.14:
            w[i] = "'" + w[i] + rng.choice(["'s", "'t", "'re", "'ll", "'"])
        elif r < 0.16:
            w[i] = w[i].upper()
    return " ".join(w)


CODE = [
    "def {a}({b}, {c}=None):\n    return {b} + {c} if {c} else {b}",
    "for (int {a} = 0; {a} < {n}; {a}++) {{ {b}[{a}] = {c}[{a}] * 2; }}",
    "fn {a}(&mut self, {b}: u32) -> Result<Vec<{c}>, Error> {{ Ok(vec![]) }}",
    "const {a} = async ({b}) => {{ await fetch(`/api/${{{b}}}`); }};",
    "SELECT {a}, COUNT(*) FROM {b} WHERE {c} > {n} GROUP BY {a};",
    "if [[ -z \"${a}\" ]]; then echo \"{b}\" >&2; exit {n}; fi",
    "public static void {a}(String[] {b}) {{ System.out.println({c}); }}",
    "<div class=\"{a}\"><span id='{b}'>{c}</span></div>",
    "{{\"{a}\": [{n}, {n}.5, -{n}e-3], \"{b}\": null, \"{c}\": true}}",
    "#include <{a}.h>\n#define {b}({c}) (({c}) << {n})",
    "func ({a} *{b}) {c}(ctx context.Context) error {{ return nil }}",
    "  - name: {a}\n    value: \"{b}\"  # {c}",
    "x_{a} := {b}[{n}:{n}+{n}] ++ {c}?.{a} ?? {b} !== {c} && {a} >>= {n}",
]


def code(rng):
    ident = lambda: rng.choice(["x", "idx", "tmp", "buf", "kv_cache", "Token", "getValue",
                                "__init__", "self", "ptr", "MAX_LEN", "_priv", "données"])
    return rng.choice(CODE).format(a=ident(), b=ident(), c=ident(), n=rng.randint(0, 99999)).split("\n")


def numbers(rng):
    k = rng.randrange(7)
    if k == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 40)))
    if k == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}"
    if k == 2:
        return " ".join(str(rng.randint(0, 99999)) for _ in range(rng.randint(2, 20)))
    if k == 3:
        return f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T" \
               f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    if k == 4:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 80)))
    if k == 5:
        return rand_chars(rng, [(0x30, 0x39), (0x660, 0x669), (0xFF10, 0xFF19), (0x2460, 0x2473),
                                (0x00B2, 0x00B3), (0x0966, 0x096F)], rng.randint(1, 30))
    return f"${rng.randint(0, 10**6):,}.{rng.randint(0, 99):02d} ({rng.randint(0, 100)}%)"


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rng.choice(SPACES) * rng.randint(1, 6))
        if rng.random() < 0.6:
            parts.append(rng.choice(WORDS + ["x", "1", "!", "中文", "é"]))
    return "".join(parts)


def emoji(rng):
    s = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.4:
            s.append(rand_chars(rng, EMOJI, 1))
        elif r < 0.55:
            s.append(rand_chars(rng, EMOJI, 1) + chr(rng.randint(0x1F3FB, 0x1F3FF)))
        elif r < 0.7:
            s.append("\u200d".join(rand_chars(rng, EMOJI, 1) for _ in range(rng.randint(2, 4))))
        elif r < 0.8:
            s.append(chr(rng.randint(0x1F1E6, 0x1F1FF)) + chr(rng.randint(0x1F1E6, 0x1F1FF)))
        else:
            s.append(rand_chars(rng, EMOJI, 1) + "\ufe0f")
        if rng.random() < 0.5:
            s.append(rng.choice([" ", "", "!", prose(rng, 2), "\u3002"]))
    return "".join(s)


def combining(rng):
    s = []
    for _ in range(rng.randint(1, 12)):
        base = rng.choice(["a", "e", "o", "n", "Z", "\u0915", "\u05d0", "\u0627", " ", "1", "!"])
        s.append(base + rand_chars(rng, COMBINING, rng.randint(0, 4)))
    return "".join(s)


def cjk(rng):
    s = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.6:
            s.append(rand_chars(rng, CJK[:3], rng.randint(1, 16)))
        elif r < 0.8:
            s.append(rand_chars(rng, CJK, rng.randint(1, 8)))
        else:
            s.append(rng.choice([" ", "\u3002", "\uff0c", "123", prose(rng, 2), "\u3001", "\u300c"]))
    return "".join(s)


def scripts(rng):
    return " ".join(rand_chars(rng, SCRIPTS, rng.randint(1, 10)) for _ in range(rng.randint(1, 5)))


def specials(rng, added):
    s = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        tok = rng.choice(added)
        if r < 0.5:
            s.append(tok)
        elif r < 0.65:
            s.append(tok[: rng.randint(1, max(1, len(tok) - 1))])  # near miss
        elif r < 0.75:
            s.append(tok + tok)
        else:
            s.append(rng.choice([" ", "", "\n".replace("\n", "\r"), prose(rng, 3), "123", "中文"]))
        if rng.random() < 0.5:
            s.append(rng.choice([" ", "  ", "", "x", "\t"]))
    return "".join(s)


def random_bytes(rng):
    n = rng.randint(1, 60)
    b = bytearray(rng.randrange(256) for _ in range(n))
    if rng.random() < 0.5:  # mostly text with a few broken sequences
        t = bytearray(prose(rng, 4).encode())
        for _ in range(rng.randint(1, 4)):
            t.insert(rng.randrange(len(t) + 1), rng.choice([0x80, 0xBF, 0xC0, 0xC1, 0xE0, 0xED,
                                                             0xF0, 0xF4, 0xF5, 0xFF, 0xE4, 0xF8]))
        b = t
    return bytes(c for c in b if c != 0x0A)


def mixed(rng, added):
    gens = [lambda: prose(rng, rng.randint(3, 16)), lambda: cjk(rng), lambda: numbers(rng),
            lambda: whitespace(rng), lambda: emoji(rng), lambda: combining(rng),
            lambda: scripts(rng), lambda: specials(rng, added), lambda: code(rng)[0]]
    return (rng.choice(["", " ", "\t", "\u3000"])).join(rng.choice(gens)() for _ in range(rng.randint(2, 3)))


def long_lines(rng):
    return [
        "a" * 5000, "ab" * 3000, " " * 20000 + "x", "\t" * 3000, "9" * 10000,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20000)),
        rand_chars(rng, CJK[:3], 8000), " \r" * 4000, "!" * 6000 + "abc",
        "".join(rng.choice(["the", "cache", "中", "1", " ", "é", "🙂"]) for _ in range(10000)),
        "x" + "\u0301" * 3000, "-" * 10000, "\u00e9" * 5000,
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=20261201)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.tokenizer, encoding="utf-8") as f:
        added = [t["content"] for t in json.load(f)["added_tokens"]]

    lines = []
    lines.extend(machine_text(rng, a.lines // 2))
    for t in added:  # every added token, alone and inside text
        lines.append(t.encode())
        lines.append(f"{prose(rng, 3)}{t}{prose(rng, 2)} {t}x".encode())
    lines.extend(s.encode() for s in long_lines(rng))
    kinds = [prose, cjk, numbers, whitespace, emoji, combining, scripts]
    while len(lines) < a.lines:
        r = rng.random()
        if r < 0.07:
            lines.append(random_bytes(rng))
        elif r < 0.14:
            lines.append(specials(rng, added).encode())
        elif r < 0.22:
            lines.extend(l.encode() for l in code(rng))
        elif r < 0.45:
            lines.append(mixed(rng, added).encode())
        else:
            k = rng.choice(kinds)
            lines.append((k(rng, rng.randint(3, 24)) if k is prose else k(rng)).encode())
    with open(a.out, "wb") as f:
        f.write(b"\n".join(l.replace(b"\n", b"") for l in lines))
    print(f"gen_corpus: {len(lines)} lines, {sum(len(l) + 1 for l in lines)} bytes -> {a.out}")


if __name__ == "__main__":
    main()
