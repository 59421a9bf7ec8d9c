/* Binds the entry table to the symbols of the library linked with -lcuda. */
#include "driver_api.h"

#define DRIVER_PROTOTYPE(sym, base, version, params) extern CUresult sym params;
DRIVER_API(DRIVER_PROTOTYPE)
#undef DRIVER_PROTOTYPE

void bind_linked_driver(struct driver *d) {
#define DRIVER_BIND(sym, base, version, params) d->sym = sym;
    DRIVER_API(DRIVER_BIND)
#undef DRIVER_BIND
}

const char *const driver_binding = "linked";

int bind_driver(struct driver *d) {
    bind_linked_driver(d);
    return 0;
}
