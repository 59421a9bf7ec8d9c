/* What the C test clients share: the entry table, error reports, and the round-trip
 * scenario every way of reaching the driver must pass. */
#include "driver_api.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct driver_entry driver_entries[] = {
#define DRIVER_ENTRY(sym, base, version, params) {#sym, base, version, offsetof(struct driver, sym)},
    DRIVER_API(DRIVER_ENTRY)
#undef DRIVER_ENTRY
};
const size_t driver_entry_count = sizeof(driver_entries) / sizeof(driver_entries[0]);

void report_failure(const struct driver *d, const char *what, CUresult rc) {
    const char *name = NULL;
    if (d->cuGetErrorName == NULL || d->cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == NULL)
        name = "(no name)";
    fprintf(stderr, "%s failed: %s (%d)\n", what, name, rc);
}

char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    if (buf == NULL) {
        fprintf(stderr, "out of memory reading %s\n", path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

int open_primary_context(const struct driver *d, CUdevice *device) {
    int version = 0, count = 0;
    CUcontext ctx = NULL;
    CHECK(d, cuInit(0));
    CHECK(d, cuDriverGetVersion(&version));
    if (version < 12000) {
        fprintf(stderr, "cuDriverGetVersion reported %d, expected 12.x or later\n", version);
        return 1;
    }
    CHECK(d, cuDeviceGetCount(&count));
    if (count < 1) {
        fprintf(stderr, "cuDeviceGetCount reported %d devices\n", count);
        return 1;
    }
    CHECK(d, cuDeviceGet(device, 0));
    CHECK(d, cuDevicePrimaryCtxRetain(&ctx, *device));
    CHECK(d, cuCtxSetCurrent(ctx));
    return 0;
}

/* A pattern no fill and no zeroed page produces. */
static uint32_t pattern(size_t i) { return (uint32_t)(i * 2654435761u) ^ 0x5a5a5a5au; }

int run_roundtrip(const struct driver *d, const char *ptx_path) {
    enum { COUNT = 1 << 20 };
    const size_t bytes = COUNT * sizeof(uint32_t);
    const uint32_t fill_value = 0xC0FFEE11u;
    CUdevice device;
    CUdeviceptr dptr = 0;
    CUmodule module = NULL;
    CUfunction fill = NULL;
    size_t free_before = 0, free_after = 0, total = 0;

    if (open_primary_context(d, &device) != 0)
        return 1;

    uint32_t *host = malloc(bytes), *back = malloc(bytes);
    char *ptx = read_text_file(ptx_path);
    if (host == NULL || back == NULL || ptx == NULL)
        return 1;
    for (size_t i = 0; i < COUNT; i++)
        host[i] = pattern(i);

    CHECK(d, cuMemGetInfo_v2(&free_before, &total));
    CHECK(d, cuMemAlloc_v2(&dptr, bytes));
    CHECK(d, cuMemGetInfo_v2(&free_after, &total));
    if (free_before < free_after + bytes) {
        fprintf(stderr, "cuMemGetInfo_v2: free went from %zu to %zu after allocating %zu bytes\n",
                free_before, free_after, bytes);
        return 1;
    }

    CHECK(d, cuMemcpyHtoD_v2(dptr, host, bytes));
    memset(back, 0, bytes);
    CHECK(d, cuMemcpyDtoH_v2(back, dptr, bytes));
    if (memcmp(host, back, bytes) != 0) {
        fprintf(stderr, "HtoD then DtoH did not return the data\n");
        return 1;
    }

    /* Fill the first half only: the second half must keep the pattern. */
    CHECK(d, cuModuleLoadData(&module, ptx));
    CHECK(d, cuModuleGetFunction(&fill, module, "tessera_fill_u32"));
    unsigned long long count = COUNT / 2;
    uint32_t value = fill_value;
    void *params[] = {&dptr, &count, &value};
    CHECK(d, cuLaunchKernel(fill, (unsigned)((count + 255) / 256), 1, 1, 256, 1, 1, 0, NULL,
                            params, NULL));
    CHECK(d, cuCtxSynchronize());
    CHECK(d, cuMemcpyDtoH_v2(back, dptr, bytes));
    for (size_t i = 0; i < COUNT; i++) {
        uint32_t want = i < count ? fill_value : pattern(i);
        if (back[i] != want) {
            fprintf(stderr, "after tessera_fill_u32 over %llu words: word %zu is 0x%08x, expected 0x%08x\n",
                    count, i, back[i], want);
            return 1;
        }
    }

    CHECK(d, cuMemFree_v2(dptr));
    CHECK(d, cuModuleUnload(module));
    CHECK(d, cuDevicePrimaryCtxRelease_v2(device));
    free(host);
    free(back);
    free(ptx);
    printf("roundtrip ok: %zu bytes, fill verified\n", bytes);
    return 0;
}
