/*
 * nvml_client.c - calls "libnvidia-ml.so.1" (the stand-in, found through
 * LD_LIBRARY_PATH) the way nvidia-smi does: dlopen by soname, dlsym of every
 * function by its exact (versioned) name, nvmlInit_v2, the device count and
 * handles, memory, process lists, utilisation, nvmlShutdown.  One JSON object
 * per line.
 *
 *   nvml_client show           every device as nvidia-smi's first screen reads it
 *   nvml_client small          a process list into too little room
 *   nvml_client noinit         calls before nvmlInit_v2, and nvmlErrorString
 *   nvml_client busy DEV NS    NS of GPU time written into the region's last
 *                              complete epoch of DEV, then the utilisation read
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_min.h"
#include "region_layout.h"

static void *g_lib;

static void *sym(const char *name) {
    void *p = dlsym(g_lib, name);
    if (!p) {
        printf("{\"error\":\"no %s\"}\n", name);
        exit(3);
    }
    return p;
}

#define SYM(type, name) ((type)sym(name))

typedef nvmlReturn_t (*init_t)(void);
typedef nvmlReturn_t (*count_t)(unsigned int *);
typedef nvmlReturn_t (*handle_t)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*index_t)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*name_t)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*mem_t)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*mem2_t)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*procs_t)(nvmlDevice_t, unsigned int *, void *);
typedef nvmlReturn_t (*util_t)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*temp_t)(nvmlDevice_t, int, unsigned int *);
typedef nvmlReturn_t (*table_t)(const void **, const void *);
typedef nvmlReturn_t (*version_t)(char *, unsigned int);
typedef const char *(*errstr_t)(nvmlReturn_t);

static const char *lib_of(const char *name) {
    Dl_info info;
    void *p = dlsym(g_lib, name);
    return p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "";
}

/* Ask for the count with no room (as nvidia-smi does), then fetch that many. */
static void print_procs(const char *key, const char *name, nvmlDevice_t dev, int v1) {
    procs_t f = SYM(procs_t, name);
    unsigned int n = 0;
    nvmlReturn_t probe = f(dev, &n, NULL);
    unsigned char buf[64 * 24];
    unsigned int room = n < 64 ? n : 64;
    nvmlReturn_t rc = f(dev, &room, buf);
    printf("\"%s\":{\"probe\":%d,\"rc\":%d,\"count\":%u,\"procs\":[", key, probe, rc, room);
    for (unsigned int i = 0; rc == NVML_SUCCESS && i < room; i++) {
        unsigned int pid;
        unsigned long long used;
        if (v1) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)buf + i;
            pid = p->pid;
            used = p->usedGpuMemory;
        } else {
            nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)buf + i;
            pid = p->pid;
            used = p->usedGpuMemory;
        }
        printf("%s[%u,%llu]", i ? "," : "", pid, used);
    }
    printf("]},");
}

static int cmd_show(void) {
    nvmlReturn_t init = SYM(init_t, "nvmlInit_v2")();
    unsigned int count = 0;
    nvmlReturn_t count_rc = SYM(count_t, "nvmlDeviceGetCount_v2")(&count);
    char driver[80] = "";
    SYM(version_t, "nvmlSystemGetDriverVersion")(driver, sizeof(driver));
    printf("{\"library\":\"%s\",\"mem_lib\":\"%s\",\"temp_lib\":\"%s\",\"init\":%d,"
           "\"count_rc\":%d,\"count\":%u,\"driver\":\"%s\"}\n",
           lib_of("nvmlInit_v2"), lib_of("nvmlDeviceGetMemoryInfo"),
           lib_of("nvmlDeviceGetTemperature"), init, count_rc, count, driver);
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev;
        nvmlReturn_t h = SYM(handle_t, "nvmlDeviceGetHandleByIndex_v2")(i, &dev);
        unsigned int index = 0;
        SYM(index_t, "nvmlDeviceGetIndex")(dev, &index);
        char name[96] = "";
        SYM(name_t, "nvmlDeviceGetName")(dev, name, sizeof(name));
        nvmlMemory_t m = {0, 0, 0};
        nvmlReturn_t m_rc = SYM(mem_t, "nvmlDeviceGetMemoryInfo")(dev, &m);
        nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
        nvmlReturn_t m2_rc = SYM(mem2_t, "nvmlDeviceGetMemoryInfo_v2")(dev, &m2);
        nvmlMemory_v2_t bad = {.version = 1};
        nvmlReturn_t bad_rc = SYM(mem2_t, "nvmlDeviceGetMemoryInfo_v2")(dev, &bad);
        printf("{\"index\":%u,\"handle\":%d,\"name\":\"%s\","
               "\"mem\":{\"rc\":%d,\"total\":%llu,\"free\":%llu,\"used\":%llu},"
               "\"mem_v2\":{\"rc\":%d,\"total\":%llu,\"reserved\":%llu,\"free\":%llu,"
               "\"used\":%llu},\"mem_v2_bad_version\":%d,",
               index, h, name, m_rc, m.total, m.free, m.used, m2_rc, m2.total, m2.reserved,
               m2.free, m2.used, bad_rc);
        print_procs("compute_v1", "nvmlDeviceGetComputeRunningProcesses", dev, 1);
        print_procs("compute_v2", "nvmlDeviceGetComputeRunningProcesses_v2", dev, 0);
        print_procs("compute_v3", "nvmlDeviceGetComputeRunningProcesses_v3", dev, 0);
        print_procs("graphics_v1", "nvmlDeviceGetGraphicsRunningProcesses", dev, 1);
        print_procs("graphics_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3", dev, 0);
        print_procs("mps_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3", dev, 0);
        nvmlUtilization_t u = {0, 0};
        nvmlReturn_t u_rc = SYM(util_t, "nvmlDeviceGetUtilizationRates")(dev, &u);
        unsigned int temp = 0;
        nvmlReturn_t t_rc = SYM(temp_t, "nvmlDeviceGetTemperature")(dev, 0, &temp);
        printf("\"util\":{\"rc\":%d,\"gpu\":%u,\"memory\":%u},\"temp\":{\"rc\":%d,\"value\":%u}}\n",
               u_rc, u.gpu, u.memory, t_rc, temp);
    }
    const void *table = NULL;
    nvmlReturn_t t_rc = SYM(table_t, "nvmlInternalGetExportTable")(&table, "id");
    nvmlReturn_t down = SYM(init_t, "nvmlShutdown")();
    nvmlDevice_t dev0 = NULL;
    nvmlMemory_t m = {0, 0, 0};
    nvmlReturn_t after = SYM(mem_t, "nvmlDeviceGetMemoryInfo")(dev0, &m);
    printf("{\"export_table\":{\"rc\":%d,\"value\":\"%s\"},\"shutdown\":%d,\"after_shutdown\":%d}\n",
           t_rc, t_rc == NVML_SUCCESS ? (const char *)table : "", down, after);
    return 0;
}

static int cmd_small(void) {
    SYM(init_t, "nvmlInit_v2")();
    nvmlDevice_t dev;
    SYM(handle_t, "nvmlDeviceGetHandleByIndex_v2")(0, &dev);
    nvmlProcessInfo_t one[1];
    unsigned int room = 1;
    nvmlReturn_t rc = SYM(procs_t, "nvmlDeviceGetComputeRunningProcesses_v3")(dev, &room, one);
    unsigned int none = 0;
    nvmlReturn_t null_rc =
        SYM(procs_t, "nvmlDeviceGetComputeRunningProcesses_v3")(dev, &none, NULL);
    printf("{\"rc\":%d,\"count\":%u,\"null_rc\":%d}\n", rc, room, null_rc);
    return 0;
}

static int cmd_noinit(void) {
    nvmlMemory_t m = {0, 0, 0};
    nvmlReturn_t rc = SYM(mem_t, "nvmlDeviceGetMemoryInfo")(NULL, &m);
    nvmlReturn_t init = SYM(init_t, "nvmlInit_v2")();
    const char *msg = SYM(errstr_t, "nvmlErrorString")(init);
    printf("{\"mem_rc\":%d,\"init\":%d,\"message\":\"%s\"}\n", rc, init, msg);
    return 0;
}

static int64_t now_ns(void) { return fgpu_now_ns(CLOCK_MONOTONIC); }

static int cmd_busy(unsigned int d, uint64_t ns) {
    fgpu_region *r;
    const char *path = getenv("FGPU_REGION");
    if (!path || fgpu_region_open(path, 0, NULL, &r) != 0) {
        printf("{\"error\":\"no region\"}\n");
        return 2;
    }
    SYM(init_t, "nvmlInit_v2")();
    nvmlDevice_t dev;
    SYM(handle_t, "nvmlDeviceGetHandleByIndex_v2")(d, &dev);
    util_t util = SYM(util_t, "nvmlDeviceGetUtilizationRates");
    /* Retried when an epoch ends between writing and reading: the write then lies
     * two epochs back, where nothing reads it. */
    for (int attempt = 0; attempt < 100; attempt++) {
        int64_t t0 = now_ns();
        r->l->dev[d].busy[0] = r->l->dev[d].busy[1] = 0;
        fgpu_busy_add(&r->l->dev[d], t0 - FGPU_BUSY_EPOCH_NS, ns);
        nvmlUtilization_t u = {0, 0};
        nvmlReturn_t rc = util(dev, &u);
        if (now_ns() >> FGPU_BUSY_EPOCH_SHIFT != t0 >> FGPU_BUSY_EPOCH_SHIFT)
            continue;
        printf("{\"rc\":%d,\"gpu\":%u,\"memory\":%u,\"attempts\":%d}\n", rc, u.gpu, u.memory,
               attempt + 1);
        return 0;
    }
    printf("{\"error\":\"no read within one epoch\"}\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    g_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!g_lib) {
        printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
        return 2;
    }
    if (strcmp(argv[1], "show") == 0)
        return cmd_show();
    if (strcmp(argv[1], "small") == 0)
        return cmd_small();
    if (strcmp(argv[1], "noinit") == 0)
        return cmd_noinit();
    if (strcmp(argv[1], "busy") == 0 && argc == 4)
        return cmd_busy((unsigned int)atoi(argv[2]), strtoull(argv[3], NULL, 10));
    return 2;
}
