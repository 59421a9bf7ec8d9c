/* A driver that does nothing, for measuring what libtessera.so adds to a call without the
 * cost of a real (or simulated) driver drowning it. It answers only the entry points that
 * the benchmarked paths reach, each in a few instructions: allocations come from a bump
 * counter and are never backed, one device, one context that is always current.
 *
 * Built by benches/hooks.rs with the system C compiler. Our own declarations: results are
 * ints, device pointers 64-bit integers, handles opaque pointers. */
#include <stddef.h>
#include <stdint.h>

#define SUCCESS 0
#define INVALID_VALUE 1
#define INVALID_HANDLE 400

static const uint64_t TOTAL = 80ull << 30;
static uint64_t next_address = 1ull << 40;
/* Any non-null value: the benchmark's one context. */
static int the_context;

int cuInit(unsigned flags) { (void)flags; return SUCCESS; }

int cuDeviceGet(int *device, int ordinal) {
    if (device == NULL || ordinal != 0)
        return INVALID_VALUE;
    *device = 0;
    return SUCCESS;
}

int cuDeviceGetCount(int *count) {
    if (count == NULL)
        return INVALID_VALUE;
    *count = 1;
    return SUCCESS;
}

int cuDevicePrimaryCtxRetain(void **ctx, int device) {
    if (ctx == NULL || device != 0)
        return INVALID_VALUE;
    *ctx = &the_context;
    return SUCCESS;
}

int cuDevicePrimaryCtxRelease_v2(int device) { return device == 0 ? SUCCESS : INVALID_VALUE; }

int cuCtxSetCurrent(void *ctx) { (void)ctx; return SUCCESS; }

int cuCtxGetCurrent(void **ctx) {
    if (ctx == NULL)
        return INVALID_VALUE;
    *ctx = &the_context;
    return SUCCESS;
}

int cuCtxGetDevice(int *device) {
    if (device == NULL)
        return INVALID_VALUE;
    *device = 0;
    return SUCCESS;
}

int cuCtxPushCurrent_v2(void *ctx) { (void)ctx; return SUCCESS; }

int cuCtxPopCurrent_v2(void **ctx) {
    if (ctx != NULL)
        *ctx = &the_context;
    return SUCCESS;
}

int cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes == NULL || total_bytes == NULL)
        return INVALID_VALUE;
    *free_bytes = TOTAL;
    *total_bytes = TOTAL;
    return SUCCESS;
}

int cuMemAlloc_v2(uint64_t *dptr, size_t bytes) {
    if (dptr == NULL || bytes == 0)
        return INVALID_VALUE;
    *dptr = __atomic_fetch_add(&next_address, (bytes + 255) & ~(size_t)255, __ATOMIC_RELAXED);
    return SUCCESS;
}

int cuMemFree_v2(uint64_t dptr) { return dptr == 0 ? INVALID_VALUE : SUCCESS; }

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream;
    (void)params, (void)extra;
    return f == NULL ? INVALID_HANDLE : SUCCESS;
}
