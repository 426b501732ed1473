/* swa — window-only attention (compress ratio 0: Flash blocks 0-1, the MTP block), CPU. */
#include "attn_plugin.h"

SRT_ATTN_PLUGIN("swa", 0, "sliding-window attention (ratio 0, rope_theta, no YaRN); CPU")
