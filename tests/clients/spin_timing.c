/* Times tessera_spin kernels with events (linked with -lcuda).
 * Usage: spin_timing <tessera.ptx> <ns> <repeats>
 * Prints one line per measurement, "legacy <ms>" on the default stream and "stream <ms>" on
 * a created stream, after one untimed warm-up launch. */
#include "driver_api.h"

#include <stdio.h>
#include <stdlib.h>

static int time_spin(const struct driver *d, CUfunction spin, CUstream stream,
                     unsigned long long ns, float *ms) {
    CUevent start, stop;
    void *params[] = {&ns};
    CHECK(d, cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(d, cuEventCreate(&stop, CU_EVENT_DEFAULT));
    CHECK(d, cuEventRecord(start, stream));
    CHECK(d, cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
    CHECK(d, cuEventRecord(stop, stream));
    CHECK(d, cuEventSynchronize(stop));
    CHECK(d, cuEventElapsedTime(ms, start, stop));
    CHECK(d, cuEventDestroy_v2(start));
    CHECK(d, cuEventDestroy_v2(stop));
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <tessera.ptx> <ns> <repeats>\n", argv[0]);
        return 2;
    }
    unsigned long long ns = strtoull(argv[2], NULL, 0);
    int repeats = atoi(argv[3]);
    struct driver d;
    bind_linked_driver(&d);
    CUdevice device;
    CUmodule module;
    CUfunction spin;
    CUstream stream;
    float ms;
    char *ptx = read_text_file(argv[1]);
    if (ptx == NULL || open_primary_context(&d, &device) != 0)
        return 1;
    CHECK(&d, cuModuleLoadData(&module, ptx));
    CHECK(&d, cuModuleGetFunction(&spin, module, "tessera_spin"));
    CHECK(&d, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (time_spin(&d, spin, NULL, ns, &ms) != 0)
        return 1;
    for (int i = 0; i < repeats; i++) {
        if (time_spin(&d, spin, NULL, ns, &ms) != 0)
            return 1;
        printf("legacy %.4f\n", ms);
        if (time_spin(&d, spin, stream, ns, &ms) != 0)
            return 1;
        printf("stream %.4f\n", ms);
    }
    CHECK(&d, cuStreamDestroy_v2(stream));
    CHECK(&d, cuModuleUnload(module));
    return 0;
}
