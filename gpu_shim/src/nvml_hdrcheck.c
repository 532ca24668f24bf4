/*
 * nvml_hdrcheck.c - compile-time proof that every nvml_hooks.def signature
 * matches NVIDIA's nvml.h (built only when nvml.h is present; produces no
 * code).  tests/shim/test_shim_nvml.py compares nvml_min.h's layouts with nvml.h's.
 * NVML_NO_UNVERSIONED_FUNC_DEFS makes nvml.h declare the legacy names too.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#define FGPU_NVML_HOOK(symbol, policy, ret, params, args)                           \
    _Static_assert(__builtin_types_compatible_p(__typeof__(symbol), ret params),   \
                   #symbol " differs from nvml.h");
#define FGPU_NVML_NEED(symbol, params)                                              \
    _Static_assert(__builtin_types_compatible_p(__typeof__(symbol), nvmlReturn_t params), \
                   #symbol " differs from nvml.h");
#include "nvml_hooks.def"
