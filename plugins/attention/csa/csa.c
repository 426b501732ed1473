/* csa — compressed sparse attention (ratio 4: window + lightning indexer top-k of C4), CPU. */
#include "attn_plugin.h"

SRT_ATTN_PLUGIN("csa", 4, "compressed sparse attention (ratio 4, lightning indexer top-k); CPU")
