/* Internal helpers of srt_attn_common (not part of the plugins' interface). */
#ifndef SRT_ATTN_UTIL_H
#define SRT_ATTN_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* printf into why[why_len] (no-op when why is NULL). */
void srt_attn_why(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Bytes of one compressor ring in the state entry (see attn.h). */
uint64_t srt_attn_ring_bytes(const struct srt_attn *a, int ratio, int width);
/* The pending rows of a state entry (see attn.h): their offset in the entry (after the
 * rings) and their bytes (a header of two int64, then SRT_ATTN_CG - 1 rows of hidden_size
 * floats). */
uint64_t srt_attn_pend_off(const struct srt_attn *a);
uint64_t srt_attn_pend_bytes(const struct srt_attn *a);

#endif
