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
/* Standalone compute share, "fixed:Q" with Q a whole percentage 1..100: the processes of
 * one region enforce it among themselves on every device controld does not manage. A
 * malformed value is one error line on stderr and leaves compute unlimited. */
#define TESSERA_ENV_COMPUTE "TESSERA_COMPUTE"
/* The real driver to load instead of libcuda.so.1. */
#define TESSERA_ENV_REAL_LIBCUDA "TESSERA_REAL_LIBCUDA"
/* controld's state directory. */
#define TESSERA_ENV_STATE_DIR "TESSERA_STATE_DIR"
/* off | error | warn | info | debug (also none, warning, trace; any case). The library's
 * default is error, controld's info. */
#define TESSERA_ENV_LOG "TESSERA_LOG"
/* "env": a process whose region file cannot be used (unreadable, foreign, of another
 * version, spoiled) runs under the environment's memory caps. Unset, its cap is 0 bytes on
 * every device: allocations fail with out-of-memory, never uncapped. */
#define TESSERA_ENV_REGION_FALLBACK "TESSERA_REGION_FALLBACK"
/* Standalone time slice for the process's channel groups on the GPU, like "100us" or
 * "2ms" (1us..1s), when no controld manages its region: short slices get an offline
 * process out of the way of others' work within that time. */
#define TESSERA_ENV_TIMESLICE "TESSERA_TIMESLICE"

/* ---- Region layout, version 2 ---- */

/* The first 8 bytes of every region file: "TESSERA" and a NUL. */
#define TESSERA_MAGIC "TESSERA"
#define TESSERA_MAGIC_LEN 8
/* Bumped whenever a byte of the layout moves or changes meaning. */
#define TESSERA_ABI_VERSION 4u
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
/* tessera_compute_account.mode values: not limited; refilled by controld; refilled by the
 * container's own processes (TESSERA_COMPUTE=fixed:Q). */
#define TESSERA_COMPUTE_UNLIMITED 0u
#define TESSERA_COMPUTE_DAEMON 1u
#define TESSERA_COMPUTE_LOCAL 2u
/* tessera_compute_account.priority values. */
#define TESSERA_PRIORITY_ONLINE 0u
#define TESSERA_PRIORITY_OFFLINE 1u
/* tessera_header.timeslice_state values: nothing asked or done yet; in force on the channel
 * groups seen; none of the driver's channel groups seen; refused by the driver. With a
 * refusal, timeslice_detail holds the RM status, or an errno plus TESSERA_TIMESLICE_ERRNO. */
#define TESSERA_TIMESLICE_NONE 0u
#define TESSERA_TIMESLICE_SET 1u
#define TESSERA_TIMESLICE_NO_GROUPS 2u
#define TESSERA_TIMESLICE_REFUSED 3u
#define TESSERA_TIMESLICE_ERRNO 0x80000000u
/* Launches in flight per device when tessera_compute_account.window is 0. */
#define TESSERA_DEFAULT_WINDOW 256u
/* Estimated GPU ns in flight per device when tessera_compute_account.window_ns is 0. */
#define TESSERA_DEFAULT_WINDOW_NS 4000000ull
/* A whole device's time in parts per million. */
#define TESSERA_PPM_ALL 1000000u
/* Busy spans per compute account (a ring), and the low bits of a span holding its length
 * in us; the bits above hold its start in us of CLOCK_MONOTONIC, modulo 2^40 (0: empty). */
#define TESSERA_SPAN_SLOTS 256
#define TESSERA_SPAN_LEN_BITS 24

/* What the file is and whom it belongs to. 128 bytes. */
struct tessera_header {
    uint8_t magic[8];          /* TESSERA_MAGIC */
    uint32_t abi_version;      /* TESSERA_ABI_VERSION */
    uint32_t header_size;      /* sizeof(struct tessera_header) */
    uint64_t total_size;       /* sizeof(struct tessera_region), also the file's length */
    uint32_t device_count;     /* TESSERA_MAX_DEVICES */
    uint32_t ready;            /* atomic: 1 once creation finished (load with acquire) */
    char name[TESSERA_NAME_LEN]; /* container name, [a-z0-9][a-z0-9-]{0,62}, NUL-padded */
    uint32_t compute_limited;  /* atomic: bit d set while devices' compute[d].mode != UNLIMITED */
    uint32_t gpus;             /* atomic: bit d for each GPU the container was given; 0 = all */
    uint32_t timeslice_us;     /* atomic: time slice for the container's channel groups, us; 0 = the driver's */
    uint32_t timeslice_state;  /* atomic: TESSERA_TIMESLICE_* (the library's report) */
    uint32_t timeslice_detail; /* atomic: groups set, or the driver's status of a refusal */
    uint32_t timeslice_set_us; /* atomic: the time slice in force on the groups set, us */
    uint8_t reserved[8];       /* zero */
};

/* One device's memory account for the whole container; one cache line. */
struct tessera_device_account {
    uint64_t memory_cap;       /* atomic: cap in bytes; TESSERA_UNLIMITED for none */
    uint64_t memory_used;      /* atomic: bytes reserved by all the container's processes */
    uint64_t context_bytes;    /* atomic: a context's cost as last measured; 0 = unknown */
    uint64_t uuid[2];          /* atomic (d): the device's UUID, big-endian halves; 0 = unknown */
    uint8_t reserved[24];      /* zero */
};

/* One device's compute account for the whole container: launch gate, GPU-time token
 * bucket, measurements. Times in ns of CLOCK_MONOTONIC. Written by controld (d), by the
 * container's libtessera (l), or by both. 35 cache lines. */
struct tessera_compute_account {
    uint32_t mode;             /* atomic (d; l for TESSERA_COMPUTE): TESSERA_COMPUTE_* */
    uint32_t blocked;          /* atomic (d): 1 while the container may launch nothing new */
    uint32_t window;           /* atomic (d): launches in flight allowed; 0 = default */
    uint32_t priority;         /* atomic (d): TESSERA_PRIORITY_* */
    uint32_t local_share_ppm;  /* atomic (l): share of TESSERA_COMPUTE, in ppm */
    uint32_t share_target_ppm; /* atomic (d): share given now, in ppm */
    uint32_t share_measured_ppm; /* atomic (d): share measured lately, in ppm */
    uint32_t board_bit;        /* atomic (d): the container's bit on the board + 1; 0 none */
    uint64_t preemptions;      /* atomic (d): times blocked for online work */
    uint64_t window_ns;        /* atomic (d): GPU ns in flight allowed; 0 = default */
    uint64_t share_measured_until_ns; /* atomic (d): end of the second share_measured_ppm covers */
    uint32_t refill_ppm;       /* atomic (d): refill rate now, in ppm; 0 waiting or blocked */
    uint8_t reserved1[4];      /* zero */
    uint32_t gate;             /* atomic futex word (refiller): bumped on refill or unblock */
    uint32_t active;           /* atomic futex word (l): 1 while launches in flight or waiting */
    uint32_t waiting;          /* atomic (l): launches sleeping in the gate */
    uint32_t inflight;         /* atomic (l): launches admitted, not yet seen complete */
    int64_t bucket_ns;         /* atomic (l charges, refiller credits): tokens; < 0 is debt */
    uint64_t last_refill_ns;   /* atomic (refiller): last refill */
    uint64_t measured_ns;      /* atomic (l): GPU time measured, raw */
    uint64_t throttled_ns;     /* atomic (l): time launches waited in the gate */
    uint64_t launches;         /* atomic (l): launches admitted through the gate */
    uint64_t active_raised_ns; /* atomic (l): when an online container last raised active */
    uint64_t blocked_seen_ns;  /* atomic (l; d clears): first launch that found it blocked */
    uint64_t blocked_at_ns;    /* atomic (d): when controld last set blocked */
    uint64_t board_set_ns;     /* atomic (l): when an online container last set its board bit */
    uint64_t inflight_ns;      /* atomic (l): estimated GPU ns of the launches in flight */
    uint32_t span_cursor;      /* atomic (l): where the next busy span goes in spans */
    uint8_t reserved2[28];     /* zero */
    uint64_t spans[TESSERA_SPAN_SLOTS]; /* atomic (l adds, d empties): packed busy spans */
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
    struct tessera_compute_account compute[TESSERA_MAX_DEVICES];
    struct tessera_process_entry processes[TESSERA_MAX_PROCESSES];
};

/* The node's priority board: the file `board` beside the regions. Per device, a bit per
 * online container with work there (set and cleared by that container's libtessera, bits
 * assigned and reaped by controld); an offline container launches nothing while its
 * device's word is not zero. */
#define TESSERA_BOARD_MAGIC "TSRBOARD"
struct tessera_board {
    char magic[8];             /* TESSERA_BOARD_MAGIC, no NUL */
    uint32_t abi_version;      /* TESSERA_ABI_VERSION */
    uint8_t reserved[52];      /* zero */
    uint64_t online[TESSERA_MAX_DEVICES]; /* atomic: bits of online containers with work */
};

/* A container's limits where its processes can only read them: the file `<region>.limits`
 * beside its region, written by controld alone and given to the container read-only. The
 * library holds the container to the lower of each cap here and the region's own, and,
 * while heartbeat_ns is fresh, to the compute mode and holds here. */
#define TESSERA_LIMITS_MAGIC "TSRLIMIT"
#define TESSERA_HOLD_BLOCKED 1u    /* offline, while online work runs */
#define TESSERA_HOLD_OVER_GRANT 2u /* ran past its granted share, by the daemon's measure */
struct tessera_limits {
    char magic[8];             /* TESSERA_LIMITS_MAGIC, no NUL */
    uint32_t abi_version;      /* TESSERA_ABI_VERSION */
    uint32_t compute_limited;  /* atomic: bit d while device d's compute is limited */
    uint64_t heartbeat_ns;     /* atomic: the daemon's last tick, CLOCK_MONOTONIC */
    uint8_t reserved[40];      /* zero */
    uint64_t memory_caps[TESSERA_MAX_DEVICES]; /* atomic: declared caps; TESSERA_UNLIMITED none */
    uint32_t compute_mode[TESSERA_MAX_DEVICES]; /* atomic: TESSERA_COMPUTE_* per device */
    uint32_t compute_hold[TESSERA_MAX_DEVICES]; /* atomic: TESSERA_HOLD_* bits; 0 may launch */
    uint64_t board_ignore[TESSERA_MAX_DEVICES]; /* atomic: board bits an offline library ignores */
};

#define TESSERA_REGION_SIZE \
    (128u + (64u + 192u + 8u * TESSERA_SPAN_SLOTS) * TESSERA_MAX_DEVICES + \
     192u * TESSERA_MAX_PROCESSES)

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct tessera_header) == 128, "tessera_header is 128 bytes");
_Static_assert(sizeof(struct tessera_device_account) == 64, "one cache line");
_Static_assert(sizeof(struct tessera_compute_account) == 192 + 8 * TESSERA_SPAN_SLOTS,
               "compute account size");
_Static_assert(sizeof(struct tessera_process_entry) == 192, "three cache lines");
_Static_assert(sizeof(struct tessera_region) == TESSERA_REGION_SIZE, "region size");
_Static_assert(sizeof(struct tessera_board) == 64 + 8 * TESSERA_MAX_DEVICES, "board size");
_Static_assert(sizeof(struct tessera_limits) == 64 + 24 * TESSERA_MAX_DEVICES, "limits size");
#endif

#endif /* TESSERA_H */
