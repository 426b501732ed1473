/* libFuzzer target: the sharded checkpoint index (model.safetensors.index.json, jansson) next
 * to two fixed valid shards, opened through srt_ck_open like a real checkpoint directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/safetensors.h"

static char dir[64];

static void put(const char *name, const void *data, size_t n)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	if (!f)
		abort();
	if (n && fwrite(data, 1, n, f) != n)
		abort();
	fclose(f);
}

/* A shard with one 4-byte U8 tensor `name`. */
static void shard(const char *file, const char *name)
{
	char hdr[128];
	int hl = snprintf(hdr, sizeof(hdr), "{\"%s\":{\"dtype\":\"U8\",\"shape\":[4],"
			  "\"data_offsets\":[0,4]}}", name);
	uint8_t b[256];
	for (int k = 0; k < 8; k++)
		b[k] = (uint8_t)((uint64_t)hl >> (8 * k));
	memcpy(b + 8, hdr, (size_t)hl);
	memset(b + 8 + hl, 7, 4);
	put(file, b, 8 + (size_t)hl + 4);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	snprintf(dir, sizeof(dir), "/tmp/srt-fuzz-index-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	shard("s1.safetensors", "a");
	shard("s2.safetensors", "b");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	put(SRT_CK_INDEX_NAME, data, size);
	struct srt_ckpt *ck = NULL;
	char err[512];
	if (srt_ck_open(dir, &ck, err, sizeof(err)) == 0)
		srt_ck_close(ck);
	return 0;
}
