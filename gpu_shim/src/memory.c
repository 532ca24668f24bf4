/*
 * memory.c - the memory slice.  Every allocation path reserves its bytes in
 * the shared region with a compare-and-swap BEFORE the driver is asked and
 * rolls the reservation back when the driver fails; every free gives them
 * back.  Over the limit the answer is always CUDA_ERROR_OUT_OF_MEMORY.
 * cuMemGetInfo / cuDeviceTotalMem report the slice and never fail because of it.
 */
#define _GNU_SOURCE
#include "allocmap.h"
#include "shim.h"

/* One accounted call: the device charged and the reservation held. */
typedef struct acct {
    CUcontext ctx;
    uint32_t dev;
    uint32_t slot;
    uint64_t bytes;
} acct;

/*
 * Start accounting an allocation on the current context's device.  Returns 1
 * when the caller must finish with acct_commit/acct_abort (the re-entrancy
 * guard is then held), 0 to pass the call through untouched.
 */
static int acct_begin(acct *a) {
    if (!fgpu_enter())
        return 0;
    if (!fgpu_current_device(&a->ctx, &a->dev)) {
        fgpu_leave(); /* no context: the driver will report its own error */
        return 0;
    }
    a->slot = fgpu_slot();
    a->bytes = 0;
    return 1;
}

/* The memory limit of a's device, from this process's copy of the slice (0 = none). */
static inline uint64_t limit_of(const acct *a) { return fgpu_g.s->dev[a->dev].limit; }

/* Reserve bytes; 0 (guard released) when over the limit. */
static int acct_reserve(acct *a, uint64_t bytes) {
    if (!fgpu_mem_reserve(fgpu_g.l, limit_of(a), a->slot, a->dev, bytes, fgpu_g.pid)) {
        FGPU_DEBUG("refused %llu bytes on device %u", (unsigned long long)bytes, a->dev);
        fgpu_leave();
        return 0;
    }
    a->bytes += bytes;
    return 1;
}

/* Finish: remember the allocation when rc is success, else roll back. */
static CUresult acct_commit(acct *a, CUresult rc, uint32_t kind, uint64_t key) {
    if (rc == CUDA_SUCCESS) {
        fgpu_alloc rec = {
            .key = key, .bytes = a->bytes, .ctx = a->ctx, .kind = kind, .device = a->dev};
        if (fgpu_allocmap_put(&rec) != 0)
            FGPU_DEBUG("allocation map full: %llu bytes will stay counted",
                       (unsigned long long)a->bytes);
    } else if (a->bytes) {
        fgpu_mem_unreserve(fgpu_g.l, a->slot, a->dev, a->bytes);
    }
    fgpu_leave();
    return rc;
}

void fgpu_give_back(const fgpu_alloc *rec) {
    fgpu_mem_unreserve(fgpu_g.l, fgpu_slot(), rec->device, rec->bytes);
}

/*
 * Allocations of a size known before the call: reserve n, call, and remember
 * the result as (kind, key); key is read only when the call succeeded.
 */
#define ACCOUNT_AROUND(kind, n, call, key)                                   \
    do {                                                                     \
        acct a_;                                                             \
        if (!acct_begin(&a_))                                                \
            return (call);                                                   \
        if (!acct_reserve(&a_, (n)))                                         \
            return CUDA_ERROR_OUT_OF_MEMORY;                                 \
        CUresult rc_ = (call);                                               \
        return acct_commit(&a_, rc_, (kind),                                 \
                           rc_ == CUDA_SUCCESS ? (uint64_t)(key) : 0);       \
    } while (0)

/* Device pointers: reserve n, call, record *dptr. */
#define ALLOC_AROUND(n, dptr, call) ACCOUNT_AROUND(FGPU_ALLOC_PTR, (n), (call), *(dptr))

/* ------------------------------------------------------------ allocations */

CUresult fgpu_policy_mem_alloc(fgpu_sym id, CUdeviceptr *dptr, size_t bytesize) {
    REAL_OR_FAIL(cuMemAlloc_v2, id);
    ALLOC_AROUND(bytesize, dptr, real(dptr, bytesize));
}

CUresult fgpu_policy_mem_alloc_v1(fgpu_sym id, CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    REAL_OR_FAIL(cuMemAlloc, id);
    ALLOC_AROUND(bytesize, dptr, real(dptr, bytesize));
}

CUresult fgpu_policy_mem_alloc_managed(fgpu_sym id, CUdeviceptr *dptr, size_t bytesize,
                                       unsigned int flags) {
    REAL_OR_FAIL(cuMemAllocManaged, id);
    ALLOC_AROUND(bytesize, dptr, real(dptr, bytesize, flags));
}

CUresult fgpu_policy_mem_alloc_async(fgpu_sym id, CUdeviceptr *dptr, size_t bytesize,
                                     CUstream hStream) {
    REAL_OR_FAIL(cuMemAllocAsync, id);
    ALLOC_AROUND(bytesize, dptr, real(dptr, bytesize, hStream));
}

CUresult fgpu_policy_mem_alloc_from_pool(fgpu_sym id, CUdeviceptr *dptr, size_t bytesize,
                                         CUmemoryPool pool, CUstream hStream) {
    REAL_OR_FAIL(cuMemAllocFromPoolAsync, id);
    ALLOC_AROUND(bytesize, dptr, real(dptr, bytesize, pool, hStream));
}

/* Pitch is chosen by the driver: reserve an estimate, then settle on pitch x height. */
static CUresult settle_pitch(acct *a, CUresult rc, uint64_t actual, CUdeviceptr ptr) {
    if (rc != CUDA_SUCCESS)
        return acct_commit(a, rc, FGPU_ALLOC_PTR, 0);
    if (actual > a->bytes) {
        uint64_t more = actual - a->bytes;
        if (!fgpu_mem_reserve(fgpu_g.l, limit_of(a), a->slot, a->dev, more, fgpu_g.pid)) {
            fgpu_pfn_cuMemFree_v2 fr = FGPU_REAL(cuMemFree_v2);
            if (fr)
                fr(ptr);
            fgpu_mem_unreserve(fgpu_g.l, a->slot, a->dev, a->bytes);
            fgpu_leave();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (actual < a->bytes) {
        fgpu_mem_unreserve(fgpu_g.l, a->slot, a->dev, a->bytes - actual);
    }
    a->bytes = actual;
    return acct_commit(a, rc, FGPU_ALLOC_PTR, (uint64_t)ptr);
}

static uint64_t pitch_estimate(uint64_t width, uint64_t height) {
    return ((width + 511) & ~(uint64_t)511) * height;
}

/* Pitched allocations in either width: the variants differ only in their types. */
#define PITCH_AROUND(dptr, pPitch, width, height, call)                      \
    do {                                                                     \
        acct a_;                                                             \
        if (!acct_begin(&a_))                                                \
            return (call);                                                   \
        if (!acct_reserve(&a_, pitch_estimate((width), (height))))           \
            return CUDA_ERROR_OUT_OF_MEMORY;                                 \
        CUresult rc_ = (call);                                               \
        uint64_t pitch_ = rc_ == CUDA_SUCCESS ? (uint64_t)*(pPitch) : 0;     \
        return settle_pitch(&a_, rc_, pitch_ * (height),                     \
                            rc_ == CUDA_SUCCESS ? *(dptr) : 0);              \
    } while (0)

CUresult fgpu_policy_mem_alloc_pitch(fgpu_sym id, CUdeviceptr *dptr, size_t *pPitch,
                                     size_t WidthInBytes, size_t Height,
                                     unsigned int ElementSizeBytes) {
    REAL_OR_FAIL(cuMemAllocPitch_v2, id);
    PITCH_AROUND(dptr, pPitch, WidthInBytes, Height,
                 real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

CUresult fgpu_policy_mem_alloc_pitch_v1(fgpu_sym id, CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                        unsigned int WidthInBytes, unsigned int Height,
                                        unsigned int ElementSizeBytes) {
    REAL_OR_FAIL(cuMemAllocPitch, id);
    PITCH_AROUND(dptr, pPitch, WidthInBytes, Height,
                 real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

CUresult fgpu_policy_mem_create(fgpu_sym id, CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags) {
    REAL_OR_FAIL(cuMemCreate, id);
    /* Only device memory is sliced; host and host-NUMA locations pass. */
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= FGPU_MAX_DEVICES || !fgpu_enter())
        return real(handle, size, prop, flags);
    acct a = {.ctx = NULL, .dev = (uint32_t)prop->location.id, .slot = fgpu_slot(), .bytes = 0};
    CUcontext ctx;
    uint32_t cur;
    if (fgpu_current_device(&ctx, &cur))
        a.ctx = ctx;
    if (!acct_reserve(&a, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(handle, size, prop, flags);
    return acct_commit(&a, rc, FGPU_ALLOC_HANDLE, rc == CUDA_SUCCESS ? *handle : 0);
}

/* Bytes per element of an array format (block-compressed and video formats: 4, approximate). */
static uint64_t format_bytes(CUarray_format f) {
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

static uint64_t at_least_one(uint64_t v) { return v ? v : 1; }

static uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int level) {
    uint64_t w = at_least_one(d->Width >> level);
    uint64_t h = d->Height ? at_least_one(d->Height >> level) : 1;
    /* Layers and cube faces are not halved by mip levels. */
    uint64_t depth = d->Depth;
    if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)))
        depth >>= level;
    return w * h * at_least_one(depth) * format_bytes(d->Format) * at_least_one(d->NumChannels);
}

static uint64_t array_bytes(const CUDA_ARRAY_DESCRIPTOR *d) {
    return at_least_one(d->Width) * at_least_one(d->Height) * format_bytes(d->Format) *
           at_least_one(d->NumChannels);
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    uint64_t n = 0;
    for (unsigned int lvl = 0; lvl < at_least_one(levels) && lvl < 64; lvl++)
        n += array3d_bytes(d, lvl);
    return n;
}

CUresult fgpu_policy_array_create(fgpu_sym id, CUarray *pHandle,
                                  const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
    REAL_OR_FAIL(cuArrayCreate_v2, id);
    if (!pAllocateArray)
        return real(pHandle, pAllocateArray);
    ACCOUNT_AROUND(FGPU_ALLOC_ARRAY, array_bytes(pAllocateArray), real(pHandle, pAllocateArray),
                   (uintptr_t)*pHandle);
}

CUresult fgpu_policy_array3d_create(fgpu_sym id, CUarray *pHandle,
                                    const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
    REAL_OR_FAIL(cuArray3DCreate_v2, id);
    if (!pAllocateArray)
        return real(pHandle, pAllocateArray);
    ACCOUNT_AROUND(FGPU_ALLOC_ARRAY, array3d_bytes(pAllocateArray, 0),
                   real(pHandle, pAllocateArray), (uintptr_t)*pHandle);
}

CUresult fgpu_policy_mipmapped_array_create(fgpu_sym id, CUmipmappedArray *pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                            unsigned int numMipmapLevels) {
    REAL_OR_FAIL(cuMipmappedArrayCreate, id);
    if (!pMipmappedArrayDesc)
        return real(pHandle, pMipmappedArrayDesc, numMipmapLevels);
    ACCOUNT_AROUND(FGPU_ALLOC_MIPMAP, mipmap_bytes(pMipmappedArrayDesc, numMipmapLevels),
                   real(pHandle, pMipmappedArrayDesc, numMipmapLevels), (uintptr_t)*pHandle);
}

/* ---------------------------------------------------------------- releases */

CUresult fgpu_policy_mem_free(fgpu_sym id, CUdeviceptr dptr) {
    REAL_OR_FAIL(cuMemFree_v2, id);
    RELEASE_AROUND(FGPU_ALLOC_PTR, dptr, real(dptr));
}

CUresult fgpu_policy_mem_free_v1(fgpu_sym id, CUdeviceptr_v1 dptr) {
    REAL_OR_FAIL(cuMemFree, id);
    RELEASE_AROUND(FGPU_ALLOC_PTR, dptr, real(dptr));
}

CUresult fgpu_policy_mem_free_async(fgpu_sym id, CUdeviceptr dptr, CUstream hStream) {
    REAL_OR_FAIL(cuMemFreeAsync, id);
    RELEASE_AROUND(FGPU_ALLOC_PTR, dptr, real(dptr, hStream));
}

CUresult fgpu_policy_mem_release(fgpu_sym id, CUmemGenericAllocationHandle handle) {
    REAL_OR_FAIL(cuMemRelease, id);
    RELEASE_AROUND(FGPU_ALLOC_HANDLE, handle, real(handle));
}

CUresult fgpu_policy_array_destroy(fgpu_sym id, CUarray hArray) {
    REAL_OR_FAIL(cuArrayDestroy, id);
    RELEASE_AROUND(FGPU_ALLOC_ARRAY, (uintptr_t)hArray, real(hArray));
}

CUresult fgpu_policy_mipmapped_array_destroy(fgpu_sym id, CUmipmappedArray hMipmappedArray) {
    REAL_OR_FAIL(cuMipmappedArrayDestroy, id);
    RELEASE_AROUND(FGPU_ALLOC_MIPMAP, (uintptr_t)hMipmappedArray, real(hMipmappedArray));
}

/* A destroyed context takes its allocations with it. */
CUresult fgpu_policy_ctx_destroy(fgpu_sym id, CUcontext ctx) {
    REAL_OR_FAIL(cuCtxDestroy_v2, id);
    if (!fgpu_enter())
        return real(ctx);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS) {
        fgpu_allocmap_take_ctx(ctx, fgpu_give_back);
        fgpu_t_ctx = NULL;
    }
    fgpu_leave();
    return rc;
}

static CUcontext primary_if_active(CUdevice dev) {
    fgpu_pfn_cuDevicePrimaryCtxGetState state = FGPU_REAL(cuDevicePrimaryCtxGetState);
    fgpu_pfn_cuDevicePrimaryCtxRetain retain = FGPU_REAL(cuDevicePrimaryCtxRetain);
    fgpu_pfn_cuDevicePrimaryCtxRelease_v2 release = FGPU_REAL(cuDevicePrimaryCtxRelease_v2);
    unsigned int flags;
    int active = 0;
    CUcontext ctx = NULL;
    if (!state || !retain || !release || state(dev, &flags, &active) != CUDA_SUCCESS || !active)
        return NULL;
    /* Active already: retain + release only reads the pointer. */
    if (retain(&ctx, dev) != CUDA_SUCCESS)
        return NULL;
    release(dev);
    return ctx;
}

/* cuDevicePrimaryCtxRelease_v2 and _Reset_v2: when the primary context is gone after the
 * call, so are its allocations. */
CUresult fgpu_policy_primary_ctx_release(fgpu_sym id, CUdevice dev) {
    REAL_OR_FAIL(cuDevicePrimaryCtxRelease_v2, id);
    if (!fgpu_enter())
        return real(dev);
    CUcontext before = primary_if_active(dev);
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && before && primary_if_active(dev) != before) {
        fgpu_allocmap_take_ctx(before, fgpu_give_back);
        fgpu_t_ctx = NULL;
    }
    fgpu_leave();
    return rc;
}

/* ------------------------------------------------------------------- reports */

/* The slice of device d: (limit, in use); limit 0 = none. */
static uint64_t slice_of(uint32_t d, uint64_t *in_use) {
    *in_use = atomic_load_explicit(&fgpu_g.l->dev[d].in_use, memory_order_relaxed);
    return fgpu_g.s->dev[d].limit;
}

static void clamp_info(uint64_t *free, uint64_t *total) {
    CUcontext ctx;
    uint32_t d;
    if (!fgpu_current_device(&ctx, &d))
        return;
    uint64_t used;
    uint64_t limit = slice_of(d, &used);
    if (!limit)
        return;
    uint64_t t = limit < *total ? limit : *total;
    uint64_t f = used < limit ? limit - used : 0;
    *free = f < *free ? f : *free;
    *total = t;
}

static void clamp_total(CUdevice dev, uint64_t *bytes) {
    if (dev < 0 || dev >= FGPU_MAX_DEVICES)
        return;
    uint64_t used;
    uint64_t limit = slice_of((uint32_t)dev, &used);
    if (limit && limit < *bytes)
        *bytes = limit;
}

/*
 * Reports in the variant's type T (size_t, or unsigned int for the v1 names):
 * the driver answers inside the guard, then the answer is clamped to the
 * slice.  Clamping only ever lowers a value, so it fits back in T.
 */
#define GET_INFO_AROUND(T, free, total, call)                                \
    do {                                                                     \
        if (!fgpu_enter())                                                   \
            return (call);                                                   \
        CUresult rc_ = (call);                                               \
        if (rc_ == CUDA_SUCCESS && (free) && (total)) {                      \
            uint64_t f_ = *(free), t_ = *(total);                            \
            clamp_info(&f_, &t_);                                            \
            *(free) = (T)f_;                                                 \
            *(total) = (T)t_;                                                \
        }                                                                    \
        fgpu_leave();                                                        \
        return rc_;                                                          \
    } while (0)

#define TOTAL_MEM_AROUND(T, bytes, dev, call)                                \
    do {                                                                     \
        if (!fgpu_enter())                                                   \
            return (call);                                                   \
        CUresult rc_ = (call);                                               \
        if (rc_ == CUDA_SUCCESS && (bytes)) {                                \
            uint64_t b_ = *(bytes);                                          \
            clamp_total((dev), &b_);                                         \
            *(bytes) = (T)b_;                                                \
        }                                                                    \
        fgpu_leave();                                                        \
        return rc_;                                                          \
    } while (0)

CUresult fgpu_policy_mem_get_info(fgpu_sym id, size_t *free, size_t *total) {
    REAL_OR_FAIL(cuMemGetInfo_v2, id);
    GET_INFO_AROUND(size_t, free, total, real(free, total));
}

CUresult fgpu_policy_mem_get_info_v1(fgpu_sym id, unsigned int *free, unsigned int *total) {
    REAL_OR_FAIL(cuMemGetInfo, id);
    GET_INFO_AROUND(unsigned int, free, total, real(free, total));
}

CUresult fgpu_policy_device_total_mem(fgpu_sym id, size_t *bytes, CUdevice dev) {
    REAL_OR_FAIL(cuDeviceTotalMem_v2, id);
    TOTAL_MEM_AROUND(size_t, bytes, dev, real(bytes, dev));
}

CUresult fgpu_policy_device_total_mem_v1(fgpu_sym id, unsigned int *bytes, CUdevice dev) {
    REAL_OR_FAIL(cuDeviceTotalMem, id);
    TOTAL_MEM_AROUND(unsigned int, bytes, dev, real(bytes, dev));
}
