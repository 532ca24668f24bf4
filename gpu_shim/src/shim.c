/*
 * shim.c - the libcuda.so.1 stand-in: opens the real driver by absolute path,
 * looks up every symbol of hooks.def in it, exports one-line hooks, wraps
 * cuGetProcAddress so that look-ups return the wrapper of exactly the real
 * function the driver returned, and owns the process's region and slot.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allocmap.h"
#include "config.h"
#include "forward.h"
#include "shim.h"

FGPU_HIDDEN fgpu_state fgpu_g = {.slot = FGPU_NO_SLOT};
FGPU_HIDDEN _Atomic int fgpu_init_done;
FGPU_HIDDEN FGPU_TLS int fgpu_t_busy;
FGPU_HIDDEN FGPU_TLS uint32_t fgpu_t_launches;
FGPU_HIDDEN FGPU_TLS CUcontext fgpu_t_ctx;
FGPU_HIDDEN FGPU_TLS int fgpu_t_dev;
FGPU_HIDDEN void *fgpu_real_fn[FGPU_SYM_COUNT];
FGPU_HIDDEN unsigned char fgpu_sym_ptsz[FGPU_SYM_COUNT];

FGPU_HIDDEN const char *const fgpu_sym_name[FGPU_SYM_COUNT] = {
#define FGPU_HOOK(symbol, policy, params, args) [FGPU_SYM_##symbol] = #symbol,
#define FGPU_NEED(symbol, fallback, params) [FGPU_SYM_##symbol] = #symbol,
#include "hooks.def"
};

static const char *const g_fallback_name[FGPU_SYM_COUNT] = {
#define FGPU_NEED(symbol, fallback, params) [FGPU_SYM_##symbol] = #fallback,
#include "hooks.def"
};

/* --- exported hooks: one-line forwards to the hidden policies --- */
#define FGPU_HOOK(symbol, policy, params, args)                                \
    FGPU_EXPORT CUresult fgpu_export_##symbol params __asm__(#symbol);        \
    CUresult fgpu_export_##symbol params {                                     \
        return fgpu_policy_##policy(FGPU_SYM_##symbol, FGPU_UNPAREN args);     \
    }
#include "hooks.def"

/* The wrapper exported for each hooked symbol, indexed by fgpu_sym. */
static void *const g_wrapper[FGPU_HOOK_COUNT] = {
#define FGPU_HOOK(symbol, policy, params, args) [FGPU_SYM_##symbol] = (void *)&fgpu_export_##symbol,
#include "hooks.def"
};

/* Base name of each hook (suffixes _vN, _ptsz, _ptds stripped), for escape detection. */
static char g_base_name[FGPU_HOOK_COUNT][64];

static pthread_mutex_t g_slot_mu = PTHREAD_MUTEX_INITIALIZER;
static void *g_real_handle;

CUresult fgpu_no_real(fgpu_sym id) {
    (void)id;
    return fgpu_g.real_loaded ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_STUB_LIBRARY;
}

/* ---------------------------------------------------------------- config */

static const char *const k_default_real[] = {
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1", /* Debian/Ubuntu, NVIDIA container toolkit */
    "/usr/lib64/libcuda.so.1",                /* RHEL, SUSE */
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1", /* Kubernetes device plugins */
    "/usr/lib/wsl/lib/libcuda.so.1",
};

/* ------------------------------------------------------------------ init */

static void load_real(void) {
    void *h = fgpu_open_real("FGPU_REAL_LIBCUDA", k_default_real,
                             sizeof(k_default_real) / sizeof(k_default_real[0]), "cuInit",
                             fgpu_env_int("FGPU_REAL_DEEPBIND", 0, 0, 1) ? RTLD_DEEPBIND : 0);
    if (!h)
        return;
    g_real_handle = h;
    fgpu_g.real_loaded = 1;
    for (int i = 0; i < FGPU_SYM_COUNT; i++) {
        void *p = dlsym(h, fgpu_sym_name[i]);
        if (!p && g_fallback_name[i])
            p = dlsym(h, g_fallback_name[i]);
        fgpu_real_fn[i] = p;
        if (!p)
            FGPU_DEBUG("real driver lacks %s", fgpu_sym_name[i]);
    }
}

static void base_names(void) {
    for (int i = 0; i < FGPU_SYM_COUNT; i++) {
        size_t n = strlen(fgpu_sym_name[i]);
        fgpu_sym_ptsz[i] = n > 5 && strcmp(fgpu_sym_name[i] + n - 5, "_ptsz") == 0;
    }
    for (int i = 0; i < FGPU_HOOK_COUNT; i++) {
        char *b = g_base_name[i];
        snprintf(b, sizeof(g_base_name[i]), "%s", fgpu_sym_name[i]);
        for (;;) {
            size_t n = strlen(b);
            if (n > 5 && (!strcmp(b + n - 5, "_ptsz") || !strcmp(b + n - 5, "_ptds"))) {
                b[n - 5] = '\0';
                continue;
            }
            char *u = strrchr(b, '_');
            if (u && u[1] == 'v' && u[2] >= '0' && u[2] <= '9' && strspn(u + 2, "0123456789") == strlen(u + 2)) {
                *u = '\0';
                continue;
            }
            break;
        }
    }
}

static void open_region(void) {
    fgpu_region *r = fgpu_region_from_env();
    fgpu_g.region = r;
    fgpu_g.s = r ? &r->slice : NULL;
    fgpu_g.pace = r ? fgpu_pace_from_env() : NULL;
    fgpu_g.l = r ? r->l : NULL;
}

static void on_fork_prepare(void) { fgpu_allocmap_lock_all(); }
static void on_fork_parent(void) { fgpu_allocmap_unlock_all(); }
static void on_fork_child(void) {
    fgpu_allocmap_unlock_all();
    /* The parent's allocations and slot are not this process's. */
    fgpu_allocmap_clear();
    pthread_mutex_init(&g_slot_mu, NULL);
    fgpu_g.pid = (int32_t)getpid();
    atomic_store_explicit(&fgpu_g.slot, FGPU_NO_SLOT, memory_order_relaxed);
    fgpu_t_launches = 0;
    fgpu_t_ctx = NULL;
    if (fgpu_g.region && fgpu_g.region->fd >= 0) {
        /* Our inherited fd shares the parent's lock; take a description of our own. */
        fgpu_region_forget_fd(fgpu_g.region);
        fgpu_region_reopen_fd(fgpu_g.region);
    }
    fgpu_compute_fork_child();
}

static void do_init(void) {
    fgpu_debug_level = (int)fgpu_env_int("FGPU_DEBUG", 0, 0, 9);
    fgpu_g.pid = (int32_t)getpid();
    fgpu_g.sample_every = (uint32_t)fgpu_env_int("FGPU_SAMPLE_EVERY", 16, 1, 1 << 20);
    fgpu_g.burst_ns = fgpu_env_int("FGPU_BURST_US", 20000, 0, 10000000) * 1000;
    fgpu_g.min_sleep_ns = fgpu_env_int("FGPU_MIN_SLEEP_US", 100, 0, 1000000) * 1000;
    /* A number of nanoseconds fixes the floor (0: none); anything else learns it. */
    fgpu_g.floor_ns = fgpu_env_int("FGPU_LAUNCH_FLOOR_NS", -1, 0, 1000000);
    fgpu_g.floor_auto = fgpu_g.floor_ns < 0;
    if (fgpu_g.floor_auto)
        fgpu_g.floor_ns = 0;
    load_real();
    fgpu_forward_resolve_all(g_real_handle);
    base_names();
    open_region();
    pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}

void fgpu_init_slow(void) { fgpu_once(&fgpu_init_done, do_init); }

void fgpu_lib_init(void) { fgpu_init(); }

__attribute__((constructor)) static void fgpu_ctor(void) { fgpu_init(); }

__attribute__((destructor)) static void fgpu_dtor(void) {
    uint32_t slot = atomic_load_explicit(&fgpu_g.slot, memory_order_acquire);
    if (!fgpu_g.region || fgpu_g.pid != (int32_t)getpid())
        return;
    if (fgpu_t_launches & 63u)
        fgpu_flush_launches();
    if (slot != FGPU_NO_SLOT) {
        atomic_store_explicit(&fgpu_g.slot, FGPU_NO_SLOT, memory_order_release);
        fgpu_region_release_slot(fgpu_g.region, slot);
    }
}

/* ------------------------------------------------------------ slot, device */

static uint64_t proc_start_time(void) {
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Field 22; fields after the last ')' are space separated, starting at 3. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    int field = 2;
    while (*p && field < 22) {
        if (*p++ == ' ')
            field++;
    }
    return strtoull(p, NULL, 10);
}

uint32_t fgpu_slot(void) {
    uint32_t s = atomic_load_explicit(&fgpu_g.slot, memory_order_acquire);
    if (FGPU_LIKELY(s != FGPU_NO_SLOT))
        return s;
    static _Atomic int32_t failed_pid;
    if (atomic_load_explicit(&failed_pid, memory_order_relaxed) == fgpu_g.pid)
        return FGPU_NO_SLOT;
    pthread_mutex_lock(&g_slot_mu);
    s = atomic_load_explicit(&fgpu_g.slot, memory_order_acquire);
    if (s == FGPU_NO_SLOT) {
        uint32_t got;
        if (fgpu_region_claim_slot(fgpu_g.region, fgpu_g.pid, proc_start_time(), &got) == 0) {
            s = got;
            atomic_store_explicit(&fgpu_g.slot, s, memory_order_release);
            FGPU_DEBUG("claimed slot %u", s);
        } else {
            atomic_store_explicit(&failed_pid, fgpu_g.pid, memory_order_relaxed);
            FGPU_DEBUG("no free process slot; this process's bytes cannot be reclaimed");
        }
    }
    pthread_mutex_unlock(&g_slot_mu);
    return s;
}

int fgpu_current_device(CUcontext *ctx_out, uint32_t *dev_out) {
    fgpu_pfn_cuCtxGetCurrent get_ctx = FGPU_REAL(cuCtxGetCurrent);
    fgpu_pfn_cuCtxGetDevice get_dev = FGPU_REAL(cuCtxGetDevice);
    CUcontext ctx = NULL;
    if (!get_ctx || !get_dev || get_ctx(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return 0;
    if (ctx != fgpu_t_ctx) {
        CUdevice dev;
        if (get_dev(&dev) != CUDA_SUCCESS)
            return 0;
        fgpu_t_ctx = ctx;
        fgpu_t_dev = dev;
    }
    if (fgpu_t_dev < 0 || fgpu_t_dev >= FGPU_MAX_DEVICES)
        return 0;
    *ctx_out = ctx;
    *dev_out = (uint32_t)fgpu_t_dev;
    return 1;
}

void fgpu_flush_launches(void) {
    uint32_t n = fgpu_t_launches & 63u ? fgpu_t_launches & 63u : 64u;
    fgpu_t_launches = 0;
    if (!fgpu_g.l)
        return;
    CUcontext ctx;
    uint32_t dev = 0;
    int was_busy = fgpu_t_busy;
    fgpu_t_busy = 1;
    if (!fgpu_current_device(&ctx, &dev))
        dev = 0;
    fgpu_t_busy = was_busy;
    atomic_fetch_add_explicit(&fgpu_g.l->dev[dev].launches, n, memory_order_relaxed);
}

/* --------------------------------------------------------- cuGetProcAddress */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    while (*s)
        h = (h ^ (uint8_t)*s++) * 1099511628211ULL;
    return h;
}

/* The wrapper of exactly the real function p, or p itself when it is not hooked. */
static void *swap_by_identity(const char *symbol, void *p) {
    if (!p)
        return p;
    for (int i = 0; i < FGPU_HOOK_COUNT; i++)
        if (fgpu_real_fn[i] == p)
            return g_wrapper[i];
    /* A hooked API resolved to a function we never looked up: it escapes the slice. */
    for (int i = 0; i < FGPU_HOOK_COUNT; i++) {
        if (strcmp(symbol, g_base_name[i]) == 0) {
            FGPU_DEBUG("look-up of %s returned an unhooked entry point %p", symbol, p);
            if (fgpu_g.l)
                fgpu_ring_push(fgpu_g.l, FGPU_HAPPENING_UNHOOKED_ENTRY, -1, fgpu_g.pid,
                               atomic_load_explicit(&fgpu_g.slot, memory_order_relaxed),
                               name_hash(symbol), 0);
            break;
        }
    }
    return p;
}

CUresult fgpu_policy_get_proc_address(fgpu_sym id, const char *symbol, void **pfn,
                                      int cudaVersion, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *symbolStatus) {
    fgpu_init();
    REAL_OR_FAIL(cuGetProcAddress_v2, id);
    CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    /* Pass-through mode hands out the driver's own pointers: zero added cost. */
    if (rc == CUDA_SUCCESS && pfn && symbol && fgpu_g.l)
        *pfn = swap_by_identity(symbol, *pfn);
    return rc;
}

CUresult fgpu_policy_get_proc_address_v1(fgpu_sym id, const char *symbol, void **pfn,
                                         int cudaVersion, cuuint64_t flags) {
    fgpu_init();
    REAL_OR_FAIL(cuGetProcAddress, id);
    CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn && symbol && fgpu_g.l)
        *pfn = swap_by_identity(symbol, *pfn);
    return rc;
}
