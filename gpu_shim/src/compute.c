/*
 * compute.c - the soft SM share.  A container with share s may keep the GPU
 * busy s seconds per second on each device.  Every launch is charged its
 * estimated GPU time c; the container's pacing state is one word in the
 * shared region, the GCRA "theoretical arrival time" tat:
 *
 *     base = max(tat, now);  tat = base + c / s;  wait = base - burst - now
 *
 * and the launching thread sleeps wait when it exceeds FGPU_MIN_SLEEP_US
 * (shorter debts are carried to the next launch).  One compare-and-swap per
 * launch; all processes of the container share the word, so they share the
 * budget.
 *
 * The cost c of a launch is learnt per kernel (function x grid-size bucket,
 * or graph exec) from CUDA events recorded around sampled launches on the
 * launch's own stream: the first 16 launches of a kernel, then about one per
 * SAMPLE_GPU_NS of its estimated GPU time (every launch of a kernel of 0.5 ms
 * or more, at least one in FGPU_SAMPLE_EVERY launches of a short one), which
 * keeps the sampling overhead near 1% of the GPU time.  On a time-sliced GPU the start event is processed when
 * the context gets the GPU, so the pair times the kernel, not the wait for
 * other tenants.  The estimate is the plain mean of the last 16 samples:
 * unbiased when durations are noisy (a trimmed or minimum estimate
 * under-charges heavy-tailed kernels); a sample inflated by another tenant's
 * time slice only makes the container more conservative.
 * A sampled launch is then charged its measured cost exactly (the difference
 * to its estimate is added to tat when the sample is harvested); a kernel
 * never timed yet is charged the thread's last measured cost.
 *
 * A sample's time includes a fixed part that is not the kernel's: the event pair's
 * own processing and the launch's dispatch, which a busy stream hides behind the
 * previous kernel.  That floor is taken off every sample (never below zero), so a
 * host-bound loop of tiny kernels is charged what its kernels take, not its launch
 * cadence.  By default (FGPU_LAUNCH_FLOOR_NS unset or "auto") it is learnt per
 * context as the event-pair time of a null launch enqueued behind one sampled launch in
 * NULL_EVERY: an empty kernel (NULL_PTX, loaded once per context), so the floor has a
 * kernel launch's own dispatch cost, or a 1-byte memset of a scratch byte where the
 * module cannot be loaded (a GPU older than sm_70, or a driver that cannot JIT it).
 * The floor is the least of the last NULL_WINDOW times, so a null launch slowed by
 * another tenant never lowers what is charged; FGPU_LAUNCH_FLOOR_NS=N fixes it at N
 * ns (0: nothing comes off).  On an H100 a 1.2 us kernel's event pair took 9.8 us and a
 * memset's 3.9 us: a host-bound loop of such kernels at share 0.5 ran at 0.78 of
 * unshimmed with no floor, 0.90 with a memset floor and 1.03 with the floor at a
 * kernel's fixed cost.  The null module's few KiB of code are the one thing of the
 * process's the slice does not count (inside the per-process tolerance of
 * docs/gpu-fidelity.md).
 *
 * Launches captured into a graph are not charged (the graph launch is).
 * With no share set the launch path costs one branch plus a thread-local
 * counter increment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

#define EST_SLOTS 256
#define EST_WINDOW 16
#define SAMPLES 8
#define SAMPLE_GPU_NS 500000
#define NULL_WINDOW 8
#define NULL_EVERY 64
#define FLOOR_CTXS 4

typedef struct est_entry {
    uint64_t key;
    uint32_t seen;  /* samples taken */
    uint32_t count; /* launches since the window filled */
    int64_t win[EST_WINDOW];
    int64_t est; /* mean of win, valid when seen > 0 */
} est_entry;

/* The learnt floor of one context (FGPU_LAUNCH_FLOOR_NS unset or "auto"). */
typedef struct floor_est {
    CUcontext ctx;
    int64_t win[NULL_WINDOW];
    uint32_t seen;  /* null samples taken */
    uint32_t since; /* sampled launches since the last null sample */
    int64_t floor;  /* least of win; 0 until the first null sample */
} floor_est;

typedef struct sample {
    CUevent start, end;
    CUcontext ctx;         /* events belong to this context */
    fgpu_dev_shared *dev;  /* charged device */
    uint32_t share;        /* its share when charged */
    uint64_t key;
    int64_t charged;       /* the estimate the launch was charged */
    floor_est *null_of;    /* a null launch timing this context's floor; else NULL */
    int pending;
} sample;

typedef struct tstate {
    est_entry est[EST_SLOTS];
    sample s[SAMPLES];
    floor_est fl[FLOOR_CTXS];
    int64_t last_cost;
} tstate;

/* An empty kernel: the null launch.  PTX 7.0 for sm_70 is JIT-compiled for the card
 * the context is on (any since Volta). */
static const char NULL_PTX[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                               ".visible .entry fgpu_null()\n{\n\tret;\n}\n";

/* Per context, shared by the process's threads: the empty kernel, or failing that a
 * scratch byte for a memset (loaded and allocated from the driver directly). */
static struct {
    CUcontext ctx;
    CUfunction fn;   /* the empty kernel; NULL: use ptr */
    CUdeviceptr ptr; /* the scratch byte; 0 with fn, or when none could be had */
} g_scratch[FLOOR_CTXS];
static pthread_mutex_t g_scratch_mu = PTHREAD_MUTEX_INITIALIZER;

static FGPU_TLS tstate *t_state;
static pthread_key_t g_tkey;
static pthread_once_t g_tkey_once = PTHREAD_ONCE_INIT;

static void destroy_tstate(void *p) {
    tstate *ts = p;
    fgpu_pfn_cuEventDestroy_v2 destroy = FGPU_REAL(cuEventDestroy_v2);
    for (int i = 0; i < SAMPLES && destroy; i++) {
        if (ts->s[i].start)
            destroy(ts->s[i].start);
        if (ts->s[i].end)
            destroy(ts->s[i].end);
    }
    free(ts);
}

static void make_key(void) { pthread_key_create(&g_tkey, destroy_tstate); }

static tstate *get_tstate(void) {
    if (FGPU_LIKELY(t_state != NULL))
        return t_state;
    pthread_once(&g_tkey_once, make_key);
    tstate *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return NULL;
    pthread_setspecific(g_tkey, ts);
    t_state = ts;
    return ts;
}

void fgpu_compute_fork_child(void) {
    /* The parent's events and scratch bytes belong to contexts this process cannot use. */
    t_state = NULL;
    memset(g_scratch, 0, sizeof(g_scratch));
    pthread_mutex_init(&g_scratch_mu, NULL);
}

/* The empty kernel of ctx, loaded on first use (ctx is current); NULL if it cannot be. */
static CUfunction load_null_kernel(void) {
    fgpu_pfn_cuModuleLoadData load = FGPU_REAL(cuModuleLoadData);
    fgpu_pfn_cuModuleGetFunction get = FGPU_REAL(cuModuleGetFunction);
    CUmodule m = NULL;
    CUfunction fn = NULL;
    if (!load || !get || load(&m, NULL_PTX) != CUDA_SUCCESS)
        return NULL;
    if (get(&fn, m, "fgpu_null") != CUDA_SUCCESS) {
        fgpu_pfn_cuModuleUnload unload = FGPU_REAL(cuModuleUnload);
        if (unload)
            unload(m);
        return NULL;
    }
    return fn;
}

/* What ctx's null launch uses (set up on first use, ctx current): *fn, else *ptr; both
 * empty when neither could be had. */
static void null_of(CUcontext ctx, CUfunction *fn, CUdeviceptr *ptr) {
    *fn = NULL;
    *ptr = 0;
    pthread_mutex_lock(&g_scratch_mu);
    int i = 0;
    for (; i < FLOOR_CTXS && g_scratch[i].ctx; i++)
        if (g_scratch[i].ctx == ctx)
            break;
    if (i < FLOOR_CTXS && !g_scratch[i].ctx) {
        g_scratch[i].fn = load_null_kernel();
        fgpu_pfn_cuMemAlloc_v2 alloc = FGPU_REAL(cuMemAlloc_v2);
        CUdeviceptr p = 0;
        if (!g_scratch[i].fn && alloc && alloc(&p, 1) == CUDA_SUCCESS)
            g_scratch[i].ptr = p;
        g_scratch[i].ctx = ctx;
    }
    if (i < FLOOR_CTXS) {
        *fn = g_scratch[i].fn;
        *ptr = g_scratch[i].ptr;
    }
    pthread_mutex_unlock(&g_scratch_mu);
}

/* The thread's floor estimate for ctx (a full table evicts the first entry). */
static floor_est *floor_of(tstate *ts, CUcontext ctx) {
    for (int i = 0; i < FLOOR_CTXS; i++)
        if (ts->fl[i].ctx == ctx)
            return &ts->fl[i];
    for (int i = 0; i < FLOOR_CTXS; i++)
        if (!ts->fl[i].ctx) {
            ts->fl[i].ctx = ctx;
            return &ts->fl[i];
        }
    memset(&ts->fl[0], 0, sizeof(ts->fl[0]));
    ts->fl[0].ctx = ctx;
    return &ts->fl[0];
}

static void floor_add(floor_est *f, int64_t ns) {
    f->win[f->seen % NULL_WINDOW] = ns;
    f->seen++;
    uint32_t n = f->seen < NULL_WINDOW ? f->seen : NULL_WINDOW;
    int64_t least = f->win[0];
    for (uint32_t i = 1; i < n; i++)
        least = f->win[i] < least ? f->win[i] : least;
    f->floor = least;
}

/* What comes off a sample of ctx before it is charged. */
static int64_t floor_ns(tstate *ts, CUcontext ctx) {
    return fgpu_g.floor_auto ? floor_of(ts, ctx)->floor : fgpu_g.floor_ns;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static uint64_t kernel_key(const void *f, uint64_t blocks) {
    /* Grid sizes within a power of two share an estimate. */
    uint64_t bucket = blocks ? 64u - (uint64_t)__builtin_clzll(blocks) : 0;
    return mix64((uint64_t)(uintptr_t)f ^ (bucket << 56)) | 1;
}

static est_entry *est_lookup(tstate *ts, uint64_t key) {
    est_entry *e = &ts->est[key & (EST_SLOTS - 1)];
    if (e->key != key) { /* direct-mapped: a collision evicts */
        e->key = key;
        e->seen = 0;
        e->count = 0;
        e->est = 0;
    }
    return e;
}

static void est_add(tstate *ts, uint64_t key, int64_t ns) {
    est_entry *e = est_lookup(ts, key);
    e->win[e->seen % EST_WINDOW] = ns;
    e->seen++;
    uint32_t n = e->seen < EST_WINDOW ? e->seen : EST_WINDOW;
    int64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += e->win[i];
    e->est = sum / (int64_t)n;
    ts->last_cost = ns;
}

static void drop_events(sample *s) {
    s->null_of = NULL;
    fgpu_pfn_cuEventDestroy_v2 destroy = FGPU_REAL(cuEventDestroy_v2);
    if (destroy && s->start) {
        destroy(s->start);
        destroy(s->end);
    }
    s->start = s->end = NULL;
    s->pending = 0;
}

/* Harvest finished samples without waiting for unfinished ones. */
static void poll_samples(tstate *ts) {
    fgpu_pfn_cuEventQuery query = FGPU_REAL(cuEventQuery);
    fgpu_pfn_cuEventElapsedTime_v2 elapsed = FGPU_REAL(cuEventElapsedTime_v2);
    if (!query || !elapsed)
        return;
    for (int i = 0; i < SAMPLES; i++) {
        sample *s = &ts->s[i];
        if (!s->pending)
            continue;
        CUresult q = query(s->end);
        if (q == CUDA_ERROR_NOT_READY)
            continue;
        float ms = 0;
        s->pending = 0;
        if (q != CUDA_SUCCESS || elapsed(&ms, s->start, s->end) != CUDA_SUCCESS) {
            drop_events(s); /* unusable (e.g. context gone): recreate on next use */
            continue;
        }
        if (ms < 0)
            continue; /* a clock step between the events: the sample says nothing */
        int64_t ns = (int64_t)((double)ms * 1e6);
        if (s->null_of) { /* a null launch: the floor, not a charge */
            floor_add(s->null_of, ns);
            s->null_of = NULL;
            continue;
        }
        ns -= floor_ns(ts, s->ctx);
        if (ns < 0)
            ns = 0;
        est_add(ts, s->key, ns);
        /* This launch's true cost is known: settle the difference to its estimate. */
        int64_t delta = ns - s->charged;
        atomic_fetch_add_explicit(&s->dev->tat_ns,
                                  (int64_t)((__int128)delta * FGPU_SHARE_FULL / s->share),
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&s->dev->charged_ns, (uint64_t)delta, memory_order_relaxed);
    }
}

/* A free sample whose events live in ctx (created if need be), or NULL. */
static sample *take_sample(tstate *ts, CUcontext ctx) {
    fgpu_pfn_cuEventCreate create = FGPU_REAL(cuEventCreate);
    fgpu_pfn_cuEventDestroy_v2 destroy = FGPU_REAL(cuEventDestroy_v2);
    sample *spare = NULL;
    for (int i = 0; i < SAMPLES; i++) {
        sample *s = &ts->s[i];
        if (s->pending)
            continue;
        if (s->start && s->ctx == ctx)
            return s;
        if (!spare || !spare->start)
            spare = s;
    }
    if (!spare || !create || !destroy)
        return NULL;
    if (spare->start) /* events of another context: replace them */
        drop_events(spare);
    if (create(&spare->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return NULL;
    if (create(&spare->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        destroy(spare->start);
        spare->start = NULL;
        return NULL;
    }
    spare->ctx = ctx;
    return spare;
}

/* Time a null launch on stream right behind a sampled launch, when this context's floor
 * is due a sample (auto floor only; never while capturing: the caller checked). */
static void null_sample(tstate *ts, CUcontext ctx, CUstream stream, int ptsz) {
    floor_est *f = floor_of(ts, ctx);
    if (f->seen >= NULL_WINDOW && ++f->since < NULL_EVERY)
        return;
    f->since = 0;
    fgpu_pfn_cuEventRecord record = ptsz ? FGPU_REAL(cuEventRecord_ptsz) : FGPU_REAL(cuEventRecord);
    fgpu_pfn_cuMemsetD8Async memset8 =
        ptsz ? FGPU_REAL(cuMemsetD8Async_ptsz) : FGPU_REAL(cuMemsetD8Async);
    fgpu_pfn_cuLaunchKernel launch =
        ptsz ? FGPU_REAL(cuLaunchKernel_ptsz) : FGPU_REAL(cuLaunchKernel);
    CUfunction fn = NULL;
    CUdeviceptr p = 0;
    if (record)
        null_of(ctx, &fn, &p);
    if (fn ? !launch : (!p || !memset8))
        return;
    sample *s = take_sample(ts, ctx);
    if (!s)
        return;
    if (record(s->start, stream) == CUDA_SUCCESS &&
        (fn ? launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL) : memset8(p, 0, 1, stream)) ==
            CUDA_SUCCESS &&
        record(s->end, stream) == CUDA_SUCCESS) {
        s->null_of = f;
        s->pending = 1;
    } else {
        drop_events(s);
    }
}

/* The share scaled by the agent's pace file (fgpu_region.h), if any. */
static inline uint32_t paced_share(uint32_t share, uint32_t d) {
    const fgpu_pace *p = fgpu_g.pace;
    if (FGPU_LIKELY(p == NULL))
        return share;
    uint32_t k = atomic_load_explicit(&p->scale_ppm[d], memory_order_relaxed);
    if (k == 0 || k >= FGPU_SHARE_FULL)
        return share;
    k = k < FGPU_PACE_MIN_PPM ? FGPU_PACE_MIN_PPM : k;
    uint32_t v = (uint32_t)((uint64_t)share * k / FGPU_SHARE_FULL);
    return v ? v : 1;
}

/* What pace_before decided, for pace_after. */
typedef struct ticket {
    fgpu_dev_shared *dev; /* NULL: not paced */
    sample *s;
    CUcontext ctx; /* the sampled launch's context */
    int64_t scaled; /* tat advance, to refund on failure */
    int64_t cost;
    int ptsz;
} ticket;

static void sleep_until(int64_t when_ns) {
    struct timespec ts = {.tv_sec = when_ns / 1000000000LL, .tv_nsec = when_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void pace_before(ticket *t, uint64_t key, CUstream stream, int ptsz) {
    t->dev = NULL;
    t->s = NULL;
    t->ptsz = ptsz;
    CUcontext ctx;
    uint32_t d;
    if (!fgpu_current_device(&ctx, &d))
        return;
    fgpu_dev_shared *dev = &fgpu_g.l->dev[d];
    uint32_t share = fgpu_g.s->dev[d].sm_share_ppm;
    if (share == 0 || share >= FGPU_SHARE_FULL)
        return;
    share = paced_share(share, d);
    fgpu_pfn_cuStreamIsCapturing capturing =
        ptsz ? FGPU_REAL(cuStreamIsCapturing_ptsz) : FGPU_REAL(cuStreamIsCapturing);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    /* Captured work runs when its graph is launched (and charged then).  An error here
     * (e.g. the legacy stream while another stream captures globally) means no pacing:
     * recording an event could invalidate someone's capture. */
    if (capturing && (capturing(stream, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE))
        return;
    tstate *ts = get_tstate();
    if (!ts)
        return;
    poll_samples(ts);
    est_entry *e = est_lookup(ts, key);
    int64_t cost = e->seen ? e->est : ts->last_cost;
    int64_t scaled = (int64_t)((__int128)cost * FGPU_SHARE_FULL / share);
    int64_t now = fgpu_now_ns(CLOCK_MONOTONIC);
    int64_t tat = atomic_load_explicit(&dev->tat_ns, memory_order_relaxed);
    int64_t base;
    do {
        base = tat > now ? tat : now;
    } while (!atomic_compare_exchange_weak_explicit(&dev->tat_ns, &tat, base + scaled,
                                                    memory_order_relaxed, memory_order_relaxed));
    atomic_fetch_add_explicit(&dev->charged_ns, (uint64_t)cost, memory_order_relaxed);
    /* What NVML reports as the session's utilisation (estimates: not settled later). */
    fgpu_busy_add(dev, now, (uint64_t)cost);
    int64_t wait = base - fgpu_g.burst_ns - now;
    if (wait > fgpu_g.min_sleep_ns) {
        sleep_until(now + wait);
        atomic_fetch_add_explicit(&dev->throttled_ns, (uint64_t)wait, memory_order_relaxed);
    }
    t->dev = dev;
    t->scaled = scaled;
    t->cost = cost;
    uint32_t every = fgpu_g.sample_every;
    if (e->est > 0 && SAMPLE_GPU_NS / e->est < every)
        every = SAMPLE_GPU_NS / e->est < 1 ? 1 : (uint32_t)(SAMPLE_GPU_NS / e->est);
    int want = e->seen < EST_WINDOW || ++e->count % every == 0;
    if (want) {
        t->ctx = ctx;
        sample *s = take_sample(ts, ctx);
        fgpu_pfn_cuEventRecord record =
            ptsz ? FGPU_REAL(cuEventRecord_ptsz) : FGPU_REAL(cuEventRecord);
        if (s && record && record(s->start, stream) == CUDA_SUCCESS) {
            s->key = key;
            s->dev = dev;
            s->share = share;
            s->charged = cost;
            t->s = s;
        } else if (s) {
            drop_events(s); /* e.g. their context was destroyed: make new ones next time */
        }
    }
}

static void pace_after(ticket *t, CUresult rc, CUstream stream) {
    if (!t->dev)
        return;
    if (rc != CUDA_SUCCESS) { /* nothing ran: refund */
        atomic_fetch_sub_explicit(&t->dev->tat_ns, t->scaled, memory_order_relaxed);
        atomic_fetch_sub_explicit(&t->dev->charged_ns, (uint64_t)t->cost, memory_order_relaxed);
        return;
    }
    if (t->s) {
        fgpu_pfn_cuEventRecord record =
            t->ptsz ? FGPU_REAL(cuEventRecord_ptsz) : FGPU_REAL(cuEventRecord);
        if (record(t->s->end, stream) == CUDA_SUCCESS) {
            t->s->pending = 1;
            /* Behind the sample, not in front of it: the null launch then starts when
             * the kernel ends, on the GPU the context already holds. */
            if (fgpu_g.floor_auto)
                null_sample(t_state, t->ctx, stream, t->ptsz);
        } else {
            drop_events(t->s);
        }
    }
}


/* The launch-path branch: 1 when the launch must be paced (guard then held). */
static inline int pace_wanted(void) {
    fgpu_init();
    fgpu_layout *l = fgpu_g.l;
    if (FGPU_LIKELY(l == NULL))
        return 0;
    fgpu_count_launch();
    if (FGPU_LIKELY(!fgpu_g.s->compute_on) || fgpu_t_busy)
        return 0;
    fgpu_t_busy = 1;
    return 1;
}

#define PACED(key, stream, call)                        \
    do {                                                \
        if (FGPU_LIKELY(!pace_wanted()))                \
            return (call);                              \
        ticket t_;                                      \
        pace_before(&t_, (key), (stream), fgpu_sym_ptsz[id]); \
        CUresult rc_ = (call);                          \
        pace_after(&t_, rc_, (stream));                 \
        fgpu_leave();                                   \
        return rc_;                                     \
    } while (0)

CUresult fgpu_policy_launch_kernel(fgpu_sym id, CUfunction f, unsigned int gridDimX,
                                   unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY,
                                   unsigned int blockDimZ, unsigned int sharedMemBytes,
                                   CUstream hStream, void **kernelParams, void **extra) {
    REAL_OR_FAIL(cuLaunchKernel, id);
    PACED(kernel_key(f, (uint64_t)gridDimX * gridDimY * gridDimZ), hStream,
          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
               hStream, kernelParams, extra));
}

CUresult fgpu_policy_launch_kernel_ex(fgpu_sym id, const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra) {
    REAL_OR_FAIL(cuLaunchKernelEx, id);
    if (FGPU_UNLIKELY(!config))
        return real(config, f, kernelParams, extra);
    PACED(kernel_key(f, (uint64_t)config->gridDimX * config->gridDimY * config->gridDimZ),
          config->hStream, real(config, f, kernelParams, extra));
}

CUresult fgpu_policy_launch_cooperative(fgpu_sym id, CUfunction f, unsigned int gridDimX,
                                        unsigned int gridDimY, unsigned int gridDimZ,
                                        unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes,
                                        CUstream hStream, void **kernelParams) {
    REAL_OR_FAIL(cuLaunchCooperativeKernel, id);
    PACED(kernel_key(f, (uint64_t)gridDimX * gridDimY * gridDimZ), hStream,
          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
               hStream, kernelParams));
}

CUresult fgpu_policy_graph_launch(fgpu_sym id, CUgraphExec hGraphExec, CUstream hStream) {
    REAL_OR_FAIL(cuGraphLaunch, id);
    PACED(kernel_key(hGraphExec, 0), hStream, real(hGraphExec, hStream));
}
