/*
 * forward.h - plain forwards for every symbol a stand-in does not hook.
 *
 * Each name of the library's forward list (forward_list.h for libcuda.so.1,
 * nvml_forward_list.h for libnvidia-ml.so.1, chosen by FGPU_FORWARD_LIST when
 * forward.c and trampolines.S are compiled) is exported by trampolines.S as a
 * two-instruction trampoline that jumps through a hidden pointer
 * (fgpu_fp_<name>).  The pointers start at a lazy stub that saves the argument
 * registers, runs the library's initialisation and continues to the real
 * function, so a call that arrives before the constructor still lands in the
 * real library.  The trampolines know no signatures: they never touch
 * arguments or the return value.
 */
#ifndef FGPU_FORWARD_H
#define FGPU_FORWARD_H

#include "common.h"

/* Point every forward at dlsym(handle, name); handle NULL: no real library. */
FGPU_HIDDEN void fgpu_forward_resolve_all(void *handle);
/* Called by the lazy stubs with the address of the pointer to resolve. */
FGPU_HIDDEN void *fgpu_fwd_lazy(void **slot);
/* The library's once-only initialisation (which calls fgpu_forward_resolve_all). */
FGPU_HIDDEN void fgpu_lib_init(void);

#endif /* FGPU_FORWARD_H */
