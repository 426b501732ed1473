/*
 * core/ops/gemm_avx512_bf16.c — REFERENCE-mode GEMVs (M = 1) for FP8 and FP4 weights on
 * x86-64 with AVX512_BF16, AVX512_VBMI and AVX512VL (compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vbmi -mavx512bf16 -mavx512vnni, never -mfma). Called from gemm_avx512.c;
 * runs only after srt_gemm_bf16dp_usable() said yes; the FP4 integer sums (VPDPBUSD, "FP4 by
 * integer dot products" below) only where cpuid also shows AVX512_VNNI.
 *
 * Why it gives gemm.h's bits. In REFERENCE mode every product is of two numbers with few
 * significant bits: an E4M3 activation value (4 bits) times an E4M3 (4 bits) or E2M1 (2 bits)
 * weight value. Both are exact bf16 numbers, and their product is exact in float32. VDPBF16PS
 * computes, per float32 lane j, acc += a[2j+1]·b[2j+1], then acc += a[2j]·b[2j], each addition
 * rounded to nearest even (the Intel SDM's definition; checked at run time, below), with
 * denormal inputs and results flushed to zero. gemm.h's order is 8 lanes per block (k mod 8),
 * each adding its products in k order, product then add. So if the word pair of lane j holds
 * the products of k and k + 8 (k first, in the odd word), one VDPBF16PS does two steps of
 * that lane's chain, with the same roundings. Nothing is ever denormal: the block check
 * (x_exact_products) admits activations of at most 8 significant bits in [2^-100, 2^101) or
 * zero, so every product is a multiple of 2^-119 and every nonzero sum is at least that,
 * and none overflows. Activations that fail the check go to gemm_avx512.c's float kernels.
 *
 * Decoding, no float conversion at all:
 *  - E4M3: each code byte is looked up twice by VPERMI2B in 128-entry tables (the low 7 bits
 *    index; bit 7, the sign, is ignored), giving the low and the high byte of its bf16 value;
 *    the sign is or-ed into the high byte. One more VPERMI2B picks, from those two registers,
 *    the bytes of 32 bf16 words in lane order: the two rows of a pair (rows a and b in lanes
 *    0-7 and 8-15, as gemm_avx512.c's pair layout, so reduce8 combines them) from one
 *    [a 32 bytes | b 32 bytes] load.
 *  - E2M1: one VPERMB per step puts, in the low byte of each word, the code byte that holds
 *    the word's nibble (in lane order, below); VPERMW then looks the word's low 5 bits up
 *    in a 32-entry table of bf16 values that repeats the 16 nibble values (so bit 4, the
 *    other nibble's, does not matter): the low nibbles (even k) directly, the high nibbles
 *    (odd k) after a 4-bit word shift. A block's 4 sub-blocks are summed in one register of
 *    16 lanes: lane 4s + q holds lane 2q of sub-block s (even register) or lane 2q + 1 (odd
 *    register), both from the same bytes; a transposed reduction of 8 rows gives the 32
 *    sub-block results in gemm.h's lane order.
 * The activations are arranged once per call into the matching bf16 words.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_avx2_common.h"
#include "ops/gemm_avx512_pairs.h"
#include "ops/gemm_isa.h"

#define GEMV_KMAX 8192 /* K of the on-stack activation words (32 KiB for FP8); larger K: float kernels */

static inline __m512bh as_bh(__m512i v)
{
	__m512bh r;
	memcpy(&r, &v, sizeof r);
	return r;
}

static inline uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (uint16_t)(u >> 16);
}

/* The float gemm.c's fp8_fast gives code c (0..127: no sign; NaN code 127 gives 480). */
static float e4m3_mag(unsigned c)
{
	const uint32_t u = (uint32_t)(c & 0x7Fu) << 20;
	float f;
	memcpy(&f, &u, sizeof f);
	return f * 0x1p120f;
}

/* ---- is VDPBF16PS what the SDM says? ------------------------------------------------------- */

/* One lane the SDM's way: acc + a1·b1, rounded, plus a0·b0, rounded (products exact). */
static float dp_lane_ref(float acc, uint16_t a1, uint16_t b1, uint16_t a0, uint16_t b0)
{
	float f[4];
	const uint16_t h[4] = {a1, b1, a0, b0};
	for (int i = 0; i < 4; i++) {
		const uint32_t u = (uint32_t)h[i] << 16;
		memcpy(&f[i], &u, sizeof u);
	}
	volatile float s = acc + f[0] * f[1];
	return s + f[2] * f[3];
}

/* Random lanes with 4-bit significands over 24 binades (as REFERENCE products have), where
 * the rounding of each addition shows: a fused three-way sum or the other order fails about
 * 3% of them (measured on Zen 4). Deterministic; about 10 µs. */
static bool dp_known_answers(void)
{
	uint32_t s = 0x9E3779B9u;
	for (int it = 0; it < 64; it++) {
		_Alignas(64) uint16_t a[32], b[32];
		_Alignas(64) float acc[16], out[16];
		for (int i = 0; i < 32; i++) {
			s = s * 1664525u + 1013904223u;
			a[i] = (uint16_t)(((s >> 31) << 15) | ((115u + ((s >> 8) % 24u)) << 7) | ((s >> 4) & 0x70u));
			s = s * 1664525u + 1013904223u;
			b[i] = (uint16_t)(((s >> 31) << 15) | ((115u + ((s >> 8) % 24u)) << 7) | ((s >> 4) & 0x70u));
		}
		for (int j = 0; j < 16; j++) {
			s = s * 1664525u + 1013904223u;
			const uint32_t u = ((s >> 31) << 31) | ((112u + ((s >> 8) % 36u)) << 23) | ((s >> 2) & 0x7FFFFFu);
			memcpy(&acc[j], &u, sizeof u);
		}
		const __m512 r = _mm512_dpbf16_ps(_mm512_load_ps(acc), as_bh(_mm512_load_si512(a)),
						  as_bh(_mm512_load_si512(b)));
		_mm512_store_ps(out, r);
		for (int j = 0; j < 16; j++) {
			const float e = dp_lane_ref(acc[j], a[2 * j + 1], b[2 * j + 1], a[2 * j], b[2 * j]);
			if (memcmp(&e, &out[j], sizeof e) != 0)
				return false;
		}
	}
	return true;
}

static bool cpu_bf16_vbmi_vl(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c & (1u << 1)) /* AVX512_VBMI */ ||
	    !(b & (1u << 31)))                                               /* AVX512VL */
		return false;
	return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)); /* AVX512_BF16 */
}

/* The kernels' constant tables, built once (with the known-answer test) instead of per call. */
static struct {
	_Alignas(64) uint8_t fp8_lo[128], fp8_hi[128]; /* bf16 bytes of each E4M3 magnitude */
	_Alignas(64) uint8_t fp8_ar[2][64];            /* fp8_arrange(0), fp8_arrange(16) */
	_Alignas(64) uint16_t fp4_w[32];               /* bf16 of each nibble, twice (VPERMW) */
	_Alignas(64) uint8_t fp4_ar[2][64];            /* fp4_arrange(0), fp4_arrange(1) */
	_Alignas(64) uint8_t fp4_sx[64];               /* scale codes -> lane 4s + r */
	_Alignas(64) int32_t fp4_yix[2][16];           /* sub-block terms -> [s: rows 0-7] */
	_Alignas(64) int32_t fp4_xix[2][16];           /* activation words, even / odd lanes */
	_Alignas(64) uint8_t fp4_u8[64];               /* 2·E2M1 + 12 of each nibble, 4 times */
	_Alignas(64) uint8_t even_odd[2][64];          /* bytes 2β, 2β + 1 of 128 (VPERMT2B) */
} tab;

static void fp8_arrange(unsigned off, uint8_t *ix);
static void fp4_arrange(unsigned h, uint8_t *ix);

static void build_tables(void)
{
	for (unsigned c = 0; c < 128; c++) {
		const uint16_t h = bf16_bits(e4m3_mag(c));
		tab.fp8_lo[c] = (uint8_t)h;
		tab.fp8_hi[c] = (uint8_t)(h >> 8);
	}
	fp8_arrange(0, tab.fp8_ar[0]);
	fp8_arrange(16, tab.fp8_ar[1]);
	for (unsigned i = 0; i < 32; i++)
		tab.fp4_w[i] = bf16_bits(srt_fp4_e2m1_table[i & 15u]);
	fp4_arrange(0, tab.fp4_ar[0]);
	fp4_arrange(1, tab.fp4_ar[1]);
	/* a tile's scale tables hold rows 0-1 and 2-3 (4-5, 6-7) in 128 bytes: block b's code of
	 * row r, sub-block s is byte 32r + 4(b mod 8) + s, wanted in the low byte of lane 4s + r */
	for (unsigned L = 0; L < 64; L++)
		tab.fp4_sx[L] = (uint8_t)(L % 4 == 0 ? 32u * ((L / 4) % 4) + L / 16 : 0);
	/* lane 4s + r of p0 (rows 0-3) and of p1 (rows 4-7) -> [s0 rows 0-7 | s1 rows 0-7] */
	for (int L = 0; L < 16; L++)
		for (int half = 0; half < 2; half++) {
			const int sub = 2 * half + L / 8, r = L % 8;
			tab.fp4_yix[half][L] = 4 * sub + r % 4 + (r < 4 ? 0 : 16);
		}
	/* lane 4s + q of an activation vector takes float j = p + 2q of 16 loaded at sub-block s
	 * (a table pair of sub-blocks (0, 1) for lanes 0-7, (2, 3) for 8-15) */
	for (int p = 0; p < 2; p++)
		for (int L = 0; L < 16; L++)
			tab.fp4_xix[p][L] = 16 * ((L / 4) % 2) + p + 2 * (L % 4);
	for (unsigned i = 0; i < 64; i++) {
		tab.fp4_u8[i] = (uint8_t)(2.0f * srt_fp4_e2m1_table[i & 15u] + 12.0f);
		tab.even_odd[0][i] = (uint8_t)(2 * i);
		tab.even_odd[1][i] = (uint8_t)(2 * i + 1);
	}
}

static bool cpu_vnni(void)
{
	unsigned a, b, c, d;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11)); /* AVX512_VNNI */
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool usable, vnni;

static void init_once(void)
{
	usable = cpu_bf16_vbmi_vl() && dp_known_answers();
	vnni = usable && cpu_vnni();
	if (usable)
		build_tables();
}

bool srt_gemm_bf16dp_usable(void)
{
	pthread_once(&once, init_once);
	return usable;
}

/* ---- FP8 ----------------------------------------------------------------------------------- */

/* Activation words of block b's step v (k = 16v .. 16v+15): lane j (and 8 + j) holds
 * [x[16v+j] high word | x[16v+j+8] low word], the same for both rows of a pair. */
static void fp8_x_words(const float *xq, size_t nsteps, __m512i *xw)
{
	const __m256i hi = _mm256_set1_epi32((int32_t)0xFFFF0000u);
	for (size_t v = 0; v < nsteps; v++) {
		const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 16 * v));
		const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 16 * v + 8));
		const __m256i d = _mm256_or_si256(_mm256_and_si256(a, hi), _mm256_srli_epi32(c, 16));
		xw[v] = _mm512_broadcast_i64x4(d);
	}
}

/* Byte indices that make bf16 words from [LO | HI] (VPERMI2B: 0-63 LO, 64-127 HI), where LO
 * and HI hold the low and high bytes of the values of one [a 32 | b 32] load: lane L = 8h + j
 * gets k = off + j (odd word) and off + j + 8 (even word) of row h. */
static void fp8_arrange(unsigned off, uint8_t *ix)
{
	for (unsigned L = 0; L < 16; L++) {
		const unsigned pos = 32u * (L / 8) + off + L % 8;
		ix[4 * L + 0] = (uint8_t)(pos + 8);
		ix[4 * L + 1] = (uint8_t)(64 + pos + 8);
		ix[4 * L + 2] = (uint8_t)pos;
		ix[4 * L + 3] = (uint8_t)(64 + pos);
	}
}

static inline __m512i load64(const uint8_t *p)
{
	return _mm512_loadu_si512((const void *)p);
}

/* [a 32 bytes | b 32 bytes] */
static inline __m512i load_32_32(const uint8_t *a, const uint8_t *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)a)),
				  _mm256_loadu_si256((const __m256i *)(const void *)b), 1);
}

/* paired (SRT_WT_FP8_PAIRED, gemm.h): each 64-byte group of a row pair is laid out so that
 * VPUNPCKLBW / VPUNPCKHBW of its two lookups are the words fp8_arrange's two VPERMI2B make
 * from a row-major [a 32 | b 32] load: one load and two unpacks in place of a load, an insert
 * and two VPERMI2B. */
static inline __attribute__((always_inline)) void
gemv_fp8(const struct srt_weight *w, const __m512i *xw, const float *xs, float *y, size_t n0,
	 size_t ntiles, bool paired)
{
	const size_t K = w->cols, nb = K / KB;
	const __m512i tl0 = _mm512_load_si512(tab.fp8_lo), tl1 = _mm512_load_si512(tab.fp8_lo + 64);
	const __m512i th0 = _mm512_load_si512(tab.fp8_hi), th1 = _mm512_load_si512(tab.fp8_hi + 64);
	const __m512i sgn = _mm512_set1_epi8((char)0x80);
	const __m512i ar0 = _mm512_load_si512(tab.fp8_ar[0]), ar1 = _mm512_load_si512(tab.fp8_ar[1]);
	gemv_head_prefetch(w->data, K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint8_t *rows[8];
		size_t srow[8]; /* the scale block row of each of the 8 rows */
		for (int t = 0; t < 8; t++) {
			rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * K;
			srow[t] = ((n + (size_t)t) / KB) * nb;
		}
		/* the tile after next, one line per 64 bytes consumed (gemm_avx512.c's gemv_ref) */
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * K : NULL;
		__m256 yacc = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m512 acc[4];
			for (int p = 0; p < 4; p++)
				acc[p] = _mm512_setzero_ps();
			for (int i = 0; i < 4; i++) { /* 32 bytes of each row */
				if (pf)
					for (int l = 0; l < 4; l++)
						_mm_prefetch(pf + b * (8 * KB) + (size_t)i * 256 + (size_t)l * 64,
							     _MM_HINT_T1);
				for (int p = 0; p < 4; p++) {
					const size_t o = b * KB + (size_t)i * 32;
					/* paired: the pair's group 4b + i starts at byte 2·o of its 2K */
					const __m512i r = paired ? load64(rows[2 * p] + 2 * o)
								 : load_32_32(rows[2 * p] + o, rows[2 * p + 1] + o);
					const __m512i lo = _mm512_permutex2var_epi8(tl0, r, tl1);
					const __m512i hi = _mm512_ternarylogic_epi32(
						_mm512_permutex2var_epi8(th0, r, th1), r, sgn, 0xF8); /* a | (b & c) */
					const __m512i w0 = paired ? _mm512_unpacklo_epi8(lo, hi)
								  : _mm512_permutex2var_epi8(lo, ar0, hi);
					const __m512i w1 = paired ? _mm512_unpackhi_epi8(lo, hi)
								  : _mm512_permutex2var_epi8(lo, ar1, hi);
					acc[p] = _mm512_dpbf16_ps(acc[p], as_bh(w0), as_bh(xw[b * 8 + 2 * i]));
					acc[p] = _mm512_dpbf16_ps(acc[p], as_bh(w1), as_bh(xw[b * 8 + 2 * i + 1]));
				}
			}
			const __m256 f = fp8_tile_factors(w->scales, srow, b, xs[b]);
			yacc = _mm256_add_ps(yacc, _mm256_mul_ps(reduce8(acc), f));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* ---- FP4 ----------------------------------------------------------------------------------- */

/* Activation words of block b: xw[4b + 2p + h], p = 0 for even lanes, 1 for odd, h the step:
 * lane 4s + q holds [x[32s + j + 16h] high word | x[32s + j + 16h + 8] low word], j = 2q + p. */
static void fp4_x_words(const float *xq, size_t nb, __m512i *xw)
{
	const __m512i ix[2] = {_mm512_load_si512(tab.fp4_xix[0]), _mm512_load_si512(tab.fp4_xix[1])};
	const __m512i eight = _mm512_set1_epi32(8), hi = _mm512_set1_epi32((int32_t)0xFFFF0000u);
	for (size_t b = 0; b < nb; b++)
		for (int h = 0; h < 2; h++) {
			const float *x = xq + b * KB + 16 * (size_t)h;
			const __m512i s0 = _mm512_loadu_si512(x), s1 = _mm512_loadu_si512(x + 32);
			const __m512i s2 = _mm512_loadu_si512(x + 64), s3 = _mm512_loadu_si512(x + 96);
			for (int p = 0; p < 2; p++) {
				const __m512i il = _mm512_add_epi32(ix[p], eight);
				const __m512i first = _mm512_mask_mov_epi32(
					_mm512_permutex2var_epi32(s0, ix[p], s1), (__mmask16)0xFF00,
					_mm512_permutex2var_epi32(s2, ix[p], s3));
				const __m512i second = _mm512_mask_mov_epi32(
					_mm512_permutex2var_epi32(s0, il, s1), (__mmask16)0xFF00,
					_mm512_permutex2var_epi32(s2, il, s3));
				xw[4 * b + 2 * (size_t)p + (size_t)h] =
					_mm512_ternarylogic_epi32(first, hi, _mm512_srli_epi32(second, 16), 0xEA);
			}
		}
}

/* VPERMB indices for step h of one row's 64-byte block (byte β holds k = 2β and 2β + 1):
 * lane 4s + q gets the byte of k = 32s + 2q + 16h in its odd word (added first) and the byte
 * of k + 8 in its even word (low bytes; the high bytes are not read). */
static void fp4_arrange(unsigned h, uint8_t *ix)
{
	for (unsigned L = 0; L < 16; L++) {
		const unsigned beta = 16u * (L / 4) + L % 4 + 8u * h;
		ix[4 * L + 0] = (uint8_t)(beta + 4);
		ix[4 * L + 1] = 0;
		ix[4 * L + 2] = (uint8_t)beta;
		ix[4 * L + 3] = 0;
	}
}

/* 16-lane sums of rows t and u (even lanes a, odd lanes o, lane 4s + q as fp4_x_words) ->
 * per sub-block s: [((l0+l4)+(l1+l5)), ((l2+l6)+(l3+l7))] of t, then of u. */
static inline __m512 fp4_half_sums(__m512 at, __m512 au, __m512 ot, __m512 ou)
{
	const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(at, au, _MM_SHUFFLE(1, 0, 1, 0)),
				       _mm512_shuffle_ps(at, au, _MM_SHUFFLE(3, 2, 3, 2)));
	const __m512 o = _mm512_add_ps(_mm512_shuffle_ps(ot, ou, _MM_SHUFFLE(1, 0, 1, 0)),
				       _mm512_shuffle_ps(ot, ou, _MM_SHUFFLE(3, 2, 3, 2)));
	return _mm512_add_ps(e, o);
}

/* Block b's 32 sub-block sums of a tile by bf16 dot products (activation words xb =
 * fp4_x_words' 4 of the block), in the layout of d below. */
static inline void fp4_blk_bf16(const uint8_t *const *rows, size_t b, const __m512i *xb,
				__m512i t16, __m512i pw0, __m512i pw1, __m512 *d)
{
	__m512 ev[8], od[8];
	for (int t = 0; t < 8; t++) {
		const __m512i r = _mm512_loadu_si512(rows[t] + b * 64);
		const __m512i d0 = _mm512_permutexvar_epi8(pw0, r);
		const __m512i d1 = _mm512_permutexvar_epi8(pw1, r);
		ev[t] = _mm512_dpbf16_ps(_mm512_setzero_ps(), as_bh(_mm512_permutexvar_epi16(d0, t16)),
					 as_bh(xb[0]));
		ev[t] = _mm512_dpbf16_ps(ev[t], as_bh(_mm512_permutexvar_epi16(d1, t16)), as_bh(xb[1]));
		od[t] = _mm512_dpbf16_ps(_mm512_setzero_ps(),
					 as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(d0, 4), t16)),
					 as_bh(xb[2]));
		od[t] = _mm512_dpbf16_ps(od[t], as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(d1, 4), t16)),
					 as_bh(xb[3]));
	}
	/* per sub-block s (128-bit lane s): the 4 results of rows 0-3, then of 4-7 */
	for (int g = 0; g < 2; g++) {
		const __m512 g01 = fp4_half_sums(ev[4 * g], ev[4 * g + 1], od[4 * g], od[4 * g + 1]);
		const __m512 g23 = fp4_half_sums(ev[4 * g + 2], ev[4 * g + 3], od[4 * g + 2], od[4 * g + 3]);
		d[g] = _mm512_add_ps(_mm512_shuffle_ps(g01, g23, _MM_SHUFFLE(2, 0, 2, 0)),
				     _mm512_shuffle_ps(g01, g23, _MM_SHUFFLE(3, 1, 3, 1)));
	}
}

/*
 * FP4 by integer dot products. Where a sub-block's 32 activations are integers X times one
 * power of two 2^e with |X| < 2^14, every product x·w is an integer multiple of 2^(e-1) (the
 * E2M1 values are halves) and every partial sum of the sub-block is below 32·6·2^14·2^e <
 * 2^24·2^(e-1): gemm.h's float32 sums are all exact, whatever their order, and equal the
 * integer sum (Σ X·2w)·2^(e-1). VPDPBUSD computes it: the weights as unsigned bytes 2w + 12
 * (one VPERMB of the code bytes for the even k, one of the bytes shifted right by 4 for the
 * odd k; the 64-entry table repeats the 16 nibbles, so the index's bits 4-5 do not matter),
 * the activations as signed bytes Xh = X >> 7 and Xl = X & 127 (first Σ w·Xh, shifted left by
 * 7, then Σ w·Xl added); 12·ΣX, made once per call, comes off after the row sums. The sums of
 * a dword lane are those of 8 k of one sub-block, so the 16 lanes of a row are 4 per sub-block
 * (128-bit lane s = sub-block s), added in any order (integers).
 */
struct fp4_xi {
	__m512i a_hi, b_hi, a_lo, b_lo; /* byte β: Xh, Xl of k = 2β (a) and 2β + 1 (b) */
	__m512i corr;                   /* lane 4s + r: 12·ΣX of sub-block s */
	__m512 f;                       /* lane 4s + r: 2^(e_s - 1) */
};

/* Block x (128 activations) as struct fp4_xi, or false where some sub-block does not fit. */
static bool fp4_int_block(const float *x, struct fp4_xi *o)
{
	_Alignas(64) int8_t hi[128], lo[128];
	_Alignas(64) int32_t corr[16];
	_Alignas(64) float f[16];
	for (int s = 0; s < 4; s++) {
		const __m512 v0 = _mm512_loadu_ps(x + 32 * s), v1 = _mm512_loadu_ps(x + 32 * s + 16);
		const __m512i mag = _mm512_set1_epi32(0x7FFFFFFF);
		const __m512i a = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), mag),
						   _mm512_and_si512(_mm512_castps_si512(v1), mag));
		/* |X| < 2^14 for the largest: e = its exponent - 13; NaN, Inf, tiny: no; all
		 * zeros (either sign): X = 0 at any e */
		const uint32_t amax = (uint32_t)_mm512_reduce_max_epu32(a);
		const int e = amax ? (int)(amax >> 23) - 127 - 13 : 0;
		if (e < -100 || e > 90)
			return false;
		uint32_t bits = (uint32_t)(127 - e) << 23;
		float up;
		memcpy(&up, &bits, sizeof up);
		const __m512 y0 = _mm512_mul_ps(v0, _mm512_set1_ps(up));
		const __m512 y1 = _mm512_mul_ps(v1, _mm512_set1_ps(up));
		const __m512i X0 = _mm512_cvtps_epi32(y0), X1 = _mm512_cvtps_epi32(y1);
		/* X·2^e must give x back: x·2^-e may underflow (a tiny x next to a large one), and
		 * then X = 0 would drop it */
		bits = (uint32_t)(127 + e) << 23;
		float dn;
		memcpy(&dn, &bits, sizeof dn);
		if (_mm512_cmpneq_ps_mask(_mm512_mul_ps(_mm512_cvtepi32_ps(X0), _mm512_set1_ps(dn)), v0) |
		    _mm512_cmpneq_ps_mask(_mm512_mul_ps(_mm512_cvtepi32_ps(X1), _mm512_set1_ps(dn)), v1))
			return false; /* not integers at that scale */
		const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(X0, X1));
		_mm_store_si128((__m128i *)(void *)(hi + 32 * s), _mm512_cvtepi32_epi8(_mm512_srai_epi32(X0, 7)));
		_mm_store_si128((__m128i *)(void *)(hi + 32 * s + 16), _mm512_cvtepi32_epi8(_mm512_srai_epi32(X1, 7)));
		const __m512i m127 = _mm512_set1_epi32(127);
		_mm_store_si128((__m128i *)(void *)(lo + 32 * s), _mm512_cvtepi32_epi8(_mm512_and_si512(X0, m127)));
		_mm_store_si128((__m128i *)(void *)(lo + 32 * s + 16), _mm512_cvtepi32_epi8(_mm512_and_si512(X1, m127)));
		bits = (uint32_t)(127 + e - 1) << 23;
		float fe;
		memcpy(&fe, &bits, sizeof fe);
		for (int r = 0; r < 4; r++) {
			corr[4 * s + r] = 12 * sum;
			f[4 * s + r] = fe;
		}
	}
	const __m512i ie = _mm512_load_si512(tab.even_odd[0]), io = _mm512_load_si512(tab.even_odd[1]);
	const __m512i h0 = _mm512_load_si512(hi), h1 = _mm512_load_si512(hi + 64);
	const __m512i l0 = _mm512_load_si512(lo), l1 = _mm512_load_si512(lo + 64);
	o->a_hi = _mm512_permutex2var_epi8(h0, ie, h1);
	o->b_hi = _mm512_permutex2var_epi8(h0, io, h1);
	o->a_lo = _mm512_permutex2var_epi8(l0, ie, l1);
	o->b_lo = _mm512_permutex2var_epi8(l0, io, l1);
	o->corr = _mm512_load_si512(corr);
	o->f = _mm512_load_ps(f);
	return true;
}

/* Lane sums of 4 rows' accumulators: 128-bit lane s, dword r = Σ of row r's lanes 4s..4s+3. */
static inline __m512i sum4_rows(__m512i a, __m512i b, __m512i c, __m512i e)
{
	const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
	const __m512i ce = _mm512_add_epi32(_mm512_unpacklo_epi32(c, e), _mm512_unpackhi_epi32(c, e));
	return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, ce), _mm512_unpackhi_epi64(ab, ce));
}

/* fp4_blk_bf16's d for a block that fits (struct fp4_xi), by VPDPBUSD. */
static inline void fp4_blk_int(const uint8_t *const *rows, size_t b, const struct fp4_xi *xi,
			       __m512i tu, __m512 *d)
{
	__m512i acc[8];
	for (int t = 0; t < 8; t++) {
		const __m512i r = _mm512_loadu_si512(rows[t] + b * 64);
		const __m512i wa = _mm512_permutexvar_epi8(r, tu);
		const __m512i wb = _mm512_permutexvar_epi8(_mm512_srli_epi16(r, 4), tu);
		__m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, xi->a_hi);
		a = _mm512_dpbusd_epi32(a, wb, xi->b_hi);
		a = _mm512_slli_epi32(a, 7);
		a = _mm512_dpbusd_epi32(a, wa, xi->a_lo);
		acc[t] = _mm512_dpbusd_epi32(a, wb, xi->b_lo);
	}
	for (int g = 0; g < 2; g++) {
		const __m512i sum = sum4_rows(acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3]);
		d[g] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum, xi->corr)), xi->f);
	}
}

/* xw: fp4_x_words of every block; xi: blocks with isint[b] in the integer form. */
static void gemv_fp4(const struct srt_weight *w, const __m512i *xw, const struct fp4_xi *xi,
		     const bool *isint, const float *xs, float *y, size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	const __m512i t16 = _mm512_load_si512(tab.fp4_w);
	const __m512i pw0 = _mm512_load_si512(tab.fp4_ar[0]), pw1 = _mm512_load_si512(tab.fp4_ar[1]);
	const __m512i tu = _mm512_load_si512(tab.fp4_u8);
	/* the scale codes of a tile, 8 blocks (32 bytes of each row) at a time, gathered by one
	 * VPERMI2B per block (tab.fp4_sx) */
	const __m512i sxi = _mm512_load_si512(tab.fp4_sx);
	const __m512i yi01 = _mm512_load_si512(tab.fp4_yix[0]), yi23 = _mm512_load_si512(tab.fp4_yix[1]);
	const __mmask64 dwlow = 0x1111111111111111ull;
	gemv_head_prefetch(w->data, K / 2, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint8_t *rows[8], *sc[8];
		for (int t = 0; t < 8; t++) {
			rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * (K / 2);
			sc[t] = w->scales + (n + (size_t)t) * (K / 32);
		}
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * (K / 2) : NULL;
		__m256 yacc = _mm256_setzero_ps();
		__m512i stab[4] = {0}; /* the scale tables of blocks [b & ~7, +8) */
		bool plain = false; /* no code 0 or 255 in them: 2^(e-127) by a shift */
		for (size_t b = 0; b < nb; b++) {
			if (b % 8 == 0) {
				const size_t nbytes = K / 32 - 4 * b < 32 ? K / 32 - 4 * b : 32;
				const __mmask32 lm = (__mmask32)(((uint64_t)1 << nbytes) - 1);
				__mmask64 special = 0;
				for (int q = 0; q < 4; q++) {
					stab[q] = _mm512_inserti64x4(
						_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(lm, sc[2 * q] + 4 * b)),
						_mm256_maskz_loadu_epi8(lm, sc[2 * q + 1] + 4 * b), 1);
					special |= _mm512_cmpeq_epi8_mask(stab[q], _mm512_set1_epi8((char)0xFF));
					special |= _mm512_cmpeq_epi8_mask(stab[q], _mm512_setzero_si512()) &
						   ((__mmask64)lm | ((__mmask64)lm << 32));
				}
				plain = special == 0;
			}
			if (pf)
				for (int t = 0; t < 8; t++)
					_mm_prefetch(pf + b * (4 * KB) + (size_t)t * 64, _MM_HINT_T1);
			/* per sub-block s (128-bit lane s): the 4 results of rows 0-3, then of 4-7 */
			__m512 d[2];
			if (isint[b])
				fp4_blk_int(rows, b, xi + b, tu, d);
			else
				fp4_blk_bf16(rows, b, xw + 4 * b, t16, pw0, pw1, d);
			const __m512i ix = _mm512_add_epi8(sxi, _mm512_set1_epi8((char)(4 * (b % 8))));
			const __m512i c0 = _mm512_maskz_permutex2var_epi8(dwlow, stab[0], ix, stab[1]);
			const __m512i c1 = _mm512_maskz_permutex2var_epi8(dwlow, stab[2], ix, stab[3]);
			const __m512 f0 = plain ? _mm512_castsi512_ps(_mm512_slli_epi32(c0, 23)) : e8m0_16(c0);
			const __m512 f1 = plain ? _mm512_castsi512_ps(_mm512_slli_epi32(c1, 23)) : e8m0_16(c1);
			const __m512 sa = _mm512_set1_ps(xs[b]);
			const __m512 p0 = _mm512_mul_ps(_mm512_mul_ps(d[0], sa), f0);
			const __m512 p1 = _mm512_mul_ps(_mm512_mul_ps(d[1], sa), f1);
			/* [s0: rows 0-7 | s1: rows 0-7] and [s2 | s3], then y + d·sa·sb per sub-block,
			 * in order */
			const __m512 q01 = _mm512_permutex2var_ps(p0, yi01, p1);
			const __m512 q23 = _mm512_permutex2var_ps(p0, yi23, p1);
			yacc = _mm256_add_ps(yacc, _mm512_castps512_ps256(q01));
			yacc = _mm256_add_ps(yacc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(q01), 1)));
			yacc = _mm256_add_ps(yacc, _mm512_castps512_ps256(q23));
			yacc = _mm256_add_ps(yacc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(q23), 1)));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* ---- bf16 weights, EXACT mode ------------------------------------------------------------ */

/*
 * bf16 weights times activations that are bf16 values (the reference profile rounds its normed
 * rows to bf16): every product has at most 16 significant bits and is exact in float32, so
 * VDPBF16PS gives gemm.h's EXACT bits as it gives the FP8 ones above (the pair of lane j holds
 * k and k + 8, k in the odd word: two steps of that lane's chain), provided nothing is ever
 * denormal and nothing overflows. Both hold when every nonzero activation and weight has a
 * biased exponent in [BW_EMIN, BW_EMAX] = [71, 182] (magnitudes 2^-56 .. 2^56): a product's
 * lowest bit is then at least 2^(71-127-7 + 71-127-7) = 2^-126, so every nonzero partial sum is
 * normal, and K <= 8192 products below 2^112 each stay far from overflow. The activations are
 * checked once per call (fp8_x_words takes their high words); each tile's weights as they are
 * read, and a tile holding any other weight is left to the caller. The weights of a pair of
 * rows are arranged by one VPERMT2W per 16 k from a [a 32 words | b 32 words] pair of loads.
 */
#define BW_EMIN 71
#define BW_EMAX 182
#define BW_XMAX 16384 /* rows x K of the on-stack activation words (64 KiB) */

/* Every x[0..k) a bf16 value, zero or of biased exponent in [BW_EMIN, BW_EMAX]. */
static bool bw_x_ok(const float *x, size_t k)
{
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF), mag = _mm512_set1_epi32(0x7FFFFFFF);
	const __m512i emin = _mm512_set1_epi32(BW_EMIN << 23);
	const __m512i emax = _mm512_set1_epi32((BW_EMAX << 23) | 0x7FFFFF);
	__mmask16 bad = 0;
	for (size_t i = 0; i < k; i += 16) {
		const __m512i v = _mm512_loadu_si512(x + i), a = _mm512_and_si512(v, mag);
		const __mmask16 nz = _mm512_test_epi32_mask(a, a);
		bad |= _mm512_test_epi32_mask(v, lo16) | _mm512_mask_cmplt_epu32_mask(nz, a, emin) |
		       _mm512_mask_cmpgt_epu32_mask(nz, a, emax);
	}
	return bad == 0;
}

/* Word indices (VPERMT2W, 0-31 row a, 32-63 row b) of steps 0 and 1 of a 32-word load: lane
 * L = 8h + j gets k = 16u + j in its odd word, 16u + j + 8 in its even one, of row h. */
static const int16_t bw_ix[2][32] = {
	{8, 0, 9, 1, 10, 2, 11, 3, 12, 4, 13, 5, 14, 6, 15, 7,
	 40, 32, 41, 33, 42, 34, 43, 35, 44, 36, 45, 37, 46, 38, 47, 39},
	{24, 16, 25, 17, 26, 18, 27, 19, 28, 20, 29, 21, 30, 22, 31, 23,
	 56, 48, 57, 49, 58, 50, 59, 51, 60, 52, 61, 53, 62, 54, 63, 55}};

/* Weights outside [BW_EMIN, BW_EMAX] (nor zero) among the 32 words of v. */
static inline __mmask32 bw_w_bad(__m512i v)
{
	const __m512i a = _mm512_and_si512(v, _mm512_set1_epi16(0x7FFF));
	const __mmask32 nz = _mm512_test_epi16_mask(a, a);
	return _mm512_mask_cmplt_epu16_mask(nz, a, _mm512_set1_epi16(BW_EMIN << 7)) |
	       _mm512_mask_cmpgt_epu16_mask(nz, a, _mm512_set1_epi16((int16_t)((BW_EMAX << 7) | 0x7F)));
}

/* Tiles of M rows (activation words xw + r·xst, fp8_x_words' layout); returns the tiles done
 * before the first whose weights do not all fit (its y untouched). */
static inline __attribute__((always_inline)) size_t
gemv_bw(const struct srt_weight *w, const __m512i *xw, size_t xst, float *y, size_t ldy, size_t n0,
	size_t ntiles, const int M)
{
	const size_t K = w->cols, nb = K / KB;
	const __m512i i0 = _mm512_loadu_si512(bw_ix[0]), i1 = _mm512_loadu_si512(bw_ix[1]);
	gemv_head_prefetch(w->data, 2 * K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint16_t *rows[8];
		/* the tile after next, as gemm_avx512.c's gemv_bf16: 128 bytes a step */
		const char *pf = bf16_tile_rows(w->data, K, n, tt, ntiles, rows);
		__m256 yacc[4];
		for (int r = 0; r < M; r++)
			yacc[r] = _mm256_setzero_ps();
		__mmask32 bad = 0;
		for (size_t b = 0; b < nb; b++) {
			__m512 acc[4][4]; /* [row][pair]: 4·M independent chains */
			for (int r = 0; r < M; r++)
				for (int p = 0; p < 4; p++)
					acc[r][p] = _mm512_setzero_ps();
			for (size_t i = 0; i < 4; i++) { /* 32 words of each row */
				if (pf)
					for (int l = 0; l < 8; l++)
						_mm_prefetch(pf + b * (16 * KB) + i * 512 + (size_t)l * 64, _MM_HINT_T1);
				for (int p = 0; p < 4; p++) {
					const __m512i ra = _mm512_loadu_si512(rows[2 * p] + b * KB + i * 32);
					const __m512i rb = _mm512_loadu_si512(rows[2 * p + 1] + b * KB + i * 32);
					bad |= bw_w_bad(ra) | bw_w_bad(rb);
					const __m512i w0 = _mm512_permutex2var_epi16(ra, i0, rb);
					const __m512i w1 = _mm512_permutex2var_epi16(ra, i1, rb);
					for (int r = 0; r < M; r++) {
						const __m512i *xr = xw + (size_t)r * xst + b * 8 + 2 * i;
						acc[r][p] = _mm512_dpbf16_ps(acc[r][p], as_bh(w0), as_bh(xr[0]));
						acc[r][p] = _mm512_dpbf16_ps(acc[r][p], as_bh(w1), as_bh(xr[1]));
					}
				}
			}
			for (int r = 0; r < M; r++)
				yacc[r] = _mm256_add_ps(yacc[r], reduce8(acc[r]));
		}
		if (bad)
			return tt;
		for (int r = 0; r < M; r++)
			_mm256_storeu_ps(y + (size_t)r * ldy + n, yacc[r]);
	}
	return ntiles;
}

size_t srt_gemv_bf16_avx512bf16(const struct srt_weight *w, const float *x, size_t m, size_t ldx,
				float *y, size_t ldy, size_t n0, size_t ntiles)
{
	const size_t K = w->cols;
	if (w->type != SRT_WT_BF16 || K % KB != 0 || K > GEMV_KMAX || m < 1 || m > 7 ||
	    !srt_gemm_bf16dp_usable())
		return SIZE_MAX;
	for (size_t r = 0; r < m; r++)
		if (!bw_x_ok(x + r * ldx, K))
			return SIZE_MAX;
	_Alignas(64) __m512i xw[BW_XMAX / 16];
	const size_t per = BW_XMAX / K < 4 ? BW_XMAX / K : 4; /* rows a pass, >= 2 */
	size_t done = ntiles;
	for (size_t r0 = 0; r0 < m; r0 += per) {
		const size_t mr = m - r0 < per ? m - r0 : per;
		for (size_t r = 0; r < mr; r++)
			fp8_x_words(x + (r0 + r) * ldx, K / 16, xw + r * (K / 16));
		float *yr = y + r0 * ldy;
		/* a tile that does not fit stops every pass at the same place (same weights) */
		switch (mr) {
		case 1:
			done = gemv_bw(w, xw, K / 16, yr, ldy, n0, done, 1);
			break;
		case 2:
			done = gemv_bw(w, xw, K / 16, yr, ldy, n0, done, 2);
			break;
		case 3:
			done = gemv_bw(w, xw, K / 16, yr, ldy, n0, done, 3);
			break;
		default:
			done = gemv_bw(w, xw, K / 16, yr, ldy, n0, done, 4);
			break;
		}
	}
	return done;
}

/* ---- entry --------------------------------------------------------------------------------- */

bool srt_gemv_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			     float *y, size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	const bool paired = w->type == SRT_WT_FP8_PAIRED;
	if ((w->type != SRT_WT_FP8 && w->type != SRT_WT_FP4 && !paired) || K % KB != 0 ||
	    K > GEMV_KMAX || (paired && n0 % 2 != 0) || !srt_gemm_bf16dp_usable())
		return false;
	_Alignas(64) __m512i xw[GEMV_KMAX / 16]; /* FP8: one per 16 k; FP4: one per 32 */
	if (w->type != SRT_WT_FP4) {
		for (size_t b = 0; b < nb; b++)
			if (!x_exact_products(xq + b * KB))
				return false;
		fp8_x_words(xq, K / 16, xw);
		if (paired)
			gemv_fp8(w, xw, xs, y, n0, ntiles, true);
		else
			gemv_fp8(w, xw, xs, y, n0, ntiles, false);
		return true;
	}
	struct fp4_xi xi[GEMV_KMAX / KB];
	bool isint[GEMV_KMAX / KB];
	bool allint = true;
	for (size_t b = 0; b < nb; b++) {
		isint[b] = vnni && fp4_int_block(xq + b * KB, &xi[b]);
		if (!isint[b] && !x_exact_products(xq + b * KB))
			return false;
		allint &= isint[b];
	}
	if (!allint) /* the bf16 words only where some block needs them */
		fp4_x_words(xq, nb, xw);
	gemv_fp4(w, xw, xi, isint, xs, y, n0, ntiles);
	return true;
}
