/*
 * L1 page slabs: the engine's allocator of KV cache pages (srt_rdx_allocator) when the caller
 * gives none.
 *
 * A decode step reads its keys from many pages: the window of each layer, the indexer's keys
 * of the whole context, the compressed entries the indexer selects (each on a page of its
 * own) and every HCA entry. From the C library's heap each page is a run of 4 KiB pages, so
 * at long context nearly every key costs a TLB miss, and under a hypervisor a miss is a
 * nested page walk whose tables are as cold as the keys: the key's prefetch waits on it. Here
 * pages of one size come from slabs of at least 2 MiB, aligned to 2 MiB and (huge = 1)
 * advised onto transparent huge pages, so that one TLB entry covers a slab.
 *
 * Pages are zeroed and 64-byte aligned (as the radix cache asks of an allocator). Each size
 * has its own slabs; a slab is mapped when none of that size has a free page, its pages
 * handed out in address order (only touched memory becomes resident), a freed page goes
 * back to its slab, and a slab whose pages are all free is unmapped unless it is the only
 * slab of its size with room left (one spare per size, so that an alloc/free cycle at a
 * slab boundary does not map and unmap each time). Thread-safe (a mutex; the radix cache
 * calls from one thread anyway). mmap failing gives SRT_ENOMEM.
 */
#ifndef SRT_EXEC_L1PAGES_H
#define SRT_EXEC_L1PAGES_H

#include <stddef.h>
#include <stdint.h>

struct srt_rdx_allocator;
struct srt_l1_pages;

struct srt_l1_pages_stats {
	size_t mapped;  /* bytes of slabs mapped */
	size_t slabs;   /* slabs mapped */
	size_t in_use;  /* pages handed out and not freed */
	size_t classes; /* page sizes seen */
};

/* huge: advise the slabs onto transparent huge pages (MADV_HUGEPAGE). NULL when out of
 * memory. */
struct srt_l1_pages *srt_l1_pages_create(int huge);
/* Unmaps every slab (pages still handed out die with it). NULL is a no-op. */
void srt_l1_pages_destroy(struct srt_l1_pages *lp);
/* The allocator to hand to the radix cache; valid while lp lives. */
const struct srt_rdx_allocator *srt_l1_pages_allocator(struct srt_l1_pages *lp);
void srt_l1_pages_stats(struct srt_l1_pages *lp, struct srt_l1_pages_stats *st);

#endif
