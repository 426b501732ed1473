/*
 * Built by install_test.sh against the INSTALLED SDK only (pkg-config shadowrt-ops): every
 * public header compiles on its own in C11 with -Wall -Wextra -Werror, the library links,
 * reports its version, and one FP8 REFERENCE GEMM runs. Prints "sdk ok <version> <y0 bits>".
 */
#include <stdio.h>
#include <string.h>

#include <shadowrt/ops.h>
#include <shadowrt/plugin.h>

int main(void)
{
	enum { N = 8, K = 128 };
	float w[N * K], x[K], y[N];
	uint8_t codes[N * K], scales[1];
	for (int i = 0; i < N * K; i++)
		w[i] = (float)((i * 37) % 23 - 11) / 16.0f;
	for (int k = 0; k < K; k++)
		x[k] = (float)((k * 13) % 17 - 8) / 8.0f;
	srt_quant_weight_fp8(w, N, K, codes, scales);
	struct srt_weight wt = {SRT_WT_FP8, N, K, codes, scales};
	if (srt_gemm(&wt, x, 1, K, y, N, 0, N, SRT_GEMM_REFERENCE) != 0)
		return 1;
	if (srt_ops_version() < SRT_OPS_VERSION_MAJOR * 100 + SRT_OPS_VERSION_MINOR)
		return 2;
	uint32_t bits;
	memcpy(&bits, &y[0], sizeof(bits));
	printf("sdk ok %d %08x\n", srt_ops_version(), (unsigned)bits);
	return 0;
}
