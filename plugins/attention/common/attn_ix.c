/*
 * The indexer's FP4 q·k by exact integer block sums (attn_ix.h).
 *
 * Key bytes: the 16 packed bytes of block b hold dims 32b + 2t (low nibble) and 32b + 2t + 1
 * (high nibble), t in [0, 16). The kernel splits them into a "low" and a "high" byte row, each
 * byte 12 + 2·E2M1 (unsigned, in [0, 24]); group g < 4 of block b is low bytes 16b + 4g ..
 * 16b + 4g + 3, group g >= 4 is high bytes 16b + 4(g - 4) ... The query is laid out in the
 * same dim order, [block][group][head][4] signed bytes, so one vpdpbusd with the key group
 * broadcast adds 4 products into each of 16 heads. The +12 of every key byte adds 12·Σ q,
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

size_t srt_attn_ixq_bytes(size_t nh, size_t d)
{
	size_t nb = d / IX_BLOCK;
	/* doubles first (alignment), then the int32 corrections, then the bytes */
	return nb * nh * (sizeof(double) + sizeof(int32_t)) + nb * nh * IX_BLOCK;
}

/* The byte position (in the [group][4] order of one block) of dim i of the block. */
static size_t ix_pos(size_t i)
{
	size_t t = i / 2, g = t / 4 + (i % 2 ? 4 : 0);
	return g * 4 + t % 4;
}

/* 2^(e - 128) as a double (e in [0, 254]): the unit of a block whose UE8M0 code is e. */
static double ix_unit(int e)
{
	return ldexp(1.0, e - 128);
}

int srt_attn_ixq_prepare(const float *iq, size_t nh, size_t d, void *buf, struct srt_attn_ixq *q)
{
	size_t nb = d / IX_BLOCK;
	q->nh = nh;
	q->d = d;
	q->qs = (double *)buf;
	q->corr = (int32_t *)(q->qs + nb * nh);
	q->q = (int8_t *)(q->corr + nb * nh);
	q->spread = 0;
	if (d % IX_BLOCK != 0 || d > IX_DMAX)
		return 0;
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
				q->q[((b * 8) * nh) * 4 + (ix_pos(i) / 4) * nh * 4 + h * 4 + ix_pos(i) % 4] =
					(int8_t)qi;
			}
			q->corr[b * nh + h] = -12 * sum;
			q->qs[b * nh + h] = nz ? ix_unit(sc) : 0.0;
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
/* One key against all heads: 16 heads per pass, every block's 8 groups into its own
 * accumulator, the blocks then scaled and added in ascending order in double (the first
 * product exact, each later step round(partial + I·unit) with I·unit exact: one fused
 * multiply-add each). */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
qk_fp4_key(const struct srt_attn_ixq *q, const uint8_t *key, double *y)
{
	const size_t nh = q->nh, d = q->d, nb = d / IX_BLOCK, nbytes = d / 2;
	const uint8_t *ks = key + nbytes;
	uint8_t klo[IX_DMAX / 2] __attribute__((aligned(64)));
	uint8_t khi[IX_DMAX / 2] __attribute__((aligned(64)));
	const __m512i lut = _mm512_broadcast_i32x4(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m512i m0f = _mm512_set1_epi8(0x0F);
	for (size_t p = 0; p < nbytes; p += 64) {
		const __mmask64 mk = nbytes - p >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (nbytes - p)) - 1;
		const __m512i v = _mm512_maskz_loadu_epi8(mk, key + p);
		_mm512_mask_storeu_epi8(klo + p, mk, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m0f)));
		_mm512_mask_storeu_epi8(khi + p, mk,
					_mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f)));
	}
	double ku[IX_DMAX / IX_BLOCK];
	for (size_t b = 0; b < nb; b++)
		ku[b] = ix_unit(ks[b]);
	for (size_t h = 0; h < nh; h += 16) {
		__m512d t0 = _mm512_setzero_pd(), t1 = t0;
		size_t b = 0;
		for (; b < nb; b += 4) {
			const size_t nblk = nb - b < 4 ? nb - b : 4;
			__m512i acc[4];
			for (size_t u = 0; u < nblk; u++)
				acc[u] = _mm512_loadu_si512(q->corr + (b + u) * nh + h);
			for (size_t g = 0; g < 8; g++)
				for (size_t u = 0; u < nblk; u++) {
					const uint8_t *src = (g < 4 ? klo : khi) + 16 * (b + u) + 4 * (g % 4);
					int32_t kw;
					memcpy(&kw, src, 4);
					const __m512i qv = _mm512_loadu_si512(
						q->q + (((b + u) * 8 + g) * nh + h) * 4);
					acc[u] = _mm512_dpbusd_epi32(acc[u], _mm512_set1_epi32(kw), qv);
				}
			for (size_t u = 0; u < nblk; u++) {
				const size_t bb = b + u;
				const __m512d k = _mm512_set1_pd(ku[bb]);
				const __m512d u0 = _mm512_mul_pd(_mm512_loadu_pd(q->qs + bb * nh + h), k);
				const __m512d u1 = _mm512_mul_pd(_mm512_loadu_pd(q->qs + bb * nh + h + 8), k);
				const __m512d i0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(acc[u]));
				const __m512d i1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc[u], 1));
				if (bb == 0) {
					t0 = _mm512_mul_pd(i0, u0);
					t1 = _mm512_mul_pd(i1, u1);
				} else {
					t0 = _mm512_fmadd_pd(i0, u0, t0);
					t1 = _mm512_fmadd_pd(i1, u1, t1);
				}
			}
		}
		_mm512_storeu_pd(y + h, t0);
		_mm512_storeu_pd(y + h + 8, t1);
	}
}
#endif

size_t srt_attn_qk_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
		       double *y, uint8_t *ok)
{
	size_t done = 0, nb = q->d / IX_BLOCK;
	for (size_t e = 0; e < ne; e++) {
		const uint8_t *ks = keys[e] + q->d / 2;
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
		qk_fp4_key(q, keys[e], y + e * q->nh);
		done++;
#else
		ok[e] = 0;
#endif
	}
	return done;
}
