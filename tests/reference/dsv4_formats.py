"""Number formats of DeepSeek-V4 checkpoints and of its fake-quantisation, in NumPy only.

Every decode table is built here from the format definition (sign / exponent / mantissa bit
fields), not copied from anywhere:

* BF16      : the top 16 bits of an IEEE binary32.
* F8_E4M3   : float8_e4m3fn - 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
              S.1111.111 is NaN, largest finite 448.
* F8_E8M0   : UE8M0 scale - 8 exponent bits, value 2^(e-127), 0xFF is NaN.
* E2M1      : FP4 - 1 sign, 2 exponent (bias 1), 1 mantissa bit; values 0 .5 1 1.5 2 3 4 6.

Rounding helpers (`round_bf16`, `round_e4m3`, `round_e2m1`) round to nearest, ties to even,
which is what the CUDA conversion instructions used by DeepSeek's kernels do.
"""
import numpy as np

FP8_MAX = 448.0
FP4_MAX = 6.0


def _e4m3_value(code):
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return sign * (m / 8.0) * 2.0 ** -6
    return sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)


def _e2m1_value(code):
    sign = -1.0 if code & 0x8 else 1.0
    e = (code >> 1) & 0x3
    m = code & 0x1
    if e == 0:
        return sign * m * 0.5
    return sign * (1.0 + m / 2.0) * 2.0 ** (e - 1)


def _e8m0_value(code):
    return float("nan") if code == 0xFF else 2.0 ** (code - 127)


#: float64 value of every byte / nibble code.
E4M3_TABLE = np.array([_e4m3_value(c) for c in range(256)], dtype=np.float64)
E2M1_TABLE = np.array([_e2m1_value(c) for c in range(16)], dtype=np.float64)
E8M0_TABLE = np.array([_e8m0_value(c) for c in range(256)], dtype=np.float64)

# Non-negative finite grids in code order (code == index): used for round-to-nearest-even.
_E4M3_GRID = E4M3_TABLE[:127].copy()          # codes 0x00..0x7E, 0 .. 448
_E2M1_GRID = E2M1_TABLE[:8].copy()            # codes 0..7, 0 .. 6


def bf16_to_f32(raw):
    """Raw uint16 BF16 bit patterns -> float32."""
    raw = np.asarray(raw, dtype=np.uint16)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 BF16 bit patterns, round to nearest even (NaN stays NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r = np.where(nan, np.uint16(0x7FC0), r)
    return r


def round_bf16(x):
    """Round to the nearest BF16 value (ties to even); returns float32."""
    return bf16_to_f32(f32_to_bf16_bits(np.asarray(x, dtype=np.float32)))


def round_f32(x):
    return np.asarray(x, dtype=np.float32)


def _round_to_grid(x, grid):
    """Round |x| to the nearest point of `grid` (sorted, code == index), ties to the even code.
    Values beyond the grid must have been clamped by the caller."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo = a - grid[lo]
    dhi = grid[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    return np.copysign(grid[idx], x), idx


def round_e4m3(x):
    """Round to the nearest E4M3 value (ties to even); |x| must be <= 448. float64 result."""
    return _round_to_grid(x, _E4M3_GRID)[0]


def round_e2m1(x):
    """Round to the nearest E2M1 value (ties to even); |x| must be <= 6. float64 result."""
    return _round_to_grid(x, _E2M1_GRID)[0]


def encode_e4m3(x):
    """float -> E4M3 byte codes (round to nearest even, |x| <= 448)."""
    v, idx = _round_to_grid(x, _E4M3_GRID)
    return (idx.astype(np.uint8) | np.where(np.signbit(v) & (idx != 0), 0x80, 0).astype(np.uint8))


def encode_e2m1(x):
    """float -> E2M1 nibble codes 0..15 (round to nearest even, |x| <= 6)."""
    v, idx = _round_to_grid(x, _E2M1_GRID)
    return (idx.astype(np.uint8) | np.where(np.signbit(v) & (idx != 0), 0x8, 0).astype(np.uint8))


def pow2_ceil_f32(v):
    """Smallest power of two >= v, for positive normal float32 v, computed on the bit fields
    exactly like DeepSeek's `fast_round_scale` (exponent + 1 when any mantissa bit is set)."""
    v = np.asarray(v, dtype=np.float32)
    bits = v.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)
    return np.ldexp(np.float32(1.0), e.astype(np.int32)).astype(np.float32)


def ue8m0_scale(amax, qmax, floor):
    """Power-of-two scale for a block: 2^ceil(log2(max(amax, floor) * f32(1/qmax)))."""
    amax = np.maximum(np.asarray(amax, dtype=np.float32), np.float32(floor))
    return pow2_ceil_f32(amax * np.float32(1.0 / qmax))


def fp8_quant_blocks(x, block):
    """Dynamic FP8 quantisation along the last axis in blocks of `block`.
    Returns (q, s): q float64 E4M3 grid values, shape of x; s float32 scales [..., K/block].
    amax floored at 1e-4, scale rounded up to a power of two, values clamped to +-448."""
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    assert k % block == 0, "last dim %d not a multiple of block %d" % (k, block)
    xb = x.reshape(x.shape[:-1] + (k // block, block))
    s = ue8m0_scale(np.abs(xb).max(axis=-1), FP8_MAX, 1e-4)
    q = round_e4m3(np.clip(xb.astype(np.float64) / s[..., None], -FP8_MAX, FP8_MAX))
    return q.reshape(x.shape), s


def fp8_fake_quant(x, block):
    """Quantise to E4M3 (block scales) and dequantise; result rounded to BF16 (float32 array)."""
    q, s = fp8_quant_blocks(x, block)
    k = x.shape[-1]
    qb = q.reshape(q.shape[:-1] + (k // block, block))
    return round_bf16((qb * s[..., None]).reshape(q.shape))


def fp4_fake_quant(x, block=32):
    """FP4 (E2M1) fake-quant with power-of-two scales per `block` along the last axis:
    scale = 2^ceil(log2(max(amax, 6*2^-126)/6)); result rounded to BF16 (float32 array)."""
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    assert k % block == 0
    xb = x.reshape(x.shape[:-1] + (k // block, block))
    s = ue8m0_scale(np.abs(xb).max(axis=-1), FP4_MAX, 6.0 * 2.0 ** -126)
    q = round_e2m1(np.clip(xb.astype(np.float64) / s[..., None], -FP4_MAX, FP4_MAX))
    return round_bf16((q * s[..., None]).reshape(x.shape))


def unpack_fp4(packed):
    """Packed FP4 bytes [..., K/2] (int8 or uint8) -> nibble codes [..., K]; the low nibble of
    byte i is element 2i, the high nibble element 2i+1."""
    b = np.asarray(packed).view(np.uint8)
    out = np.empty(b.shape[:-1] + (b.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = b & 0xF
    out[..., 1::2] = b >> 4
    return out


def pack_fp4(codes):
    """Nibble codes [..., K] -> packed int8 bytes [..., K/2] (low nibble = even index)."""
    c = np.asarray(codes, dtype=np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8).view(np.int8)


def hadamard_matrix(n):
    """Sylvester-order Walsh-Hadamard matrix H_n (entries +-1), n a power of two."""
    assert n > 0 and n & (n - 1) == 0, "Hadamard size %d is not a power of two" % n
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h
