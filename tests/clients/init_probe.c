/* Reports what the driver answers when its environment is bad (linked with -lcuda): prints
 * "cuInit <code>" twice (a retry must fail the same way, not crash) and
 * "cuDeviceGetCount <code>". Exits 0 whatever the codes; the test judges them. */
#include "driver_api.h"

#include <stdio.h>

int main(void) {
    struct driver d;
    bind_linked_driver(&d);
    int count = -1;
    printf("cuInit %d\n", d.cuInit(0));
    printf("cuInit %d\n", d.cuInit(0));
    printf("cuDeviceGetCount %d\n", d.cuDeviceGetCount(&count));
    return 0;
}
