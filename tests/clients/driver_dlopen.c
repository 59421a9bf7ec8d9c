/* Binds the entry table as frameworks do that must start without a GPU: dlopen("libcuda.so.1")
 * and dlsym for each versioned symbol. */
#include "driver_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

const char *const driver_binding = "dlopen";

int bind_driver(struct driver *d) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(libcuda.so.1) failed: %s\n", dlerror());
        return 1;
    }
    memset(d, 0, sizeof *d);
    for (size_t i = 0; i < driver_entry_count; i++) {
        void *fn = dlsym(lib, driver_entries[i].symbol);
        if (fn == NULL) {
            fprintf(stderr, "dlsym(%s) failed: %s\n", driver_entries[i].symbol, dlerror());
            return 1;
        }
        memcpy((char *)d + driver_entries[i].offset, &fn, sizeof fn);
    }
    return 0;
}
