/* libshadowrt-ops: the library version (see sdk/ops.h). */
#include "ops.h"

int srt_ops_version(void)
{
	return SRT_OPS_VERSION_MAJOR * 100 + SRT_OPS_VERSION_MINOR;
}
