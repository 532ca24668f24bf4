/*
 * nvml.c - the libnvidia-ml.so.1 stand-in.  nvidia-smi and monitoring tools
 * dlopen("libnvidia-ml.so.1") and dlsym each function by name; with this
 * library first on the search path they get its exports: the hooks of
 * nvml_hooks.def, which answer from the container's region, and a trampoline
 * to the real library (opened by absolute path, FGPU_REAL_LIBNVML) for every
 * other function.
 *
 * A device has a slice when the region configures it (its NVML index, which
 * is the CUDA ordinal when devices are enumerated in PCI order, is below the
 * region's device count).  Then:
 *   memory info   total = min(limit, real total), used = the session's bytes,
 *                 free = total - used (v2: reserved 0); no limit: untouched
 *   processes     compute: the session's live processes holding bytes on the
 *                 device, with those bytes; graphics and MPS: none
 *   utilisation   gpu = GPU time charged to the session during the last
 *                 complete epoch (1.07 s), as a percentage of its SM share of
 *                 that epoch; memory = the device's figure, never above gpu.
 *                 A device without a share (the session has all of it): untouched
 * A device without a slice, or no region at all, gets the real answers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "forward.h"
#include "nvml_hooks.h"
#include "region_layout.h"

FGPU_HIDDEN void *fgpu_nvml_real_fn[FGPU_NVML_SYM_COUNT];

static const char *const k_sym_name[FGPU_NVML_SYM_COUNT] = {
#define FGPU_NVML_HOOK(symbol, policy, ret, params, args) [FGPU_NVML_##symbol] = #symbol,
#define FGPU_NVML_NEED(symbol, params) [FGPU_NVML_##symbol] = #symbol,
#include "nvml_hooks.def"
};

/* --- exported hooks: one-line forwards to the hidden policies --- */
#define FGPU_NVML_HOOK(symbol, policy, ret, params, args)                           \
    FGPU_EXPORT ret fgpu_nvml_export_##symbol params __asm__(#symbol);             \
    ret fgpu_nvml_export_##symbol params {                                         \
        return fgpu_nvml_policy_##policy(FGPU_NVML_##symbol, FGPU_UNPAREN args);   \
    }
#include "nvml_hooks.def"

static _Atomic int g_init_done;
static FGPU_TLS int t_busy;
static int g_real_loaded;
static fgpu_region *g_region; /* NULL: pass-through */

/* ------------------------------------------------------------------ init */

static void do_init(void) {
    fgpu_debug_level = (int)fgpu_env_int("FGPU_DEBUG", 0, 0, 9);
    void *h = fgpu_open_real_nvml();
    g_real_loaded = h != NULL;
    for (int i = 0; i < FGPU_NVML_SYM_COUNT; i++) {
        fgpu_nvml_real_fn[i] = h ? dlsym(h, k_sym_name[i]) : NULL;
        if (h && !fgpu_nvml_real_fn[i])
            FGPU_DEBUG("real NVML lacks %s", k_sym_name[i]);
    }
    fgpu_forward_resolve_all(h);
    g_region = fgpu_region_from_env();
}

void fgpu_lib_init(void) {
    if (FGPU_UNLIKELY(!atomic_load_explicit(&g_init_done, memory_order_acquire)))
        fgpu_once(&g_init_done, do_init);
}

__attribute__((constructor)) static void fgpu_nvml_ctor(void) { fgpu_lib_init(); }

/* ----------------------------------------------------------- entry guard */

/*
 * Enter a policy: the region's index of `device` in *dev, and 1 when it has a
 * slice (the caller then answers from the region and must call leave()).  0:
 * forward the call unchanged (no region, a call from inside a hook, a device
 * the real library does not know or the region does not configure).  Called
 * after REAL_OR, which initialised the library.
 */
static int enter(nvmlDevice_t device, uint32_t *dev) {
    fgpu_nvml_pfn_nvmlDeviceGetIndex get_index =
        FGPU_NVML_REAL_AS(nvmlDeviceGetIndex, FGPU_NVML_nvmlDeviceGetIndex);
    if (!g_region || !get_index || t_busy)
        return 0;
    t_busy = 1;
    unsigned int index;
    if (get_index(device, &index) != NVML_SUCCESS ||
        index >= g_region->slice.ndev) {
        t_busy = 0;
        return 0;
    }
    *dev = index;
    return 1;
}

static void leave(void) { t_busy = 0; }

/* Initialise, then the real function of id typed as symbol, or return `missing`. */
#define REAL_OR(symbol, id, missing)                                               \
    fgpu_lib_init();                                                               \
    fgpu_nvml_pfn_##symbol real = FGPU_NVML_REAL_AS(symbol, id);                   \
    if (FGPU_UNLIKELY(!real))                                                      \
    return (missing)

#define NO_REAL() (g_real_loaded ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_ERROR_LIBRARY_NOT_FOUND)

/* ---------------------------------------------------------------- strings */

const char *fgpu_nvml_policy_error_string(fgpu_nvml_sym id, nvmlReturn_t result) {
    fgpu_lib_init();
    fgpu_nvml_pfn_nvmlErrorString real = FGPU_NVML_REAL_AS(nvmlErrorString, id);
    if (real)
        return real(result);
    switch (result) { /* what the stand-in itself returns without a real library */
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    default:
        return "Unknown Error";
    }
}

/* ----------------------------------------------------------------- memory */

/*
 * Forward when the device has no slice; else ask the real library and, when it
 * answers, correct the answer with `correct` (a statement that may use dev).
 */
#define CORRECTED(call, correct)                                                   \
    do {                                                                           \
        uint32_t dev;                                                              \
        if (!enter(device, &dev))                                                  \
            return (call);                                                         \
        nvmlReturn_t rc_ = (call);                                                 \
        if (rc_ == NVML_SUCCESS)                                                   \
            correct;                                                               \
        leave();                                                                   \
        return rc_;                                                                \
    } while (0)

/* The real answer (total, free, used) replaced by the slice's; untouched without a limit. */
static void slice_memory(uint32_t dev, unsigned long long *total, unsigned long long *free,
                         unsigned long long *used) {
    uint64_t limit = g_region->slice.dev[dev].limit;
    if (!limit)
        return;
    uint64_t in_use = atomic_load_explicit(&g_region->l->dev[dev].in_use, memory_order_relaxed);
    *total = limit < *total ? limit : *total;
    *used = in_use < *total ? in_use : *total;
    *free = *total - *used;
}

nvmlReturn_t fgpu_nvml_policy_memory_info(fgpu_nvml_sym id, nvmlDevice_t device,
                                          nvmlMemory_t *memory) {
    REAL_OR(nvmlDeviceGetMemoryInfo, id, NO_REAL());
    CORRECTED(real(device, memory),
              slice_memory(dev, &memory->total, &memory->free, &memory->used));
}

/* v2: the driver's reserve is not the session's, so total = free + used. */
nvmlReturn_t fgpu_nvml_policy_memory_info_v2(fgpu_nvml_sym id, nvmlDevice_t device,
                                             nvmlMemory_v2_t *memory) {
    REAL_OR(nvmlDeviceGetMemoryInfo_v2, id, NO_REAL()); /* the real one checks the version */
    CORRECTED(real(device, memory), {
        if (g_region->slice.dev[dev].limit)
            memory->reserved = 0;
        slice_memory(dev, &memory->total, &memory->free, &memory->used);
    });
}

/* -------------------------------------------------------------- processes */

/* One process of the list, written in the caller's layout (v1: pid and bytes only). */
static void put_process(void *infos, int v1, unsigned int i, int32_t pid, uint64_t bytes) {
    if (v1) {
        nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
        p->pid = (unsigned int)pid;
        p->usedGpuMemory = bytes;
    } else {
        nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
        p->pid = (unsigned int)pid;
        p->usedGpuMemory = bytes;
        p->gpuInstanceId = 0xFFFFFFFFu;
        p->computeInstanceId = 0xFFFFFFFFu;
    }
}

/*
 * NVML's list protocol over the session's live processes that hold bytes on
 * dev (all == 0: over none): *count in is the room in infos, out the entries
 * there are; NVML_ERROR_INSUFFICIENT_SIZE when they do not fit.
 */
static nvmlReturn_t list_processes(uint32_t d, int all, unsigned int *count, void *infos,
                                   int v1) {
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int room = *count, n = 0;
    for (uint32_t slot = 0; all && slot < FGPU_MAX_SLOTS; slot++) {
        fgpu_process p;
        /* A dead owner's bytes are the agent's to reclaim, not a running process. */
        if (fgpu_region_process(g_region, slot, &p) != 1 || !p.alive || !p.bytes[d])
            continue;
        if (n < room && infos)
            put_process(infos, v1, n, p.pid, p.bytes[d]);
        n++;
    }
    *count = n;
    if (n > room)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (n && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* The list policy of one process-info layout T (its own real function when unsliced). */
#define LIST_AROUND(symbol, id, all, v1)                                           \
    do {                                                                           \
        REAL_OR(symbol, id, NO_REAL());                                            \
        uint32_t dev;                                                              \
        if (!enter(device, &dev))                                                  \
            return real(device, infoCount, infos);                                 \
        nvmlReturn_t rc = list_processes(dev, (all), infoCount, infos, (v1));      \
        leave();                                                                   \
        return rc;                                                                 \
    } while (0)

nvmlReturn_t fgpu_nvml_policy_session_processes_v1(fgpu_nvml_sym id, nvmlDevice_t device,
                                                   unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos) {
    LIST_AROUND(nvmlDeviceGetComputeRunningProcesses, id, 1, 1);
}

nvmlReturn_t fgpu_nvml_policy_session_processes(fgpu_nvml_sym id, nvmlDevice_t device,
                                                unsigned int *infoCount,
                                                nvmlProcessInfo_v2_t *infos) {
    LIST_AROUND(nvmlDeviceGetComputeRunningProcesses_v2, id, 1, 0);
}

nvmlReturn_t fgpu_nvml_policy_no_processes_v1(fgpu_nvml_sym id, nvmlDevice_t device,
                                              unsigned int *infoCount,
                                              nvmlProcessInfo_v1_t *infos) {
    LIST_AROUND(nvmlDeviceGetGraphicsRunningProcesses, id, 0, 1);
}

nvmlReturn_t fgpu_nvml_policy_no_processes(fgpu_nvml_sym id, nvmlDevice_t device,
                                           unsigned int *infoCount, nvmlProcessInfo_v2_t *infos) {
    LIST_AROUND(nvmlDeviceGetGraphicsRunningProcesses_v2, id, 0, 0);
}

/* ------------------------------------------------------------ utilisation */

/* gpu: the session's charged time over its share; memory: the device's, at most gpu. */
static void session_utilization(uint32_t dev, nvmlUtilization_t *u) {
    uint32_t share = g_region->slice.dev[dev].sm_share_ppm;
    if (!share || share >= FGPU_SHARE_FULL)
        return; /* the whole device is the session's: its figures are the session's */
    uint64_t busy = fgpu_busy_last_epoch(&g_region->l->dev[dev], fgpu_now_ns(CLOCK_MONOTONIC));
    /* busy < 2^32, so busy * 100 * 10^6 fits in 64 bits. */
    uint64_t pct = busy * 100u * FGPU_SHARE_FULL / ((uint64_t)FGPU_BUSY_EPOCH_NS * share);
    u->gpu = pct > 100 ? 100 : (unsigned int)pct;
    if (u->memory > u->gpu)
        u->memory = u->gpu;
}

nvmlReturn_t fgpu_nvml_policy_utilization(fgpu_nvml_sym id, nvmlDevice_t device,
                                          nvmlUtilization_t *utilization) {
    REAL_OR(nvmlDeviceGetUtilizationRates, id, NO_REAL());
    CORRECTED(real(device, utilization), session_utilization(dev, utilization));
}
