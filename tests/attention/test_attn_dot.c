/*
 * attn_dot kernels against the scalar loops that define their bits (attn_dot.h): under every
 * kernel set this CPU has (main runs the suite with SRT_GEMM_ISA=generic, avx2 and the best:
 * the portable loops, the AVX2 kernels, the AVX-512 ones), every output of the kernels equals
 * the loop's result bit for bit. The operands span many binades, so a different summation
 * order (another lane assignment, a tree sum, a fused multiply-add) changes results and fails
 * these tests.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_dot.h"
#include "attn_ix.h"
#include "ops/quant.h"
#include "ops/fp.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

/* A float of either sign over 2^-20 .. 2^20 with a full mantissa. */
static float wide(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	float m = 1.0f + (float)(rng >> 40) / (float)(1u << 24);
	int e = (int)((rng >> 8) % 41) - 20;
	return (rng & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

static int same(float a, float b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

START_TEST(qk_heads_equals_the_per_head_double_loop_bitwise)
{
	static const size_t nhs[] = {8, 16, 24, 64, 12, 4, 20, 3};
	const size_t K = 128;
	for (size_t hi = 0; hi < sizeof(nhs) / sizeof(nhs[0]); hi++) {
		size_t nh = nhs[hi];
		for (size_t ne = 1; ne <= 9; ne++) {
			double *qt = malloc(sizeof(double) * K * nh), *y = malloc(sizeof(double) * ne * nh);
			float *keys = malloc(sizeof(float) * ne * K);
			/* widened floats (the indexer's queries: the fused path), and for odd ne
			 * doubles with more than a float's bits (products not exact: the separate
			 * multiplication and addition must be used) */
			for (size_t i = 0; i < K * nh; i++)
				qt[i] = (double)wide() * (ne % 2 ? 1.0 + 0x1p-40 : 1.0);
			for (size_t i = 0; i < ne * K; i++)
				keys[i] = wide();
			srt_attn_qk_heads(qt, nh, keys, K, ne, y);
			for (size_t e = 0; e < ne; e++)
				for (size_t h = 0; h < nh; h++) {
					double s = 0;
					for (size_t c = 0; c < K; c++)
						s += qt[c * nh + h] * (double)keys[e * K + c];
					ck_assert_msg(memcmp(&s, &y[e * nh + h], sizeof s) == 0,
						      "nh %zu ne %zu: y[%zu][%zu] %a vs loop %a", nh, ne, e, h,
						      y[e * nh + h], s);
				}
			free(qt);
			free(y);
			free(keys);
		}
	}
}
END_TEST

/* The indexer's FP4 key decode: every code byte under scales across the UE8M0 range
 * (0 = 2^-127, 255 = NaN) gives the scalar loop's floats bit for bit, in order. */
START_TEST(fp4_row_equals_the_scalar_decode_bitwise)
{
	static const size_t ds[] = {128, 64, 32, 48};
	static const uint8_t sc[] = {0, 1, 100, 127, 128, 200, 254, 255};
	for (size_t di = 0; di < sizeof(ds) / sizeof(ds[0]); di++) {
		size_t d = ds[di];
		uint8_t codes[64], scales[4];
		float v[128], w[128];
		for (int rep = 0; rep < 16; rep++) {
			for (size_t i = 0; i < d / 2; i++)
				codes[i] = (uint8_t)(rep * 16 + i * 7); /* every byte value over the reps */
			for (size_t b = 0; b < (d + 31) / 32; b++)
				scales[b] = sc[(rep + b) % 8];
			srt_attn_fp4_row(codes, scales, d, v);
			for (size_t i = 0; i < d; i++) {
				w[i] = srt_fp4_e2m1_to_f32(srt_fp4_get(codes, i)) *
				       srt_e8m0_to_f32(scales[i / 32]);
				ck_assert_msg(memcmp(&v[i], &w[i], 4) == 0, "d %zu rep %d: v[%zu] %a vs %a",
					      d, rep, i, v[i], w[i]);
			}
		}
	}
}
END_TEST

/* The KV cache's FP8 decode: every code byte (NaN codes included) under scales across the
 * UE8M0 range (0 = 2^-127, 246 the largest vectorised, 247 and up the scalar fallback, 255 =
 * NaN) gives the scalar loop's floats bit for bit. */
START_TEST(fp8_row_equals_the_scalar_decode_bitwise)
{
	static const uint8_t sc[] = {0, 1, 9, 10, 100, 127, 200, 246, 247, 254, 255};
	const size_t n = 448;
	uint8_t codes[448], scales[7];
	float v[448], w[448];
	for (int rep = 0; rep < 22; rep++) {
		for (size_t i = 0; i < n; i++)
			codes[i] = (uint8_t)(i * 37 + (size_t)rep * 11 + i / 256);
		if (rep % 2) /* blocks without NaN codes: the vector path */
			for (size_t i = 0; i < n; i++)
				if ((codes[i] & 0x7F) == 0x7F)
					codes[i] ^= 1;
		for (size_t b = 0; b < n / 64; b++)
			scales[b] = sc[((size_t)rep + b) % (sizeof(sc) / sizeof(sc[0]))];
		srt_attn_fp8_row(codes, scales, n, v);
		for (size_t i = 0; i < n; i++) {
			w[i] = srt_fp8_e4m3_to_f32(codes[i]) * srt_e8m0_to_f32(scales[i / 64]);
			/* a NaN code times a NaN scale: which NaN's sign the product carries is not
			 * defined (compilers may swap the operands; the sanitizer build does) */
			if (isnan(v[i]) && isnan(w[i]) && isnan(srt_e8m0_to_f32(scales[i / 64])))
				continue;
			ck_assert_msg(memcmp(&v[i], &w[i], 4) == 0, "rep %d: v[%zu] (code 0x%02x scale %u) %a vs %a",
				      rep, i, codes[i], scales[i / 64], v[i], w[i]);
		}
	}
}
END_TEST

/*
 * srt_attn_fp8_row's proof of exactness: over every scale code, a row holding every non-NaN
 * E4M3 code (the least subnormal, 2^-9, and 448 among them) passes srt_attn_bf16_exact exactly
 * for the codes 76 .. 179, and the row is proven exact only where it passes (with AVX2 and
 * F16C, exactly there: a wider proven range would let the attention's fused multiply-adds run
 * on inexact products, a narrower one would only slow it).
 */
START_TEST(fp8_row_proves_bf16_exact_only_where_it_holds)
{
	uint8_t codes[128], scales[2];
	float v[128];
	for (size_t i = 0; i < 128; i++)
		codes[i] = (uint8_t)(i == 127 ? 0x80 : i);
#if defined(__x86_64__) && defined(__GNUC__)
	const char *isa = getenv("SRT_GEMM_ISA"); /* "generic": the scalar loop, never proven */
	const int vec = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
			!(isa && !strcmp(isa, "generic"));
#else
	const int vec = 0;
#endif
	for (int sc = 0; sc < 256; sc++) {
		scales[0] = scales[1] = (uint8_t)sc;
		const int proven = srt_attn_fp8_row(codes, scales, 128, v);
		const int exact = srt_attn_bf16_exact(v, 128);
		ck_assert_int_eq(exact, sc >= 76 && sc <= 179);
		ck_assert_msg(!proven || exact, "scale code %d: proven, not exact", sc);
		if (vec)
			ck_assert_msg(proven == exact, "scale code %d: proven %d, exact %d", sc, proven, exact);
	}
	codes[5] = 0x7F; /* a NaN code: never proven */
	scales[0] = scales[1] = 127;
	ck_assert_int_eq(srt_attn_fp8_row(codes, scales, 128, v), 0);
}
END_TEST

/* The FP8 key layout of the tests below: head_dim 512 = 448 E4M3 dims (7 blocks of 64, one
 * scale code each) + 64 bf16 rope dims; an attention instance with no weights, enough for the
 * key codecs. */
enum { KV_NOPE = 448, KV_RD = 64, KV_EB = KV_NOPE + 2 * KV_RD + KV_NOPE / 64 };

static void fp8_kv_attn(struct srt_model_config *mc, struct srt_attn *a)
{
	memset(mc, 0, sizeof *mc);
	memset(a, 0, sizeof *a);
	mc->head_dim = 512;
	mc->qk_rope_head_dim = 64;
	a->m = mc;
	a->kv_store = SRT_ATTN_ST_FP8;
}

/* Entry e of that layout: codes (i·mul + c) mod 127, negative where i % neg == 0 (neg > 0),
 * random rope words, scale codes 110 + b, or spread over 0 .. 246 (wide). */
static void fp8_kv_fill(uint8_t *e, size_t c, size_t mul, size_t neg, int wide_sc)
{
	for (size_t i = 0; i < KV_NOPE; i++)
		e[i] = (uint8_t)((i * mul + c) % 0x7F) | (neg && i % neg == 0 ? 0x80 : 0);
	for (size_t i = 0; i < KV_RD; i++) {
		const uint16_t h = srt_bf16_from_f32(wide());
		memcpy(&e[KV_NOPE + 2 * i], &h, 2);
	}
	for (size_t b = 0; b < KV_NOPE / 64; b++)
		e[KV_NOPE + 2 * KV_RD + b] = (uint8_t)(wide_sc ? (c * 41 / 11 + b * 35) % 247 : 110 + b);
}

/*
 * srt_attn_kv_decode_n's exactness = srt_attn_bf16_exact of the floats it wrote (which are
 * srt_attn_kv_decode's), for FP8 entries whose blocks are proven from their scale codes, or
 * not (a small scale over all-zero codes: exact, found by the floats), or fail (the least
 * subnormal under a small scale, a NaN code), and rope words in and out of the range.
 */
START_TEST(kv_decode_n_exact_is_bf16_exact)
{
	struct srt_model_config mc;
	struct srt_attn a;
	fp8_kv_attn(&mc, &a);
	enum { NOPE = KV_NOPE, RD = KV_RD, EB = KV_EB };
	uint8_t ent[6][EB];
	for (int c = 0; c < 6; c++)
		fp8_kv_fill(ent[c], (size_t)c, 29, 0, 0); /* no NaN codes */
	/* 1: a block under scale code 40 whose codes are all zero (exact, not proven) */
	memset(ent[1] + 64, 0, 64);
	ent[1][NOPE + 2 * RD + 1] = 40;
	/* 2: code 1 (2^-9) under scale code 75: 2^-61, outside */
	ent[2][NOPE + 2 * RD + 3] = 75;
	ent[2][3 * 64 + 5] = 1;
	/* 3: a NaN code */
	ent[3][200] = 0xFF;
	/* 4: a rope word of biased exponent 1 */
	ent[4][NOPE + 2 * 7] = 0x80;
	ent[4][NOPE + 2 * 7 + 1] = 0x00;
	/* 5: a rope word of biased exponent 187 (inside) */
	ent[5][NOPE + 2 * 9] = 0x80;
	ent[5][NOPE + 2 * 9 + 1] = 0x5D;
	static const int sets[][3] = {{0, 5, 0}, {0, 1, 5}, {1, 2, 0}, {3, 0, 0}, {0, 0, 4}, {5, 5, 1}};
	for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
		const uint8_t *e[3];
		float v[3 * 512], w[512];
		for (int k = 0; k < 3; k++)
			e[k] = ent[sets[si][k]];
		const int ex = srt_attn_kv_decode_n(&a, e, 3, v, 1);
		ck_assert_int_eq(ex, srt_attn_bf16_exact(v, 3 * 512));
		ck_assert_int_eq(ex, si == 0 || si == 1 || si == 5);
		ck_assert_int_eq(srt_attn_kv_decode_n(&a, e, 3, v, 0), 0);
		for (int k = 0; k < 3; k++) {
			srt_attn_kv_decode(&a, e[k], w);
			ck_assert(memcmp(w, v + k * 512, sizeof w) == 0);
		}
	}
}
END_TEST

/* srt_attn_kv_panels = srt_attn_kv_decode then srt_attn_v_panels, bit for bit, for FP8
 * entries the vector path takes (scale codes 0 .. 246, subnormal and negative codes, rope words
 * of every sign) and ones it leaves to the general decode (a NaN code, scale codes 247 and
 * 254), mixed in one call, at a panel key stride above the key count; slots of keys not
 * passed stay as they were. */
START_TEST(kv_panels_are_the_decoded_values_bitwise)
{
	struct srt_model_config mc;
	struct srt_attn a;
	fp8_kv_attn(&mc, &a);
	enum { NOPE = KV_NOPE, RD = KV_RD, EB = KV_EB, NK = 7, LDK = NK + 2 };
	static uint8_t ent[NK][EB];
	for (int c = 0; c < NK; c++)
		fp8_kv_fill(ent[c], (size_t)c * 11, 37, 3, 1);
	ent[2][300] = 0xFF;                 /* a NaN code */
	ent[4][NOPE + 2 * RD + 6] = 247;    /* 2^8·s not finite */
	ent[5][NOPE + 2 * RD + 0] = 254;
	const uint8_t *e[NK];
	for (int k = 0; k < NK; k++)
		e[k] = ent[k];
	float *vp = malloc(sizeof(float) * LDK * 512), *want = malloc(sizeof(float) * LDK * 512);
	float v[512], tmp[512];
	for (size_t i = 0; i < LDK * 512; i++)
		vp[i] = want[i] = NAN;
	for (int k = 0; k < NK; k++) {
		srt_attn_kv_decode(&a, e[k], v);
		srt_attn_v_panels(v, 1, 512, (size_t)k, LDK, want);
	}
	srt_attn_kv_panels(&a, e, NK, LDK, vp, tmp);
	ck_assert(memcmp(vp, want, sizeof(float) * LDK * 512) == 0);
	free(vp);
	free(want);
}
END_TEST

/* srt_attn_kv_tiles = srt_attn_kv_decode_n then srt_attn_tile, bit for bit, and its exactness
 * = srt_attn_kv_decode_n's: key counts 1 .. 19 (full tiles, partial last tiles whose padding
 * rows are +0), keys from the sets of kv_decode_n_exact_is_bf16_exact (proven, exact but not
 * proven, failing, rope words in and out of range) and ones the tile path leaves to the
 * general decode (a NaN code, scale code 247), in every position. */
START_TEST(kv_tiles_are_the_decoded_tiles_bitwise)
{
	struct srt_model_config mc;
	struct srt_attn a;
	fp8_kv_attn(&mc, &a);
	enum { NOPE = KV_NOPE, RD = KV_RD, EB = KV_EB, NE = 8, NMAX = 19 };
	static uint8_t ent[NE][EB];
	for (int c = 0; c < NE; c++)
		fp8_kv_fill(ent[c], (size_t)c, 29, 5, 0);
	memset(ent[1] + 64, 0, 64); /* exact, not proven */
	ent[1][NOPE + 2 * RD + 1] = 40;
	ent[2][NOPE + 2 * RD + 3] = 75; /* 2^-61: not exact */
	ent[2][3 * 64 + 5] = 1;
	ent[3][NOPE + 2 * 7] = 0x80; /* a rope word of biased exponent 1 */
	ent[3][NOPE + 2 * 7 + 1] = 0x00;
	ent[4][200] = 0xFF;             /* a NaN code */
	ent[5][NOPE + 2 * RD + 6] = 247; /* 2^8·s not finite */
	/* keys 0 (proven) and 1 (exact) alone, then one odd key in turn among them */
	for (int odd = -1; odd < NE; odd++)
		for (size_t n = 1; n <= NMAX; n++) {
			const uint8_t *e[NMAX];
			for (size_t k = 0; k < n; k++)
				e[k] = ent[k % 2];
			if (odd >= 0)
				e[(n * 7 + (size_t)odd) % n] = ent[odd];
			size_t nt = (n + 7) / 8;
			float *rows = malloc(sizeof(float) * n * 512), *want = malloc(sizeof(float) * nt * 8 * 512);
			float *t = malloc(sizeof(float) * nt * 8 * 512), tmp[8 * 512];
			for (int ex = 0; ex < 2; ex++) {
				const int wex = srt_attn_kv_decode_n(&a, e, n, rows, ex);
				srt_attn_tile(rows, n, 512, 512, want);
				for (size_t i = 0; i < nt * 8 * 512; i++)
					t[i] = NAN;
				const int gex = srt_attn_kv_tiles(&a, e, n, t, tmp, ex);
				ck_assert_msg(gex == wex, "exactness %d vs %d (odd %d, n %zu)", gex, wex, odd, n);
				ck_assert_msg(memcmp(t, want, sizeof(float) * nt * 8 * 512) == 0,
					      "tiles (odd %d, n %zu)", odd, n);
			}
			free(rows);
			free(want);
			free(t);
		}
}
END_TEST

/* The tile layout (attn_dot.h) by its definition, whatever path builds it: full and partial
 * tiles, column counts with and without a tail of 8, a row stride above k. */
START_TEST(tile_layout_is_the_definition)
{
	static const size_t ks[] = {512, 100, 7, 8};
	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
		size_t k = ks[ki], ldw = k + 5;
		for (size_t n = 1; n <= 21; n += 4) {
			size_t nt = (n + 7) / 8;
			float *w = malloc(sizeof(float) * n * ldw), *t = malloc(sizeof(float) * nt * 8 * k);
			for (size_t i = 0; i < n * ldw; i++)
				w[i] = wide();
			memset(t, 0xFF, sizeof(float) * nt * 8 * k); /* NaN: every slot must be written */
			srt_attn_tile(w, n, k, ldw, t);
			for (size_t j = 0; j < nt; j++)
				for (size_t c = 0; c < k; c++)
					for (size_t l = 0; l < 8; l++) {
						size_t r = j * 8 + l;
						float want = r < n ? w[r * ldw + c] : 0.0f;
						ck_assert_msg(same(t[(j * k + c) * 8 + l], want),
							      "k %zu n %zu: tile %zu col %zu lane %zu", k, n, j, c, l);
					}
			free(w);
			free(t);
		}
	}
}
END_TEST

/* The indexer's bf16 head weighting = its scalar expression bitwise: scores of both signs
 * (ReLU), -0, NaN, values on bf16 rounding ties, weights of both signs, 8-multiple and odd
 * head counts. */
START_TEST(ix_weigh_bf16_equals_the_scalar_expression_bitwise)
{
	static const size_t nhs[] = {8, 16, 64, 24, 5};
	for (size_t ni = 0; ni < sizeof(nhs) / sizeof(nhs[0]); ni++) {
		size_t nh = nhs[ni];
		for (int rep = 0; rep < 50; rep++) {
			double qk[64];
			float w[64], t[64];
			for (size_t h = 0; h < nh; h++) {
				qk[h] = (double)wide() * (1.0 + 0x1p-30);
				w[h] = wide();
				if ((h + (size_t)rep) % 9 == 0)
					qk[h] = (double)(1.0f + 0x1p-8f); /* a tie: rounds to even */
				if ((h + (size_t)rep) % 11 == 0)
					qk[h] = -0.0;
				if ((h + (size_t)rep) % 13 == 0)
					qk[h] = NAN;
			}
			srt_attn_ix_weigh_bf16(qk, w, nh, t);
			for (size_t h = 0; h < nh; h++) {
				float sc = srt_round_bf16((float)qk[h]);
				float want = srt_round_bf16((sc > 0 ? sc : 0.0f) * w[h]);
				ck_assert_msg(same(t[h], want), "nh %zu rep %d h %zu: %a vs %a (qk %a w %a)",
					      nh, rep, h, t[h], want, qk[h], w[h]);
			}
		}
	}
}
END_TEST

/*
 * The indexer's reference scores (srt_attn_ix_score_bf16) = the per-key loop bitwise: the
 * terms of ix_weigh_bf16 summed in double over ascending heads, then rounded to float and
 * bf16. Most keys put terms of ±2^60 at random heads among small ones, so another order of
 * the head sum (reversed, pairwise, lanes of heads) loses or keeps the small terms
 * differently and fails; key counts around the kernel's 16 keys a pass, head counts of 8k
 * and odd.
 */
START_TEST(ix_score_bf16_equals_the_ascending_head_sum_bitwise)
{
	static const size_t nhs[] = {16, 64, 24, 5};
	for (size_t ni = 0; ni < sizeof(nhs) / sizeof(nhs[0]); ni++) {
		const size_t nh = nhs[ni];
		for (size_t ne = 1; ne <= 40; ne += 13) {
			double *qk = malloc(sizeof(double) * ne * nh), out[40];
			float w[64];
			for (size_t h = 0; h < nh; h++)
				w[h] = srt_round_bf16(wide() * 0x1p-10f);
			for (size_t e = 0; e < ne; e++)
				for (size_t h = 0; h < nh; h++) {
					double v = (double)wide() * (1.0 + 0x1p-30);
					rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
					if (e % 4 != 3 && rng % 5 == 0)
						v = ldexp(rng & 2 ? 1.0 : -1.0, 60) / (double)w[h];
					if ((e + h) % 17 == 0)
						v = -0.0;
					qk[e * nh + h] = v;
				}
			srt_attn_ix_score_bf16(qk, w, nh, ne, out);
			for (size_t e = 0; e < ne; e++) {
				double tot = 0;
				for (size_t h = 0; h < nh; h++) {
					float sc = srt_round_bf16((float)qk[e * nh + h]);
					tot += srt_round_bf16((sc > 0 ? sc : 0.0f) * w[h]);
				}
				double want = srt_round_bf16((float)tot);
				ck_assert_msg(memcmp(&out[e], &want, sizeof want) == 0,
					      "nh %zu ne %zu key %zu: %a vs the loop's %a", nh, ne, e,
					      out[e], want);
			}
			free(qk);
		}
	}
}
END_TEST

START_TEST(dot_tiles_f32_equals_the_ascending_float_loop_bitwise)
{
	static const size_t Ks[] = {512, 100, 1};
	for (size_t ki = 0; ki < 3; ki++) {
		size_t K = Ks[ki];
		for (size_t nt = 1; nt <= 19; nt += 3) {
			float *x = malloc(sizeof(float) * K), *t = malloc(sizeof(float) * nt * K * 8);
			float *y = malloc(sizeof(float) * nt * 8);
			for (size_t i = 0; i < K; i++)
				x[i] = wide();
			for (size_t i = 0; i < nt * K * 8; i++)
				t[i] = wide();
			srt_attn_dot_tiles_f32(x, t, K, nt, y);
			for (size_t j = 0; j < nt; j++)
				for (size_t l = 0; l < 8; l++) {
					float s = 0;
					for (size_t c = 0; c < K; c++) {
						float p = x[c] * t[(j * K + c) * 8 + l];
						s = s + p;
					}
					ck_assert_msg(same(s, y[j * 8 + l]), "K %zu nt %zu: y[%zu] %a vs loop %a",
						      K, nt, j * 8 + l, y[j * 8 + l], s);
				}
			free(x);
			free(t);
			free(y);
		}
	}
}
END_TEST

START_TEST(pv_f32_equals_the_ascending_float_loop_bitwise)
{
	static const size_t ns[] = {512, 130, 17, 3};
	for (size_t ni = 0; ni < 4; ni++) {
		size_t n = ns[ni], ld = n + 5;
		for (size_t K = 1; K <= 50; K += 7) {
			float *p = malloc(sizeof(float) * K), *v = malloc(sizeof(float) * K * ld);
			float *y = malloc(sizeof(float) * n);
			for (size_t i = 0; i < K; i++)
				p[i] = wide();
			for (size_t i = 0; i < K * ld; i++)
				v[i] = wide();
			srt_attn_pv_f32(p, v, ld, n, K, y);
			for (size_t i = 0; i < n; i++) {
				float s = 0;
				for (size_t c = 0; c < K; c++) {
					float q = p[c] * v[c * ld + i];
					s = s + q;
				}
				ck_assert_msg(same(s, y[i]), "n %zu K %zu: y[%zu] %a vs loop %a", n, K, i,
					      y[i], s);
			}
			free(p);
			free(v);
			free(y);
		}
	}
}
END_TEST

/* The two-head kernels give each head exactly the one-head kernel's bits (which the tests
 * above tie to the loops): tile counts around the 4-tile pass, outputs around the 64- and
 * 16-wide passes. */
START_TEST(two_head_kernels_equal_two_one_head_calls_bitwise)
{
	static const size_t Ks[] = {512, 100, 1};
	for (size_t ki = 0; ki < 3; ki++) {
		size_t K = Ks[ki];
		for (size_t nt = 1; nt <= 13; nt += 2) {
			float *x = malloc(sizeof(float) * 2 * K), *t = malloc(sizeof(float) * nt * K * 8);
			float *y = malloc(sizeof(float) * nt * 8 * 4);
			for (size_t i = 0; i < 2 * K; i++)
				x[i] = wide();
			for (size_t i = 0; i < nt * K * 8; i++)
				t[i] = wide();
			srt_attn_dot_tiles_f32_2(x, x + K, t, K, nt, y, y + nt * 8,
						 srt_attn_bf16_exact(t, nt * K * 8));
			srt_attn_dot_tiles_f32(x, t, K, nt, y + 2 * nt * 8);
			srt_attn_dot_tiles_f32(x + K, t, K, nt, y + 3 * nt * 8);
			for (size_t i = 0; i < 2 * nt * 8; i++)
				ck_assert_msg(same(y[i], y[2 * nt * 8 + i]), "K %zu nt %zu: head %zu y[%zu] %a vs %a",
					      K, nt, i / (nt * 8), i % (nt * 8), y[i], y[2 * nt * 8 + i]);
			free(x);
			free(t);
			free(y);
		}
	}
	static const size_t ns[] = {512, 200, 67, 17, 3};
	for (size_t ni = 0; ni < 5; ni++) {
		size_t n = ns[ni], ld = n + 5;
		for (size_t K = 1; K <= 50; K += 7) {
			float *p = malloc(sizeof(float) * 2 * K), *v = malloc(sizeof(float) * K * ld);
			float *y = malloc(sizeof(float) * 4 * n);
			for (size_t i = 0; i < 2 * K; i++)
				p[i] = wide();
			for (size_t i = 0; i < K * ld; i++)
				v[i] = wide();
			srt_attn_pv_f32_2(p, p + K, v, ld, n, K, y, y + n, srt_attn_bf16_exact(v, K * ld));
			srt_attn_pv_f32(p, v, ld, n, K, y + 2 * n);
			srt_attn_pv_f32(p + K, v, ld, n, K, y + 3 * n);
			for (size_t i = 0; i < 2 * n; i++)
				ck_assert_msg(same(y[i], y[2 * n + i]), "n %zu K %zu: head %zu y[%zu] %a vs %a",
					      n, K, i / n, i % n, y[i], y[2 * n + i]);
			free(p);
			free(v);
			free(y);
		}
	}
}
END_TEST

/* bf16 values of 1 .. 8 significant bits over 2^-20 .. 2^20, signs mixed, some zeros: the
 * float32 chains round often, every product is exact. */
static float bf16ish(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	if (rng % 17 == 0)
		return rng % 2 ? 0.0f : -0.0f;
	float v = ldexpf((float)(1 + (rng >> 8) % 255), (int)((rng >> 20) % 41) - 27);
	return srt_round_bf16(rng & 0x100000000ull ? -v : v);
}

/* srt_attn_bf16_exact's bounds, and the two-head kernels on operands that pass it (fused
 * multiply-adds) against two one-head calls (multiplication then addition). */
START_TEST(two_head_kernels_fused_on_bf16_operands_equal_the_loops_bitwise)
{
	const float ok[] = {0.0f, -0.0f, 0x1p-60f, -0x1p-60f, 0x1.fep60f, 1.5f, -0x1.02p-3f};
	const float bad[] = {0x1p-61f, 0x1p61f, 1.0f + 0x1p-16f, INFINITY, NAN, 0x1p-130f};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		ck_assert_msg(srt_attn_bf16_exact(&ok[i], 1), "%a should pass", ok[i]);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		float v[40];
		for (size_t j = 0; j < 40; j++)
			v[j] = 1.0f;
		ck_assert_msg(!srt_attn_bf16_exact(&bad[i], 1), "%a should fail", bad[i]);
		v[i * 7] = bad[i]; /* in the vector part and the scalar tail */
		ck_assert_msg(!srt_attn_bf16_exact(v, 40), "%a at %zu should fail", bad[i], i * 7);
		v[i * 7] = 1.0f;
		v[39] = bad[i];
		ck_assert_msg(!srt_attn_bf16_exact(v, 40), "%a at 39 should fail", bad[i]);
	}
	const size_t K = 512;
	for (size_t nt = 1; nt <= 13; nt += 3) {
		float *x = malloc(sizeof(float) * 2 * K), *t = malloc(sizeof(float) * nt * K * 8);
		float *y = malloc(sizeof(float) * nt * 8 * 4);
		for (size_t i = 0; i < 2 * K; i++)
			x[i] = bf16ish();
		for (size_t i = 0; i < nt * K * 8; i++)
			t[i] = bf16ish();
		ck_assert(srt_attn_bf16_exact(x, 2 * K) && srt_attn_bf16_exact(t, nt * K * 8));
		srt_attn_dot_tiles_f32_2(x, x + K, t, K, nt, y, y + nt * 8, 1);
		srt_attn_dot_tiles_f32(x, t, K, nt, y + 2 * nt * 8);
		srt_attn_dot_tiles_f32(x + K, t, K, nt, y + 3 * nt * 8);
		for (size_t i = 0; i < 2 * nt * 8; i++)
			ck_assert_msg(same(y[i], y[2 * nt * 8 + i]), "qk nt %zu: y[%zu] %a vs %a", nt, i,
				      y[i], y[2 * nt * 8 + i]);
		free(x);
		free(t);
		free(y);
	}
	static const size_t ns[] = {512, 200, 67};
	for (size_t ni = 0; ni < 3; ni++) {
		size_t n = ns[ni], ld = n + 3, Kp = 384;
		float *p = malloc(sizeof(float) * 2 * Kp), *v = malloc(sizeof(float) * Kp * ld);
		float *y = malloc(sizeof(float) * 4 * n);
		for (size_t i = 0; i < 2 * Kp; i++)
			p[i] = fabsf(bf16ish());
		for (size_t i = 0; i < Kp * ld; i++)
			v[i] = bf16ish();
		srt_attn_pv_f32_2(p, p + Kp, v, ld, n, Kp, y, y + n, 1);
		srt_attn_pv_f32(p, v, ld, n, Kp, y + 2 * n);
		srt_attn_pv_f32(p + Kp, v, ld, n, Kp, y + 3 * n);
		for (size_t i = 0; i < 2 * n; i++)
			ck_assert_msg(same(y[i], y[2 * n + i]), "pv n %zu: y[%zu] %a vs %a", n, i, y[i],
				      y[2 * n + i]);
		free(p);
		free(v);
		free(y);
	}
}
END_TEST

/* Each head's p·v outputs ys[h] against the one-head call srt_attn_pv_f32 for ps[h] over the
 * row-major values v (row stride ld), bitwise; r: n floats of scratch. */
static void assert_pv_heads(const char *what, int bf, size_t nh, const float *const *ps,
			    const float *v, size_t ld, size_t n, size_t K, float *const *ys, float *r)
{
	for (size_t h = 0; h < nh; h++) {
		srt_attn_pv_f32(ps[h], v, ld, n, K, r);
		for (size_t i = 0; i < n; i++)
			ck_assert_msg(same(ys[h][i], r[i]),
				      "%s bf %d nh %zu n %zu K %zu: head %zu y[%zu] %a vs %a", what, bf,
				      nh, n, K, h, i, ys[h][i], r[i]);
	}
}

/* The n-head calls (four heads per pass, then pairs, then one) against one one-head call per
 * head: head counts 1 .. 9 (every remainder of 4 and of 2), tile counts around the three- and
 * two-tile passes, output counts around the 16- and 8-wide passes, operands wide (multiplication then
 * addition) and bf16 (fused, with one head of a group not bf16 in turn: unfused again). */
START_TEST(n_head_kernels_equal_one_head_calls_bitwise)
{
	enum { NHMAX = 9 };
	static const size_t Ks[] = {512, 100, 1};
	for (int bf = 0; bf < 2; bf++)
		for (size_t nh = 1; nh <= NHMAX; nh++) {
			const float *xs[NHMAX];
			float *ys[NHMAX];
			for (size_t ki = 0; ki < 3; ki++) {
				size_t K = Ks[ki];
				for (size_t nt = 1; nt <= 7; nt++) {
					float *x = malloc(sizeof(float) * nh * K);
					float *t = malloc(sizeof(float) * nt * K * 8);
					float *y = malloc(sizeof(float) * nt * 8 * 2 * nh);
					for (size_t i = 0; i < nh * K; i++)
						x[i] = bf ? bf16ish() : wide();
					for (size_t i = 0; i < nt * K * 8; i++)
						t[i] = bf ? bf16ish() : wide();
					if (bf && nt % 3 == 0)
						x[(nt % nh) * K] = 1.0f + 0x1p-20f; /* not bf16 */
					/* heads in reverse memory order: the pointers are what count */
					for (size_t h = 0; h < nh; h++) {
						xs[h] = x + (nh - 1 - h) * K;
						ys[h] = y + h * nt * 8;
					}
					srt_attn_dot_tiles_f32_n(nh, xs, t, K, nt, ys,
								 srt_attn_bf16_exact(t, nt * K * 8));
					for (size_t h = 0; h < nh; h++) {
						float *r = y + (nh + h) * nt * 8;
						srt_attn_dot_tiles_f32(xs[h], t, K, nt, r);
						for (size_t i = 0; i < nt * 8; i++)
							ck_assert_msg(same(ys[h][i], r[i]),
								      "qk bf %d nh %zu K %zu nt %zu: head %zu y[%zu] %a vs %a",
								      bf, nh, K, nt, h, i, ys[h][i], r[i]);
					}
					free(x);
					free(t);
					free(y);
				}
			}
			static const size_t ns[] = {512, 200, 67, 24, 17, 3};
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
				size_t n = ns[ni], ld = n + 5;
				for (size_t K = 1; K <= 200; K += K < 30 ? 29 : 170) {
					float *p = malloc(sizeof(float) * nh * K);
					float *v = malloc(sizeof(float) * K * ld);
					float *y = malloc(sizeof(float) * 2 * nh * n);
					for (size_t i = 0; i < nh * K; i++)
						p[i] = bf ? fabsf(bf16ish()) : wide();
					for (size_t i = 0; i < K * ld; i++)
						v[i] = bf ? bf16ish() : wide();
					if (bf && ni % 2)
						p[(ni % nh) * K + K / 2] = 0x1p-70f; /* not bf16 */
					for (size_t h = 0; h < nh; h++) {
						xs[h] = p + (nh - 1 - h) * K;
						ys[h] = y + h * n;
					}
					srt_attn_pv_f32_n(nh, xs, v, ld, n, K, ys,
							  srt_attn_bf16_exact(v, K * ld));
					assert_pv_heads("pv", bf, nh, xs, v, ld, n, K, ys, y + nh * n);
					free(p);
					free(v);
					free(y);
				}
			}
		}
}
END_TEST

/* p·v over value panels (srt_attn_v_panels, srt_attn_pv_f32_np) against the row-major
 * one-head call: head counts 1 .. 9 (every remainder of 4 and of 2), output counts 512, 64 and
 * 16 (8 and 16 outputs past the 24-wide passes, and no such pass), key counts around the
 * 32-key blocks the forward pass packs, a panel key stride above the key count, values written
 * in two blocks (k0 > 0), operands wide (multiplication then addition) and bf16 (fused, with one
 * head not bf16 in turn). A value in the wrong panel or key slot, a dropped or reordered key,
 * or a fused product of inexact operands changes some output. */
START_TEST(pv_on_value_panels_equals_the_row_major_kernel_bitwise)
{
	enum { NHMAX = 9 };
	static const size_t ns[] = {512, 64, 16};
	static const size_t Ks[] = {1, 31, 32, 33, 130};
	for (int bf = 0; bf < 2; bf++)
		for (size_t nh = 1; nh <= NHMAX; nh++)
			for (size_t ni = 0; ni < 3; ni++)
				for (size_t ki = 0; ki < 5; ki++) {
					size_t n = ns[ni], K = Ks[ki], ldk = K + 3, kh = K / 2;
					const float *ps[NHMAX];
					float *ys[NHMAX];
					float *p = malloc(sizeof(float) * nh * K);
					float *v = malloc(sizeof(float) * K * n);
					float *vp = malloc(sizeof(float) * ldk * n);
					float *y = malloc(sizeof(float) * 2 * nh * n);
					for (size_t i = 0; i < nh * K; i++)
						p[i] = bf ? fabsf(bf16ish()) : wide();
					for (size_t i = 0; i < K * n; i++)
						v[i] = bf ? bf16ish() : wide();
					if (bf && nh > 1 && ki % 2)
						p[(ki % nh) * K + K / 2] = 0x1p-70f; /* not bf16 */
					for (size_t i = 0; i < ldk * n; i++)
						vp[i] = NAN; /* slots no key fills */
					srt_attn_v_panels(v, kh, n, 0, ldk, vp);
					srt_attn_v_panels(v + kh * n, K - kh, n, kh, ldk, vp);
					for (size_t h = 0; h < nh; h++) {
						ps[h] = p + (nh - 1 - h) * K;
						ys[h] = y + h * n;
					}
					srt_attn_pv_f32_np(nh, ps, vp, ldk, n, K, ys,
							   srt_attn_bf16_exact(v, K * n), 0);
					assert_pv_heads("panels", bf, nh, ps, v, n, n, K, ys, y + nh * n);
					/* the keys in two blocks, each in panels of its own (the
					 * forward pass's pv_blocks), the second call continuing
					 * the first's sums: the same bits */
					float *y2 = malloc(sizeof(float) * nh * n);
					float *vp2 = malloc(sizeof(float) * (K - kh + 1) * n);
					float *y2h[NHMAX];
					const float *ps2[NHMAX];
					srt_attn_v_panels(v + kh * n, K - kh, n, 0, K - kh + 1, vp2);
					for (size_t h = 0; h < nh; h++) {
						y2h[h] = y2 + h * n;
						ps2[h] = ps[h] + kh;
					}
					srt_attn_pv_f32_np(nh, ps, vp, ldk, n, kh, y2h,
							   srt_attn_bf16_exact(v, K * n), 0);
					srt_attn_pv_f32_np(nh, ps2, vp2, K - kh + 1, n, K - kh, y2h,
							   srt_attn_bf16_exact(v, K * n), 1);
					ck_assert_msg(memcmp(y2, y, sizeof(float) * nh * n) == 0,
						      "panels in two blocks (bf %d, nh %zu, n %zu, K %zu)", bf,
						      nh, n, K);
					free(y2);
					free(vp2);
					free(p);
					free(v);
					free(vp);
					free(y);
				}
}
END_TEST

/* The double-accumulated tile product (srt_attn_dot_tiles) against its loop: tile counts
 * around the 4-tile pass, column counts with odd tails. */
START_TEST(dot_tiles_equals_the_ascending_double_loop_bitwise)
{
	static const size_t Ks[] = {512, 100, 7, 1};
	for (size_t ki = 0; ki < 4; ki++) {
		size_t K = Ks[ki];
		for (size_t nt = 1; nt <= 11; nt++) {
			float *x = malloc(sizeof(float) * K), *t = malloc(sizeof(float) * nt * K * 8);
			double *y = malloc(sizeof(double) * nt * 8);
			for (size_t i = 0; i < K; i++)
				x[i] = wide();
			for (size_t i = 0; i < nt * K * 8; i++)
				t[i] = wide();
			srt_attn_dot_tiles(x, t, K, nt, y);
			for (size_t j = 0; j < nt; j++)
				for (size_t l = 0; l < 8; l++) {
					double s = 0;
					for (size_t c = 0; c < K; c++)
						s += (double)x[c] * (double)t[(j * K + c) * 8 + l];
					ck_assert_msg(memcmp(&s, &y[j * 8 + l], sizeof s) == 0,
						      "K %zu nt %zu: y[%zu] %a vs loop %a", K, nt, j * 8 + l,
						      y[j * 8 + l], s);
				}
			free(x);
			free(t);
			free(y);
		}
	}
}
END_TEST

/* probabilities·values in double (srt_attn_pv): widths around the 32- and 4-wide passes. */
START_TEST(pv_equals_the_ascending_double_loop_bitwise)
{
	static const size_t ns[] = {512, 130, 37, 33, 4, 3};
	for (size_t ni = 0; ni < 6; ni++) {
		size_t n = ns[ni], ld = n + 5;
		for (size_t K = 1; K <= 50; K += 7) {
			double *p = malloc(sizeof(double) * K), *y = malloc(sizeof(double) * n);
			float *v = malloc(sizeof(float) * K * ld);
			for (size_t i = 0; i < K; i++)
				p[i] = (double)wide() * (1.0 + 0x1p-40);
			for (size_t i = 0; i < K * ld; i++)
				v[i] = wide();
			srt_attn_pv(p, v, ld, n, K, y);
			for (size_t i = 0; i < n; i++) {
				double s = 0;
				for (size_t c = 0; c < K; c++)
					s += p[c] * (double)v[c * ld + i];
				ck_assert_msg(memcmp(&s, &y[i], sizeof s) == 0,
					      "n %zu K %zu: y[%zu] %a vs loop %a", n, K, i, y[i], s);
			}
			free(p);
			free(v);
			free(y);
		}
	}
}
END_TEST

static void *t_alloc(size_t size, size_t align)
{
	void *p = NULL;
	return posix_memalign(&p, align, size) ? NULL : p;
}

/*
 * A constant matrix (srt_attn_tm_dot) stored as float, bf16 and E4M3 tiles, each against the
 * double loop over its values: row counts with a partial last tile, tile ranges starting
 * past 0, counts around the 4-tile (float, bf16) and 2-tile (E4M3) passes.
 */
START_TEST(tm_dot_equals_the_double_loop_bitwise_for_every_tile_format)
{
	const struct srt_host host = {.alloc = t_alloc, .free = free};
	static const size_t ks[] = {256, 128, 100, 7};
	for (int fmt = 0; fmt < 3; fmt++) /* 0 float, 1 bf16, 2 E4M3 */
		for (size_t ki = 0; ki < 4; ki++) {
			size_t k = ks[ki];
			if (fmt == 2 && k % 128)
				continue;
			for (size_t n = 3; n <= 83; n += 16) {
				float *w = malloc(sizeof(float) * n * k), *x = malloc(sizeof(float) * k);
				uint8_t *codes = malloc(n * k), scales[8 * 2];
				size_t nt = (n + 7) / 8, sb = k / 128;
				double *y = malloc(sizeof(double) * nt * 8);
				for (size_t i = 0; i < 16; i++)
					scales[i] = (uint8_t)(118 + (i * 5) % 19);
				for (size_t i = 0; i < n * k; i++) {
					if (fmt == 2) {
						rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
						codes[i] = (uint8_t)(rng >> 24);
						if ((codes[i] & 0x7F) == 0x7F) /* no NaN */
							codes[i] ^= 1;
						w[i] = srt_fp8_e4m3_to_f32(codes[i]) *
						       srt_e8m0_to_f32(scales[(i / k / 128) * sb + i % k / 128]);
					} else {
						w[i] = fmt ? srt_round_bf16(wide()) : wide();
					}
				}
				for (size_t i = 0; i < k; i++)
					x[i] = wide();
				struct srt_attn_tm m;
				memset(&m, 0, sizeof m);
				if (fmt == 2)
					ck_assert_int_eq(srt_attn_tm_make_fp8(&host, codes, scales, sb, 0, n, k,
									     w, &m), 0);
				else
					ck_assert_int_eq(srt_attn_tm_make(&host, w, n, k, &m), 0);
				ck_assert_int_eq(m.bf16, fmt == 1);
				ck_assert_int_eq(m.fp8, fmt == 2);
				for (size_t t0 = 0; t0 < nt && t0 < 2; t0++) {
					srt_attn_tm_dot(&m, x, t0, nt - t0, y);
					for (size_t r = t0 * 8; r < nt * 8; r++) {
						double s = 0;
						for (size_t c = 0; c < k && r < n; c++)
							s += (double)x[c] * (double)w[r * k + c];
						ck_assert_msg(memcmp(&s, &y[r - t0 * 8], sizeof s) == 0,
							      "format %d k %zu n %zu t0 %zu: row %zu %a vs loop %a",
							      fmt, k, n, t0, r, y[r - t0 * 8], s);
					}
				}
				srt_attn_tm_free(&host, &m);
				free(w);
				free(x);
				free(codes);
				free(y);
			}
		}
}
END_TEST

/* srt_attn_bf16_exact against its definition at every length 1 .. 40 (vector parts and
 * tails), one offending value at each position in turn. */
START_TEST(bf16_exact_equals_its_definition_at_every_length_and_position)
{
	const float bad[] = {0x1p-61f, 0x1p61f, 1.0f + 0x1p-16f, INFINITY, NAN, 0x1p-130f, 0x1p-67f};
	for (size_t n = 1; n <= 40; n++) {
		float v[40];
		for (size_t i = 0; i < n; i++)
			v[i] = bf16ish();
		ck_assert_msg(srt_attn_bf16_exact(v, n), "n %zu: bf16 values should pass", n);
		for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
			for (size_t i = 0; i < n; i++) {
				float keep = v[i];
				v[i] = bad[b];
				ck_assert_msg(!srt_attn_bf16_exact(v, n), "n %zu: %a at %zu should fail", n,
					      bad[b], i);
				v[i] = keep;
			}
	}
}
END_TEST

/* A bf16 value of either sign with biased exponent in [elo, ehi] and a random 8-bit
 * significand, or ±0 one time in 13. */
static float bf16_in(int elo, int ehi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	if (rng % 13 == 0)
		return rng % 2 ? 0.0f : -0.0f;
	const uint32_t u = (uint32_t)(rng >> 63) << 31 |
			   (uint32_t)(elo + (int)((rng >> 8) % (uint64_t)(ehi - elo + 1))) << 23 |
			   (uint32_t)((rng >> 20) & 0x7F) << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* The AVX512_BF16 kernels' admission: srt_attn_bf16_span's exponents against a scalar
 * definition, its rejections (not bf16, denormal, inf, NaN), and srt_attn_dp_fits at its
 * bounds (products of at least 2^-112, i.e. nothing below 2^-56 against 2^-56; sums of 2^15
 * products below 2^127). */
START_TEST(dp_gate_rejects_what_the_dot_product_instruction_would_change)
{
	const float bad[] = {1.0f + 0x1p-16f, INFINITY, -INFINITY, NAN, 0x1p-130f, -0x1p-127f};
	for (size_t n = 1; n <= 40; n++) {
		float v[40];
		uint8_t lo0 = 255, hi0 = 0, lo, hi;
		for (size_t i = 0; i < n; i++) {
			v[i] = bf16_in(1, 254);
			uint32_t u;
			memcpy(&u, &v[i], sizeof u);
			const uint8_t e = (uint8_t)(u >> 23 & 0xFF);
			if (u & 0x7FFFFFFFu) {
				lo0 = e < lo0 ? e : lo0;
				hi0 = e > hi0 ? e : hi0;
			}
		}
		ck_assert_msg(srt_attn_bf16_span(v, n, &lo, &hi), "n %zu: bf16 values should pass", n);
		ck_assert_msg(lo == lo0 && hi == hi0, "n %zu: span %u..%u, expected %u..%u", n, lo, hi,
			      lo0, hi0);
		for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
			for (size_t i = 0; i < n; i++) {
				float keep = v[i];
				v[i] = bad[b];
				ck_assert_msg(!srt_attn_bf16_span(v, n, &lo, &hi),
					      "n %zu: %a at %zu should fail", n, bad[b], i);
				v[i] = keep;
			}
	}
	const float zeros[20] = {-0.0f, 0.0f, -0.0f};
	uint8_t lo, hi;
	ck_assert(srt_attn_bf16_span(zeros, 20, &lo, &hi) && lo == 255 && hi == 0);
	ck_assert(srt_attn_dp_fits(lo, hi, 1, 254, 1u << 20)); /* zeros fit anything */
	/* 2^-56 = biased 71, 2^55 = biased 182 */
	ck_assert(srt_attn_dp_fits(71, 182, 71, 182, 32768));
	ck_assert(!srt_attn_dp_fits(70, 182, 71, 182, 512));
	ck_assert(srt_attn_dp_fits(70, 182, 72, 182, 512));
	ck_assert(!srt_attn_dp_fits(71, 183, 71, 182, 512));
	ck_assert(!srt_attn_dp_fits(71, 182, 71, 182, 32769));
}
END_TEST

/* keys[k][c] -> the float32 loop y = 0; y += q[c] · key[c], c ascending */
static float f32_dot(const float *q, const float *k, size_t n)
{
	float s = 0;
	for (size_t c = 0; c < n; c++)
		s += q[c] * k[c];
	return s;
}

/*
 * srt_attn_qk16_bf16 (16 query lanes x keys, bf16 pairs) against the float32 loop, bit for bit:
 * head dims 512 and small ones, key counts around the 8-key pass, 16 lanes or fewer (unused
 * lanes zero), values over ~40 binades, at the gate's bounds (2^-56 and just below 2^56)
 * with ±0. Then values below the gate: the loop keeps what VDPBF16PS flushes, so the
 * kernel differs (where it is VDPBF16PS) -- the gate is needed.
 */
START_TEST(qk16_bf16_equals_the_ascending_float_loop_bitwise)
{
	static const size_t hds[] = {512, 64, 6, 2};
	for (int range = 0; range < 3; range++)
		for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
			for (size_t nk = 1; nk <= 41; nk += nk < 20 ? 1 : 7) {
				const size_t hd = hds[hi], lanes = nk % 3 == 0 ? 11 : nk % 3 == 1 ? 16 : 8;
				float *q = malloc(sizeof(float) * 16 * hd);
				float *k = malloc(sizeof(float) * nk * hd);
				uint32_t *qp = malloc(sizeof(uint32_t) * 8 * hd);
				uint32_t *kp = malloc(sizeof(uint32_t) * nk * hd / 2);
				float *y = malloc(sizeof(float) * 16 * nk);
				for (size_t i = 0; i < 16 * hd; i++)
					q[i] = i < lanes * hd ? range == 0 ? bf16ish()
							 : range == 1 ? bf16_in(71, 80) : bf16_in(172, 182)
							      : 0.0f;
				for (size_t i = 0; i < nk * hd; i++)
					k[i] = range == 0 ? bf16ish() : range == 1 ? bf16_in(71, 90)
									: bf16_in(100, 182);
				uint8_t ql, qh, kl, kh;
				ck_assert(srt_attn_bf16_span(q, 16 * hd, &ql, &qh) &&
					  srt_attn_bf16_span(k, nk * hd, &kl, &kh));
				ck_assert(srt_attn_dp_fits(ql, qh, kl, kh, hd));
				for (size_t l = 0; l < 16; l++)
					srt_attn_bf16_pairs(q + l * hd, hd, qp + l, 16);
				srt_attn_bf16_pairs(k, nk * hd, kp, 1);
				srt_attn_qk16_bf16(qp, kp, hd, nk, y);
				for (size_t j = 0; j < nk; j++)
					for (size_t l = 0; l < 16; l++) {
						float r = f32_dot(q + l * hd, k + j * hd, hd);
						ck_assert_msg(same(y[16 * j + l], r),
							      "range %d hd %zu nk %zu: key %zu lane %zu %a vs %a",
							      range, hd, nk, j, l, y[16 * j + l], r);
					}
				free(q);
				free(k);
				free(qp);
				free(kp);
				free(y);
			}
	if (!srt_attn_dp_usable())
		return;
	/* below the gate: products near 2^-140 that the loop keeps as denormals */
	enum { HD = 64, NK = 8 };
	float q[16 * HD], k[NK * HD], y[16 * NK];
	uint32_t qp[8 * HD], kp[NK * HD / 2];
	int differ = 0;
	for (size_t i = 0; i < 16 * HD; i++)
		q[i] = bf16_in(50, 60);
	for (size_t i = 0; i < NK * HD; i++)
		k[i] = bf16_in(50, 60);
	for (size_t l = 0; l < 16; l++)
		srt_attn_bf16_pairs(q + l * HD, HD, qp + l, 16);
	srt_attn_bf16_pairs(k, NK * HD, kp, 1);
	srt_attn_qk16_bf16(qp, kp, HD, NK, y);
	for (size_t j = 0; j < NK; j++)
		for (size_t l = 0; l < 16; l++)
			differ += !same(y[16 * j + l], f32_dot(q + l * HD, k + j * HD, HD));
	ck_assert_msg(differ, "denormal products should differ from the loop (flushed)");
}
END_TEST

/*
 * srt_attn_pv_bf16 (heads x value dims, keys in pairs) against the float32 loop y = 0;
 * y += p[k] · v[k][c], k ascending, bit for bit: odd key counts (the zero pad), head counts
 * around the 4-head pass, probabilities of bf16 over many binades with zeros, values with ±0,
 * values at the gate's bounds; 1 to 16 heads.
 */
START_TEST(pv_bf16_equals_the_ascending_float_loop_bitwise)
{
	static const size_t ns[] = {512, 128, 64};
	static const size_t nks[] = {1, 2, 3, 7, 8, 31, 64, 65, 201};
	for (int range = 0; range < 2; range++)
		for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
			for (size_t ki = 0; ki < sizeof nks / sizeof nks[0]; ki++)
				for (size_t nh = 1; nh <= 16; nh += nh < 5 || nh == 8 ? 1 : nh < 8 ? 3 : 7) {
					const size_t n = ns[ni], nk = nks[ki], np = (nk + 1) / 2;
					float *p = malloc(sizeof(float) * nh * nk);
					float *v = malloc(sizeof(float) * nk * n);
					uint32_t *pw = malloc(sizeof(uint32_t) * nh * np);
					uint32_t *vp = malloc(sizeof(uint32_t) * np * n);
					float *y = malloc(sizeof(float) * nh * n);
					const uint32_t *pp[16];
					float *ys[16];
					for (size_t i = 0; i < nh * nk; i++)
						p[i] = range ? fabsf(bf16_in(71, 127)) : fabsf(bf16ish());
					for (size_t i = 0; i < nk * n; i++)
						v[i] = range ? bf16_in(71, 182) : bf16ish();
					if (nh > 2) /* a head of zeros over negative values: +0 sums */
						for (size_t i = 0; i < nk; i++) {
							p[nk + i] = 0.0f;
							v[i * n] = -fabsf(v[i * n]);
						}
					uint8_t pl, ph, vl, vh;
					ck_assert(srt_attn_bf16_span(p, nh * nk, &pl, &ph) &&
						  srt_attn_bf16_span(v, nk * n, &vl, &vh));
					ck_assert(srt_attn_dp_fits(pl, ph, vl, vh, nk));
					for (size_t h = 0; h < nh; h++) {
						srt_attn_bf16_pairs(p + h * nk, nk, pw + h * np, 1);
						pp[h] = pw + h * np;
						ys[h] = y + h * n;
					}
					for (size_t j = 0; j < np; j++)
						srt_attn_bf16_vpairs(v + 2 * j * n,
								     2 * j + 1 < nk ? v + (2 * j + 1) * n : NULL,
								     n, vp + j * n);
					srt_attn_pv_bf16(nh, pp, vp, n, np, ys);
					for (size_t h = 0; h < nh; h++)
						for (size_t c = 0; c < n; c++) {
							float r = 0;
							for (size_t j = 0; j < nk; j++)
								r += p[h * nk + j] * v[j * n + c];
							ck_assert_msg(same(ys[h][c], r),
								      "range %d n %zu nk %zu nh %zu: head %zu y[%zu] %a vs %a",
								      range, n, nk, nh, h, c, ys[h][c], r);
						}
					free(p);
					free(v);
					free(pw);
					free(vp);
					free(y);
				}
}
END_TEST

/* srt_attn_bf16_keys (one pass) gives what the separate layout and span functions give. */
/* The definition of srt_attn_bf16_keys's layouts for nk keys of hd floats: kp each key's
 * pairs (srt_attn_bf16_pairs), vp the pair-interleaved rows of keys 2j and 2j + 1
 * (srt_attn_bf16_vpairs, NULL for a last odd key). */
static void pair_layouts(const float *k, size_t nk, size_t hd, uint32_t *kp, uint32_t *vp)
{
	srt_attn_bf16_pairs(k, nk * hd, kp, 1);
	for (size_t j = 0; j < (nk + 1) / 2; j++)
		srt_attn_bf16_vpairs(k + 2 * j * hd, 2 * j + 1 < nk ? k + (2 * j + 1) * hd : NULL, hd,
				     vp + j * hd);
}

START_TEST(bf16_keys_equals_the_separate_layouts_and_span)
{
	static const size_t hds[] = {512, 64, 10};
	for (size_t hi = 0; hi < 3; hi++)
		for (size_t nk = 1; nk <= 33; nk += nk < 4 ? 1 : 29) {
			const size_t hd = hds[hi], np = (nk + 1) / 2;
			float *k = malloc(sizeof(float) * nk * hd);
			uint32_t *kp = malloc(sizeof(uint32_t) * nk * hd / 2 * 2);
			uint32_t *vp = malloc(sizeof(uint32_t) * np * hd * 2);
			for (int bad = 0; bad < 2; bad++) {
				for (size_t i = 0; i < nk * hd; i++)
					k[i] = bf16_in(1, 254);
				if (bad)
					k[(nk * hd) / 2] = 0x1p-130f;
				uint8_t lo = 0, hi1 = 0, lo2 = 0, hi2 = 0;
				const int r = srt_attn_bf16_keys(k, nk, hd, kp, vp, &lo, &hi1);
				const int r2 = srt_attn_bf16_span(k, nk * hd, &lo2, &hi2);
				ck_assert_msg(r == r2 && r == !bad && (!r || (lo == lo2 && hi1 == hi2)),
					      "hd %zu nk %zu bad %d: %d %u %u vs %d %u %u", hd, nk, bad, r,
					      lo, hi1, r2, lo2, hi2);
				uint32_t *kp2 = kp + nk * hd / 2, *vp2 = vp + np * hd;
				pair_layouts(k, nk, hd, kp2, vp2);
				ck_assert(!memcmp(kp, kp2, sizeof(uint32_t) * nk * hd / 2));
				ck_assert(!memcmp(vp, vp2, sizeof(uint32_t) * np * hd));
			}
			free(k);
			free(kp);
			free(vp);
		}
}
END_TEST

/*
 * srt_attn_fp8_keys against its definition: each FP8 KV entry decoded to floats
 * (srt_attn_fp8_row, srt_attn_bf16_row), then the pair layouts and the span of those floats.
 * Entries mix every code (subnormal, zero and NaN ones included), scales around the bounds of
 * the word kernel's exact range (9 / 10 and 246 / 247; 0, 1 and 254 underflow or overflow in
 * places, 255 is NaN), odd key counts, all-zero keys, and rope words that are subnormal or
 * infinite: the return value, the span and both layouts must be the definition's.
 */
static uint16_t hi_word(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return (uint16_t)(u >> 16);
}

START_TEST(fp8_keys_equals_the_decoded_keys_layouts_and_span)
{
	static const size_t shapes[][2] = {{448, 64}, {128, 64}, {64, 32}};
	static const uint8_t sc[] = {0, 1, 9, 10, 11, 100, 127, 140, 200, 246, 247, 254, 255};
	static const size_t nks[] = {1, 2, 3, 32, 33};
	for (size_t si = 0; si < 3; si++)
		for (size_t ni = 0; ni < 5; ni++)
			for (int kind = 0; kind < 6; kind++) {
				const size_t nope = shapes[si][0], rd = shapes[si][1], hd = nope + rd;
				const size_t nk = nks[ni], np = (nk + 1) / 2;
				const size_t eb = nope + 2 * rd + nope / 64;
				uint8_t *ent = malloc(eb * nk);
				const uint8_t **e = malloc(sizeof(*e) * nk);
				float *f = malloc(sizeof(float) * nk * hd);
				uint32_t *kp = malloc(sizeof(uint32_t) * nk * hd / 2 * 2);
				uint32_t *vp = malloc(sizeof(uint32_t) * np * hd * 2);
				int nan_scale = 0;
				for (size_t k = 0; k < nk; k++) {
					uint8_t *x = ent + k * eb;
					e[k] = x;
					for (size_t i = 0; i < nope; i++) {
						rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
						x[i] = (uint8_t)(rng >> 24);
						if (kind != 1 && (x[i] & 0x7F) == 0x7F) /* NaN codes: kind 1 only */
							x[i] ^= 1;
						if (kind == 2) /* zero keys: ±0 codes */
							x[i] &= 0x80;
					}
					for (size_t b = 0; b < nope / 64; b++) {
						rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
						/* kinds 0 and 2: scales inside [10, 246]; the others: the list */
						uint8_t s8 = kind == 0 || kind == 2
								     ? (uint8_t)(10 + (rng >> 20) % 237)
								     : sc[(rng >> 20) % (sizeof(sc) / sizeof(sc[0]))];
						x[nope + 2 * rd + b] = s8;
						nan_scale |= s8 == 255;
					}
					for (size_t i = 0; i < rd; i++) {
						rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
						uint16_t w = kind == 2 ? (uint16_t)(rng & 0x8000)
								       : (uint16_t)(hi_word(bf16_in(100, 150)) ^ (rng & 0x8000));
						if (kind == 4 && i == k % rd)
							w = 0x0001; /* subnormal */
						if (kind == 5 && i == k % rd)
							w = 0x7F80; /* infinite */
						x[nope + 2 * i] = (uint8_t)w;
						x[nope + 2 * i + 1] = (uint8_t)(w >> 8);
					}
					srt_attn_fp8_row(x, x + nope + 2 * rd, nope, f + k * hd);
					srt_attn_bf16_row(x + nope, rd, f + k * hd + nope);
				}
				uint8_t lo = 0, hi = 0, lo2 = 0, hi2 = 0;
				const int r = srt_attn_fp8_keys(e, nk, nope, rd, f, kp, vp, &lo, &hi);
				/* its room (f) may hold the same floats now or not: decoded again */
				for (size_t k = 0; k < nk; k++) {
					srt_attn_fp8_row(e[k], e[k] + nope + 2 * rd, nope, f + k * hd);
					srt_attn_bf16_row(e[k] + nope, rd, f + k * hd + nope);
				}
				const int r2 = srt_attn_bf16_span(f, nk * hd, &lo2, &hi2);
				ck_assert_msg(r == r2 && (!r || (lo == lo2 && hi == hi2)),
					      "nope %zu nk %zu kind %d: %d %u %u vs %d %u %u", nope, nk, kind,
					      r, lo, hi, r2, lo2, hi2);
				if (kind == 0 || kind == 2)
					ck_assert_msg(r, "nope %zu nk %zu kind %d: in-range keys rejected", nope,
						      nk, kind);
				/* a NaN scale's products carry a NaN whose sign is not defined (see
				 * fp8_row_equals_the_scalar_decode_bitwise): layouts compared without */
				if (!nan_scale) {
					uint32_t *kp2 = kp + nk * hd / 2, *vp2 = vp + np * hd;
					pair_layouts(f, nk, hd, kp2, vp2);
					ck_assert_msg(!memcmp(kp, kp2, sizeof(uint32_t) * nk * hd / 2),
						      "nope %zu nk %zu kind %d: key pairs differ", nope, nk, kind);
					ck_assert_msg(!memcmp(vp, vp2, sizeof(uint32_t) * np * hd),
						      "nope %zu nk %zu kind %d: value pairs differ", nope, nk, kind);
				}
				free(ent);
				free(e);
				free(f);
				free(kp);
				free(vp);
			}
}
END_TEST

/* srt_attn_bf16_row at every length up to 40 and odd byte offsets: the widened words. */
START_TEST(bf16_row_equals_the_scalar_widening_bitwise)
{
	uint8_t b[2 * 41 + 1];
	float v[41];
	for (size_t i = 0; i < sizeof b; i++)
		b[i] = (uint8_t)(i * 37 + 11);
	for (size_t off = 0; off < 2; off++)
		for (size_t n = 1; n <= 40; n++) {
			srt_attn_bf16_row(b + off, n, v);
			for (size_t i = 0; i < n; i++) {
				uint16_t h;
				memcpy(&h, b + off + 2 * i, 2);
				ck_assert_msg(same(v[i], srt_bf16_to_f32(h)), "off %zu n %zu: %zu", off, n, i);
			}
		}
}
END_TEST

/* srt_attn_div_bf16 against its scalar expression: lengths around the vector width, special
 * values (NaN, infinities, zeros, values that round up into the next binade). */
START_TEST(div_bf16_equals_the_scalar_expression_bitwise)
{
	const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1.ffffp0f, 0x1.00018p0f,
			    0x1p-140f, 3.0f};
	const float ds[] = {3.0f, -0.7f, 0.0f, 0x1p-100f};
	float x[45], y[45];
	for (size_t n = 1; n <= 45; n++)
		for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
			for (size_t i = 0; i < n; i++)
				x[i] = i % 5 == 4 ? sp[(i / 5) % (sizeof sp / sizeof sp[0])] : wide();
			srt_attn_div_bf16(x, ds[di], n, y);
			for (size_t i = 0; i < n; i++)
				ck_assert_msg(same(y[i], srt_round_bf16(x[i] / ds[di])),
					      "n %zu d %a: %a / d gives %a", n, ds[di], x[i], y[i]);
		}
}
END_TEST

/*
 * The query's per-head steps (phase A5) against their scalar definitions, bitwise:
 * srt_attn_sumsq_bf16 either declines or gives the sequential double sum of bf16(q²) (it
 * must take the common case on AVX-512, and decline where an order would change the sum: one
 * square of 1 among squares of 2^-54, which the sequential loop drops and lane sums keep);
 * srt_attn_scale_bf16 gives bf16(q·r); srt_attn_hadamard_d gives attn_forward.c's double
 * butterflies, for n = 8 .. 1024 and both profiles.
 */
static double sumsq_seq(const float *q, size_t n)
{
	double ss = 0;
	for (size_t i = 0; i < n; i++)
		ss += srt_round_bf16(q[i] * q[i]);
	return ss;
}

static void hadamard_def(float *x, size_t n, int ref)
{
	double y[1024];
	for (size_t i = 0; i < n; i++)
		y[i] = x[i];
	for (size_t h = 1; h < n; h *= 2)
		for (size_t i = 0; i < n; i += 2 * h)
			for (size_t j = i; j < i + h; j++) {
				const double u = y[j], v = y[j + h];
				y[j] = u + v;
				y[j + h] = u - v;
			}
	const double sc = pow((double)n, -0.5);
	for (size_t i = 0; i < n; i++)
		x[i] = ref ? srt_round_bf16((float)y[i] * (float)sc) : (float)(y[i] * sc);
}

START_TEST(query_head_steps_equal_their_scalar_definitions_bitwise)
{
	static float q[1024], a[1024], b[1024];
	size_t taken = 0;
	for (size_t n = 8; n <= 512; n += 8) {
		for (size_t i = 0; i < n; i++) { /* magnitudes within 2^±8, as a query head's */
			const float w = wide();
			q[i] = srt_round_bf16(ldexpf(frexpf(w, &(int){0}), (int)(rng >> 20 & 15) - 7));
		}
		double ss = -1;
		if (srt_attn_sumsq_bf16(q, n, &ss)) {
			taken++;
			ck_assert_msg(ss == sumsq_seq(q, n), "n %zu: %a vs %a", n, ss, sumsq_seq(q, n));
		}
		memcpy(a, q, n * sizeof(float));
		srt_attn_scale_bf16(a, n, 0.3711f);
		for (size_t i = 0; i < n; i++)
			ck_assert(same(a[i], srt_round_bf16(q[i] * 0.3711f)));
	}
	if (srt_attn_hadamard_d(a, 16, 1)) /* a vector set here: the vector sum must run */
		ck_assert_uint_ge(taken, 32); /* n % 16 == 0 on AVX-512, all 64 on AVX2 */
	/* an order-dependent sum is declined (or equals the sequential one) */
	q[0] = 1.0f;
	for (size_t i = 1; i < 32; i++)
		q[i] = 0x1p-27f;
	double ss = -1;
	ck_assert(sumsq_seq(q, 32) == 1.0);
	ck_assert(!srt_attn_sumsq_bf16(q, 32, &ss) || ss == 1.0);
	q[3] = NAN;
	ck_assert(!srt_attn_sumsq_bf16(q, 32, &ss) || ss == 1.0);
	for (size_t n = 4; n <= 1024; n *= 2)
		for (int ref = 0; ref < 2; ref++) {
			for (size_t i = 0; i < n; i++)
				a[i] = b[i] = ref ? srt_round_bf16(wide()) : wide();
			hadamard_def(b, n, ref);
			if (!srt_attn_hadamard_d(a, n, ref))
				continue;
			ck_assert_msg(memcmp(a, b, n * sizeof(float)) == 0, "hadamard n %zu ref %d", n, ref);
		}
}
END_TEST

/* srt_attn_bf16_qpairs: the strided pairs of each head, zeros past nh. */
START_TEST(qpairs_equals_the_strided_pairs_of_each_head)
{
	static const size_t hds[] = {512, 64, 6};
	for (size_t hi = 0; hi < 3; hi++)
		for (size_t nh = 1; nh <= 16; nh++) {
			const size_t hd = hds[hi];
			float *q = malloc(sizeof(float) * nh * hd);
			uint32_t *a = malloc(sizeof(uint32_t) * 8 * hd), *b = malloc(sizeof(uint32_t) * 8 * hd);
			for (size_t i = 0; i < nh * hd; i++)
				q[i] = wide();
			memset(b, 0, sizeof(uint32_t) * 8 * hd);
			for (size_t l = 0; l < nh; l++)
				srt_attn_bf16_pairs(q + l * hd, hd, b + l, 16);
			memset(a, 0xAB, sizeof(uint32_t) * 8 * hd);
			srt_attn_bf16_qpairs(q, nh, hd, a);
			ck_assert_msg(!memcmp(a, b, sizeof(uint32_t) * 8 * hd), "hd %zu nh %zu", hd, nh);
			free(q);
			free(a);
			free(b);
		}
}
END_TEST

/* Uniform in (-1, 1): dense FP4 codes after quantization (wide() is mostly below a block's
 * smallest code). */
static float unit(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((int64_t)(rng >> 40) - (1 << 23)) / (float)(1 << 23);
}

/* One FP4 key of d dims from x (srt_quant_fp4: packed codes, then the scale codes). */
static void fp4_key(const float *x, size_t d, uint8_t *e)
{
	srt_quant_fp4(x, d, e, e + d / 2);
}

/* An indexer case: FP4-fake-quantized queries iq [nh][d] with per-head magnitudes 2^-30 ..
 * 2^30 and some all-zero blocks, ne FP4 keys (d/2 + d/32 bytes each, kp[e] = keys + e·that)
 * of per-key magnitudes; keys 7 and 8 have block scales spanning 38 and 39 binades (the
 * exact range's edge: done, and left to the caller), key 9 every scale code 252 (the greatest
 * whose floats are finite: done), key 10 one code 253 (left to the caller). */
static void ix_case(size_t nh, size_t d, size_t ne, float *iq, uint8_t *keys, const uint8_t **kp)
{
	const size_t ke = d / 2 + d / 32;
	for (size_t h = 0; h < nh; h++) {
		float mag = ldexpf(1.0f, (int)(h * 7 % 61) - 30);
		/* |values| < 6·mag, the first of each block 6·mag: every block's scale is mag, so
		 * a head's nonzero blocks span no binade (q.spread 0) */
		for (size_t c = 0; c < d; c++)
			iq[h * d + c] = (h % 5 == 3 && c / 32 == 1) ? 0.0f
					: c % 32 == 0 ? (c & 64 ? -6.0f : 6.0f) * mag
					: unit() * 6.0f * mag;
		srt_quant_fp4_fake(iq + h * d, iq + h * d, d);
	}
	for (size_t e = 0; e < ne; e++) {
		float x[160];
		for (size_t c = 0; c < d; c++)
			x[c] = unit() * ldexpf(1.0f, (int)(e % 23) - 11);
		if (e == 7 || e == 8) /* block 0 far above the others: 38 and 39 binades */
			for (size_t c = 0; c < d; c++)
				x[c] = (c < 32 ? ldexpf(1.0f, e == 7 ? 38 : 39) : 1.0f) *
				       (c % 32 ? 6.0f * unit() : 6.0f);
		fp4_key(x, d, keys + e * ke);
		if (e == 9 || e == 10)
			for (size_t b = 0; b < d / 32; b++)
				keys[e * ke + d / 2 + b] = (uint8_t)(e == 10 && b == d / 32 - 1 ? 253 : 252);
		kp[e] = keys + e * ke;
	}
}

/*
 * The exact FP4 path of the indexer (attn_ix.h) against the double loop that defines the
 * bits: FP4-fake-quantized queries with per-head magnitudes 2^-30 .. 2^30 and some all-zero
 * blocks, FP4 keys of per-key magnitudes, plus keys whose block scales span exactly the
 * allowed 38 binades (done, and equal: the bound is not too loose) and 39 (left to the caller).
 * Head dims of whole and partial 4-block passes (96, 128, 160), 16 and 64 heads, more keys
 * than the kernel prepares at once, with a key left to the caller among them.
 */
START_TEST(qk_fp4_equals_the_double_loop_bitwise)
{
	static const size_t nhs[] = {16, 64}, ds[] = {128, 96, 160};
	if (!srt_attn_qk_fp4_ready(16, 128)) {
		fprintf(stderr, "qk_fp4: no AVX-512 VNNI or AVX2 here, the double loop runs instead\n");
		return;
	}
	for (size_t di = 0; di < 3 * 2; di++) {
		const size_t d = ds[di / 2], ke = d / 2 + d / 32;
		const size_t nh = nhs[di % 2], ne = 40;
		float *iq = malloc(sizeof(float) * nh * d), *kf = malloc(sizeof(float) * ne * d);
		double *qt = malloc(sizeof(double) * d * nh), *y = malloc(sizeof(double) * ne * nh);
		double *yr = malloc(sizeof(double) * ne * nh);
		uint8_t *keys = malloc(ke * ne), ok[40];
		const uint8_t *kp[40];
		void *buf = malloc(srt_attn_ixq_bytes(nh, d));
		ix_case(nh, d, ne, iq, keys, kp);
		for (size_t e = 0; e < ne; e++)
			srt_attn_fp4_row(kp[e], kp[e] + d / 2, d, kf + e * d);
		struct srt_attn_ixq q;
		ck_assert_int_eq(srt_attn_ixq_prepare(iq, nh, d, buf, &q), 1);
		for (size_t h = 0; h < nh; h++)
			for (size_t c = 0; c < d; c++)
				qt[c * nh + h] = (double)iq[h * d + c];
		srt_attn_qk_heads(qt, nh, kf, d, ne, yr);
		size_t done = srt_attn_qk_fp4(&q, kp, ne, NULL, 0, y, ok);
		ck_assert_uint_ge(done, ne - 8);
		for (size_t e = 0; e < ne; e++) {
			if (!ok[e])
				continue;
			for (size_t h = 0; h < nh; h++)
				ck_assert_msg(memcmp(&y[e * nh + h], &yr[e * nh + h], sizeof(double)) == 0,
					      "d %zu nh %zu key %zu head %zu: %a vs the double loop %a", d, nh, e, h,
					      y[e * nh + h], yr[e * nh + h]);
		}
		ck_assert_int_eq(q.spread, 0);
		ck_assert_int_eq(ok[7], 1);
		ck_assert_int_eq(ok[8], 0);
		ck_assert_int_eq(ok[9], 1);
		ck_assert_int_eq(ok[10], 0);
		/* a query that is not FP4 values: not prepared */
		iq[5] = 1.0f + 0x1p-20f;
		ck_assert_int_eq(srt_attn_ixq_prepare(iq, nh, d, buf, &q), 0);
		free(iq);
		free(kf);
		free(qt);
		free(y);
		free(yr);
		free(keys);
		free(buf);
	}
}
END_TEST

/* srt_attn_ix_score_fp4 of ne <= 64 keys against the definition, bitwise: the decoded keys'
 * q·k rows by the double loop (srt_attn_qk_heads), scored by srt_attn_ix_score_bf16, for the
 * keys done (ok); srt_attn_qk_fp4 must do the same keys and give the same rows. With
 * `positive`, every score done > 0. Returns the number done. */
static size_t ix_scores_agree(size_t nh, size_t d, size_t ne, const float *iq,
			      const uint8_t *const *kp, const float *w, int positive, const char *what)
{
	double *y = malloc(sizeof(double) * ne * nh), *yr = malloc(sizeof(double) * ne * nh);
	double *qt = malloc(sizeof(double) * d * nh), want[64], got[64];
	float *kf = malloc(sizeof(float) * ne * d);
	uint8_t ok[64], ok2[64];
	void *buf = malloc(srt_attn_ixq_bytes(nh, d));
	struct srt_attn_ixq q;
	ck_assert_uint_le(ne, 64);
	ck_assert_int_eq(srt_attn_ixq_prepare(iq, nh, d, buf, &q), 1);
	for (size_t e = 0; e < ne; e++)
		srt_attn_fp4_row(kp[e], kp[e] + d / 2, d, kf + e * d);
	for (size_t h = 0; h < nh; h++)
		for (size_t c = 0; c < d; c++)
			qt[c * nh + h] = (double)iq[h * d + c];
	srt_attn_qk_heads(qt, nh, kf, d, ne, yr);
	const size_t done = srt_attn_qk_fp4(&q, kp, ne, NULL, 0, y, ok);
	for (size_t e = 0; e < ne; e++)
		if (ok[e]) {
			ck_assert_msg(memcmp(y + e * nh, yr + e * nh, sizeof(double) * nh) == 0,
				      "%s key %zu: q·k rows differ from the double loop", what, e);
			srt_attn_ix_score_bf16(yr + e * nh, w, nh, 1, &want[e]);
		}
	memset(got, 0xFF, sizeof got);
	ck_assert_uint_eq(srt_attn_ix_score_fp4(&q, kp, ne, NULL, 0, w, got, ok2), done);
	for (size_t e = 0; e < ne; e++) {
		ck_assert_int_eq(ok2[e], ok[e]);
		if (!ok[e]) { /* not written */
			static const uint8_t ff[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
			ck_assert_msg(memcmp(&got[e], ff, 8) == 0, "%s key %zu: left to the caller, written",
				      what, e);
			continue;
		}
		ck_assert_msg(!positive || want[e] > 0, "%s key %zu: score %a", what, e, want[e]);
		ck_assert_msg(memcmp(&got[e], &want[e], sizeof(double)) == 0, "%s key %zu: %a vs %a",
			      what, e, got[e], want[e]);
	}
	/* the keys scored next, read ahead (here the first half of the same ones), change no
	 * bit and no flag */
	double got2[64];
	uint8_t ok3[64];
	memset(got2, 0xFF, sizeof got2);
	ck_assert_uint_eq(srt_attn_ix_score_fp4(&q, kp, ne, kp, (ne + 1) / 2, w, got2, ok3), done);
	for (size_t e = 0; e < ne; e++) {
		ck_assert_int_eq(ok3[e], ok[e]);
		ck_assert_msg(!ok[e] || memcmp(&got2[e], &got[e], sizeof(double)) == 0,
			      "%s key %zu: read ahead %a vs %a", what, e, got2[e], got[e]);
	}
	ck_assert_uint_eq(srt_attn_qk_fp4(&q, kp, ne, kp, ne, y, ok3), done);
	for (size_t e = 0; e < ne; e++)
		ck_assert_msg(!ok[e] || memcmp(y + e * nh, yr + e * nh, sizeof(double) * nh) == 0,
			      "%s key %zu: q·k rows read ahead differ", what, e);
	free(y);
	free(yr);
	free(qt);
	free(kf);
	free(buf);
	return done;
}

/*
 * The indexer's reference scores with the keys in the lanes (srt_attn_ix_score_fp4) against
 * the double loop's rows scored by srt_attn_ix_score_bf16, bitwise (ix_scores_agree): head dims 96/128/160, 16
 * and 64 heads, 40 keys (two full batches of 16 and a short one), weights of both signs,
 * zero and tiny ones, so heads with negative, zero and NaN-free positive terms all occur;
 * the same keys done (ok) by both.
 */
START_TEST(ix_score_fp4_equals_the_double_loop_rows_scored_bitwise)
{
	static const size_t nhs[] = {16, 64}, ds[] = {128, 96, 160};
	if (!srt_attn_qk_fp4_ready(16, 128)) {
		fprintf(stderr, "ix_score_fp4: no AVX-512 VNNI or AVX2 here, the double loop runs instead\n");
		return;
	}
	for (size_t di = 0; di < 3 * 2; di++) {
		const size_t d = ds[di / 2], ke = d / 2 + d / 32;
		const size_t nh = nhs[di % 2], ne = 40;
		float *iq = malloc(sizeof(float) * nh * d), *w = malloc(sizeof(float) * nh);
		uint8_t *keys = malloc(ke * ne);
		const uint8_t *kp[40];
		char what[64];
		ix_case(nh, d, ne, iq, keys, kp);
		for (size_t h = 0; h < nh; h++)
			w[h] = h % 7 == 0 ? 0.0f : h % 11 == 5 ? 0x1p-140f : unit();
		snprintf(what, sizeof what, "d %zu nh %zu", d, nh);
		ix_scores_agree(nh, d, ne, iq, kp, w, 0, what);
		free(iq);
		free(w);
		free(keys);
	}
}
END_TEST

/*
 * The keys-in-lanes scores where their integer block sums meet their bounds (attn_ix.c,
 * ix_score16 and its AVX2 form), against the double loop's rows scored by
 * srt_attn_ix_score_bf16, bitwise (ix_scores_agree).
 * 16 heads x 128 dims, one batch of 16 keys, block k of a head (key) at 2^(base + spread·
 * (k > 0)), the query's and the keys' spreads apart:
 *  - scale 2^E of the sums at E = -126 (the least the integers take: their float results are
 *    normal) and -127 (left to the doubles: an integer path there would give 0);
 *  - every value 6·scale (each block sum the largest, 4608) with block shifts of 16 (taken:
 *    the sums fit in int32) and 18 (left to the doubles: 3 blocks << 18 overflow int32);
 *  - the keys' blocks 14 binades apart (AVX2 scales the sums by 2^14 in 16 bits) and 15
 *    (AVX2 leaves them to the doubles: 2^15 is no int16).
 */
START_TEST(ix_score_fp4_integer_sums_at_their_bounds)
{
	static const struct {
		/* E = qbase + kbase - 2; shifts qspread + kspread */
		int qbase, kbase, qspread, kspread, full;
	} cs[] = {{-62, -62, 0, 0, 0}, {-62, -63, 0, 0, 0}, {0, 0, 8, 8, 1}, {0, 0, 9, 9, 1},
		  {-20, 30, 8, 8, 1},   {0, 0, 0, 14, 1},    {0, 0, 0, 15, 1}, {-3, 5, 2, 14, 0}};
	if (!srt_attn_qk_fp4_ready(16, 128))
		return;
	const size_t nh = 16, d = 128, ne = 16, ke = d / 2 + d / 32;
	for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
		float iq[16 * 128], w[16], x[128];
		uint8_t keys[16 * (128 / 2 + 128 / 32)];
		const uint8_t *kp[16];
		char what[32];
		for (size_t h = 0; h < nh; h++) {
			for (size_t c = 0; c < d; c++) {
				const float mag = ldexpf(1.0f, cs[ci].qbase + (c >= 32 ? cs[ci].qspread : 0));
				iq[h * d + c] = (cs[ci].full || c % 32 == 0 ? 6.0f : 6.0f * unit()) * mag;
			}
			srt_quant_fp4_fake(iq + h * d, iq + h * d, d);
			w[h] = h % 2 ? 1.0f : 0.75f;
		}
		for (size_t e = 0; e < ne; e++) {
			for (size_t c = 0; c < d; c++) {
				const float mag = ldexpf(1.0f, cs[ci].kbase + (c >= 32 ? cs[ci].kspread : 0));
				x[c] = (cs[ci].full || c % 32 == 0 ? 6.0f : 6.0f * unit()) * mag;
			}
			fp4_key(x, d, keys + e * ke);
			kp[e] = keys + e * ke;
		}
		snprintf(what, sizeof what, "case %zu", ci);
		ck_assert_uint_eq(ix_scores_agree(nh, d, ne, iq, kp, w, 1, what), ne);
	}
}
END_TEST

struct tk_pair {
	double s;
	int32_t j;
};

static int tk_cmp(const void *x, const void *y)
{
	const struct tk_pair *a = x, *b = y;
	if (a->s != b->s)
		return a->s > b->s ? -1 : 1;
	return (a->j > b->j) - (a->j < b->j);
}

static int tk_cmp_i32(const void *x, const void *y)
{
	int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
	return (a > b) - (a < b);
}

/*
 * The indexer's top-k = the first k of a full sort (descending score, ties to the lower
 * index): bf16-rounded scores (many ties, the k-th among them), all equal, ascending,
 * descending, -0 with +0, a few large ones, at lengths where the sampled prefilter runs
 * (n >= 8k) and where it does not; a prefilter that dropped the ties at its threshold, or
 * sampled a threshold above the k-th score and kept the result, would fail.
 */
START_TEST(topk_equals_the_first_k_of_a_sort)
{
	static const int64_t ns[] = {300, 2047, 2048, 4096, 16384, 20001};
	const int64_t k = 256;
	for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
		for (int kind = 0; kind < 6; kind++) {
			const int64_t n = ns[ni];
			double *sc = malloc(sizeof(double) * (size_t)n);
			struct tk_pair *all = malloc(sizeof(*all) * (size_t)n);
			void *scratch = malloc(16 * (size_t)n);
			int32_t sel[256], want[256];
			for (int64_t j = 0; j < n; j++) {
				double v = kind == 0 ? srt_round_bf16(wide() * 0x1p-12f)
					 : kind == 1 ? 0.25
					 : kind == 2 ? (double)j
					 : kind == 3 ? (double)(n - j)
					 : kind == 4 ? (j % 3 ? 0.0 : -0.0)
					 : (j % 997 == 5 ? 1e6 + (double)j : srt_round_bf16(unit()));
				sc[j] = v;
				all[j].s = v;
				all[j].j = (int32_t)j;
			}
			qsort(all, (size_t)n, sizeof(*all), tk_cmp);
			const int64_t kk = k < n ? k : n;
			for (int64_t i = 0; i < kk; i++)
				want[i] = all[i].j;
			qsort(want, (size_t)kk, sizeof(*want), tk_cmp_i32);
			ck_assert_int_eq(srt_attn_topk(sc, n, k, scratch, sel), kk);
			for (int64_t i = 0; i < kk; i++)
				ck_assert_msg(sel[i] == want[i], "n %lld kind %d: sel[%lld] %d, want %d",
					      (long long)n, kind, (long long)i, sel[i], want[i]);
			free(sc);
			free(all);
			free(scratch);
		}
}
END_TEST

static Suite *attn_dot_suite(const char *name)
{
	Suite *s = suite_create(name);
	TCase *tc = tcase_create("kernels");
	tcase_add_test(tc, qk_heads_equals_the_per_head_double_loop_bitwise);
	tcase_add_test(tc, fp4_row_equals_the_scalar_decode_bitwise);
	tcase_add_test(tc, fp8_row_equals_the_scalar_decode_bitwise);
	tcase_add_test(tc, fp8_row_proves_bf16_exact_only_where_it_holds);
	tcase_add_test(tc, kv_decode_n_exact_is_bf16_exact);
	tcase_add_test(tc, kv_panels_are_the_decoded_values_bitwise);
	tcase_add_test(tc, kv_tiles_are_the_decoded_tiles_bitwise);
	tcase_add_test(tc, tile_layout_is_the_definition);
	tcase_add_test(tc, ix_weigh_bf16_equals_the_scalar_expression_bitwise);
	tcase_add_test(tc, ix_score_bf16_equals_the_ascending_head_sum_bitwise);
	tcase_add_test(tc, topk_equals_the_first_k_of_a_sort);
	tcase_add_test(tc, dot_tiles_f32_equals_the_ascending_float_loop_bitwise);
	tcase_add_test(tc, pv_f32_equals_the_ascending_float_loop_bitwise);
	tcase_add_test(tc, two_head_kernels_equal_two_one_head_calls_bitwise);
	tcase_add_test(tc, two_head_kernels_fused_on_bf16_operands_equal_the_loops_bitwise);
	tcase_add_test(tc, n_head_kernels_equal_one_head_calls_bitwise);
	tcase_add_test(tc, pv_on_value_panels_equals_the_row_major_kernel_bitwise);
	tcase_add_test(tc, qk_fp4_equals_the_double_loop_bitwise);
	tcase_add_test(tc, ix_score_fp4_equals_the_double_loop_rows_scored_bitwise);
	tcase_add_test(tc, ix_score_fp4_integer_sums_at_their_bounds);
	tcase_add_test(tc, dot_tiles_equals_the_ascending_double_loop_bitwise);
	tcase_add_test(tc, pv_equals_the_ascending_double_loop_bitwise);
	tcase_add_test(tc, tm_dot_equals_the_double_loop_bitwise_for_every_tile_format);
	tcase_add_test(tc, bf16_exact_equals_its_definition_at_every_length_and_position);
	tcase_add_test(tc, dp_gate_rejects_what_the_dot_product_instruction_would_change);
	tcase_add_test(tc, qk16_bf16_equals_the_ascending_float_loop_bitwise);
	tcase_add_test(tc, pv_bf16_equals_the_ascending_float_loop_bitwise);
	tcase_add_test(tc, bf16_keys_equals_the_separate_layouts_and_span);
	tcase_add_test(tc, fp8_keys_equals_the_decoded_keys_layouts_and_span);
	tcase_add_test(tc, bf16_row_equals_the_scalar_widening_bitwise);
	tcase_add_test(tc, div_bf16_equals_the_scalar_expression_bitwise);
	tcase_add_test(tc, qpairs_equals_the_strided_pairs_of_each_head);
	tcase_add_test(tc, query_head_steps_equal_their_scalar_definitions_bitwise);
	suite_add_tcase(s, tc);
	return s;
}

/* The suite under each kernel set of this CPU in turn: SRT_GEMM_ISA=generic (the portable
 * loops), avx2 (the AVX2 kernels where the CPU has AVX2), unset (the best, AVX-512 where
 * present). attn_dot.c reads SRT_GEMM_ISA once per process and each test runs in a fresh
 * fork, so the setting reaches it; with CK_FORK=no only the best set runs. */
int main(void)
{
	static const char *const isas[] = {"generic", "avx2", NULL};
	static const char *const names[] = {"attn_dot SRT_GEMM_ISA=generic",
					    "attn_dot SRT_GEMM_ISA=avx2", "attn_dot (best kernel set)"};
	int failed = 0;
	for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
		SRunner *sr = srunner_create(attn_dot_suite(names[i]));
		if (srunner_fork_status(sr) == CK_NOFORK && isas[i]) {
			srunner_free(sr);
			continue;
		}
		if (isas[i])
			setenv("SRT_GEMM_ISA", isas[i], 1);
		else
			unsetenv("SRT_GEMM_ISA");
		srunner_run_all(sr, CK_NORMAL);
		failed += srunner_ntests_failed(sr);
		srunner_free(sr);
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
