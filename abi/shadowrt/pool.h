/*
 * shadowrt plugin ABI v1 — cache pools (ShadowRadix) and the batch view handed to kernels.
 *
 * The core never stores KV itself. It stores virtual token coordinates: a sequence's tokens sit
 * on virtual pages of P tokens (srt_plugin_args.page_tokens). Each attention plugin declares the
 * physical pools it needs; for every pool the core keeps a shadow map from virtual page to a
 * physical page of that pool, and hands the kernel, per sequence and pool, a page table.
 *
 * Physical page layout (owned by the plugin, opaque to the core): a page of a pool with ratio r
 * holds P/r entries for each of the pool's n_layers layers, laid out as
 *     page + (layer_slot * (P / r) + entry_in_page) * entry_bytes
 * where layer_slot is the index of the model layer in the pool's `layers` list. So a page is
 * n_layers * (P / r) * entry_bytes bytes, and token t maps to entry t / r, on virtual page
 * (t / r) / (P / r) = t / P.
 *
 * Pool names: unique within the model (the cache, the tier keys and the reports use them), at
 * most SRT_POOL_NAME_MAX - 1 bytes, by convention "<plugin>.<what>": the built-ins declare
 * swa.window, csa.window, csa.c4_kv, csa.c4_index, csa.c4_state, hca.window, hca.c128_kv,
 * hca.c128_state. A pool's bytes are opaque to the core; it copies whole pages between tiers
 * and frees pools independently, so an entry must be complete in itself (no pointers).
 * The page size P is a multiple of every pool ratio, so a ratio-r block never straddles pages.
 * Pages are zeroed when first allocated; writes must stay inside the pages that cover the
 * call's tokens (check-plugin fences each page with guard pages).
 */
#ifndef SHADOWRT_POOL_H
#define SHADOWRT_POOL_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SRT_POOL_NAME_MAX 32
#define SRT_MAX_POOLS 16 /* pools one plugin instance may declare */

/*
 * Retention: which entries of a cached prefix are needed to resume a request right after it.
 *  ALL:  every entry of [0, t) (compressed KV, indexer keys).
 *  TAIL: only entries covering the last `tail_tokens` tokens before t (sliding-window KV:
 *        ratio 1, TAIL 128; one-per-page compressor carry state: ratio P, TAIL 1).
 */
enum srt_retention { SRT_RETAIN_ALL = 0, SRT_RETAIN_TAIL = 1 };

/* ratio value meaning "one entry per page" (the core substitutes P). */
#define SRT_RATIO_PAGE 0u

struct srt_pool_decl {
	uint32_t struct_size;
	char name[SRT_POOL_NAME_MAX]; /* unique within the model, e.g. "swa_kv", "c4_kv" */
	uint32_t ratio;               /* tokens per entry; SRT_RATIO_PAGE for one per page */
	uint32_t retention;           /* enum srt_retention */
	uint32_t tail_tokens;         /* w, for SRT_RETAIN_TAIL */
	uint64_t entry_bytes;         /* bytes of one entry of one layer */
	uint32_t n_layers;            /* layers covered; layers[] lists the model layer indices */
	const int32_t *layers;        /* borrowed from the plugin instance; valid until destroy */
};

/*
 * One sequence's view of one pool: virtual page v -> pointer to its physical page, or NULL
 * where the page is absent (never allocated, released out of the window, or not loaded).
 * Pages [0, n_pages) cover positions [0, n_pages * P). Writes go to pages the core allocated
 * before the call (every page that covers a token of the call).
 */
struct srt_page_table {
	uint32_t n_pages;
	uint32_t mem;       /* enum srt_mem of the page pointers */
	void *const *pages; /* [n_pages] */
};

/*
 * One sequence inside a batched call. Its tokens are positions [pos, pos + n_tokens), and
 * [0, pos) is in the cache (computed earlier or restored from a prefix hit).
 */
struct srt_seq_cached;

struct srt_seq_view {
	uint64_t seq_id;
	int64_t pos;
	int32_t n_tokens;
	int32_t first_row;                  /* row of its first token in the batch activations */
	const int32_t *token_ids;           /* [n_tokens] */
	const struct srt_page_table *pools; /* [n_pools] in the plugin's declaration order */
	uint32_t n_pools;
};

/*
 * A batch: activations are [n_rows][width] row-major, sequences one after another
 * (seqs[i].first_row). Prefill chunks and decode steps use the same shape.
 */
struct srt_batch {
	uint32_t struct_size;
	uint32_t n_seqs;
	const struct srt_seq_view *seqs;
	int32_t n_rows;
	uint32_t mem; /* enum srt_mem of the activation buffers */
	/* ABI 1.1 (read it only when struct_size > SRT_BATCH_V1_SIZE): [n_seqs] per-sequence
	 * facts about entries that already exist (an entry may be NULL), or NULL (nothing is
	 * read-only; no remat). Pointers, so that srt_seq_cached can grow like every struct. */
	const struct srt_seq_cached *const *cached;
};
#define SRT_BATCH_V1_SIZE (offsetof(struct srt_batch, mem) + sizeof(uint32_t))

/*
 * ABI 1.1. What a sequence's cache already holds, for a call that must read it and never
 * write it: a prefix resumed by window rematerialization (the executor recomputes the last
 * layers' windows and carry state of a cached prefix whose compressed entries are cached).
 *
 * ro_entries[p] (p in the plugin's declaration order): entries [0, ro_entries[p]) of pool p
 * exist and are read-only. A plugin must not write them, even with the same bytes (they are
 * shared with other sequences); it computes everything else as usual. NULL = none.
 *
 * SRT_SEQ_REMAT: the call recomputes rows [pos, pos + n_tokens) of a sequence whose window
 * entries and carry state before `pos` are NOT available (pos > 0). The plugin starts the
 * compressor carry state empty at pos (kv = 0, score = -inf), writes window KV and carry state
 * of every row as usual, and skips the attention of the rows whose window reaches before pos
 * (positions < pos + window - 1): the caller discards those rows' outputs (their output rows
 * are unspecified). The window and carry pages of the call are scratch or pages being rebuilt.
 * With batch-invariant kernels, window KV and carry state of every row whose inputs are
 * exact come out bitwise equal to a computation from position 0.
 *
 * A plugin that does not know this struct (ABI 1.0) is never given a read-only entry or a
 * remat call: the executor checks the descriptor's abi_minor first.
 */
struct srt_seq_cached {
	uint32_t struct_size;
	uint32_t flags;               /* SRT_SEQ_* */
	const uint64_t *ro_entries;   /* [n_pools] or NULL */
};
#define SRT_SEQ_REMAT 1u

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_POOL_H */
