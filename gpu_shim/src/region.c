/*
 * region.c - create, map, configure and read a container's shared region;
 * claim, release and reclaim process slots.  Compiled into the shim and into
 * the reader extension.  Everything here runs off the CUDA hot path (init,
 * fork, exit, the agent's polls); it may make system calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region_layout.h"

/* The slice of cfg (NULL: no limits), shares outside (0, FGPU_SHARE_FULL] meaning none. */
static void init_slice(fgpu_slice *s, const fgpu_config *cfg) {
    memset(s, 0, sizeof(*s));
    s->magic = FGPU_SLICE_MAGIC;
    s->version = FGPU_SLICE_VERSION;
    s->layout_size = (uint32_t)sizeof(fgpu_slice);
    uint32_t ndev = cfg ? cfg->ndev : 0;
    s->ndev = ndev > FGPU_MAX_DEVICES ? FGPU_MAX_DEVICES : ndev;
    for (uint32_t d = 0; d < FGPU_MAX_DEVICES; d++) {
        uint32_t share = (cfg && d < s->ndev) ? cfg->sm_share_ppm[d] : 0;
        if (share == 0 || share > FGPU_SHARE_FULL)
            share = FGPU_SHARE_FULL;
        s->dev[d].limit = (cfg && d < s->ndev) ? cfg->mem_limit[d] : 0;
        s->dev[d].sm_share_ppm = share;
        s->compute_on |= share < FGPU_SHARE_FULL;
    }
}

static int valid_slice(const fgpu_slice *s) {
    if (s->magic != FGPU_SLICE_MAGIC || s->version != FGPU_SLICE_VERSION ||
        s->layout_size != sizeof(fgpu_slice) || s->ndev > FGPU_MAX_DEVICES)
        return 0;
    uint32_t on = 0;
    for (uint32_t d = 0; d < FGPU_MAX_DEVICES; d++) {
        uint32_t share = s->dev[d].sm_share_ppm;
        if (share == 0 || share > FGPU_SHARE_FULL)
            return 0;
        on |= share < FGPU_SHARE_FULL;
    }
    return on == s->compute_on;
}

/* path + FGPU_SLICE_SUFFIX, malloc'd; NULL when out of memory. */
static char *slice_path(const char *path) {
    size_t n = strlen(path);
    char *p = malloc(n + sizeof(FGPU_SLICE_SUFFIX));
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, FGPU_SLICE_SUFFIX, sizeof(FGPU_SLICE_SUFFIX));
    }
    return p;
}

/* Read the slice file at spath into s, opened read-only: 0, -ENOENT, -EINVAL or -errno. */
static int read_slice(const char *spath, fgpu_slice *s) {
    int fd = open(spath, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    int rc = 0;
    while (got < sizeof(*s)) {
        ssize_t n = pread(fd, (char *)s + got, sizeof(*s) - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EINVAL; /* a short file is not a slice */
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    if (rc == 0 && !valid_slice(s))
        rc = -EINVAL;
    return rc;
}

/*
 * Publish the slice of cfg at spath: written whole to a temporary file of mode
 * 0444 beside it, then renamed over spath (replace) or linked to it only if
 * none is there (the first publisher wins; losing is success).  A reader
 * therefore sees no slice or a complete one, never a part.  0 or -errno.
 */
static int publish_slice(const char *spath, const fgpu_config *cfg, int replace) {
    size_t n = strlen(spath);
    char *tmp = malloc(n + sizeof(".XXXXXX"));
    if (!tmp)
        return -ENOMEM;
    memcpy(tmp, spath, n);
    memcpy(tmp + n, ".XXXXXX", sizeof(".XXXXXX"));
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        free(tmp);
        return rc;
    }
    fgpu_slice s;
    init_slice(&s, cfg);
    int rc = fchmod(fd, 0444) == 0 ? 0 : -errno;
    for (size_t done = 0; rc == 0 && done < sizeof(s);) {
        ssize_t w = write(fd, (const char *)&s + done, sizeof(s) - done);
        if (w < 0 && errno != EINTR)
            rc = -errno;
        else if (w > 0)
            done += (size_t)w;
    }
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && replace && rename(tmp, spath) != 0)
        rc = -errno;
    if (rc == 0 && !replace && link(tmp, spath) != 0 && errno != EEXIST)
        rc = -errno;
    if (rc != 0 || !replace)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* Open (create: or create and initialise) the counters file into r. 0 or -errno. */
static int open_counters(fgpu_region *r, const char *path, int create) {
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
    int fd = open(path, flags, 0666);
    if (fd < 0)
        return -errno;
    int rc = 0;
    void *map = MAP_FAILED;
    size_t size = sizeof(fgpu_layout);
    /* Creation is serialised by flock; slot locks are OFD locks and do not interact. */
    if (flock(fd, LOCK_EX) != 0) {
        rc = -errno;
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto fail_unlock;
    }
    int fresh = 0;
    if ((size_t)st.st_size != size) {
        if (!create || st.st_size != 0) {
            rc = -EINVAL; /* not a counters file of this layout */
            goto fail_unlock;
        }
        if (ftruncate(fd, (off_t)size) != 0) {
            rc = -errno;
            goto fail_unlock;
        }
        fresh = 1;
    }
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        goto fail_unlock;
    }
    fgpu_layout *l = map;
    if (fresh) {
        l->version = FGPU_REGION_VERSION;
        l->layout_size = (uint32_t)sizeof(fgpu_layout);
        atomic_store_explicit(&l->magic, FGPU_REGION_MAGIC, FGPU_RELEASE);
    } else if (atomic_load_explicit(&l->magic, FGPU_ACQUIRE) != FGPU_REGION_MAGIC ||
               l->version != FGPU_REGION_VERSION || l->layout_size != sizeof(fgpu_layout)) {
        rc = -EINVAL;
        goto fail_unlock;
    }
    flock(fd, LOCK_UN);
    r->l = l;
    r->fd = fd;
    r->size = size;
    return 0;
fail_unlock:
    flock(fd, LOCK_UN);
fail:
    if (map != MAP_FAILED)
        munmap(map, size);
    close(fd);
    return rc;
}

int fgpu_region_open(const char *path, int create, const fgpu_config *cfg, fgpu_region **out) {
    fgpu_region *r = calloc(1, sizeof(*r));
    char *p = strdup(path);
    char *sp = slice_path(path);
    int rc = (r && p && sp) ? 0 : -ENOMEM;
    if (rc == 0)
        rc = open_counters(r, path, create); /* first: a version 1 region fails here */
    if (rc == 0) {
        rc = read_slice(sp, &r->slice);
        if (rc == -ENOENT && create) {
            rc = publish_slice(sp, cfg, 0);
            if (rc == 0)
                rc = read_slice(sp, &r->slice);
        }
        if (rc != 0) {
            munmap(r->l, r->size);
            close(r->fd);
        }
    }
    free(sp);
    if (rc != 0) {
        free(r);
        free(p);
        return rc;
    }
    r->path = p;
    *out = r;
    return 0;
}

int fgpu_region_create(const char *path, const fgpu_config *cfg, fgpu_region **out) {
    char *sp = slice_path(path);
    if (!sp)
        return -ENOMEM;
    int rc = publish_slice(sp, cfg, 1);
    free(sp);
    /* No process uses the region yet: counters left from before (another version's, or
     * an earlier try's) are replaced, not trusted. */
    if (rc == 0 && unlink(path) != 0 && errno != ENOENT)
        rc = -errno;
    return rc != 0 ? rc : fgpu_region_open(path, 1, cfg, out);
}

int fgpu_region_open_private(const fgpu_config *cfg, fgpu_region **out) {
    size_t size = sizeof(fgpu_layout);
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return -errno;
    fgpu_region *r = calloc(1, sizeof(*r));
    if (!r) {
        munmap(map, size);
        return -ENOMEM;
    }
    fgpu_layout *l = map;
    l->version = FGPU_REGION_VERSION;
    l->layout_size = (uint32_t)size;
    atomic_store_explicit(&l->magic, FGPU_REGION_MAGIC, FGPU_RELEASE);
    init_slice(&r->slice, cfg);
    r->l = l;
    r->fd = -1;
    r->size = size;
    *out = r;
    return 0;
}

void fgpu_region_close(fgpu_region *r) {
    if (!r)
        return;
    munmap(r->l, r->size);
    if (r->fd >= 0)
        close(r->fd);
    free(r->path);
    free(r);
}

uint32_t fgpu_region_ndev(const fgpu_region *r) { return r->slice.ndev; }

int fgpu_region_device(const fgpu_region *r, uint32_t device, fgpu_device_stats *out) {
    if (device >= FGPU_MAX_DEVICES)
        return -EINVAL;
    fgpu_dev_shared *d = &r->l->dev[device];
    out->limit = r->slice.dev[device].limit;
    out->sm_share_ppm = r->slice.dev[device].sm_share_ppm;
    out->index = device;
    /* Counters are independent atomics; peak is read after in_use so peak >= in_use. */
    out->in_use = atomic_load_explicit(&d->in_use, FGPU_RELAXED);
    out->peak = atomic_load_explicit(&d->peak, FGPU_ACQUIRE);
    if (out->peak < out->in_use)
        out->peak = out->in_use;
    out->launches = atomic_load_explicit(&d->launches, FGPU_RELAXED);
    out->throttled_ns = atomic_load_explicit(&d->throttled_ns, FGPU_RELAXED);
    out->refusals = atomic_load_explicit(&d->refusals, FGPU_RELAXED);
    out->charged_ns = atomic_load_explicit(&d->charged_ns, FGPU_RELAXED);
    return 0;
}

/* The lock of a slot: one byte of the file, at FGPU_LOCK_BASE + slot. */
static struct flock slot_lock(uint32_t slot, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = FGPU_LOCK_BASE + (off_t)slot;
    fl.l_len = 1;
    return fl;
}

/* F_OFD_SETLK on one byte; 1 when taken, 0 when someone else holds it. */
static int ofd_lock(int fd, uint32_t slot, short type) {
    struct flock fl = slot_lock(slot, type);
    return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

static int ofd_probe_alive(int fd, uint32_t slot) {
    struct flock fl = slot_lock(slot, F_WRLCK);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return 1; /* cannot tell: assume alive, never steal */
    return fl.l_type != F_UNLCK;
}

int fgpu_region_process(fgpu_region *r, uint32_t slot, fgpu_process *out) {
    if (slot >= FGPU_MAX_SLOTS)
        return -EINVAL;
    fgpu_slot_shared *s = &r->l->slot[slot];
    memset(out, 0, sizeof(*out));
    out->slot = slot;
    if (atomic_load_explicit(&s->state, FGPU_ACQUIRE) != FGPU_SLOT_ACTIVE)
        return 0;
    out->pid = atomic_load_explicit(&s->pid, FGPU_RELAXED);
    out->start_time = atomic_load_explicit(&s->start_time, FGPU_RELAXED);
    for (uint32_t d = 0; d < FGPU_MAX_DEVICES; d++)
        out->bytes[d] = atomic_load_explicit(&s->bytes[d], FGPU_RELAXED);
    out->alive = r->fd >= 0 ? ofd_probe_alive(r->fd, slot) : 1;
    return 1;
}

size_t fgpu_region_drain(const fgpu_region *r, uint64_t after, fgpu_happening *out, size_t max,
                         uint64_t *next_after, uint64_t *lost) {
    fgpu_layout *l = r->l;
    uint64_t head = atomic_load_explicit(&l->ring_head, FGPU_ACQUIRE);
    uint64_t first = after + 1;
    *lost = 0;
    if (head >= FGPU_RING_SIZE && first <= head - FGPU_RING_SIZE) {
        *lost = head - FGPU_RING_SIZE + 1 - first;
        first = head - FGPU_RING_SIZE + 1;
    }
    size_t n = 0;
    uint64_t seq = first;
    for (; seq <= head && n < max; seq++) {
        fgpu_ring_rec *rec = &l->ring[(seq - 1) & (FGPU_RING_SIZE - 1)];
        uint64_t st = atomic_load_explicit(&rec->stamp, FGPU_ACQUIRE);
        if (st < 2 * seq) {
            /* Being written (or not yet started).  Wait for it unless the ring
             * has moved on so far that its writer must have died mid-record. */
            if (head - seq < FGPU_RING_SIZE / 2)
                break;
            (*lost)++;
            continue;
        }
        if (st != 2 * seq) { /* overwritten by a later lap */
            (*lost)++;
            continue;
        }
        fgpu_happening h;
        h.seq = seq;
        h.kind = atomic_load_explicit(&rec->kind, FGPU_RELAXED);
        h.device = atomic_load_explicit(&rec->device, FGPU_RELAXED);
        h.pid = atomic_load_explicit(&rec->pid, FGPU_RELAXED);
        h.slot = atomic_load_explicit(&rec->slot, FGPU_RELAXED);
        h.value = atomic_load_explicit(&rec->value, FGPU_RELAXED);
        h.value2 = atomic_load_explicit(&rec->value2, FGPU_RELAXED);
        h.time_ns = atomic_load_explicit(&rec->time_ns, FGPU_RELAXED);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&rec->stamp, FGPU_RELAXED) != st) {
            (*lost)++;
            continue;
        }
        out[n++] = h;
    }
    *next_after = seq - 1;
    return n;
}

/*
 * Give every byte the slot still counts back to its device, record why in the
 * ring (kind) and free the slot; the bytes given back.  The caller holds the
 * slot's lock, or is its owner.
 */
static uint64_t vacate(fgpu_layout *l, uint32_t slot, uint32_t kind) {
    fgpu_slot_shared *s = &l->slot[slot];
    uint64_t total = 0;
    for (uint32_t d = 0; d < FGPU_MAX_DEVICES; d++) {
        uint64_t b = atomic_exchange_explicit(&s->bytes[d], 0, FGPU_RELAXED);
        if (b) {
            fgpu_sub_floor(&l->dev[d].in_use, b);
            total += b;
        }
    }
    fgpu_ring_push(l, kind, -1, atomic_load_explicit(&s->pid, FGPU_RELAXED), slot, total,
                   atomic_load_explicit(&s->start_time, FGPU_RELAXED));
    atomic_store_explicit(&s->state, FGPU_SLOT_FREE, FGPU_RELEASE);
    return total;
}

/* Give back a dead owner's bytes; the caller holds the slot's lock. */
static uint64_t reclaim_locked(fgpu_layout *l, uint32_t slot) {
    if (atomic_load_explicit(&l->slot[slot].state, FGPU_ACQUIRE) != FGPU_SLOT_ACTIVE)
        return 0;
    return vacate(l, slot, FGPU_HAPPENING_PROC_RECLAIMED);
}

uint64_t fgpu_region_reclaim_dead(fgpu_region *r) {
    if (r->fd < 0)
        return 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < FGPU_MAX_SLOTS; i++) {
        if (atomic_load_explicit(&r->l->slot[i].state, FGPU_ACQUIRE) != FGPU_SLOT_ACTIVE)
            continue;
        if (!ofd_lock(r->fd, i, F_WRLCK))
            continue; /* owner alive (or another reclaimer is at it) */
        total += reclaim_locked(r->l, i);
        ofd_lock(r->fd, i, F_UNLCK);
    }
    return total;
}

int fgpu_region_claim_slot(fgpu_region *r, int32_t pid, uint64_t start_time, uint32_t *slot_out) {
    fgpu_layout *l = r->l;
    for (uint32_t i = 0; i < FGPU_MAX_SLOTS; i++) {
        if (r->fd >= 0 && !ofd_lock(r->fd, i, F_WRLCK))
            continue;
        if (r->fd < 0 && atomic_load_explicit(&l->slot[i].state, FGPU_RELAXED) != FGPU_SLOT_FREE)
            continue;
        /* Holding the lock: the slot is free or its owner is dead. */
        reclaim_locked(l, i);
        fgpu_slot_shared *s = &l->slot[i];
        atomic_store_explicit(&s->pid, pid, FGPU_RELAXED);
        atomic_store_explicit(&s->start_time, start_time, FGPU_RELAXED);
        for (uint32_t d = 0; d < FGPU_MAX_DEVICES; d++)
            atomic_store_explicit(&s->bytes[d], 0, FGPU_RELAXED);
        atomic_store_explicit(&s->state, FGPU_SLOT_ACTIVE, FGPU_RELEASE);
        fgpu_ring_push(l, FGPU_HAPPENING_PROC_START, -1, pid, i, start_time, 0);
        *slot_out = i;
        return 0;
    }
    fgpu_ring_push(l, FGPU_HAPPENING_SLOTS_FULL, -1, pid, FGPU_NO_SLOT, start_time, 0);
    return -ENOSPC;
}

void fgpu_region_release_slot(fgpu_region *r, uint32_t slot) {
    /* The driver frees a process's memory when it exits: give it all back. */
    vacate(r->l, slot, FGPU_HAPPENING_PROC_EXIT);
    if (r->fd >= 0)
        ofd_lock(r->fd, slot, F_UNLCK);
}

int fgpu_region_reopen_fd(fgpu_region *r) {
    if (!r->path)
        return 0;
    int fd = open(r->path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r->fd = fd;
    return 0;
}

void fgpu_region_forget_fd(fgpu_region *r) {
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}
