/*
 * forward.c - the C side of trampolines.S: resolving the forward pointers.
 * Compiled once per stand-in: FGPU_FORWARD_LIST names its list, and
 * FGPU_FWD_MISSING / _NO_LIB / _NOT_READY the status codes (CUresult or
 * nvmlReturn_t values) its stand-ins return.
 */
#define _GNU_SOURCE
#include "forward.h"

#include <dlfcn.h>
#include <stdatomic.h>

#ifndef FGPU_FORWARD_LIST
#define FGPU_FORWARD_LIST "forward_list.h"
#define FGPU_FWD_MISSING 500  /* CUDA_ERROR_NOT_FOUND */
#define FGPU_FWD_NO_LIB 34    /* CUDA_ERROR_STUB_LIBRARY */
#define FGPU_FWD_NOT_READY 3  /* CUDA_ERROR_NOT_INITIALIZED */
#endif

#define FGPU_FWD(name) FGPU_HIDDEN extern void *fgpu_fp_##name;
#include FGPU_FORWARD_LIST
#undef FGPU_FWD

typedef struct fwd_entry {
    const char *name;
    void **slot;
} fwd_entry;

static const fwd_entry k_forwards[] = {
#define FGPU_FWD(name) {#name, &fgpu_fp_##name},
#include FGPU_FORWARD_LIST
#undef FGPU_FWD
};

static _Atomic int g_resolved;

/* Stand-ins with no parameters: callers pass arguments in registers and clean
 * up after themselves, so any signature returning an int-sized status code may
 * call them (every forwarded symbol does: the generator refuses any other). */
static int fwd_missing(void) { return FGPU_FWD_MISSING; }
static int fwd_no_lib(void) { return FGPU_FWD_NO_LIB; }
static int fwd_not_ready(void) { return FGPU_FWD_NOT_READY; }

void fgpu_forward_resolve_all(void *handle) {
    for (size_t i = 0; i < sizeof(k_forwards) / sizeof(k_forwards[0]); i++) {
        void *p = handle ? dlsym(handle, k_forwards[i].name) : NULL;
        if (!p)
            p = handle ? (void *)&fwd_missing : (void *)&fwd_no_lib;
        __atomic_store_n(k_forwards[i].slot, p, __ATOMIC_RELEASE);
    }
    atomic_store_explicit(&g_resolved, 1, memory_order_release);
}

void *fgpu_fwd_lazy(void **slot) {
    fgpu_lib_init();
    /* Only a call made by the real library's own constructor, while the shim
     * is still opening it, can get here unresolved. */
    if (!atomic_load_explicit(&g_resolved, memory_order_acquire))
        return (void *)&fwd_not_ready;
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}
