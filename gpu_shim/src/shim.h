/*
 * shim.h - process-wide state of the shim and the entry discipline every
 * policy follows: once-only initialisation, then a per-thread re-entrancy
 * guard (a hook entered from inside a hook, e.g. by the driver calling its
 * own exports, forwards straight to the real function).
 */
#ifndef FGPU_SHIM_H
#define FGPU_SHIM_H

#include <stdatomic.h>
#include <stdint.h>

#include "hooks.h"
#include "region_layout.h"

typedef struct fgpu_state {
    fgpu_region *region;   /* NULL: pass-through (no slice configured) */
    fgpu_layout *l;        /* region->l (the counters), or NULL */
    const fgpu_slice *s;   /* &region->slice (this process's copy), or NULL */
    const fgpu_pace *pace; /* the region's pace file (mapped read-only), or NULL */
    _Atomic uint32_t slot; /* this process's slot, FGPU_NO_SLOT until claimed */
    int32_t pid;
    int real_loaded;
    uint32_t sample_every; /* time one launch in this many per kernel once learnt */
    int64_t burst_ns;      /* how far ahead of its share a container may run */
    int64_t min_sleep_ns;  /* shorter waits are carried over, not slept */
    int64_t floor_ns;      /* fixed cost of a timed launch (event pair, dispatch), not charged */
    int floor_auto;        /* learn floor_ns per context from null launches instead */
} fgpu_state;

FGPU_HIDDEN extern fgpu_state fgpu_g;
FGPU_HIDDEN extern _Atomic int fgpu_init_done;

FGPU_HIDDEN extern FGPU_TLS int fgpu_t_busy;
FGPU_HIDDEN extern FGPU_TLS uint32_t fgpu_t_launches;
FGPU_HIDDEN extern FGPU_TLS CUcontext fgpu_t_ctx;
FGPU_HIDDEN extern FGPU_TLS int fgpu_t_dev;

FGPU_HIDDEN void fgpu_init_slow(void);
FGPU_HIDDEN uint32_t fgpu_slot(void);
FGPU_HIDDEN CUresult fgpu_no_real(fgpu_sym id);
FGPU_HIDDEN int fgpu_current_device(CUcontext *ctx_out, uint32_t *dev_out);
FGPU_HIDDEN void fgpu_flush_launches(void);
FGPU_HIDDEN void fgpu_compute_fork_child(void);

/* Once-only initialisation, checked on every entry: one load on the fast path. */
static inline void fgpu_init(void) {
    if (FGPU_UNLIKELY(!atomic_load_explicit(&fgpu_init_done, memory_order_acquire)))
        fgpu_init_slow();
}

/* Enter a policy: 1 when the caller should apply it (and must fgpu_leave). */
static inline int fgpu_enter(void) {
    fgpu_init();
    if (fgpu_g.l == NULL || fgpu_t_busy)
        return 0;
    fgpu_t_busy = 1;
    return 1;
}

static inline void fgpu_leave(void) { fgpu_t_busy = 0; }

/* Count one launch; flushed to the region every 64 per thread. */
static inline void fgpu_count_launch(void) {
    if (FGPU_UNLIKELY((++fgpu_t_launches & 63u) == 0))
        fgpu_flush_launches();
}

#endif /* FGPU_SHIM_H */
