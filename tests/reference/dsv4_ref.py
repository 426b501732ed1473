#!/usr/bin/python3
"""dsv4_ref.py - independent NumPy reference of the DeepSeek-V4 forward pass (run it with
/usr/bin/python3, which has NumPy).

Commands

  logits --model DIR (--tokens 1,2,3 | --tokens-file F | --bytes TEXT)
         [--profile reference|f32] --out FILE
      Logits of every position of a prefill from position 0. FILE: raw little-endian float32
      [positions][vocab] (the layout of `shadowrt generate --logits`). --bytes uses the UTF-8
      bytes of TEXT as token ids (no BOS added). --tokens-file is raw little-endian int32.

  piece NAME --model DIR --layer L [--profile P] --in FILE --out FILE
        [--pos0 N] [--tokens-file F | --tokens 1,2,3] [--sub attn|ffn]
      One part of the model on raw little-endian float32 input rows (T = rows in FILE):
        attn        in  [T][hidden] u before attn_norm, positions pos0..pos0+T-1 of a sequence
                        that starts at pos0          out [T][hidden] after wo_b
        compressor  in  as attn                      out [N - pos0/ratio][head_dim] main
                        compressor entries of the complete blocks, N = (pos0+T)/ratio
        indexer     in  as attn (ratio-4 layers)     out int32 [T][index_topk] selected entry
                        numbers, best first, ties to the lower index, -1 padded
        moe         in  [T][hidden] before ffn_norm; token ids (--tokens-file) needed in the
                        hash-routed layers           out [T][hidden]
        mhc_pre     in  [T][hc][hidden] streams      out [T][hidden + hc + hc*hc]: u, post,
                        comb (row-major; comb[i][j] feeds new stream j); --sub picks the
                        attn (default) or ffn parameters of the layer
        mhc_post    in  [T][hc*hidden + hidden]: streams X then sub-layer output F
                                                     out [T][hc][hidden] = post*F + comb^T X
        hc_head     in  [T][hc][hidden] final streams (--layer ignored)  out [T][hidden]
        head        in  [T][hidden] hc_head output (--layer ignored)     out [T][vocab]
      In the reference profile inputs are first rounded to BF16 (the reference holds them so).

Profiles: reference (DeepSeek's rounding and fake-quant) and f32 (no rounding, no
fake-quant, float64 arithmetic). Details and every spec choice: README.md next to this file.
Exit status 0 on success, 1 with a message on stderr when an input or the checkpoint is wrong.
"""
import argparse
import os
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.stderr.write("dsv4_ref.py: NumPy is missing; run it with /usr/bin/python3 "
                     "(Debian python3-numpy)\n")
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv4_model as M  # noqa: E402
from dsv4_ckpt import CheckpointError  # noqa: E402

PIECES = ("attn", "compressor", "indexer", "moe", "mhc_pre", "mhc_post", "hc_head", "head")


class UsageError(Exception):
    pass


def read_f32_rows(path, width):
    try:
        a = np.fromfile(path, dtype="<f4")
    except OSError as e:
        raise UsageError("%s: %s" % (path, e.strerror))
    if a.size == 0 or a.size % width:
        raise UsageError("%s: %d float32 values is not a positive multiple of the row width %d"
                         % (path, a.size, width))
    return a.reshape(-1, width).astype(np.float32)


def read_tokens(args):
    if getattr(args, "tokens", None):
        try:
            return np.array([int(t) for t in args.tokens.split(",") if t.strip()], np.int64)
        except ValueError:
            raise UsageError("--tokens: expected comma-separated integers, got %r" % args.tokens)
    if getattr(args, "tokens_file", None):
        try:
            t = np.fromfile(args.tokens_file, dtype="<i4").astype(np.int64)
        except OSError as e:
            raise UsageError("%s: %s" % (args.tokens_file, e.strerror))
        if t.size == 0:
            raise UsageError("%s: no tokens (expected raw int32)" % args.tokens_file)
        return t
    if getattr(args, "bytes", None) is not None:
        return np.frombuffer(args.bytes.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    return None


def write_out(path, arr, dtype="<f4"):
    tmp = path + ".tmp"
    np.ascontiguousarray(arr).astype(dtype).tofile(tmp)
    os.replace(tmp, path)


def cmd_logits(args):
    m = M.Model(args.model)
    toks = read_tokens(args)
    if toks is None:
        raise UsageError("logits: give --tokens, --tokens-file or --bytes")
    if toks.min() < 0 or toks.max() >= m.cfg.vocab:
        raise UsageError("token id out of range [0, %d)" % m.cfg.vocab)
    t0 = time.time()
    lg = M.forward(m, toks, args.profile)
    write_out(args.out, lg)
    sys.stderr.write("logits: %d positions x %d vocab, profile %s, %.2f s -> %s\n"
                     % (lg.shape[0], lg.shape[1], args.profile, time.time() - t0, args.out))
    return 0


def cmd_piece(args):
    m = M.Model(args.model)
    c = m.cfg
    d, hc = c.dim, c.hc
    name = args.name
    if name not in ("hc_head", "head"):
        if args.layer is None:
            raise UsageError("piece %s needs --layer" % name)
        if not 0 <= args.layer < c.n_layers:
            raise UsageError("--layer %d out of range [0, %d)" % (args.layer, c.n_layers))
    L, P = args.layer, args.profile
    t0 = time.time()
    if name in ("attn", "compressor", "indexer"):
        u = read_f32_rows(args.inp, d)
        if name == "attn":
            out = M.attn_piece(m, L, u, P, args.pos0)
        elif name == "compressor":
            out = M.compressor_piece(m, L, u, P, args.pos0)
        else:
            out = M.indexer_piece(m, L, u, P, args.pos0)
    elif name == "moe":
        x = read_f32_rows(args.inp, d)
        toks = read_tokens(args)
        if toks is not None and toks.size != x.shape[0]:
            raise UsageError("moe: %d token ids for %d input rows" % (toks.size, x.shape[0]))
        if toks is None and L < c.n_hash:
            raise UsageError("moe: layer %d is hash-routed; give --tokens-file" % L)
        out = M.moe_piece(m, L, x, toks, P)
    elif name == "mhc_pre":
        out = M.mhc_pre_piece(m, L, read_f32_rows(args.inp, hc * d).reshape(-1, hc, d), P,
                              args.sub)
    elif name == "mhc_post":
        r = read_f32_rows(args.inp, hc * d + d)
        out = M.mhc_post_piece(m, L, r[:, :hc * d].reshape(-1, hc, d), r[:, hc * d:], P,
                               args.sub)
    elif name == "hc_head":
        out = M.hc_head_piece(m, read_f32_rows(args.inp, hc * d).reshape(-1, hc, d), P)
    else:
        out = M.head_piece(m, read_f32_rows(args.inp, d), P)
    write_out(args.out, out, "<i4" if name == "indexer" else "<f4")
    sys.stderr.write("piece %s: out %s, profile %s, %.2f s -> %s\n"
                     % (name, list(out.shape), P, time.time() - t0, args.out))
    return 0


def build_parser():
    ap = argparse.ArgumentParser(prog="dsv4_ref.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")

    def common(p):
        p.add_argument("--model", required=True, help="checkpoint directory (config.json + "
                       "safetensors, single or sharded)")
        p.add_argument("--profile", default="reference", choices=M.PROFILES)
        p.add_argument("--out", required=True, help="output file (raw little-endian)")
        p.add_argument("--tokens", help="comma-separated token ids")
        p.add_argument("--tokens-file", help="raw little-endian int32 token ids")

    lg = sub.add_parser("logits", help="logits of every position (float32 [T][vocab])")
    common(lg)
    lg.add_argument("--bytes", help="use the UTF-8 bytes of this text as token ids")
    pc = sub.add_parser("piece", help="one part of the model (see the list above)")
    pc.add_argument("name", choices=PIECES)
    common(pc)
    pc.add_argument("--layer", type=int)
    pc.add_argument("--in", dest="inp", required=True, help="input rows (raw float32)")
    pc.add_argument("--pos0", type=int, default=0, help="position of the first input row")
    pc.add_argument("--sub", default="attn", choices=("attn", "ffn"),
                    help="mhc_pre/mhc_post: which sub-layer's parameters")
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd is None:
        ap.print_help()
        return 1
    try:
        if args.cmd == "piece" and args.pos0 < 0:
            raise UsageError("--pos0 must be >= 0")
        return cmd_logits(args) if args.cmd == "logits" else cmd_piece(args)
    except (UsageError, CheckpointError, ValueError) as e:
        sys.stderr.write("dsv4_ref.py: %s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
