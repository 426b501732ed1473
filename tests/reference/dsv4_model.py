"""Independent NumPy reference of the DeepSeek-V4 forward pass (spec sections 1-4, 6, 7, 9).

Two numerics profiles:

* ``reference`` - DeepSeek's rounding points: activations held in BF16 between ops, FP8 GEMMs
  with dynamic per-128 activation quantisation (UE8M0 scales), FP4 experts, FP8 fake-quant of
  window/compressed KV (nope dims, blocks of 64), FP4 fake-quant of the indexer, BF16 softmax
  probabilities before P.V.  Element-wise math is float32; every matrix product is computed
  in float64 and rounded once to float32 (a faithful model of "fp32 accumulation": the exact
  sum rounded once), and FP8/FP4 GEMMs accumulate per K block in float32 with the scales.
* ``f32`` - no rounding and no fake-quant at all: dequantised weights, float64 arithmetic
  throughout (so it is a tighter reference than any fp32 engine).

Everything works on a whole sequence at once (prefill semantics of spec 2.3): position p of
the sequence sees the window max(pos0, p-127)..p and compressed entries j < (p+1)/m.

Public entry points: ``Model(dir)``, ``forward(model, tokens, profile)`` and the pieces
``attn_piece``, ``compressor_piece``, ``indexer_piece``, ``moe_piece``, ``mhc_pre_piece``,
``mhc_post_piece``, ``hc_head_piece``, ``head_piece`` (all take and return NumPy arrays).
"""
import math

import numpy as np

from dsv4_ckpt import Checkpoint, CheckpointError
from dsv4_formats import (fp4_fake_quant, fp8_fake_quant, fp8_quant_blocks, hadamard_matrix,
                          round_bf16)

PROFILES = ("reference", "f32")
QCHUNK = 256          # queries per attention / indexer chunk (bounds memory, not results)


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
class Config:
    """The config.json keys this reference uses, under short names."""

    def __init__(self, c):
        def need(k):
            if k not in c:
                raise CheckpointError("config: key %s missing" % k)
            return c[k]
        self.raw = c
        self.dim = need("hidden_size")
        self.n_layers = need("num_hidden_layers")
        self.n_heads = need("num_attention_heads")
        self.head_dim = need("head_dim")
        self.rope_dim = need("qk_rope_head_dim")
        self.q_lora = need("q_lora_rank")
        self.o_groups = need("o_groups")
        self.o_lora = need("o_lora_rank")
        self.window = need("sliding_window")
        self.ratios = list(need("compress_ratios"))
        self.idx_heads = need("index_n_heads")
        self.idx_dim = need("index_head_dim")
        self.idx_topk = need("index_topk")
        self.vocab = need("vocab_size")
        self.n_experts = need("n_routed_experts")
        self.topk = need("num_experts_per_tok")
        self.inter = need("moe_intermediate_size")
        self.n_hash = need("num_hash_layers")
        self.route_scale = float(need("routed_scaling_factor"))
        self.swiglu_limit = float(c.get("swiglu_limit", 0.0))
        self.hc = need("hc_mult")
        self.sinkhorn_iters = need("hc_sinkhorn_iters")
        self.hc_eps = float(need("hc_eps"))
        self.eps = float(need("rms_norm_eps"))
        self.rope_theta = float(need("rope_theta"))
        self.compress_rope_theta = float(need("compress_rope_theta"))
        rs = c.get("rope_scaling") or {}
        self.yarn_factor = float(rs.get("factor", 1.0))
        self.yarn_orig = int(rs.get("original_max_position_embeddings", 0))
        self.beta_fast = float(rs.get("beta_fast", 32))
        self.beta_slow = float(rs.get("beta_slow", 1))
        if c.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus":
            raise CheckpointError("config: scoring_func %s not supported (sqrtsoftplus only)"
                                  % c.get("scoring_func"))
        if len(self.ratios) < self.n_layers:
            raise CheckpointError("config: compress_ratios has %d entries, need >= %d"
                                  % (len(self.ratios), self.n_layers))
        if self.head_dim % 64 or self.rope_dim % 2 or self.rope_dim >= self.head_dim:
            raise CheckpointError("config: head_dim %d / qk_rope_head_dim %d unsupported"
                                  % (self.head_dim, self.rope_dim))


# --------------------------------------------------------------------------------------------
# numerics
# --------------------------------------------------------------------------------------------
class Num:
    """Rounding policy of one profile. `dt` is the element-wise dtype."""

    def __init__(self, profile):
        if profile not in PROFILES:
            raise ValueError("profile must be one of %s, got %r" % (PROFILES, profile))
        self.ref = profile == "reference"
        self.dt = np.float32 if self.ref else np.float64

    def a(self, x):
        return np.asarray(x, dtype=self.dt)

    def bf(self, x):
        """Round to BF16 in the reference profile; identity (float64) in f32."""
        return round_bf16(x) if self.ref else np.asarray(x, dtype=np.float64)

    def mm(self, x, w):
        """x[..., K] . w[N, K]^T, accumulated exactly and rounded once to the working dtype."""
        return np.matmul(np.asarray(x, np.float64), np.asarray(w, np.float64).T).astype(self.dt)


def _q_gemm(nm, x, wq, ws, kblk, wscale_row):
    """Reference FP8/FP4 GEMM: x quantised to E4M3 per 128 channels, weight grid values wq
    [N, K] with scales ws; per K block (kblk wide) the exact dot product is rounded to fp32,
    multiplied by act_scale*weight_scale and accumulated in fp32. Output rounded to BF16."""
    lead = x.shape[:-1]
    x2 = np.asarray(x, np.float32).reshape(-1, x.shape[-1])
    k = x2.shape[1]
    aq, as_ = fp8_quant_blocks(x2, 128)
    acc = np.zeros((x2.shape[0], wq.shape[0]), dtype=np.float32)
    for b in range(k // kblk):
        sl = slice(b * kblk, (b + 1) * kblk)
        part = (aq[:, sl] @ wq[:, sl].T).astype(np.float32)
        sw = wscale_row(b)                                          # [N] float32
        sc = (as_[:, (b * kblk) // 128][:, None] * sw[None, :]).astype(np.float32)
        acc = (acc + part * sc).astype(np.float32)
    return round_bf16(acc).reshape(lead + (wq.shape[0],))


class Linear8:
    """FP8 E4M3 weight with 128x128 UE8M0 block scales."""

    def __init__(self, q, s):
        self.q, self.s = q, s
        n, k = q.shape
        self.deq = q * np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[:n, :k]
        self._srow = np.repeat(s, 128, 0)[:n]                       # [N, K/128]

    def __call__(self, nm, x):
        if not nm.ref:
            return nm.mm(x, self.deq)
        return _q_gemm(nm, x, self.q, self.s, 128, lambda b: self._srow[:, b])


class Linear4:
    """Packed-FP4 (E2M1) weight with one UE8M0 scale per 32 along K."""

    def __init__(self, q, s):
        self.q, self.s = q, s
        self.deq = q * np.repeat(s.astype(np.float64), 32, 1)

    def __call__(self, nm, x):
        if not nm.ref:
            return nm.mm(x, self.deq)
        return _q_gemm(nm, x, self.q, self.s, 32, lambda b: self.s[:, b])


# --------------------------------------------------------------------------------------------
# model weights
# --------------------------------------------------------------------------------------------
class Model:
    """A checkpoint directory plus lazily decoded weights (decoded once, cached)."""

    def __init__(self, model_dir):
        self.ck = Checkpoint(model_dir)
        self.cfg = Config(self.ck.config)
        self._cache = {}

    def _get(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def f32(self, name, shape=None):
        return self._get(("f", name), lambda: self.ck.f32(name, shape))

    def lin8(self, prefix, n, k):
        return self._get(("8", prefix), lambda: Linear8(*self.ck.fp8_weight(prefix, n, k)))

    def lin4(self, prefix, n, k):
        return self._get(("4", prefix), lambda: Linear4(*self.ck.fp4_weight(prefix, n, k)))

    def ints(self, name, shape=None):
        return self._get(("i", name), lambda: self.ck.ints(name, shape))

    def rope(self, layer):
        """(theta, yarn?) of a layer: compressed layers use compress_rope_theta with YaRN."""
        c = self.cfg
        if c.ratios[layer]:
            return self._get(("rope", 1), lambda: Rope(c, c.compress_rope_theta, True))
        return self._get(("rope", 0), lambda: Rope(c, c.rope_theta, False))


# --------------------------------------------------------------------------------------------
# elementary ops
# --------------------------------------------------------------------------------------------
def rmsnorm(nm, x, w, eps):
    """out = w * x / sqrt(mean(x^2) + eps); fp32 math, result BF16 (reference)."""
    x = nm.a(x)
    var = nm.a(np.mean(np.asarray(x, np.float64) ** 2, axis=-1, keepdims=True))
    y = x * (nm.a(1.0) / np.sqrt(var + nm.a(eps)))
    return nm.bf(nm.a(w) * y)


def head_rmsnorm(nm, q, eps):
    """Weightless per-head RMSNorm of the query. The reference does it on a BF16 tensor:
    squares rounded to BF16, mean rounded to BF16, rsqrt rounded to BF16, product rounded."""
    if not nm.ref:
        return q / np.sqrt(np.mean(q * q, axis=-1, keepdims=True) + eps)
    sq = round_bf16(q * q)
    mean = round_bf16(np.mean(sq.astype(np.float64), axis=-1, keepdims=True))
    r = round_bf16(np.float32(1.0) / np.sqrt(round_bf16(mean + np.float32(eps))))
    return round_bf16(q * r)


class Rope:
    """Interleaved RoPE on the last `rope_dim` dims: pairs (2i, 2i+1) rotated by pos*f_i.
    The frequency table is computed in float32 as DeepSeek's precompute_freqs_cis does
    (YaRN frequency blend for compressed layers); the reference profile also forms the angle
    pos*f_i in float32, the f32 profile in float64 from the same float32 frequencies."""

    def __init__(self, c, theta, yarn):
        rd = c.rope_dim
        e = np.arange(0, rd, 2, dtype=np.float32) / np.float32(rd)
        freqs = np.float32(1.0) / np.power(np.float32(theta), e)
        if yarn and c.yarn_orig > 0:
            def corr_dim(rot):
                return rd * math.log(c.yarn_orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
            low = max(math.floor(corr_dim(c.beta_fast)), 0)
            high = min(math.ceil(corr_dim(c.beta_slow)), rd - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(rd // 2, dtype=np.float32) - np.float32(low))
                           / np.float32(high - low), 0, 1).astype(np.float32)
            smooth = np.float32(1) - ramp
            freqs = (freqs / np.float32(c.yarn_factor) * (np.float32(1) - smooth)
                     + freqs * smooth).astype(np.float32)
            self.low, self.high = low, high
        self.freqs = freqs.astype(np.float32)

    def cos_sin(self, nm, pos):
        pos = np.asarray(pos)
        if nm.ref:
            ang = pos.astype(np.float32)[:, None] * self.freqs[None, :]
        else:
            ang = pos.astype(np.float64)[:, None] * self.freqs.astype(np.float64)[None, :]
        return np.cos(ang), np.sin(ang)

    def apply(self, nm, x, pos, inverse=False):
        """Rotate x[T, ..., rd] at positions pos[T]; returns a new array (BF16 in reference)."""
        cos, sin = self.cos_sin(nm, pos)
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (cos.shape[1],)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        if inverse:
            sin = -sin
        x = nm.a(x)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return nm.bf(out)


def hadamard(nm, x):
    """Walsh-Hadamard rotation (Sylvester order) of the last axis, scaled by n^-0.5."""
    n = x.shape[-1]
    h = hadamard_matrix(n)
    y = np.asarray(x, np.float64) @ h
    return nm.bf(nm.a(nm.a(y) * nm.a(n ** -0.5)))


def softmax_rows(nm, s, axis):
    with np.errstate(invalid="ignore"):
        m = np.max(s, axis=axis, keepdims=True)
        e = np.exp(s - m)
        return e / np.sum(e, axis=axis, keepdims=True)


def stable_topk(scores, k):
    """Indices of the k largest entries of each row, ties toward the lower index, in
    descending score order (-inf entries sort last)."""
    order = np.argsort(-np.asarray(scores, np.float64), axis=-1, kind="stable")
    return order[..., :k]


# --------------------------------------------------------------------------------------------
# attention: compressor, indexer, sparse attention
# --------------------------------------------------------------------------------------------
def compress(m, nm, layer, prefix, xa, pos0, ratio, width, rotate):
    """Token-level compressor (spec 2.3) over positions pos0..pos0+T-1 of a sequence that
    starts at pos0 (earlier rows are absent: kv = 0, score = -inf, like a fresh state).
    Returns (j_lo, entries[N - j_lo, width]) for the complete blocks j_lo <= j < N,
    N = (pos0+T)//ratio, j_lo = pos0//ratio (first block with a present token)."""
    c = m.cfg
    t = xa.shape[0]
    n = (pos0 + t) // ratio
    j_lo = pos0 // ratio
    if n <= j_lo:
        return j_lo, np.zeros((0, width), dtype=nm.dt)
    overlap = ratio == 4
    coff = 2 if overlap else 1
    d = c.dim
    wkv = m.f32(prefix + "wkv.weight", (coff * width, d))
    wgate = m.f32(prefix + "wgate.weight", (coff * width, d))
    ape = nm.a(m.f32(prefix + "ape", (ratio, coff * width)))
    pos = pos0 + np.arange(t)
    x = nm.a(xa)
    kv = nm.mm(x, wkv)
    sc = nm.mm(x, wgate) + ape[pos % ratio]
    jb0 = max(0, j_lo - 1) if overlap else j_lo
    base = jb0 * ratio
    nb = n - jb0
    rows_kv = np.zeros((nb * ratio, coff * width), dtype=nm.dt)
    rows_sc = np.full((nb * ratio, coff * width), -np.inf, dtype=nm.dt)
    keep = pos < n * ratio
    rows_kv[pos[keep] - base] = kv[keep]
    rows_sc[pos[keep] - base] = sc[keep]
    rows_kv = rows_kv.reshape(nb, ratio, coff * width)
    rows_sc = rows_sc.reshape(nb, ratio, coff * width)
    if overlap:
        prev_kv = np.concatenate([np.zeros((1, ratio, width), nm.dt), rows_kv[:-1, :, :width]])
        prev_sc = np.concatenate([np.full((1, ratio, width), -np.inf, nm.dt),
                                  rows_sc[:-1, :, :width]])
        all_kv = np.concatenate([prev_kv, rows_kv[:, :, width:]], axis=1)
        all_sc = np.concatenate([prev_sc, rows_sc[:, :, width:]], axis=1)
    else:
        all_kv, all_sc = rows_kv, rows_sc
    first = j_lo - jb0
    all_kv, all_sc = all_kv[first:], all_sc[first:]
    w = nm.a(softmax_rows(nm, all_sc, axis=1))
    pooled = nm.a(np.sum(all_kv * w, axis=1))
    e = rmsnorm(nm, nm.bf(pooled), m.f32(prefix + "norm.weight", (width,)), c.eps)
    rd = c.rope_dim
    e = e.copy()
    e[:, -rd:] = m.rope(layer).apply(nm, e[:, -rd:], np.arange(j_lo, n) * ratio)
    if nm.ref:
        if rotate:
            e = fp4_fake_quant(hadamard(nm, e), 32)
        else:
            e[:, :-rd] = fp8_fake_quant(e[:, :-rd], 64)
    elif rotate:
        e = hadamard(nm, e)
    return j_lo, e


def visible_mask(pos, j_lo, count, ratio):
    """[T, count] bool: compressed entry j_lo+s visible to position p iff j < (p+1)//ratio."""
    j = j_lo + np.arange(count)
    return j[None, :] < ((np.asarray(pos) + 1) // ratio)[:, None]


def indexer(m, nm, layer, xa, qr, pos0):
    """Lightning indexer (spec 2.4). Returns (j_lo, sel [T, index_topk] int32 absolute entry
    indices in descending score order, -1 padded, mask [T, S] bool of the selected entries)."""
    c = m.cfg
    p = "layers.%d.attn.indexer." % layer
    t = xa.shape[0]
    pos = pos0 + np.arange(t)
    ih, idim, rd = c.idx_heads, c.idx_dim, c.rope_dim
    q = m.lin8(p + "wq_b", ih * idim, c.q_lora)(nm, qr).reshape(t, ih, idim)
    q = q.copy()
    q[..., -rd:] = m.rope(layer).apply(nm, q[..., -rd:], pos)
    q = hadamard(nm, q)
    if nm.ref:
        q = fp4_fake_quant(q, 32)
    j_lo, k = compress(m, nm, layer, p + "compressor.", xa, pos0, 4, idim, True)
    w = nm.bf(nm.mm(xa, m.f32(p + "weights_proj.weight", (ih, c.dim))))
    w = nm.bf(w * nm.a(idim ** -0.5 * ih ** -0.5))
    s_count = k.shape[0]
    vis = visible_mask(pos, j_lo, s_count, 4)
    sel = np.full((t, c.idx_topk), -1, dtype=np.int32)
    mask = np.zeros((t, s_count), dtype=bool)
    for t0 in range(0, t, QCHUNK):
        t1 = min(t, t0 + QCHUNK)
        sc = nm.bf(np.einsum("thd,sd->ths", np.asarray(q[t0:t1], np.float64),
                             np.asarray(k, np.float64)).astype(nm.dt))
        sc = nm.bf(np.maximum(sc, 0) * w[t0:t1, :, None])
        tot = nm.bf(np.sum(np.asarray(sc, np.float64), axis=1).astype(nm.dt))
        tot = np.where(vis[t0:t1], tot, -np.inf)
        kk = min(c.idx_topk, s_count)
        top = stable_topk(tot, kk)
        nvis = vis[t0:t1].sum(axis=1)
        for r in range(t1 - t0):
            chosen = top[r, :min(kk, nvis[r])]
            sel[t0 + r, :len(chosen)] = chosen + j_lo
            mask[t0 + r, chosen] = True
    return j_lo, sel, mask


def sparse_attention(nm, q, kv, comp, cmask, sink, window):
    """o[t,h] = sum_k p_k v_k / (sum_k p_k + exp(sink_h - max)) over the window keys
    (t-window, t] and the compressed keys with cmask[t] set; K = V; scale head_dim^-0.5.
    Reference profile: fp32 scores, exp relative to the row max, probabilities rounded to
    BF16 before P.V, output BF16."""
    t, h, hd = q.shape
    scale = nm.a(hd ** -0.5)
    out = np.empty((t, h, hd), dtype=nm.dt)
    sink = nm.a(sink)
    ncomp = 0 if comp is None else comp.shape[0]
    for t0 in range(0, t, QCHUNK):
        t1 = min(t, t0 + QCHUNK)
        k0 = max(0, t0 - window + 1)
        keys = kv[k0:t1]
        tt = np.arange(t0, t1)[:, None]
        kk = np.arange(k0, t1)[None, :]
        mask = (kk <= tt) & (kk > tt - window)
        if ncomp:
            keys = np.concatenate([keys, comp])
            mask = np.concatenate([mask, cmask[t0:t1]], axis=1)
        s = nm.a(np.einsum("thd,kd->thk", np.asarray(q[t0:t1], np.float64),
                           np.asarray(keys, np.float64)).astype(nm.dt) * scale)
        s = np.where(mask[:, None, :], s, -np.inf)
        mx = np.max(s, axis=-1, keepdims=True)
        e = nm.a(np.exp(s - mx))
        denom = nm.a(np.sum(np.asarray(e, np.float64), axis=-1, keepdims=True)) \
            + nm.a(np.exp(sink[None, :, None] - mx))
        pv = np.einsum("thk,kd->thd", np.asarray(nm.bf(e), np.float64),
                       np.asarray(keys, np.float64)).astype(nm.dt)
        out[t0:t1] = nm.bf(pv / denom)
    return out


def attention(m, nm, layer, xa, pos0=0, info=None):
    """Attention sub-layer on xa [T, dim] (already attn_norm'ed) at positions pos0.. of a
    sequence starting at pos0. Returns the output after wo_b [T, dim]."""
    c = m.cfg
    p = "layers.%d.attn." % layer
    t = xa.shape[0]
    pos = pos0 + np.arange(t)
    h, hd, rd, d = c.n_heads, c.head_dim, c.rope_dim, c.dim
    ratio = c.ratios[layer]
    rope = m.rope(layer)
    qr = rmsnorm(nm, m.lin8(p + "wq_a", c.q_lora, d)(nm, xa),
                 m.f32(p + "q_norm.weight", (c.q_lora,)), c.eps)
    q = m.lin8(p + "wq_b", h * hd, c.q_lora)(nm, qr).reshape(t, h, hd)
    q = head_rmsnorm(nm, q, c.eps)
    q[..., -rd:] = rope.apply(nm, q[..., -rd:], pos)
    kv = rmsnorm(nm, m.lin8(p + "wkv", hd, d)(nm, xa), m.f32(p + "kv_norm.weight", (hd,)), c.eps)
    kv[:, -rd:] = rope.apply(nm, kv[:, -rd:], pos)
    if nm.ref:
        kv[:, :-rd] = fp8_fake_quant(kv[:, :-rd], 64)
    comp, cmask = None, None
    if ratio:
        j_lo, comp = compress(m, nm, layer, p + "compressor.", xa, pos0, ratio, hd, False)
        if ratio == 4:
            _, sel, cmask = indexer(m, nm, layer, xa, qr, pos0)
            if info is not None:
                info["indexer_sel"] = sel
        else:
            cmask = visible_mask(pos, j_lo, comp.shape[0], ratio)
        if info is not None:
            info["n_comp"] = comp.shape[0]
            info["comp_visible"] = visible_mask(pos, j_lo, comp.shape[0], ratio)
            info["comp"] = comp
    o = sparse_attention(nm, q, kv, comp, cmask, m.f32(p + "attn_sink", (h,)), c.window)
    o[..., -rd:] = rope.apply(nm, o[..., -rd:], pos, inverse=True)
    g = c.o_groups
    wo_a = m.lin8(p + "wo_a", g * c.o_lora, h * hd // g)
    wa = nm.bf(wo_a.deq).reshape(g, c.o_lora, h * hd // g)        # convert.py: wo_a -> bf16
    og = np.einsum("tgd,grd->tgr", np.asarray(o, np.float64).reshape(t, g, -1),
                   np.asarray(wa, np.float64))
    og = nm.bf(og.astype(nm.dt)).reshape(t, g * c.o_lora)
    return m.lin8(p + "wo_b", d, g * c.o_lora)(nm, og)


# --------------------------------------------------------------------------------------------
# MoE
# --------------------------------------------------------------------------------------------
def _swiglu(nm, c, g, u, w=None):
    g, u = nm.a(g), nm.a(u)
    if c.swiglu_limit > 0:
        u = np.clip(u, -c.swiglu_limit, c.swiglu_limit)
        g = np.minimum(g, nm.a(c.swiglu_limit))
    hh = nm.a(g / (nm.a(1.0) + np.exp(-g))) * u
    if w is not None:
        hh = nm.a(w) * hh
    return nm.bf(hh)


def route(m, nm, layer, xf, tokens):
    """(weights [T, k], expert indices [T, k]) of the gate (spec 4)."""
    c = m.cfg
    p = "layers.%d.ffn.gate." % layer
    lg = nm.mm(xf, m.f32(p + "weight", (c.n_experts, c.dim)))
    sp = np.where(lg > 20, lg, np.log1p(np.exp(np.minimum(lg, 20))))
    s = nm.a(np.sqrt(nm.a(sp)))
    if layer < c.n_hash:
        if tokens is None:
            raise ValueError("layer %d is hash-routed: token ids are needed" % layer)
        tid = m.ints(p + "tid2eid")
        if tid.shape != (c.vocab, c.topk):
            raise CheckpointError("%s: tid2eid has shape %s, expected %s"
                                  % (m.ck.dir, list(tid.shape), [c.vocab, c.topk]))
        idx = tid[np.asarray(tokens)]
    else:
        bias = nm.a(m.f32(p + "bias", (c.n_experts,)))
        idx = stable_topk(s + bias, c.topk)
    w = np.take_along_axis(s, idx, axis=1)
    w = nm.a(w / np.sum(w, axis=1, keepdims=True))
    return nm.a(w * nm.a(c.route_scale)), idx


def moe(m, nm, layer, xf, tokens):
    """MoE on xf [T, dim] (already ffn_norm'ed): routed FP4 experts + shared FP8 expert."""
    c = m.cfg
    p = "layers.%d.ffn." % layer
    d, inter = c.dim, c.inter
    w, idx = route(m, nm, layer, xf, tokens)
    y = np.zeros((xf.shape[0], d), dtype=nm.dt)
    for e in range(c.n_experts):
        rows, slot = np.nonzero(idx == e)
        if rows.size == 0:
            continue
        ep = p + "experts.%d." % e
        xe = xf[rows]
        hh = _swiglu(nm, c, m.lin4(ep + "w1", inter, d)(nm, xe),
                     m.lin4(ep + "w3", inter, d)(nm, xe), w[rows, slot][:, None])
        y[rows] = nm.a(y[rows] + m.lin4(ep + "w2", d, inter)(nm, hh))
    sp = p + "shared_experts."
    hh = _swiglu(nm, c, m.lin8(sp + "w1", inter, d)(nm, xf), m.lin8(sp + "w3", inter, d)(nm, xf))
    y = nm.a(y + m.lin8(sp + "w2", d, inter)(nm, hh))
    return nm.bf(y)


# --------------------------------------------------------------------------------------------
# mHC residual and head
# --------------------------------------------------------------------------------------------
def _hc_mixes(nm, c, x, fn):
    t = x.shape[0]
    flat = nm.a(x).reshape(t, -1)
    ms = nm.a(np.mean(np.asarray(flat, np.float64) ** 2, axis=-1, keepdims=True))
    r = nm.a(1.0) / np.sqrt(ms + nm.a(c.eps))
    return nm.a(nm.mm(flat, fn) * r)


def sinkhorn(nm, comb, iters, eps):
    """Row softmax + eps, then column / row normalisations, iters rounds in all (spec 3)."""
    comb = nm.a(softmax_rows(nm, nm.a(comb), axis=-1)) + nm.a(eps)
    comb = comb / (np.sum(comb, axis=-2, keepdims=True) + nm.a(eps))
    for _ in range(iters - 1):
        comb = comb / (np.sum(comb, axis=-1, keepdims=True) + nm.a(eps))
        comb = comb / (np.sum(comb, axis=-2, keepdims=True) + nm.a(eps))
    return comb


def hc_coeffs(m, nm, prefix, x):
    """pre [T, hc], post [T, hc], comb [T, hc, hc] of one sub-layer from streams x [T, hc, d]."""
    c = m.cfg
    hc = c.hc
    fn = m.f32(prefix + "_fn", ((2 + hc) * hc, hc * c.dim))
    base = nm.a(m.f32(prefix + "_base", ((2 + hc) * hc,)))
    scale = nm.a(m.f32(prefix + "_scale", (3,)))
    mx = _hc_mixes(nm, c, x, fn)
    sig = lambda v: nm.a(nm.a(1.0) / (nm.a(1.0) + np.exp(-v)))  # noqa: E731
    pre = sig(mx[:, :hc] * scale[0] + base[:hc]) + nm.a(c.hc_eps)
    post = nm.a(2.0) * sig(mx[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = mx[:, 2 * hc:].reshape(-1, hc, hc) * scale[2] + base[2 * hc:].reshape(hc, hc)
    return pre, post, sinkhorn(nm, comb, c.sinkhorn_iters, c.hc_eps)


def hc_collapse(nm, x, pre):
    x = nm.a(x)
    y = pre[:, 0, None] * x[:, 0]
    for i in range(1, x.shape[1]):
        y = y + pre[:, i, None] * x[:, i]
    return nm.bf(y)


def hc_expand(nm, x, f, post, comb):
    """X'_j = post_j * F + sum_i comb[i, j] X_i (note the transpose), BF16 (reference)."""
    x, f = nm.a(x), nm.a(f)
    mix = comb[:, 0, :, None] * x[:, 0, None, :]
    for i in range(1, x.shape[1]):
        mix = mix + comb[:, i, :, None] * x[:, i, None, :]
    return nm.bf(post[:, :, None] * f[:, None, :] + mix)


def hc_head(m, nm, x, prefix=""):
    c = m.cfg
    hc = c.hc
    mx = _hc_mixes(nm, c, x, m.f32(prefix + "hc_head_fn", (hc, hc * c.dim)))
    scale = nm.a(m.f32(prefix + "hc_head_scale", (1,)))
    base = nm.a(m.f32(prefix + "hc_head_base", (hc,)))
    pre = nm.a(nm.a(1.0) / (nm.a(1.0) + np.exp(-(mx * scale + base)))) + nm.a(c.hc_eps)
    return hc_collapse(nm, x, pre)


def head(m, nm, y):
    """Final RMSNorm and LM head: fp32 logits [T, vocab]."""
    c = m.cfg
    n = rmsnorm(nm, y, m.f32("norm.weight", (c.dim,)), c.eps)
    return nm.mm(n, m.f32("head.weight", (c.vocab, c.dim))).astype(np.float32)


def block(m, nm, layer, x, tokens, pos0=0, info=None):
    c = m.cfg
    p = "layers.%d." % layer
    pre, post, comb = hc_coeffs(m, nm, p + "hc_attn", x)
    xa = rmsnorm(nm, hc_collapse(nm, x, pre), m.f32(p + "attn_norm.weight", (c.dim,)), c.eps)
    x = hc_expand(nm, x, attention(m, nm, layer, xa, pos0, info), post, comb)
    pre, post, comb = hc_coeffs(m, nm, p + "hc_ffn", x)
    xf = rmsnorm(nm, hc_collapse(nm, x, pre), m.f32(p + "ffn_norm.weight", (c.dim,)), c.eps)
    return hc_expand(nm, x, moe(m, nm, layer, xf, tokens), post, comb)


def forward(m, tokens, profile="reference", info=None):
    """Logits [T, vocab] float32 for every position of `tokens` (prefill from position 0).
    If `info` is a dict, info[layer] receives per-layer diagnostics (compressed entry count,
    indexer selections)."""
    c = m.cfg
    nm = Num(profile)
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 1 or tokens.size == 0:
        raise ValueError("tokens must be a non-empty 1-D sequence")
    if tokens.min() < 0 or tokens.max() >= c.vocab:
        raise ValueError("token id out of range [0, %d)" % c.vocab)
    emb = nm.a(m.f32("embed.weight", (c.vocab, c.dim))[tokens])
    x = np.repeat(emb[:, None, :], c.hc, axis=1)
    for layer in range(c.n_layers):
        li = {} if info is not None else None
        x = block(m, nm, layer, x, tokens, 0, li)
        if info is not None:
            info[layer] = li
    return head(m, nm, hc_head(m, nm, x))


# --------------------------------------------------------------------------------------------
# pieces (inputs are rounded to BF16 in the reference profile, as the reference holds them)
# --------------------------------------------------------------------------------------------
def _in(nm, x):
    return nm.bf(np.asarray(x, np.float32))


def attn_piece(m, layer, u, profile="reference", pos0=0):
    """u [T, dim] before attn_norm -> attention output after wo_b [T, dim] (float32)."""
    nm = Num(profile)
    xa = rmsnorm(nm, _in(nm, u), m.f32("layers.%d.attn_norm.weight" % layer), m.cfg.eps)
    return np.asarray(attention(m, nm, layer, xa, pos0), np.float32)


def compressor_piece(m, layer, u, profile="reference", pos0=0):
    """u [T, dim] before attn_norm -> main compressor entries [N - pos0//m, head_dim] for the
    complete blocks (N = (pos0+T)//ratio), after norm, RoPE and (reference) FP8 fake-quant."""
    nm = Num(profile)
    c = m.cfg
    if not c.ratios[layer]:
        raise ValueError("layer %d has no compressor (ratio 0)" % layer)
    xa = rmsnorm(nm, _in(nm, u), m.f32("layers.%d.attn_norm.weight" % layer), c.eps)
    _, e = compress(m, nm, layer, "layers.%d.attn.compressor." % layer, xa, pos0,
                    c.ratios[layer], c.head_dim, False)
    return np.asarray(e, np.float32)


def indexer_piece(m, layer, u, profile="reference", pos0=0):
    """u [T, dim] before attn_norm -> selected compressed-entry indices [T, index_topk] int32
    (absolute entry numbers, best first, ties toward the lower index, -1 padded)."""
    nm = Num(profile)
    c = m.cfg
    if c.ratios[layer] != 4:
        raise ValueError("layer %d has no indexer (ratio %d)" % (layer, c.ratios[layer]))
    p = "layers.%d.attn." % layer
    xa = rmsnorm(nm, _in(nm, u), m.f32("layers.%d.attn_norm.weight" % layer), c.eps)
    qr = rmsnorm(nm, m.lin8(p + "wq_a", c.q_lora, c.dim)(nm, xa),
                 m.f32(p + "q_norm.weight", (c.q_lora,)), c.eps)
    return indexer(m, nm, layer, xa, qr, pos0)[1]


def moe_piece(m, layer, x, tokens=None, profile="reference"):
    """x [T, dim] before ffn_norm -> MoE output [T, dim] (token ids needed in hash layers)."""
    nm = Num(profile)
    xf = rmsnorm(nm, _in(nm, x), m.f32("layers.%d.ffn_norm.weight" % layer), m.cfg.eps)
    return np.asarray(moe(m, nm, layer, xf, tokens), np.float32)


def _sub_prefix(layer, sub):
    if sub not in ("attn", "ffn"):
        raise ValueError("sub must be attn or ffn, got %r" % sub)
    return "layers.%d.hc_%s" % (layer, sub)


def mhc_pre_piece(m, layer, x, profile="reference", sub="attn"):
    """streams x [T, hc, dim] -> [T, dim + hc + hc*hc]: u (collapsed input of the sub-layer,
    before its norm), post weights, comb matrix (row-major, comb[i][j] feeds stream j)."""
    nm = Num(profile)
    x = _in(nm, x)
    pre, post, comb = hc_coeffs(m, nm, _sub_prefix(layer, sub), x)
    u = hc_collapse(nm, x, pre)
    t = x.shape[0]
    return np.concatenate([u, post, comb.reshape(t, -1)], axis=1).astype(np.float32)


def mhc_post_piece(m, layer, x, f, profile="reference", sub="attn"):
    """streams x [T, hc, dim] and sub-layer output f [T, dim] -> new streams [T, hc, dim]
    (post and comb recomputed from x with the layer's mHC parameters)."""
    nm = Num(profile)
    x = _in(nm, x)
    _, post, comb = hc_coeffs(m, nm, _sub_prefix(layer, sub), x)
    return np.asarray(hc_expand(nm, x, _in(nm, f), post, comb), np.float32)


def hc_head_piece(m, x, profile="reference"):
    """final streams x [T, hc, dim] -> collapsed y [T, dim] (before the final norm)."""
    nm = Num(profile)
    return np.asarray(hc_head(m, nm, _in(nm, x)), np.float32)


def head_piece(m, y, profile="reference"):
    """y [T, dim] (hc_head output) -> logits [T, vocab] (final RMSNorm + LM head)."""
    nm = Num(profile)
    return head(m, nm, _in(nm, y))
