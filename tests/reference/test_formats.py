"""Number formats, Hadamard matrix and the safetensors reader, checked against the format
definitions and hand-worked values."""
import json
import os
import struct
import tempfile
import unittest

import reftest_util as U
import numpy as np

import dsv4_formats as F
from dsv4_ckpt import Checkpoint, CheckpointError, write_safetensors


class DecodeTables(unittest.TestCase):
    def test_e4m3_table_matches_hand_values(self):
        t = F.E4M3_TABLE
        self.assertEqual(t[0x38], 1.0)            # exp 7 = bias, mantissa 0
        self.assertEqual(t[0x7E], 448.0)          # largest finite: 2^8 * 1.75
        self.assertEqual(t[0x08], 2.0 ** -6)      # smallest normal
        self.assertEqual(t[0x01], 2.0 ** -9)      # smallest subnormal
        self.assertEqual(t[0x07], 7 * 2.0 ** -9)  # largest subnormal
        self.assertEqual(t[0xB8], -1.0)
        self.assertTrue(np.isnan(t[0x7F]) and np.isnan(t[0xFF]))
        self.assertEqual(np.isnan(t).sum(), 2)    # e4m3fn: no infinities, only S.1111.111 NaN

    def test_e4m3_table_is_monotone_over_positive_codes(self):
        self.assertTrue(np.all(np.diff(F.E4M3_TABLE[:127]) > 0))

    def test_e2m1_table_is_the_mx_fp4_grid(self):
        self.assertEqual(list(F.E2M1_TABLE[:8]), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
        self.assertEqual(list(F.E2M1_TABLE[8:]), [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6])

    def test_e8m0_is_power_of_two_with_bias_127(self):
        self.assertEqual(F.E8M0_TABLE[127], 1.0)
        self.assertEqual(F.E8M0_TABLE[130], 8.0)
        self.assertEqual(F.E8M0_TABLE[0], 2.0 ** -127)
        self.assertTrue(np.isnan(F.E8M0_TABLE[255]))

    def test_bf16_decode_and_round_to_nearest_even(self):
        self.assertEqual(F.bf16_to_f32(np.array([0x3F80], np.uint16))[0], 1.0)
        self.assertEqual(F.bf16_to_f32(np.array([0xC000], np.uint16))[0], -2.0)
        one = 1.0
        # halfway between 1 and 1+2^-7 rounds to the even (1.0); 1+3*2^-8 to 1+2^-6
        x = np.array([one + 2.0 ** -8, one + 3 * 2.0 ** -8, one + 2.0 ** -8 + 2.0 ** -20],
                     np.float32)
        self.assertEqual(list(F.round_bf16(x)), [1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7])

    def test_e4m3_rounding_ties_to_even_code(self):
        # 1.0625 is halfway between 1.0 (code 0x38, even) and 1.125 (0x39): -> 1.0
        # 1.1875 between 1.125 (odd) and 1.25 (even): -> 1.25
        got = F.round_e4m3(np.array([1.0625, 1.1875, -1.0625, 2.0 ** -10, 3 * 2.0 ** -10]))
        self.assertEqual(list(got), [1.0, 1.25, -1.0, 0.0, 2.0 ** -8])

    def test_e2m1_rounding_ties_to_even_code(self):
        got = F.round_e2m1(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0]))
        self.assertEqual(list(got), [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -4.0])

    def test_encode_decode_round_trips_every_finite_code(self):
        codes = np.array([c for c in range(256) if not np.isnan(F.E4M3_TABLE[c]) and c != 0x80])
        self.assertTrue(np.array_equal(F.encode_e4m3(F.E4M3_TABLE[codes]), codes))
        c4 = np.array([c for c in range(16) if c != 8])
        self.assertTrue(np.array_equal(F.encode_e2m1(F.E2M1_TABLE[c4]), c4))

    def test_fp4_packing_low_nibble_is_even_index(self):
        packed = F.pack_fp4(np.array([[1, 2, 15, 0]], np.uint8))
        self.assertEqual(packed.view(np.uint8).tolist(), [[0x21, 0x0F]])
        self.assertEqual(F.unpack_fp4(packed).tolist(), [[1, 2, 15, 0]])


class Quantizers(unittest.TestCase):
    def test_pow2_ceil_matches_definition(self):
        v = np.array([1.0, 1.5, 0.75, 2.0 ** -20 * 1.01, 448.0], np.float32)
        self.assertEqual(list(F.pow2_ceil_f32(v)), [1.0, 2.0, 1.0, 2.0 ** -19, 512.0])

    def test_fp8_block_scale_is_power_of_two_with_amax_floor(self):
        x = np.zeros((2, 128), np.float32)
        x[0, 5] = 448.0 * 3            # amax/448 = 3 -> scale 4
        q, s = F.fp8_quant_blocks(x, 128)
        self.assertEqual(s[0, 0], 4.0)
        self.assertEqual(q[0, 5], 320.0)   # 336 is halfway 320|352: ties to the even code
        self.assertEqual(s[1, 0], F.pow2_ceil_f32(np.float32(1e-4) * np.float32(1 / 448.0)))

    def test_fp8_fake_quant_error_bounded_by_half_ulp_of_e4m3(self):
        rng = np.random.default_rng(3)
        x = F.round_bf16(rng.standard_normal((16, 64)).astype(np.float32))
        y = F.fp8_fake_quant(x, 64)
        _, s = F.fp8_quant_blocks(x, 64)
        # relative step of E4M3 is 2^-3; half of it, plus the BF16 result rounding
        err = np.abs(y - x)
        bound = np.maximum(np.abs(x) * 2.0 ** -4, 2.0 ** -10 * s.repeat(64, 1)) * 1.01
        self.assertTrue(np.all(err <= bound))
        self.assertFalse(np.array_equal(x, y))

    def test_fp4_fake_quant_values_lie_on_scaled_grid(self):
        rng = np.random.default_rng(4)
        x = rng.standard_normal((8, 64)).astype(np.float32)
        y = F.fp4_fake_quant(x, 32).reshape(8, 2, 32)
        amax = np.abs(x.reshape(8, 2, 32)).max(-1)
        s = F.pow2_ceil_f32(amax.astype(np.float32) * np.float32(1 / 6.0))
        units = np.abs(y) / s[..., None]
        self.assertTrue(np.all(np.isin(units, F.E2M1_TABLE[:8])))


class HadamardMatrix(unittest.TestCase):
    def test_scaled_hadamard_is_orthogonal(self):
        for n in (2, 16, 128):
            h = F.hadamard_matrix(n) * n ** -0.5
            self.assertTrue(np.allclose(h @ h.T, np.eye(n), atol=1e-12))

    def test_sylvester_order(self):
        h = F.hadamard_matrix(4)
        self.assertEqual(h.tolist(), [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1],
                                      [1, -1, -1, 1]])
        # row i, column j of Sylvester's H is (-1)^popcount(i & j)
        h = F.hadamard_matrix(128)
        i, j = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
        pc = np.vectorize(lambda v: bin(v).count("1"))(i & j)
        self.assertTrue(np.array_equal(h, (-1.0) ** pc))


class Safetensors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="srt_st_")
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump({"hidden_size": 4}, f)
        self.t = {
            "a.weight": ("BF16", F.f32_to_bf16_bits(np.array([[1.0, -2.5], [0.5, 3.0]]))),
            "b": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)),
            "w.weight": ("F8_E4M3", np.array([[0x38, 0xB8]], np.uint8)),
            "w.scale": ("F8_E8M0", np.array([[128]], np.uint8)),
            "e.weight": ("I8", F.pack_fp4(np.array([[2, 10] * 16], np.uint8))),
            "e.scale": ("F8_E8M0", np.array([[126]], np.uint8)),
        }

    def tearDown(self):
        U.remove(self.dir)

    def test_single_file_decodes_every_dtype(self):
        write_safetensors(os.path.join(self.dir, "model.safetensors"), self.t)
        ck = Checkpoint(self.dir)
        self.assertEqual(ck.f32("a.weight").tolist(), [[1.0, -2.5], [0.5, 3.0]])
        self.assertEqual(ck.f32("b", (2, 3))[1, 2], 5.0)
        q, s = ck.fp8_weight("w", 1, 2)
        self.assertEqual((q * s[0, 0]).tolist(), [[2.0, -2.0]])
        q4, s4 = ck.fp4_weight("e", 1, 32)
        self.assertEqual((q4[0, :2] * s4[0, 0]).tolist(), [0.5, -0.5])

    def test_sharded_index_gives_the_same_tensors(self):
        names = sorted(self.t)
        wmap = {}
        for i, part in enumerate((names[:3], names[3:])):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            write_safetensors(os.path.join(self.dir, fn), {n: self.t[n] for n in part})
            wmap.update({n: fn for n in part})
        with open(os.path.join(self.dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": wmap}, f)
        ck = Checkpoint(self.dir)
        self.assertEqual(ck.names(), names)
        self.assertEqual(ck.f32("b")[1, 1], 4.0)
        self.assertEqual(ck.f32("a.weight")[0, 1], -2.5)

    def test_truncated_file_is_rejected_naming_the_tensor(self):
        p = os.path.join(self.dir, "model.safetensors")
        write_safetensors(p, self.t)
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 4)
        with self.assertRaisesRegex(CheckpointError, "model.safetensors: tensor .* inside"):
            Checkpoint(self.dir)

    def test_missing_tensor_and_wrong_shape_are_named(self):
        write_safetensors(os.path.join(self.dir, "model.safetensors"), self.t)
        ck = Checkpoint(self.dir)
        with self.assertRaisesRegex(CheckpointError, "tensor nope not found"):
            ck.f32("nope")
        with self.assertRaisesRegex(CheckpointError, r"tensor b has shape \[2, 3\], expected"):
            ck.f32("b", (3, 2))
        with self.assertRaisesRegex(CheckpointError, "expected F8_E4M3"):
            ck.fp8_weight("a", 2, 2)

    def test_header_layout_is_little_endian_length_then_json(self):
        p = os.path.join(self.dir, "model.safetensors")
        write_safetensors(p, {"b": self.t["b"]})
        with open(p, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        hdr = json.loads(raw[8:8 + n])
        self.assertEqual(hdr["b"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(np.frombuffer(raw[8 + n:], np.float32).tolist(), [0, 1, 2, 3, 4, 5])


if __name__ == "__main__":
    unittest.main()
