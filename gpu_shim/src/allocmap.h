/*
 * allocmap.h - this process's live counted allocations: key -> (bytes,
 * device, context).  The driver's free functions take only a pointer or
 * handle, so the shim must remember how many bytes each one reserved.
 *
 * Sharded open addressing (linear probing, backward-shift deletion, so no
 * tombstones); one mutex per shard, held for a few instructions and never
 * across a driver call.  Keys are unique per kind while live: the driver
 * never hands out a live pointer twice.
 */
#ifndef FGPU_ALLOCMAP_H
#define FGPU_ALLOCMAP_H

#include <stdint.h>

#include "hooks.h"

typedef enum fgpu_alloc_kind {
    FGPU_ALLOC_PTR = 1,      /* device pointer (cuMemAlloc*, managed, async, pitch) */
    FGPU_ALLOC_HANDLE = 2,   /* cuMemCreate physical handle */
    FGPU_ALLOC_ARRAY = 3,    /* CUarray */
    FGPU_ALLOC_MIPMAP = 4,   /* CUmipmappedArray */
    FGPU_ALLOC_CONTEXT = 5,  /* the driver's memory for a context (key: the CUcontext) */
    FGPU_ALLOC_MODULE = 6,   /* the driver's memory for a loaded module (key: the CUmodule) */
    FGPU_ALLOC_LIBRARY = 7   /* the driver's memory for a loaded library (key: the CUlibrary) */
} fgpu_alloc_kind;

typedef struct fgpu_alloc {
    uint64_t key;
    uint64_t bytes;
    void *ctx;
    uint32_t kind;
    uint32_t device;
} fgpu_alloc;

/* Remember an allocation; returns 0, or -1 when out of host memory. */
FGPU_HIDDEN int fgpu_allocmap_put(const fgpu_alloc *a);
/* Remove and return (kind, key); 1 when found, 0 otherwise. */
FGPU_HIDDEN int fgpu_allocmap_take(uint32_t kind, uint64_t key, fgpu_alloc *out);
/* Remove every entry of ctx, calling fn on each (outside the shard lock). */
FGPU_HIDDEN void fgpu_allocmap_take_ctx(void *ctx, void (*fn)(const fgpu_alloc *));
/* Fork protection: lock every shard / unlock / forget all (child). */
FGPU_HIDDEN void fgpu_allocmap_lock_all(void);
FGPU_HIDDEN void fgpu_allocmap_unlock_all(void);
FGPU_HIDDEN void fgpu_allocmap_clear(void);

/* Give rec's bytes back to the slice (memory.c); the caller holds the guard. */
FGPU_HIDDEN void fgpu_give_back(const fgpu_alloc *rec);

/*
 * Release (kind, key) around the driver's free: the entry is taken out first
 * so a concurrent allocation that reuses the address cannot be confused with
 * it, and put back if the driver refuses the free.
 */
#define RELEASE_AROUND(kind, key, call)                                      \
    do {                                                                     \
        if (!fgpu_enter())                                                   \
            return (call);                                                   \
        fgpu_alloc rec_;                                                     \
        int found_ = fgpu_allocmap_take((kind), (uint64_t)(key), &rec_);     \
        CUresult rc_ = (call);                                               \
        if (found_) {                                                        \
            if (rc_ == CUDA_SUCCESS)                                         \
                fgpu_give_back(&rec_);                                            \
            else                                                             \
                fgpu_allocmap_put(&rec_);                                    \
        }                                                                    \
        fgpu_leave();                                                        \
        return rc_;                                                          \
    } while (0)

#endif /* FGPU_ALLOCMAP_H */
