/* One program of a container, in the modes the memory-cap and interception tests need. It is
 * built three times, once per way of reaching the driver (driver_linked.c,
 * driver_dlopen.c, driver_proc_address.c), so every test runs against each.
 *
 *   capfill [device]        fill the device to the cap, largest chunks first and down to
 *                           1 byte; print "full {json}", wait for a line on stdin, free one
 *                           chunk, allocate again; print "done {json}"
 *   probe [device]          retain the primary context, allocate 1 byte, query memory;
 *                           print "probe {json}" with every result code
 *   hold <bytes> [device]   allocate, print "ready {json}", sleep until killed
 *   unseen                  make device 0's primary context, then a second context through
 *                           the unversioned cuCtxCreate (which libtessera does not see), then
 *                           allocate 1 MiB at a time until out of memory; print
 *                           "full {json}", sleep until killed
 *   stress <threads> <seconds> <max bytes>
 *                           print "started", wait for a line, then threads allocate and
 *                           free random sizes; print "stress {json}"
 *   vmm <granules>          cuMemCreate + map + use; print "created {json}", wait for a
 *                           line, release; print "released {json}"
 *   async <bytes>           cuMemAllocAsync on a stream; print "allocated {json}", wait for
 *                           a line, cuMemFreeAsync + synchronize; print "freed {json}"
 *   asyncorder <bytes>      cuMemAllocAsync on a stream held up by a host function, then
 *                           cuMemFreeAsync behind it; print "pending {json}" while the free
 *                           waits in the stream, wait for a line, let the stream run and
 *                           synchronize; print "settled {json}"
 *   expandable <granules>   PyTorch's expandable segments: cuMemCreate, map it as two
 *                           mappings, cuMemRelease at once and use the mapping; print
 *                           "released {json}", wait for a line, unmap both with one
 *                           cuMemUnmap; print "unmapped {json}" and wait for a line
 *   forkchild <bytes>       fork before cuInit; the child allocates, prints "child {json}",
 *                           waits for a line and exits; then the parent initializes, prints
 *                           "parent {json}" and waits for a line
 *   forkafter <bytes>       allocate, fork; the child (which may not use CUDA) tries and
 *                           exits normally; the parent prints "parent {json}", waits
 *   forkhold <bytes>        allocate, fork a child that never uses CUDA and sleeps; print
 *                           "ready {json}" with both pids, sleep until killed
 *   names                   unhooked calls (device name, attributes, counts) and three
 *                           allocate/free pairs; print "names {json}" with the debug
 *                           counters of libtessera.so and of rtld_next_shim.so if loaded
 *   launch <tessera.ptx>    the round trip of driver_common.c; print "counters {json}"
 *   primary                 the primary-context sequence of the context-cap tests: at each
 *                           step print "step {json}" (its name and result code) and wait for
 *                           a line: retain, retain, release, release, retain + reset, a
 *                           release after the reset, retain twice + reset, retain
 *   procmap v1|v2 <base>:<version>:<flags>...
 *                           resolve each through cuGetProcAddress[_v2] (found with dlsym on
 *                           libcuda.so.1) and print, per query, the library and symbol that
 *                           dladdr names for the result: "procmap {json}"
 * A failing call other than the one a mode expects exits 1, naming it. */
#define _GNU_SOURCE
#include "driver_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNKS 4096

static struct driver d;

static int use_device(int ordinal, CUdevice *device, CUcontext *ctx) {
    CHECK(&d, cuInit(0));
    CHECK(&d, cuDeviceGet(device, ordinal));
    CHECK(&d, cuDevicePrimaryCtxRetain(ctx, *device));
    CHECK(&d, cuCtxSetCurrent(*ctx));
    return 0;
}

/* Waits for the test to say go on: one line on stdin (or its end). */
static void wait_for_go(void) {
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL)
        return;
}

static void emit(const char *tag, const char *json) {
    printf("%s %s\n", tag, json);
    fflush(stdout);
}

/* libtessera.so's count of calls to an export, or -1 without it. */
static long long tessera_counter(const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, "tessera_debug_counter");
    if (sym == NULL)
        return -1;
    unsigned long long (*counter)(const char *);
    memcpy(&counter, &sym, sizeof sym);
    return (long long)counter(name);
}

/* rtld_next_shim.so's count of calls that went through it, or -1 without it. */
static long long shim_counter(const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, "rtld_next_shim_count");
    if (sym == NULL)
        return -1;
    long long (*counter)(const char *);
    memcpy(&counter, &sym, sizeof sym);
    return counter(name);
}

static int mode_capfill(int ordinal) {
    CUdevice device;
    CUcontext ctx;
    static CUdeviceptr chunks[MAX_CHUNKS];
    static size_t sizes[MAX_CHUNKS];
    size_t n = 0, allocated = 0, free0 = 0, total0 = 0, free1 = 0, total1 = 0, devtotal = 0;
    if (use_device(ordinal, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuMemGetInfo_v2(&free0, &total0));
    CHECK(&d, cuDeviceTotalMem_v2(&devtotal, device));
    /* A start that is no power of two, so reaching the cap exactly needs every size down
     * to one byte. */
    for (size_t chunk = 100000000; chunk >= 1; chunk /= 2) {
        for (;;) {
            CUdeviceptr p = 0;
            if (n == MAX_CHUNKS) {
                fprintf(stderr, "capfill: more than %d allocations\n", MAX_CHUNKS);
                return 1;
            }
            CUresult rc = d.cuMemAlloc_v2(&p, chunk);
            if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                break;
            if (rc != CUDA_SUCCESS) {
                report_failure(&d, "cuMemAlloc_v2 while filling", rc);
                return 1;
            }
            chunks[n] = p;
            sizes[n++] = chunk;
            allocated += chunk;
        }
    }
    CHECK(&d, cuMemGetInfo_v2(&free1, &total1));
    CUdeviceptr extra = 0;
    CUresult one_more = d.cuMemAlloc_v2(&extra, 1);
    char json[1024];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"binding\":\"%s\",\"allocated\":%zu,\"allocations\":%zu,"
             "\"free_before\":%zu,\"total_before\":%zu,\"device_total\":%zu,"
             "\"free_full\":%zu,\"total_full\":%zu,\"one_more_rc\":%d}",
             (int)getpid(), driver_binding, allocated, n, free0, total0, devtotal, free1, total1,
             one_more);
    emit("full", json);
    wait_for_go();

    /* Give back the first (largest) chunk: the same size fits again, and no more. */
    size_t freed = sizes[0], free2 = 0, free3 = 0, total2 = 0;
    CHECK(&d, cuMemFree_v2(chunks[0]));
    CHECK(&d, cuMemGetInfo_v2(&free2, &total2));
    CUresult refill = d.cuMemAlloc_v2(&chunks[0], freed);
    CUdeviceptr again = 0;
    CUresult one_more_again = d.cuMemAlloc_v2(&again, 1);
    CHECK(&d, cuMemGetInfo_v2(&free3, &total2));
    for (size_t i = 0; i < n; i++)
        if (i > 0 || refill == CUDA_SUCCESS)
            CHECK(&d, cuMemFree_v2(chunks[i]));
    if (one_more == CUDA_SUCCESS)
        CHECK(&d, cuMemFree_v2(extra));
    if (one_more_again == CUDA_SUCCESS)
        CHECK(&d, cuMemFree_v2(again));
    size_t free4 = 0;
    CHECK(&d, cuMemGetInfo_v2(&free4, &total2));
    snprintf(json, sizeof json,
             "{\"freed\":%zu,\"free_after_free\":%zu,\"refill_rc\":%d,\"one_more_rc\":%d,"
             "\"free_refilled\":%zu,\"free_all_freed\":%zu}",
             freed, free2, refill, one_more_again, free3, free4);
    emit("done", json);
    CHECK(&d, cuDevicePrimaryCtxRelease_v2(device));
    return 0;
}

static int mode_probe(int ordinal) {
    CUdevice device;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0;
    size_t free_bytes = 0, total = 0, devtotal = 0;
    CHECK(&d, cuInit(0));
    CHECK(&d, cuDeviceGet(&device, ordinal));
    CUresult ctx_rc = d.cuDevicePrimaryCtxRetain(&ctx, device);
    CUresult alloc_rc = -1, info_rc = -1, total_rc = d.cuDeviceTotalMem_v2(&devtotal, device);
    if (ctx_rc == CUDA_SUCCESS) {
        CHECK(&d, cuCtxSetCurrent(ctx));
        alloc_rc = d.cuMemAlloc_v2(&p, 1);
        info_rc = d.cuMemGetInfo_v2(&free_bytes, &total);
        if (alloc_rc == CUDA_SUCCESS)
            CHECK(&d, cuMemFree_v2(p));
    }
    char json[512];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"ctx_rc\":%d,\"alloc_rc\":%d,\"info_rc\":%d,\"free\":%zu,"
             "\"total\":%zu,\"total_rc\":%d,\"device_total\":%zu}",
             (int)getpid(), ctx_rc, alloc_rc, info_rc, free_bytes, total, total_rc, devtotal);
    emit("probe", json);
    return 0;
}

static int mode_hold(size_t bytes, int ordinal) {
    CUdevice device;
    CUcontext ctx;
    CUdeviceptr p = 0;
    if (use_device(ordinal, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuMemAlloc_v2(&p, bytes));
    char json[128];
    snprintf(json, sizeof json, "{\"pid\":%d,\"bytes\":%zu}", (int)getpid(), bytes);
    emit("ready", json);
    for (;;)
        pause();
}

static int mode_unseen(void) {
    CUdevice device;
    CUcontext ctx, hidden = NULL;
    CUdeviceptr p = 0;
    size_t allocated = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult (*create)(CUcontext *, unsigned int, CUdevice) =
        lib ? (CUresult(*)(CUcontext *, unsigned int, CUdevice))dlsym(lib, "cuCtxCreate") : NULL;
    if (create == NULL) {
        fprintf(stderr, "unseen: no cuCtxCreate\n");
        return 1;
    }
    CUresult made = create(&hidden, 0, device);
    if (made != CUDA_SUCCESS) {
        report_failure(&d, "cuCtxCreate", made);
        return 1;
    }
    CHECK(&d, cuCtxSetCurrent(ctx));
    for (;;) {
        CUresult rc = d.cuMemAlloc_v2(&p, 1 << 20);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            break;
        if (rc != CUDA_SUCCESS) {
            report_failure(&d, "cuMemAlloc_v2 while filling", rc);
            return 1;
        }
        allocated += 1 << 20;
    }
    char json[128];
    snprintf(json, sizeof json, "{\"pid\":%d,\"allocated\":%zu}", (int)getpid(), allocated);
    emit("full", json);
    for (;;)
        pause();
}

struct stress_args {
    CUcontext ctx;
    unsigned seed;
    double seconds;
    size_t max_bytes;
    unsigned long long allocs, frees, ooms, errors;
};

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *stress_thread(void *arg) {
    struct stress_args *a = arg;
    enum { LIVE = 16 };
    CUdeviceptr live[LIVE];
    size_t count = 0;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ a->seed;
    if (d.cuCtxSetCurrent(a->ctx) != CUDA_SUCCESS) {
        a->errors++;
        return NULL;
    }
    double end = now_s() + a->seconds;
    while (now_s() < end) {
        uint64_t r = next_random(&s);
        if (count == 0 || (count < LIVE && (r & 1))) {
            size_t bytes = 1 + (size_t)(next_random(&s) % a->max_bytes);
            CUresult rc = d.cuMemAlloc_v2(&live[count], bytes);
            if (rc == CUDA_SUCCESS) {
                count++;
                a->allocs++;
            } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
                a->ooms++;
            } else {
                report_failure(&d, "cuMemAlloc_v2 in a stress thread", rc);
                a->errors++;
            }
        } else {
            size_t i = (size_t)((r >> 1) % count);
            CUresult rc = d.cuMemFree_v2(live[i]);
            if (rc != CUDA_SUCCESS) {
                report_failure(&d, "cuMemFree_v2 in a stress thread", rc);
                a->errors++;
            }
            live[i] = live[--count];
            a->frees++;
        }
    }
    while (count > 0) {
        if (d.cuMemFree_v2(live[--count]) != CUDA_SUCCESS)
            a->errors++;
        a->frees++;
    }
    return NULL;
}

static int mode_stress(int threads, double seconds, size_t max_bytes) {
    CUdevice device;
    CUcontext ctx;
    enum { MAX_THREADS = 64 };
    struct stress_args args[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    if (threads < 1 || threads > MAX_THREADS || max_bytes == 0) {
        fprintf(stderr, "stress: 1..%d threads and a positive size\n", MAX_THREADS);
        return 2;
    }
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    printf("started %d\n", (int)getpid());
    fflush(stdout);
    /* Every process has its context before any fills the cap. */
    wait_for_go();
    for (int i = 0; i < threads; i++) {
        args[i] = (struct stress_args){ctx, (unsigned)getpid() * 131u + (unsigned)i, seconds,
                                       max_bytes, 0, 0, 0, 0};
        if (pthread_create(&tids[i], NULL, stress_thread, &args[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    unsigned long long allocs = 0, frees = 0, ooms = 0, errors = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        allocs += args[i].allocs;
        frees += args[i].frees;
        ooms += args[i].ooms;
        errors += args[i].errors;
    }
    size_t free_bytes = 0, total = 0;
    CHECK(&d, cuMemGetInfo_v2(&free_bytes, &total));
    char json[256];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"allocs\":%llu,\"frees\":%llu,\"ooms\":%llu,\"errors\":%llu,"
             "\"free\":%zu,\"total\":%zu}",
             (int)getpid(), allocs, frees, ooms, errors, free_bytes, total);
    emit("stress", json);
    return errors == 0 ? 0 : 1;
}

static int mode_vmm(size_t granules) {
    CUdevice device;
    CUcontext ctx;
    size_t gran = 0, free0 = 0, free1 = 0, free2 = 0, total = 0;
    CUmemGenericAllocationHandle handle = 0, over = 0;
    CUdeviceptr va = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    CHECK(&d, cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = granules * gran;
    CHECK(&d, cuMemGetInfo_v2(&free0, &total));
    CHECK(&d, cuMemCreate(&handle, size, &prop, 0));
    CHECK(&d, cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(&d, cuMemMap(va, size, 0, handle, 0));
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(&d, cuMemSetAccess(va, size, &access, 1));
    static const char hello[] = "mapped granules hold data";
    char back[sizeof hello] = {0};
    CHECK(&d, cuMemcpyHtoD_v2(va + size - sizeof hello, hello, sizeof hello));
    CHECK(&d, cuMemcpyDtoH_v2(back, va + size - sizeof hello, sizeof hello));
    CHECK(&d, cuMemGetInfo_v2(&free1, &total));
    /* More granules than the cap has left. */
    size_t too_many = (free1 / gran + 1) * gran;
    CUresult over_rc = d.cuMemCreate(&over, too_many, &prop, 0);
    if (over_rc == CUDA_SUCCESS)
        CHECK(&d, cuMemRelease(over));
    char json[512];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"granularity\":%zu,\"size\":%zu,\"free_before\":%zu,"
             "\"free_created\":%zu,\"total\":%zu,\"data_ok\":%s,\"over_bytes\":%zu,"
             "\"over_rc\":%d}",
             (int)getpid(), gran, size, free0, free1, total,
             memcmp(back, hello, sizeof hello) == 0 ? "true" : "false", too_many, over_rc);
    emit("created", json);
    wait_for_go();
    /* Released but still mapped: the memory stays in use until unmapped, as on a GPU. */
    CHECK(&d, cuMemRelease(handle));
    CHECK(&d, cuMemUnmap(va, size));
    CHECK(&d, cuMemAddressFree(va, size));
    CHECK(&d, cuMemGetInfo_v2(&free2, &total));
    snprintf(json, sizeof json, "{\"free_released\":%zu}", free2);
    emit("released", json);
    return 0;
}

static int mode_async(size_t bytes) {
    CUdevice device;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr p = 0, over = 0;
    size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(&d, cuMemGetInfo_v2(&free0, &total));
    CHECK(&d, cuMemAllocAsync(&p, bytes, stream));
    CHECK(&d, cuStreamSynchronize(stream));
    CHECK(&d, cuMemGetInfo_v2(&free1, &total));
    CUresult over_rc = d.cuMemAllocAsync(&over, free1 + 1, stream);
    if (over_rc == CUDA_SUCCESS)
        CHECK(&d, cuMemFreeAsync(over, stream));
    CHECK(&d, cuStreamSynchronize(stream));
    char json[512];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"bytes\":%zu,\"free_before\":%zu,\"free_allocated\":%zu,"
             "\"total\":%zu,\"over_rc\":%d}",
             (int)getpid(), bytes, free0, free1, total, over_rc);
    emit("allocated", json);
    wait_for_go();
    CHECK(&d, cuMemFreeAsync(p, stream));
    CHECK(&d, cuStreamSynchronize(stream));
    CHECK(&d, cuMemGetInfo_v2(&free2, &total));
    snprintf(json, sizeof json, "{\"free_freed\":%zu}", free2);
    emit("freed", json);
    CHECK(&d, cuStreamDestroy_v2(stream));
    return 0;
}

/* A host function that holds its stream until the main thread opens the gate. */
static volatile int stream_gate_open;

static void hold_stream(void *unused) {
    (void)unused;
    struct timespec tick = {0, 1000000};
    while (!__atomic_load_n(&stream_gate_open, __ATOMIC_ACQUIRE))
        nanosleep(&tick, NULL);
}

static int mode_asyncorder(size_t bytes) {
    CUdevice device;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr p = 0, over = 0;
    size_t free0 = 0, free1 = 0, free2 = 0, free3 = 0, total = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(&d, cuMemGetInfo_v2(&free0, &total));
    CHECK(&d, cuMemAllocAsync(&p, bytes, stream));
    CHECK(&d, cuStreamSynchronize(stream));
    CHECK(&d, cuMemGetInfo_v2(&free1, &total));
    /* The free waits behind work that is still running: the memory is still in use. */
    CHECK(&d, cuLaunchHostFunc(stream, hold_stream, NULL));
    CHECK(&d, cuMemFreeAsync(p, stream));
    CHECK(&d, cuMemGetInfo_v2(&free2, &total));
    /* The same bytes again: they fit only if the queued free counted as done. */
    CUresult over_rc = d.cuMemAlloc_v2(&over, bytes);
    char json[512];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"bytes\":%zu,\"free_before\":%zu,\"free_allocated\":%zu,"
             "\"free_pending\":%zu,\"total\":%zu,\"over_rc\":%d}",
             (int)getpid(), bytes, free0, free1, free2, total, over_rc);
    emit("pending", json);
    wait_for_go();
    __atomic_store_n(&stream_gate_open, 1, __ATOMIC_RELEASE);
    /* Freed only now: cuMemFree may wait for the device, and the stream is held above. */
    if (over_rc == CUDA_SUCCESS)
        CHECK(&d, cuMemFree_v2(over));
    CHECK(&d, cuStreamSynchronize(stream));
    CHECK(&d, cuMemGetInfo_v2(&free3, &total));
    snprintf(json, sizeof json, "{\"free_settled\":%zu}", free3);
    emit("settled", json);
    CHECK(&d, cuStreamDestroy_v2(stream));
    return 0;
}

static int mode_expandable(size_t granules) {
    CUdevice device;
    CUcontext ctx;
    size_t gran = 0, free0 = 0, free1 = 0, free2 = 0, total = 0;
    CUmemGenericAllocationHandle handle = 0, over = 0;
    CUdeviceptr va = 0;
    if (granules < 2 || granules % 2 != 0) {
        fprintf(stderr, "expandable: an even number of granules\n");
        return 2;
    }
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    CHECK(&d, cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = granules * gran, half = size / 2;
    CHECK(&d, cuMemGetInfo_v2(&free0, &total));
    CHECK(&d, cuMemCreate(&handle, size, &prop, 0));
    CHECK(&d, cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(&d, cuMemMap(va, half, 0, handle, 0));
    CHECK(&d, cuMemMap(va + half, half, half, handle, 0));
    /* Released at once, as expandable segments do: the mappings keep the memory alive. */
    CHECK(&d, cuMemRelease(handle));
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(&d, cuMemSetAccess(va, size, &access, 1));
    static const char hello[] = "released granules still hold data";
    char back[sizeof hello] = {0};
    CHECK(&d, cuMemcpyHtoD_v2(va + size - sizeof hello, hello, sizeof hello));
    CHECK(&d, cuMemcpyDtoH_v2(back, va + size - sizeof hello, sizeof hello));
    CHECK(&d, cuMemGetInfo_v2(&free1, &total));
    /* As many granules again: they fit only if the release gave the memory back. */
    size_t too_many = size;
    CUresult over_rc = d.cuMemCreate(&over, too_many, &prop, 0);
    if (over_rc == CUDA_SUCCESS)
        CHECK(&d, cuMemRelease(over));
    char json[512];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"granularity\":%zu,\"size\":%zu,\"free_before\":%zu,"
             "\"free_released\":%zu,\"total\":%zu,\"data_ok\":%s,\"over_bytes\":%zu,"
             "\"over_rc\":%d}",
             (int)getpid(), gran, size, free0, free1, total,
             memcmp(back, hello, sizeof hello) == 0 ? "true" : "false", too_many, over_rc);
    emit("released", json);
    wait_for_go();
    CHECK(&d, cuMemUnmap(va, size));
    CHECK(&d, cuMemGetInfo_v2(&free2, &total));
    CHECK(&d, cuMemAddressFree(va, size));
    snprintf(json, sizeof json, "{\"free_unmapped\":%zu}", free2);
    emit("unmapped", json);
    wait_for_go();
    return 0;
}

static int mode_forkchild(size_t bytes) {
    CUdeviceptr p = 0;
    /* A hooked call before cuInit: the library sets up its container, the driver refuses. */
    CUresult pre_rc = d.cuMemAlloc_v2(&p, 1);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    CUdevice device;
    CUcontext ctx;
    size_t free_bytes = 0, total = 0;
    char json[256];
    if (child == 0) {
        if (use_device(0, &device, &ctx) != 0)
            _exit(1);
        if (d.cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || d.cuMemGetInfo_v2(&free_bytes, &total))
            _exit(1);
        snprintf(json, sizeof json, "{\"pid\":%d,\"free\":%zu,\"total\":%zu}", (int)getpid(),
                 free_bytes, total);
        emit("child", json);
        wait_for_go();
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuMemGetInfo_v2(&free_bytes, &total));
    CHECK(&d, cuMemAlloc_v2(&p, bytes));
    size_t free_after = 0;
    CHECK(&d, cuMemGetInfo_v2(&free_after, &total));
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"pre_init_rc\":%d,\"child_exit\":%d,\"free\":%zu,"
             "\"free_allocated\":%zu,\"total\":%zu}",
             (int)getpid(), pre_rc, WIFEXITED(status) ? WEXITSTATUS(status) : -1, free_bytes,
             free_after, total);
    emit("parent", json);
    wait_for_go();
    return 0;
}

static int mode_forkafter(size_t bytes) {
    CUdevice device;
    CUcontext ctx;
    CUdeviceptr p = 0;
    size_t free0 = 0, free1 = 0, total = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuMemAlloc_v2(&p, bytes));
    CHECK(&d, cuMemGetInfo_v2(&free0, &total));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        /* A child of an initialized process may not use CUDA; trying must fail cleanly,
         * and its normal exit (exit handlers included) must not touch the parent's slot. */
        size_t f = 0, t = 0;
        CUdeviceptr q = 0;
        CUresult info_rc = d.cuMemGetInfo_v2(&f, &t);
        CUresult alloc_rc = d.cuMemAlloc_v2(&q, 4096);
        CUresult free_rc = d.cuMemFree_v2(p);
        exit(info_rc != CUDA_SUCCESS && alloc_rc != CUDA_SUCCESS && free_rc != CUDA_SUCCESS ? 0
                                                                                          : 3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(&d, cuMemGetInfo_v2(&free1, &total));
    char json[256];
    snprintf(json, sizeof json,
             "{\"pid\":%d,\"child\":%d,\"child_exit\":%d,\"free_before\":%zu,"
             "\"free_after\":%zu,\"total\":%zu}",
             (int)getpid(), (int)child, WIFEXITED(status) ? WEXITSTATUS(status) : -1, free0,
             free1, total);
    emit("parent", json);
    wait_for_go();
    CHECK(&d, cuMemFree_v2(p));
    return 0;
}

static int mode_forkhold(size_t bytes) {
    CUdevice device;
    CUcontext ctx;
    CUdeviceptr p = 0;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuMemAlloc_v2(&p, bytes));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        for (;;)
            pause();
    }
    char json[128];
    snprintf(json, sizeof json, "{\"pid\":%d,\"child\":%d}", (int)getpid(), (int)child);
    emit("ready", json);
    for (;;)
        pause();
}

/* One step of the primary-context sequence: report it and wait for the test. */
static void primary_step(const char *name, CUresult rc) {
    char json[128];
    snprintf(json, sizeof json, "{\"pid\":%d,\"name\":\"%s\",\"rc\":%d}", (int)getpid(), name,
             rc);
    emit("step", json);
    wait_for_go();
}

static int mode_primary(void) {
    CUdevice device;
    CUcontext ctx = NULL;
    CHECK(&d, cuInit(0));
    CHECK(&d, cuDeviceGet(&device, 0));
    primary_step("retained", d.cuDevicePrimaryCtxRetain(&ctx, device));
    primary_step("retained_twice", d.cuDevicePrimaryCtxRetain(&ctx, device));
    primary_step("released_once", d.cuDevicePrimaryCtxRelease_v2(device));
    primary_step("released", d.cuDevicePrimaryCtxRelease_v2(device));
    CHECK(&d, cuDevicePrimaryCtxRetain(&ctx, device));
    primary_step("reset", d.cuDevicePrimaryCtxReset_v2(device));
    primary_step("late_release", d.cuDevicePrimaryCtxRelease_v2(device));
    CHECK(&d, cuDevicePrimaryCtxRetain(&ctx, device));
    CHECK(&d, cuDevicePrimaryCtxRetain(&ctx, device));
    primary_step("reset_retained_twice", d.cuDevicePrimaryCtxReset_v2(device));
    primary_step("retained_again", d.cuDevicePrimaryCtxRetain(&ctx, device));
    return 0;
}

static int mode_names(void) {
    CUdevice device;
    CUcontext ctx;
    char name[128] = {0};
    int sms = 0, count = 0, version = 0;
    CUdevice current = -1;
    const char *err_name = NULL;
    if (use_device(0, &device, &ctx) != 0)
        return 1;
    CHECK(&d, cuDeviceGetName(name, sizeof name, device));
    CHECK(&d, cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
    CHECK(&d, cuDeviceGetCount(&count));
    CHECK(&d, cuDriverGetVersion(&version));
    CHECK(&d, cuCtxGetDevice(&current));
    CHECK(&d, cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &err_name));
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p = 0;
        CHECK(&d, cuMemAlloc_v2(&p, 4096));
        CHECK(&d, cuMemFree_v2(p));
    }
    char json[1024];
    snprintf(json, sizeof json,
             "{\"binding\":\"%s\",\"name\":\"%s\",\"sms\":%d,\"count\":%d,\"version\":%d,"
             "\"ctx_device\":%d,\"oom_name\":\"%s\","
             "\"tessera\":{\"cuMemAlloc_v2\":%lld,\"cuMemFree_v2\":%lld,"
             "\"cuDevicePrimaryCtxRetain\":%lld},"
             "\"shim\":{\"cuMemAlloc_v2\":%lld,\"cuDeviceGetName\":%lld,"
             "\"next_tessera_debug_counter\":%lld}}",
             driver_binding, name, sms, count, version, current, err_name,
             tessera_counter("cuMemAlloc_v2"), tessera_counter("cuMemFree_v2"),
             tessera_counter("cuDevicePrimaryCtxRetain"), shim_counter("cuMemAlloc_v2"),
             shim_counter("cuDeviceGetName"), shim_counter("next:tessera_debug_counter"));
    emit("names", json);
    return 0;
}

static int mode_launch(const char *ptx) {
    if (run_roundtrip(&d, ptx) != 0)
        return 1;
    char json[512];
    snprintf(json, sizeof json,
             "{\"binding\":\"%s\",\"cuLaunchKernel\":%lld,\"cuLaunchKernel_ptsz\":%lld,"
             "\"cuMemAlloc_v2\":%lld,\"cuMemFree_v2\":%lld,\"cuMemGetInfo_v2\":%lld}",
             driver_binding, tessera_counter("cuLaunchKernel"),
             tessera_counter("cuLaunchKernel_ptsz"), tessera_counter("cuMemAlloc_v2"),
             tessera_counter("cuMemFree_v2"), tessera_counter("cuMemGetInfo_v2"));
    emit("counters", json);
    return 0;
}

typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, unsigned long long, int *);

static int mode_procmap(const char *api, int nqueries, char **queries) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(libcuda.so.1) failed: %s\n", dlerror());
        return 1;
    }
    int v2 = strcmp(api, "v2") == 0;
    void *sym = dlsym(lib, v2 ? "cuGetProcAddress_v2" : "cuGetProcAddress");
    if (sym == NULL) {
        fprintf(stderr, "dlsym(cuGetProcAddress%s) failed\n", v2 ? "_v2" : "");
        return 1;
    }
    get_proc_v1_fn get1;
    get_proc_v2_fn get2;
    memcpy(&get1, &sym, sizeof sym);
    memcpy(&get2, &sym, sizeof sym);
    printf("procmap [");
    for (int i = 0; i < nqueries; i++) {
        char base[128];
        int version = 0;
        unsigned long long flags = 0;
        if (sscanf(queries[i], "%127[^:]:%d:%llu", base, &version, &flags) != 3) {
            fprintf(stderr, "procmap: `%s` is not <base>:<version>:<flags>\n", queries[i]);
            return 2;
        }
        void *fn = (void *)&mode_procmap;
        int status = -1;
        CUresult rc = v2 ? get2(base, &fn, version, flags, &status)
                         : get1(base, &fn, version, flags);
        Dl_info info;
        memset(&info, 0, sizeof info);
        const char *file = "", *symbol = "";
        if (fn != NULL && dladdr(fn, &info) != 0) {
            file = info.dli_fname != NULL ? info.dli_fname : "";
            /* Only an exact match names the function itself. */
            symbol = info.dli_sname != NULL && info.dli_saddr == fn ? info.dli_sname : "";
        }
        const char *slash = strrchr(file, '/');
        printf("%s{\"query\":\"%s\",\"rc\":%d,\"status\":%d,\"null\":%s,\"library\":\"%s\","
               "\"symbol\":\"%s\"}",
               i ? "," : "", queries[i], rc, status, fn == NULL ? "true" : "false",
               slash ? slash + 1 : file, symbol);
    }
    printf("]\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <mode> [args]; see the comment at the top\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "procmap") == 0 && argc >= 3)
        return mode_procmap(argv[2], argc - 3, argv + 3);
    if (bind_driver(&d) != 0)
        return 1;
    int device = argc >= 3 ? atoi(argv[2]) : 0;
    if (strcmp(mode, "primary") == 0)
        return mode_primary();
    if (strcmp(mode, "capfill") == 0)
        return mode_capfill(device);
    if (strcmp(mode, "probe") == 0)
        return mode_probe(device);
    if (strcmp(mode, "hold") == 0 && argc >= 3)
        return mode_hold((size_t)strtoull(argv[2], NULL, 0), argc >= 4 ? atoi(argv[3]) : 0);
    if (strcmp(mode, "unseen") == 0)
        return mode_unseen();
    if (strcmp(mode, "stress") == 0 && argc == 5)
        return mode_stress(atoi(argv[2]), atof(argv[3]), (size_t)strtoull(argv[4], NULL, 0));
    if (strcmp(mode, "vmm") == 0 && argc == 3)
        return mode_vmm((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "async") == 0 && argc == 3)
        return mode_async((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "asyncorder") == 0 && argc == 3)
        return mode_asyncorder((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "expandable") == 0 && argc == 3)
        return mode_expandable((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "forkchild") == 0 && argc == 3)
        return mode_forkchild((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "forkafter") == 0 && argc == 3)
        return mode_forkafter((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "forkhold") == 0 && argc == 3)
        return mode_forkhold((size_t)strtoull(argv[2], NULL, 0));
    if (strcmp(mode, "names") == 0)
        return mode_names();
    if (strcmp(mode, "launch") == 0 && argc == 3)
        return mode_launch(argv[2]);
    fprintf(stderr, "%s: unknown mode or arguments; see the comment at the top\n", argv[0]);
    return 2;
}
