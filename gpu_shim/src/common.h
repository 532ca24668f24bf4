/*
 * common.h - what both stand-ins (libcuda.so.1 and libnvidia-ml.so.1) share:
 * symbol attributes, the debug log and opening the real library by path.
 * No CUDA or NVML type appears here.
 */
#ifndef FGPU_COMMON_H
#define FGPU_COMMON_H

#include <stddef.h>

#define FGPU_HIDDEN __attribute__((visibility("hidden")))
#define FGPU_EXPORT __attribute__((visibility("default")))
#define FGPU_LIKELY(x) __builtin_expect(!!(x), 1)
#define FGPU_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Strips the parentheses of a params/args column: FGPU_UNPAREN (a, b) -> a, b. */
#define FGPU_UNPAREN(...) __VA_ARGS__
#define FGPU_TLS __thread __attribute__((tls_model("initial-exec")))

/* FGPU_DEBUG from the environment, read once at initialisation; 0 = silent. */
FGPU_HIDDEN extern int fgpu_debug_level;
/* One line on stderr, prefixed "[fgpu-shim PID] "; use FGPU_DEBUG. */
FGPU_HIDDEN void fgpu_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define FGPU_DEBUG(...)                           \
    do {                                          \
        if (FGPU_UNLIKELY(fgpu_debug_level))      \
            fgpu_log(__VA_ARGS__);                \
    } while (0)

/*
 * Run init once per process: the first caller runs it under a lock while others
 * wait, then *done is set (release).  A call from inside init on the same thread
 * (the real library's constructor calling one of our exports) returns at once.
 */
FGPU_HIDDEN void fgpu_once(_Atomic int *done, void (*init)(void));

/*
 * Open the real library: the absolute path in the environment variable env, else
 * the first readable of defaults[0..n).  A library whose probe symbol lies in this
 * very stand-in (the path points back at the shim) is refused.  extra_mode is or'ed
 * into RTLD_NOW | RTLD_LOCAL.  Returns the handle, or NULL (said under FGPU_DEBUG).
 */
FGPU_HIDDEN void *fgpu_open_real(const char *env, const char *const *defaults, size_t n,
                                 const char *probe, int extra_mode);
/* The real NVML: FGPU_REAL_LIBNVML, else the first of the drivers' usual places. */
FGPU_HIDDEN void *fgpu_open_real_nvml(void);

#endif /* FGPU_COMMON_H */
