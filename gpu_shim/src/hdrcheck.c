/*
 * hdrcheck.c - compile-time proof that every hooks.def signature matches the
 * toolkit's cuda.h (built only when cuda.h is present; produces no code).
 * __CUDA_API_VERSION_INTERNAL makes cuda.h declare every exported name,
 * including the legacy v1 and _ptsz variants.
 */
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>

#define FGPU_HOOK(symbol, policy, params, args)                                   \
    _Static_assert(__builtin_types_compatible_p(__typeof__(symbol), CUresult params), \
                   #symbol " differs from cuda.h");
#define FGPU_NEED(symbol, fallback, params)                                       \
    _Static_assert(__builtin_types_compatible_p(__typeof__(symbol), CUresult params), \
                   #symbol " differs from cuda.h");
#include "hooks.def"
