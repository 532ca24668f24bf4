/*
 * footprint.c - what the driver itself takes for a process: its contexts and
 * its loaded modules and libraries.  None of it is an allocation the
 * application asked for, yet the GPU's memory holds it, so it counts against
 * the slice like any allocation: charged to the process's slot (given back
 * when the context is destroyed or released, the module unloaded, the process
 * exits or the agent reclaims a killed process's slot), refused with
 * CUDA_ERROR_OUT_OF_MEMORY when it does not fit (the driver's object is
 * destroyed again first).
 *
 * The bytes are measured, not guessed: the device's free memory before and
 * after the driver call.  A context is measured through the real NVML (no
 * context is needed to ask it; the device is the CUDA ordinal's NVML index,
 * see README "Limits"), a module or library through the real cuMemGetInfo_v2
 * under the current context.  Other processes allocate and free at the same
 * time, so a delta is noisy: the container's own reservations made meanwhile
 * (the region's in_use) are taken out, the result is clamped to
 * [0, FGPU_CTX_MAX_BYTES], and what another container does in the same
 * microseconds is the documented error (README "Memory slice").  Without a
 * real NVML a context is charged FGPU_CTX_BYTES (default 0).
 *
 * Measurements never overlap within the container: each holds a mutex (the
 * process's threads) and the region's FGPU_MEASURE_LOCK byte (the container's
 * processes) from its first reading to its charge.  Otherwise two processes
 * building contexts at once each see the other's memory fall in their window,
 * and its charge land in it or not depending on timing: one process is charged
 * the other's context, and the in_use growth taken out no longer matches the
 * drop, so in_use drifts from what the container's processes really hold.  So
 * a measured drop holds only this object and the allocations (counted in
 * in_use, taken out) of the container's other processes.
 *
 * These calls are rare (a context per device and process; modules at start
 * and on lazy loads): the measurement costs two driver queries and one mutex.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "allocmap.h"
#include "config.h"
#include "shim.h"

#define NO_READING UINT64_MAX

/* The real NVML's few functions the measurement needs (nvml.h types by value only). */
typedef struct nvml_mem {
    unsigned long long total, free, used;
} nvml_mem;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int index, void **device);
typedef int (*nvml_mem_fn)(void *device, nvml_mem *memory);

static pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
static nvml_handle_fn g_nvml_handle;
static nvml_mem_fn g_nvml_mem;
/* One measurement at a time per process: its before/after must not see another's. */
static pthread_mutex_t g_measure_mu = PTHREAD_MUTEX_INITIALIZER;
/* How long a measurement waits for another process's (a context takes well under a second). */
#define MEASURE_WAIT_NS 10000000000LL
static uint64_t g_ctx_fallback;
static uint64_t g_ctx_max;

static void load_nvml(void) {
    g_ctx_fallback = (uint64_t)fgpu_env_int("FGPU_CTX_BYTES", 0, 0, INT64_MAX);
    g_ctx_max = (uint64_t)fgpu_env_int("FGPU_CTX_MAX_BYTES", 2LL << 30, 0, INT64_MAX);
    void *h = fgpu_open_real_nvml();
    if (!h)
        return;
    nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
    g_nvml_handle = (nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    g_nvml_mem = (nvml_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
    if (!init || !g_nvml_handle || !g_nvml_mem || init() != 0) {
        FGPU_DEBUG("real NVML unusable: contexts are charged FGPU_CTX_BYTES");
        g_nvml_handle = NULL;
        g_nvml_mem = NULL;
    }
}

/* Free bytes of device dev by the real NVML; NO_READING without one. */
static uint64_t nvml_free(uint32_t dev) {
    void *device;
    nvml_mem m;
    if (!g_nvml_mem || g_nvml_handle(dev, &device) != 0 || g_nvml_mem(device, &m) != 0)
        return NO_READING;
    return m.free;
}

/* Free bytes of the current context's device by the real driver; NO_READING on failure. */
static uint64_t cuda_free(void) {
    fgpu_pfn_cuMemGetInfo_v2 info = FGPU_REAL(cuMemGetInfo_v2);
    size_t free = 0, total = 0;
    if (!info || info(&free, &total) != CUDA_SUCCESS)
        return NO_READING;
    return free;
}

/* One measurement: the free bytes and the container's reservations on dev at one time. */
typedef struct reading {
    uint64_t free;
    uint64_t in_use;
} reading;

static reading take_reading(uint32_t dev, int by_nvml) {
    reading r;
    r.in_use = atomic_load_explicit(&fgpu_g.l->dev[dev].in_use, memory_order_relaxed);
    r.free = by_nvml ? nvml_free(dev) : cuda_free();
    return r;
}

/*
 * What the driver took between two readings, less what this container reserved
 * meanwhile (those bytes are counted already), clamped to [0, max]; fallback
 * when either reading failed.
 */
static uint64_t taken(reading before, reading after, uint64_t fallback) {
    if (before.free == NO_READING || after.free == NO_READING)
        return fallback;
    if (after.free >= before.free)
        return 0;
    uint64_t drop = before.free - after.free;
    uint64_t ours = after.in_use > before.in_use ? after.in_use - before.in_use : 0;
    drop = drop > ours ? drop - ours : 0;
    return drop < g_ctx_max ? drop : g_ctx_max;
}

/*
 * Charge bytes of the driver's object (kind, key), living as long as ctx, to
 * this process on dev.  0 when they do not fit the slice (nothing charged).
 */
static int charge(uint32_t kind, uint64_t key, CUcontext ctx, uint32_t dev, uint64_t bytes) {
    if (!bytes)
        return 1; /* nothing to give back later; a process claims no slot for it */
    uint32_t slot = fgpu_slot();
    if (!fgpu_mem_reserve(fgpu_g.l, fgpu_g.s->dev[dev].limit, slot, dev, bytes,
                                   fgpu_g.pid)) {
        FGPU_DEBUG("driver object of %llu bytes (kind %u) refused on device %u",
                   (unsigned long long)bytes, kind, dev);
        return 0;
    }
    fgpu_alloc rec = {.key = key, .bytes = bytes, .ctx = ctx, .kind = kind, .device = dev};
    if (fgpu_allocmap_put(&rec) != 0)
        FGPU_DEBUG("allocation map full: %llu bytes will stay counted",
                   (unsigned long long)bytes);
    FGPU_DEBUG("driver object (kind %u) takes %llu bytes on device %u", kind,
               (unsigned long long)bytes, dev);
    return 1;
}

/* F_OFD_SETLK(W) of the region's FGPU_MEASURE_LOCK byte; 1 when done. */
static int measure_ofd(int fd, short type, int wait) {
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = FGPU_MEASURE_LOCK;
    fl.l_len = 1;
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0;
}

/*
 * Start a measurement: no other thread of this process nor process of the
 * container measures until measure_end.  A process that keeps the lock longer
 * than MEASURE_WAIT_NS (stopped, say) is not waited for: the measurement then
 * goes ahead unserialised, with the documented race.  Returns whether the
 * region's lock was taken.
 */
static int measure_begin(void) {
    pthread_mutex_lock(&g_measure_mu);
    int fd = fgpu_g.region ? fgpu_g.region->fd : -1;
    if (fd < 0)
        return 0;
    int64_t give_up = fgpu_now_ns(CLOCK_MONOTONIC) + MEASURE_WAIT_NS;
    while (!measure_ofd(fd, F_WRLCK, 0)) {
        if (errno != EAGAIN && errno != EACCES && errno != EINTR)
            return 0;
        if (fgpu_now_ns(CLOCK_MONOTONIC) >= give_up) {
            FGPU_DEBUG("another process measures for too long: measuring beside it");
            return 0;
        }
        struct timespec ts = {0, 1000000}; /* 1 ms: measurements are rare */
        nanosleep(&ts, NULL);
    }
    return 1;
}

static void measure_end(int locked) {
    if (locked)
        measure_ofd(fgpu_g.region->fd, F_UNLCK, 0);
    pthread_mutex_unlock(&g_measure_mu);
}

/* The region's lock of the context creation in progress on this thread. */
static FGPU_TLS int t_ctx_locked;

/* Enter a context creation on dev: 1 (guard held, measurement begun) when it is accounted. */
static int ctx_enter(CUdevice dev) {
    if (dev < 0 || dev >= FGPU_MAX_DEVICES || !fgpu_enter())
        return 0;
    pthread_once(&g_nvml_once, load_nvml);
    t_ctx_locked = measure_begin();
    return 1;
}

static CUresult ctx_leave(CUresult rc) {
    measure_end(t_ctx_locked);
    fgpu_leave();
    return rc;
}

/* ---------------------------------------------------------------- contexts */

static int primary_active(CUdevice dev) {
    fgpu_pfn_cuDevicePrimaryCtxGetState state = FGPU_REAL(cuDevicePrimaryCtxGetState);
    unsigned int flags;
    int active = 0;
    return state && state(dev, &flags, &active) == CUDA_SUCCESS && active;
}

/* The primary context is charged when a retain makes it active, once per activation. */
CUresult fgpu_policy_primary_ctx_retain(fgpu_sym id, CUcontext *pctx, CUdevice dev) {
    REAL_OR_FAIL(cuDevicePrimaryCtxRetain, id);
    if (!ctx_enter(dev))
        return real(pctx, dev);
    uint32_t d = (uint32_t)dev;
    int was_active = primary_active(dev);
    reading before = take_reading(d, 1);
    CUresult rc = real(pctx, dev);
    if (rc != CUDA_SUCCESS || was_active)
        return ctx_leave(rc);
    uint64_t bytes = taken(before, take_reading(d, 1), g_ctx_fallback);
    if (!charge(FGPU_ALLOC_CONTEXT, (uint64_t)(uintptr_t)*pctx, *pctx, d, bytes)) {
        fgpu_pfn_cuDevicePrimaryCtxRelease_v2 release = FGPU_REAL(cuDevicePrimaryCtxRelease_v2);
        if (release)
            release(dev);
        *pctx = NULL;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return ctx_leave(rc);
}

/* A created context: charge it, or destroy it again and refuse. */
static CUresult settle_created(CUresult rc, CUcontext *pctx, CUdevice dev, reading before) {
    if (rc != CUDA_SUCCESS)
        return ctx_leave(rc);
    uint64_t bytes = taken(before, take_reading((uint32_t)dev, 1), g_ctx_fallback);
    if (!charge(FGPU_ALLOC_CONTEXT, (uint64_t)(uintptr_t)*pctx, *pctx, (uint32_t)dev, bytes)) {
        fgpu_pfn_cuCtxDestroy_v2 destroy = FGPU_REAL(cuCtxDestroy_v2);
        if (destroy)
            destroy(*pctx);
        *pctx = NULL;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return ctx_leave(rc);
}

#define CREATE_AROUND(dev, call)                                             \
    do {                                                                     \
        if (!ctx_enter(dev))                                                 \
            return (call);                                                   \
        reading before_ = take_reading((uint32_t)(dev), 1);                  \
        return settle_created((call), pctx, (dev), before_);                 \
    } while (0)

CUresult fgpu_policy_ctx_create(fgpu_sym id, CUcontext *pctx, unsigned int flags, CUdevice dev) {
    REAL_OR_FAIL(cuCtxCreate_v2, id);
    CREATE_AROUND(dev, real(pctx, flags, dev));
}

CUresult fgpu_policy_ctx_create_v3(fgpu_sym id, CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                   int numParams, unsigned int flags, CUdevice dev) {
    REAL_OR_FAIL(cuCtxCreate_v3, id);
    CREATE_AROUND(dev, real(pctx, paramsArray, numParams, flags, dev));
}

CUresult fgpu_policy_ctx_create_v4(fgpu_sym id, CUcontext *pctx,
                                   CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                   CUdevice dev) {
    REAL_OR_FAIL(cuCtxCreate_v4, id);
    CREATE_AROUND(dev, real(pctx, ctxCreateParams, flags, dev));
}

/* ------------------------------------------------------- modules, libraries */

/*
 * Load a module or library (kind) with call, measured under the current
 * context; *handle is read only when the call succeeded.  A module lives as
 * long as its context; a library, loaded into every context, until unloaded.
 */
#define LOAD_AROUND(kind, handle, call, unload)                               \
    do {                                                                      \
        CUcontext ctx_;                                                       \
        uint32_t d_;                                                          \
        if (!fgpu_enter())                                                    \
            return (call);                                                    \
        if (!fgpu_current_device(&ctx_, &d_)) {                               \
            fgpu_leave();                                                     \
            return (call);                                                    \
        }                                                                     \
        int locked_ = measure_begin();                                        \
        reading before_ = take_reading(d_, 0);                                \
        CUresult rc_ = (call);                                                \
        if (rc_ == CUDA_SUCCESS) {                                            \
            uint64_t n_ = taken(before_, take_reading(d_, 0), 0);             \
            CUcontext owner_ = (kind) == FGPU_ALLOC_MODULE ? ctx_ : NULL;     \
            if (!charge((kind), (uint64_t)(uintptr_t)*(handle), owner_, d_, n_)) { \
                unload;                                                       \
                rc_ = CUDA_ERROR_OUT_OF_MEMORY;                               \
            }                                                                 \
        }                                                                     \
        measure_end(locked_);                                                 \
        fgpu_leave();                                                         \
        return rc_;                                                           \
    } while (0)

static void unload_module(CUmodule m) {
    fgpu_pfn_cuModuleUnload unload = FGPU_REAL(cuModuleUnload);
    if (unload)
        unload(m);
}

static void unload_library(CUlibrary l) {
    fgpu_pfn_cuLibraryUnload unload = FGPU_REAL(cuLibraryUnload);
    if (unload)
        unload(l);
}

CUresult fgpu_policy_module_load(fgpu_sym id, CUmodule *module, const char *fname) {
    REAL_OR_FAIL(cuModuleLoad, id);
    LOAD_AROUND(FGPU_ALLOC_MODULE, module, real(module, fname), unload_module(*module));
}

CUresult fgpu_policy_module_load_data(fgpu_sym id, CUmodule *module, const void *image) {
    REAL_OR_FAIL(cuModuleLoadData, id);
    LOAD_AROUND(FGPU_ALLOC_MODULE, module, real(module, image), unload_module(*module));
}

CUresult fgpu_policy_module_load_data_ex(fgpu_sym id, CUmodule *module, const void *image,
                                         unsigned int numOptions, CUjit_option *options,
                                         void **optionValues) {
    REAL_OR_FAIL(cuModuleLoadDataEx, id);
    LOAD_AROUND(FGPU_ALLOC_MODULE, module, real(module, image, numOptions, options, optionValues),
                unload_module(*module));
}

CUresult fgpu_policy_library_load_data(fgpu_sym id, CUlibrary *library, const void *code,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues,
                                       unsigned int numLibraryOptions) {
    REAL_OR_FAIL(cuLibraryLoadData, id);
    LOAD_AROUND(FGPU_ALLOC_LIBRARY, library,
                real(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                     libraryOptionValues, numLibraryOptions),
                unload_library(*library));
}

CUresult fgpu_policy_library_load_file(fgpu_sym id, CUlibrary *library, const char *fileName,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues,
                                       unsigned int numLibraryOptions) {
    REAL_OR_FAIL(cuLibraryLoadFromFile, id);
    LOAD_AROUND(FGPU_ALLOC_LIBRARY, library,
                real(library, fileName, jitOptions, jitOptionsValues, numJitOptions,
                     libraryOptions, libraryOptionValues, numLibraryOptions),
                unload_library(*library));
}

/* Unloads give the measured bytes back once the driver has unloaded. */
CUresult fgpu_policy_module_unload(fgpu_sym id, CUmodule hmod) {
    REAL_OR_FAIL(cuModuleUnload, id);
    RELEASE_AROUND(FGPU_ALLOC_MODULE, (uintptr_t)hmod, real(hmod));
}

CUresult fgpu_policy_library_unload(fgpu_sym id, CUlibrary library) {
    REAL_OR_FAIL(cuLibraryUnload, id);
    RELEASE_AROUND(FGPU_ALLOC_LIBRARY, (uintptr_t)library, real(library));
}
