/* config.h - the slice and tunables from the environment (see config.c). */
#ifndef FGPU_CONFIG_H
#define FGPU_CONFIG_H

#include <stdint.h>

#include "fgpu_region.h"
#include "common.h"

/* Slice from FGPU_MEM_LIMIT / FGPU_SM_SHARE_PPM (else FGPU_SM_SHARE) into cfg; returns 1
 * when any was set.
 * A single value applies to every device; a comma list gives device 0, 1, ... */
FGPU_HIDDEN int fgpu_config_from_env(fgpu_config *cfg);
/* Integer environment variable within [lo, hi], dflt when unset or invalid. */
FGPU_HIDDEN int64_t fgpu_env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi);

/*
 * The region of this process: FGPU_REGION's shared file (created with the
 * environment's slice when missing), else a process-private one when the
 * environment sets a slice, else NULL (pass-through).
 */
FGPU_HIDDEN fgpu_region *fgpu_region_from_env(void);
/* The region's pace file (FGPU_REGION + FGPU_PACE_SUFFIX), mapped read-only, or NULL. */
FGPU_HIDDEN const fgpu_pace *fgpu_pace_from_env(void);

#endif /* FGPU_CONFIG_H */
