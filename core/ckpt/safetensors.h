/*
 * safetensors checkpoints: a memory-mapped reader (one file, or shards listed by a
 * `model.safetensors.index.json`) and an atomic writer.
 *
 * File format (https://github.com/huggingface/safetensors): 8-byte little-endian header length
 * N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 * ..., "__metadata__": {"key": "string", ...}}, then the data region; offsets are relative to
 * the start of the data region. The index is {"metadata": {...}, "weight_map": {"name":
 * "shard file name", ...}}.
 *
 * Errors: every function that can fail returns 0 or a negative SRT_E* code and writes a message
 * into err (errlen bytes, may be NULL) naming the file, the tensor and the problem (expected vs
 * got). A truncated, corrupt or inconsistent file is SRT_ECORRUPT; a missing file SRT_ENOENT;
 * other I/O SRT_EIO; bad arguments SRT_EINVAL. Tensor data must start on a multiple of its
 * element size in the file (so every srt_tensor.data is naturally aligned); a file that breaks
 * this is SRT_ECORRUPT too.
 *
 * Thread safety: an open checkpoint is read-only and may be used from any number of threads;
 * open/close are not concurrent with use.
 */
#ifndef SRT_CKPT_SAFETENSORS_H
#define SRT_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/model.h>
#include <shadowrt/plugin.h>

#define SRT_CK_HEADER_MAX ((uint64_t)100 << 20) /* header JSON limit (same as safetensors) */
#define SRT_CK_INDEX_NAME "model.safetensors.index.json"
#define SRT_CK_SINGLE_NAME "model.safetensors"

/* Warnings (e.g. extra tensors) go here; NULL means stderr with a "shadowrt: warning:" prefix. */
typedef void (*srt_ck_warn_fn)(void *user, const char *msg);

/* ---- dtypes ---------------------------------------------------------------------------- */

/* Bytes per element of an enum srt_dtype (asserts on an invalid value). */
size_t srt_ck_dtype_size(uint32_t dtype);
/* The safetensors dtype string ("F8_E4M3"); "?" for an invalid value. */
const char *srt_ck_dtype_name(uint32_t dtype);
/* Parse a safetensors dtype string: 0 and *out, or SRT_EINVAL. */
int srt_ck_dtype_parse(const char *s, uint32_t *out);

/* ---- reader ---------------------------------------------------------------------------- */

struct srt_ckpt; /* opaque; an open, validated checkpoint */

/*
 * Open a checkpoint. path is a directory (its model.safetensors.index.json if present, else
 * model.safetensors, else its only *.safetensors file), an index .json file, or one
 * .safetensors file. Every file is mapped read-only and its header validated: length within the
 * file, strict JSON, known dtypes, shapes of at most SRT_TENSOR_MAX_DIMS non-negative dims,
 * data_offsets [begin <= end] inside the data region, non-overlapping, end - begin = numel x
 * dtype size, no duplicate names (also across shards); a sharded index must match its shards
 * exactly. The checkpoint's sampled fingerprint (see srt_ck_fingerprint) is computed here.
 * Headers are read with jansson: strict RFC 8259, valid UTF-8, duplicate keys refused, at most
 * SRT_CK_HEADER_MAX bytes (an index file too). Tensor data need not be aligned to its element
 * size: an unaligned tensor is copied once into aligned memory (logged once per file with the
 * count and bytes; see srt_ck_unaligned_count). On success *out is owned by the caller: release
 * with srt_ck_close().
 */
int srt_ck_open(const char *path, struct srt_ckpt **out, char *err, size_t errlen);
void srt_ck_close(struct srt_ckpt *ck); /* NULL is a no-op; tensor views die with it */

/*
 * Move the checkpoint's files from their read-only mappings into anonymous memory aligned to
 * 2 MiB and advised onto transparent huge pages (MADV_HUGEPAGE), read-only, re-pointing every
 * tensor view (call before handing views out). Streaming the weights then takes one TLB entry
 * per 2 MiB instead of per 4 KiB, which a decode step, reading every weight once, pays for
 * (more under a hypervisor's nested page walks). Done only when the kernel allows MADV_HUGEPAGE
 * and the files fit in 80 % of MemAvailable (the page cache they come from stays reclaimable);
 * otherwise, or when memory runs out midway, the files (or the rest) stay mapped. Returns the
 * number of files moved; note says what was done and why.
 */
int srt_ck_to_hugepages(struct srt_ckpt *ck, char *note, size_t note_len);
/* The kernel's transparent huge page mode allows MADV_HUGEPAGE ("always" or "madvise" in
 * /sys/kernel/mm/transparent_hugepage/enabled). */
int srt_ck_thp_usable(void);

size_t srt_ck_count(const struct srt_ckpt *ck);
/* Tensors in name order; i < srt_ck_count(). The view and its data live until close. */
const struct srt_tensor *srt_ck_tensor(const struct srt_ckpt *ck, size_t i);
/* By name: the view, or NULL when absent. O(1). */
const struct srt_tensor *srt_ck_find(const struct srt_ckpt *ck, const char *name);
/* The file (path as opened) holding tensor t of this checkpoint, for messages. */
const char *srt_ck_tensor_file(const struct srt_ckpt *ck, const struct srt_tensor *t);
size_t srt_ck_file_count(const struct srt_ckpt *ck);
/* Value of a string key of a file's __metadata__ (file 0 for single files), or NULL. */
const char *srt_ck_metadata(const struct srt_ckpt *ck, size_t file, const char *key);
/* Tensors whose data was not aligned to the element size and is read from an aligned copy. */
size_t srt_ck_unaligned_count(const struct srt_ckpt *ck);
/*
 * Validate one safetensors file image held in memory (size bytes at data, borrowed) exactly as
 * srt_ck_open validates a file: 0, or SRT_ECORRUPT / SRT_ENOMEM with a message naming `name`.
 * For tools and the fuzz targets.
 */
int srt_ck_check_image(const void *data, size_t size, const char *name, char *err,
		       size_t errlen);
/* Sum of all tensors' bytes. */
uint64_t srt_ck_total_bytes(const struct srt_ckpt *ck);

/*
 * Fingerprint, a string "ck1s-<32 hex>" fixed at open: SHA-256 (first 128 bits) over every
 * tensor in name order: its name, dtype, shape and a data sample (all bytes of tensors up to
 * 4 KiB; else 16 evenly spaced 256-byte windows including the first and last bytes). It does not
 * depend on shard layout, file names or tensor order inside files. Any retrained, fine-tuned,
 * re-quantised or reshaped checkpoint changes it; an edit confined to unsampled bytes does not:
 * use srt_ck_fingerprint_full() ("ck1f-..." over every byte; reads the whole checkpoint) when
 * that matters. The two kinds never compare equal. Cache keys use neither: the cache identity
 * takes the XXH3-128 of every weight byte, remembered in a sidecar (ckpt/fingerprint.h).
 */
const char *srt_ck_fingerprint(const struct srt_ckpt *ck);
int srt_ck_fingerprint_full(const struct srt_ckpt *ck, char out[48], char *err, size_t errlen);

/*
 * The ABI view for plugins: get() looks tensors up by name (SRT_ENOENT when absent), and
 * fingerprint is srt_ck_fingerprint(). Borrowed: valid while ck is open.
 */
void srt_ck_weights(const struct srt_ckpt *ck, struct srt_weights *out);

/* ---- writer ---------------------------------------------------------------------------- */

/* One tensor to write. data (nbytes = numel x dtype size) is used when no fill is given. */
struct srt_ck_wtensor {
	const char *name;
	uint32_t dtype;
	uint32_t ndim;
	int64_t shape[SRT_TENSOR_MAX_DIMS];
	const void *data;
};

/*
 * Produce tensor `index`'s bytes into buf (nbytes, already sized for it). Called once per
 * tensor, in file order (not necessarily the list's order). Return 0 or a negative SRT_E* code
 * with a message in err.
 */
typedef int (*srt_ck_fill_fn)(void *user, size_t index, void *buf, size_t nbytes, char *err,
			      size_t errlen);
/* Progress after each tensor: bytes written so far of total. */
typedef void (*srt_ck_progress_fn)(void *user, uint64_t done, uint64_t total);

struct srt_ck_write_opts {
	/* Shard size target in bytes: 0 = always one file. When everything fits in one shard a
	 * single model.safetensors is written (no index), as Hugging Face does. A tensor larger
	 * than the target gets a shard of its own. */
	uint64_t shard_bytes;
	/* __metadata__ string pairs for every file, n_meta of each; may be NULL / 0. The writer
	 * always adds "format": "pt" unless given. */
	const char *const *meta_keys;
	const char *const *meta_values;
	size_t n_meta;
	srt_ck_fill_fn fill; /* NULL: use srt_ck_wtensor.data */
	srt_ck_progress_fn progress;
	void *user;
};

/*
 * Write tensors to the existing directory dir as model.safetensors, or as
 * model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json. Each file is
 * written to a temporary name in dir and fsynced; only when all are complete are they renamed
 * into place, the index last, so no reader ever sees a half-written file and an index never
 * names a shard that is not complete (a crash between renames can leave the previous index
 * with some shards already replaced when the shard count is unchanged). Writing one file
 * removes a stale index that would shadow it. Temporary files are removed on failure. The header is padded with spaces so the
 * data region starts 8-byte aligned; inside a file tensors are laid out contiguously by
 * decreasing element size, so every tensor is aligned to its element size and the file stays
 * readable by the reference safetensors library. Names must be unique and non-empty.
 * *n_files_out (may be NULL) gets the number of .safetensors files written.
 */
int srt_ck_write(const char *dir, const struct srt_ck_wtensor *tensors, size_t n,
		 const struct srt_ck_write_opts *opts, size_t *n_files_out, char *err, size_t errlen);

/*
 * Remove what writers that were killed left in dir: entries named "<stem>.tmp.<pid>" (stem
 * NULL: any hidden ".<name>.tmp.<pid>") whose process no longer exists; a directory loses its
 * plain files and is removed. Entries of live processes (and this one) stay. srt_ck_write calls
 * it on its output directory; callers that write "<stem>.tmp.<pid>" directories call it on
 * their parent. Returns the number removed (logged at info level).
 */
int srt_ck_remove_stale_tmp(const char *dir, const char *stem);

/* mkdir -p: create path and its missing parents (mode 0755). 0, or -1 with errno set
 * (ENOTDIR when path exists and is not a directory). */
int srt_ck_mkdir_p(const char *path);

/* Bytes a tensor occupies: 0 and *out, or SRT_EINVAL on a negative dim or overflow. */
int srt_ck_tensor_bytes(uint32_t dtype, uint32_t ndim, const int64_t *shape, uint64_t *out);

#endif
