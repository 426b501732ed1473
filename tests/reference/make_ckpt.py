#!/usr/bin/python3
"""Write a deterministic synthetic DeepSeek-V4 checkpoint (config.json + safetensors) for a
model preset, with the real tensor names, shapes and dtypes (spec section 6):

    /usr/bin/python3 make_ckpt.py [--preset conf/models/tiny.yaml] [--seed 1] [--shards N] OUTDIR

FP8 weights are E4M3 with one UE8M0 scale per 128x128 block, routed experts packed FP4 (I8,
low nibble = even index) with one UE8M0 scale per 32 along K, norms/embedding/head/router/
compressor weights BF16, mHC parameters, ape, attn_sink and gate bias F32, tid2eid I64.
Every tensor is drawn from its own generator seeded by (seed, crc32(name)), so the values do
not depend on the order of writing. This is the fallback when `shadowrt gen-model` is not built.
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsv4_formats import (encode_e2m1, encode_e4m3, f32_to_bf16_bits, pack_fp4,  # noqa: E402
                          ue8m0_scale)
from dsv4_ckpt import load_yaml, write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PRESET = os.path.join(HERE, "..", "..", "conf", "models", "tiny.yaml")


def _e8m0_codes(s):
    return (np.log2(s).astype(np.int64) + 127).astype(np.uint8)


class _Gen:
    def __init__(self, seed):
        self.seed = seed
        self.t = {}

    def rng(self, name):
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def f32(self, name, arr):
        self.t[name] = ("F32", np.asarray(arr, dtype=np.float32))

    def bf16(self, name, arr):
        self.t[name] = ("BF16", f32_to_bf16_bits(np.asarray(arr, dtype=np.float32)))

    def normal(self, name, shape, std, mean=0.0):
        return mean + std * self.rng(name).standard_normal(shape)

    def fp8(self, prefix, n, k):
        w = self.normal(prefix + ".weight", (n, k), 1.0 / np.sqrt(k))
        nb, kb = (n + 127) // 128, (k + 127) // 128
        pad = np.zeros((nb * 128, kb * 128))
        pad[:n, :k] = np.abs(w)
        amax = pad.reshape(nb, 128, kb, 128).max(axis=(1, 3))
        s = ue8m0_scale(amax, 448.0, 1e-4)
        sfull = np.repeat(np.repeat(s, 128, 0), 128, 1)[:n, :k]
        self.t[prefix + ".weight"] = ("F8_E4M3", encode_e4m3(np.clip(w / sfull, -448, 448)))
        self.t[prefix + ".scale"] = ("F8_E8M0", _e8m0_codes(s))

    def fp4(self, prefix, n, k):
        w = self.normal(prefix + ".weight", (n, k), 1.0 / np.sqrt(k))
        amax = np.abs(w).reshape(n, k // 32, 32).max(axis=-1)
        s = ue8m0_scale(amax, 6.0, 6.0 * 2.0 ** -126)
        codes = encode_e2m1(np.clip(w / np.repeat(s, 32, 1), -6, 6))
        self.t[prefix + ".weight"] = ("I8", pack_fp4(codes))
        self.t[prefix + ".scale"] = ("F8_E8M0", _e8m0_codes(s))

    def norm(self, name, n):
        self.bf16(name, self.normal(name, (n,), 0.1, 1.0))


def _block(g, c, p, ratio, hash_routed):
    d, h, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    hc = c["hc_mult"]
    mix = (2 + hc) * hc
    for sub in ("attn", "ffn"):
        g.f32(p + "hc_%s_fn" % sub, g.normal(p + "hc_%s_fn" % sub, (mix, hc * d),
                                              1.0 / np.sqrt(hc * d)))
        g.f32(p + "hc_%s_base" % sub, g.normal(p + "hc_%s_base" % sub, (mix,), 0.5))
        g.f32(p + "hc_%s_scale" % sub, g.normal(p + "hc_%s_scale" % sub, (3,), 0.2, 1.0))
    g.norm(p + "attn_norm.weight", d)
    g.norm(p + "ffn_norm.weight", d)
    a = p + "attn."
    ql, grp, olr = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    g.fp8(a + "wq_a", ql, d)
    g.norm(a + "q_norm.weight", ql)
    g.fp8(a + "wq_b", h * hd, ql)
    g.fp8(a + "wkv", hd, d)
    g.norm(a + "kv_norm.weight", hd)
    g.fp8(a + "wo_a", grp * olr, h * hd // grp)
    g.fp8(a + "wo_b", d, grp * olr)
    g.f32(a + "attn_sink", g.normal(a + "attn_sink", (h,), 1.0))
    comps = []
    if ratio:
        comps.append((a + "compressor.", ratio, hd))
    if ratio == 4:
        ih, idim = c["index_n_heads"], c["index_head_dim"]
        g.fp8(a + "indexer.wq_b", ih * idim, ql)
        g.bf16(a + "indexer.weights_proj.weight",
               g.normal(a + "indexer.weights_proj.weight", (ih, d), 1.0 / np.sqrt(d)))
        comps.append((a + "indexer.compressor.", 4, idim))
    for cp, r, w in comps:
        coff = 2 if r == 4 else 1
        for nm in ("wkv", "wgate"):
            g.bf16(cp + nm + ".weight", g.normal(cp + nm + ".weight", (coff * w, d),
                                                 1.0 / np.sqrt(d)))
        g.f32(cp + "ape", g.normal(cp + "ape", (r, coff * w), 0.5))
        g.norm(cp + "norm.weight", w)
    f = p + "ffn."
    e, k, inter = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    g.bf16(f + "gate.weight", g.normal(f + "gate.weight", (e, d), 1.0 / np.sqrt(d)))
    if hash_routed:
        r = g.rng(f + "gate.tid2eid")
        tid = np.stack([r.permutation(e)[:k] for _ in range(c["vocab_size"])])
        g.t[f + "gate.tid2eid"] = ("I64", tid.astype(np.int64))
    else:
        g.f32(f + "gate.bias", g.normal(f + "gate.bias", (e,), 0.1))
    for i in range(e):
        for wn, n_, k_ in (("w1", inter, d), ("w2", d, inter), ("w3", inter, d)):
            g.fp4(f + "experts.%d.%s" % (i, wn), n_, k_)
    for wn, n_, k_ in (("w1", inter, d), ("w2", d, inter), ("w3", inter, d)):
        g.fp8(f + "shared_experts.%s" % wn, n_, k_)


def make_tensors(c, seed=1):
    """{name: (dtype, array)} of a whole synthetic checkpoint for config dict `c`."""
    g = _Gen(seed)
    d, v, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    g.bf16("embed.weight", g.normal("embed.weight", (v, d), 1.0))
    g.bf16("head.weight", g.normal("head.weight", (v, d), 1.0 / np.sqrt(d)))
    g.norm("norm.weight", d)
    for pfx in ("", "mtp.0."):
        g.f32(pfx + "hc_head_fn", g.normal(pfx + "hc_head_fn", (hc, hc * d), 1.0 / np.sqrt(hc * d)))
        g.f32(pfx + "hc_head_base", g.normal(pfx + "hc_head_base", (hc,), 0.5))
        g.f32(pfx + "hc_head_scale", g.normal(pfx + "hc_head_scale", (1,), 0.2, 1.0))
    n = c["num_hidden_layers"]
    for layer in range(n):
        _block(g, c, "layers.%d." % layer, c["compress_ratios"][layer],
               layer < c["num_hash_layers"])
    for m in range(c.get("num_nextn_predict_layers", 0)):
        p = "mtp.%d." % m
        _block(g, c, p, c["compress_ratios"][n + m] if len(c["compress_ratios"]) > n + m else 0,
               False)
        g.fp8(p + "e_proj", d, d)
        g.fp8(p + "h_proj", d, d)
        for nm in ("enorm", "hnorm", "norm"):
            g.norm(p + nm + ".weight", d)
    return g.t


def write_checkpoint(out_dir, config, seed=1, shards=1):
    os.makedirs(out_dir, exist_ok=True)
    t = make_tensors(config, seed)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    meta = {"format": "pt", "generator": "tests/reference/make_ckpt.py", "seed": str(seed)}
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), t, meta)
        return
    names = sorted(t)
    wmap = {}
    for s in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {nm: t[nm] for nm in names[s::shards]}
        write_safetensors(os.path.join(out_dir, fname), part, meta)
        wmap.update({nm: fname for nm in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--preset", default=DEFAULT_PRESET, help="model preset YAML or config.json")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shards", type=int, default=1, help="write N shards plus an index")
    a = ap.parse_args(argv)
    if a.preset.endswith(".json"):
        with open(a.preset) as f:
            cfg = json.load(f)
    else:
        cfg = load_yaml(a.preset)
    write_checkpoint(a.out_dir, cfg, a.seed, a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
