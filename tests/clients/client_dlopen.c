/* Reaches the driver as frameworks do that must start without a GPU: dlopen("libcuda.so.1")
 * and dlsym for each versioned symbol. Usage: client_dlopen <tessera.ptx> */
#include "driver_api.h"

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <tessera.ptx>\n", argv[0]);
        return 2;
    }
    struct driver d;
    if (bind_driver(&d) != 0)
        return 1;
    return run_roundtrip(&d, argv[1]);
}
