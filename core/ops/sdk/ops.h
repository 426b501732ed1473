/*
 * <shadowrt/ops.h> — the shadowrt numerics SDK (libshadowrt-ops.so.1, pkg-config shadowrt-ops).
 *
 * The ops the built-in CPU plugins compute with, compiled from the same sources with the same
 * flags, so an out-of-tree plugin that calls them gets bit for bit what the built-ins get:
 *
 *   <shadowrt/ops/fp.h>        bf16, FP8 E4M3, UE8M0 scales, FP4 E2M1 (codecs, rounding)
 *   <shadowrt/ops/quant.h>     quantizers and fake-quant: activations (E4M3 per 128, pow2
 *                              scales), KV (srt_quant_kv_fake), FP4 (per 32), weights
 *   <shadowrt/ops/rope.h>      RoPE with YaRN (frequencies, correction range, apply)
 *   <shadowrt/ops/norm.h>      RMSNorm (no weight, f32 weight, bf16 weight)
 *   <shadowrt/ops/hadamard.h>  in-place fast Walsh-Hadamard transform
 *   <shadowrt/ops/gemm.h>      y = x·Wᵀ for f32/bf16/FP8/FP4 weights, EXACT and REFERENCE
 *   <shadowrt/ops/act.h>       sigmoid, SiLU, softplus (inline)
 *
 * Each header states every function's contract (shapes, rounding, preconditions). Common
 * rules:
 *   - Thread safety: every function is reentrant and keeps no state, except the process-wide
 *     kernel choice of srt_gemm_set_isa (set it before threads start, or never).
 *   - Memory: nothing is allocated except by srt_gemm (its quantized activations, freed
 *     before it returns) and srt_weight_fp8_pair_all (the block it returns, freed by
 *     srt_fp8_block_free); every pointer argument is borrowed for the call.
 *   - Errors: preconditions (sizes that are not multiples of a block, NaN codes) are asserted
 *     programmer errors; srt_gemm returns SRT_ENOMEM when its scratch allocation fails.
 *   - Determinism: results depend neither on the number of rows, column ranges and threads
 *     nor on the CPU's ISA (no FMA contraction), which is what makes chunked, batched and
 *     threaded forwards bitwise equal.
 *
 * Profiles (srt_plugin_args.profile):
 *   SRT_PROFILE_REFERENCE  follow the DeepSeek reference: round activations with
 *                          srt_round_bf16_n where the reference stores bf16, GEMMs of FP8/FP4
 *                          weights with SRT_GEMM_REFERENCE, KV through srt_quant_kv_fake;
 *   SRT_PROFILE_F32        no rounding and no fake-quant: SRT_GEMM_EXACT everywhere.
 *
 * Versioning: the soname is libshadowrt-ops.so.1; symbols carry the version node
 * SHADOWRT_OPS_1 (1.0) or SHADOWRT_OPS_1.1 (1.1: srt_weight_fp8_pair*). A changed result of an existing function is a new major version (a plugin
 * that compares against the built-ins must know); new functions come as new minor nodes.
 */
#ifndef SHADOWRT_OPS_H
#define SHADOWRT_OPS_H

#include "ops/act.h"
#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/hadamard.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/rope.h"

#define SRT_OPS_VERSION_MAJOR 1
#define SRT_OPS_VERSION_MINOR 1

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The library's version as major * 100 + minor (101 for 1.1), to check at run time that the
 * loaded library is at least the one a plugin was built against:
 *     srt_ops_version() >= SRT_OPS_VERSION_MAJOR * 100 + SRT_OPS_VERSION_MINOR
 */
int srt_ops_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_OPS_H */
