/*
 * core/ops/gemm.h — dense products y = x · Wᵀ in float32 for bf16, f32, FP8 and FP4 weights.
 *
 * Shapes: W is [N][K] (rows = output features, PyTorch's Linear layout), x is [M][K] with row
 * stride ldx, y is [M][N] with row stride ldy. Callers compute a column range [n0, n1) of y, so
 * threads split the output features (or the rows of x) between them; nothing is shared or
 * allocated except in srt_gemm, which allocates the quantized activations.
 *
 * Two modes:
 *  - EXACT: dequantized weights (code value × block scale, exact in float32) times the float32
 *    activations, float32 accumulation.
 *  - REFERENCE: the DeepSeek reference GEMM for FP8/FP4 weights. Each row of x is first
 *    quantized to E4M3 per 128 channels with power-of-two scales (srt_quant_act); then for each
 *    128-wide K block b:  y += (Σ_k xq[k]·wq[k]) · (sa_b · sb_b), where the sum runs over the
 *    code values (no scales) in float32. FP8 weights have one scale per 128x128 block; FP4
 *    weights one per 32 along K, so a 128 block is 4 sub-blocks, each summed alone and added
 *    as (Σ_32 xq·wq) · sa_b · sb_sub, in order. f32 and bf16 weights are not quantized by the
 *    reference (bf16 F.linear): REFERENCE is the same as EXACT for them. The reference then
 *    rounds y to bf16; callers do that where they follow it.
 *
 * Determinism: every y[m][n] is a dot product over K computed in 128-wide blocks, each block
 * by 8 interleaved float32 partial sums combined in a fixed order, blocks added in order. The
 * result does not depend on M, on [n0, n1), on threads, on the kernel set chosen at run time
 * (srt_gemm_isa below) or on the ISA chosen by the compiler (no fused multiply-add
 * contraction in this library), so chunked, one-shot and batched runs are bitwise identical.
 *
 * Speed: on x86-64 with AVX2+F16C or AVX-512F/BW, M = 1 decodes each weight vector right
 * before its product (the weight bytes are read once, nothing is stored), and M > 1 decodes a
 * 128-wide block of a few output features once into an L1 buffer and reuses it for every row
 * of x. EXACT products of 2-7 rows with bf16 weights unpack each weight vector once for up to
 * 4 rows, and on CPUs with AVX512_BF16 run as bf16 dot products when the activations are bf16
 * values in a safe range (same bits). Callers split [n0, n1) between threads at multiples of
 * 8 for full tiles.
 *
 * Preconditions (asserted, programmer errors): K a multiple of 128 for FP8 weights and for
 * REFERENCE mode with quantized weights; K a multiple of 32 for FP4; n0 <= n1 <= N;
 * ldx >= K; ldy >= n1. Weights must hold no NaN codes (the quantizers never write them).
 */
#ifndef SRT_OPS_GEMM_H
#define SRT_OPS_GEMM_H

#include <stddef.h>
#include <stdint.h>

enum srt_wtype {
	SRT_WT_F32 = 0,  /* float [N][K] */
	SRT_WT_BF16 = 1, /* uint16_t bf16 bits [N][K] */
	SRT_WT_FP8 = 2,  /* uint8_t E4M3 codes [N][K]; scales UE8M0 [ceil(N/128)][ceil(K/128)] */
	SRT_WT_FP4 = 3,  /* uint8_t packed E2M1 [N][K/2] (low nibble = even k);
			  * scales UE8M0 [N][K/32] */
	SRT_WT_FP8_PAIRED = 4, /* the E4M3 codes of SRT_WT_FP8 in the decode layout below
				* (srt_weight_fp8_pair makes it); scales as SRT_WT_FP8 */
};

/* A borrowed view of one weight matrix (typically into a memory-mapped checkpoint). */
struct srt_weight {
	enum srt_wtype type;
	size_t rows;           /* N, output features */
	size_t cols;           /* K, input features */
	const void *data;      /* layout per type above */
	const uint8_t *scales; /* UE8M0 block scales for FP8/FP4; NULL for F32/BF16 */
};

enum srt_gemm_mode {
	SRT_GEMM_EXACT = 0,
	SRT_GEMM_REFERENCE = 1,
};

/* EXACT mode: y[m][n] = Σ_k x[m][k] · W[n][k] (dequantized), n in [n0, n1). */
void srt_gemm_exact(const struct srt_weight *w, const float *x, size_t m, size_t ldx,
		    float *y, size_t ldy, size_t n0, size_t n1);

/* Prepare one row of K activations for REFERENCE mode: xq[k] = the E4M3 value of the quantized
 * activation (unscaled, as a float), xs[b] = its power-of-two scale per 128 block (K/128
 * entries). K a multiple of 128. Quantize once, share across threads. */
void srt_gemm_quant_row(const float *x, size_t k, float *xq, float *xs);

/* REFERENCE mode on prepared activations: xq rows of stride ldx, xs rows of K/128 scales
 * (contiguous). For F32/BF16 weights this computes the EXACT product of xq·xs. */
void srt_gemm_ref(const struct srt_weight *w, const float *xq, const float *xs, size_t m,
		  size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* Either mode from float32 activations. REFERENCE with FP8/FP4 weights allocates M·K + M·K/128
 * floats for the quantized activations: returns 0, or SRT_ENOMEM (-12) if that allocation
 * fails (y untouched). EXACT and F32/BF16 weights never allocate and always return 0. */
int srt_gemm(const struct srt_weight *w, const float *x, size_t m, size_t ldx, float *y,
	     size_t ldy, size_t n0, size_t n1, enum srt_gemm_mode mode);

/* Kernel sets. Every set computes the same bits as GENERIC (portable C, the definition of
 * the summation order above) for every type, mode, M and column range; the SIMD sets only
 * change speed. The best set this CPU supports is chosen on first use (cpuid), unless the
 * environment variable SRT_GEMM_ISA=generic|avx2|avx512 asks for a lower one. */
enum srt_gemm_isa {
	SRT_GEMM_ISA_GENERIC = 0,
	SRT_GEMM_ISA_AVX2 = 1,   /* x86-64 AVX2 + F16C */
	SRT_GEMM_ISA_AVX512 = 2, /* x86-64 AVX-512F/BW + AVX2 + F16C */
};

/* The best kernel set this CPU and this build support. Thread-safe. */
enum srt_gemm_isa srt_gemm_isa_best(void);

/* The kernel set srt_gemm* use now. Thread-safe. */
enum srt_gemm_isa srt_gemm_isa_current(void);

/* Use `isa` from now on (for tests and benchmarks). The choice belongs to this copy of
 * srt_ops: plugins link their own copy, so use SRT_GEMM_ISA to steer a whole process. Returns
 * 0, or SRT_ENOTSUP (-95) if this CPU or build lacks it (the current set stays). Safe to call
 * while other threads multiply: each call of srt_gemm* uses one set throughout, and all sets
 * give the same bits. */
int srt_gemm_set_isa(enum srt_gemm_isa isa);

/* "generic", "avx2", "avx512". */
const char *srt_gemm_isa_name(enum srt_gemm_isa isa);

/*
 * FP8 weights in the decode layout (SRT_WT_FP8_PAIRED). Rows go in pairs (2p, 2p + 1), each
 * pair's 2K bytes contiguous, so rows [n, n + r) of even n still start at byte n·K; within
 * a pair, each 32 k (k = 32c ..) is one 64-byte group: byte 16l + 8u + w of group c holds
 * the code of row 2p + l/2 at k = 32c + 16u + 4(l mod 2) + w/2 + (w even ? 8 : 0). That is the
 * order in which the AVX512_BF16 GEMV of the reference profile consumes them (two table
 * lookups and two byte unpacks per 64 bytes give its dot products' words; the row-major
 * layout needs an insert and two more shuffles). The same bits come out of every kernel set,
 * mode, M and column range as from the SRT_WT_FP8 weight it was made from: the kernels that
 * do not read the layout natively get row-major copies of 16 rows at a time (slower; only the
 * reference profile's M = 1 and prefill products on CPUs with AVX512_BF16 + VBMI are native).
 * Only for rows a multiple of 16 and K a multiple of 128 up to SRT_FP8_PAIRED_KMAX.
 */
#define SRT_FP8_PAIRED_KMAX 8192

/* True when an FP8 weight of this shape can be paired. */
int srt_weight_fp8_pair_ok(size_t rows, size_t cols);

/* True when the kernel set in use reads SRT_WT_FP8_PAIRED natively (AVX-512 with AVX512_BF16
 * and VBMI): the layout only pays there; elsewhere every product copies rows back. */
int srt_weight_fp8_pair_native(void);

/* A plugin's option fp8_layout (NULL = "auto"): *pair = whether to pair its FP8 weights,
 * *must = whether to fail without memory for the copy. auto: pair in the reference profile
 * (`reference` nonzero) where srt_weight_fp8_pair_native, must not; paired: pair, must; rows:
 * neither. Returns 0, or SRT_EINVAL (-22) for another value (nothing written). */
int srt_weight_fp8_layout_option(const char *value, int reference, int *pair, int *must);

/* *out = src (SRT_WT_FP8, srt_weight_fp8_pair_ok) in the decode layout, its codes in dst
 * (rows·cols bytes, not overlapping src's; out->scales = src->scales, borrowed). Returns 0,
 * or SRT_EINVAL (-22) for another type or shape (nothing written). */
int srt_weight_fp8_pair(const struct srt_weight *src, void *dst, struct srt_weight *out);

/* Memory that holds paired weights (srt_weight_fp8_pair_all); all zero = none. */
struct srt_fp8_block {
	void *base;
	size_t len;
};

/* Each of ws[0 .. n) that is SRT_WT_FP8 of a shape srt_weight_fp8_pair_ok takes, paired in
 * place of its view, all into one new block b of anonymous memory: 2 MiB aligned and advised
 * onto transparent huge pages before the first write (a decode streams every byte once per
 * token; on 4 KiB pages the layout's gain is lost to TLB misses), read-only once written.
 * Returns 0 (b all zero when no weight qualified), or SRT_ENOMEM (-12) with the weights
 * unchanged. Free with srt_fp8_block_free once no weight points into it. */
int srt_weight_fp8_pair_all(struct srt_weight *const *ws, size_t n, struct srt_fp8_block *b);
void srt_fp8_block_free(struct srt_fp8_block *b);

/* Rows [n, n + r) of a SRT_WT_FP8_PAIRED weight back in row-major order, r·cols bytes at dst
 * (n and r even). */
void srt_weight_fp8_unpair(const struct srt_weight *w, size_t n, size_t r, uint8_t *dst);

/* Bytes of the data and scales arrays of a weight of this type and shape. */
size_t srt_weight_data_bytes(enum srt_wtype type, size_t rows, size_t cols);
size_t srt_weight_scale_bytes(enum srt_wtype type, size_t rows, size_t cols);

#endif /* SRT_OPS_GEMM_H */
