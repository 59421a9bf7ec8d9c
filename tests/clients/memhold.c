/* One process of a memory-sharing scenario (linked with -lcuda).
 *   memhold hold <bytes> [device]  allocate, print "ready <pointer>", then sleep until killed
 *   memhold info [device]          print "free <bytes> total <bytes>" as cuMemGetInfo sees it
 * Each mode retains the device's primary context first, as applications do. */
#include "driver_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int use_device(const struct driver *d, int ordinal) {
    CUdevice device;
    CUcontext ctx;
    CHECK(d, cuInit(0));
    CHECK(d, cuDeviceGet(&device, ordinal));
    CHECK(d, cuDevicePrimaryCtxRetain(&ctx, device));
    CHECK(d, cuCtxSetCurrent(ctx));
    return 0;
}

int main(int argc, char **argv) {
    struct driver d;
    bind_linked_driver(&d);
    if (argc >= 3 && strcmp(argv[1], "hold") == 0) {
        unsigned long long bytes = strtoull(argv[2], NULL, 0);
        CUdeviceptr ptr = 0;
        if (use_device(&d, argc >= 4 ? atoi(argv[3]) : 0) != 0)
            return 1;
        CHECK(&d, cuMemAlloc_v2(&ptr, (size_t)bytes));
        printf("ready 0x%llx\n", ptr);
        fflush(stdout);
        for (;;)
            pause();
    }
    if (argc >= 2 && strcmp(argv[1], "info") == 0) {
        size_t free_bytes = 0, total = 0;
        if (use_device(&d, argc >= 3 ? atoi(argv[2]) : 0) != 0)
            return 1;
        CHECK(&d, cuMemGetInfo_v2(&free_bytes, &total));
        printf("free %zu total %zu\n", free_bytes, total);
        return 0;
    }
    fprintf(stderr, "usage: %s hold <bytes> [device] | info [device]\n", argv[0]);
    return 2;
}
