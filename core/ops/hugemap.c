/* 2 MiB aligned anonymous mappings (hugemap.h). */
#include "ops/hugemap.h"

#include <stdint.h>

#if defined(__linux__)
#include <sys/mman.h>

void *srt_map_huge_aligned(size_t len, int huge, int reserve)
{
	if (len == 0 || len > SIZE_MAX - SRT_HUGE_BYTES)
		return NULL;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (reserve ? 0 : MAP_NORESERVE);
	uint8_t *m = mmap(NULL, len + SRT_HUGE_BYTES, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uint8_t *a = (uint8_t *)(((uintptr_t)m + SRT_HUGE_BYTES - 1) & ~(uintptr_t)(SRT_HUGE_BYTES - 1));
	if (a > m) /* the unaligned head and the tail go back */
		munmap(m, (size_t)(a - m));
	if (m + len + SRT_HUGE_BYTES > a + len)
		munmap(a + len, (size_t)(m + len + SRT_HUGE_BYTES - (a + len)));
#ifdef MADV_HUGEPAGE
	if (huge)
		madvise(a, len, MADV_HUGEPAGE);
#else
	(void)huge;
#endif
	return a;
}
#else
void *srt_map_huge_aligned(size_t len, int huge, int reserve)
{
	(void)len, (void)huge, (void)reserve;
	return NULL;
}
#endif
