/* Tessera: the C view of the contract between containers, libtessera.so and controld.
 *
 * Today it holds the environment contract; the shared-memory region layout joins it
 * with the region ABI, checked against the Rust layout by a test. */
#ifndef TESSERA_H
#define TESSERA_H

/* The container's region file, set by controld. */
#define TESSERA_ENV_REGION "TESSERA_REGION"
/* Standalone memory caps: all devices, or device <i> (TESSERA_MEMORY_LIMIT_<i>). */
#define TESSERA_ENV_MEMORY_LIMIT "TESSERA_MEMORY_LIMIT"
/* Standalone compute share, like "fixed:30". */
#define TESSERA_ENV_COMPUTE "TESSERA_COMPUTE"
/* The real driver to load instead of libcuda.so.1. */
#define TESSERA_ENV_REAL_LIBCUDA "TESSERA_REAL_LIBCUDA"
/* controld's state directory. */
#define TESSERA_ENV_STATE_DIR "TESSERA_STATE_DIR"
/* error | warn | info | debug */
#define TESSERA_ENV_LOG "TESSERA_LOG"

#endif /* TESSERA_H */
