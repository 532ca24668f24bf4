/*
 * forward.h - plain forwards for every driver symbol the shim does not hook.
 *
 * Each name in forward_list.h is exported by trampolines.S as a two-instruction
 * trampoline that jumps through a hidden pointer (fgpu_fp_<name>).  The
 * pointers start at a lazy stub that saves the argument registers, runs the
 * shim's initialisation and continues to the real function, so a call that
 * arrives before the constructor still lands in the driver.  The trampolines
 * know no signatures: they never touch arguments or the return value.
 */
#ifndef FGPU_FORWARD_H
#define FGPU_FORWARD_H

#include "hooks.h"

/* Point every forward at dlsym(handle, name); handle NULL: no driver. */
FGPU_HIDDEN void fgpu_forward_resolve_all(void *handle);
/* Called by the lazy stubs with the address of the pointer to resolve. */
FGPU_HIDDEN void *fgpu_fwd_lazy(void **slot);

#endif /* FGPU_FORWARD_H */
