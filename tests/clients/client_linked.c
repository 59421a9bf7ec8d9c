/* Reaches the driver the classic way: linked with -lcuda, entry points bound by the
 * dynamic linker. Usage: client_linked <tessera.ptx> */
#include "driver_api.h"

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <tessera.ptx>\n", argv[0]);
        return 2;
    }
    struct driver d;
    bind_linked_driver(&d);
    return run_roundtrip(&d, argv[1]);
}
