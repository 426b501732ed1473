/* libFuzzer target: one safetensors file image (8-byte length, JSON header through jansson,
 * data region), validated exactly as srt_ck_open validates a mapped file. */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	srt_ck_check_image(data, size, "fuzz.safetensors", err, sizeof(err));
	return 0;
}
