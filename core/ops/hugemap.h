/*
 * Anonymous memory aligned to 2 MiB (one transparent huge page), the mapping shared by the
 * weight copies (srt_ck_to_hugepages, srt_weight_fp8_pair_all) and the engine's L1 page slabs
 * (exec/l1pages.h). Linux; internal to the core (not in the ops SDK).
 */
#ifndef SRT_OPS_HUGEMAP_H
#define SRT_OPS_HUGEMAP_H

#include <stddef.h>

#define SRT_HUGE_BYTES ((size_t)2 << 20)

/* len bytes (any size; a multiple of 2 MiB uses its huge pages whole) of zeroed read-write
 * memory at a 2 MiB boundary, the unaligned head and tail of the mapping given back; huge:
 * advised onto transparent huge pages (MADV_HUGEPAGE, a hint; refused, 4 KiB pages), before
 * any page is touched; reserve = 0 maps with MAP_NORESERVE (no commit charge up front).
 * NULL when the mapping fails. Release with munmap(p, len). */
void *srt_map_huge_aligned(size_t len, int huge, int reserve);

#endif
