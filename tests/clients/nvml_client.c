/* Reads the node through NVML, as monitoring tools do: dlopen("libnvidia-ml.so.1") and
 * hand-declared entry points. Prints one JSON document:
 *   {"driver_version":..,"count":..,"devices":[{"name","uuid","total","free","used",
 *    "v2":{"total","reserved","free","used"},"processes":[{"pid","memory"}]}]}
 * Exits 1, naming the call and NVML's error string, if any call fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct simgpu_test_nvml_device *nvmlDevice_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

/* NVML stamps versioned structs with their size and version number. */
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

static struct {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*driver_version)(char *, unsigned int);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*processes)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
} nvml;

static void *lib;

static void *need(const char *symbol) {
    void *fn = dlsym(lib, symbol);
    if (fn == NULL) {
        fprintf(stderr, "dlsym(%s) failed: %s\n", symbol, dlerror());
        exit(1);
    }
    return fn;
}

#define BIND(field, symbol)                                                                  \
    do {                                                                                     \
        void *fn_ = need(symbol);                                                            \
        memcpy(&nvml.field, &fn_, sizeof fn_);                                               \
    } while (0)

#define CHECK(call)                                                                          \
    do {                                                                                     \
        nvmlReturn_t rc_ = (call);                                                           \
        if (rc_ != NVML_SUCCESS) {                                                           \
            fprintf(stderr, "%s failed: %s (%d)\n", #call, nvml.error_string(rc_), rc_);    \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

static int print_device(unsigned int index) {
    nvmlDevice_t dev, again;
    char name[96], uuid[96];
    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2;
    CHECK(nvml.by_index(index, &dev));
    CHECK(nvml.name(dev, name, sizeof name));
    CHECK(nvml.uuid(dev, uuid, sizeof uuid));
    CHECK(nvml.by_uuid(uuid, &again));
    if (again != dev) {
        fprintf(stderr, "nvmlDeviceGetHandleByUUID(%s) gave another device than index %u\n", uuid, index);
        return 1;
    }
    CHECK(nvml.memory(dev, &mem));
    memset(&mem2, 0, sizeof mem2);
    mem2.version = NVML_MEMORY_V2_VERSION;
    CHECK(nvml.memory_v2(dev, &mem2));

    /* The documented protocol: ask with no buffer, learn the count, then fetch. */
    unsigned int count = 0;
    nvmlProcessInfo_t *procs = NULL;
    nvmlReturn_t rc = nvml.processes(dev, &count, NULL);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        count += 4; /* room for processes starting meanwhile */
        procs = calloc(count, sizeof *procs);
        CHECK(nvml.processes(dev, &count, procs));
    } else if (rc != NVML_SUCCESS) {
        fprintf(stderr, "nvmlDeviceGetComputeRunningProcesses_v3(count query) failed: %s (%d)\n",
                nvml.error_string(rc), rc);
        return 1;
    } else if (count != 0) {
        fprintf(stderr, "nvmlDeviceGetComputeRunningProcesses_v3 with no buffer succeeded "
                        "but reported %u processes\n", count);
        return 1;
    }

    printf("%s{\"name\":\"%s\",\"uuid\":\"%s\",\"total\":%llu,\"free\":%llu,\"used\":%llu,"
           "\"v2\":{\"version\":%u,\"total\":%llu,\"reserved\":%llu,\"free\":%llu,\"used\":%llu},"
           "\"processes\":[",
           index ? "," : "", name, uuid, mem.total, mem.free, mem.used, mem2.version, mem2.total,
           mem2.reserved, mem2.free, mem2.used);
    for (unsigned int i = 0; i < count; i++)
        printf("%s{\"pid\":%u,\"memory\":%llu}", i ? "," : "", procs[i].pid, procs[i].usedGpuMemory);
    printf("]}");
    free(procs);
    return 0;
}

int main(void) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(libnvidia-ml.so.1) failed: %s\n", dlerror());
        return 1;
    }
    BIND(error_string, "nvmlErrorString");
    BIND(init, "nvmlInit_v2");
    BIND(shutdown, "nvmlShutdown");
    BIND(driver_version, "nvmlSystemGetDriverVersion");
    BIND(count, "nvmlDeviceGetCount_v2");
    BIND(by_index, "nvmlDeviceGetHandleByIndex_v2");
    BIND(by_uuid, "nvmlDeviceGetHandleByUUID");
    BIND(name, "nvmlDeviceGetName");
    BIND(uuid, "nvmlDeviceGetUUID");
    BIND(memory, "nvmlDeviceGetMemoryInfo");
    BIND(memory_v2, "nvmlDeviceGetMemoryInfo_v2");
    BIND(processes, "nvmlDeviceGetComputeRunningProcesses_v3");

    char version[96];
    unsigned int count = 0;
    CHECK(nvml.init());
    CHECK(nvml.driver_version(version, sizeof version));
    CHECK(nvml.count(&count));
    printf("{\"driver_version\":\"%s\",\"count\":%u,\"devices\":[", version, count);
    for (unsigned int i = 0; i < count; i++)
        if (print_device(i) != 0)
            return 1;
    printf("]}\n");
    CHECK(nvml.shutdown());
    return 0;
}
