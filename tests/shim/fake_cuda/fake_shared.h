/*
 * fake_shared.h - the fake GPU's state, shared by every process using one fake
 * GPU through the file FAKE_CUDA_STATE: the fake driver writes it, the fake
 * NVML reads the bytes held on each device (tests/support/shim_kit.py reads it
 * too: keep FakeDevice's layout in step).
 */
#ifndef FAKE_SHARED_H
#define FAKE_SHARED_H

#include <stdatomic.h>
#include <stdint.h>

#define FAKE_MAX_DEV 4
#define FAKE_MAX_TENANT 8

struct fake_shared {
    _Atomic uint32_t ticket;
    _Atomic uint32_t serving;
    _Atomic uint64_t launches;
    _Atomic uint64_t in_use[FAKE_MAX_DEV]; /* everything held: allocations, contexts, modules */
    _Atomic uint64_t peak[FAKE_MAX_DEV];
    _Atomic uint64_t busy_ns[FAKE_MAX_TENANT];
    _Atomic uint64_t kernels[FAKE_MAX_TENANT];
    _Atomic uint64_t held_ns;     /* the device held, by kernels and switches between tenants */
    _Atomic uint32_t last_tenant; /* tenant + 1 of the last kernel; 0 before the first */
};

#endif /* FAKE_SHARED_H */
