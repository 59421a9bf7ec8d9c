/* Tessera: the C view of the contract between containers, libtessera.so and controld.
 *
 * Two parts: the environment variables that configure libtessera.so, and the layout of a
 * container's region file, the shared memory that every process of a container and
 * controld map. The Rust crate tessera-region is the reference; a test compiles this header
 * and checks every size and offset below against it.
 *
 * Reading a region from C: map the whole file (TESSERA_REGION_SIZE bytes) MAP_SHARED; check
 * magic, abi_version, header_size and total_size; load `ready` with acquire ordering and
 * trust the other header fields only when it is 1. Fields documented as atomic are written
 * concurrently by other processes: access them with __atomic builtins (or C11 atomics on the
 * same addresses), never as plain variables. Everything in a region is untrusted input.
 * Slot liveness is an OFD lock (F_OFD_SETLK) on one byte at TESSERA_LOCK_BASE + slot; a
 * reader that only reads never takes it. */
#ifndef TESSERA_H
#define TESSERA_H

#include <stdint.h>

/* ---- Environment ---- */

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

/* ---- Region layout, version 1 ---- */

/* The first 8 bytes of every region file: "TESSERA" and a NUL. */
#define TESSERA_MAGIC "TESSERA"
#define TESSERA_MAGIC_LEN 8
/* Bumped whenever a byte of the layout moves or changes meaning. */
#define TESSERA_ABI_VERSION 1u
/* Device accounts in a region. */
#define TESSERA_MAX_DEVICES 16
/* Process slots in a region. */
#define TESSERA_MAX_PROCESSES 1024
/* Bytes of the container name field (names are at most 63 bytes, NUL-padded). */
#define TESSERA_NAME_LEN 64
/* A memory cap meaning "no cap". */
#define TESSERA_UNLIMITED UINT64_MAX
/* Offset of slot 0's liveness lock byte (past the end of the file). */
#define TESSERA_LOCK_BASE ((int64_t)1 << 40)
/* Offset of the lock byte that serialises context-overhead measurements in a container. */
#define TESSERA_MEASURE_LOCK (TESSERA_LOCK_BASE + TESSERA_MAX_PROCESSES)
/* tessera_process_entry.state values. */
#define TESSERA_SLOT_FREE 0u
#define TESSERA_SLOT_LIVE 1u

/* What the file is and whom it belongs to. 128 bytes. */
struct tessera_header {
    uint8_t magic[8];          /* TESSERA_MAGIC */
    uint32_t abi_version;      /* TESSERA_ABI_VERSION */
    uint32_t header_size;      /* sizeof(struct tessera_header) */
    uint64_t total_size;       /* sizeof(struct tessera_region), also the file's length */
    uint32_t device_count;     /* TESSERA_MAX_DEVICES */
    uint32_t ready;            /* atomic: 1 once creation finished (load with acquire) */
    char name[TESSERA_NAME_LEN]; /* container name, [a-z0-9][a-z0-9-]{0,62}, NUL-padded */
    uint8_t reserved[32];      /* zero */
};

/* One device's memory account for the whole container; one cache line. */
struct tessera_device_account {
    uint64_t memory_cap;       /* atomic: cap in bytes; TESSERA_UNLIMITED for none */
    uint64_t memory_used;      /* atomic: bytes reserved by all the container's processes */
    uint8_t reserved[48];      /* zero */
};

/* One process slot; three cache lines. */
struct tessera_process_entry {
    uint32_t state;            /* atomic: TESSERA_SLOT_FREE or TESSERA_SLOT_LIVE */
    uint32_t pid;              /* atomic: owner's pid, in its own pid namespace */
    uint64_t memory[TESSERA_MAX_DEVICES]; /* atomic: bytes held per device */
    uint8_t reserved[56];      /* zero */
};

/* The whole region file; mapped at a page boundary, so every account and entry starts
 * on a cache line. */
struct tessera_region {
    struct tessera_header header;
    struct tessera_device_account devices[TESSERA_MAX_DEVICES];
    struct tessera_process_entry processes[TESSERA_MAX_PROCESSES];
};

#define TESSERA_REGION_SIZE \
    (128u + 64u * TESSERA_MAX_DEVICES + 192u * TESSERA_MAX_PROCESSES)

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct tessera_header) == 128, "tessera_header is 128 bytes");
_Static_assert(sizeof(struct tessera_device_account) == 64, "one cache line");
_Static_assert(sizeof(struct tessera_process_entry) == 192, "three cache lines");
_Static_assert(sizeof(struct tessera_region) == TESSERA_REGION_SIZE, "region size");
#endif

#endif /* TESSERA_H */
