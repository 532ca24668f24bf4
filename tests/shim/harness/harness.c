/*
 * harness.c - drives "libcuda.so.1" (the shim, found through LD_LIBRARY_PATH)
 * the way the CUDA runtime does: dlopen("libcuda.so.1"), dlsym only
 * cuGetProcAddress_v2, then resolve every entry point by name, CUDA version
 * and flags (0, or 2 = per-thread default stream with --ptds).  Prints one
 * JSON object per line.
 *
 *   harness resolve                 how each look-up resolved (dladdr of the result)
 *   harness paths                   every allocation path: fits (0), then over (2)
 *   harness meminfo                 cuMemGetInfo / cuDeviceTotalMem as the process sees them
 *   harness random ITER SEED MAX    random allocations and frees; counts of ok / oom
 *   harness hold BYTES              allocate, print {"held":...}, wait to be killed
 *   harness loadhold N BYTES        load N modules and N libraries, then as hold
 *   harness launch SECS NS [graph | idle IDLE_NS]  launch NS-long fake kernels (or graphs) for SECS
 *                        (with idle, sleeping IDLE_NS after each)
 *   harness ctxdestroy BYTES        allocate, destroy the context, report meminfo
 *   harness exit BYTES              allocate and exit without freeing
 *   harness used BYTES              allocate, then report meminfo
 *   harness forkrandom N ITER MAX   fork N children after initialisation, each runs random
 *   harness direct                  call forwarded (unhooked) exports found with dlsym
 *   harness driverobjects           load and unload a module and a library, create and
 *                                   destroy a context: meminfo after each step
 *
 * A process whose context cannot be set up prints {"error":..., "retain":rc} and exits 3.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_min.h"

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t,
                          CUdriverProcAddressQueryResult *);
static gpa_t g_gpa;
static cuuint64_t g_stream_flags; /* 0 or CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

static void *resolve(const char *name, int version, cuuint64_t flags) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (g_gpa(name, &p, version, flags, &st) != CUDA_SUCCESS)
        return NULL;
    return p;
}

static void *need(const char *name, int version, cuuint64_t flags) {
    void *p = resolve(name, version, flags);
    if (!p) {
        printf("{\"error\":\"cannot resolve %s\"}\n", name);
        exit(3);
    }
    return p;
}

/* The runtime's view of the driver: resolved once, by version and flags. */
static struct {
    CUresult (*init)(unsigned int);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*library_load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int,
                             CUlibraryOption *, void **, unsigned int);
    CUresult (*library_unload)(CUlibrary);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*alloc_v1)(CUdeviceptr_v1 *, unsigned int);
    CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                           unsigned long long);
    CUresult (*array_create)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*array3d_create)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*mipmap_create)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
    CUresult (*free)(CUdeviceptr);
    CUresult (*free_v1)(CUdeviceptr_v1);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*array_destroy)(CUarray);
    CUresult (*mipmap_destroy)(CUmipmappedArray);
    CUresult (*get_info)(size_t *, size_t *);
    CUresult (*get_info_v1)(unsigned int *, unsigned int *);
    CUresult (*total_mem)(size_t *, CUdevice);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
} cu;

static CUcontext g_ctx;

static void setup(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
        exit(3);
    }
    g_gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    if (!g_gpa) {
        printf("{\"error\":\"no cuGetProcAddress_v2\"}\n");
        exit(3);
    }
    cuuint64_t s = g_stream_flags;
    *(void **)&cu.init = need("cuInit", 2000, 0);
    *(void **)&cu.device_get = need("cuDeviceGet", 2000, 0);
    *(void **)&cu.primary_retain = need("cuDevicePrimaryCtxRetain", 7000, 0);
    *(void **)&cu.ctx_set = need("cuCtxSetCurrent", 4000, 0);
    *(void **)&cu.ctx_destroy = need("cuCtxDestroy", 4000, 0);
    *(void **)&cu.ctx_create = need("cuCtxCreate", 12050, 0);
    *(void **)&cu.module_load = need("cuModuleLoadData", 2000, 0);
    *(void **)&cu.module_unload = need("cuModuleUnload", 2000, 0);
    *(void **)&cu.library_load = need("cuLibraryLoadData", 12000, 0);
    *(void **)&cu.library_unload = need("cuLibraryUnload", 12000, 0);
    *(void **)&cu.alloc = need("cuMemAlloc", 3020, 0);
    *(void **)&cu.alloc_v1 = need("cuMemAlloc", 2000, 0);
    *(void **)&cu.alloc_managed = need("cuMemAllocManaged", 6000, 0);
    *(void **)&cu.alloc_pitch = need("cuMemAllocPitch", 3020, 0);
    *(void **)&cu.alloc_async = need("cuMemAllocAsync", 11020, s);
    *(void **)&cu.alloc_pool = need("cuMemAllocFromPoolAsync", 11020, s);
    *(void **)&cu.mem_create = need("cuMemCreate", 10020, 0);
    *(void **)&cu.array_create = need("cuArrayCreate", 3020, 0);
    *(void **)&cu.array3d_create = need("cuArray3DCreate", 3020, 0);
    *(void **)&cu.mipmap_create = need("cuMipmappedArrayCreate", 5000, 0);
    *(void **)&cu.free = need("cuMemFree", 3020, 0);
    *(void **)&cu.free_v1 = need("cuMemFree", 2000, 0);
    *(void **)&cu.free_async = need("cuMemFreeAsync", 11020, s);
    *(void **)&cu.release = need("cuMemRelease", 10020, 0);
    *(void **)&cu.array_destroy = need("cuArrayDestroy", 2000, 0);
    *(void **)&cu.mipmap_destroy = need("cuMipmappedArrayDestroy", 5000, 0);
    *(void **)&cu.get_info = need("cuMemGetInfo", 3020, 0);
    *(void **)&cu.get_info_v1 = need("cuMemGetInfo", 2000, 0);
    *(void **)&cu.total_mem = need("cuDeviceTotalMem", 3020, 0);
    *(void **)&cu.launch = need("cuLaunchKernel", s ? 7000 : 4000, s);
    *(void **)&cu.graph_launch = need("cuGraphLaunch", 10000, s);
    CUdevice dev;
    CUresult rc = CUDA_ERROR_NOT_INITIALIZED;
    if (cu.init(0) || cu.device_get(&dev, 0) || (rc = cu.primary_retain(&g_ctx, dev)) ||
        cu.ctx_set(g_ctx)) {
        printf("{\"error\":\"context setup failed\",\"retain\":%d}\n", rc);
        exit(3);
    }
}

/* ------------------------------------------------------------------ resolve */

static const struct {
    const char *name;
    int version;
    cuuint64_t flags;
} k_lookups[] = {
    {"cuGetProcAddress", 11030, 0},        {"cuGetProcAddress", 12000, 0},
    {"cuMemAlloc", 2000, 0},               {"cuMemAlloc", 3020, 0},
    {"cuMemAllocPitch", 3020, 0},          {"cuMemAllocManaged", 6000, 0},
    {"cuMemAllocAsync", 11020, 0},         {"cuMemAllocAsync", 11020, 2},
    {"cuMemAllocFromPoolAsync", 11020, 0}, {"cuMemAllocFromPoolAsync", 11020, 2},
    {"cuMemCreate", 10020, 0},             {"cuMemRelease", 10020, 0},
    {"cuMemFree", 3020, 0},                {"cuMemFreeAsync", 11020, 0},
    {"cuMemFreeAsync", 11020, 2},          {"cuArrayCreate", 3020, 0},
    {"cuArray3DCreate", 3020, 0},          {"cuMipmappedArrayCreate", 5000, 0},
    {"cuArrayDestroy", 2000, 0},           {"cuMipmappedArrayDestroy", 5000, 0},
    {"cuMemGetInfo", 3020, 0},             {"cuMemGetInfo", 2000, 0},
    {"cuDeviceTotalMem", 3020, 0},         {"cuLaunchKernel", 4000, 0},
    {"cuLaunchKernel", 7000, 2},           {"cuLaunchKernelEx", 11060, 0},
    {"cuLaunchKernelEx", 11060, 2},        {"cuLaunchCooperativeKernel", 9000, 0},
    {"cuLaunchCooperativeKernel", 9000, 2}, {"cuGraphLaunch", 10000, 0},
    {"cuGraphLaunch", 10000, 2},           {"cuCtxDestroy", 4000, 0},
    {"cuInit", 2000, 0},                   {"cuCtxGetCurrent", 4000, 0},
    {"cuEventRecord", 7000, 2},            {"cuNoSuchFunction", 13000, 0},
};

static int cmd_resolve(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    g_gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    Dl_info self;
    dladdr((void *)g_gpa, &self);
    printf("{\"shim\":\"%s\"}\n", self.dli_fname);
    for (size_t i = 0; i < sizeof(k_lookups) / sizeof(k_lookups[0]); i++) {
        void *p = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult rc = g_gpa(k_lookups[i].name, &p, k_lookups[i].version, k_lookups[i].flags, &st);
        Dl_info info;
        const char *sym = "", *lib = "";
        if (p && dladdr(p, &info)) {
            sym = info.dli_sname ? info.dli_sname : "";
            lib = info.dli_fname ? info.dli_fname : "";
        }
        printf("{\"name\":\"%s\",\"version\":%d,\"flags\":%llu,\"rc\":%d,\"status\":%d,"
               "\"symbol\":\"%s\",\"library\":\"%s\"}\n",
               k_lookups[i].name, k_lookups[i].version, (unsigned long long)k_lookups[i].flags,
               rc, st, sym, lib);
    }
    /* The runtime may also resolve through the cuGetProcAddress a look-up returned (v1). */
    CUresult (*gpa_v1)(const char *, void **, int, cuuint64_t) = NULL;
    CUdriverProcAddressQueryResult st;
    g_gpa("cuGetProcAddress", (void **)&gpa_v1, 11030, 0, &st);
    void *p = NULL;
    Dl_info info = {0};
    CUresult rc = gpa_v1 ? gpa_v1("cuMemAlloc", &p, 3020, 0) : CUDA_ERROR_NOT_FOUND;
    if (p)
        dladdr(p, &info);
    printf("{\"via_v1\":\"cuMemAlloc\",\"rc\":%d,\"symbol\":\"%s\",\"library\":\"%s\"}\n", rc,
           info.dli_sname ? info.dli_sname : "", info.dli_fname ? info.dli_fname : "");
    return 0;
}

/* ------------------------------------------------------------------ memory */

static void meminfo(const char *tag) {
    size_t f = 0, t = 0, total = 0;
    unsigned int f1 = 0, t1 = 0;
    CUresult a = cu.get_info(&f, &t);
    CUresult b = cu.get_info_v1(&f1, &t1);
    CUresult c = cu.total_mem(&total, 0);
    printf("{\"meminfo\":\"%s\",\"rc\":[%d,%d,%d],\"free\":%zu,\"total\":%zu,\"free_v1\":%u,"
           "\"total_v1\":%u,\"device_total\":%zu}\n",
           tag, a, b, c, f, t, f1, t1, total);
}

static int report(const char *path, const char *phase, CUresult rc) {
    printf("{\"path\":\"%s\",\"phase\":\"%s\",\"rc\":%d}\n", path, phase, rc);
    return rc;
}

/* Each path: an allocation that fits (must succeed, then be freed), then one
 * larger than the whole slice (must fail with 2).  Sizes come from the slice. */
static int cmd_paths(void) {
    size_t f, limit;
    cu.get_info(&f, &limit);
    size_t fit = limit / 4, over = limit + (1 << 20);
    CUdeviceptr p;
    CUdeviceptr_v1 p1;
    size_t pitch;
    CUmemGenericAllocationHandle h;
    CUarray arr;
    CUmipmappedArray mip;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUstream s = 0;

    if (!report("cuMemAlloc_v2", "fit", cu.alloc(&p, fit)))
        cu.free(p);
    report("cuMemAlloc_v2", "over", cu.alloc(&p, over));
    unsigned int fit1 = fit > (1u << 30) ? (1u << 30) : (unsigned int)fit;
    if (!report("cuMemAlloc", "fit", cu.alloc_v1(&p1, fit1)))
        cu.free_v1(p1);
    if (over <= 0xFFFFFFFFu)
        report("cuMemAlloc", "over", cu.alloc_v1(&p1, (unsigned int)over));
    if (!report("cuMemAllocManaged", "fit", cu.alloc_managed(&p, fit, 1)))
        cu.free(p);
    report("cuMemAllocManaged", "over", cu.alloc_managed(&p, over, 1));
    if (!report("cuMemAllocPitch_v2", "fit", cu.alloc_pitch(&p, &pitch, fit / 1024, 1024, 4)))
        cu.free(p);
    report("cuMemAllocPitch_v2", "over", cu.alloc_pitch(&p, &pitch, over / 1024 + 512, 1024, 4));
    if (!report("cuMemAllocAsync", "fit", cu.alloc_async(&p, fit, s)))
        cu.free_async(p, s);
    report("cuMemAllocAsync", "over", cu.alloc_async(&p, over, s));
    if (!report("cuMemAllocFromPoolAsync", "fit", cu.alloc_pool(&p, fit, NULL, s)))
        cu.free_async(p, s);
    report("cuMemAllocFromPoolAsync", "over", cu.alloc_pool(&p, over, NULL, s));
    if (!report("cuMemCreate", "fit", cu.mem_create(&h, fit, &prop, 0)))
        cu.release(h);
    report("cuMemCreate", "over", cu.mem_create(&h, over, &prop, 0));
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = fit / 4096 / 4, .Height = 4096,
                                .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    if (!report("cuArrayCreate_v2", "fit", cu.array_create(&arr, &ad)))
        cu.array_destroy(arr);
    ad.Width = over / 4096 / 4 + 1;
    report("cuArrayCreate_v2", "over", cu.array_create(&arr, &ad));
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = fit / 4096 / 4 / 4, .Height = 4096, .Depth = 4,
                                  .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1, .Flags = 0};
    if (!report("cuArray3DCreate_v2", "fit", cu.array3d_create(&arr, &d3)))
        cu.array_destroy(arr);
    if (!report("cuMipmappedArrayCreate", "fit", cu.mipmap_create(&mip, &d3, 1)))
        cu.mipmap_destroy(mip);
    d3.Width = over / 4096 / 4 / 4 + 1;
    report("cuArray3DCreate_v2", "over", cu.array3d_create(&arr, &d3));
    report("cuMipmappedArrayCreate", "over", cu.mipmap_create(&mip, &d3, 3));
    meminfo("after");
    return 0;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int cmd_random(long iters, uint64_t seed, uint64_t max) {
    CUdeviceptr live[64] = {0};
    long ok = 0, oom = 0, other = 0;
    seed = seed * 2654435761u + 1;
    for (long i = 0; i < iters; i++) {
        int k = (int)(rng(&seed) % 64);
        if (live[k]) {
            int kind = (int)(rng(&seed) % 2);
            CUresult rc = kind ? cu.free(live[k]) : cu.free_async(live[k], 0);
            if (rc)
                other++;
            live[k] = 0;
            continue;
        }
        uint64_t n = 1 + rng(&seed) % max;
        CUresult rc;
        switch (rng(&seed) % 3) {
        case 0: rc = cu.alloc(&live[k], n); break;
        case 1: rc = cu.alloc_async(&live[k], n, 0); break;
        default: rc = cu.alloc_managed(&live[k], n, 1); break;
        }
        if (rc == CUDA_SUCCESS)
            ok++;
        else {
            live[k] = 0;
            if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                oom++;
            else
                other++;
        }
    }
    for (int k = 0; k < 64; k++)
        if (live[k])
            cu.free(live[k]);
    printf("{\"ok\":%ld,\"oom\":%ld,\"other\":%ld}\n", ok, oom, other);
    return 0;
}

static __attribute__((noreturn)) void cmd_hold(uint64_t bytes) {
    CUdeviceptr p;
    CUresult rc = cu.alloc(&p, bytes);
    printf("{\"held\":%llu,\"rc\":%d,\"pid\":%d}\n", (unsigned long long)bytes, rc, getpid());
    fflush(stdout);
    for (;;)
        pause();
}

static __attribute__((noreturn)) void cmd_loadhold(long n, uint64_t bytes) {
    static const char image[] = "fake module";
    for (long i = 0; i < n; i++) {
        CUmodule mod;
        CUlibrary lib;
        CUresult a = cu.module_load(&mod, image);
        CUresult b = cu.library_load(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
        if (a || b) {
            printf("{\"held\":0,\"rc\":%d,\"pid\":%d}\n", a ? a : b, getpid());
            fflush(stdout);
            for (;;)
                pause();
        }
    }
    cmd_hold(bytes);
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Launch kernels of ns for secs; with idle_ns, sleep that long after each (a
 * container that does not want the whole GPU). */
static int cmd_launch(double secs, uint64_t ns, int graph, uint64_t idle_ns) {
    uint64_t duration = ns;
    void *params[1] = {&duration};
    double t0 = mono(), end = t0 + secs;
    long n = 0;
    struct timespec idle = {.tv_sec = (time_t)(idle_ns / 1000000000ULL),
                            .tv_nsec = (long)(idle_ns % 1000000000ULL)};
    while (mono() < end) {
        if (idle_ns && n > 0)
            nanosleep(&idle, NULL);
        CUresult rc = graph ? cu.graph_launch((CUgraphExec)&duration, 0)
                            : cu.launch((CUfunction)0x1000, 64, 1, 1, 128, 1, 1, 0, 0, params,
                                        NULL);
        if (rc) {
            printf("{\"error\":\"launch rc %d\"}\n", rc);
            return 1;
        }
        if (n++ == 0) {
            printf("{\"started\":true}\n");
            fflush(stdout);
        }
    }
    printf("{\"launches\":%ld,\"seconds\":%.3f}\n", n, mono() - t0);
    return 0;
}

static int cmd_ctxdestroy(uint64_t bytes) {
    CUdeviceptr p;
    CUresult a = cu.alloc(&p, bytes);
    CUresult b = cu.ctx_destroy(g_ctx);
    CUdevice dev;
    cu.device_get(&dev, 0);
    cu.primary_retain(&g_ctx, dev);
    cu.ctx_set(g_ctx);
    printf("{\"alloc\":%d,\"destroy\":%d}\n", a, b);
    meminfo("after-destroy");
    return 0;
}

/* The driver's own objects: each step's result, then what the process sees. */
static int cmd_driverobjects(void) {
    static const char image[] = "fake module";
    CUmodule mod;
    CUlibrary lib;
    CUcontext ctx;
    meminfo("start");
    printf("{\"module_load\":%d}\n", cu.module_load(&mod, image));
    meminfo("module");
    printf("{\"library_load\":%d}\n",
           cu.library_load(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    meminfo("library");
    printf("{\"unload\":[%d,%d]}\n", cu.module_unload(mod), cu.library_unload(lib));
    meminfo("unloaded");
    printf("{\"ctx_create\":%d}\n", cu.ctx_create(&ctx, NULL, 0, 0));
    meminfo("created");
    printf("{\"ctx_destroy\":%d}\n", cu.ctx_destroy(ctx));
    cu.ctx_set(g_ctx);
    meminfo("destroyed");
    return 0;
}

/* Exports the shim does not hook are trampolines into the real driver. */
static int cmd_direct(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
        return 3;
    }
    CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))dlsym(h, "cuInit");
    CUresult (*version)(int *) = (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
    CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(h, "cuDeviceGetCount");
    CUresult (*name)(char *, int, CUdevice) =
        (CUresult(*)(char *, int, CUdevice))dlsym(h, "cuDeviceGetName");
    int v = -1, n = -1;
    char buf[64] = "";
    CUresult a = init(0), b = version(&v), c = count(&n), d = name(buf, sizeof(buf), 0);
    Dl_info info;
    dladdr((void *)version, &info);
    printf("{\"init\":%d,\"version_rc\":%d,\"version\":%d,\"count_rc\":%d,\"count\":%d,"
           "\"name_rc\":%d,\"name\":\"%s\",\"library\":\"%s\"}\n",
           a, b, v, c, n, d, buf, info.dli_fname);
    return 0;
}

static int cmd_forkrandom(int n, long iters, uint64_t max) {
    int gate[2];
    if (pipe(gate) != 0)
        return 1;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* Start together: wait until the parent closes the gate. */
            char c;
            close(gate[1]);
            while (read(gate[0], &c, 1) > 0) {
            }
            cmd_random(iters, (uint64_t)i + 100, max);
            fflush(stdout);
            _exit(0);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int failed = 0, status;
    while (wait(&status) > 0)
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    printf("{\"children\":%d,\"failed\":%d}\n", n, failed);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int argi = 1;
    if (argi < argc && strcmp(argv[argi], "--ptds") == 0) {
        g_stream_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        argi++;
    }
    if (argi >= argc)
        return 2;
    const char *cmd = argv[argi++];
    if (strcmp(cmd, "resolve") == 0)
        return cmd_resolve();
    if (strcmp(cmd, "direct") == 0)
        return cmd_direct();
    setup();
    if (strcmp(cmd, "paths") == 0)
        return cmd_paths();
    if (strcmp(cmd, "driverobjects") == 0)
        return cmd_driverobjects();
    if (strcmp(cmd, "meminfo") == 0) {
        meminfo("now");
        return 0;
    }
    if (strcmp(cmd, "random") == 0 && argi + 2 < argc)
        return cmd_random(atol(argv[argi]), strtoull(argv[argi + 1], NULL, 10),
                          strtoull(argv[argi + 2], NULL, 10));
    if (strcmp(cmd, "hold") == 0 && argi < argc)
        cmd_hold(strtoull(argv[argi], NULL, 10));
    if (strcmp(cmd, "loadhold") == 0 && argi + 1 < argc)
        cmd_loadhold(atol(argv[argi]), strtoull(argv[argi + 1], NULL, 10));
    if (strcmp(cmd, "launch") == 0 && argi + 1 < argc)
        return cmd_launch(atof(argv[argi]), strtoull(argv[argi + 1], NULL, 10),
                          argi + 2 < argc && strcmp(argv[argi + 2], "graph") == 0,
                          argi + 3 < argc && strcmp(argv[argi + 2], "idle") == 0
                              ? strtoull(argv[argi + 3], NULL, 10)
                              : 0);
    if (strcmp(cmd, "ctxdestroy") == 0 && argi < argc)
        return cmd_ctxdestroy(strtoull(argv[argi], NULL, 10));
    if (strcmp(cmd, "used") == 0 && argi < argc) {
        CUdeviceptr p;
        printf("{\"alloc\":%d}\n", cu.alloc(&p, strtoull(argv[argi], NULL, 10)));
        meminfo("used");
        return 0;
    }
    if (strcmp(cmd, "forkrandom") == 0 && argi + 2 < argc)
        return cmd_forkrandom(atoi(argv[argi]), atol(argv[argi + 1]),
                              strtoull(argv[argi + 2], NULL, 10));
    if (strcmp(cmd, "exit") == 0 && argi < argc) {
        CUdeviceptr p;
        printf("{\"alloc\":%d}\n", cu.alloc(&p, strtoull(argv[argi], NULL, 10)));
        return 0;
    }
    return 2;
}
