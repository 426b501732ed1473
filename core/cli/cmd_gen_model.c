/*
 * `shadowrt gen-model`: write a deterministic synthetic DeepSeek-V4 checkpoint of any preset,
 * or (--check) load, validate and summarise a checkpoint directory.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/dsv4_tensors.h"
#include "ckpt/safetensors.h"
#include "ckpt/synth.h"
#include "commands.h"
#include "config/model_config.h"
#include "tok/tok.h"

#define BIG_BYTES ((uint64_t)8 << 30) /* above this, --force is required */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt gen-model PRESET OUT_DIR [--seed N] [--shard-bytes N] [--force]\n"
		"       shadowrt gen-model --check DIR [--config PRESET|PATH] [--full-hash]\n"
		"\n"
		"Writes a deterministic synthetic DeepSeek-V4 checkpoint: OUT_DIR/config.json and\n"
		"safetensors with the real tensor names, shapes and dtypes (FP8 E4M3 weights with UE8M0\n"
		"128x128 block scales, packed FP4 routed experts with UE8M0 per-32 scales, bf16 norms,\n"
		"router and compressors, fp32 mHC, attention sinks, ape and tid2eid). The same preset and\n"
		"seed always give the same bytes. PRESET is an embedded preset (tiny, small, tiny-pro,\n"
		"tiny-chat, deepseek-v4-flash, deepseek-v4-pro) or a config file / checkpoint directory.\n"
		"Presets with DeepSeek-V4's vocabulary (129,280 ids: tiny-chat, flash, pro) also get\n"
		"the real tokenizer.json and tokenizer_config.json next to the weights, as a real\n"
		"checkpoint has them; the others work on token ids.\n"
		"\n"
		"With --check, opens DIR, validates every file and every tensor against the model config\n"
		"(DIR/config.json unless --config) and prints tensor count, bytes by dtype and the\n"
		"sampled fingerprint (cache keys use a hash of every weight byte instead).\n"
		"\n"
		"options:\n"
		"  --seed N          random seed (default %llu)\n"
		"  --shard-bytes N   shard size target, suffixes K M G (binary); 0 = one file\n"
		"                    (default 4G; a checkpoint that fits is one model.safetensors)\n"
		"  --force           allow checkpoints over 8 GiB (Flash and Pro are hundreds of GB)\n"
		"  --config X        --check: the model config to validate against\n"
		"  --full-hash       --check: also hash every byte (reads the whole checkpoint)\n"
		"  -h, --help        this help\n",
		(unsigned long long)SRT_CK_SYNTH_SEED);
}

static int parse_u64(const char *s, int allow_suffix, uint64_t *out)
{
	if (!*s || *s == '-')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	unsigned shift = 0;
	if (allow_suffix && *end) {
		switch (*end) {
		case 'K': case 'k': shift = 10; break;
		case 'M': case 'm': shift = 20; break;
		case 'G': case 'g': shift = 30; break;
		default: return -1;
		}
		end++;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static void human(char *buf, size_t len, uint64_t b)
{
	if (b >= ((uint64_t)1 << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (double)((uint64_t)1 << 30));
	else if (b >= ((uint64_t)1 << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (double)((uint64_t)1 << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
}

struct progress {
	int last_pct;
	int tty;
};

static void on_progress(void *user, uint64_t done, uint64_t total)
{
	struct progress *p = user;
	int pct = total ? (int)(done * 100 / total) : 100;
	if (pct == p->last_pct)
		return;
	p->last_pct = pct;
	char d[32], t[32];
	human(d, sizeof(d), done);
	human(t, sizeof(t), total);
	fprintf(stderr, "%sgen-model: %3d%%  %s of %s%s", p->tty ? "\r" : "", pct, d, t,
		p->tty ? (pct == 100 ? "\n" : "") : "\n");
	fflush(stderr);
}

static int check_dir(const char *dir, const char *config, int full_hash)
{
	char err[512];
	struct srt_ckpt *ck;
	int rc = srt_ck_open(dir, &ck, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "shadowrt gen-model --check: %s\n", err);
		return 1;
	}
	struct srt_model_config cfg;
	/* DIR/config.json by default. A bare name ("tiny") would be read as an embedded preset
	 * by srt_model_config_load, so give it as a path. */
	char dir_path[4096];
	snprintf(dir_path, sizeof(dir_path), "%s%s", strchr(dir, '/') ? "" : "./", dir);
	const char *cfg_src = config ? config : dir_path;
	if ((rc = srt_model_config_load(cfg_src, &cfg, err, sizeof(err)))) {
		fprintf(stderr, "shadowrt gen-model --check: model config: %s\n", err);
		srt_ck_close(ck);
		return 1;
	}
	uint64_t by_dtype[SRT_DT_COUNT] = {0};
	size_t count_dtype[SRT_DT_COUNT] = {0};
	for (size_t i = 0; i < srt_ck_count(ck); i++) {
		const struct srt_tensor *t = srt_ck_tensor(ck, i);
		by_dtype[t->dtype] += t->nbytes;
		count_dtype[t->dtype]++;
	}
	char h[32];
	human(h, sizeof(h), srt_ck_total_bytes(ck));
	printf("checkpoint   %s\n", dir);
	printf("files        %zu\n", srt_ck_file_count(ck));
	printf("tensors      %zu\n", srt_ck_count(ck));
	printf("bytes        %" PRIu64 " (%s)\n", srt_ck_total_bytes(ck), h);
	for (uint32_t d = 0; d < SRT_DT_COUNT; d++) {
		if (!count_dtype[d])
			continue;
		human(h, sizeof(h), by_dtype[d]);
		printf("  %-8s   %6zu tensors  %14" PRIu64 " bytes (%s)\n", srt_ck_dtype_name(d),
		       count_dtype[d], by_dtype[d], h);
	}
	printf("fingerprint  %s\n", srt_ck_fingerprint(ck));
	struct srt_tok *tok;
	char terr[4608];
	int trc = srt_tok_load_dir(dir, &tok, terr, sizeof(terr));
	if (trc == SRT_ENOENT) {
		printf("tokenizer    none (works on token ids)\n");
	} else if (trc) {
		printf("tokenizer    INVALID\n");
		fprintf(stderr, "shadowrt gen-model --check: %s\n", terr);
	} else {
		printf("tokenizer    tokenizer.json: %u token ids, bos %d, eos %d\n",
		       srt_tok_vocab_size(tok), srt_tok_bos_id(tok), srt_tok_eos_id(tok));
		srt_tok_free(tok);
	}
	if (full_hash) {
		char fp[48];
		if (srt_ck_fingerprint_full(ck, fp, err, sizeof(err)))
			fprintf(stderr, "shadowrt gen-model --check: %s\n", err);
		else
			printf("full hash    %s\n", fp);
	}
	struct srt_ck_check st;
	rc = srt_ck_dsv4_check(ck, &cfg, NULL, NULL, &st, err, sizeof(err));
	if (rc) {
		printf("model        %s: INVALID\n", cfg.name);
		fprintf(stderr, "shadowrt gen-model --check: %s\n", err);
	} else {
		printf("model        %s: valid (%zu expected tensors, %zu extra)\n", cfg.name,
		       st.expected, st.extra);
	}
	srt_ck_close(ck);
	return rc || (trc && trc != SRT_ENOENT) ? 1 : 0;
}

int srt_cmd_gen_model(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		usage(stdout);
		return 0;
	}
	const char *pos[2] = {NULL, NULL};
	int npos = 0, force = 0, check = 0, full_hash = 0;
	const char *config = NULL;
	struct srt_ck_synth_opts o = {.seed = SRT_CK_SYNTH_SEED,
				      .shard_bytes = SRT_CK_SYNTH_SHARD_BYTES};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--seed") || !strcmp(a, "--shard-bytes") || !strcmp(a, "--config")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "shadowrt gen-model: %s needs a value\n", a);
				return 2;
			}
			const char *v = argv[++i];
			if (!strcmp(a, "--config")) {
				config = v;
			} else if (parse_u64(v, !strcmp(a, "--shard-bytes"),
					     !strcmp(a, "--seed") ? &o.seed : &o.shard_bytes)) {
				fprintf(stderr, "shadowrt gen-model: %s '%s': expected a non-negative "
					"integer%s\n", a, v, a[2] == 's' && a[3] == 'h' ?
					" with an optional K, M or G suffix" : "");
				return 2;
			}
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else if (!strcmp(a, "--check")) {
			check = 1;
		} else if (!strcmp(a, "--full-hash")) {
			full_hash = 1;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shadowrt gen-model: unknown option '%s' (see --help)\n", a);
			return 2;
		} else if (npos < 2) {
			pos[npos++] = a;
		} else {
			fprintf(stderr, "shadowrt gen-model: unexpected argument '%s'\n", a);
			return 2;
		}
	}
	if (check) {
		if (npos != 1) {
			fprintf(stderr, "usage: shadowrt gen-model --check DIR [--config X] [--full-hash]\n");
			return 2;
		}
		return check_dir(pos[0], config, full_hash);
	}
	if (npos != 2) {
		fprintf(stderr, "usage: shadowrt gen-model PRESET OUT_DIR [--seed N] [--shard-bytes N] "
			"[--force]\n");
		return 2;
	}
	const char *preset = pos[0], *dir = pos[1];
	char err[512];
	struct srt_model_config cfg;
	if (srt_model_config_load(preset, &cfg, err, sizeof(err))) {
		fprintf(stderr, "shadowrt gen-model: %s\n", err);
		return 1;
	}
	uint64_t total;
	if (srt_ck_synth_bytes(&cfg, &total, err, sizeof(err))) {
		fprintf(stderr, "shadowrt gen-model: %s: %s\n", preset, err);
		return 1;
	}
	char h[32];
	human(h, sizeof(h), total);
	if (total > BIG_BYTES && !force) {
		fprintf(stderr, "shadowrt gen-model: %s makes a %s checkpoint; pass --force to write "
			"it anyway (it needs that much free space in %s)\n", preset, h, dir);
		return 1;
	}
	if (srt_ck_mkdir_p(dir)) {
		fprintf(stderr, "shadowrt gen-model: cannot create %s: %s\n", dir, strerror(errno));
		return 1;
	}
	struct statvfs vfs;
	if (!statvfs(dir, &vfs)) {
		uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		uint64_t need = total + total / 100 + ((uint64_t)16 << 20);
		if (avail < need) {
			char a[32];
			human(a, sizeof(a), avail);
			fprintf(stderr, "shadowrt gen-model: %s needs %s but %s has only %s free\n",
				preset, h, dir, a);
			return 1;
		}
	}
	struct progress pr = {.last_pct = -1, .tty = isatty(2)};
	if (total >= ((uint64_t)256 << 20)) {
		o.progress = on_progress;
		o.user = &pr;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (srt_ck_synth_write(&cfg, dir, &o, err, sizeof(err))) {
		fprintf(stderr, "shadowrt gen-model: %s\n", err);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	struct srt_ckpt *ck;
	if (srt_ck_open(dir, &ck, err, sizeof(err))) {
		fprintf(stderr, "shadowrt gen-model: wrote %s but cannot read it back: %s\n", dir, err);
		return 1;
	}
	printf("wrote %s: preset %s, seed %llu, %zu tensors, %s in %zu file%s, %.2f s (%.0f MB/s)\n"
	       "fingerprint %s\n", dir, cfg.name, (unsigned long long)o.seed, srt_ck_count(ck), h,
	       srt_ck_file_count(ck), srt_ck_file_count(ck) == 1 ? "" : "s", secs,
	       secs > 0 ? (double)total / secs / 1e6 : 0.0, srt_ck_fingerprint(ck));
	char tpath[4200];
	snprintf(tpath, sizeof(tpath), "%s/tokenizer.json", dir);
	if (access(tpath, R_OK) == 0)
		printf("tokenizer: %s (DeepSeek-V4's, with tokenizer_config.json)\n", tpath);
	else
		printf("tokenizer: none (vocab_size %d is not DeepSeek-V4's %d): the checkpoint works "
		       "on token ids\n", cfg.vocab_size, SRT_TOK_DSV4_VOCAB);
	srt_ck_close(ck);
	return 0;
}
