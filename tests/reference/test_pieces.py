"""Pieces of the reference against hand-written loops over the spec's formulas and against
properties the architecture guarantees (causality, window size, RoPE relative invariance)."""
import math
import os
import subprocess
import sys
import tempfile
import unittest

import reftest_util as U
import numpy as np

import dsv4_model as M

PY = sys.executable
CLI = os.path.join(U.HERE, "dsv4_ref.py")


class Pieces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir, cls.how = U.tiny_checkpoint()
        cls.m = M.Model(cls.dir)
        cls.c = cls.m.cfg
        rng = np.random.default_rng(7)
        cls.u = rng.standard_normal((300, cls.c.dim)).astype(np.float32)

    @classmethod
    def tearDownClass(cls):
        U.remove(cls.dir)

    # ---- mHC ------------------------------------------------------------------------------
    def test_sinkhorn_is_doubly_stochastic_and_matches_an_explicit_loop(self):
        rng = np.random.default_rng(1)
        comb = rng.standard_normal((20, 4, 4))
        nm = M.Num("f32")
        got = M.sinkhorn(nm, comb, 20, 1e-6)
        for t in range(20):
            a = [[math.exp(v) for v in row] for row in comb[t]]
            a = [[v / sum(row) + 1e-6 for v in row] for row in a]
            for it in range(20):
                if it:
                    a = [[v / (sum(row) + 1e-6) for v in row] for row in a]
                cs = [sum(a[i][j] for i in range(4)) for j in range(4)]
                a = [[a[i][j] / (cs[j] + 1e-6) for j in range(4)] for i in range(4)]
            self.assertTrue(np.allclose(got[t], a, rtol=1e-12, atol=0))
        self.assertTrue(np.allclose(got.sum(axis=1), 1, atol=1e-5))   # columns exactly ~1
        self.assertTrue(np.allclose(got.sum(axis=2), 1, atol=1e-4))   # rows nearly (20 rounds)
        self.assertTrue(np.all(got > 0))
        ref = M.sinkhorn(M.Num("reference"), comb, 20, 1e-6)
        self.assertEqual(ref.dtype, np.float32)
        self.assertTrue(np.allclose(ref, got, atol=1e-5))

    def test_mhc_post_uses_the_transpose_of_comb(self):
        rng = np.random.default_rng(2)
        x = rng.standard_normal((3, 4, 8))
        f = rng.standard_normal((3, 8))
        post = rng.random((3, 4))
        comb = rng.random((3, 4, 4))
        got = M.hc_expand(M.Num("f32"), x, f, post, comb)
        for t in range(3):
            for j in range(4):
                want = post[t, j] * f[t] + sum(comb[t, i, j] * x[t, i] for i in range(4))
                self.assertTrue(np.allclose(got[t, j], want, rtol=1e-13))

    def test_mhc_pre_piece_follows_the_spec_formulas(self):
        rng = np.random.default_rng(3)
        x = rng.standard_normal((5, 4, self.c.dim)).astype(np.float32)
        out = M.mhc_pre_piece(self.m, 2, x, "f32", "ffn")
        fn = self.m.f32("layers.2.hc_ffn_fn").astype(np.float64)
        base = self.m.f32("layers.2.hc_ffn_base").astype(np.float64)
        sc = self.m.f32("layers.2.hc_ffn_scale").astype(np.float64)
        d = self.c.dim
        for t in range(5):
            xh = x[t].reshape(-1).astype(np.float64)
            mu = (fn @ xh) / math.sqrt(np.mean(xh * xh) + 1e-6)
            pre = 1 / (1 + np.exp(-(mu[:4] * sc[0] + base[:4]))) + 1e-6
            post = 2 / (1 + np.exp(-(mu[4:8] * sc[1] + base[4:8])))
            u = sum(pre[i] * x[t, i].astype(np.float64) for i in range(4))
            self.assertTrue(np.allclose(out[t, :d], u, rtol=1e-5, atol=1e-6))
            self.assertTrue(np.allclose(out[t, d:d + 4], post, rtol=1e-6))
            comb = out[t, d + 4:].reshape(4, 4)
            self.assertTrue(np.allclose(comb.sum(0), 1, atol=1e-5))

    # ---- compressor -----------------------------------------------------------------------
    def _explicit_compressor(self, layer, u, pos0):
        """Spec 2.3 as a plain loop: per entry j and channel c a softmax over the block rows
        (CSA: 4 look-back rows with the first half of the channels, 4 current rows with the
        second half; absent rows contribute nothing), then RMSNorm and RoPE at 4j / 128j."""
        m, c = self.m, self.c
        ratio = c.ratios[layer]
        p = "layers.%d.attn.compressor." % layer
        hd, rd = c.head_dim, c.rope_dim
        nm = M.Num("f32")
        xa = M.rmsnorm(nm, u.astype(np.float64), m.f32("layers.%d.attn_norm.weight" % layer),
                       c.eps)
        wkv = m.f32(p + "wkv.weight").astype(np.float64)
        wg = m.f32(p + "wgate.weight").astype(np.float64)
        ape = m.f32(p + "ape").astype(np.float64)
        nw = m.f32(p + "norm.weight").astype(np.float64)
        freqs = m.rope(layer).freqs.astype(np.float64)
        out = []
        for j in range(pos0 // ratio, (pos0 + len(u)) // ratio):
            rows = []                         # (kv row, score row) per contributing token
            for q in range(j * ratio, (j + 1) * ratio):
                if q >= pos0:
                    x = xa[q - pos0]
                    lo = hd if ratio == 4 else 0
                    rows.append((wkv[lo:lo + hd] @ x, wg[lo:lo + hd] @ x + ape[q % ratio, lo:lo + hd]))
            if ratio == 4:
                for q in range(j * 4 - 4, j * 4):
                    if q >= pos0:
                        x = xa[q - pos0]
                        rows.append((wkv[:hd] @ x, wg[:hd] @ x + ape[q % 4, :hd]))
            e = np.zeros(hd)
            for ch in range(hd):
                s = np.array([r[1][ch] for r in rows])
                w = np.exp(s - s.max())
                w /= w.sum()
                e[ch] = sum(w[i] * rows[i][0][ch] for i in range(len(rows)))
            e = e / math.sqrt(np.mean(e * e) + c.eps) * nw
            pos = j * ratio
            for i in range(rd // 2):
                a, b = e[hd - rd + 2 * i], e[hd - rd + 2 * i + 1]
                cs, sn = math.cos(pos * freqs[i]), math.sin(pos * freqs[i])
                e[hd - rd + 2 * i], e[hd - rd + 2 * i + 1] = a * cs - b * sn, a * sn + b * cs
            out.append(e)
        return np.array(out)

    def test_csa_compressor_matches_explicit_loop(self):
        for pos0 in (0, 6):
            got = M.compressor_piece(self.m, 1, self.u[:41], "f32", pos0)
            want = self._explicit_compressor(1, self.u[:41], pos0)
            self.assertEqual(got.shape, want.shape)
            self.assertTrue(np.allclose(got, want, rtol=1e-5, atol=1e-5), "pos0 %d" % pos0)

    def test_hca_compressor_matches_explicit_loop(self):
        got = M.compressor_piece(self.m, 2, self.u[:260], "f32")
        want = self._explicit_compressor(2, self.u[:260], 0)
        self.assertEqual(got.shape, (2, self.c.head_dim))
        self.assertTrue(np.allclose(got, want, rtol=1e-5, atol=1e-5))

    def test_reference_compressor_entries_are_fp8_on_nope_dims(self):
        e = M.compressor_piece(self.m, 1, self.u[:64], "reference")
        nope = e[:, :self.c.head_dim - self.c.rope_dim].reshape(-1, 64).astype(np.float64)
        s = 2.0 ** np.ceil(np.log2(np.maximum(np.abs(nope).max(1), 1e-4) / 448))
        units = np.abs(nope) / s[:, None]
        from dsv4_formats import E4M3_TABLE
        self.assertTrue(np.all(np.isin(units, E4M3_TABLE[:127])))

    # ---- RoPE -----------------------------------------------------------------------------
    def test_yarn_frequencies_follow_the_spec(self):
        r = self.m.rope(1)
        self.assertEqual((r.low, r.high), (15, 25))
        i = np.arange(32)
        f = 160000.0 ** (-2 * i / 64)
        s = 1 - np.clip((i - 15) / 10, 0, 1)
        self.assertTrue(np.allclose(r.freqs, f / 16 * (1 - s) + f * s, rtol=1e-6))
        self.assertTrue(np.allclose(self.m.rope(0).freqs, 10000.0 ** (-2 * i / 64), rtol=1e-6))

    def test_attention_output_is_invariant_to_a_shift_of_all_positions(self):
        # RoPE on q and k, then de-rotation of the output at the query position: only
        # relative positions matter on a window-only layer.
        a = M.attn_piece(self.m, 0, self.u[:150], "f32", 0)
        b = M.attn_piece(self.m, 0, self.u[:150], "f32", 1000)
        self.assertTrue(np.allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(a).max()))

    # ---- attention ------------------------------------------------------------------------
    def test_sink_adds_to_the_denominator_only(self):
        nm = M.Num("f32")
        rng = np.random.default_rng(5)
        q = rng.standard_normal((1, 2, 128))
        kv = rng.standard_normal((1, 128))
        sink = np.array([0.5, -1.0])
        o = M.sparse_attention(nm, q, kv, None, None, sink, 128)
        for h in range(2):
            s = float(q[0, h] @ kv[0]) / math.sqrt(128)
            want = kv[0] * math.exp(s) / (math.exp(s) + math.exp(sink[h]))
            self.assertTrue(np.allclose(o[0, h], want, rtol=1e-12))

    def test_compressed_entry_visibility_is_causal(self):
        vis = M.visible_mask([2, 3, 6, 7], 0, 2, 4)
        self.assertEqual(vis.tolist(), [[False, False], [True, False], [True, False],
                                        [True, True]])
        self.assertEqual(M.visible_mask([126, 127], 0, 1, 128).tolist(), [[False], [True]])

    def test_future_tokens_never_change_earlier_outputs(self):
        for layer in (1, 2):
            u2 = self.u.copy()
            u2[200] += 1.0
            a = M.attn_piece(self.m, layer, self.u, "f32")
            b = M.attn_piece(self.m, layer, u2, "f32")
            self.assertTrue(np.array_equal(a[:200], b[:200]), "layer %d" % layer)
            self.assertFalse(np.array_equal(a[200], b[200]))

    def test_window_is_128_positions_including_self(self):
        u2 = self.u[:200].copy()
        u2[0] += 1.0
        a = M.attn_piece(self.m, 0, self.u[:200], "f32")
        b = M.attn_piece(self.m, 0, u2, "f32")
        self.assertFalse(np.array_equal(a[127], b[127]))       # 0 is in (127-128, 127]
        self.assertTrue(np.array_equal(a[128:], b[128:]))      # window-only layer forgets it
        a = M.attn_piece(self.m, 2, self.u[:200], "f32")
        b = M.attn_piece(self.m, 2, u2, "f32")
        self.assertFalse(np.array_equal(a[128], b[128]))       # HCA entry 0 covers token 0

    # ---- indexer --------------------------------------------------------------------------
    def test_stable_topk_breaks_ties_toward_the_lower_index(self):
        self.assertEqual(M.stable_topk(np.array([[1, 3, 3, 2, 3]]), 2).tolist(), [[1, 2]])
        self.assertEqual(M.stable_topk(np.array([[-np.inf, 0, 0]]), 3).tolist(), [[1, 2, 0]])

    def test_indexer_selects_topk_of_the_visible_entries_only(self):
        for prof in ("reference", "f32"):
            sel = M.indexer_piece(self.m, 1, self.u, prof)
            k = self.c.idx_topk
            self.assertEqual(sel.shape, (300, k))
            for p in (0, 3, 100, 255, 299):
                chosen = sel[p][sel[p] >= 0]
                nvis = (p + 1) // 4
                self.assertEqual(len(chosen), min(k, nvis))
                self.assertEqual(len(set(chosen.tolist())), len(chosen))
                self.assertTrue(np.all(chosen < nvis))
            self.assertLess(len(sel[299][sel[299] >= 0]), 299 // 4 + 1)

    # ---- MoE ------------------------------------------------------------------------------
    def test_hash_and_score_routing(self):
        nm = M.Num("f32")
        toks = np.arange(40) * 7 % self.c.vocab
        xf = self.u[:40].astype(np.float64)
        w, idx = M.route(self.m, nm, 0, xf, toks)
        self.assertTrue(np.array_equal(idx, self.m.ints("layers.0.ffn.gate.tid2eid")[toks]))
        self.assertTrue(np.allclose(w.sum(1), self.c.route_scale))
        w, idx = M.route(self.m, nm, 3, xf, None)
        lg = xf @ self.m.f32("layers.3.ffn.gate.weight").astype(np.float64).T
        s = np.sqrt(np.log1p(np.exp(lg)))
        sel = s + self.m.f32("layers.3.ffn.gate.bias")
        for t in range(40):
            self.assertEqual(set(idx[t]), set(np.argsort(-sel[t])[:self.c.topk]))
            self.assertTrue(np.allclose(w[t], s[t, idx[t]] / s[t, idx[t]].sum() * 1.5))

    def test_moe_needs_token_ids_in_hash_layers(self):
        with self.assertRaisesRegex(ValueError, "hash-routed"):
            M.moe_piece(self.m, 0, self.u[:4], None, "f32")

    # ---- CLI ------------------------------------------------------------------------------
    def test_cli_pieces_write_the_documented_raw_formats(self):
        with tempfile.TemporaryDirectory() as td:
            fin, fout = os.path.join(td, "in.bin"), os.path.join(td, "out.bin")
            self.u[:40].astype("<f4").tofile(fin)
            r = subprocess.run([PY, CLI, "piece", "attn", "--model", self.dir, "--layer", "1",
                                "--in", fin, "--out", fout, "--pos0", "3"],
                               stderr=subprocess.PIPE)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = np.fromfile(fout, "<f4").reshape(40, self.c.dim)
            self.assertTrue(np.array_equal(got, M.attn_piece(self.m, 1, self.u[:40],
                                                             "reference", 3)))
            r = subprocess.run([PY, CLI, "piece", "indexer", "--model", self.dir, "--layer",
                                "1", "--in", fin, "--out", fout], stderr=subprocess.PIPE)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(np.fromfile(fout, "<i4").size, 40 * self.c.idx_topk)
            self.u[:3, :10].astype("<f4").tofile(fin)
            r = subprocess.run([PY, CLI, "piece", "attn", "--model", self.dir, "--layer", "1",
                                "--in", fin, "--out", fout], stderr=subprocess.PIPE)
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"not a positive multiple of the row width 256", r.stderr)


if __name__ == "__main__":
    unittest.main()
