/* common.c - the debug log and the real library's loader of both stand-ins. */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

FGPU_HIDDEN int fgpu_debug_level;

void fgpu_log(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(buf, sizeof(buf), "[fgpu-shim %d] ", (int)getpid());
    if (n < 0)
        n = 0;
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < sizeof(buf) - (size_t)n - 1
                                               ? (size_t)m
                                               : sizeof(buf) - (size_t)n - 2));
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static FGPU_TLS int t_in_init;

void fgpu_once(_Atomic int *done, void (*init)(void)) {
    if (t_in_init)
        return; /* re-entered from the real library's constructor: forward as far as we can */
    pthread_mutex_lock(&g_init_mu);
    if (!atomic_load_explicit(done, memory_order_acquire)) {
        t_in_init = 1;
        init();
        t_in_init = 0;
        atomic_store_explicit(done, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g_init_mu);
}

/* 1 when p lies in the library this function is linked into. */
static int is_self(void *p) {
    Dl_info a, b;
    return p && dladdr(p, &a) && dladdr((void *)&fgpu_open_real, &b) &&
           a.dli_fbase == b.dli_fbase;
}

void *fgpu_open_real(const char *env, const char *const *defaults, size_t n,
                     const char *probe, int extra_mode) {
    const char *path = getenv(env);
    int mode = RTLD_NOW | RTLD_LOCAL | extra_mode;
    void *h = NULL;
    if (path && *path) {
        if (path[0] != '/')
            FGPU_DEBUG("%s must be an absolute path: %s", env, path);
        else
            h = dlopen(path, mode);
    } else {
        for (size_t i = 0; !h && i < n; i++)
            if (access(defaults[i], R_OK) == 0) {
                path = defaults[i];
                h = dlopen(path, mode);
            }
    }
    if (!h) {
        FGPU_DEBUG("no real library loaded (%s): %s", path ? path : "no candidate path",
                   dlerror());
        return NULL;
    }
    if (is_self(dlsym(h, probe))) {
        FGPU_DEBUG("%s points at the shim itself (%s); no real library", env, path);
        dlclose(h);
        return NULL;
    }
    FGPU_DEBUG("real library: %s", path);
    return h;
}

/* Where drivers install the real NVML, in the order tried. */
static const char *const k_real_nvml[] = {
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", /* Debian/Ubuntu, NVIDIA container toolkit */
    "/usr/lib64/libnvidia-ml.so.1",                /* RHEL, SUSE */
    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1", /* Kubernetes device plugins */
    "/usr/lib/wsl/lib/libnvidia-ml.so.1",
};

void *fgpu_open_real_nvml(void) {
    return fgpu_open_real("FGPU_REAL_LIBNVML", k_real_nvml,
                          sizeof(k_real_nvml) / sizeof(k_real_nvml[0]), "nvmlInit_v2", 0);
}
