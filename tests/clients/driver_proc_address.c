/* Binds the entry table as the CUDA runtime does: dlopen, dlsym of cuGetProcAddress_v2 only,
 * then every entry point by base name at the CUDA version this client says it was built
 * for. CLIENT_PER_THREAD_STREAM=1 asks for the per-thread default stream variants, as a
 * program built with --default-stream per-thread does. */
#include "driver_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const driver_binding = "proc_address";

typedef CUresult (*get_proc_address_v2_fn)(const char *symbol, void **pfn, int cuda_version,
                                           unsigned long long flags, int *status);

/* The CUDA version this client says it was built for. */
#define CLIENT_CUDA_VERSION 12000

int bind_driver(struct driver *d) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(libcuda.so.1) failed: %s\n", dlerror());
        return 1;
    }
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (sym == NULL) {
        fprintf(stderr, "dlsym(cuGetProcAddress_v2) failed: %s\n", dlerror());
        return 1;
    }
    get_proc_address_v2_fn get;
    memcpy(&get, &sym, sizeof sym);
    const char *pt = getenv("CLIENT_PER_THREAD_STREAM");
    unsigned long long flags = pt != NULL && strcmp(pt, "1") == 0
                                   ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                   : CU_GET_PROC_ADDRESS_DEFAULT;
    memset(d, 0, sizeof *d);
    for (size_t i = 0; i < driver_entry_count; i++) {
        void *fn = NULL;
        int status = -1;
        CUresult rc = get(driver_entries[i].base, &fn, CLIENT_CUDA_VERSION, flags, &status);
        if (rc != CUDA_SUCCESS || fn == NULL) {
            fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu) failed: %d (status %d)\n",
                    driver_entries[i].base, CLIENT_CUDA_VERSION, flags, rc, status);
            return 1;
        }
        memcpy((char *)d + driver_entries[i].offset, &fn, sizeof fn);
    }
    return 0;
}
