/*
 * core/ops/gemm_avx2.c — GEMM kernels for x86-64 AVX2 + F16C (compiled with -mavx2 -mf16c,
 * never -mfma). Called only after gemm.c saw both features in cpuid.
 *
 * Decoders, 8 weights per vector:
 *  - bf16: zero-extend to 32 bits, shift into the high half.
 *  - E4M3: the code's 7 exponent/mantissa bits placed in an IEEE half (bias 15 instead of 7,
 *    sign on bit 15), converted by F16C and multiplied by 2^8: exact for every code, E4M3
 *    subnormals included (they are half subnormals, which the conversion makes normal, so no
 *    float32 subnormal ever reaches the multiplier), NaN codes give ±480 as fp8_fast does.
 *  - E2M1: the 8 nibbles of 4 bytes shifted into 8 lanes, the magnitude looked up in an
 *    8-entry float table by vpermps (which reads the low 3 bits), the sign bit or-ed in.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm.h"

static inline __m256 fp8x8(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
	__m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
				  _mm_set1_epi16((short)0xBF80));
	return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

static inline __m256 fp4x8(const uint8_t *p)
{
	int32_t u;
	memcpy(&u, p, sizeof u);
	const __m256i v = _mm256_set1_epi32(u);
	const __m256i idx = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
	const __m256i sgn = _mm256_and_si256(
		_mm256_sllv_epi32(v, _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0)),
		_mm256_set1_epi32((int32_t)0x80000000u));
	const __m256 mag = _mm256_permutevar8x32_ps(
		_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), idx);
	return _mm256_or_ps(mag, _mm256_castsi256_ps(sgn));
}

static inline void dec_bf16(const uint16_t *src, size_t len, float *out)
{
	for (size_t k = 0; k < len; k += 8) {
		__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + k)));
		_mm256_store_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
	}
}

static inline void dec_fp8(const uint8_t *src, size_t len, bool scaled, float s, float *out)
{
	const __m256 vs = _mm256_set1_ps(s);
	for (size_t k = 0; k < len; k += 8) {
		__m256 v = fp8x8(src + k);
		if (scaled)
			v = _mm256_mul_ps(v, vs);
		_mm256_store_ps(out + k, v);
	}
}

static inline void dec_fp4(const uint8_t *src, size_t len, const uint8_t *sc, float *out)
{
	for (size_t k0 = 0; k0 < len; k0 += 32) {
		const __m256 vs = _mm256_set1_ps(sc ? srt_e8m0_to_f32(sc[k0 / 32]) : 1.0f);
		for (size_t k = k0; k < k0 + 32; k += 8) {
			__m256 v = fp4x8(src + k / 2);
			if (sc)
				v = _mm256_mul_ps(v, vs);
			_mm256_store_ps(out + k, v);
		}
	}
}

#define GEMMK_NAME srt_gemmk_avx2
#include "ops/gemm_kern.h"
