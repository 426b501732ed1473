/*
 * The indexer's FP4 q·k by exact integer block sums (attn_ix.h).
 *
 * Key bytes: the 16 packed bytes of block b hold dims 32b + 2t (low nibble) and 32b + 2t + 1
 * (high nibble), t in [0, 16). The kernel splits them into a "low" and a "high" byte row, each
 * byte 12 + 2·E2M1 (unsigned, in [0, 24]); group g < 4 of block b is low bytes 16b + 4g ..
 * 16b + 4g + 3, group g >= 4 is high bytes 16b + 4(g - 4) ... The query is laid out in the
 * same dim order, [16 heads][block][group][head][4] signed bytes, so one vpdpbusd with the key
 * group broadcast adds 4 products into each of 16 heads, and a pass's operands are at constant
 * offsets (few address registers: the kernels keep every accumulator in a register). The +12 of every key byte adds 12·Σ q,
 * which the accumulator starts without (corr). Integer sums are exact, so the dim order
 * inside a block does not matter.
 */
#include "attn_ix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define IX_X86 1
#endif

#define IX_BLOCK 32
#define IX_DMAX 512
#define IX_SPAN 38 /* binades a (head, key) pair's block exponents may span */

static int have_vnni(void)
{
#ifdef IX_X86
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		const char *isa = getenv("SRT_GEMM_ISA");
		__builtin_cpu_init();
		r = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vnni") && (!isa || !strcmp(isa, "avx512")) ? 1 : 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
#else
	return 0;
#endif
}

int srt_attn_qk_fp4_ready(size_t nh, size_t d)
{
	return nh > 0 && nh % 16 == 0 && d > 0 && d % IX_BLOCK == 0 && d <= IX_DMAX && have_vnni();
}

/* Blocks of the prepared query's bytes and corrections: d / 32 rounded up to the kernel's 4
 * blocks a pass, the padding blocks zero. */
static size_t ix_nb4(size_t d)
{
	return (d / IX_BLOCK + 3) / 4 * 4;
}

size_t srt_attn_ixq_bytes(size_t nh, size_t d)
{
	size_t nb = d / IX_BLOCK, nb4 = ix_nb4(d);
	/* doubles first (alignment), then the int32 corrections, then the bytes */
	return nb * nh * sizeof(double) + nb4 * nh * (sizeof(int32_t) + IX_BLOCK);
}

/* The byte position (in the [group][4] order of one block) of dim i of the block. */
static size_t ix_pos(size_t i)
{
	size_t t = i / 2, g = t / 4 + (i % 2 ? 4 : 0);
	return g * 4 + t % 4;
}

/* 2^(e - 128) as a double (e in [0, 254]): the unit of a block whose UE8M0 code is e; built
 * from its exponent bits (a normal double for every such e), not by a libm call per block. */
static double ix_unit(int e)
{
	const uint64_t u = (uint64_t)(e - 128 + 1023) << 52;
	double r;
	memcpy(&r, &u, sizeof r);
	return r;
}

int srt_attn_ixq_prepare(const float *iq, size_t nh, size_t d, void *buf, struct srt_attn_ixq *q)
{
	size_t nb = d / IX_BLOCK, nb4 = ix_nb4(d);
	q->nh = nh;
	q->d = d;
	q->qs = (double *)buf;
	q->corr = (int32_t *)(q->qs + nb * nh);
	q->q = (int8_t *)(q->corr + nb4 * nh);
	q->spread = 0;
	if (nh % 16 != 0 || d % IX_BLOCK != 0 || d > IX_DMAX)
		return 0;
	/* the padding blocks (up to nb4) of each 16 heads: zero bytes, zero corrections */
	memset(q->corr, 0, nb4 * nh * sizeof(int32_t));
	memset(q->q, 0, nb4 * nh * IX_BLOCK);
	for (size_t h = 0; h < nh; h++) {
		int lo = 255, hi = -1;
		for (size_t b = 0; b < nb; b++) {
			const float *x = iq + h * d + b * IX_BLOCK;
			uint8_t pk[IX_BLOCK / 2], sc;
			srt_quant_fp4(x, IX_BLOCK, pk, &sc);
			if (sc == 255)
				return 0;
			const float s = srt_e8m0_to_f32(sc);
			int32_t sum = 0;
			int nz = 0;
			for (size_t i = 0; i < IX_BLOCK; i++) {
				uint8_t c = (uint8_t)(i % 2 ? pk[i / 2] >> 4 : pk[i / 2] & 0xF);
				float v = srt_fp4_e2m1_to_f32(c) * s;
				if (!(v == x[i]) || !isfinite(v))
					return 0; /* not an FP4 value: the double loop */
				int qi = (int)(2.0f * srt_fp4_e2m1_to_f32(c));
				nz |= qi != 0;
				sum += qi;
				q->q[(((h / 16) * nb4 + b) * 8 + ix_pos(i) / 4) * 64 + (h % 16) * 4 +
				     ix_pos(i) % 4] = (int8_t)qi;
			}
			q->corr[((h / 16) * nb4 + b) * 16 + h % 16] = -12 * sum;
			q->qs[((h / 16) * nb + b) * 16 + h % 16] = nz ? ix_unit(sc) : 0.0;
			if (nz) {
				lo = sc < lo ? sc : lo;
				hi = sc > hi ? sc : hi;
			}
		}
		if (hi >= 0 && hi - lo > q->spread)
			q->spread = hi - lo;
	}
	return 1;
}

#ifdef IX_X86
/* The key's bytes as unsigned 12 + 2·E2M1 values: the low nibbles to lo[0 .. d/2), the high
 * nibbles to hi[0 .. d/2), then zeros up to a multiple of 64 bytes. */
__attribute__((target("avx512f,avx512bw"))) static void ix_key_bytes(const uint8_t *key,
								    size_t nbytes, uint8_t *lo,
								    uint8_t *hi)
{
	const __m512i lut = _mm512_broadcast_i32x4(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m512i m0f = _mm512_set1_epi8(0x0F);
	for (size_t p = 0; p < nbytes; p += 64) {
		const __mmask64 mk = nbytes - p >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (nbytes - p)) - 1;
		const __m512i v = _mm512_maskz_loadu_epi8(mk, key + p);
		_mm512_store_si512(lo + p, _mm512_maskz_shuffle_epi8(mk, lut, _mm512_and_si512(v, m0f)));
		_mm512_store_si512(hi + p, _mm512_maskz_shuffle_epi8(
						   mk, lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f)));
	}
}

/*
 * NK keys against all heads (their bytes prepared by ix_key_bytes, kb[k] = lo then hi, each
 * IX_DMAX / 2 bytes; units ku[k][b]): 16 heads per pass, every block's 8 groups into its own
 * integer accumulator, the blocks then scaled and added in ascending order in double (the
 * first product exact, each later step round(partial + I·unit) with I·unit exact: one fused
 * multiply-add each). Four blocks at a time in constant loops, so the 4·NK accumulators stay
 * in registers and their chains interleave; each group's 4 key bytes reach the lanes by a
 * broadcast load (the bytes were written a batch earlier: no store-forwarding stall). A short
 * last chunk runs the zero padding blocks of the query (ix_nb4) but adds only its own blocks.
 */
#define IX_KEYS_FN(NAME, NK)                                                                    \
	__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void NAME(                \
		const struct srt_attn_ixq *q, const uint8_t (*kb)[IX_DMAX],                     \
		const double (*ku)[IX_DMAX / IX_BLOCK], double *const *y)                      \
	{                                                                                       \
		const size_t nh = q->nh, nb = q->d / IX_BLOCK, nb4 = ix_nb4(q->d);              \
		for (size_t h = 0; h < nh; h += 16) {                                            \
			const int8_t *qh = q->q + (h / 16) * nb4 * 8 * 64;                       \
			const int32_t *ch = q->corr + (h / 16) * nb4 * 16;                       \
			const double *sh = q->qs + (h / 16) * nb * 16;                           \
			__m512d t0[NK], t1[NK];                                                  \
			for (size_t k = 0; k < NK; k++)                                          \
				t0[k] = t1[k] = _mm512_setzero_pd();                             \
			for (size_t b = 0; b < nb; b += 4) {                                     \
				__m512i acc[NK][4];                                              \
				_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++)           \
				_Pragma("GCC unroll 4") for (size_t k = 0; k < NK; k++)          \
					acc[k][u] = _mm512_loadu_si512(ch + (b + u) * 16);      \
				_Pragma("GCC unroll 8") for (size_t g = 0; g < 8; g++)           \
				_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++) {         \
					const __m512i qv =                                       \
						_mm512_loadu_si512(qh + ((b + u) * 8 + g) * 64); \
					/* block b + u, group g: bytes 16(b+u) + 4(g % 4) of    \
					 * the low (g < 4) or high row */                        \
					const size_t off = (g < 4 ? 0 : IX_DMAX / 2) +           \
							   16 * (b + u) + 4 * (g % 4);           \
					_Pragma("GCC unroll 4") for (size_t k = 0; k < NK; k++) { \
						int32_t kw;                                      \
						memcpy(&kw, kb[k] + off, 4);                     \
						acc[k][u] = _mm512_dpbusd_epi32(                 \
							acc[k][u], _mm512_set1_epi32(kw), qv);   \
					}                                                        \
				}                                                                \
				_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++) {         \
					const size_t bb = b + u;                                 \
					if (bb >= nb)                                            \
						break;                                           \
					const __m512d s0 = _mm512_loadu_pd(sh + bb * 16);        \
					const __m512d s1 = _mm512_loadu_pd(sh + bb * 16 + 8);    \
					_Pragma("GCC unroll 4") for (size_t k = 0; k < NK; k++) { \
						const __m512d kk = _mm512_set1_pd(ku[k][bb]);    \
						const __m512d u0 = _mm512_mul_pd(s0, kk);        \
						const __m512d u1 = _mm512_mul_pd(s1, kk);        \
						const __m512d i0 = _mm512_cvtepi32_pd(           \
							_mm512_castsi512_si256(acc[k][u]));      \
						const __m512d i1 = _mm512_cvtepi32_pd(           \
							_mm512_extracti64x4_epi64(acc[k][u], 1)); \
						t0[k] = bb == 0 ? _mm512_mul_pd(i0, u0)          \
								: _mm512_fmadd_pd(i0, u0, t0[k]); \
						t1[k] = bb == 0 ? _mm512_mul_pd(i1, u1)          \
								: _mm512_fmadd_pd(i1, u1, t1[k]); \
					}                                                        \
				}                                                                \
			}                                                                        \
			for (size_t k = 0; k < NK; k++) {                                        \
				_mm512_storeu_pd(y[k] + h, t0[k]);                               \
				_mm512_storeu_pd(y[k] + h + 8, t1[k]);                           \
			}                                                                        \
		}                                                                                \
	}

IX_KEYS_FN(qk_fp4_keys1, 1)
IX_KEYS_FN(qk_fp4_keys2, 2)
#undef IX_KEYS_FN

#define IX_BATCH 16 /* keys whose bytes are prepared before their dot products */

/* The n prepared keys of a batch, in pairs: each key's values depend on that key alone. */
static void ix_run_batch(const struct srt_attn_ixq *q, const uint8_t (*kb)[IX_DMAX],
			 const double (*ku)[IX_DMAX / IX_BLOCK], double *const *yk, size_t n)
{
	size_t i = 0;
	for (; i + 2 <= n; i += 2)
		qk_fp4_keys2(q, kb + i, ku + i, yk + i);
	if (i < n)
		qk_fp4_keys1(q, kb + i, ku + i, yk + i);
}
#endif

size_t srt_attn_qk_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
		       double *y, uint8_t *ok)
{
	size_t done = 0, nb = q->d / IX_BLOCK, nbytes = q->d / 2;
#ifdef IX_X86
	uint8_t kbuf[IX_BATCH][IX_DMAX] __attribute__((aligned(64)));
	double ku[IX_BATCH][IX_DMAX / IX_BLOCK];
	double *yk[IX_BATCH];
	size_t nbat = 0;
#endif
	for (size_t e = 0; e < ne; e++) {
		const uint8_t *ks = keys[e] + nbytes;
		int lo = 255, hi = 0;
		for (size_t b = 0; b < nb; b++) {
			lo = ks[b] < lo ? ks[b] : lo;
			hi = ks[b] > hi ? ks[b] : hi;
		}
		/* finite key floats (6·2^(e-127) < 2^128) and no rounding in the double loop */
		ok[e] = hi <= 252 && (hi - lo) + q->spread <= IX_SPAN;
		if (!ok[e])
			continue;
#ifdef IX_X86
		ix_key_bytes(keys[e], nbytes, kbuf[nbat], kbuf[nbat] + IX_DMAX / 2);
		for (size_t b = 0; b < nb; b++)
			ku[nbat][b] = ix_unit(ks[b]);
		yk[nbat++] = y + e * q->nh;
		done++;
		if (nbat == IX_BATCH) {
			ix_run_batch(q, kbuf, ku, yk, nbat);
			nbat = 0;
		}
#else
		ok[e] = 0;
#endif
	}
#ifdef IX_X86
	ix_run_batch(q, kbuf, ku, yk, nbat);
#endif
	return done;
}
