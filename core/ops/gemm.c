/* Dense y = x · Wᵀ for f32 / bf16 / FP8 / FP4 weights, exact and reference modes (gemm.h). */
#include "ops/gemm.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ops/fp.h"
#include "ops/gemm_isa.h"
#include "ops/hugemap.h"
#include "ops/quant.h"
#include "shadowrt/plugin.h"

#define KB 128 /* K block */
#define NT 4   /* output features decoded together, so each x block is reused NT times */

/* The fixed-order dot product every result is built from: 8 interleaved partial sums (lane
 * k mod 8), combined pairwise. Written so the compiler can keep the lanes in vector registers
 * without reordering anything. */
static inline float dot_blk(const float *restrict a, const float *restrict b, size_t len)
{
	float acc[8] = {0};
	const size_t full = len & ~(size_t)7;
	for (size_t k = 0; k < full; k += 8)
		for (size_t j = 0; j < 8; j++)
			acc[j] += a[k + j] * b[k + j];
	for (size_t j = 0; j < (len & 7u); j++) /* tail: element full + j goes to lane j */
		acc[j] += a[full + j] * b[full + j];
	return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* E4M3 code -> float by bit placement (vectorizable, exact; NaN codes decode to ±480). The
 * code's exponent/mantissa bits land in a float32 whose bias is 127 instead of 7; the
 * multiplication by 2^120 rebiases, and also turns the float32 subnormal of a code with
 * exponent 0 into the right E4M3 subnormal. */
static inline float fp8_fast(uint8_t c)
{
	uint32_t u = ((uint32_t)(c & 0x7Fu) << 20) | ((uint32_t)(c & 0x80u) << 24);
	float f;
	memcpy(&f, &u, sizeof f);
	return f * 0x1p120f;
}

/* Both E2M1 values of a packed byte (low nibble first): one 8-byte load per byte decodes FP4
 * weights at about twice the speed of two nibble lookups. */
#define F4M(m) ((m) == 0 ? 0.0f : (m) == 1 ? 0.5f : (m) == 2 ? 1.0f : (m) == 3 ? 1.5f : \
		(m) == 4 ? 2.0f : (m) == 5 ? 3.0f : (m) == 6 ? 4.0f : 6.0f)
#define F4(c) (((c) & 8) ? -F4M((c) & 7) : F4M((c) & 7))
#define P1(b) {F4((b) & 15), F4((b) >> 4)}
#define P4(b) P1(b), P1((b) + 1), P1((b) + 2), P1((b) + 3)
#define P16(b) P4(b), P4((b) + 4), P4((b) + 8), P4((b) + 12)
#define P64(b) P16(b), P16((b) + 16), P16((b) + 32), P16((b) + 48)
static const float fp4_pairs[256][2] = {P64(0), P64(64), P64(128), P64(192)};

static size_t ceil_div(size_t a, size_t b)
{
	return (a + b - 1) / b;
}

/* Decode W[n][k0 .. k0+len) into out: code values, times the block scales when `scaled`. */
static void decode_row(const struct srt_weight *w, size_t n, size_t k0, size_t len, bool scaled,
		       float *restrict out)
{
	const size_t K = w->cols;
	switch (w->type) {
	case SRT_WT_F32:
		memcpy(out, (const float *)w->data + n * K + k0, len * sizeof(float));
		break;
	case SRT_WT_BF16: {
		const uint16_t *src = (const uint16_t *)w->data + n * K + k0;
		for (size_t k = 0; k < len; k++) {
			uint32_t u = (uint32_t)src[k] << 16;
			memcpy(&out[k], &u, sizeof u);
		}
		break;
	}
	case SRT_WT_FP8: {
		const uint8_t *src = (const uint8_t *)w->data + n * K + k0;
		for (size_t k = 0; k < len; k++)
			out[k] = fp8_fast(src[k]);
		if (scaled) {
			float s = srt_e8m0_to_f32(w->scales[(n / KB) * ceil_div(K, KB) + k0 / KB]);
			for (size_t k = 0; k < len; k++)
				out[k] *= s;
		}
		break;
	}
	case SRT_WT_FP4: {
		const uint8_t *src = (const uint8_t *)w->data + (n * K + k0) / 2;
		for (size_t k = 0; k < len / 2; k++)
			memcpy(&out[2 * k], fp4_pairs[src[k]], 2 * sizeof(float));
		if (scaled) {
			const uint8_t *sc = w->scales + n * (K / 32) + k0 / 32;
			for (size_t sb = 0; sb < len / 32; sb++) {
				float s = srt_e8m0_to_f32(sc[sb]);
				for (size_t k = 0; k < 32; k++)
					out[sb * 32 + k] *= s;
			}
		}
		break;
	}
	case SRT_WT_FP8_PAIRED: /* gemm_paired hands the kernels row-major copies */
		assert(0);
		break;
	}
}

static void check_args(const struct srt_weight *w, size_t ldx, size_t ldy, size_t n0, size_t n1)
{
	assert(w && w->data && n0 <= n1 && n1 <= w->rows && ldx >= w->cols && ldy >= n1);
	assert((w->type != SRT_WT_FP8 && w->type != SRT_WT_FP8_PAIRED) ||
	       (w->scales && w->cols % KB == 0));
	assert(w->type != SRT_WT_FP8_PAIRED || srt_weight_fp8_pair_ok(w->rows, w->cols));
	assert(w->type != SRT_WT_FP4 || (w->scales && w->cols % 32 == 0));
	(void)w, (void)ldx, (void)ldy, (void)n0, (void)n1;
}

/* ==== kernel selection ======================================================================== */

/* Kernel set in use; -1 until the first call resolves it (cpuid, then SRT_GEMM_ISA). Nothing
 * ISA-specific runs before __builtin_cpu_supports said yes, and there are no constructors. */
static _Atomic int isa_now = -1;

#if defined(SRT_OPS_X86)
#include <cpuid.h>
/* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c"). */
static bool cpu_has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

enum srt_gemm_isa srt_gemm_isa_best(void)
{
#if defined(SRT_OPS_X86)
	__builtin_cpu_init();
	const bool avx2 = __builtin_cpu_supports("avx2") && cpu_has_f16c();
	if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
		return SRT_GEMM_ISA_AVX512;
	if (avx2)
		return SRT_GEMM_ISA_AVX2;
#endif
	return SRT_GEMM_ISA_GENERIC;
}

const char *srt_gemm_isa_name(enum srt_gemm_isa isa)
{
	switch (isa) {
	case SRT_GEMM_ISA_GENERIC:
		return "generic";
	case SRT_GEMM_ISA_AVX2:
		return "avx2";
	case SRT_GEMM_ISA_AVX512:
		return "avx512";
	}
	return "?";
}

enum srt_gemm_isa srt_gemm_isa_current(void)
{
	int isa = atomic_load_explicit(&isa_now, memory_order_relaxed);
	if (isa >= 0)
		return (enum srt_gemm_isa)isa;
	isa = (int)srt_gemm_isa_best();
	const char *env = getenv("SRT_GEMM_ISA");
	if (env) {
		for (int i = SRT_GEMM_ISA_GENERIC; i <= SRT_GEMM_ISA_AVX512; i++)
			if (strcmp(env, srt_gemm_isa_name((enum srt_gemm_isa)i)) == 0 && i < isa)
				isa = i; /* only ever lower than what the CPU has */
	}
	/* racing first calls all compute the same value */
	atomic_store_explicit(&isa_now, isa, memory_order_relaxed);
	return (enum srt_gemm_isa)isa;
}

int srt_gemm_set_isa(enum srt_gemm_isa isa)
{
	if ((int)isa < SRT_GEMM_ISA_GENERIC || isa > srt_gemm_isa_best())
		return SRT_ENOTSUP;
	atomic_store_explicit(&isa_now, (int)isa, memory_order_relaxed);
	return 0;
}

/* Runs the selected SIMD kernel; false when the portable code must run instead. M >= 2 goes
 * to the transposed tile kernels (gemm_tile_*.c) first, except a few rows of bf16 EXACT (a
 * decode step's compressor group), which the row kernels of gemm_avx*.c take: they arrange
 * each weight vector once for up to 4 rows. */
static bool run_isa(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	const bool tiles = m >= 2 && !(!xs && m <= 7 && w->type == SRT_WT_BF16 && w->cols % 128 == 0);
	switch (srt_gemm_isa_current()) {
#if defined(SRT_OPS_X86)
	case SRT_GEMM_ISA_AVX512:
		if (tiles && srt_gemmt_avx512(w, x, xs, m, ldx, y, ldy, n0, n1))
			return true;
		return srt_gemmk_avx512(w, x, xs, m, ldx, y, ldy, n0, n1);
	case SRT_GEMM_ISA_AVX2:
		if (tiles && srt_gemmt_avx2(w, x, xs, m, ldx, y, ldy, n0, n1))
			return true;
		return srt_gemmk_avx2(w, x, xs, m, ldx, y, ldy, n0, n1);
#endif
	default:
		return false;
	}
}

/* ==== FP8 weights in the decode layout (gemm.h) ================================================ */

int srt_weight_fp8_pair_ok(size_t rows, size_t cols)
{
	return rows > 0 && rows % 16 == 0 && cols > 0 && cols % KB == 0 &&
	       cols <= SRT_FP8_PAIRED_KMAX;
}

int srt_weight_fp8_pair_native(void)
{
#if defined(SRT_OPS_X86)
	return srt_gemm_isa_current() == SRT_GEMM_ISA_AVX512 && srt_gemm_bf16dp_usable();
#else
	return 0;
#endif
}

int srt_weight_fp8_layout_option(const char *value, int reference, int *pair, int *must)
{
	if (!value || !strcmp(value, "auto")) {
		*pair = reference && srt_weight_fp8_pair_native();
		*must = 0;
	} else if (!strcmp(value, "paired") || !strcmp(value, "rows")) {
		*pair = *must = !strcmp(value, "paired");
	} else {
		return SRT_EINVAL;
	}
	return 0;
}

/* ix[pos] = srt_fp8_pair_src(pos) (gemm_isa.h): row ix / 32, k ix % 32 of a pair's 32 k. */
static void pair_ix(uint8_t ix[64])
{
	for (unsigned pos = 0; pos < 64; pos++)
		ix[pos] = (uint8_t)srt_fp8_pair_src(pos);
}

int srt_weight_fp8_pair(const struct srt_weight *src, void *dst, struct srt_weight *out)
{
	if (!src || !dst || !out || src->type != SRT_WT_FP8 || !src->data || !src->scales ||
	    !srt_weight_fp8_pair_ok(src->rows, src->cols))
		return SRT_EINVAL;
	const size_t K = src->cols;
	uint8_t ix[64];
	pair_ix(ix);
	for (size_t p = 0; p < src->rows / 2; p++) {
		const uint8_t *a = (const uint8_t *)src->data + 2 * p * K;
		uint8_t *o = (uint8_t *)dst + 2 * p * K;
		for (size_t c = 0; c < K / 32; c++)
			for (unsigned pos = 0; pos < 64; pos++)
				o[64 * c + pos] = a[(ix[pos] / 32) * K + 32 * c + ix[pos] % 32];
	}
	*out = *src;
	out->type = SRT_WT_FP8_PAIRED;
	out->data = dst;
	return 0;
}

int srt_weight_fp8_pair_all(struct srt_weight *const *ws, size_t n, struct srt_fp8_block *b)
{
	const size_t huge = SRT_HUGE_BYTES;
	size_t total = 0;
	b->base = NULL;
	b->len = 0;
	for (size_t i = 0; i < n; i++)
		if (ws[i]->type == SRT_WT_FP8 && srt_weight_fp8_pair_ok(ws[i]->rows, ws[i]->cols))
			total += ws[i]->rows * ws[i]->cols; /* multiples of 16 * 128 bytes */
	if (total == 0)
		return 0;
	total = (total + huge - 1) / huge * huge;
	uint8_t *a;
#if defined(__linux__)
	/* reserved (no MAP_NORESERVE): a copy the machine cannot hold fails here, not later */
	if (!(a = srt_map_huge_aligned(total, 1, 1)))
		return SRT_ENOMEM;
#else
	if (!(a = aligned_alloc(huge, total)))
		return SRT_ENOMEM;
#endif
	size_t off = 0;
	for (size_t i = 0; i < n; i++)
		if (ws[i]->type == SRT_WT_FP8 && srt_weight_fp8_pair_ok(ws[i]->rows, ws[i]->cols)) {
			const struct srt_weight src = *ws[i];
			srt_weight_fp8_pair(&src, a + off, ws[i]);
			off += src.rows * src.cols;
		}
#if defined(__linux__)
	mprotect(a, total, PROT_READ);
#endif
	b->base = a;
	b->len = total;
	return 0;
}

void srt_fp8_block_free(struct srt_fp8_block *b)
{
	if (!b || !b->base)
		return;
#if defined(__linux__)
	munmap(b->base, b->len);
#else
	free(b->base);
#endif
	b->base = NULL;
	b->len = 0;
}

void srt_weight_fp8_unpair(const struct srt_weight *w, size_t n, size_t r, uint8_t *dst)
{
	assert(w->type == SRT_WT_FP8_PAIRED && n % 2 == 0 && r % 2 == 0 && n + r <= w->rows);
	const size_t K = w->cols;
	uint8_t ix[64];
	pair_ix(ix);
	for (size_t p = 0; p < r / 2; p++) {
		const uint8_t *g = (const uint8_t *)w->data + (n + 2 * p) * K;
		uint8_t *o = dst + 2 * p * K;
		for (size_t c = 0; c < K / 32; c++)
			for (unsigned pos = 0; pos < 64; pos++)
				o[(ix[pos] / 32) * K + 32 * c + ix[pos] % 32] = g[64 * c + pos];
	}
}

/* srt_gemm_exact (xs NULL) or srt_gemm_ref on a SRT_WT_FP8_PAIRED weight: the AVX512_BF16
 * kernels read the layout; every other case runs on row-major copies of 16 rows (the group of
 * 16 that holds each row, so the scales of a copy are one block row of the original's). */
static void gemm_paired(const struct srt_weight *w, const float *x, const float *xs, size_t m,
			size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	size_t n = n0;
#if defined(SRT_OPS_X86)
	if (xs && n0 % 2 == 0 && srt_gemm_isa_current() == SRT_GEMM_ISA_AVX512 &&
	    srt_gemm_bf16dp_usable()) {
		if (m == 1 && n1 - n0 >= 8) {
			const size_t nt = (n1 - n0) / 8;
			if (srt_gemv_ref_avx512bf16(w, x, xs, y, n0, nt))
				n = n0 + 8 * nt;
		} else if (m >= 2 && n1 - n0 >= 16) {
			const size_t ne = n0 + (n1 - n0) / 16 * 16;
			if (srt_gemmt_ref_avx512bf16(w, x, xs, m, ldx, y, ldy, n0, ne))
				n = ne;
		}
	}
#endif
	if (n == n1)
		return;
	const size_t K = w->cols, nb = K / KB;
	_Alignas(64) uint8_t buf[16 * SRT_FP8_PAIRED_KMAX];
	for (size_t g = n / 16 * 16; g < n1; g += 16) {
		const struct srt_weight v = {.type = SRT_WT_FP8, .rows = 16, .cols = K, .data = buf,
					     .scales = w->scales + (g / KB) * nb};
		srt_weight_fp8_unpair(w, g, 16, buf);
		const size_t a = n > g ? n - g : 0, e = n1 - g < 16 ? n1 - g : 16;
		if (xs)
			srt_gemm_ref(&v, x, xs, m, ldx, y + g, ldy, a, e);
		else
			srt_gemm_exact(&v, x, m, ldx, y + g, ldy, a, e);
	}
}

/* ==== portable kernels (the definition of every result's bits) ================================ */

void srt_gemm_exact(const struct srt_weight *w, const float *x, size_t m, size_t ldx,
		    float *y, size_t ldy, size_t n0, size_t n1)
{
	check_args(w, ldx, ldy, n0, n1);
	if (w->type == SRT_WT_FP8_PAIRED) {
		gemm_paired(w, x, NULL, m, ldx, y, ldy, n0, n1);
		return;
	}
	if (run_isa(w, x, NULL, m, ldx, y, ldy, n0, n1))
		return;
	const size_t K = w->cols;
	float wb[NT][KB];
	for (size_t n = n0; n < n1; n += NT) {
		size_t nt = n1 - n < NT ? n1 - n : NT;
		for (size_t i = 0; i < m; i++)
			for (size_t t = 0; t < nt; t++)
				y[i * ldy + n + t] = 0.0f;
		for (size_t k0 = 0; k0 < K; k0 += KB) {
			size_t len = K - k0 < KB ? K - k0 : KB;
			for (size_t t = 0; t < nt; t++)
				decode_row(w, n + t, k0, len, true, wb[t]);
			for (size_t i = 0; i < m; i++) {
				const float *xr = x + i * ldx + k0;
				float *yr = y + i * ldy + n;
				for (size_t t = 0; t < nt; t++)
					yr[t] += dot_blk(xr, wb[t], len);
			}
		}
	}
}

void srt_gemm_quant_row(const float *x, size_t k, float *xq, float *xs)
{
	assert(k % KB == 0);
	uint8_t codes[KB];
#if defined(SRT_OPS_X86)
	const enum srt_gemm_isa isa = srt_gemm_isa_current();
#endif
	for (size_t b = 0; b < k / KB; b++) {
#if defined(SRT_OPS_X86)
		if (isa == SRT_GEMM_ISA_AVX512 && srt_gemm_quant_blk_avx512(x + b * KB, xq + b * KB, &xs[b]))
			continue;
		if (isa == SRT_GEMM_ISA_AVX2 && srt_gemm_quant_blk_avx2(x + b * KB, xq + b * KB, &xs[b]))
			continue;
#endif
		srt_quant_act(x + b * KB, KB, codes, &xs[b]);
		for (size_t j = 0; j < KB; j++)
			xq[b * KB + j] = srt_fp8_e4m3_to_f32(codes[j]);
	}
}

void srt_gemm_ref(const struct srt_weight *w, const float *xq, const float *xs, size_t m,
		  size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	check_args(w, ldx, ldy, n0, n1);
	assert(w->cols % KB == 0);
	if (w->type == SRT_WT_FP8_PAIRED) {
		gemm_paired(w, xq, xs, m, ldx, y, ldy, n0, n1);
		return;
	}
	if (run_isa(w, xq, xs, m, ldx, y, ldy, n0, n1))
		return;
	const size_t K = w->cols;
	const size_t nb = K / KB;
	if (w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) {
		/* not quantized by the reference: exact product of the dequantized activations */
		float row[KB], wb[KB];
		for (size_t n = n0; n < n1; n++) {
			for (size_t i = 0; i < m; i++)
				y[i * ldy + n] = 0.0f;
			for (size_t b = 0; b < nb; b++) {
				decode_row(w, n, b * KB, KB, false, wb);
				for (size_t i = 0; i < m; i++) {
					for (size_t j = 0; j < KB; j++)
						row[j] = xq[i * ldx + b * KB + j] * xs[i * nb + b];
					y[i * ldy + n] += dot_blk(row, wb, KB);
				}
			}
		}
		return;
	}
	float wb[NT][KB];
	float sb[NT][KB / 32];
	for (size_t n = n0; n < n1; n += NT) {
		size_t nt = n1 - n < NT ? n1 - n : NT;
		for (size_t i = 0; i < m; i++)
			for (size_t t = 0; t < nt; t++)
				y[i * ldy + n + t] = 0.0f;
		for (size_t b = 0; b < nb; b++) {
			for (size_t t = 0; t < nt; t++) {
				decode_row(w, n + t, b * KB, KB, false, wb[t]);
				if (w->type == SRT_WT_FP8) {
					sb[t][0] = srt_e8m0_to_f32(w->scales[((n + t) / KB) * nb + b]);
				} else {
					const uint8_t *sc = w->scales + (n + t) * (K / 32) + b * (KB / 32);
					for (size_t s = 0; s < KB / 32; s++)
						sb[t][s] = srt_e8m0_to_f32(sc[s]);
				}
			}
			for (size_t i = 0; i < m; i++) {
				const float *xr = xq + i * ldx + b * KB;
				const float sa = xs[i * nb + b];
				float *yr = y + i * ldy + n;
				for (size_t t = 0; t < nt; t++) {
					if (w->type == SRT_WT_FP8) {
						/* tilelang fp8_gemm: C += acc * (sa * sb) */
						yr[t] += dot_blk(xr, wb[t], KB) * (sa * sb[t][0]);
					} else {
						/* tilelang fp4_gemm: per 32 sub-block C += acc * sa * sb */
						for (size_t s = 0; s < KB / 32; s++)
							yr[t] += dot_blk(xr + s * 32, wb[t] + s * 32, 32) *
								 sa * sb[t][s];
					}
				}
			}
		}
	}
}

int srt_gemm(const struct srt_weight *w, const float *x, size_t m, size_t ldx, float *y,
	     size_t ldy, size_t n0, size_t n1, enum srt_gemm_mode mode)
{
	if (mode == SRT_GEMM_EXACT || w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) {
		srt_gemm_exact(w, x, m, ldx, y, ldy, n0, n1);
		return 0;
	}
	const size_t K = w->cols;
	assert(K % KB == 0);
	float *xq = malloc(m * K * sizeof(float));
	float *xs = malloc((m * (K / KB) + 1) * sizeof(float));
	if (!xq || !xs) {
		free(xq);
		free(xs);
		return SRT_ENOMEM;
	}
	for (size_t i = 0; i < m; i++)
		srt_gemm_quant_row(x + i * ldx, K, xq + i * K, xs + i * (K / KB));
	srt_gemm_ref(w, xq, xs, m, K, y, ldy, n0, n1);
	free(xq);
	free(xs);
	return 0;
}

size_t srt_weight_data_bytes(enum srt_wtype type, size_t rows, size_t cols)
{
	switch (type) {
	case SRT_WT_F32:
		return rows * cols * 4;
	case SRT_WT_BF16:
		return rows * cols * 2;
	case SRT_WT_FP8:
	case SRT_WT_FP8_PAIRED:
		return rows * cols;
	case SRT_WT_FP4:
		return rows * cols / 2;
	}
	return 0;
}

size_t srt_weight_scale_bytes(enum srt_wtype type, size_t rows, size_t cols)
{
	switch (type) {
	case SRT_WT_FP8:
	case SRT_WT_FP8_PAIRED:
		return ceil_div(rows, KB) * ceil_div(cols, KB);
	case SRT_WT_FP4:
		return rows * (cols / 32);
	default:
		return 0;
	}
}
