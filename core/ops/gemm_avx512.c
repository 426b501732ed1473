/*
 * core/ops/gemm_avx512.c — GEMM kernels for x86-64 AVX-512F/BW (+ AVX2, F16C; compiled with
 * -mavx512f -mavx512bw -mavx2 -mf16c, never -mfma). Called only after gemm.c saw all of them
 * in cpuid.
 *
 * Same driver as gemm_avx2.c (gemm_kern.h: 8-lane accumulation, because the summation order
 * is 8 lanes), with 16-wide decoders:
 *  - E4M3: 16 codes placed as IEEE halves and converted by one vcvtph2ps (see gemm_avx2.c).
 *  - E2M1: 16 nibbles spread to 16 lanes, each looked up in a 16-entry float table (sign
 *    included) by one vpermps.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm.h"

static inline __m512 fp8x16(const uint8_t *p)
{
	__m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
	__m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
				     _mm256_set1_epi16((short)0xBF80));
	return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
}

static inline __m512 fp4x16(const uint8_t *p)
{
	const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
	const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
	const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
	const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
	const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
					  -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
	return _mm512_permutexvar_ps(idx, tab);
}

static inline void dec_bf16(const uint16_t *src, size_t len, float *out)
{
	size_t k = 0;
	for (; k + 16 <= len; k += 16) {
		__m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(src + k)));
		_mm512_store_ps(out + k, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
	}
	for (; k < len; k += 8) {
		__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + k)));
		_mm256_store_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
	}
}

static inline void dec_fp8(const uint8_t *src, size_t len, bool scaled, float s, float *out)
{
	const __m512 vs = _mm512_set1_ps(s);
	for (size_t k = 0; k < len; k += 16) {
		__m512 v = fp8x16(src + k);
		if (scaled)
			v = _mm512_mul_ps(v, vs);
		_mm512_store_ps(out + k, v);
	}
}

static inline void dec_fp4(const uint8_t *src, size_t len, const uint8_t *sc, float *out)
{
	for (size_t k0 = 0; k0 < len; k0 += 32) {
		const __m512 vs = _mm512_set1_ps(sc ? srt_e8m0_to_f32(sc[k0 / 32]) : 1.0f);
		for (size_t k = k0; k < k0 + 32; k += 16) {
			__m512 v = fp4x16(src + k / 2);
			if (sc)
				v = _mm512_mul_ps(v, vs);
			_mm512_store_ps(out + k, v);
		}
	}
}

#define GEMMK_NAME srt_gemmk_avx512
#include "ops/gemm_kern.h"
