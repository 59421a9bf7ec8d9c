/* Reaches the driver as frameworks do that must start without a GPU: dlopen("libcuda.so.1")
 * and dlsym for each versioned symbol. Usage: client_dlopen <tessera.ptx> */
#include "driver_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

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
    struct driver d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; i < driver_entry_count; i++) {
        void *fn = dlsym(lib, driver_entries[i].symbol);
        if (fn == NULL) {
            fprintf(stderr, "dlsym(%s) failed: %s\n", driver_entries[i].symbol, dlerror());
            return 1;
        }
        memcpy((char *)&d + driver_entries[i].offset, &fn, sizeof fn);
    }
    return run_roundtrip(&d, argv[1]);
}
