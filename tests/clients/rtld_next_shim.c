/* A second preload library, as tracing and profiling tools are: it wraps cuMemAlloc_v2 and
 * cuDeviceGetName, counts the calls, and forwards them to the next definition found with
 * dlsym(RTLD_NEXT, ...). Loaded in front of libtessera.so it must keep working: RTLD_NEXT
 * has to resolve from this library, not from whichever library implements dlsym.
 *
 * rtld_next_shim_count(name) returns the calls that went through a wrapper, and for
 * "next:tessera_debug_counter" 1 if dlsym(RTLD_NEXT, "tessera_debug_counter") from here
 * found libtessera.so's export (which lies after this library), else 0.
 * Built with -shared -fPIC. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

static atomic_llong alloc_calls, name_calls;

static void *next(const char *symbol) { return dlsym(RTLD_NEXT, symbol); }

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    atomic_fetch_add(&alloc_calls, 1);
    CUresult (*real)(CUdeviceptr *, size_t);
    void *sym = next("cuMemAlloc_v2");
    if (sym == NULL)
        return 500; /* CUDA_ERROR_NOT_FOUND */
    memcpy(&real, &sym, sizeof sym);
    return real(dptr, bytes);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
    atomic_fetch_add(&name_calls, 1);
    CUresult (*real)(char *, int, CUdevice);
    void *sym = next("cuDeviceGetName");
    if (sym == NULL)
        return 500;
    memcpy(&real, &sym, sizeof sym);
    return real(name, len, device);
}

long long rtld_next_shim_count(const char *name) {
    if (strcmp(name, "cuMemAlloc_v2") == 0)
        return atomic_load(&alloc_calls);
    if (strcmp(name, "cuDeviceGetName") == 0)
        return atomic_load(&name_calls);
    if (strcmp(name, "next:tessera_debug_counter") == 0)
        return next("tessera_debug_counter") != NULL;
    return -1;
}
