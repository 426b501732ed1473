#!/usr/bin/python3
"""Cross-check a gen-model checkpoint with the independent NumPy reader of tests/reference.

usage: xcheck_numpy.py SHADOWRT_BINARY WORK_DIR

Generates the tiny preset with `shadowrt gen-model`, then reads every tensor back with
tests/reference/dsv4_ckpt.py (its own safetensors parser and its own E4M3/E2M1/UE8M0 tables) and
checks: every value finite; FP8 / FP4 weights dequantise to std 1/sqrt(fan_in) (Irwin-Hall draws
have variance 1; FP8 rounding moves the std by < 6%, FP4's coarser grid by < 20%); RMSNorm
weights near 1; tid2eid rows hold distinct experts in range; config.json parses with the
preset's keys. Exits 77 (ctest: skipped) when numpy is missing.
"""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy not available: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from dsv4_ckpt import Checkpoint  # noqa: E402


def main():
    binary, work = sys.argv[1], sys.argv[2]
    out = os.path.join(work, "tiny")
    subprocess.run([binary, "gen-model", "tiny", out, "--shard-bytes", "2M"], check=True,
                   stdout=subprocess.DEVNULL)
    ck = Checkpoint(out)
    cfg = ck.config
    assert cfg["hidden_size"] == 256 and cfg["compress_ratios"] == [0, 4, 128, 4, 128, 4, 0], cfg
    E = cfg["n_routed_experts"]
    names = ck.names()
    assert len(names) == 596, len(names)
    n_fp8 = n_fp4 = 0
    for name in names:
        raw, dt = ck.raw(name)
        if dt == "F8_E4M3":
            prefix = name[:-len(".weight")]
            n, k = raw.shape
            q, s = ck.fp8_weight(prefix, n, k)
            w = q * np.repeat(np.repeat(s, 128, 0), 128, 1)[:n, :k]
            ratio = w.std() * np.sqrt(k)
            assert abs(ratio - 1) < 0.06, (name, ratio)
            assert np.isfinite(w).all(), name
            n_fp8 += 1
        elif dt == "I8":
            prefix = name[:-len(".weight")]
            n, k = raw.shape[0], raw.shape[1] * 2
            q, s = ck.fp4_weight(prefix, n, k)
            w = q * np.repeat(s, 32, 1)
            ratio = w.std() * np.sqrt(k)
            assert abs(ratio - 1) < 0.2, (name, ratio)
            n_fp4 += 1
        elif dt == "F8_E8M0":
            assert (raw != 0xFF).all(), name + ": NaN scale"
        elif dt in ("BF16", "F32"):
            v = ck.f32(name)
            assert np.isfinite(v).all(), name
            if name.endswith("norm.weight"):
                assert abs(v.mean() - 1) < 0.02, (name, v.mean())
        elif dt == "I64":
            ids = ck.ints(name)
            assert ids.min() >= 0 and ids.max() < E, name
            srt = np.sort(ids, axis=1)
            assert (srt[:, 1:] != srt[:, :-1]).all(), name + ": repeated expert in a row"
        else:
            raise AssertionError("%s: unexpected dtype %s" % (name, dt))
    assert n_fp8 > 50 and n_fp4 > 100, (n_fp8, n_fp4)
    print("xcheck ok: %d tensors, %d FP8 and %d FP4 weights read by the NumPy reference"
          % (len(names), n_fp8, n_fp4))


if __name__ == "__main__":
    main()
