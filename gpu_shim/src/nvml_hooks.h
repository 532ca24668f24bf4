/*
 * nvml_hooks.h - what nvml_hooks.def generates for the libnvidia-ml.so.1
 * stand-in: the symbol enum, the function-pointer types, the table of real
 * functions and the prototypes of the hidden policies.
 */
#ifndef FGPU_NVML_HOOKS_H
#define FGPU_NVML_HOOKS_H

#include "common.h"
#include "nvml_min.h"

typedef enum fgpu_nvml_sym {
#define FGPU_NVML_HOOK(symbol, policy, ret, params, args) FGPU_NVML_##symbol,
#define FGPU_NVML_NEED(symbol, params) FGPU_NVML_##symbol,
#include "nvml_hooks.def"
    FGPU_NVML_SYM_COUNT
} fgpu_nvml_sym;

#define FGPU_NVML_HOOK(symbol, policy, ret, params, args) typedef ret(*fgpu_nvml_pfn_##symbol) params;
#define FGPU_NVML_NEED(symbol, params) typedef nvmlReturn_t(*fgpu_nvml_pfn_##symbol) params;
#include "nvml_hooks.def"

#define FGPU_NVML_HOOK(symbol, policy, ret, params, args) \
    FGPU_HIDDEN ret fgpu_nvml_policy_##policy(fgpu_nvml_sym id, FGPU_UNPAREN params);
#include "nvml_hooks.def"

/* Real functions, indexed by fgpu_nvml_sym; NULL when the real library lacks one. */
FGPU_HIDDEN extern void *fgpu_nvml_real_fn[FGPU_NVML_SYM_COUNT];

/* The real function of id, typed as symbol (same policy => same signature). */
#define FGPU_NVML_REAL_AS(symbol, id) ((fgpu_nvml_pfn_##symbol)fgpu_nvml_real_fn[(id)])

#endif /* FGPU_NVML_HOOKS_H */
