/* allocmap.c - see allocmap.h. */
#define _GNU_SOURCE
#include "allocmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SHARDS 64
#define MIN_CAP 64

typedef struct shard {
    pthread_mutex_t mu;
    fgpu_alloc *tab; /* key == 0 && kind == 0: empty */
    uint32_t cap;    /* power of two or 0 */
    uint32_t n;
} __attribute__((aligned(64))) shard;

static shard g_shards[SHARDS];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_shards(void) {
    for (int i = 0; i < SHARDS; i++)
        pthread_mutex_init(&g_shards[i].mu, NULL);
}

static inline uint64_t mix(uint32_t kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 59)) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline shard *shard_of(uint64_t h) { return &g_shards[h & (SHARDS - 1)]; }

static inline int empty(const fgpu_alloc *e) { return e->kind == 0; }

static int grow(shard *s) {
    uint32_t ncap = s->cap ? s->cap * 2 : MIN_CAP;
    fgpu_alloc *nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        fgpu_alloc *e = &s->tab[i];
        if (empty(e))
            continue;
        uint32_t j = (uint32_t)(mix(e->kind, e->key) >> 6) & (ncap - 1);
        while (!empty(&nt[j]))
            j = (j + 1) & (ncap - 1);
        nt[j] = *e;
    }
    free(s->tab);
    s->tab = nt;
    s->cap = ncap;
    return 0;
}

int fgpu_allocmap_put(const fgpu_alloc *a) {
    pthread_once(&g_once, init_shards);
    uint64_t h = mix(a->kind, a->key);
    shard *s = shard_of(h);
    pthread_mutex_lock(&s->mu);
    /* Load factor <= 1/2 keeps probes short. */
    if ((s->n + 1) * 2 > s->cap && grow(s) != 0) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    uint32_t mask = s->cap - 1;
    uint32_t j = (uint32_t)(h >> 6) & mask;
    while (!empty(&s->tab[j]))
        j = (j + 1) & mask;
    s->tab[j] = *a;
    s->n++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Backward-shift deletion at index i; caller holds the shard lock. */
static void remove_at(shard *s, uint32_t i) {
    uint32_t mask = s->cap - 1;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        fgpu_alloc *e = &s->tab[j];
        if (empty(e))
            break;
        uint32_t home = (uint32_t)(mix(e->kind, e->key) >> 6) & mask;
        /* Move e into the hole at i unless its home lies cyclically in (i, j]. */
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            s->tab[i] = *e;
            i = j;
        }
    }
    memset(&s->tab[i], 0, sizeof(s->tab[i]));
    s->n--;
}

int fgpu_allocmap_take(uint32_t kind, uint64_t key, fgpu_alloc *out) {
    pthread_once(&g_once, init_shards);
    uint64_t h = mix(kind, key);
    shard *s = shard_of(h);
    int found = 0;
    pthread_mutex_lock(&s->mu);
    if (s->cap) {
        uint32_t mask = s->cap - 1;
        for (uint32_t j = (uint32_t)(h >> 6) & mask; !empty(&s->tab[j]); j = (j + 1) & mask) {
            if (s->tab[j].key == key && s->tab[j].kind == kind) {
                *out = s->tab[j];
                remove_at(s, j);
                found = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

void fgpu_allocmap_take_ctx(void *ctx, void (*fn)(const fgpu_alloc *)) {
    pthread_once(&g_once, init_shards);
    for (int k = 0; k < SHARDS; k++) {
        shard *s = &g_shards[k];
        for (;;) {
            fgpu_alloc victim;
            int found = 0;
            pthread_mutex_lock(&s->mu);
            for (uint32_t j = 0; j < s->cap; j++) {
                if (!empty(&s->tab[j]) && s->tab[j].ctx == ctx) {
                    victim = s->tab[j];
                    remove_at(s, j);
                    found = 1;
                    break;
                }
            }
            pthread_mutex_unlock(&s->mu);
            if (!found)
                break;
            fn(&victim);
        }
    }
}

void fgpu_allocmap_lock_all(void) {
    pthread_once(&g_once, init_shards);
    for (int i = 0; i < SHARDS; i++)
        pthread_mutex_lock(&g_shards[i].mu);
}

void fgpu_allocmap_unlock_all(void) {
    for (int i = SHARDS - 1; i >= 0; i--)
        pthread_mutex_unlock(&g_shards[i].mu);
}

void fgpu_allocmap_clear(void) {
    for (int i = 0; i < SHARDS; i++) {
        free(g_shards[i].tab);
        g_shards[i].tab = NULL;
        g_shards[i].cap = 0;
        g_shards[i].n = 0;
    }
}
