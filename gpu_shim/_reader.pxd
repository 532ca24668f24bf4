# Mirrors gpu_shim/src/fgpu_region.h (the region's public C API); keep in step.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef extern from "fgpu_region.h" nogil:
    enum:
        FGPU_MAX_DEVICES
        FGPU_MAX_SLOTS
        FGPU_RING_SIZE
        FGPU_SHARE_FULL

    const char *FGPU_SLICE_SUFFIX

    enum fgpu_happening_kind:
        FGPU_HAPPENING_OOM_REFUSED
        FGPU_HAPPENING_PROC_START
        FGPU_HAPPENING_PROC_EXIT
        FGPU_HAPPENING_PROC_RECLAIMED
        FGPU_HAPPENING_UNHOOKED_ENTRY
        FGPU_HAPPENING_SLOTS_FULL

    ctypedef struct fgpu_region:
        pass

    ctypedef struct fgpu_config:
        uint32_t ndev
        uint64_t mem_limit[FGPU_MAX_DEVICES]
        uint32_t sm_share_ppm[FGPU_MAX_DEVICES]

    ctypedef struct fgpu_device_stats:
        uint32_t index
        uint32_t sm_share_ppm
        uint64_t limit
        uint64_t in_use
        uint64_t peak
        uint64_t launches
        uint64_t throttled_ns
        uint64_t refusals
        uint64_t charged_ns

    ctypedef struct fgpu_happening:
        uint64_t seq
        uint32_t kind
        int32_t device
        int32_t pid
        uint32_t slot
        uint64_t value
        uint64_t value2
        int64_t time_ns

    ctypedef struct fgpu_process:
        uint32_t slot
        int32_t pid
        uint64_t start_time
        int32_t alive
        uint64_t bytes[FGPU_MAX_DEVICES]

    int fgpu_region_open(const char *path, int create, const fgpu_config *cfg,
                         fgpu_region **out)
    int fgpu_region_create(const char *path, const fgpu_config *cfg, fgpu_region **out)
    void fgpu_region_close(fgpu_region *r)
    uint32_t fgpu_region_ndev(const fgpu_region *r)
    int fgpu_region_device(const fgpu_region *r, uint32_t device, fgpu_device_stats *out)
    int fgpu_region_process(fgpu_region *r, uint32_t slot, fgpu_process *out)
    size_t fgpu_region_drain(const fgpu_region *r, uint64_t after, fgpu_happening *out,
                             size_t max, uint64_t *next_after, uint64_t *lost)
    uint64_t fgpu_region_reclaim_dead(fgpu_region *r)
