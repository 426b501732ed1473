"""The C engine's `reference` profile against this reference, where it can be compared exactly.

A random-weight model in the reference profile is chaotic (DESIGN.md, Decisions): a 1e-7
difference before a bf16 rounding flips a routing or indexer choice, and from then on the two
implementations drift apart (measured: positions 0-10 agree to 5e-8 of the logit scale, position
11 on differ by ~1e-2). Before that, the engine's logits must equal the reference's to ~1e-6 of
the logit scale. Plain f32 logits (no FP8/FP4/BF16 rounding at all) differ there by 5e-2 or more,
so this test fails the f32 profile, which the old loose bounds (correlation > 0.5, RMS near the
noise floor over 640 positions) let through; the f32 profile is asserted to fail it here.
A single rounding can still flip early (an isolated ~1e-4 at one position of another prompt),
hence: all of the first 8 positions within 1e-3 and at least 6 of them within 1e-6."""
import os
import subprocess
import tempfile
import unittest

import reftest_util as U
import numpy as np

import dsv4_model as M

FIRST = 8      # positions compared exactly (chaos starts later on the tiny preset)
TOL = 1e-6     # of the logit scale (fp32 rounding differences measure 5e-8)


class EngineReferenceProfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        exes = U.find_shadowrt()
        if not exes:
            raise RuntimeError("no built shadowrt binary (set SRT_BUILD_DIR): the engine cannot "
                               "be compared")
        cls.exe = exes[0]
        cls.dir, cls.how = U.tiny_checkpoint()
        cls.m = M.Model(cls.dir)
        cls.tokens = np.random.default_rng(11).integers(0, cls.m.cfg.vocab, 32)
        cls.ref = M.forward(cls.m, cls.tokens[:FIRST], "reference")

    @classmethod
    def tearDownClass(cls):
        U.remove(cls.dir)

    def engine_logits(self, profile):
        with tempfile.TemporaryDirectory() as td:
            out = os.path.join(td, "l.f32")
            r = subprocess.run([self.exe, "generate", "--model", self.dir, "--prompt-tokens",
                                ",".join(str(int(t)) for t in self.tokens[:FIRST]),
                                "--max-new-tokens", "0", "--profile", profile, "--threads",
                                "2", "--logits", out, "-q"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))
            return np.fromfile(out, "<f4").reshape(-1, self.m.cfg.vocab)[:FIRST]

    def rel_diff(self, lg):
        scale = float(np.abs(self.ref).max())
        return np.abs(lg.astype(np.float64) - self.ref).max(axis=1) / scale

    def check(self, d):
        """Every position within 1e-3 (a single bf16 rounding that flips on a 6e-8 difference
        moves a logit by ~1e-4) and 6 of the first 8 within TOL."""
        return bool(np.all(d <= 1e-3)) and int(np.sum(d <= TOL)) >= 6

    def test_first_positions_of_the_reference_profile_match_to_1e_6(self):
        d = self.rel_diff(self.engine_logits("reference"))
        self.assertTrue(self.check(d), "max |diff| / scale per position: %s" % d)

    def test_f32_logits_fail_that_bound(self):
        # The check above must be able to fail: unrounded logits miss it at every position.
        d = self.rel_diff(self.engine_logits("f32"))
        self.assertFalse(self.check(d), "f32 logits pass: %s" % d)
        self.assertTrue(np.all(d > 1e-3), "f32 logits within 1e-3 of the reference profile "
                        "at some position: %s" % d)


if __name__ == "__main__":
    unittest.main()
