/*
 * Test fixture: the window attention plugin built as an ABI 1.0 plugin (it reports abi_minor
 * 0, so the executor must never hand it read-only entries or a rematerialization call).
 */
#include "attn_plugin.h"

#undef SRT_ABI_MINOR
#define SRT_ABI_MINOR 0

SRT_ATTN_PLUGIN("swa_abi10", 0, "sliding-window attention reporting ABI 1.0 (test fixture)")
