/* forward.c - the C side of trampolines.S: resolving the forward pointers. */
#define _GNU_SOURCE
#include "forward.h"

#include <dlfcn.h>
#include <stdatomic.h>

#include "shim.h"

#define FGPU_FWD(name) FGPU_HIDDEN extern void *fgpu_fp_##name;
#include "forward_list.h"
#undef FGPU_FWD

typedef struct fwd_entry {
    const char *name;
    void **slot;
} fwd_entry;

static const fwd_entry k_forwards[] = {
#define FGPU_FWD(name) {#name, &fgpu_fp_##name},
#include "forward_list.h"
#undef FGPU_FWD
};

static _Atomic int g_resolved;

/* Stand-ins with no parameters: callers pass arguments in registers and clean
 * up after themselves, so any CUresult-returning signature may call them. */
static CUresult fwd_missing(void) { return CUDA_ERROR_NOT_FOUND; }
static CUresult fwd_no_driver(void) { return CUDA_ERROR_STUB_LIBRARY; }
static CUresult fwd_not_ready(void) { return CUDA_ERROR_NOT_INITIALIZED; }

void fgpu_forward_resolve_all(void *handle) {
    for (size_t i = 0; i < sizeof(k_forwards) / sizeof(k_forwards[0]); i++) {
        void *p = handle ? dlsym(handle, k_forwards[i].name) : NULL;
        if (!p)
            p = handle ? (void *)&fwd_missing : (void *)&fwd_no_driver;
        __atomic_store_n(k_forwards[i].slot, p, __ATOMIC_RELEASE);
    }
    atomic_store_explicit(&g_resolved, 1, memory_order_release);
}

void *fgpu_fwd_lazy(void **slot) {
    fgpu_init();
    /* Only a call made by the real driver's own constructor, while the shim
     * is still opening it, can get here unresolved. */
    if (!atomic_load_explicit(&g_resolved, memory_order_acquire))
        return (void *)&fwd_not_ready;
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}
