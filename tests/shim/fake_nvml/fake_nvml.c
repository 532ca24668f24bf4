/*
 * fake_nvml.c - a fake libnvidia-ml.so.1 for the NVML stand-in's tests: the
 * functions nvidia-smi's first screen calls, answering as a host whose GPUs
 * are busy with other tenants' work.  Every answer is fixed, so a test can
 * tell the real library's numbers from the slice's.
 *
 *   FAKE_NVML_DEVICES     devices (default 2)
 *   FAKE_NVML_TOTAL       total bytes per device (default 16 GiB)
 *
 *   FAKE_NVML_BUSES       the PCI bus of each device by index, comma-separated
 *                         (default i + 1: index order is PCI order); the UUID
 *                         names the bus (GPU-fake-bus-<bus, two hex digits>),
 *                         the attributes' call is not supported (a whole card)
 *
 *   FAKE_NVML_NO_DRIVER   1: nvmlInit fails as without a loaded driver (error 9)
 *   FAKE_NVML_PROCS_FILE  a file, read at every call, that replaces the fixed
 *                         processes (the agent's watch's tests change it):
 *                         lines "proc DEV PID BYTES" (a compute process),
 *                         "util DEV PID SM_PERCENT TIMESTAMP_US" (a sample) and
 *                         "busy DEV PERCENT 0" (the device's utilisation, else 77)
 *
 *   FAKE_CUDA_STATE       the fake GPU's state file (tests/shim/fake_cuda): what its
 *                         processes hold on a device (allocations, contexts, modules)
 *                         is used too, as the real library counts every process
 *
 * Device i: used = (4 + i) GiB (+ the fake GPU's bytes), reserved 256 MiB (v2), two host processes
 * (pids 70001+10i with 1 GiB and 70002+10i with 2 GiB) in every list,
 * utilisation gpu 77 / memory 55, temperature 40 + i.  Before nvmlInit every
 * device call returns NVML_ERROR_UNINITIALIZED, as the real library does.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fake_cuda/fake_shared.h"
#include "nvml_min.h"

#define EXPORT __attribute__((visibility("default")))
#define GIB (1ULL << 30)
#define MAX_DEV 8

struct nvmlDevice_st {
    unsigned int index;
};

static struct nvmlDevice_st g_dev[MAX_DEV];
static int g_inits;

static unsigned int env_uint(const char *name, unsigned int dflt) {
    const char *s = getenv(name);
    return s && *s ? (unsigned int)strtoul(s, NULL, 10) : dflt;
}

static unsigned long long total_bytes(void) {
    const char *s = getenv("FAKE_NVML_TOTAL");
    return s && *s ? strtoull(s, NULL, 10) : 16 * GIB;
}

static unsigned int ndev(void) {
    unsigned int n = env_uint("FAKE_NVML_DEVICES", 2);
    return n > MAX_DEV ? MAX_DEV : n;
}

/* The device behind a handle, or NULL when it is none of ours. */
static struct nvmlDevice_st *dev_of(nvmlDevice_t h) {
    for (unsigned int i = 0; i < ndev(); i++)
        if (h == &g_dev[i])
            return h;
    return NULL;
}

#define CHECK_DEVICE(h)                          \
    if (!g_inits)                                \
        return NVML_ERROR_UNINITIALIZED;         \
    struct nvmlDevice_st *d = dev_of(h);         \
    if (!d)                                      \
        return NVML_ERROR_INVALID_ARGUMENT

#define FAKE_NVML_ERROR_DRIVER_NOT_LOADED 9 /* NVML_ERROR_DRIVER_NOT_LOADED of nvml.h */

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    if (env_uint("FAKE_NVML_NO_DRIVER", 0))
        return (nvmlReturn_t)FAKE_NVML_ERROR_DRIVER_NOT_LOADED;
    for (unsigned int i = 0; i < MAX_DEV; i++)
        g_dev[i].index = i;
    g_inits++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (!g_inits)
        return NVML_ERROR_UNINITIALIZED;
    g_inits--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    return result == NVML_SUCCESS ? "fake: Success" : "fake: some error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!version || length < 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    strcpy(version, "999.99");
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!g_inits)
        return NVML_ERROR_UNINITIALIZED;
    *count = ndev();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!g_inits)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= ndev() || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    CHECK_DEVICE(device);
    *index = d->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    CHECK_DEVICE(device);
    if (!name || length < 16)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, "Fake GPU");
    return NVML_SUCCESS;
}

/* Device d's PCI bus: the d-th of FAKE_NVML_BUSES, else d + 1. */
static unsigned int bus_of(const struct nvmlDevice_st *d) {
    const char *s = getenv("FAKE_NVML_BUSES");
    for (unsigned int i = 0; s && *s; i++) {
        char *end;
        unsigned long bus = strtoul(s, &end, 10);
        if (i == d->index)
            return (unsigned int)bus;
        s = *end == ',' ? end + 1 : end;
    }
    return d->index + 1;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    CHECK_DEVICE(device);
    if (!uuid || length < 20)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(uuid, length, "GPU-fake-bus-%02x", bus_of(d));
    return NVML_SUCCESS;
}

/* nvmlPciInfo_t of nvml.h (v3): the fields a reader of the bus id needs. */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} fake_pci_info;

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, fake_pci_info *pci) {
    CHECK_DEVICE(device);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = bus_of(d);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}

/* As on a whole (non-MIG) card, where the real library gives no multiprocessor count. */
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, void *attributes) {
    CHECK_DEVICE(device);
    (void)attributes;
    return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    CHECK_DEVICE(device);
    (void)sensor;
    *temp = 40 + d->index;
    return NVML_SUCCESS;
}

/* Bytes the fake GPU's processes hold on device i (0 without FAKE_CUDA_STATE). */
static unsigned long long fake_gpu_bytes(unsigned int i) {
    const char *path = getenv("FAKE_CUDA_STATE");
    int fd = path && *path && i < FAKE_MAX_DEV ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return 0;
    unsigned long long n = 0;
    struct stat st;
    struct fake_shared *sh = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(*sh)) /* the driver sized it */
        sh = mmap(NULL, sizeof(*sh), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (sh != MAP_FAILED) {
        n = atomic_load(&sh->in_use[i]);
        munmap(sh, sizeof(*sh));
    }
    return n;
}

static unsigned long long used_bytes(const struct nvmlDevice_st *d) {
    return (4 + d->index) * GIB + fake_gpu_bytes(d->index);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    CHECK_DEVICE(device);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = total_bytes();
    memory->used = used_bytes(d);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    CHECK_DEVICE(device);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = total_bytes();
    memory->reserved = 256ULL << 20;
    memory->used = used_bytes(d);
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

/* One line of FAKE_NVML_PROCS_FILE: "proc" or "util" and up to four numbers. */
typedef struct fake_row {
    char kind[8];
    unsigned long long v[4];
} fake_row;

#define MAX_ROWS 64

static int file_rows(const char *kind, unsigned int dev, fake_row *rows);

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    CHECK_DEVICE(device);
    if (!u)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_row rows[MAX_ROWS];
    u->gpu = file_rows("busy", d->index, rows) > 0 ? (unsigned int)rows[0].v[1] : 77;
    u->memory = 55;
    return NVML_SUCCESS;
}

/* The rows of FAKE_NVML_PROCS_FILE of kind about device dev; -1 when it is not set. */
static int file_rows(const char *kind, unsigned int dev, fake_row *rows) {
    const char *path = getenv("FAKE_NVML_PROCS_FILE");
    if (!path || !*path)
        return -1;
    FILE *f = fopen(path, "r");
    int n = 0;
    fake_row r;
    while (f && n < MAX_ROWS &&
           fscanf(f, "%7s %llu %llu %llu", r.kind, &r.v[0], &r.v[1], &r.v[2]) == 4) {
        r.v[3] = 0;
        if (strcmp(r.kind, "util") == 0 && fscanf(f, "%llu", &r.v[3]) != 1)
            break;
        if (strcmp(r.kind, kind) == 0 && r.v[0] == dev)
            rows[n++] = r;
    }
    if (f)
        fclose(f);
    return n;
}

/* The processes of a device: the file's, or two other tenants'. */
static int processes_of(unsigned int dev, unsigned int *pids, unsigned long long *used) {
    fake_row rows[MAX_ROWS];
    int n = file_rows("proc", dev, rows);
    if (n >= 0) {
        for (int i = 0; i < n; i++) {
            pids[i] = (unsigned int)rows[i].v[1];
            used[i] = rows[i].v[2];
        }
        return n;
    }
    for (unsigned int i = 0; i < 2; i++) {
        pids[i] = 70001 + 10 * dev + i;
        used[i] = (i + 1) * GIB;
    }
    return 2;
}

/* A device's processes, in the layout of the caller (v1: 16 bytes, else 24); with the
 * file, only the compute list has any. */
static nvmlReturn_t host_processes(nvmlDevice_t device, unsigned int *count, void *infos, int v1,
                                   int compute) {
    CHECK_DEVICE(device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int pids[MAX_ROWS];
    unsigned long long bytes[MAX_ROWS];
    int n = processes_of(d->index, pids, bytes);
    if (!compute && getenv("FAKE_NVML_PROCS_FILE"))
        n = 0;
    unsigned int room = *count;
    *count = (unsigned int)n;
    if (room < (unsigned int)n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < (unsigned int)n; i++) {
        unsigned int pid = pids[i];
        unsigned long long used = bytes[i];
        if (v1) {
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){pid, used};
        } else {
            ((nvmlProcessInfo_v2_t *)infos)[i] = (nvmlProcessInfo_v2_t){pid, used, 0, 0};
        }
    }
    return NVML_SUCCESS;
}

#define PROCESS_LISTS(kind, compute)                                                           \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses(                                  \
        nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v1_t *infos) {                \
        return host_processes(device, count, infos, 1, compute);                                \
    }                                                                                           \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v2(                               \
        nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v2_t *infos) {                \
        return host_processes(device, count, infos, 0, compute);                                \
    }                                                                                           \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v3(                               \
        nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {                   \
        return host_processes(device, count, infos, 0, compute);                                \
    }
PROCESS_LISTS(Compute, 1)
PROCESS_LISTS(Graphics, 0)
PROCESS_LISTS(MPSCompute, 0)

/* nvmlProcessUtilizationSample_t of nvml.h. */
typedef struct fake_util_sample {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} fake_util_sample;

/* The file's samples of the device newer than lastSeen; NOT_FOUND when there are none,
 * as the real library answers. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    fake_util_sample *utilization,
                                                    unsigned int *count,
                                                    unsigned long long lastSeen) {
    CHECK_DEVICE(device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_row rows[MAX_ROWS];
    int all = file_rows("util", d->index, rows);
    unsigned int n = 0;
    for (int i = 0; i < all; i++)
        if (rows[i].v[3] > lastSeen)
            rows[n++] = rows[i];
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    unsigned int room = *count;
    *count = n;
    if (!utilization || room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < n; i++)
        utilization[i] = (fake_util_sample){(unsigned int)rows[i].v[1], rows[i].v[3],
                                            (unsigned int)rows[i].v[2], 0, 0, 0};
    return NVML_SUCCESS;
}

/* The private table nvidia-smi asks for: a marker the test can recognise. */
static const char k_table[] = "fake export table";

EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id) {
    (void)id;
    if (!table)
        return NVML_ERROR_INVALID_ARGUMENT;
    *table = k_table;
    return NVML_SUCCESS;
}
