/* libFuzzer target: Mooncake trace text (bounded lines, each parsed by jansson). */
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	FILE *f = fmemopen((void *)data, size, "r");
	if (!f)
		return 0;
	struct srt_trace *t = NULL;
	char err[512];
	if (srt_trace_load_stream(f, "fuzz.jsonl", 0, &t, err, sizeof(err)) == 0)
		srt_trace_free(t);
	fclose(f);
	return 0;
}
