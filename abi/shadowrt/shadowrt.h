/* shadowrt plugin ABI v1 — include this one header to write a plugin of any kind. */
#ifndef SHADOWRT_H
#define SHADOWRT_H
#include "plugin.h"
#include "model.h"
#include "pool.h"
#include "attention.h"
#include "moe.h"
#include "residual.h"
#include "tier.h"
#endif
