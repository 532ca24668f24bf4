/*
 * hooks.h - what hooks.def generates for every translation unit: the symbol
 * enum, the function-pointer types, the table of real entry points and the
 * prototypes of the hidden policy functions.
 */
#ifndef FGPU_HOOKS_H
#define FGPU_HOOKS_H

#include "common.h"
#include "fgpu_cuda.h"

typedef enum fgpu_sym {
#define FGPU_HOOK(symbol, policy, params, args) FGPU_SYM_##symbol,
#define FGPU_NEED(symbol, fallback, params) FGPU_SYM_##symbol,
#include "hooks.def"
    FGPU_SYM_COUNT
} fgpu_sym;

/* Symbols before this one are hooked (exported by the shim); the rest are needs. */
enum {
    FGPU_HOOK_COUNT = 0
#define FGPU_HOOK(symbol, policy, params, args) +1
#include "hooks.def"
};

#define FGPU_HOOK(symbol, policy, params, args) typedef CUresult (*fgpu_pfn_##symbol) params;
#define FGPU_NEED(symbol, fallback, params) typedef CUresult (*fgpu_pfn_##symbol) params;
#include "hooks.def"

#define FGPU_HOOK(symbol, policy, params, args) \
    FGPU_HIDDEN CUresult fgpu_policy_##policy(fgpu_sym id, FGPU_UNPAREN params);
#include "hooks.def"

/* Real entry points, indexed by fgpu_sym; NULL when the driver lacks one. */
FGPU_HIDDEN extern void *fgpu_real_fn[FGPU_SYM_COUNT];
/* Names, indexed by fgpu_sym. */
FGPU_HIDDEN extern const char *const fgpu_sym_name[FGPU_SYM_COUNT];
/* 1 for the per-thread-default-stream variants (name ends in _ptsz), set at init. */
FGPU_HIDDEN extern unsigned char fgpu_sym_ptsz[FGPU_SYM_COUNT];

/* The real entry point for symbol, typed. */
#define FGPU_REAL(symbol) ((fgpu_pfn_##symbol)fgpu_real_fn[FGPU_SYM_##symbol])
/* The real entry point for id, typed as symbol (same policy => same signature).  Use
 * it directly, never through another macro: a macro argument is expanded first, and
 * cuda.h #defines many names (cuMemAlloc -> cuMemAlloc_v2). */
#define FGPU_REAL_AS(symbol, id) ((fgpu_pfn_##symbol)fgpu_real_fn[(id)])
/* Declare `real`, the real function of id typed as symbol, or return fgpu_no_real(id)
 * when the driver lacks it (symbol pasted as above; needs shim.h). */
#define REAL_OR_FAIL(symbol, id)                                         \
    fgpu_pfn_##symbol real = (fgpu_pfn_##symbol)fgpu_real_fn[(id)];      \
    if (FGPU_UNLIKELY(!real))                                            \
    return fgpu_no_real(id)

#endif /* FGPU_HOOKS_H */
