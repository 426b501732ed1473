#!/usr/bin/python3
"""Logits of every position from the independent NumPy reference (tests/reference), with an
optional relative perturbation of the embedded input, for the executor's model-level tests.

    ref_logits.py MODEL_DIR TOKENS.i32 PROFILE EPS OUT.f32

TOKENS.i32: raw little-endian int32 ids. EPS = 0: the reference as is (dsv4_model.forward).
EPS > 0: the embedded rows x become x * (1 + EPS * r), r uniform in [-1, 1) from a fixed seed,
AFTER the reference's own input rounding, so the change survives into the first mHC mixing
(the reference's noise floor: how far a 1e-7 change moves its own logits). OUT is written
atomically (tmp + rename): raw little-endian float32 [positions][vocab]."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import numpy as np  # noqa: E402

import dsv4_model as M  # noqa: E402


def main():
    if len(sys.argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    model, tok_path, profile, eps, out = sys.argv[1:]
    eps = float(eps)
    m = M.Model(model)
    tokens = np.fromfile(tok_path, dtype="<i4").astype(np.int64)
    if eps == 0:
        lg = M.forward(m, tokens, profile)
    else:
        c = m.cfg
        nm = M.Num(profile)
        emb = nm.a(m.f32("embed.weight", (c.vocab, c.dim))[tokens])
        r = np.random.default_rng(7).uniform(-1.0, 1.0, emb.shape)
        emb = (emb * (1.0 + eps * r)).astype(emb.dtype)
        x = np.repeat(emb[:, None, :], c.hc, axis=1)
        for layer in range(c.n_layers):
            x = M.block(m, nm, layer, x, tokens, 0, None)
        lg = M.head(m, nm, M.hc_head(m, nm, x))
    tmp = out + ".tmp.%d" % os.getpid()
    np.ascontiguousarray(lg).astype("<f4").tofile(tmp)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
