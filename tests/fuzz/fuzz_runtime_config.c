/* libFuzzer target: the INI runtime config (inih) over the built-in default. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/runtime_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1); /* the loader takes a NUL-terminated string */
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct srt_runtime_config c;
	char err[512];
	if (srt_runtime_config_load_text(text, "fuzz.ini", &c, err, sizeof(err)) == 0)
		srt_runtime_config_free(&c);
	free(text);
	return 0;
}
