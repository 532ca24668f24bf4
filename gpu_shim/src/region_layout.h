/*
 * region_layout.h - the bytes of a shared region (its counters file and its
 * slice file) and the lock-free operations the shim performs on them on the
 * CUDA hot path.  Private to gpu_shim's C code (the shim and the reader
 * extension both compile region.c).
 *
 * Two files per container:
 *  - the slice, <region>.slice: limits and shares, written once by whoever
 *    creates the region (the agent), never changed in place (a new slice is a
 *    new file renamed over the old one), mounted read-only in the container and
 *    read into each process's own memory when it opens the region.  No process
 *    of the container can change the slice another process (or the agent)
 *    enforces or reports.
 *  - the counters, <region>: what the container's processes share to keep one
 *    budget (in_use, reserved with a CAS), their slots, pacing and the ring.
 *    It must be writable by every process of the container; what a process
 *    writes there can misstate only the container's own usage (the agent's
 *    NVML watch checks the real figures).
 *
 * Invariants:
 *  - dev[d].in_use is the sum of every live slot's bytes[d], plus the bytes of
 *    a process killed between the two adds of one reservation (conservative:
 *    the budget shrinks, it never over-commits), plus unslotted bytes.
 *  - in_use only grows through fgpu_mem_reserve's compare-and-swap, which
 *    refuses to pass the limit, so concurrent reservations never exceed it.
 *  - A slot is changed only by the process holding its OFD lock (byte
 *    FGPU_LOCK_BASE + slot of the region file); a free lock on an ACTIVE slot
 *    means its owner is dead.
 *  - No function here makes a system call or blocks.
 */
#ifndef FGPU_REGION_LAYOUT_H
#define FGPU_REGION_LAYOUT_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "fgpu_region.h"

#define FGPU_REGION_MAGIC 0x3147455255504746ULL /* "FGPUREG1" */
/* 2: the slice moved out to its own file (version 1 held it in the counters). */
#define FGPU_REGION_VERSION 2u
#define FGPU_SLICE_MAGIC 0x31434C5355504746ULL /* "FGPUSLC1" */
#define FGPU_SLICE_VERSION 1u
#define FGPU_LOCK_BASE 0
/* The byte after the slots' locks: held by the process measuring a context, module or
 * library (footprint.c), so no two measurements of the container overlap. */
#define FGPU_MEASURE_LOCK (FGPU_LOCK_BASE + FGPU_MAX_SLOTS)
#define FGPU_SLOT_FREE 0u
#define FGPU_SLOT_ACTIVE 1u
#define FGPU_NO_SLOT UINT32_MAX
/* At most one OOM record per device per this interval: a retry loop must not flush
 * process start/exit records out of the ring (the refusals counter counts them all). */
#define FGPU_OOM_RING_INTERVAL_NS 10000000LL

#define FGPU_RELAXED memory_order_relaxed
#define FGPU_ACQUIRE memory_order_acquire
#define FGPU_RELEASE memory_order_release

/* One device of the slice file.  Plain fields: the file never changes once published. */
typedef struct fgpu_dev_slice {
    uint64_t limit;        /* bytes; 0 = no limit */
    uint32_t sm_share_ppm; /* 1..FGPU_SHARE_FULL (FGPU_SHARE_FULL = no limit) */
    uint32_t reserved0;
    uint64_t reserved[6]; /* zero; a later version may give them a meaning (zero = unset) */
} fgpu_dev_slice;

typedef struct fgpu_slice {
    uint64_t magic;
    uint32_t version;
    uint32_t layout_size;
    uint32_t ndev;       /* devices configured, <= FGPU_MAX_DEVICES */
    uint32_t compute_on; /* some device has a share below FGPU_SHARE_FULL */
    uint64_t reserved[5];
    fgpu_dev_slice dev[FGPU_MAX_DEVICES];
} fgpu_slice;

_Static_assert(sizeof(fgpu_dev_slice) == 64, "slice device block is one cache line");
_Static_assert(sizeof(fgpu_slice) == 64 + 64 * FGPU_MAX_DEVICES, "slice header is 64 bytes");

typedef struct fgpu_dev_shared {
    /* memory, written by every allocating process */
    _Atomic uint64_t in_use;
    _Atomic uint64_t peak;
    _Atomic uint64_t refusals;
    _Atomic uint64_t launches;
    _Atomic int64_t last_oom_ring_ns; /* rate limit of OOM records, CLOCK_MONOTONIC */
    uint64_t pad1[3];
    /* compute pacing, second cache line */
    _Atomic int64_t tat_ns;        /* GCRA theoretical arrival time, CLOCK_MONOTONIC */
    _Atomic uint64_t throttled_ns;
    _Atomic uint64_t charged_ns;
    /* GPU time charged per epoch of 2^FGPU_BUSY_EPOCH_SHIFT ns, two epochs in turn:
     * (epoch number mod 2^32) << 32 | nanoseconds (saturating at 2^32 - 1). */
    _Atomic uint64_t busy[2];
    uint64_t pad2[3];
} fgpu_dev_shared;

typedef struct fgpu_slot_shared {
    _Atomic uint32_t state;
    _Atomic int32_t pid;
    _Atomic uint64_t start_time;
    _Atomic uint64_t bytes[FGPU_MAX_DEVICES];
    uint64_t pad[6];
} fgpu_slot_shared;

typedef struct fgpu_ring_rec {
    _Atomic uint64_t stamp; /* 2*seq-1 while written, 2*seq when complete */
    _Atomic uint32_t kind;
    _Atomic int32_t device;
    _Atomic int32_t pid;
    _Atomic uint32_t slot;
    _Atomic uint64_t value;
    _Atomic uint64_t value2;
    _Atomic int64_t time_ns;
    uint64_t pad[2];
} fgpu_ring_rec;

typedef struct fgpu_layout {
    _Atomic uint64_t magic; /* stored last, with release, when the file is initialised */
    uint32_t version;
    uint32_t layout_size;
    uint64_t pad0;
    _Atomic uint64_t ring_head; /* seq of the last record claimed */
    uint64_t pad1[4];
    fgpu_dev_shared dev[FGPU_MAX_DEVICES];
    fgpu_slot_shared slot[FGPU_MAX_SLOTS];
    fgpu_ring_rec ring[FGPU_RING_SIZE];
} fgpu_layout;

_Static_assert(sizeof(fgpu_dev_shared) == 128, "device block is two cache lines");
_Static_assert(sizeof(fgpu_ring_rec) == 64, "ring record is one cache line");
_Static_assert((FGPU_RING_SIZE & (FGPU_RING_SIZE - 1)) == 0, "ring size is a power of two");

_Static_assert(sizeof(fgpu_layout) % 64 == 0, "counters header is one cache line");

struct fgpu_region {
    fgpu_layout *l;   /* the counters, shared */
    fgpu_slice slice; /* this process's copy of the slice file, read once at open */
    int fd;           /* of the counters; -1 for a private region */
    size_t size;
    char *path;       /* NULL for a private region */
};

static inline int64_t fgpu_now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts); /* vDSO: no system call */
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Append a happening; lock-free, multi-producer. */
static inline void fgpu_ring_push(fgpu_layout *l, uint32_t kind, int32_t device, int32_t pid,
                                  uint32_t slot, uint64_t value, uint64_t value2) {
    uint64_t seq = atomic_fetch_add_explicit(&l->ring_head, 1, FGPU_RELAXED) + 1;
    fgpu_ring_rec *rec = &l->ring[(seq - 1) & (FGPU_RING_SIZE - 1)];
    atomic_store_explicit(&rec->stamp, 2 * seq - 1, FGPU_RELAXED);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&rec->kind, kind, FGPU_RELAXED);
    atomic_store_explicit(&rec->device, device, FGPU_RELAXED);
    atomic_store_explicit(&rec->pid, pid, FGPU_RELAXED);
    atomic_store_explicit(&rec->slot, slot, FGPU_RELAXED);
    atomic_store_explicit(&rec->value, value, FGPU_RELAXED);
    atomic_store_explicit(&rec->value2, value2, FGPU_RELAXED);
    atomic_store_explicit(&rec->time_ns, fgpu_now_ns(CLOCK_REALTIME), FGPU_RELAXED);
    atomic_store_explicit(&rec->stamp, 2 * seq, FGPU_RELEASE);
}

/*
 * Reserve bytes on device d before the driver is asked, against limit (the
 * slice's, 0 = none).  Returns 1 on success; 0 (and records a refusal) when the
 * limit would be passed.  slot may be FGPU_NO_SLOT (bytes then not reclaimable).
 */
static inline int fgpu_mem_reserve(fgpu_layout *l, uint64_t limit, uint32_t slot, uint32_t d,
                                   uint64_t bytes, int32_t pid) {
    fgpu_dev_shared *dev = &l->dev[d];
    uint64_t cur = atomic_load_explicit(&dev->in_use, FGPU_RELAXED);
    uint64_t next;
    do {
        if (limit != 0 && (bytes > limit || cur > limit - bytes)) {
            atomic_fetch_add_explicit(&dev->refusals, 1, FGPU_RELAXED);
            int64_t now = fgpu_now_ns(CLOCK_MONOTONIC);
            int64_t last = atomic_load_explicit(&dev->last_oom_ring_ns, FGPU_RELAXED);
            if ((last == 0 || now - last >= FGPU_OOM_RING_INTERVAL_NS) &&
                atomic_compare_exchange_strong_explicit(&dev->last_oom_ring_ns, &last, now,
                                                        FGPU_RELAXED, FGPU_RELAXED))
                fgpu_ring_push(l, FGPU_HAPPENING_OOM_REFUSED, (int32_t)d, pid, slot, bytes, cur);
            return 0;
        }
        next = cur + bytes;
    } while (!atomic_compare_exchange_weak_explicit(&dev->in_use, &cur, next, FGPU_RELAXED,
                                                    FGPU_RELAXED));
    uint64_t peak = atomic_load_explicit(&dev->peak, FGPU_RELAXED);
    while (next > peak && !atomic_compare_exchange_weak_explicit(&dev->peak, &peak, next,
                                                                 FGPU_RELAXED, FGPU_RELAXED)) {
    }
    /* Device first, slot second: a kill in between leaks (never over-commits). */
    if (slot != FGPU_NO_SLOT)
        atomic_fetch_add_explicit(&l->slot[slot].bytes[d], bytes, FGPU_RELAXED);
    return 1;
}

/* One busy epoch lasts 2^30 ns (1.07 s), NVML's longest sample period. */
#define FGPU_BUSY_EPOCH_SHIFT 30
#define FGPU_BUSY_EPOCH_NS (1LL << FGPU_BUSY_EPOCH_SHIFT)

/* Add ns of charged GPU time to the epoch of now (CLOCK_MONOTONIC): one CAS. */
static inline void fgpu_busy_add(fgpu_dev_shared *dev, int64_t now, uint64_t ns) {
    uint64_t epoch = ((uint64_t)now >> FGPU_BUSY_EPOCH_SHIFT) & 0xffffffffu;
    _Atomic uint64_t *b = &dev->busy[epoch & 1];
    uint64_t old = atomic_load_explicit(b, FGPU_RELAXED), next;
    do {
        uint64_t sum = (old >> 32) == epoch ? (old & 0xffffffffu) : 0;
        sum = ns >= 0xffffffffu - sum ? 0xffffffffu : sum + ns;
        next = epoch << 32 | sum;
    } while (!atomic_compare_exchange_weak_explicit(b, &old, next, FGPU_RELAXED, FGPU_RELAXED));
}

/* GPU time charged during the last complete epoch before now; 0 when nothing was. */
static inline uint64_t fgpu_busy_last_epoch(fgpu_dev_shared *dev, int64_t now) {
    uint64_t prev = (((uint64_t)now >> FGPU_BUSY_EPOCH_SHIFT) - 1) & 0xffffffffu;
    uint64_t w = atomic_load_explicit(&dev->busy[prev & 1], FGPU_RELAXED);
    return (w >> 32) == prev ? (w & 0xffffffffu) : 0;
}

/* Subtract without wrapping below zero. */
static inline void fgpu_sub_floor(_Atomic uint64_t *v, uint64_t bytes) {
    uint64_t cur = atomic_load_explicit(v, FGPU_RELAXED);
    while (!atomic_compare_exchange_weak_explicit(v, &cur, cur > bytes ? cur - bytes : 0,
                                                  FGPU_RELAXED, FGPU_RELAXED)) {
    }
}

/* Give back bytes reserved with fgpu_mem_reserve. */
static inline void fgpu_mem_unreserve(fgpu_layout *l, uint32_t slot, uint32_t d, uint64_t bytes) {
    /* Slot first, device second: a kill in between leaks (never double-frees). */
    if (slot != FGPU_NO_SLOT)
        fgpu_sub_floor(&l->slot[slot].bytes[d], bytes);
    fgpu_sub_floor(&l->dev[d].in_use, bytes);
}

/* Hidden helpers of region.c used by the shim (cold paths: init, fork, exit). */
__attribute__((visibility("hidden"))) int fgpu_region_claim_slot(fgpu_region *r, int32_t pid,
                                                                 uint64_t start_time,
                                                                 uint32_t *slot_out);
__attribute__((visibility("hidden"))) void fgpu_region_release_slot(fgpu_region *r,
                                                                    uint32_t slot);
__attribute__((visibility("hidden"))) int fgpu_region_reopen_fd(fgpu_region *r);
__attribute__((visibility("hidden"))) void fgpu_region_forget_fd(fgpu_region *r);

#endif /* FGPU_REGION_LAYOUT_H */
