"""Shared setup of the reference tests: NumPy check, checkpoint of the tiny preset."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy  # noqa: F401
except ImportError:
    raise ImportError("NumPy is missing: the reference tests need /usr/bin/python3 with Debian's "
                      "python3-numpy (this interpreter is %s)" % sys.executable) from None

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SRT_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
PRESET = os.path.join(SOURCE_DIR, "conf", "models", "tiny.yaml")
sys.path.insert(0, HERE)

import make_ckpt  # noqa: E402
from dsv4_ckpt import load_yaml  # noqa: E402


def find_shadowrt():
    """Built `shadowrt` binaries: $SRT_BUILD_DIR/bin first, then any build*/bin."""
    cands = []
    if os.environ.get("SRT_BUILD_DIR"):
        cands.append(os.path.join(os.environ["SRT_BUILD_DIR"], "bin", "shadowrt"))
    cands += sorted(glob.glob(os.path.join(SOURCE_DIR, "build*", "bin", "shadowrt")))
    return [c for c in cands if os.access(c, os.X_OK)]


def _has_gen_model(exe):
    try:
        r = subprocess.run([exe, "gen-model", "--help"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    except OSError:
        return False
    return r.returncode == 0


def tiny_checkpoint():
    """(directory, how it was made) of a tiny-preset checkpoint in a fresh temp dir.
    Uses `shadowrt gen-model tiny DIR` when a built binary has that command (a failure of
    that command is a test failure), else tests/reference/make_ckpt.py."""
    d = tempfile.mkdtemp(prefix="srt_ref_")
    exe = next((e for e in find_shadowrt() if _has_gen_model(e)), None)
    if exe:
        r = subprocess.run([exe, "gen-model", "tiny", d], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError("%s gen-model tiny %s failed (rc %d):\n%s"
                               % (exe, d, r.returncode, r.stdout.decode(errors="replace")))
        return d, "shadowrt gen-model (%s)" % exe
    make_ckpt.write_checkpoint(d, load_yaml(PRESET), seed=1)
    return d, "make_ckpt.py (shadowrt gen-model not built)"


def remove(d):
    shutil.rmtree(d, ignore_errors=True)
