/* libFuzzer target: a model description (YAML, or config.json read as YAML: the first input
 * byte's low bit picks the .json rules), through libyaml events, libcyaml and validation. */
#include <stdint.h>

#include "config/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	struct srt_model_config c;
	char err[512];
	const char *origin = data[0] & 1 ? "fuzz/config.json" : "fuzz.yaml";
	srt_model_config_load_text((const char *)data + 1, size - 1, origin, "fuzz", &c, err,
				   sizeof(err));
	return 0;
}
