/*
 * core/ops/gemm_avx2_common.h — AVX2 helpers shared by the x86 kernel files (gemm_avx2.c,
 * gemm_tile_avx2.c, gemm_avx512.c, gemm_avx512_bf16.c): the E4M3 decode, block checks, scale
 * conversion and the bf16 GEMV tiles' rows.
 * Included only by files compiled for AVX2 (+ F16C); static inline, so each file keeps its
 * own copy.
 */
#ifndef SRT_OPS_GEMM_AVX2_COMMON_H
#define SRT_OPS_GEMM_AVX2_COMMON_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef KB
#define KB 128
#endif

/* The GEMV kernels (M = 1) read tiles of 8 rows and, while they work on one, prefetch the
 * tile after next into L2. The first two tiles of a call would then come by demand misses,
 * each row a stream of its own that the hardware prefetchers pick up late; on the short
 * matrices of a decode step (an expert's 256 KiB, or half of it per thread) that cost 5-9 %
 * of the read rate. So a call first prefetches its first two tiles (at most 32 KiB): rows
 * n0 .. n0 + 15, rowbytes each, of [ntiles] tiles. Only a hint: no result depends on it.
 * Inlined always: GCC's IPA pure-const pass takes a function of prefetches alone for a const
 * one and deletes the calls it did not inline (tests/attention/check_prefetch.sh). */
static inline __attribute__((always_inline)) void gemv_head_prefetch(const void *data, size_t rowbytes, size_t n0, size_t ntiles)
{
	const char *p = (const char *)data + n0 * rowbytes;
	size_t bytes = (ntiles < 2 ? ntiles : 2) * 8 * rowbytes;
	if (bytes > (32u << 10))
		bytes = 32u << 10;
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch(p + o, _MM_HINT_T1);
}

/* The 8 rows of the bf16 GEMV tile starting at row n (data: [N][K] bf16 words), and where
 * its kernels prefetch: the tile after next (tile tt of ntiles), NULL near the end. */
static inline const char *bf16_tile_rows(const void *data, size_t K, size_t n, size_t tt,
					 size_t ntiles, const uint16_t **rows)
{
	for (int t = 0; t < 8; t++)
		rows[t] = (const uint16_t *)data + (n + (size_t)t) * K;
	return tt + 2 < ntiles ? (const char *)(rows[0] + 16 * K) : NULL;
}

/* E4M3 codes as halves converted to float: the code value times 2^-8. */
static inline __m256 fp8x8_half(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
	__m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
				  _mm_set1_epi16((short)0xBF80));
	return _mm256_cvtph_ps(h);
}

/* 8 E2M1 values of 4 packed bytes (low nibble first): lane i takes the nibble at bit
 * shift[i] (0, 4, ..., 28), its magnitude looked up by vpermps (low 3 bits), its sign (bit 3
 * of the nibble) moved to bit 31. */
static inline __m256 fp4x8_shifts(const uint8_t *p, __m256i shift)
{
	int32_t u;
	memcpy(&u, p, sizeof u);
	const __m256i v = _mm256_set1_epi32(u);
	const __m256i idx = _mm256_srlv_epi32(v, shift);
	const __m256i sgn = _mm256_and_si256(
		_mm256_sllv_epi32(v, _mm256_sub_epi32(_mm256_set1_epi32(28), shift)),
		_mm256_set1_epi32((int32_t)0x80000000u));
	const __m256 mag = _mm256_permutevar8x32_ps(
		_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), idx);
	return _mm256_or_ps(mag, _mm256_castsi256_ps(sgn));
}

/* UE8M0 codes (one per 32-bit lane, < 256) -> float, as srt_e8m0_to_f32. */
static inline __m256 e8m0_v(__m256i e)
{
	__m256i u = _mm256_slli_epi32(e, 23);
	u = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x00400000),
			       _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
	u = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x7FC00000),
			       _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
	return _mm256_castsi256_ps(u);
}

/*
 * True when every x of the block has at most 8 significant bits (the low 16 mantissa bits
 * clear, as E4M3 and bf16 values have) and is 0 or in [2^-100, 2^101). Then each product
 * with a weight code value (E2M1: 2 bits in [0.5, 6]; E4M3·2^-8 times x·2^8: 4 bits in
 * [2^-17, 1.75]) is an exact normal float (at most 12 bits), so round(acc + x·w) by one fused
 * multiply-add is the bit-identical result of the separate multiplication and addition.
 */
static inline bool x_exact_products(const float *x)
{
	__m256i bad = _mm256_setzero_si256();
	for (int i = 0; i < KB; i += 8) {
		const __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
		const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
		const __m256i e = _mm256_srli_epi32(a, 23);
		const __m256i low = _mm256_and_si256(u, _mm256_set1_epi32(0x0000FFFF));
		const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(27), e),
						    _mm256_cmpgt_epi32(e, _mm256_set1_epi32(227)));
		const __m256i nz = _mm256_xor_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()),
						    _mm256_set1_epi32(-1));
		bad = _mm256_or_si256(bad, _mm256_or_si256(low, _mm256_and_si256(out, nz)));
	}
	return _mm256_testz_si256(bad, bad);
}

/* 2^e as a float, -126 <= e <= 127. */
static inline float pow2f(int e)
{
	const uint32_t u = (uint32_t)(127 + e) << 23;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* The sum, the largest and the least of the 8 int32 lanes of v. */
#define EPI32_REDUCE8(name, op)                                                                   \
	static inline int32_t name(__m256i v)                                                      \
	{                                                                                          \
		__m128i r = op(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));         \
		r = op(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));                          \
		r = op(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));                          \
		return _mm_cvtsi128_si32(r);                                                       \
	}
EPI32_REDUCE8(hsum8_epi32, _mm_add_epi32)
EPI32_REDUCE8(hmax8_epi32, _mm_max_epi32)
EPI32_REDUCE8(hmin8_epi32, _mm_min_epi32)
#undef EPI32_REDUCE8

/*
 * Whether the 32 REFERENCE activations at x (E4M3 values, unscaled) "fit": they are integers
 * X times one power of two 2^e with |X| < 2^14, e the exponent of the largest |x| minus 13,
 * -100 <= e <= 90, and (float)X·2^e gives every x back (all zeros, either sign: X = 0 at
 * e = 0). Then each product x·w with an E2M1 value w is an integer multiple of 2^(e-1) and
 * every partial sum of the 32 is below 32·6·2^14·2^e < 2^24·2^(e-1): exact in float32 in any
 * order, so every summation order gives gemm.h's bits (+0 for a zero sum: the lanes start
 * at +0). On true, X[0..4) hold X in k order and *e_out the exponent. The integer GEMV
 * (gemm_avx2.c) splits such X into two signed bytes.
 */
static inline bool fp4_sub_fit(const float *x, __m256i *X, int *e_out)
{
	const __m256i mag = _mm256_set1_epi32(0x7FFFFFFF);
	__m256 v[4];
	__m256i a = _mm256_setzero_si256();
	for (int i = 0; i < 4; i++) {
		v[i] = _mm256_loadu_ps(x + 8 * i);
		a = _mm256_max_epi32(a, _mm256_and_si256(_mm256_castps_si256(v[i]), mag));
	}
	/* the bits of the largest |x| (NaN and Inf above all finite values: e > 90) */
	const uint32_t amax = (uint32_t)hmax8_epi32(a);
	const int e = amax ? (int)(amax >> 23) - 127 - 13 : 0;
	if (e < -100 || e > 90)
		return false;
	const __m256 up = _mm256_set1_ps(pow2f(-e)), dn = _mm256_set1_ps(pow2f(e));
	__m256i bad = _mm256_setzero_si256();
	for (int i = 0; i < 4; i++) {
		X[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], up));
		bad = _mm256_or_si256(bad, _mm256_castps_si256(_mm256_cmp_ps(
			_mm256_mul_ps(_mm256_cvtepi32_ps(X[i]), dn), v[i], _CMP_NEQ_UQ)));
	}
	*e_out = e;
	return _mm256_testz_si256(bad, bad);
}

/*
 * Whether the 32 REFERENCE activations at x times any E2M1 weights sum exactly in float32 in
 * every order: with 2^e the lowest set bit among the nonzero |x| (-100 <= e, the largest
 * exponent at most 90 and 20 above e), every x is an integer X times 2^e, each product x·w an
 * integer multiple of 2^(e-1) (2w is an integer, |2w| <= 12), and every partial sum at most
 * Σ|X|·12 such units, below 2^24 when Σ|X| <= 1398101: exact. fp4_sub_fit is a special case;
 * this one also takes sub-blocks with small values, as long as the sum of magnitudes is small
 * in units of their finest bit. On true, X[0..4) hold X in k order (|X| < 2^21) and *e_out e
 * (0 for all zeros, either sign). The prefill kernel's "pairs" (gemm_tile_avx2.c) and the
 * integer GEMV's three-byte form (gemm_avx2.c) use it.
 */
static inline bool fp4_sub_exact(const float *x, __m256i *X, int *e_out)
{
	const __m256i mag = _mm256_set1_epi32(0x7FFFFFFF), zero = _mm256_setzero_si256();
	__m256i lo = _mm256_set1_epi32(1000), hi = _mm256_set1_epi32(-1000);
	__m256 v[4];
	for (int i = 0; i < 4; i++) {
		v[i] = _mm256_loadu_ps(x + 8 * i);
		const __m256i a = _mm256_and_si256(_mm256_castps_si256(v[i]), mag);
		const __m256i nz = _mm256_cmpgt_epi32(a, zero);
		const __m256i ef = _mm256_srli_epi32(a, 23); /* biased exponent */
		const __m256i m = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)),
						  _mm256_set1_epi32(0x800000));
		/* the significand's lowest set bit 2^j, j from its exact float conversion */
		const __m256i low = _mm256_and_si256(m, _mm256_sub_epi32(zero, m));
		const __m256i j = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(low)), 23);
		const __m256i lsb =
			_mm256_add_epi32(_mm256_sub_epi32(ef, _mm256_set1_epi32(127 + 23 + 127)), j);
		lo = _mm256_min_epi32(lo, _mm256_blendv_epi8(_mm256_set1_epi32(1000), lsb, nz));
		const __m256i eu = _mm256_sub_epi32(ef, _mm256_set1_epi32(127)); /* unbiased */
		hi = _mm256_max_epi32(hi, _mm256_blendv_epi8(_mm256_set1_epi32(-1000), eu, nz));
	}
	const int e = hmin8_epi32(lo), emax = hmax8_epi32(hi);
	if (emax < -999) { /* all zero */
		for (int i = 0; i < 4; i++)
			X[i] = zero;
		*e_out = 0;
		return true;
	}
	if (e < -100 || emax > 90 || emax - e > 20)
		return false; /* (NaN and Inf: exponent 128) */
	const __m256 up = _mm256_set1_ps(pow2f(-e));
	__m256i sum = zero; /* |X| < 2^21 each: no overflow */
	for (int i = 0; i < 4; i++) {
		X[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], up));
		sum = _mm256_add_epi32(sum, _mm256_abs_epi32(X[i]));
	}
	*e_out = e;
	return hsum8_epi32(sum) <= 1398101;
}

/* The REFERENCE FP8 factors sa·sb of a GEMV tile's 8 rows for K block b: sa the block's
 * activation scale, sb the UE8M0 scale of each row's 128x128 block (row t's block row starts
 * at scales[srow[t]]). */
static inline __m256 fp8_tile_factors(const uint8_t *scales, const size_t *srow, size_t b, float sa)
{
	int32_t ev[8];
	for (int t = 0; t < 8; t++)
		ev[t] = scales[srow[t] + b];
	const __m256i e = _mm256_loadu_si256((const __m256i *)(const void *)ev);
	return _mm256_mul_ps(_mm256_set1_ps(sa), e8m0_v(e));
}

/* The UE8M0 codes of a GEMV tile's 8 rows of FP4 weights for K block b: byte s of lane t is
 * row t's code of 32-wide sub-block s (row t's scales start at sc[t]). */
static inline __m256i fp4_tile_scale_codes(const uint8_t *const *sc, size_t b)
{
	int32_t sw[8];
	for (int t = 0; t < 8; t++)
		memcpy(&sw[t], sc[t] + b * 4, 4);
	/* built in registers: a 32-byte load of 8 fresh 4-byte stores waits for them to retire */
	return _mm256_setr_epi32(sw[0], sw[1], sw[2], sw[3], sw[4], sw[5], sw[6], sw[7]);
}

/* True when no code of e4 is 0 or 255: then every code e is 2^(e-127) by a shift alone. */
static inline bool e8m0_codes_plain(__m256i e4)
{
	return _mm256_movemask_epi8(_mm256_or_si256(
		       _mm256_cmpeq_epi8(e4, _mm256_setzero_si256()),
		       _mm256_cmpeq_epi8(e4, _mm256_set1_epi8((char)0xFF)))) == 0;
}

/* Sub-block sub's scales of the 8 rows of fp4_tile_scale_codes as floats (e8m0_v; by the
 * shift alone when `plain`, see e8m0_codes_plain). */
static inline __m256 fp4_sub_scales(__m256i e4, int sub, bool plain)
{
	const __m256i e = _mm256_and_si256(_mm256_srli_epi32(e4, 8 * sub), _mm256_set1_epi32(0xFF));
	return plain ? _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)) : e8m0_v(e);
}

#endif /* SRT_OPS_GEMM_AVX2_COMMON_H */
