//! Occupancy: how many blocks of a kernel fit on one SM at once, from the SM's limits
//! (threads, blocks, registers, shared memory) and the kernel's (its registers per thread,
//! its static shared memory, the dynamic shared memory asked for), as a GPU's occupancy
//! calculator computes it; the block size that maximises it; and, from compute capability
//! 9.0, thread block clusters (8 blocks at most, 16 where the kernel allows non-portable
//! sizes).

use crate::ffi::{code, write_out, CUfunction, DriverResult};
use crate::model::device::attribute_of;
use crate::model::module::{registered, Function};
use std::ffi::c_int;

/// `CUdevice_attribute` values used here.
mod attr {
    pub const MAX_SHARED_PER_SM: i32 = 81;
    pub const MAX_REGISTERS_PER_SM: i32 = 82;
    pub const MAX_THREADS_PER_SM: i32 = 39;
    pub const MAX_BLOCKS_PER_SM: i32 = 106;
    pub const RESERVED_SHARED_PER_BLOCK: i32 = 111;
}
/// Threads are scheduled, and registers allocated, by warps.
const WARP: u64 = 32;
/// Blocks in a cluster that every GPU with clusters supports, and the most where the
/// kernel allows non-portable sizes.
const PORTABLE_CLUSTER: u64 = 8;
const NON_PORTABLE_CLUSTER: u64 = 16;
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`, as an index into the cluster
/// attributes (which start at 10).
const NON_PORTABLE_ALLOWED: usize = 14 - 10;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`: the first of the three dimensions.
const REQUIRED_WIDTH: usize = 11 - 10;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const LAUNCH_CLUSTER_DIMENSION: u32 = 4;

use tessera_cuda_abi::CUlaunchConfig as LaunchConfig;

/// `CUoccupancyB2DSize`: the dynamic shared memory a block size needs.
type BlockToSharedBytes = Option<unsafe extern "C" fn(c_int) -> usize>;

/// Blocks of `block` threads of `f`, each with `dynamic` bytes of dynamic shared memory, that
/// fit on one SM at once.
fn blocks_per_sm(f: &Function, block: u64, dynamic: u64) -> u64 {
    if block == 0 || block > u64::from(f.max_threads) || dynamic > f.max_dynamic_shared() {
        return 0;
    }
    let device = f.device;
    let get = |a: i32, default: i32| attribute_of(device, a).unwrap_or(default).max(0) as u64;
    let warps = block.div_ceil(WARP);
    let by_threads = get(attr::MAX_THREADS_PER_SM, 2048) / (warps * WARP);
    let by_blocks = get(attr::MAX_BLOCKS_PER_SM, 32);
    let registers = warps * WARP * u64::from(f.registers.max(1) as u32);
    let by_registers = get(attr::MAX_REGISTERS_PER_SM, 65536) / registers;
    let shared = f.static_shared + dynamic + get(attr::RESERVED_SHARED_PER_BLOCK, 0);
    let by_shared = match shared {
        0 => u64::MAX,
        s => get(attr::MAX_SHARED_PER_SM, 48 << 10) / s,
    };
    by_threads.min(by_blocks).min(by_registers).min(by_shared)
}

/// The block size that fits the most threads on an SM (the largest of those), and the
/// grid that fills every SM with it.
fn best_block(f: &Function, shared_for: impl Fn(u64) -> u64, limit: u64) -> (u64, u64) {
    let cap = match limit {
        0 => u64::from(f.max_threads),
        l => l.min(u64::from(f.max_threads)),
    };
    let mut best = (0, 0);
    let mut block = WARP.min(cap);
    while block <= cap && block > 0 {
        let threads = blocks_per_sm(f, block, shared_for(block)) * block;
        if threads >= best.0 * best.1 && threads > 0 {
            best = (blocks_per_sm(f, block, shared_for(block)), block);
        }
        block += WARP;
    }
    let sms = attribute_of(f.device, 16).unwrap_or(1).max(1) as u64; // MULTIPROCESSOR_COUNT
    (best.0 * sms, best.1)
}

fn max_blocks(out: *mut c_int, f: CUfunction, block: c_int, dynamic: usize) -> DriverResult {
    let f = registered(f)?;
    let block = u64::try_from(block).map_err(|_| code::CUDA_ERROR_INVALID_VALUE)?;
    let n = blocks_per_sm(&f, block, dynamic as u64);
    // SAFETY: write_out checks null; the caller provides an int to write.
    unsafe { write_out(out, n.min(c_int::MAX as u64) as c_int) }
}

fn max_potential(
    grid: *mut c_int,
    block: *mut c_int,
    f: CUfunction,
    shared_for: BlockToSharedBytes,
    dynamic: usize,
    limit: c_int,
) -> DriverResult {
    let f = registered(f)?;
    if grid.is_null() || block.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let limit = u64::try_from(limit).map_err(|_| code::CUDA_ERROR_INVALID_VALUE)?;
    let shared = |b: u64| match shared_for {
        // SAFETY: the caller's callback, which maps a block size to its shared memory.
        Some(cb) => (unsafe { cb(b as c_int) }) as u64,
        None => dynamic as u64,
    };
    let (g, b) = best_block(&f, shared, limit);
    // SAFETY: both checked non-null; the caller provides ints to write.
    unsafe {
        write_out(grid, g.min(c_int::MAX as u64) as c_int)?;
        write_out(block, b as c_int)
    }
}

/// The blocks of one cluster for a launch of `f` with `config`: the launch's cluster
/// dimension, else the kernel's required one, else one block.
///
/// # Safety
/// `config` points to a `CUlaunchConfig` whose attributes array holds `num_attrs` entries.
unsafe fn cluster_blocks(f: &Function, config: &LaunchConfig) -> u64 {
    if !config.attrs.is_null() {
        for i in 0..config.num_attrs as usize {
            // SAFETY: the array holds num_attrs entries, by the contract.
            let a = unsafe { &*config.attrs.add(i) };
            if a.id == LAUNCH_CLUSTER_DIMENSION {
                return (0..3).map(|d| u64::from(a.word(d).max(1))).product();
            }
        }
    }
    let cluster = f.attrs().cluster;
    let required: u64 = cluster[REQUIRED_WIDTH..REQUIRED_WIDTH + 3]
        .iter()
        .map(|&d| d.max(1) as u64)
        .product();
    required.max(1)
}

/// The largest cluster `f` may be launched with.
fn largest_cluster(f: &Function) -> u64 {
    if f.attrs().cluster[NON_PORTABLE_ALLOWED] != 0 {
        NON_PORTABLE_CLUSTER
    } else {
        PORTABLE_CLUSTER
    }
}

/// The launch config, for a kernel of a device with clusters.
///
/// # Safety
/// `config` is null or points to a `CUlaunchConfig`.
unsafe fn with_clusters<'a>(
    f: &Function,
    config: *const LaunchConfig,
) -> Result<&'a LaunchConfig, u32> {
    if f.compute_capability().0 < 9 {
        return Err(code::CUDA_ERROR_NOT_SUPPORTED);
    }
    // SAFETY: null or a CUlaunchConfig, by the contract.
    unsafe { config.as_ref() }.ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

cuda_entry! {
    /// The most clusters of the launch's size that can run at once: none, for a cluster
    /// larger than the kernel may have (cuBLAS 12 probes sizes up to 17 this way, and stops
    /// at an error).
    fn cuOccupancyMaxActiveClusters(out: *mut c_int, f: CUfunction, config: *const LaunchConfig) {
        let f = registered(f)?;
        // SAFETY: the caller's config, as the driver API defines it.
        let config = unsafe { with_clusters(&f, config)? };
        // SAFETY: as above.
        let size = unsafe { cluster_blocks(&f, config) };
        if size > largest_cluster(&f) {
            // SAFETY: write_out checks null; the caller provides an int to write.
            return unsafe { write_out(out, 0) };
        }
        let block: u64 = config.block.iter().map(|&d| u64::from(d.max(1))).product();
        let sms = attribute_of(f.device, 16).unwrap_or(1).max(1) as u64; // MULTIPROCESSOR_COUNT
        let clusters = blocks_per_sm(&f, block, u64::from(config.shared)) * sms / size;
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(out, clusters.min(c_int::MAX as u64) as c_int) }
    }

    /// The largest cluster the kernel may have with this launch's blocks: the most its
    /// attributes allow, if the blocks fit an SM each.
    fn cuOccupancyMaxPotentialClusterSize(out: *mut c_int, f: CUfunction, config: *const LaunchConfig) {
        let f = registered(f)?;
        // SAFETY: the caller's config, as the driver API defines it.
        let config = unsafe { with_clusters(&f, config)? };
        let block: u64 = config.block.iter().map(|&d| u64::from(d.max(1))).product();
        let size = match blocks_per_sm(&f, block, u64::from(config.shared)) {
            0 => 0,
            _ => largest_cluster(&f),
        };
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(out, size as c_int) }
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessor(out: *mut c_int, f: CUfunction, block: c_int, dynamic: usize) {
        max_blocks(out, f, block, dynamic)
    }

    /// Flags (caching override) change nothing here.
    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        out: *mut c_int,
        f: CUfunction,
        block: c_int,
        dynamic: usize,
        _flags: u32,
    ) {
        max_blocks(out, f, block, dynamic)
    }

    fn cuOccupancyMaxPotentialBlockSize(
        grid: *mut c_int,
        block: *mut c_int,
        f: CUfunction,
        shared_for: BlockToSharedBytes,
        dynamic: usize,
        limit: c_int,
    ) {
        max_potential(grid, block, f, shared_for, dynamic, limit)
    }

    fn cuOccupancyMaxPotentialBlockSizeWithFlags(
        grid: *mut c_int,
        block: *mut c_int,
        f: CUfunction,
        shared_for: BlockToSharedBytes,
        dynamic: usize,
        limit: c_int,
        _flags: u32,
    ) {
        max_potential(grid, block, f, shared_for, dynamic, limit)
    }

    /// The dynamic shared memory each of `blocks` blocks of `block` threads may have on one SM.
    fn cuOccupancyAvailableDynamicSMemPerBlock(out: *mut usize, f: CUfunction, blocks: c_int, block: c_int) {
        let f = registered(f)?;
        let (blocks, block) = (
            u64::try_from(blocks).map_err(|_| code::CUDA_ERROR_INVALID_VALUE)?,
            u64::try_from(block).map_err(|_| code::CUDA_ERROR_INVALID_VALUE)?,
        );
        if blocks == 0 || blocks_per_sm(&f, block, 0) < blocks {
            // SAFETY: write_out checks null; the caller provides a size_t to write.
            return unsafe { write_out(out, 0) };
        }
        let per_sm = attribute_of(f.device, attr::MAX_SHARED_PER_SM).unwrap_or(0).max(0) as u64;
        let reserved = attribute_of(f.device, attr::RESERVED_SHARED_PER_BLOCK).unwrap_or(0).max(0) as u64;
        let each = (per_sm / blocks).saturating_sub(f.static_shared + reserved);
        let each = each.min(f.max_dynamic_shared());
        // SAFETY: write_out checks null; the caller provides a size_t to write.
        unsafe { write_out(out, each as usize) }
    }
}
