/* hca — heavily compressed attention (ratio 128: window + every visible C128 entry), CPU. */
#include "attn_plugin.h"

SRT_ATTN_PLUGIN("hca", 128, "heavily compressed attention (ratio 128, dense C128); CPU")
