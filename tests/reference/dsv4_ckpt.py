"""Safetensors checkpoints and config of a DeepSeek-V4 model, in NumPy only.

`Checkpoint(dir)` memory-maps `model.safetensors`, or every shard listed in
`model.safetensors.index.json` (its "weight_map"), or failing both every `*.safetensors` file
in `dir`. `config.json` (DeepSeek's key names, spec section 1) is read with `json`; a
directory with only a YAML preset (`*.yaml`, same keys) is accepted when PyYAML exists.

Errors are `CheckpointError` with a message naming the file and the tensor.
`write_safetensors` is the writer used by make_ckpt.py.
"""
import json
import os
import struct

import numpy as np

from dsv4_formats import (E4M3_TABLE, E8M0_TABLE, E2M1_TABLE, bf16_to_f32, unpack_fp4)


class CheckpointError(Exception):
    pass


# safetensors dtype -> numpy dtype of the stored element (bit patterns for the float8/bf16 kinds)
_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "I8": np.int8, "U8": np.uint8,
    "I16": np.int16, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_,
}


def _read_header(path):
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError("%s: too short for a safetensors file" % path)
            (n,) = struct.unpack("<Q", head)
            if n > 100 * 1024 * 1024:
                raise CheckpointError("%s: header length %d is implausible" % (path, n))
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError("%s: %s" % (path, e.strerror))
    if len(raw) != n:
        raise CheckpointError("%s: header truncated (%d of %d bytes)" % (path, len(raw), n))
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        raise CheckpointError("%s: header is not JSON: %s" % (path, e))
    return header, 8 + n


class _File:
    def __init__(self, path):
        self.path = path
        self.header, self.data_start = _read_header(path)
        self.header.pop("__metadata__", None)
        size = os.path.getsize(path)
        self.mm = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else None
        for name, info in self.header.items():
            b, e = info["data_offsets"]
            if info["dtype"] not in _ST_DTYPES:
                raise CheckpointError("%s: tensor %s has unsupported dtype %s"
                                      % (path, name, info["dtype"]))
            itemsize = np.dtype(_ST_DTYPES[info["dtype"]]).itemsize
            want = int(np.prod(info["shape"], dtype=np.int64)) * itemsize
            if e - b != want or self.data_start + e > size:
                raise CheckpointError("%s: tensor %s: data_offsets [%d,%d) do not hold %s %s "
                                      "(%d bytes) inside a %d-byte file" % (
                                          path, name, b, e, info["dtype"], info["shape"], want,
                                          size))

    def raw(self, name):
        info = self.header[name]
        b, e = info["data_offsets"]
        buf = self.mm[self.data_start + b:self.data_start + e]
        return buf.view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"]), info["dtype"]


def load_config(model_dir):
    """config.json of `model_dir` as a dict (DeepSeek-V4 key names)."""
    path = os.path.join(model_dir, "config.json")
    if os.path.exists(path):
        try:
            with open(path) as f:
                return json.load(f)
        except ValueError as e:
            raise CheckpointError("%s: not valid JSON: %s" % (path, e))
    yamls = sorted(p for p in os.listdir(model_dir) if p.endswith((".yaml", ".yml")))
    if yamls:
        return load_yaml(os.path.join(model_dir, yamls[0]))
    raise CheckpointError("%s: no config.json in the model directory" % model_dir)


def load_yaml(path):
    try:
        import yaml
    except ImportError:
        raise CheckpointError("%s: reading YAML needs PyYAML (python3-yaml)" % path)
    with open(path) as f:
        return yaml.safe_load(f)


class Checkpoint:
    """Tensors of a safetensors checkpoint directory, memory-mapped (read-only).

    raw(name)  -> (numpy array of the stored elements, safetensors dtype string)
    f32(name)  -> float32 array for BF16/F16/F32 tensors
    has(name)  -> bool
    """

    def __init__(self, model_dir):
        self.dir = model_dir
        self.config = load_config(model_dir)
        self.files = {}
        self.where = {}
        index = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        if os.path.exists(index):
            try:
                with open(index) as f:
                    wmap = json.load(f)["weight_map"]
            except (ValueError, KeyError) as e:
                raise CheckpointError("%s: no usable weight_map (%s)" % (index, e))
            for name, fname in wmap.items():
                self.where[name] = self._file(os.path.join(model_dir, fname))
                if name not in self.where[name].header:
                    raise CheckpointError("%s: index says %s is in %s but it is not there"
                                          % (index, name, fname))
        else:
            paths = [single] if os.path.exists(single) else sorted(
                os.path.join(model_dir, p) for p in os.listdir(model_dir)
                if p.endswith(".safetensors"))
            if not paths:
                raise CheckpointError("%s: no *.safetensors file" % model_dir)
            for p in paths:
                fobj = self._file(p)
                for name in fobj.header:
                    self.where[name] = fobj

    def _file(self, path):
        if path not in self.files:
            self.files[path] = _File(path)
        return self.files[path]

    def has(self, name):
        return name in self.where

    def names(self):
        return sorted(self.where)

    def raw(self, name):
        if name not in self.where:
            raise CheckpointError("%s: tensor %s not found" % (self.dir, name))
        return self.where[name].raw(name)

    def f32(self, name, shape=None):
        a, dt = self.raw(name)
        if dt == "BF16":
            out = bf16_to_f32(a)
        elif dt in ("F32", "F16", "F64"):
            out = np.asarray(a, dtype=np.float32)
        else:
            raise CheckpointError("%s: tensor %s is %s, expected BF16/F16/F32"
                                  % (self.dir, name, dt))
        self._check_shape(name, out, shape)
        return out

    def ints(self, name, shape=None):
        a, dt = self.raw(name)
        if dt not in ("I32", "I64", "I16", "I8", "U8"):
            raise CheckpointError("%s: tensor %s is %s, expected an integer type"
                                  % (self.dir, name, dt))
        out = np.asarray(a, dtype=np.int64)
        self._check_shape(name, out, shape)
        return out

    def scale(self, name, shape):
        a, dt = self.raw(name)
        if dt == "F8_E8M0":
            out = E8M0_TABLE[a].astype(np.float32)
        elif dt in ("F32", "BF16"):
            out = self.f32(name)
        else:
            raise CheckpointError("%s: scale %s is %s, expected F8_E8M0 or F32"
                                  % (self.dir, name, dt))
        self._check_shape(name, out, shape)
        return out

    def fp8_weight(self, prefix, n, k):
        """FP8 E4M3 weight `prefix.weight` [n, k] with `prefix.scale` per 128x128 block.
        Returns (q float64 E4M3 values [n, k], s float32 [ceil(n/128), ceil(k/128)])."""
        a, dt = self.raw(prefix + ".weight")
        if dt != "F8_E4M3":
            raise CheckpointError("%s: %s.weight is %s, expected F8_E4M3" % (self.dir, prefix, dt))
        q = E4M3_TABLE[a]
        self._check_shape(prefix + ".weight", q, (n, k))
        s = self.scale(prefix + ".scale", ((n + 127) // 128, (k + 127) // 128))
        return q, s

    def fp4_weight(self, prefix, n, k):
        """Packed FP4 weight `prefix.weight` [n, k/2] (I8) with UE8M0 `prefix.scale` [n, k/32].
        Returns (q float64 E2M1 values [n, k], s float32 [n, k/32])."""
        a, dt = self.raw(prefix + ".weight")
        if dt not in ("I8", "U8"):
            raise CheckpointError("%s: %s.weight is %s, expected I8 (packed FP4)"
                                  % (self.dir, prefix, dt))
        self._check_shape(prefix + ".weight", a, (n, k // 2))
        q = E2M1_TABLE[unpack_fp4(a)]
        s = self.scale(prefix + ".scale", (n, k // 32))
        return q, s

    def _check_shape(self, name, arr, shape):
        if shape is not None and tuple(arr.shape) != tuple(shape):
            raise CheckpointError("%s: tensor %s has shape %s, expected %s"
                                  % (self.dir, name, list(arr.shape), list(shape)))


def write_safetensors(path, tensors, metadata=None):
    """Write {name: (safetensors dtype string, numpy array)} to `path`: header padded to 8
    bytes, tensors by decreasing element size then name, so every tensor sits on its element
    size (the C reader refuses unaligned data). The array's bytes are written as they are
    (little-endian host)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    order = sorted(tensors, key=lambda name: (-tensors[name][1].itemsize, name))
    for name in order:
        dt, arr = tensors[name]
        n = np.ascontiguousarray(arr).nbytes
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name in order:
            f.write(np.ascontiguousarray(tensors[name][1]).tobytes())
    os.replace(tmp, path)
