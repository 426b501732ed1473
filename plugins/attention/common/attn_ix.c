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
 * inside a block does not matter. CPUs with AVX2 and no VNNI get the same sums from
 * vpmaddubsw and vpmaddwd (ix_kernel16_avx2).
 */
#include "attn_ix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "attn_term.h"
#define IX_X86 1
#endif

#define IX_BLOCK 32
#define IX_HPASS 4 /* heads a pass of the AVX2 kernel, each key vector loaded once for them */
_Static_assert(16 % IX_HPASS == 0, "a pass's heads in one group of 16");
#define IX_DMAX 512
#define IX_SPAN 38 /* binades a (head, key) pair's block exponents may span */
#define IX_CODE_HI 252 /* a key's greatest scale code with finite floats (6·2^(e-127) < 2^128) */

/* IX_SPAN, or less where SRT_IX_SPAN (0 .. IX_SPAN) asks: fewer keys take the exact path and
 * more the caller's double loop, with the same results (tests of the callers' mixed case). */
static int ix_span(void)
{
	const char *s = getenv("SRT_IX_SPAN");
	if (!s || !*s)
		return IX_SPAN;
	char *end;
	const long v = strtol(s, &end, 10);
	return *end || v < 0 || v > IX_SPAN ? IX_SPAN : (int)v;
}

/* The kernels this CPU and SRT_GEMM_ISA allow: IX_VNNI (AVX-512 VNNI), IX_AVX2 or IX_NONE. Unset
 * or "avx512": the best this CPU has; "avx2": at most AVX2; anything else: none. */
enum { IX_NONE = 0, IX_AVX2 = 1, IX_VNNI = 2 };

static int ix_isa(void)
{
#ifdef IX_X86
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		const char *isa = getenv("SRT_GEMM_ISA");
		__builtin_cpu_init();
		const int vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
				 __builtin_cpu_supports("avx512vnni");
		const int avx2 = __builtin_cpu_supports("avx2");
		if (!isa || !strcmp(isa, "avx512"))
			r = vnni ? IX_VNNI : avx2 ? IX_AVX2 : IX_NONE;
		else
			r = !strcmp(isa, "avx2") && avx2 ? IX_AVX2 : IX_NONE;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
#else
	return IX_NONE;
#endif
}

int srt_attn_qk_fp4_ready(size_t nh, size_t d)
{
	return nh > 0 && nh % 16 == 0 && d > 0 && d % IX_BLOCK == 0 && d <= IX_DMAX && ix_isa() != IX_NONE;
}

/* Blocks of the prepared query's bytes and corrections: d / 32 rounded up to the kernel's 4
 * blocks a pass, the padding blocks zero. */
static size_t ix_nb4(size_t d)
{
	return (d / IX_BLOCK + 3) / 4 * 4;
}

/* The prepared query's layout, in groups of 16 heads (one per kernel lane): head h's block b
 * is entry ix_hb of its per-(head, block) arrays, with n = nb blocks (qs, qsh) or nb4 (corr),
 * and its bytes of group g (of 8, 4 bytes each) start at ix_qoff in q->q. */
static inline size_t ix_hb(size_t n, size_t h, size_t b)
{
	return (h / 16 * n + b) * 16 + h % 16;
}

static inline size_t ix_qoff(size_t nb4, size_t h, size_t b, size_t g)
{
	return ((h / 16 * nb4 + b) * 8 + g) * 64 + h % 16 * 4;
}

size_t srt_attn_ixq_bytes(size_t nh, size_t d)
{
	size_t nb = d / IX_BLOCK, nb4 = ix_nb4(d);
	/* doubles first (alignment), then the int32 corrections (both forms), block shifts and
	 * head codes, then the bytes */
	return nb * nh * sizeof(double) + nb4 * nh * (2 * sizeof(int32_t) + IX_BLOCK) +
	       (nb + 1) * nh * sizeof(int32_t);
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
	q->corw = q->corr + nb4 * nh;
	q->qsh = q->corw + nb4 * nh;
	q->qe0 = q->qsh + nb * nh;
	q->q = (int8_t *)(q->qe0 + nh);
	q->span = ix_span();
	q->spread = 0;
	q->qe_lo = 255;
	q->qe_hi = -1;
	if (nh % 16 != 0 || d % IX_BLOCK != 0 || d > IX_DMAX)
		return 0;
	/* the padding blocks (up to nb4) of each 16 heads: zero bytes, zero corrections */
	memset(q->corr, 0, 2 * nb4 * nh * sizeof(int32_t));
	memset(q->q, 0, nb4 * nh * IX_BLOCK);
	for (size_t h = 0; h < nh; h++) {
		int lo = 255, hi = -1;
		int code[IX_DMAX / IX_BLOCK]; /* the nonzero blocks' codes, -1 for a zero block */
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
				q->q[ix_qoff(nb4, h, b, ix_pos(i) / 4) + ix_pos(i) % 4] = (int8_t)qi;
			}
			q->corr[ix_hb(nb4, h, b)] = -12 * sum; /* |.| <= 12 · 32 · 12 = 4608 */
			q->corw[ix_hb(nb4, h, b)] = (int32_t)(uint16_t)(int16_t)(-12 * sum);
			q->qs[ix_hb(nb, h, b)] = nz ? ix_unit(sc) : 0.0;
			code[b] = nz ? sc : -1;
			if (nz) {
				lo = sc < lo ? sc : lo;
				hi = sc > hi ? sc : hi;
			}
		}
		if (hi >= 0 && hi - lo > q->spread)
			q->spread = hi - lo;
		q->qe0[h] = hi >= 0 ? lo : -1;
		for (size_t b = 0; b < nb; b++)
			q->qsh[ix_hb(nb, h, b)] = code[b] >= 0 ? code[b] - lo : 0;
		if (hi >= 0) {
			q->qe_lo = lo < q->qe_lo ? lo : q->qe_lo;
			q->qe_hi = lo > q->qe_hi ? lo : q->qe_hi;
		}
	}
	if (q->qe_hi < 0) /* every block zero: every q·k is 0 */
		q->qe_lo = q->qe_hi = 128;
	for (size_t h = 0; h < nh; h++) /* an all-zero head's sums are 0: any code in range */
		if (q->qe0[h] < 0)
			q->qe0[h] = q->qe_lo;
	return 1;
}

#ifdef IX_X86
/* The unsigned key bytes 12 + 2·E2M1 of the low (high = 0) or high (high = 1) nibbles of
 * v's bytes: one VPSHUFB of a table repeated in every 128-bit lane. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i ix_nibble_bytes(__m512i v,
										   int high)
{
	const __m512i lut = _mm512_broadcast_i32x4(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m512i x = high ? _mm512_srli_epi16(v, 4) : v;
	return _mm512_shuffle_epi8(lut, _mm512_and_si512(x, _mm512_set1_epi8(0x0F)));
}

/* The key's bytes as unsigned 12 + 2·E2M1 values: the low nibbles to lo[0 .. d/2), the high
 * nibbles to hi[0 .. d/2), then zeros up to a multiple of 64 bytes. */
__attribute__((target("avx512f,avx512bw"))) static void ix_key_bytes(const uint8_t *key,
								    size_t nbytes, uint8_t *lo,
								    uint8_t *hi)
{
	for (size_t p = 0; p < nbytes; p += 64) {
		const __mmask64 mk = nbytes - p >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (nbytes - p)) - 1;
		const __m512i v = _mm512_maskz_loadu_epi8(mk, key + p);
		_mm512_store_si512(lo + p, _mm512_maskz_mov_epi8(mk, ix_nibble_bytes(v, 0)));
		_mm512_store_si512(hi + p, _mm512_maskz_mov_epi8(mk, ix_nibble_bytes(v, 1)));
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
			const int8_t *qh = q->q + ix_qoff(nb4, h, 0, 0);                         \
			const int32_t *ch = q->corr + ix_hb(nb4, h, 0);                          \
			const double *sh = q->qs + ix_hb(nb, h, 0);                              \
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

#define IX_BATCH 16 /* keys handed to a batch function at a time */
#define IX_AHEAD 64 /* keys ahead that ix_prefetch reads into the caches */

/* A batch of n keys (pointers to their packed bytes, then their d/32 scale codes, all in the
 * exact range): their q·k rows (ix_run_batch) or their index scores (ix_score_batch); w: the
 * heads' weights (scores only). */
typedef void (*ix_batch_fn)(const struct srt_attn_ixq *q, const uint8_t *const *kp,
			    const float *w, double *const *yk, size_t n);

/* The n keys' q·k rows, in pairs (each key's values depend on that key alone), from their
 * bytes split by ix_key_bytes and their blocks' units. */
static void ix_run_batch(const struct srt_attn_ixq *q, const uint8_t *const *kp, const float *w,
			 double *const *yk, size_t n)
{
	(void)w;
	const size_t nb = q->d / IX_BLOCK, nbytes = q->d / 2;
	uint8_t kb[IX_BATCH][IX_DMAX] __attribute__((aligned(64)));
	double ku[IX_BATCH][IX_DMAX / IX_BLOCK];
	for (size_t i = 0; i < n; i++) {
		ix_key_bytes(kp[i], nbytes, kb[i], kb[i] + IX_DMAX / 2);
		for (size_t b = 0; b < nb; b++)
			ku[i][b] = ix_unit(kp[i][nbytes + b]);
	}
	size_t i = 0;
	for (; i + 2 <= n; i += 2)
		qk_fp4_keys2(q, kb + i, ku + i, yk + i);
	if (i < n)
		qk_fp4_keys1(q, kb + i, ku + i, yk + i);
}

/* 16x16 dwords: r[i] lane j -> r[j] lane i. */
__attribute__((target("avx512f"))) static inline void ix_transpose16(__m512i r[16])
{
	__m512i t[16], u[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	/* u[4q + c], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + c */
	for (int i = 0; i < 16; i += 4) {
		u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	for (int c = 0; c < 4; c++) {
		const __m512i a = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
		const __m512i b = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
		const __m512i e = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
		const __m512i f = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
		r[c] = _mm512_shuffle_i32x4(a, b, 0x88);
		r[4 + c] = _mm512_shuffle_i32x4(a, b, 0xDD);
		r[8 + c] = _mm512_shuffle_i32x4(e, f, 0x88);
		r[12 + c] = _mm512_shuffle_i32x4(e, f, 0xDD);
	}
}

/* Whether a batch's heads sum their blocks as integers (ix_score16's comment): S cannot
 * overflow int32 (|I_b| <= 4608, shifts <= the query's spread + the keys' spread kspread) and
 * every nonzero |S|·2^E is a normal float (klo, khi: the least and greatest of the keys' least
 * codes). */
static int ix_ints_fit(const struct srt_attn_ixq *q, size_t nb, int kspread, int klo, int khi)
{
	const int shmax = q->spread + kspread;
	return shmax <= 20 && ((uint64_t)nb * 4608u << shmax) < ((uint64_t)1 << 31) &&
	       q->qe_lo + klo - 256 >= -126 && q->qe_hi + khi - 256 <= 127 - 31;
}

/* acc + the byte dot products of k (unsigned) with the 4 query bytes at qw (signed) in every
 * lane: VPDPBUSD with the dword broadcast from memory inside the instruction ({1to16}). GCC
 * does not fold the _mm512_set1_epi32 into it, and a separate broadcast per product cost a
 * tenth of ix_score16's time (29.4 -> 26.2 ns a key in a harness), so GCC gets the
 * instruction written out; clang folds the intrinsic itself (and would not unroll the loops
 * around an asm statement). */
__attribute__((target("avx512f,avx512vnni"))) static inline __m512i ix_dpbusd_bcst(__m512i acc,
										 __m512i k,
										 const int32_t *qw)
{
#if defined(__clang__)
	int32_t v;
	memcpy(&v, qw, sizeof v);
	return _mm512_dpbusd_epi32(acc, k, _mm512_set1_epi32(v));
#else
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*qw));
	return acc;
#endif
}

/* ix_score16's heads: each head's block sums, its term, the terms added in ascending heads
 * into tot (keys 0-7, 8-15); `ints` a constant at each call, so that each way is compiled
 * without the other's branches. */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2"), always_inline)) static inline void
ix_heads16(const struct srt_attn_ixq *q, const __m512i (*kt)[IX_DMAX / 8], const __m512i *ksh,
	   const __m512d *ul, const __m512d *uh, __m512i kmin, const float *w, const int ints,
	   __m512d *tot)
{
	const size_t nh = q->nh, nb = q->d / IX_BLOCK, nb4 = ix_nb4(q->d);
	__m512d tot0 = _mm512_setzero_pd(), tot1 = tot0;
	for (size_t h = 0; h < nh; h += 2) { /* two heads, four blocks: 8 independent chains */
		__m512d t[2][2] = {{_mm512_setzero_pd(), _mm512_setzero_pd()}, {_mm512_setzero_pd(), _mm512_setzero_pd()}};
		__m512i si[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
		for (size_t b0 = 0; b0 < nb; b0 += 4) {
			__m512i acc[2][4];
			_Pragma("GCC unroll 2") for (size_t hh = 0; hh < 2; hh++)
			_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++) /* past nb: zeros */
					acc[hh][u] = _mm512_set1_epi32(q->corr[ix_hb(nb4, h + hh, b0 + u)]);
			_Pragma("GCC unroll 8") for (size_t g = 0; g < 8; g++)
			_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++) {
					const __m512i k = kt[g / 4][4 * (b0 + u) + g % 4];
					_Pragma("GCC unroll 2") for (size_t hh = 0; hh < 2; hh++) {
						const int32_t *qw = (const int32_t *)(const void *)(
							q->q + ix_qoff(nb4, h + hh, b0 + u, g));
						acc[hh][u] = ix_dpbusd_bcst(acc[hh][u], k, qw);
					}
				}
			_Pragma("GCC unroll 4") for (size_t u = 0; u < 4; u++) {
				const size_t b = b0 + u;
				if (b >= nb)
					break;
				_Pragma("GCC unroll 2") for (size_t hh = 0; hh < 2; hh++) {
					const size_t qi = ix_hb(nb, h + hh, b);
					if (ints) {
						const __m512i sh = _mm512_add_epi32(ksh[b], _mm512_set1_epi32(q->qsh[qi]));
						si[hh] = _mm512_add_epi32(si[hh], _mm512_sllv_epi32(acc[hh][u], sh));
						continue;
					}
					const __m512d s = _mm512_set1_pd(q->qs[qi]);
					const __m512d i0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(acc[hh][u]));
					const __m512d i1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc[hh][u], 1));
					const __m512d u0 = _mm512_mul_pd(s, ul[b]), u1 = _mm512_mul_pd(s, uh[b]);
					t[hh][0] = b == 0 ? _mm512_mul_pd(i0, u0) : _mm512_fmadd_pd(i0, u0, t[hh][0]);
					t[hh][1] = b == 0 ? _mm512_mul_pd(i1, u1) : _mm512_fmadd_pd(i1, u1, t[hh][1]);
				}
			}
		}
		_Pragma("GCC unroll 2") for (size_t hh = 0; hh < 2; hh++) { /* the heads' terms, ascending */
			__m512 f; /* the 16 keys' (float) q·k */
			if (ints) {
				const __m512i e = _mm512_add_epi32(kmin, _mm512_set1_epi32(q->qe0[h + hh] - 256 + 127));
				f = _mm512_mul_ps(_mm512_cvtepi32_ps(si[hh]),
						  _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
			} else {
				f = _mm512_castpd_ps(_mm512_insertf64x4(
					_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(t[hh][0]))),
					_mm256_castps_pd(_mm512_cvtpd_ps(t[hh][1])), 1));
			}
			/* no NaN in f's stored lanes: exact sums of finite values, or an int times
			 * 2^E (a lane outside the range may hold anything; it is not stored) */
			const __m512 term = ix_term16_num(f, _mm512_set1_ps(w[h + hh]));
			tot0 = _mm512_add_pd(tot0, _mm512_cvtps_pd(_mm512_castps512_ps256(term)));
			tot1 = _mm512_add_pd(tot1, _mm512_cvtps_pd(_mm256_castpd_ps(
							   _mm512_extractf64x4_pd(_mm512_castps_pd(term), 1))));
		}
	}
	tot[0] = tot0;
	tot[1] = tot1;
}

/*
 * The reference index scores of 16 keys (kp: their packed bytes and scale codes; n <= 16 of
 * them real, the rest padding) into out[0 .. n), for the keys in the exact range (ok[i] = 1;
 * ok[i] = 0 and out[i] untouched for the others); returns their number. With the keys in the
 * lanes: per head, each block's integer
 * sum by 8 VPDPBUSD (the 16 keys' packed dwords transposed to one key per lane, then split
 * into their low- and high-nibble key bytes; the query's 4 bytes broadcast), the blocks
 * scaled and added in ascending order in double (qk_fp4_keys' operations), then the head's
 * term bf16(ReLU(bf16(qk))·w) added to each key's double sum in ascending heads
 * (srt_attn_ix_score_bf16's), without writing the q·k rows out.
 */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2"))) static size_t
ix_score16(const struct srt_attn_ixq *q, const uint8_t *const *kp, const float *w, size_t n,
	   int span, double *out, uint8_t *ok)
{
	const size_t nb = q->d / IX_BLOCK, nbytes = q->d / 2;
	const size_t nd = nbytes / 4;              /* packed dwords of a key */
	__m512i kt[2][IX_DMAX / 8];                /* [low/high nibbles][dword]: lane i = key i's */
	for (size_t j0 = 0; j0 < nd; j0 += 16) {
		/* past the key's bytes (its last 16 dwords short): zeros, in padding blocks only,
		 * whose query bytes are zero and whose sums are never added */
		const __mmask16 m = nd - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nd - j0)) - 1);
		__m512i r[16];
		for (size_t i = 0; i < 16; i++)
			r[i] = _mm512_maskz_loadu_epi32(m, kp[i] + 4 * j0);
		ix_transpose16(r);
		for (size_t j = 0; j < 16; j++) {
			kt[0][j0 + j] = ix_nibble_bytes(r[j], 0);
			kt[1][j0 + j] = ix_nibble_bytes(r[j], 1);
		}
	}
	/* the keys' scale codes per block (lane i: key i's), their least code per key, and each
	 * block's code above it */
	__m512i kc[IX_DMAX / IX_BLOCK], kmin = _mm512_set1_epi32(255), kmax = _mm512_setzero_si512();
	if (nb % 4 == 0) {
		/* four codes a dword, the 16 keys' dwords by two gathers from their addresses
		 * (bytes stored one by one and loaded as a vector stall the store forwarding) */
		const __m512i p0 = _mm512_loadu_si512((const void *)kp);
		const __m512i p1 = _mm512_loadu_si512((const void *)(kp + 8));
		for (size_t b0 = 0; b0 < nb; b0 += 4) {
			const __m512i off = _mm512_set1_epi64((long long)(nbytes + b0));
			const __m512i dw = _mm512_inserti64x4(
				_mm512_castsi256_si512(_mm512_i64gather_epi32(_mm512_add_epi64(p0, off), NULL, 1)),
				_mm512_i64gather_epi32(_mm512_add_epi64(p1, off), NULL, 1), 1);
			for (size_t u = 0; u < 4; u++)
				kc[b0 + u] = _mm512_and_si512(_mm512_srli_epi32(dw, (unsigned)(8 * u)),
							      _mm512_set1_epi32(0xFF));
		}
	} else { /* a last dword would reach past the codes */
		for (size_t b = 0; b < nb; b++) {
			int32_t e[16];
			for (size_t i = 0; i < 16; i++)
				e[i] = kp[i][nbytes + b];
			kc[b] = _mm512_loadu_si512(e);
		}
	}
	for (size_t b = 0; b < nb; b++) {
		kmin = _mm512_min_epi32(kmin, kc[b]);
		kmax = _mm512_max_epi32(kmax, kc[b]);
	}
	/* the keys in the exact range (ix_keys' test, lane by lane): finite key floats
	 * (6·2^(e-127) < 2^128) and no rounding in the double loop; the others are not stored */
	const __mmask16 real = (__mmask16)((1u << n) - 1);
	const __mmask16 good =
		real & _mm512_cmple_epi32_mask(kmax, _mm512_set1_epi32(IX_CODE_HI)) &
		_mm512_cmple_epi32_mask(_mm512_add_epi32(_mm512_sub_epi32(kmax, kmin),
							 _mm512_set1_epi32(q->spread)),
					_mm512_set1_epi32(span));
	for (size_t i = 0; i < n; i++)
		ok[i] = (uint8_t)(good >> i & 1);
	if (!good)
		return 0;
	/*
	 * Integer block sums. The double sum t = Σ_b I_b·2^(qe_b - 128)·2^(ke_b - 128) is exact
	 * (the span check above), so it equals S·2^E with S = Σ_b I_b << (qe_b - qe0 + ke_b -
	 * kmin) and E = qe0 + kmin - 256, and (float)t, what the heads' terms take, is
	 * (float)S·2^E whenever that is a normal float: both are the one rounding of the same
	 * number. Taken when S cannot overflow int32 (|I_b| <= 4608, shifts <= q->spread + the
	 * keys' spread) and every nonzero |S|·2^E lies in [2^-126, 2^127]; otherwise the doubles.
	 */
	/* over the stored lanes only (the lanes are independent: the others' values are dropped) */
	const int kspread = _mm512_mask_reduce_max_epi32(good, _mm512_sub_epi32(kmax, kmin));
	const int klo = _mm512_mask_reduce_min_epi32(good, kmin);
	const int khi = _mm512_mask_reduce_max_epi32(good, kmin);
	const int ints = ix_ints_fit(q, nb, kspread, klo, khi);
	__m512i ksh[IX_DMAX / IX_BLOCK];
	__m512d ul[IX_DMAX / IX_BLOCK], uh[IX_DMAX / IX_BLOCK]; /* keys' units 2^(e-128) per block */
	for (size_t b = 0; b < nb; b++) {
		if (ints) {
			ksh[b] = _mm512_sub_epi32(kc[b], kmin);
			continue;
		}
		const __m512i bias = _mm512_set1_epi64(1023 - 128);
		ul[b] = _mm512_castsi512_pd(_mm512_slli_epi64(
			_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(kc[b])), bias), 52));
		uh[b] = _mm512_castsi512_pd(_mm512_slli_epi64(
			_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(kc[b], 1)), bias), 52));
	}
	__m512d tot[2];
	if (ints)
		ix_heads16(q, (const __m512i(*)[IX_DMAX / 8])kt, ksh, ul, uh, kmin, w, 1, tot);
	else
		ix_heads16(q, (const __m512i(*)[IX_DMAX / 8])kt, ksh, ul, uh, kmin, w, 0, tot);
	const __m512d tot0 = tot[0], tot1 = tot[1];
	/* the float score, as a double, into the good lanes' places */
	_mm512_mask_storeu_pd(out, (__mmask8)good,
			      _mm512_cvtps_pd(srt_round_bf16_v8(_mm512_cvtpd_ps(tot0))));
	_mm512_mask_storeu_pd(out + 8, (__mmask8)(good >> 8),
			      _mm512_cvtps_pd(srt_round_bf16_v8(_mm512_cvtpd_ps(tot1))));
	return (size_t)__builtin_popcount(good);
}

/* k16[0 .. IX_BATCH) := the n keys of kp, then its first key again. */
static void ix_pad_batch(const uint8_t *const *kp, size_t n, const uint8_t **k16)
{
	for (size_t i = 0; i < IX_BATCH; i++)
		k16[i] = kp[i < n ? i : 0];
}

/* Key e + IX_AHEAD, in this run or the next, into the caches: a page's keys are contiguous
 * but the pages are not (unprefetched, cold keys took 46 ns each instead of 29). Inlined
 * always: GCC's IPA pure-const pass takes a function of prefetches alone for a pure one and
 * deletes its calls (a void result is never used), which had left the indexer without any
 * prefetch; tests/attention/check_prefetch.sh checks the plugins keep them. */
static inline __attribute__((always_inline)) void
ix_prefetch(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
	    const uint8_t *const *next, size_t nnext, size_t e)
{
	const size_t g = e + IX_AHEAD, len = q->d / 2 + q->d / IX_BLOCK;
	const uint8_t *pf = g < ne ? keys[g] : next && g - ne < nnext ? next[g - ne] : NULL;
	for (size_t o = 0; pf && o < len; o += 64)
		_mm_prefetch((const char *)pf + o, _MM_HINT_T0);
}

/* 16 keys' scores into out[0 .. n) with each lane's range check (ok), returning the number in
 * range: ix_score16 (VNNI) and ix_score16_avx2. */
typedef size_t (*ix_score16_fn)(const struct srt_attn_ixq *q, const uint8_t *const *kp,
				const float *w, size_t n, int span, double *out, uint8_t *ok);

/* srt_attn_ix_score_fp4: 16 keys at a time straight from the caller's array, each lane's range
 * check inside the kernel (a short last batch padded with its first key, those lanes computed
 * and not stored). */
static size_t ix_scores(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
			const uint8_t *const *next, size_t nnext, const float *w, double *out,
			uint8_t *ok, ix_score16_fn score16)
{
	const int span = q->span;
	size_t done = 0;
	for (size_t e = 0; e < ne; e += IX_BATCH) {
		const size_t n = ne - e < IX_BATCH ? ne - e : IX_BATCH;
		for (size_t i = 0; i < n; i++)
			ix_prefetch(q, keys, ne, next, nnext, e + i);
		const uint8_t *k16[IX_BATCH];
		ix_pad_batch(keys + e, n, k16);
		done += score16(q, k16, w, n, span, out + e, ok + e);
	}
	return done;
}

/* ---- AVX2 (no VNNI): the same kernels with the keys in 8-lane halves ---------------------- */

#define IX_AVX2_TARGET __attribute__((target("avx2")))

/* 8x8 dwords: r[i] lane j -> r[j] lane i. The loops unrolled by pragma (here and where the
 * keys are loaded and split): GCC had kept r, t and u on the stack (48 -> 44 ns a key). */
IX_AVX2_TARGET static inline void ix_transpose8(__m256i r[8])
{
	__m256i t[8], u[8];
	_Pragma("GCC unroll 4") for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
	}
	/* u[4h + c], 128-bit lane L: rows 4h .. 4h + 3 of column 4L + c */
	_Pragma("GCC unroll 2") for (int i = 0; i < 8; i += 4) {
		u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
		u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
		u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
		u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	_Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
		r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
		r[c + 4] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
	}
}

/* ix_nibble_bytes of 32 bytes. */
IX_AVX2_TARGET static inline __m256i ix_nibble_bytes8(__m256i v, int high)
{
	const __m256i lut = _mm256_broadcastsi128_si256(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m256i x = high ? _mm256_srli_epi16(v, 4) : v;
	return _mm256_shuffle_epi8(lut, _mm256_and_si256(x, _mm256_set1_epi8(0x0F)));
}

IX_AVX2_TARGET static inline int ix_hmin8(__m256i v)
{
	__m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_min_epi32(m, _mm_shuffle_epi32(m, 0x4E));
	return _mm_cvtsi128_si32(_mm_min_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
}

IX_AVX2_TARGET static inline int ix_hmax8(__m256i v)
{
	__m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
	return _mm_cvtsi128_si32(_mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
}

/* 2^e for the 4 int32 lanes of e (a normal double for every e in [-1022, 1023]). */
IX_AVX2_TARGET static inline __m256d ix_pow2_pd(__m128i e)
{
	return _mm256_castsi256_pd(_mm256_slli_epi64(
		_mm256_add_epi64(_mm256_cvtepi32_epi64(e), _mm256_set1_epi64x(1023)), 52));
}

/* ix_kernel16_avx2's products and sums over the heads, for its prepared keys (kt, kmin, and
 * kpow or ku); `ints` and `rows` constant in each inlined copy. */
IX_AVX2_TARGET static inline __attribute__((always_inline)) void
ix_heads_avx2(const struct srt_attn_ixq *q, const __m256i (*kt)[2][IX_DMAX / 8], const __m256i *kmin,
	      const __m256i (*kpow)[IX_DMAX / IX_BLOCK], const __m256d (*ku)[IX_DMAX / IX_BLOCK][2],
	      const float *w, size_t n, unsigned good, double *const *out, const int ints,
	      const int rows)
{
	const size_t nh = q->nh, nb = q->d / IX_BLOCK, nb4 = ix_nb4(q->d);
	const __m256i ones = _mm256_set1_epi16(1);
	__m256d tot[2][2] = {{_mm256_setzero_pd(), _mm256_setzero_pd()},
			     {_mm256_setzero_pd(), _mm256_setzero_pd()}};
	for (size_t h = 0; h < nh; h += IX_HPASS) {
		__m256d t[IX_HPASS][2][2];
		__m256i si[IX_HPASS][2];
		for (size_t hh = 0; hh < IX_HPASS; hh++)
			for (size_t hf = 0; hf < 2; hf++) {
				t[hh][hf][0] = t[hh][hf][1] = _mm256_setzero_pd();
				si[hh][hf] = _mm256_setzero_si256();
			}
		/* a pass's heads lie in one group of 16 (IX_HPASS divides 16): head h + hh of
		 * block b is entry b·16 + hh past head h's block 0, its group g bytes (b·8 + g)·64
		 * + hh·4 past them. Written out: GCC had computed ix_hb and ix_qoff for every head
		 * and block with a multiply, in a loop through the stack (54 -> 48 ns a key in a
		 * harness) */
		const int32_t *cw = q->corw + ix_hb(nb4, h, 0);
		const int8_t *qq = q->q + ix_qoff(nb4, h, 0, 0);
		for (size_t b = 0; b < nb; b++) {
			/* [head][half] 16-bit sums, from the correction */
			__m256i acc[IX_HPASS][2];
			_Pragma("GCC unroll 4") for (size_t hh = 0; hh < IX_HPASS; hh++)
				acc[hh][0] = acc[hh][1] = _mm256_set1_epi32(cw[b * 16 + hh]);
			_Pragma("GCC unroll 8") for (size_t g = 0; g < 8; g++) {
				const size_t j = 4 * b + g % 4;
				const __m256i k0 = kt[0][g / 4][j], k1 = kt[1][g / 4][j];
				_Pragma("GCC unroll 4") for (size_t hh = 0; hh < IX_HPASS; hh++) {
					int32_t qw;
					memcpy(&qw, qq + (b * 8 + g) * 64 + hh * 4, 4);
					const __m256i qv = _mm256_set1_epi32(qw);
					acc[hh][0] = _mm256_add_epi16(acc[hh][0], _mm256_maddubs_epi16(k0, qv));
					acc[hh][1] = _mm256_add_epi16(acc[hh][1], _mm256_maddubs_epi16(k1, qv));
					/* added here: without it GCC computed all the
					 * products of the pass first and spilled them
					 * (62 -> 55 ns a key in a harness) */
					__asm__("" : "+x"(acc[hh][0]), "+x"(acc[hh][1]));
				}
			}
			_Pragma("GCC unroll 4") for (size_t hh = 0; hh < IX_HPASS; hh++) {
				const size_t qi = ix_hb(nb, h, b) + hh;
				_Pragma("GCC unroll 2") for (size_t hf = 0; hf < 2; hf++) {
					/* ints: I·2^ksh by the pair sum, then the query's shift */
					if (ints) {
						const __m256i a = _mm256_madd_epi16(acc[hh][hf], kpow[hf][b]);
						/* one count for every lane: VPSLLD by a register
						 * (VPSLLVD issues every second cycle on Zen 2:
						 * 44.7 -> 43.7 ns a key) */
						const __m128i qs = _mm_cvtsi32_si128(q->qsh[qi]);
						si[hh][hf] = _mm256_add_epi32(si[hh][hf], _mm256_sll_epi32(a, qs));
						continue;
					}
					const __m256i a = _mm256_madd_epi16(acc[hh][hf], ones);
					/* I·unit is exact: round(t + I·unit) is ix_score16's fused step */
					const __m256d s = _mm256_set1_pd(q->qs[qi]);
					for (int x = 0; x < 2; x++) {
						const __m256d i = _mm256_cvtepi32_pd(
							x ? _mm256_extracti128_si256(a, 1) : _mm256_castsi256_si128(a));
						const __m256d p = _mm256_mul_pd(i, _mm256_mul_pd(s, ku[hf][b][x]));
						t[hh][hf][x] = b == 0 ? p : _mm256_add_pd(t[hh][hf][x], p);
					}
				}
			}
		}
		_Pragma("GCC unroll 4") for (size_t hh = 0; hh < IX_HPASS; hh++)
		_Pragma("GCC unroll 2") for (size_t hf = 0; hf < 2; hf++) {
				/* 2^E of the integer sums: E = qe0 + kmin - 256 */
				const __m256i E = _mm256_add_epi32(kmin[hf], _mm256_set1_epi32(q->qe0[h + hh] - 256));
				if (rows) {
					_Alignas(32) double r[8];
					for (int x = 0; x < 2; x++) {
						const __m128i ex = x ? _mm256_extracti128_si256(E, 1) : _mm256_castsi256_si128(E);
						const __m128i sx = x ? _mm256_extracti128_si256(si[hh][hf], 1)
								     : _mm256_castsi256_si128(si[hh][hf]);
						_mm256_store_pd(r + 4 * x, ints ? _mm256_mul_pd(_mm256_cvtepi32_pd(sx), ix_pow2_pd(ex))
										: t[hh][hf][x]);
					}
					for (size_t i = 0; i < 8 && 8 * hf + i < n; i++)
						out[8 * hf + i][h + hh] = r[i];
					continue;
				}
				__m256 f; /* the 8 keys' (float) q·k */
				if (ints)
					f = _mm256_mul_ps(_mm256_cvtepi32_ps(si[hh][hf]),
							  _mm256_castsi256_ps(_mm256_slli_epi32(
								  _mm256_add_epi32(E, _mm256_set1_epi32(127)), 23)));
				else
					f = _mm256_set_m128(_mm256_cvtpd_ps(t[hh][hf][1]), _mm256_cvtpd_ps(t[hh][hf][0]));
				/* no NaN in f: an int times 2^E in the float range, or exact sums of
				 * finite values */
				const __m256 term = ix_term8_num(f, _mm256_set1_ps(w[h + hh]));
				tot[hf][0] = _mm256_add_pd(tot[hf][0], _mm256_cvtps_pd(_mm256_castps256_ps128(term)));
				tot[hf][1] = _mm256_add_pd(tot[hf][1], _mm256_cvtps_pd(_mm256_extractf128_ps(term, 1)));
			}
	}
	if (rows)
		return;
	for (size_t hf = 0; hf < 2; hf++) {
		float o[8];
		_mm256_storeu_ps(o, srt_round_bf16_v8(_mm256_set_m128(_mm256_cvtpd_ps(tot[hf][1]),
								  _mm256_cvtpd_ps(tot[hf][0]))));
		for (size_t i = 0; i < 8 && 8 * hf + i < n; i++)
			if (good >> (8 * hf + i) & 1)
				*out[8 * hf + i] = (double)o[i];
	}
}

/*
 * ix_score16 without VNNI: the 16 keys as two halves of 8 (lane i of half f: key 8f + i).
 * VPDPBUSD's 4-product dword sums become VPMADDUBSW pair sums, added in 16 bits over the
 * block's 8 groups onto the correction in the low half of each lane (|each word| <= 4608 +
 * 8 · 2 · 24 · 12 = 9216), then one VPMADDWD per block: by ones for the block sum I, or, on
 * the integer path, by 2^ksh (the key's block shift, at most 14 there) for I·2^ksh, which the
 * query's shift then completes. The same integer block sums, so the same scaled doubles,
 * integer head sums and terms as ix_score16 (IX_HPASS = 4 heads and one block a pass: 8
 * chains, each key vector loaded once for the 4 heads; 2 heads and 2 blocks a pass took
 * 55.1 against 53.9 ns a key in a harness).
 * With `rows`, out[i] is key i's q·k row and gets srt_attn_qk_fp4's values instead of the
 * score: the double sum, or (double) S·2^E where the integer sums run (the same exact
 * number). With ok (the scores), each lane's range check as ix_score16's; returns the number
 * of keys in range.
 */
IX_AVX2_TARGET static size_t ix_kernel16_avx2(const struct srt_attn_ixq *q,
					      const uint8_t *const *kp, const float *w, size_t n,
					      double *const *out, int rows, int span, uint8_t *ok)
{
	const size_t nb = q->d / IX_BLOCK, nbytes = q->d / 2;
	const size_t nd = nbytes / 4; /* packed dwords of a key, a multiple of 4 */
	__m256i kt[2][2][IX_DMAX / 8]; /* [half][low/high nibbles][dword] */
	/* dwords past the key (the last 8 of an odd block count short by 4): zeros, read only by
	 * the padding block, whose query bytes are zero and whose sums are never added */
	for (size_t hf = 0; hf < 2; hf++)
		for (size_t j0 = 0; j0 < nd; j0 += 8) {
			__m256i r[8];
			_Pragma("GCC unroll 8") for (size_t i = 0; i < 8; i++) {
				const void *p = kp[8 * hf + i] + 4 * j0;
				r[i] = nd - j0 >= 8 ? _mm256_loadu_si256((const __m256i *)p)
						    : _mm256_inserti128_si256(_mm256_setzero_si256(),
									      _mm_loadu_si128((const __m128i *)p), 0);
			}
			ix_transpose8(r);
			_Pragma("GCC unroll 8") for (size_t j = 0; j < 8; j++) {
				kt[hf][0][j0 + j] = ix_nibble_bytes8(r[j], 0);
				kt[hf][1][j0 + j] = ix_nibble_bytes8(r[j], 1);
			}
		}
	/* the keys' scale codes per block, their least per key, each block's code above it: 4
	 * blocks' codes a dword per key, put in registers (8 one-byte stores reloaded as a
	 * vector wait for the stores) */
	__m256i kc[2][IX_DMAX / IX_BLOCK], kmin[2], kmax[2];
	for (size_t hf = 0; hf < 2; hf++) {
		kmin[hf] = _mm256_set1_epi32(255);
		kmax[hf] = _mm256_setzero_si256();
	}
	for (size_t b0 = 0; b0 < nb; b0 += 4) {
		const size_t nc = nb - b0 < 4 ? nb - b0 : 4; /* the key's codes end at nb */
		int32_t c[16];
		for (size_t i = 0; i < 16; i++) {
			uint32_t v = 0;
			if (nc == 4)
				memcpy(&v, kp[i] + nbytes + b0, 4);
			else
				for (size_t j = 0; j < nc; j++)
					v |= (uint32_t)kp[i][nbytes + b0 + j] << 8 * j;
			c[i] = (int32_t)v;
		}
		const __m256i cv[2] = {
			_mm256_setr_epi32(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]),
			_mm256_setr_epi32(c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15])};
		for (size_t j = 0; j < nc; j++)
			for (size_t hf = 0; hf < 2; hf++) {
				const __m256i e = _mm256_and_si256(_mm256_srli_epi32(cv[hf], (int)(8 * j)),
								   _mm256_set1_epi32(0xFF));
				kc[hf][b0 + j] = e;
				kmin[hf] = _mm256_min_epi32(kmin[hf], e);
				kmax[hf] = _mm256_max_epi32(kmax[hf], e);
			}
	}
	/* with ok: each lane's range check (ix_keys'), the lanes outside it computed and not
	 * stored; without, the caller checked every key */
	unsigned good = (1u << n) - 1;
	__m256i gm[2] = {_mm256_set1_epi32(-1), _mm256_set1_epi32(-1)};
	if (ok) {
		unsigned bits = 0;
		for (size_t hf = 0; hf < 2; hf++) {
			gm[hf] = _mm256_and_si256(
				_mm256_cmpgt_epi32(_mm256_set1_epi32(IX_CODE_HI + 1), kmax[hf]),
				_mm256_cmpgt_epi32(_mm256_set1_epi32(span - q->spread + 1),
						   _mm256_sub_epi32(kmax[hf], kmin[hf])));
			bits |= (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(gm[hf])) << 8 * hf;
		}
		good &= bits;
		for (size_t i = 0; i < n; i++)
			ok[i] = (uint8_t)(good >> i & 1);
		if (!good)
			return 0;
	}
	/* the integer head sums where they fit (ix_score16's conditions, over the stored lanes)
	 * and each key's block shift fits a 16-bit power of two (2^14 at most) */
	__m256i spr[2], lo[2], hi[2]; /* the stored lanes' spreads and least codes (else 0, 255) */
	for (size_t hf = 0; hf < 2; hf++) {
		spr[hf] = _mm256_and_si256(_mm256_sub_epi32(kmax[hf], kmin[hf]), gm[hf]);
		lo[hf] = _mm256_blendv_epi8(_mm256_set1_epi32(255), kmin[hf], gm[hf]);
		hi[hf] = _mm256_and_si256(kmin[hf], gm[hf]);
	}
	const int kspread = ix_hmax8(_mm256_max_epi32(spr[0], spr[1]));
	const int klo = ix_hmin8(_mm256_min_epi32(lo[0], lo[1]));
	const int khi = ix_hmax8(_mm256_max_epi32(hi[0], hi[1]));
	const int ints = kspread <= 14 && ix_ints_fit(q, nb, kspread, klo, khi);
	__m256i kpow[2][IX_DMAX / IX_BLOCK]; /* 2^(code - kmin) in both 16-bit halves of a lane */
	__m256d ku[2][IX_DMAX / IX_BLOCK][2]; /* the keys' units 2^(e - 128), keys 0-3 and 4-7 */
	for (size_t hf = 0; hf < 2; hf++)
		for (size_t b = 0; b < nb; b++) {
			if (ints) {
				const __m256i p = _mm256_sllv_epi32(_mm256_set1_epi32(1),
								    _mm256_sub_epi32(kc[hf][b], kmin[hf]));
				kpow[hf][b] = _mm256_or_si256(p, _mm256_slli_epi32(p, 16));
				continue;
			}
			const __m256i e = _mm256_sub_epi32(kc[hf][b], _mm256_set1_epi32(128));
			ku[hf][b][0] = ix_pow2_pd(_mm256_castsi256_si128(e));
			ku[hf][b][1] = ix_pow2_pd(_mm256_extracti128_si256(e, 1));
		}
	if (ints && rows)
		ix_heads_avx2(q, kt, kmin, kpow, ku, w, n, good, out, 1, 1);
	else if (ints)
		ix_heads_avx2(q, kt, kmin, kpow, ku, w, n, good, out, 1, 0);
	else if (rows)
		ix_heads_avx2(q, kt, kmin, kpow, ku, w, n, good, out, 0, 1);
	else
		ix_heads_avx2(q, kt, kmin, kpow, ku, w, n, good, out, 0, 0);
	return (size_t)__builtin_popcount(good);
}

/* ix_batch_fn of the AVX2 q·k rows (ix_keys checked the keys): a short batch padded with its
 * first key. */
static void ix_run_batch_avx2(const struct srt_attn_ixq *q, const uint8_t *const *kp,
			      const float *w, double *const *yk, size_t n)
{
	(void)w;
	const uint8_t *k16[IX_BATCH];
	ix_pad_batch(kp, n, k16);
	ix_kernel16_avx2(q, k16, NULL, n, yk, 1, 0, NULL);
}

/* ix_score16's contract on AVX2 (the range check in the kernel). */
static size_t ix_score16_avx2(const struct srt_attn_ixq *q, const uint8_t *const *kp,
			      const float *w, size_t n, int span, double *out, uint8_t *ok)
{
	double *o[IX_BATCH];
	for (size_t i = 0; i < IX_BATCH; i++)
		o[i] = out + (i < n ? i : 0);
	return ix_kernel16_avx2(q, kp, w, n, o, 0, span, ok);
}
#endif

/* The keys of [0, ne) whose scales are in the exact range (ok[e]), handed IX_BATCH at a time
 * to run with their outputs dst + e·stride; the others get ok[e] = 0. Returns the number
 * done. */
static size_t ix_keys(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
		      const uint8_t *const *next, size_t nnext, uint8_t *ok, double *dst,
		      size_t stride, const float *w, ix_batch_fn run)
{
	size_t done = 0, nb = q->d / IX_BLOCK, nbytes = q->d / 2;
	const int span = q->span;
#ifdef IX_X86
	const uint8_t *kp[IX_BATCH];
	double *yk[IX_BATCH];
	size_t nbat = 0;
#else
	(void)dst;
	(void)stride;
	(void)w;
	(void)run;
#endif
	for (size_t e = 0; e < ne; e++) {
#ifdef IX_X86
		ix_prefetch(q, keys, ne, next, nnext, e);
#endif
		const uint8_t *ks = keys[e] + nbytes;
		int lo = 255, hi = 0;
		for (size_t b = 0; b < nb; b++) {
			lo = ks[b] < lo ? ks[b] : lo;
			hi = ks[b] > hi ? ks[b] : hi;
		}
		/* finite key floats (6·2^(e-127) < 2^128) and no rounding in the double loop */
		ok[e] = hi <= IX_CODE_HI && (hi - lo) + q->spread <= span;
		if (!ok[e])
			continue;
#ifdef IX_X86
		kp[nbat] = keys[e];
		yk[nbat++] = dst + e * stride;
		done++;
		if (nbat == IX_BATCH) {
			run(q, kp, w, yk, nbat);
			nbat = 0;
		}
#else
		ok[e] = 0;
#endif
	}
#ifdef IX_X86
	if (nbat)
		run(q, kp, w, yk, nbat);
#endif
	return done;
}

size_t srt_attn_qk_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
		       const uint8_t *const *next, size_t nnext, double *y, uint8_t *ok)
{
#ifdef IX_X86
	return ix_keys(q, keys, ne, next, nnext, ok, y, q->nh, NULL,
		       ix_isa() == IX_VNNI ? ix_run_batch : ix_run_batch_avx2);
#else
	return ix_keys(q, keys, ne, next, nnext, ok, y, q->nh, NULL, NULL);
#endif
}

size_t srt_attn_ix_score_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys,
			     size_t ne, const uint8_t *const *next, size_t nnext, const float *w,
			     double *out, uint8_t *ok)
{
#ifdef IX_X86
	return ix_scores(q, keys, ne, next, nnext, w, out, ok,
			 ix_isa() == IX_VNNI ? ix_score16 : ix_score16_avx2);
#else
	return ix_keys(q, keys, ne, next, nnext, ok, out, 1, w, NULL);
#endif
}
