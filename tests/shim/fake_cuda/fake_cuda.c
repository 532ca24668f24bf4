/*
 * fake_cuda.c - a fake libcuda.so.1 for testing the shim without a GPU.
 *
 * Built by tests/shim/conftest.py with -Wl,-Bsymbolic (its own references bind
 * to itself, as the real driver's do) and soname libcuda.so.1.
 *
 * Environment:
 *   FAKE_CUDA_STATE      file shared by every process using one fake GPU (created if
 *                        missing); layout struct fake_shared, read by the tests
 *   FAKE_CUDA_TOTAL_MEM  bytes per device (default 16 GiB)
 *   FAKE_CUDA_DEVICES    device count (default 2)
 *   FAKE_CUDA_TENANT     0..7: whose busy time a kernel adds to (a "container")
 *   FAKE_CUDA_MEMSET_NS  how long a cuMemsetD8Async holds the device, as a kernel would
 *                        (default 0: returns at once)
 *   FAKE_CUDA_EMPTY_KERNEL_NS  how long a kernel launched with no params (an empty
 *                        kernel: a function from cuModuleGetFunction) holds the device
 *                        (default 0: it is only counted)
 *   FAKE_CUDA_SWITCH_NS  what the device loses when it passes from one tenant's kernel to
 *                        another's (default 0), as a time-sliced GPU loses switching
 *                        contexts: held, outside both kernels' events and busy time
 *   FAKE_CUDA_NO_JIT     when set, cuModuleLoadData refuses PTX text (as a driver that
 *                        cannot compile it for the card does)
 *   FAKE_CUDA_CTX_BYTES  device memory a context takes while it lives (default 0): the
 *                        primary context from its first retain to its last release or
 *                        reset, a created one until destroyed; the driver's cuMemGetInfo
 *                        (and the fake NVML) show it as used, as a real GPU does
 *   FAKE_CUDA_MODULE_BYTES  the same for each loaded module or library (default 0)
 *   FAKE_CUDA_CTX_DELAY_NS  how long creating a context or loading a module takes (default
 *                        0): half its bytes are taken at the start, the rest at the end, as
 *                        a real driver's memory grows while it builds a context, so another
 *                        process measuring meanwhile sees part of it
 *   FAKE_CUDA_SM_COUNTS  multiprocessors per device, comma-separated (default 80 each);
 *                        device N's PCI bus id is 00000000:<N+1, two hex digits>:00.0
 *   FAKE_CUDA_HIDDEN     a base name whose look-up returns a private (non-exported)
 *                        allocation function, as a newer driver might: the shim cannot
 *                        swap it and must report the escape
 *
 * Kernels: kernelParams[0] (cuLaunchKernel*) or the CUgraphExec handle
 * (cuGraphLaunch) points at a uint64 duration in ns.  A kernel with a duration
 * holds the device (a FIFO ticket lock shared through FAKE_CUDA_STATE) for that
 * long, so kernels of all processes run one at a time; a duration of 0 or no
 * params only counts the launch.
 *
 * Events are stamped (CLOCK_MONOTONIC) when the device would process them.  On
 * a time-sliced GPU an event recorded just before a kernel sits in the
 * context's channel in front of it and is processed when the context gets the
 * GPU, right before the kernel starts; so here an event recorded less than
 * 100 us before a launch of the same process is stamped when that kernel gets
 * the device, and any other event when it was recorded (launches are
 * synchronous: the stream is idle by then).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_min.h"
#include "fake_shared.h"

#define MAX_DEV FAKE_MAX_DEV
#define MAX_TENANT FAKE_MAX_TENANT

struct fake_ctx {
    int dev;
    int refs;
};

static struct fake_shared g_private;
static struct fake_shared *g_sh = &g_private;
static uint64_t g_total = 16ULL << 30;
static uint64_t g_ctx_bytes;
static uint64_t g_module_bytes;
static int g_ndev = 2;
static int g_tenant;
static uint64_t g_memset_ns;
static uint64_t g_empty_ns;
static uint64_t g_switch_ns;
static int g_no_jit;
static uint64_t g_ctx_delay_ns;
static int g_initialised;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct fake_ctx g_ctx[MAX_DEV];
static __thread struct fake_ctx *t_cur;
static _Atomic uint64_t g_seq;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void setup(void) {
    const char *s = getenv("FAKE_CUDA_TOTAL_MEM");
    if (s)
        g_total = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_DEVICES");
    if (s)
        g_ndev = atoi(s) < 1 ? 1 : (atoi(s) > MAX_DEV ? MAX_DEV : atoi(s));
    s = getenv("FAKE_CUDA_MEMSET_NS");
    if (s)
        g_memset_ns = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_EMPTY_KERNEL_NS");
    if (s)
        g_empty_ns = strtoull(s, NULL, 10);
    g_no_jit = getenv("FAKE_CUDA_NO_JIT") != NULL;
    s = getenv("FAKE_CUDA_SWITCH_NS");
    if (s)
        g_switch_ns = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_CTX_BYTES");
    if (s)
        g_ctx_bytes = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_MODULE_BYTES");
    if (s)
        g_module_bytes = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_CTX_DELAY_NS");
    if (s)
        g_ctx_delay_ns = strtoull(s, NULL, 10);
    s = getenv("FAKE_CUDA_TENANT");
    if (s)
        g_tenant = atoi(s) & (MAX_TENANT - 1);
    for (int d = 0; d < MAX_DEV; d++)
        g_ctx[d].dev = d;
    s = getenv("FAKE_CUDA_STATE");
    if (s && *s) {
        int fd = open(s, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0) {
            if (ftruncate(fd, sizeof(struct fake_shared)) == 0) {
                void *m = mmap(NULL, sizeof(struct fake_shared), PROT_READ | PROT_WRITE,
                               MAP_SHARED, fd, 0);
                if (m != MAP_FAILED)
                    g_sh = m;
            }
            close(fd);
        }
    }
}

static void ensure(void) { pthread_once(&g_once, setup); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Take bytes on device d the way a driver builds an object: half, the delay, the rest. */
static void grow(int d, uint64_t bytes) {
    uint64_t half = bytes / 2;
    atomic_fetch_add(&g_sh->in_use[d], half);
    if (g_ctx_delay_ns) {
        struct timespec ts = {(time_t)(g_ctx_delay_ns / 1000000000ULL),
                              (long)(g_ctx_delay_ns % 1000000000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
        }
    }
    atomic_fetch_add(&g_sh->in_use[d], bytes - half);
}

/* ------------------------------------------------------------------ device */

CUresult cuInit(unsigned int flags) {
    (void)flags;
    ensure();
    g_initialised = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v) {
    *v = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) {
    ensure();
    *n = g_ndev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    ensure();
    if (!g_initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

/* The multiprocessor count (attribute 16, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) of
 * FAKE_CUDA_SM_COUNTS; any other attribute is 0. */
CUresult cuDeviceGetAttribute(int *v, int attrib, CUdevice d) {
    ensure();
    if (!g_initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= g_ndev || !v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 0;
    if (attrib != 16)
        return CUDA_SUCCESS;
    *v = 80;
    const char *s = getenv("FAKE_CUDA_SM_COUNTS");
    for (int i = 0; s && *s; i++) {
        char *end;
        long n = strtol(s, &end, 10);
        if (i == d) {
            *v = (int)n;
            break;
        }
        s = *end == ',' ? end + 1 : end;
    }
    return CUDA_SUCCESS;
}

/* Device N sits on PCI bus N+1 (domain and device 0), in NVML's or the short form. */
CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *id) {
    ensure();
    if (!g_initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    unsigned int domain, bus, dev, fn;
    if (!d || !id || sscanf(id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (domain != 0 || dev != 0 || fn != 0 || bus < 1 || (int)bus > g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdevice)bus - 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    strncpy(name, "Fake GPU", (size_t)len);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    ensure();
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = g_total;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d) {
    size_t b;
    CUresult rc = cuDeviceTotalMem_v2(&b, d);
    if (rc == CUDA_SUCCESS)
        *bytes = b > UINT_MAX ? UINT_MAX : (unsigned int)b;
    return rc;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
    ensure();
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    if (g_ctx[d].refs++ == 0)
        grow(d, g_ctx_bytes);
    pthread_mutex_unlock(&g_mu);
    *pctx = (CUcontext)&g_ctx[d];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    pthread_mutex_lock(&g_mu);
    *active = g_ctx[d].refs > 0;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    if (g_ctx[d].refs > 0 && --g_ctx[d].refs == 0)
        atomic_fetch_sub(&g_sh->in_use[d], g_ctx_bytes);
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    if (g_ctx[d].refs > 0)
        atomic_fetch_sub(&g_sh->in_use[d], g_ctx_bytes);
    g_ctx[d].refs = 0;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    t_cur = (struct fake_ctx *)ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    *pctx = (CUcontext)t_cur;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *d) {
    if (!t_cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = t_cur->dev;
    return CUDA_SUCCESS;
}

/* Created contexts are malloc'd; destroying a primary one (allowed by the fake) frees nothing. */
static int is_primary(const struct fake_ctx *c) { return c >= g_ctx && c < g_ctx + MAX_DEV; }

static CUresult ctx_create(CUcontext *pctx, CUdevice d) {
    ensure();
    if (d < 0 || d >= g_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *c = malloc(sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = d;
    c->refs = 1;
    grow(d, g_ctx_bytes);
    t_cur = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d) {
    (void)flags;
    return ctx_create(pctx, d);
}
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice d) {
    (void)params, (void)flags;
    return ctx_create(pctx, d);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (t_cur == c)
        t_cur = NULL;
    if (c && !is_primary(c)) {
        atomic_fetch_sub(&g_sh->in_use[c->dev], g_ctx_bytes);
        free(c);
    }
    return CUDA_SUCCESS;
}

/* Modules and libraries: a malloc'd record of their device, holding g_module_bytes there. */
static CUresult load(void **out) {
    int dev = t_cur ? t_cur->dev : -1;
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    int *rec = malloc(sizeof(*rec));
    if (!rec)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *rec = dev;
    grow(dev, g_module_bytes);
    *out = rec;
    return CUDA_SUCCESS;
}

static CUresult unload(void *h) {
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_sub(&g_sh->in_use[*(int *)h], g_module_bytes);
    free(h);
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    if (g_no_jit && image && strncmp(image, ".version", 8) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return load((void **)m);
}
/* Any name is an empty kernel of the module (its launches take FAKE_CUDA_EMPTY_KERNEL_NS). */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    if (!f || !m || !name)
        return CUDA_ERROR_INVALID_VALUE;
    *f = (CUfunction)m;
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) { return unload(m); }
CUresult cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *jo, void **jv,
                           unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo) {
    (void)code, (void)jo, (void)jv, (void)njo, (void)lo, (void)lv, (void)nlo;
    return load((void **)l);
}
CUresult cuLibraryUnload(CUlibrary l) { return unload(l); }

CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "fake error";
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ memory */

/* Fake device pointers carry their device and size: dev:4 | seq:20 | size:40. */
static uint64_t encode(int dev, uint64_t size) {
    uint64_t seq = (atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed) + 1) & 0xFFFFF;
    return ((uint64_t)dev << 60) | (seq << 40) | size;
}

static int cur_dev(void) { return t_cur ? t_cur->dev : -1; }

static CUresult take(int dev, uint64_t size) {
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0 || size >= (1ULL << 40))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cur = atomic_load(&g_sh->in_use[dev]);
    do {
        if (cur + size > g_total)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } while (!atomic_compare_exchange_weak(&g_sh->in_use[dev], &cur, cur + size));
    uint64_t peak = atomic_load(&g_sh->peak[dev]);
    while (cur + size > peak && !atomic_compare_exchange_weak(&g_sh->peak[dev], &peak, cur + size)) {
    }
    return CUDA_SUCCESS;
}

static CUresult give(uint64_t handle) {
    int dev = (int)(handle >> 60);
    uint64_t size = handle & ((1ULL << 40) - 1);
    if (handle == 0 || dev >= MAX_DEV)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_sub(&g_sh->in_use[dev], size);
    return CUDA_SUCCESS;
}

static CUresult alloc(CUdeviceptr *p, uint64_t size) {
    int dev = cur_dev();
    CUresult rc = take(dev, size);
    if (rc == CUDA_SUCCESS)
        *p = encode(dev, size);
    return rc;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return alloc(p, n); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int f) {
    (void)f;
    return alloc(p, n);
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
    (void)s;
    return alloc(p, n);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) {
    (void)s;
    return alloc(p, n);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    (void)pool;
    (void)s;
    return alloc(p, n);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    (void)pool;
    (void)s;
    return alloc(p, n);
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e) {
    (void)e;
    size_t pt = (w + 511) & ~(size_t)511;
    CUresult rc = alloc(p, (uint64_t)pt * h);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}
CUresult cuMemFree_v2(CUdeviceptr p) { return give(p); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    return give(p);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    (void)s;
    return give(p);
}
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
    (void)flags;
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take(prop->location.id, n);
    if (rc == CUDA_SUCCESS)
        *h = encode(prop->location.id, n);
    return rc;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return give(h); }

/* Arrays: the handle is a malloc'd record of its device pointer. */
static uint64_t fmt_bytes(CUarray_format f) {
    return (f == CU_AD_FORMAT_UNSIGNED_INT8 || f == CU_AD_FORMAT_SIGNED_INT8)     ? 1
           : (f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 ||
              f == CU_AD_FORMAT_HALF)                                             ? 2
                                                                                  : 4;
}

static CUresult array_of(void **out, uint64_t bytes) {
    CUdeviceptr p;
    CUresult rc = alloc(&p, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t *rec = malloc(sizeof(*rec));
    *rec = p;
    *out = rec;
    return CUDA_SUCCESS;
}

static CUresult array_free(void *h) {
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = give(*(uint64_t *)h);
    free(h);
    return rc;
}

static uint64_t one(uint64_t v) { return v ? v : 1; }

CUresult cuArrayCreate_v2(CUarray *h, const CUDA_ARRAY_DESCRIPTOR *d) {
    return array_of((void **)h, one(d->Width) * one(d->Height) * fmt_bytes(d->Format) *
                                    one(d->NumChannels));
}
CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    return array_of((void **)h, one(d->Width) * one(d->Height) * one(d->Depth) *
                                    fmt_bytes(d->Format) * one(d->NumChannels));
}
CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned int levels) {
    uint64_t n = 0;
    for (unsigned int l = 0; l < one(levels); l++)
        n += one(d->Width >> l) * one(d->Height >> l) * one(d->Depth >> l) * fmt_bytes(d->Format) *
             one(d->NumChannels);
    return array_of((void **)h, n);
}
CUresult cuArrayDestroy(CUarray h) { return array_free(h); }
CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) { return array_free(h); }

/* Legacy v1 (32-bit device pointers): a small table of sizes. */
static uint64_t g_v1[4096];

CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int n) {
    CUdeviceptr full;
    CUresult rc = alloc(&full, n);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_mu);
    for (unsigned int i = 1; i < 4096; i++) {
        if (!g_v1[i]) {
            g_v1[i] = full;
            pthread_mutex_unlock(&g_mu);
            *p = i << 8;
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_mu);
    give(full);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h,
                         unsigned int e) {
    (void)e;
    unsigned int pt = (w + 511) & ~511u;
    CUresult rc = cuMemAlloc(p, pt * h);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}
CUresult cuMemFree(CUdeviceptr_v1 p) {
    unsigned int i = p >> 8;
    if (i == 0 || i >= 4096)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    uint64_t full = g_v1[i];
    g_v1[i] = 0;
    pthread_mutex_unlock(&g_mu);
    return full ? give(full) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t used = atomic_load(&g_sh->in_use[dev]);
    *total = g_total;
    *free_ = used < g_total ? g_total - used : 0;
    return CUDA_SUCCESS;
}
CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    size_t f, t;
    CUresult rc = cuMemGetInfo_v2(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free_ = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return rc;
}

/* ------------------------------------------------------------------ launches */

static void device_lock(void) {
    uint32_t me = atomic_fetch_add(&g_sh->ticket, 1);
    for (;;) {
        uint32_t cur = atomic_load(&g_sh->serving);
        if (cur == me)
            return;
        syscall(SYS_futex, &g_sh->serving, FUTEX_WAIT, cur, NULL, NULL, 0);
    }
}

static void device_unlock(void) {
    atomic_fetch_add(&g_sh->serving, 1);
    syscall(SYS_futex, &g_sh->serving, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

struct fake_event {
    int64_t t;     /* stamp, once resolved */
    int64_t t_rec; /* when cuEventRecord was called */
    int state;     /* 0 never recorded, 1 waiting for the device, 2 stamped */
};

#define MAX_WAITING 64
#define STAMP_AHEAD_NS 100000
static struct fake_event *g_waiting[MAX_WAITING];
static int g_nwaiting;
static _Atomic int g_any_waiting; /* g_nwaiting != 0, readable without the lock */
static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;

/* Caller holds g_ev_mu. */
static void forget_waiting(struct fake_event *ev) {
    for (int i = 0; i < g_nwaiting; i++)
        if (g_waiting[i] == ev) {
            g_waiting[i] = g_waiting[--g_nwaiting];
            return;
        }
}

/* A kernel launched at call_t got the device at start: stamp the events recorded just before. */
static void stamp_waiting(int64_t call_t, int64_t start) {
    pthread_mutex_lock(&g_ev_mu);
    for (int i = 0; i < g_nwaiting; i++) {
        struct fake_event *ev = g_waiting[i];
        ev->t = call_t - ev->t_rec < STAMP_AHEAD_NS ? start : ev->t_rec;
        ev->state = 2;
    }
    g_nwaiting = 0;
    atomic_store_explicit(&g_any_waiting, 0, memory_order_relaxed);
    pthread_mutex_unlock(&g_ev_mu);
}

static CUresult run_kernel(const uint64_t *duration) {
    atomic_fetch_add_explicit(&g_sh->launches, 1, memory_order_relaxed);
    if (!duration || *duration == 0) {
        if (atomic_load_explicit(&g_any_waiting, memory_order_relaxed)) {
            int64_t t = now_ns();
            stamp_waiting(t, t);
        }
        return CUDA_SUCCESS;
    }
    int64_t call_t = now_ns();
    device_lock();
    int64_t locked_t = now_ns();
    uint32_t was = atomic_exchange(&g_sh->last_tenant, (uint32_t)g_tenant + 1);
    if (g_switch_ns && was != 0 && was != (uint32_t)g_tenant + 1) {
        struct timespec sw = {.tv_sec = (time_t)(g_switch_ns / 1000000000ULL),
                              .tv_nsec = (long)(g_switch_ns % 1000000000ULL)};
        nanosleep(&sw, NULL);
    }
    int64_t t0 = now_ns();
    stamp_waiting(call_t, t0);
    struct timespec ts = {.tv_sec = (time_t)(*duration / 1000000000ULL),
                          .tv_nsec = (long)(*duration % 1000000000ULL)};
    nanosleep(&ts, NULL);
    int64_t t1 = now_ns();
    atomic_fetch_add(&g_sh->busy_ns[g_tenant], (uint64_t)(t1 - t0));
    atomic_fetch_add(&g_sh->kernels[g_tenant], 1);
    atomic_fetch_add(&g_sh->held_ns, (uint64_t)(t1 - locked_t));
    device_unlock();
    return CUDA_SUCCESS;
}

static const uint64_t *params_duration(void **params) {
    return params ? (const uint64_t *)params[0] : (g_empty_ns ? &g_empty_ns : NULL);
}

#define LAUNCH_ARGS                                                                        \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,      \
        unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params
#define UNUSED_LAUNCH (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, \
                      (void)shmem, (void)s

CUresult cuLaunchKernel(LAUNCH_ARGS, void **extra) {
    UNUSED_LAUNCH, (void)extra;
    return run_kernel(params_duration(params));
}
CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **extra) {
    UNUSED_LAUNCH, (void)extra;
    return run_kernel(params_duration(params));
}
CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS) {
    UNUSED_LAUNCH;
    return run_kernel(params_duration(params));
}
CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS) {
    UNUSED_LAUNCH;
    return run_kernel(params_duration(params));
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)c, (void)f, (void)extra;
    return run_kernel(params_duration(params));
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
                               void **extra) {
    (void)c, (void)f, (void)extra;
    return run_kernel(params_duration(params));
}
CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    (void)s;
    return run_kernel((const uint64_t *)g);
}
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    (void)s;
    return run_kernel((const uint64_t *)g);
}

/* A memset is a kernel of the driver's own: it holds the device as one would. */
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
    (void)p, (void)v, (void)n, (void)s;
    return run_kernel(g_memset_ns ? &g_memset_ns : NULL);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
    return cuMemsetD8Async(p, v, n, s);
}

/* ------------------------------------------------------------------ events, streams */

CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    *e = (CUevent)calloc(1, sizeof(struct fake_event));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuEventDestroy_v2(CUevent e) {
    pthread_mutex_lock(&g_ev_mu);
    forget_waiting((struct fake_event *)e);
    pthread_mutex_unlock(&g_ev_mu);
    free(e);
    return CUDA_SUCCESS;
}
static CUresult record(CUevent e) {
    struct fake_event *ev = (struct fake_event *)e;
    if (!ev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ev_mu);
    forget_waiting(ev);
    ev->t_rec = now_ns();
    ev->state = 1;
    if (g_nwaiting == MAX_WAITING) { /* nobody launched: the oldest is stamped as recorded */
        g_waiting[0]->t = g_waiting[0]->t_rec;
        g_waiting[0]->state = 2;
        g_waiting[0] = g_waiting[--g_nwaiting];
    }
    g_waiting[g_nwaiting++] = ev;
    atomic_store_explicit(&g_any_waiting, 1, memory_order_relaxed);
    pthread_mutex_unlock(&g_ev_mu);
    return CUDA_SUCCESS;
}
/* Stamp an event no launch followed (the stream was idle); 0 if never recorded. */
static int resolve(struct fake_event *ev) {
    pthread_mutex_lock(&g_ev_mu);
    if (ev->state == 1) {
        forget_waiting(ev);
        ev->t = ev->t_rec;
        ev->state = 2;
    }
    int ok = ev->state == 2;
    pthread_mutex_unlock(&g_ev_mu);
    return ok;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
    (void)s;
    return record(e);
}
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
    (void)s;
    return record(e);
}
CUresult cuEventQuery(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuEventSynchronize(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
    struct fake_event *x = (struct fake_event *)a, *y = (struct fake_event *)b;
    if (!x || !y || !resolve(x) || !resolve(y))
        return CUDA_ERROR_INVALID_VALUE;
    *ms = (float)((double)(y->t - x->t) / 1e6);
    return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    return cuEventElapsedTime_v2(ms, a, b);
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
    (void)s;
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) {
    return cuStreamIsCapturing(s, st);
}
CUresult cuStreamSynchronize(CUstream s) {
    (void)s;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ cuGetProcAddress */

typedef struct proc {
    const char *name; /* base name, as cudart asks */
    int version;      /* first CUDA version this entry serves */
    int ptsz;         /* per-thread-default-stream variant */
    void *fn;
} proc;

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

#define P(n, v, fn) {n, v, 0, (void *)&fn}
#define PT(n, v, fn) {n, v, 1, (void *)&fn}
static const proc k_procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    P("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuModuleLoadData", 2000, cuModuleLoadData),
    P("cuModuleUnload", 2000, cuModuleUnload),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction),
    P("cuLibraryLoadData", 12000, cuLibraryLoadData),
    P("cuLibraryUnload", 12000, cuLibraryUnload),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuMemAlloc", 2000, cuMemAlloc),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemAllocPitch", 2000, cuMemAllocPitch),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    P("cuMemFree", 2000, cuMemFree),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemGetInfo", 2000, cuMemGetInfo),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuArrayCreate", 3020, cuArrayCreate_v2),
    P("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    P("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    P("cuArrayDestroy", 2000, cuArrayDestroy),
    P("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    P("cuLaunchKernel", 4000, cuLaunchKernel),
    PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    PT("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz),
    P("cuGraphLaunch", 10000, cuGraphLaunch),
    PT("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuEventRecord", 2000, cuEventRecord),
    PT("cuEventRecord", 7000, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, cuEventElapsedTime),
    P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async),
    PT("cuMemsetD8Async", 7000, cuMemsetD8Async_ptsz),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing_ptsz),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

static CUresult hidden_alloc(CUdeviceptr *p, size_t n) { return alloc(p, n); }

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    const char *hidden = getenv("FAKE_CUDA_HIDDEN");
    if (hidden && strcmp(hidden, symbol) == 0) {
        *pfn = (void *)&hidden_alloc;
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    const proc *best = NULL;
    int known = 0;
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (size_t i = 0; i < sizeof(k_procs) / sizeof(k_procs[0]); i++) {
        const proc *p = &k_procs[i];
        if (strcmp(p->name, symbol) != 0)
            continue;
        known = 1;
        if (p->version > cudaVersion || (p->ptsz && !want_ptsz))
            continue;
        /* Prefer the per-thread variant when asked for, then the newest version. */
        if (!best || (p->ptsz > best->ptsz) ||
            (p->ptsz == best->ptsz && p->version > best->version))
            best = p;
    }
    if (status)
        *status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
                  : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                          : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!best) {
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
