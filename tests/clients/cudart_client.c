/* A CUDA runtime application: it reaches the driver only through NVIDIA's runtime
 * (libcudart, linked dynamically or statically), the way nearly every CUDA program does.
 * Its kernels come from a fat binary it builds and registers by hand, as the code nvcc
 * generates would, around the PTX text of tessera.ptx.
 *
 *   run <tessera.ptx> <spin ns>
 *       device count, memory info, cudaMalloc + cudaMemcpy round trip, cudaMallocAsync /
 *       cudaFreeAsync, tessera_fill_u32 through cudaLaunchKernel and through
 *       cudaLaunchKernel_ptsz (each result read back and verified), then tessera_spin for
 *       <spin ns>; print "run {json}" with libtessera.so's launch counters when it is loaded
 *   capfill <tessera.ptx>
 *       fill the device with cudaMalloc, largest chunks first and down to one byte; one more
 *       byte must fail; free one chunk and run the fill kernel in it; print "capfill {json}"
 *   procmap <request file>
 *       each line "<version> <flags> <name> <driver's symbol>" (as simgpu records the
 *       requests it gets) is resolved again through the cuGetProcAddress_v2 that dlsym
 *       gives for libcuda.so.1, as the runtime finds it; print "procmap [json]" with the
 *       library and symbol dladdr names for each answer
 *   primary
 *       the runtime's primary context beside the driver API's: at each step print
 *       "step {json}" (its name and result code) and wait for a line: cudaFree(0) (the
 *       runtime retains the context), a driver-API retain and its release (found with
 *       dlsym, as an application that mixes the two APIs calls them), cudaDeviceReset,
 *       cudaFree(0) again
 *
 * The runtime's API is declared here by hand. A failing call other than the one a mode
 * expects exits 1, naming it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct {
    unsigned int x, y, z;
} dim3;

enum { MEMCPY_HOST_TO_DEVICE = 1, MEMCPY_DEVICE_TO_HOST = 2 };
enum { ERROR_MEMORY_ALLOCATION = 2 };

extern cudaError_t cudaGetDeviceCount(int *count);
extern cudaError_t cudaSetDevice(int device);
extern cudaError_t cudaRuntimeGetVersion(int *version);
extern cudaError_t cudaDriverGetVersion(int *version);
extern cudaError_t cudaMalloc(void **ptr, size_t bytes);
extern cudaError_t cudaFree(void *ptr);
extern cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, int kind);
extern cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
extern cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t stream);
extern cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
extern cudaError_t cudaStreamSynchronize(cudaStream_t stream);
extern cudaError_t cudaDeviceSynchronize(void);
extern cudaError_t cudaDeviceReset(void);
extern cudaError_t cudaGetLastError(void);
extern const char *cudaGetErrorString(cudaError_t error);
extern cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                    size_t shared_bytes, cudaStream_t stream);
extern cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                         size_t shared_bytes, cudaStream_t stream);
extern void **__cudaRegisterFatBinary(void *wrapper);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaUnregisterFatBinary(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_function, char *device_function,
                                   const char *device_name, int thread_limit, void *tid,
                                   void *bid, void *block, void *grid, int *warp_size);

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t rc_ = (call);                                                      \
        if (rc_ != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %d (%s)\n", __FILE__, __LINE__, #call, \
                    rc_, cudaGetErrorString(rc_));                                     \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* ---- The fat binary, laid out as nvcc lays it out. ---- */

/* One file of a fat binary: a 64-byte header, then the payload. */
struct fatbin_file {
    uint16_t kind; /* 1: PTX text, 2: ELF */
    uint16_t version;
    uint32_t header_size;
    uint64_t padded_size;
    uint32_t payload_size;
    uint32_t reserved0;
    uint32_t ptx_version; /* major << 16 | minor */
    uint32_t arch;        /* sm_XY as XY */
    uint32_t name_offset;
    uint32_t name_size;
    uint64_t flags;
    uint64_t reserved1;
    uint64_t uncompressed_size;
};

/* The fat binary: a 16-byte header, then its files. */
struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t files_size;
};

/* What the compiler registers: it points at the fat binary. */
struct fatbin_wrapper {
    uint32_t magic;
    uint32_t version;
    const void *data;
    const void *unused;
};

_Static_assert(sizeof(struct fatbin_file) == 64, "fat binary file header");
_Static_assert(sizeof(struct fatbin_header) == 16, "fat binary header");

#define FATBIN_MAGIC 0xBA55ED50u
#define WRAPPER_MAGIC 0x466243B1u
#define FILE_PTX 1
#define FLAG_64BIT 0x1
#define FLAG_LINUX 0x10

/* The host-side stubs whose addresses name the kernels, as nvcc's would. */
static char host_spin, host_fill;
static void **registered;
static struct fatbin_wrapper wrapper;

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)n + 1);
    if (text == NULL || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *size = (size_t)n;
    return text;
}

static void register_kernels(const char *ptx_path) {
    size_t ptx_size;
    char *ptx = read_file(ptx_path, &ptx_size);
    /* The text with its NUL, padded to 16 bytes. */
    size_t padded = (ptx_size + 1 + 15) & ~(size_t)15;
    size_t total = sizeof(struct fatbin_header) + sizeof(struct fatbin_file) + padded;
    unsigned char *image = aligned_alloc(16, (total + 15) & ~(size_t)15);
    if (image == NULL)
        exit(1);
    memset(image, 0, total);
    struct fatbin_header *header = (struct fatbin_header *)image;
    header->magic = FATBIN_MAGIC;
    header->version = 1;
    header->header_size = sizeof *header;
    header->files_size = sizeof(struct fatbin_file) + padded;
    struct fatbin_file *file = (struct fatbin_file *)(image + sizeof *header);
    file->kind = FILE_PTX;
    file->version = 0x0101;
    file->header_size = sizeof *file;
    file->padded_size = padded;
    file->payload_size = (uint32_t)padded;
    file->ptx_version = 7u << 16;
    file->arch = 70;
    file->flags = FLAG_64BIT | FLAG_LINUX;
    memcpy(image + sizeof *header + sizeof *file, ptx, ptx_size);
    free(ptx);

    wrapper.magic = WRAPPER_MAGIC;
    wrapper.version = 1;
    wrapper.data = image;
    registered = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(registered, &host_spin, "tessera_spin", "tessera_spin", -1, NULL,
                           NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(registered, &host_fill, "tessera_fill_u32", "tessera_fill_u32", -1,
                           NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(registered);
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

/* Fills `count` words at `device` with `value` through the given launch entry point and the
 * given stream, reads them back, and says whether every word holds the value. */
static int fill_and_verify(cudaError_t (*launch)(const void *, dim3, dim3, void **, size_t,
                                                 cudaStream_t),
                           void *device, uint64_t count, uint32_t value) {
    void *ptr = device;
    void *args[] = {&ptr, &count, &value};
    dim3 grid = {4, 1, 1}, block = {128, 1, 1};
    CHECK(launch(&host_fill, grid, block, args, 0, NULL));
    CHECK(cudaGetLastError());
    uint32_t *host = malloc(count * sizeof *host);
    if (host == NULL)
        exit(1);
    memset(host, 0, count * sizeof *host);
    CHECK(cudaMemcpy(host, device, count * sizeof *host, MEMCPY_DEVICE_TO_HOST));
    int ok = 1;
    for (uint64_t i = 0; i < count; i++)
        ok &= host[i] == value;
    free(host);
    return ok;
}

static int mode_run(const char *ptx_path, unsigned long long spin_ns) {
    int count = 0, runtime = 0, driver = 0;
    register_kernels(ptx_path);
    CHECK(cudaGetDeviceCount(&count));
    CHECK(cudaRuntimeGetVersion(&runtime));
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaSetDevice(0));

    size_t free0 = 0, total0 = 0;
    CHECK(cudaMemGetInfo(&free0, &total0));

    /* A round trip through device memory. */
    enum { WORDS = 1 << 16 };
    static uint32_t out[WORDS], back[WORDS];
    for (uint32_t i = 0; i < WORDS; i++)
        out[i] = i * 2654435761u;
    void *buf = NULL;
    CHECK(cudaMalloc(&buf, sizeof out));
    size_t free1 = 0, total1 = 0;
    CHECK(cudaMemGetInfo(&free1, &total1));
    CHECK(cudaMemcpy(buf, out, sizeof out, MEMCPY_HOST_TO_DEVICE));
    CHECK(cudaMemcpy(back, buf, sizeof back, MEMCPY_DEVICE_TO_HOST));
    int copied = memcmp(out, back, sizeof out) == 0;

    /* Stream-ordered allocation on the legacy default stream. */
    void *async_buf = NULL;
    CHECK(cudaMallocAsync(&async_buf, 1 << 20, NULL));
    CHECK(cudaMemcpy(async_buf, out, sizeof out, MEMCPY_HOST_TO_DEVICE));
    CHECK(cudaFreeAsync(async_buf, NULL));
    CHECK(cudaStreamSynchronize(NULL));

    int filled = fill_and_verify(cudaLaunchKernel, buf, WORDS, 0xC0FFEEu);
    int filled_ptsz = fill_and_verify(cudaLaunchKernel_ptsz, buf, WORDS, 0x5EED5u);

    void *args[] = {&spin_ns};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel(&host_spin, one, one, args, 0, NULL));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(buf));

    /* The runtime destroys the primary context and makes it again on next use, with the
     * kernels loaded again. */
    CHECK(cudaDeviceReset());
    size_t free_reset = 0, total_reset = 0;
    CHECK(cudaMemGetInfo(&free_reset, &total_reset));
    CHECK(cudaMalloc(&buf, sizeof out));
    int filled_after_reset = fill_and_verify(cudaLaunchKernel, buf, WORDS, 0xA11CEu);
    CHECK(cudaFree(buf));

    printf("run {\"pid\":%d,\"device_count\":%d,\"runtime_version\":%d,\"driver_version\":%d,"
           "\"free\":%zu,\"total\":%zu,\"free_allocated\":%zu,\"copied\":%s,\"filled\":%s,"
           "\"filled_ptsz\":%s,\"filled_after_reset\":%s,\"free_after_reset\":%zu,\"launch_counter\":%lld,"
           "\"launch_ptsz_counter\":%lld}\n",
           (int)getpid(), count, runtime, driver, free0, total0, free1,
           copied ? "true" : "false", filled ? "true" : "false",
           filled_ptsz ? "true" : "false", filled_after_reset ? "true" : "false", free_reset,
           tessera_counter("cuLaunchKernel"),
           tessera_counter("cuLaunchKernel_ptsz"));
    fflush(stdout);
    __cudaUnregisterFatBinary(registered);
    return 0;
}

#define MAX_CHUNKS 4096

static int mode_capfill(const char *ptx_path) {
    static void *chunks[MAX_CHUNKS];
    static size_t sizes[MAX_CHUNKS];
    size_t n = 0, allocated = 0, free0 = 0, total0 = 0, free1 = 0, total1 = 0;
    register_kernels(ptx_path);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemGetInfo(&free0, &total0));
    for (size_t chunk = 100000000; chunk >= 1; chunk /= 2) {
        for (;;) {
            void *p = NULL;
            if (n == MAX_CHUNKS) {
                fprintf(stderr, "capfill: more than %d allocations\n", MAX_CHUNKS);
                return 1;
            }
            cudaError_t rc = cudaMalloc(&p, chunk);
            if (rc == ERROR_MEMORY_ALLOCATION) {
                /* The runtime keeps the error as the last one; clear it. */
                cudaGetLastError();
                break;
            }
            CHECK(rc);
            chunks[n] = p;
            sizes[n++] = chunk;
            allocated += chunk;
        }
    }
    void *extra = NULL;
    cudaError_t one_more = cudaMalloc(&extra, 1);
    cudaGetLastError();
    CHECK(cudaMemGetInfo(&free1, &total1));

    /* Room for the kernel again: it still runs and its result verifies. */
    size_t biggest = 0;
    for (size_t i = 0; i < n; i++)
        if (sizes[i] > sizes[biggest])
            biggest = i;
    int filled = fill_and_verify(cudaLaunchKernel, chunks[biggest], 1 << 16, 0xFEEDu);
    int filled_ptsz = fill_and_verify(cudaLaunchKernel_ptsz, chunks[biggest], 1 << 16, 0xBEEFu);
    for (size_t i = 0; i < n; i++)
        CHECK(cudaFree(chunks[i]));
    size_t free2 = 0, total2 = 0;
    CHECK(cudaMemGetInfo(&free2, &total2));
    printf("capfill {\"pid\":%d,\"free_before\":%zu,\"total_before\":%zu,\"allocated\":%zu,"
           "\"chunks\":%zu,\"one_more_rc\":%d,\"free_full\":%zu,\"total_full\":%zu,"
           "\"filled\":%s,\"filled_ptsz\":%s,\"free_after\":%zu}\n",
           (int)getpid(), free0, total0, allocated, n, one_more, free1, total1,
           filled ? "true" : "false", filled_ptsz ? "true" : "false", free2);
    fflush(stdout);
    return 0;
}

typedef int (*get_proc_address_v2)(const char *, void **, int, unsigned long long, int *);

static void json_string(const char *s) {
    putchar('"');
    for (; s != NULL && *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static int mode_procmap(const char *requests) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (sym == NULL) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 1;
    }
    get_proc_address_v2 lookup;
    memcpy(&lookup, &sym, sizeof sym);
    FILE *f = fopen(requests, "r");
    if (f == NULL) {
        perror(requests);
        return 1;
    }
    char line[600], name[256], expected[256];
    int version;
    unsigned long long flags;
    int first = 1;
    printf("procmap [");
    while (fgets(line, sizeof line, f) != NULL) {
        /* A request without a name has no fourth field. */
        if (sscanf(line, "%d %llu %255s %255s", &version, &flags, name, expected) != 4)
            continue;
        void *fn = NULL;
        int status = -1;
        int rc = lookup(name, &fn, version, flags, &status);
        Dl_info info;
        memset(&info, 0, sizeof info);
        if (fn != NULL)
            dladdr(fn, &info);
        printf("%s{\"name\":", first ? "" : ",");
        json_string(name);
        printf(",\"version\":%d,\"flags\":%llu,\"driver_symbol\":", version, flags);
        json_string(expected);
        printf(",\"rc\":%d,\"status\":%d,\"library\":", rc, status);
        json_string(info.dli_fname);
        printf(",\"symbol\":");
        json_string(info.dli_sname);
        printf("}");
        first = 0;
    }
    printf("]\n");
    fclose(f);
    return 0;
}

/* One step of the primary sequence: report it and wait for the test. */
static void primary_step(const char *name, int rc) {
    printf("step {\"pid\":%d,\"name\":\"%s\",\"rc\":%d}\n", (int)getpid(), name, rc);
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL)
        return;
}

static int mode_primary(void) {
    int (*retain)(void **, int);
    int (*release)(int);
    void *r = dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
    void *l = dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRelease_v2");
    if (r == NULL || l == NULL) {
        fprintf(stderr, "the driver's primary-context entry points are not loaded\n");
        return 1;
    }
    memcpy(&retain, &r, sizeof r);
    memcpy(&release, &l, sizeof l);
    void *ctx = NULL;
    primary_step("runtime", cudaFree(NULL));
    primary_step("driver_retain", retain(&ctx, 0));
    primary_step("driver_release", release(0));
    primary_step("device_reset", cudaDeviceReset());
    primary_step("runtime_again", cudaFree(NULL));
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "run") == 0)
        return mode_run(argv[2], strtoull(argv[3], NULL, 10));
    if (argc >= 3 && strcmp(argv[1], "capfill") == 0)
        return mode_capfill(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "procmap") == 0)
        return mode_procmap(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "primary") == 0)
        return mode_primary();
    fprintf(stderr, "usage: %s run <tessera.ptx> <spin ns> | capfill <tessera.ptx> | "
                    "procmap <request file> | primary\n",
            argv[0]);
    return 2;
}
