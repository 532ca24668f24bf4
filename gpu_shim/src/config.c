/*
 * config.c - the slice and tunables from the environment.  Amounts are parsed
 * exactly: sizes as integers with binary units, shares as integer parts per
 * million or as decimals into them (no floating point).  Unparsable values are ignored (reported
 * only under FGPU_DEBUG).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region_layout.h"

/* "8GiB", "512M", "1073741824": binary units. 0 on success. */
static int parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    uint64_t mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1ULL << 10; end++; break;
    case 'M': case 'm': mul = 1ULL << 20; end++; break;
    case 'G': case 'g': mul = 1ULL << 30; end++; break;
    case 'T': case 't': mul = 1ULL << 40; end++; break;
    default: break;
    }
    if (mul > 1) {
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    while (*end == ' ')
        end++;
    if (*end != '\0' || (mul > 1 && v > UINT64_MAX / mul))
        return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

/* "0.5" -> 500000 exactly (decimal digits, no floating point). 0 on success. */
static int parse_share(const char *s, uint32_t *out) {
    uint64_t ip = 0, frac = 0;
    int digits = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') {
        if (*p != '.')
            return -1;
    }
    while (*p >= '0' && *p <= '9') {
        ip = ip * 10 + (uint64_t)(*p++ - '0');
        if (ip > 1)
            return -1;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (digits < 6) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                digits++;
            }
            p++;
        }
    }
    if (*p != '\0')
        return -1;
    while (digits++ < 6)
        frac *= 10;
    uint64_t ppm = ip * FGPU_SHARE_FULL + frac;
    if (ppm == 0 || ppm > FGPU_SHARE_FULL)
        return -1;
    *out = (uint32_t)ppm;
    return 0;
}

/* "500000" -> 500000: a share already in parts per million, as the agent passes it.
 * The same range as parse_share's: 1..FGPU_SHARE_FULL. 0 on success. */
static int parse_share_ppm(const char *s, uint32_t *out) {
    uint64_t ppm = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        ppm = ppm * 10 + (uint64_t)(*p++ - '0');
        if (ppm > FGPU_SHARE_FULL)
            return -1;
    }
    if (*p != '\0' || ppm == 0)
        return -1;
    *out = (uint32_t)ppm;
    return 0;
}

/* Split a comma list; a single value applies to every device. Returns count or -1. */
static int parse_list(const char *env, int (*one)(const char *, void *), void *vals,
                      size_t elem) {
    char buf[512];
    if (strlen(env) >= sizeof(buf))
        return -1;
    strcpy(buf, env);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (n >= FGPU_MAX_DEVICES || one(tok, (char *)vals + (size_t)n * elem) != 0)
            return -1;
        n++;
    }
    if (n == 1)
        for (int d = 1; d < FGPU_MAX_DEVICES; d++)
            memcpy((char *)vals + (size_t)d * elem, vals, elem);
    return n;
}

static int one_size(const char *s, void *out) { return parse_size(s, out); }
static int one_share(const char *s, void *out) { return parse_share(s, out); }
static int one_share_ppm(const char *s, void *out) { return parse_share_ppm(s, out); }

/* The list in the variable name, parsed into vals: its count, or -1 if unset or unparsable. */
static int env_list(const char *name, int (*one)(const char *, void *), void *vals,
                    size_t elem) {
    const char *env = getenv(name);
    if (!env || !*env)
        return -1;
    int n = parse_list(env, one, vals, elem);
    if (n < 0)
        FGPU_DEBUG("ignoring unparsable %s=%s", name, env);
    return n;
}

int fgpu_config_from_env(fgpu_config *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    int nmem = env_list("FGPU_MEM_LIMIT", one_size, cfg->mem_limit, sizeof(cfg->mem_limit[0]));
    /* Parts per million first (the agent's), else the decimal share (a person's). */
    int nshare = env_list("FGPU_SM_SHARE_PPM", one_share_ppm, cfg->sm_share_ppm,
                          sizeof(cfg->sm_share_ppm[0]));
    if (nshare < 0)
        nshare =
            env_list("FGPU_SM_SHARE", one_share, cfg->sm_share_ppm, sizeof(cfg->sm_share_ppm[0]));
    int n = nmem > nshare ? nmem : nshare;
    if (n < 0)
        return 0;
    cfg->ndev = (uint32_t)n;
    return 1;
}

int64_t fgpu_env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi) {
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return dflt;
    return v;
}


fgpu_region *fgpu_region_from_env(void) {
    fgpu_config cfg;
    int have_env = fgpu_config_from_env(&cfg);
    const char *path = getenv("FGPU_REGION");
    fgpu_region *r = NULL;
    if (path && *path) {
        int rc = fgpu_region_open(path, 1, have_env ? &cfg : NULL, &r);
        if (rc != 0) {
            FGPU_DEBUG("cannot open region %s (%s); limits from the environment apply to this "
                       "process only",
                       path, strerror(-rc));
            r = NULL;
            have_env = 1;
        }
    }
    if (!r && have_env && fgpu_region_open_private(&cfg, &r) != 0)
        r = NULL;
    FGPU_DEBUG("%s", !r ? "pass-through: no slice configured"
                        : (r->fd >= 0 ? "shared region" : "private region"));
    return r;
}

/* The pace file of the region at FGPU_REGION, mapped read-only; NULL when there is
 * none (or it is not one: a wrong size, magic or version is ignored, not trusted). */
const fgpu_pace *fgpu_pace_from_env(void) {
    const char *path = getenv("FGPU_REGION");
    char name[4096];
    if (!path || !*path || snprintf(name, sizeof(name), "%s%s", path, FGPU_PACE_SUFFIX) >=
                               (int)sizeof(name))
        return NULL;
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(fgpu_pace))
        m = mmap(NULL, sizeof(fgpu_pace), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    const fgpu_pace *p = m;
    if (p->magic != FGPU_PACE_MAGIC || p->version != FGPU_PACE_VERSION) {
        munmap(m, sizeof(fgpu_pace));
        return NULL;
    }
    FGPU_DEBUG("pace file %s", name);
    return p;
}
