"""Added cost of the shim per launch and per allocation pair; prints one JSON line.

Builds the shim (gpu_shim/Makefile), the fake driver of tests/shim and a small C
timing program, then times the same loops against the fake driver opened
directly and through the shim, resolving entry points the way the CUDA runtime
does (cuGetProcAddress_v2).  Each figure is the best of several repeats of the
mean per call, in nanoseconds; "added" is shim minus direct.

Usage: python bench/shim.py [--launches N] [--allocs N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.shim_kit import CC, SHIM_DIR, build_fake, build_shim

TARGET_LAUNCH_NS = 50
TARGET_ALLOC_PAIR_NS = 200

TIMER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "cuda_min.h"

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t,
                          CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *get(gpa_t gpa, const char *name, int version) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &p, version, 0, &st) != CUDA_SUCCESS || !p) {
        fprintf(stderr, "cannot resolve %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    const char *lib = argv[1];
    long launches = atol(argv[2]), allocs = atol(argv[3]);
    int repeats = atoi(argv[4]);
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = get(gpa, "cuInit", 2000);
    CUresult (*dev_get)(CUdevice *, int) = get(gpa, "cuDeviceGet", 2000);
    CUresult (*retain)(CUcontext *, CUdevice) = get(gpa, "cuDevicePrimaryCtxRetain", 7000);
    CUresult (*set)(CUcontext) = get(gpa, "cuCtxSetCurrent", 4000);
    launch_t launch = get(gpa, "cuLaunchKernel", 4000);
    launch_t launch_export = (launch_t)dlsym(h, "cuLaunchKernel");
    CUresult (*alloc)(CUdeviceptr *, size_t) = get(gpa, "cuMemAlloc", 3020);
    CUresult (*mfree)(CUdeviceptr) = get(gpa, "cuMemFree", 3020);
    CUdevice d;
    CUcontext ctx;
    if (init(0) || dev_get(&d, 0) || retain(&ctx, d) || set(ctx))
        return 1;
    double best_l = 1e18, best_x = 1e18, best_a = 1e18;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (long i = 0; i < launches; i++)
            launch((CUfunction)0x1000, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL);
        double t1 = now();
        for (long i = 0; i < launches; i++)
            launch_export((CUfunction)0x1000, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL);
        double t2 = now();
        for (long i = 0; i < allocs; i++) {
            CUdeviceptr p;
            if (alloc(&p, 4096) == CUDA_SUCCESS)
                mfree(p);
        }
        double t3 = now();
        if ((t1 - t0) / launches < best_l) best_l = (t1 - t0) / launches;
        if ((t2 - t1) / launches < best_x) best_x = (t2 - t1) / launches;
        if ((t3 - t2) / allocs < best_a) best_a = (t3 - t2) / allocs;
    }
    printf("{\"launch_ns\":%.2f,\"launch_export_ns\":%.2f,\"alloc_free_ns\":%.2f}\n",
           best_l, best_x, best_a);
    return 0;
}
"""


def _run(timer: Path, lib: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run(
        [str(timer), str(lib), str(args.launches), str(args.allocs), str(args.repeats)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=2_000_000)
    parser.add_argument("--allocs", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shim-bench-") as d:
        tmp = Path(d)
        shim = build_shim(tmp / "shim") / "libcuda.so.1"
        fake = build_fake(tmp / "fake")
        timer = tmp / "timer"
        (tmp / "timer.c").write_text(TIMER_C)
        subprocess.run(
            [CC, "-O2", "-std=gnu11", f"-I{SHIM_DIR / 'src'}", "-o", str(timer),
             str(tmp / "timer.c"), "-ldl"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        base = {"PATH": "/usr/bin:/bin", "FAKE_CUDA_STATE": str(tmp / "gpu")}
        through = {**base, "FGPU_REAL_LIBCUDA": str(fake)}
        direct = _run(timer, fake, base, args)
        passthrough = _run(timer, shim, through, args)
        limit = {"FGPU_MEM_LIMIT": "8G"}
        sliced = _run(timer, shim, {**through, **limit, "FGPU_REGION": str(tmp / "r1")}, args)
        share = {**limit, "FGPU_SM_SHARE": "0.5", "FGPU_REGION": str(tmp / "r2")}
        shared = _run(timer, shim, {**through, **share}, args)

    def added(run: dict[str, float], key: str) -> float:
        return round(run[key] - direct[key], 1)

    launch_added = added(sliced, "launch_ns")
    alloc_added = added(sliced, "alloc_free_ns")
    result = {
        "bench": "shim",
        "launch_direct_ns": round(direct["launch_ns"], 1),
        "launch_added_ns": launch_added,
        "launch_added_ns_export": added(sliced, "launch_export_ns"),
        "launch_added_ns_no_slice": added(passthrough, "launch_ns"),
        "launch_added_ns_with_sm_share": added(shared, "launch_ns"),
        "alloc_free_direct_ns": round(direct["alloc_free_ns"], 1),
        "alloc_free_added_ns": alloc_added,
        "alloc_free_added_ns_no_slice": added(passthrough, "alloc_free_ns"),
        "targets_ns": {"launch_added": TARGET_LAUNCH_NS, "alloc_free_added": TARGET_ALLOC_PAIR_NS},
        "meets_targets": launch_added < TARGET_LAUNCH_NS and alloc_added < TARGET_ALLOC_PAIR_NS,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
