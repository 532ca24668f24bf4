/*
 * fgpu_region.h - the shared usage region of one container, public API.
 *
 * Two files (on tmpfs) per container, opened by every process of the
 * container that loads the shim and by the agent's reader
 * (gpu_shim/_reader.pyx, whose _reader.pxd mirrors this header):
 *  - the counters, at the region's path (FGPU_REGION): the shared counters,
 *    one slot per process and a ring of discrete happenings, mapped
 *    read-write by every process;
 *  - the slice, at the path + FGPU_SLICE_SUFFIX: the memory limit and SM share
 *    per device, published once by the region's creator and only ever read
 *    (the agent mounts it read-only in the container).
 * Layout and atomics are private (region_layout.h); this header deals in plain
 * snapshots.
 */
#ifndef FGPU_REGION_H
#define FGPU_REGION_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FGPU_MAX_DEVICES 16
#define FGPU_MAX_SLOTS 128
#define FGPU_RING_SIZE 1024
/* SM shares are exact integers in parts per million; this one means "no limit". */
#define FGPU_SHARE_FULL 1000000u
/* The slice file of the region at path is path + FGPU_SLICE_SUFFIX. */
#define FGPU_SLICE_SUFFIX ".slice"

/*
 * The pace file, at the region's path + FGPU_PACE_SUFFIX: written by the agent
 * only (the container gets it read-only), read by the shim on every paced
 * launch.  scale_ppm[d] scales the container's SM share on device d (0 or >=
 * FGPU_SHARE_FULL: unscaled; never below FGPU_PACE_MIN_PPM), so the agent can
 * give the containers of a GPU their shares of what the card delivers when it
 * loses time to switching between them (docs/gpu-fidelity.md).  Optional: a
 * container without one is paced by its share alone.
 */
#define FGPU_PACE_SUFFIX ".pace"
#define FGPU_PACE_MAGIC 0x45434150u /* "PACE" */
#define FGPU_PACE_VERSION 1u
#define FGPU_PACE_MIN_PPM 250000u

typedef struct fgpu_pace {
    uint32_t magic;
    uint32_t version;
    _Atomic uint32_t scale_ppm[FGPU_MAX_DEVICES];
} fgpu_pace;

/* Kinds of happenings in the ring. */
enum fgpu_happening_kind {
    FGPU_HAPPENING_OOM_REFUSED = 1,   /* value: bytes asked, value2: bytes in use then */
    FGPU_HAPPENING_PROC_START = 2,    /* value: process start time (clock ticks since boot) */
    FGPU_HAPPENING_PROC_EXIT = 3,     /* value: bytes still counted at exit, given back */
    FGPU_HAPPENING_PROC_RECLAIMED = 4, /* value: bytes given back for a dead process */
    FGPU_HAPPENING_UNHOOKED_ENTRY = 5, /* value: hash of the symbol a look-up could not swap */
    FGPU_HAPPENING_SLOTS_FULL = 6     /* a process found no free slot; its bytes are not reclaimable */
};

typedef struct fgpu_region fgpu_region;

/* Slice written when a region is created. */
typedef struct fgpu_config {
    uint32_t ndev;                                /* devices configured, <= FGPU_MAX_DEVICES */
    uint64_t mem_limit[FGPU_MAX_DEVICES];         /* bytes; 0 = no limit */
    uint32_t sm_share_ppm[FGPU_MAX_DEVICES];      /* 1..1000000; 0 or >= 1000000 = no limit */
} fgpu_config;

/* One device's usage, read without stopping writers. */
typedef struct fgpu_device_stats {
    uint32_t index;
    uint32_t sm_share_ppm;
    uint64_t limit;          /* bytes; 0 = no limit */
    uint64_t in_use;         /* bytes reserved now */
    uint64_t peak;           /* highest in_use seen */
    uint64_t launches;       /* kernel and graph launches (batched per process, see README) */
    uint64_t throttled_ns;   /* time launches were held back by the SM share */
    uint64_t refusals;       /* allocations refused with CUDA_ERROR_OUT_OF_MEMORY */
    uint64_t charged_ns;     /* estimated GPU time charged against the share */
} fgpu_device_stats;

/* One record of the ring. */
typedef struct fgpu_happening {
    uint64_t seq;            /* 1, 2, 3 ... across the region's life */
    uint32_t kind;           /* enum fgpu_happening_kind */
    int32_t device;          /* -1 when not about one device */
    int32_t pid;             /* pid in the container's pid namespace */
    uint32_t slot;
    uint64_t value;
    uint64_t value2;
    int64_t time_ns;         /* CLOCK_REALTIME */
} fgpu_happening;

/* One process slot. */
typedef struct fgpu_process {
    uint32_t slot;
    int32_t pid;
    uint64_t start_time;     /* clock ticks since boot, /proc/<pid>/stat field 22 */
    int32_t alive;           /* its owner still holds the slot's lock */
    uint64_t bytes[FGPU_MAX_DEVICES];
} fgpu_process;

/*
 * Open the region at path: its slice (read once, never written) and its
 * counters (mapped read-write).  create != 0: a missing slice file is
 * published from cfg (NULL: no limits; the first creator wins, atomically) and
 * a missing counters file is created and initialised under an exclusive
 * flock; an existing slice is kept.  Returns 0 or a negative errno (-ENOENT:
 * a file is missing; -EINVAL: a file is not of this version, e.g. a version 1
 * region, which held its slice in the counters).
 */
int fgpu_region_open(const char *path, int create, const fgpu_config *cfg, fgpu_region **out);
/*
 * Create the region at path with the slice cfg: a new slice file (mode 0444)
 * replaces any earlier one atomically, and new counters replace any earlier
 * ones.  For the region's owner (the agent), before any process of the
 * container runs: a process that opened the region earlier keeps what it
 * mapped and read.  Returns 0 or a negative errno.
 */
int fgpu_region_create(const char *path, const fgpu_config *cfg, fgpu_region **out);
/* A process-private region (anonymous memory), for limits without a shared file. */
int fgpu_region_open_private(const fgpu_config *cfg, fgpu_region **out);
void fgpu_region_close(fgpu_region *r);

uint32_t fgpu_region_ndev(const fgpu_region *r);
/* 0, or -EINVAL when device >= FGPU_MAX_DEVICES. */
int fgpu_region_device(const fgpu_region *r, uint32_t device, fgpu_device_stats *out);
/* Fill out with slot i; returns 1 when the slot is in use, 0 when free, -EINVAL. */
int fgpu_region_process(fgpu_region *r, uint32_t slot, fgpu_process *out);

/*
 * Copy happenings with seq > after, oldest first, at most max of them.
 * *next_after is set to the seq to pass next time; *lost counts records
 * overwritten before they could be read.  Returns the number copied.
 */
size_t fgpu_region_drain(const fgpu_region *r, uint64_t after, fgpu_happening *out, size_t max,
                         uint64_t *next_after, uint64_t *lost);

/*
 * Give back the bytes of every process whose slot lock is free although the
 * slot is in use (its owner died without exiting cleanly, e.g. SIGKILL), and
 * free those slots.  Safe against live processes and concurrent reclaimers.
 * Returns the bytes given back, all devices together.
 */
uint64_t fgpu_region_reclaim_dead(fgpu_region *r);

#endif /* FGPU_REGION_H */
