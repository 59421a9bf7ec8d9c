/* Reaches the driver as the CUDA runtime does: dlopen, dlsym of cuGetProcAddress_v2 only,
 * then every entry point by base name and CUDA version. Also checks that the versioned
 * variant resolved is the one the real driver gives, and the not-found behaviour.
 * Usage: client_proc_address <tessera.ptx> */
#include "driver_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int CUdriverProcAddressQueryResult;
typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        unsigned long long flags,
                                        CUdriverProcAddressQueryResult *status);

/* The CUDA version this client says it was built for. */
#define CLIENT_CUDA_VERSION 12000

static int expect_resolution(get_proc_address_fn get, void *lib, const char *base, int version,
                             unsigned long long flags, const char *expected_symbol) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult status = -1;
    CUresult rc = get(base, &fn, version, flags, &status);
    void *want = dlsym(lib, expected_symbol);
    if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || fn == NULL || fn != want) {
        fprintf(stderr,
                "cuGetProcAddress_v2(%s, version %d, flags %llu): result %d, status %d, %p; "
                "expected %s at %p\n",
                base, version, flags, rc, status, fn, expected_symbol, want);
        return 1;
    }
    return 0;
}

static int expect_not_found(get_proc_address_fn get, const char *base, int version,
                            CUdriverProcAddressQueryResult expected_status) {
    void *fn = (void *)&expect_not_found;
    CUdriverProcAddressQueryResult status = -1;
    CUresult rc = get(base, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (rc != CUDA_ERROR_NOT_FOUND || status != expected_status || fn != NULL) {
        fprintf(stderr,
                "cuGetProcAddress_v2(%s, version %d): result %d, status %d, %p; expected "
                "CUDA_ERROR_NOT_FOUND, status %d, NULL\n",
                base, version, rc, status, fn, expected_status);
        return 1;
    }
    return 0;
}

/* A caller older than every variant the library has must not get a newer variant's ABI:
 * either the old symbol (if the library exports it) or CUDA_ERROR_NOT_FOUND and NULL. */
static int expect_old_or_nothing(get_proc_address_fn get, void *lib, const char *base, int version,
                                 const char *old_symbol) {
    void *old = dlsym(lib, old_symbol);
    if (old != NULL)
        return expect_resolution(get, lib, base, version, CU_GET_PROC_ADDRESS_DEFAULT, old_symbol);
    void *fn = (void *)&expect_old_or_nothing;
    CUdriverProcAddressQueryResult status = -1;
    CUresult rc = get(base, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (rc != CUDA_ERROR_NOT_FOUND || fn != NULL || status == CU_GET_PROC_ADDRESS_SUCCESS) {
        fprintf(stderr,
                "cuGetProcAddress_v2(%s, version %d): result %d, status %d, %p; the library has "
                "no %s, so expected CUDA_ERROR_NOT_FOUND and NULL\n",
                base, version, rc, status, fn, old_symbol);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <tessera.ptx>\n", argv[0]);
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(libcuda.so.1) failed: %s\n", dlerror());
        return 1;
    }
    get_proc_address_fn get;
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (sym == NULL) {
        fprintf(stderr, "dlsym(cuGetProcAddress_v2) failed: %s\n", dlerror());
        return 1;
    }
    memcpy(&get, &sym, sizeof sym);

    /* The runtime resolves cuInit before calling it, so resolution works before cuInit. */
    struct driver d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; i < driver_entry_count; i++) {
        const struct driver_entry *e = &driver_entries[i];
        if (expect_resolution(get, lib, e->base, CLIENT_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
                              e->symbol) != 0)
            return 1;
        void *fn = dlsym(lib, e->symbol);
        memcpy((char *)&d + e->offset, &fn, sizeof fn);
    }

    int bad = 0;
    /* Older callers get the older variant, or nothing: never the newer ABI. */
    bad |= expect_old_or_nothing(get, lib, "cuMemAlloc", 3000, "cuMemAlloc");
    bad |= expect_resolution(get, lib, "cuMemGetInfo", 3000, CU_GET_PROC_ADDRESS_DEFAULT,
                             "cuMemGetInfo");
    /* The per-thread default stream flag picks the _ptsz / _ptds variants. */
    bad |= expect_resolution(get, lib, "cuLaunchKernel", CLIENT_CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz");
    bad |= expect_resolution(get, lib, "cuMemcpyHtoD", CLIENT_CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds");
    bad |= expect_resolution(get, lib, "cuLaunchKernel", CLIENT_CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel");
    /* Not found: an unknown name, and a function newer than the caller's version. */
    bad |= expect_not_found(get, "cuNoSuchFunction", CLIENT_CUDA_VERSION,
                            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    bad |= expect_not_found(get, "cuMemAllocAsync", 11000,
                            CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    if (bad)
        return 1;

    return run_roundtrip(&d, argv[1]);
}
