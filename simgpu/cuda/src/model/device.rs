//! Device queries: ordinals, names, UUIDs, memory, attributes, PCI ids, peers and the memory
//! pool each device allocates from.

use crate::ffi::{code, DriverResult};
use crate::model::driver::devices;
use simgpu::node::DeviceInfo;
use std::ffi::{c_char, c_int};

/// The per-architecture facts a program may ask for, keyed by compute capability major.
struct Architecture {
    clock_khz: i32,
    memory_clock_khz: i32,
    bus_width: i32,
    l2_bytes: i32,
    shared_per_block_optin: i32,
    shared_per_sm: i32,
    threads_per_sm: i32,
    blocks_per_sm: i32,
    reserved_shared_per_block: i32,
    fp64_ratio: i32,
}

fn architecture(info: &DeviceInfo) -> Architecture {
    match info.compute_capability.0 {
        0..=7 => Architecture {
            clock_khz: 1_590_000,
            memory_clock_khz: 5_001_000,
            bus_width: 256,
            l2_bytes: 4 << 20,
            shared_per_block_optin: 64 << 10,
            shared_per_sm: 64 << 10,
            threads_per_sm: 1024,
            blocks_per_sm: 16,
            reserved_shared_per_block: 0,
            fp64_ratio: 32,
        },
        8 => Architecture {
            clock_khz: 1_410_000,
            memory_clock_khz: 1_593_000,
            bus_width: 5120,
            l2_bytes: 40 << 20,
            shared_per_block_optin: 163 << 10,
            shared_per_sm: 164 << 10,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            reserved_shared_per_block: 1024,
            fp64_ratio: 2,
        },
        _ => Architecture {
            clock_khz: 1_980_000,
            memory_clock_khz: 2_619_000,
            bus_width: 5120,
            l2_bytes: 50 << 20,
            shared_per_block_optin: 227 << 10,
            shared_per_sm: 228 << 10,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            reserved_shared_per_block: 1024,
            fp64_ratio: 2,
        },
    }
}

/// The PCI device id of the presets' models (vendor 0x10de), 0 for custom devices.
fn pci_device_id(info: &DeviceInfo) -> i32 {
    let id: u32 = match info.name.as_str() {
        "Tesla T4" => 0x1eb8,
        "NVIDIA A100-SXM4-40GB" => 0x20b0,
        "NVIDIA A100-SXM4-80GB" => 0x20b2,
        "NVIDIA H100 80GB HBM3" => 0x2330,
        "NVIDIA H200" => 0x2335,
        _ => return 0,
    };
    ((id << 16) | 0x10de) as i32
}

/// The value of `CUdevice_attribute` `attr` for device `device`, for the driver's own
/// calculations (occupancy); `None` for an unknown device or attribute.
pub(crate) fn attribute_of(device: usize, attr: c_int) -> Option<i32> {
    attribute(devices().ok()?.get(device)?, attr)
}

/// The value of one `CUdevice_attribute` (12.8 numbering), or `None` for one the driver
/// does not define.
pub(crate) fn attribute(info: &DeviceInfo, attr: c_int) -> Option<i32> {
    let arch = architecture(info);
    let (major, minor) = info.compute_capability;
    let hopper = major >= 9;
    let v = match attr {
        1 => 1024,                             // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                         // MAX_BLOCK_DIM_X, _Y
        4 => 64,                               // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                         // MAX_GRID_DIM_X
        6 | 7 => 65535,                        // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,                         // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,                         // TOTAL_CONSTANT_MEMORY
        10 => 32,                              // WARP_SIZE
        11 => i32::MAX,                        // MAX_PITCH
        12 => 65536,                           // MAX_REGISTERS_PER_BLOCK
        13 => arch.clock_khz,                  // CLOCK_RATE
        14 => 512,                             // TEXTURE_ALIGNMENT
        15 => 1,                               // GPU_OVERLAP
        16 => info.sms as i32,                 // MULTIPROCESSOR_COUNT
        17 => 0,                               // KERNEL_EXEC_TIMEOUT
        18 => 0,                               // INTEGRATED
        19 => 1,                               // CAN_MAP_HOST_MEMORY
        20 => 0,                               // COMPUTE_MODE: default
        21 => 131072,                          // MAXIMUM_TEXTURE1D_WIDTH
        22 => 131072,                          // MAXIMUM_TEXTURE2D_WIDTH
        23 => 65536,                           // MAXIMUM_TEXTURE2D_HEIGHT
        24..=26 => 16384,                      // MAXIMUM_TEXTURE3D_*
        27 | 28 => 32768,                      // MAXIMUM_TEXTURE2D_LAYERED_WIDTH, _HEIGHT
        29 => 2048,                            // MAXIMUM_TEXTURE2D_LAYERED_LAYERS
        30 => 512,                             // SURFACE_ALIGNMENT
        31 => 1,                               // CONCURRENT_KERNELS
        32 => 1,                               // ECC_ENABLED
        33 => info.pci_bus as i32,             // PCI_BUS_ID
        34 => 0,                               // PCI_DEVICE_ID
        35 => 0,                               // TCC_DRIVER
        36 => arch.memory_clock_khz,           // MEMORY_CLOCK_RATE
        37 => arch.bus_width,                  // GLOBAL_MEMORY_BUS_WIDTH
        38 => arch.l2_bytes,                   // L2_CACHE_SIZE
        39 => arch.threads_per_sm,             // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,                               // ASYNC_ENGINE_COUNT
        41 => 1,                               // UNIFIED_ADDRESSING
        42 => 32768,                           // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        43 => 2048,                            // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        44 => 1,                               // CAN_TEX2D_GATHER
        45 | 46 => 32768,                      // MAXIMUM_TEXTURE2D_GATHER_*
        47 | 48 => 8192,                       // MAXIMUM_TEXTURE3D_*_ALTERNATE
        49 => 32768,                           // MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
        50 => 0,                               // PCI_DOMAIN_ID
        51 => 32,                              // TEXTURE_PITCH_ALIGNMENT
        52 | 53 => 32768,                      // MAXIMUM_TEXTURECUBEMAP_(LAYERED_)WIDTH
        54 => 2046,                            // MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
        55 | 56 => 32768,                      // MAXIMUM_SURFACE1D_WIDTH, 2D_WIDTH
        57 => 65536,                           // MAXIMUM_SURFACE2D_HEIGHT
        58..=60 => 16384,                      // MAXIMUM_SURFACE3D_*
        61 => 32768,                           // MAXIMUM_SURFACE1D_LAYERED_WIDTH
        62 => 2048,                            // MAXIMUM_SURFACE1D_LAYERED_LAYERS
        63 | 64 => 32768,                      // MAXIMUM_SURFACE2D_LAYERED_WIDTH, _HEIGHT
        65 => 2048,                            // MAXIMUM_SURFACE2D_LAYERED_LAYERS
        66 | 67 => 32768,                      // MAXIMUM_SURFACECUBEMAP_(LAYERED_)WIDTH
        68 => 2046,                            // MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
        69 => 268435456,                       // MAXIMUM_TEXTURE1D_LINEAR_WIDTH
        70 => 131072,                          // MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        71 => 65000,                           // MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
        72 => 2097120,                         // MAXIMUM_TEXTURE2D_LINEAR_PITCH
        73 => 32768,                           // MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
        74 => 32768,                           // MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT
        75 => major as i32,                    // COMPUTE_CAPABILITY_MAJOR
        76 => minor as i32,                    // COMPUTE_CAPABILITY_MINOR
        77 => 32768,                           // MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
        78 => 1,                               // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,                          // GLOBAL_ / LOCAL_L1_CACHE_SUPPORTED
        81 => arch.shared_per_sm,              // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,                           // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,                               // MANAGED_MEMORY
        84 => 0,                               // MULTI_GPU_BOARD
        85 => info.index as i32,               // MULTI_GPU_BOARD_GROUP_ID
        86 => 0,                               // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => arch.fp64_ratio,                 // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,                               // PAGEABLE_MEMORY_ACCESS
        89 => 1,                               // CONCURRENT_MANAGED_ACCESS
        90 => 1,                               // COMPUTE_PREEMPTION_SUPPORTED
        91 => 1,                               // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        92..=94 => 0,                          // CAN_USE_STREAM_MEM_OPS_V1 and friends
        95 => 1,                               // COOPERATIVE_LAUNCH
        96 => 0,                               // COOPERATIVE_MULTI_DEVICE_LAUNCH
        97 => arch.shared_per_block_optin,     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 0,                               // CAN_FLUSH_REMOTE_WRITES
        99 => 1,                               // HOST_REGISTER_SUPPORTED
        100 | 101 => 0, // PAGEABLE_..._HOST_PAGE_TABLES, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        102 => 1,       // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103..=105 => 0, // HANDLE_TYPE_*_SUPPORTED: nothing is exported
        106 => arch.blocks_per_sm, // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 0,       // GENERIC_COMPRESSION_SUPPORTED
        108 => arch.l2_bytes / 4 * 3, // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 134_213_632, // MAX_ACCESS_POLICY_WINDOW_SIZE
        110 => 0,       // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => arch.reserved_shared_per_block, // RESERVED_SHARED_MEMORY_PER_BLOCK
        112 | 113 => 0, // SPARSE_CUDA_ARRAY_, READ_ONLY_HOST_REGISTER_SUPPORTED
        114 => 0,       // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => 1,       // MEMORY_POOLS_SUPPORTED
        116..=118 => 0, // GPU_DIRECT_RDMA_*
        119 => 0,       // MEMPOOL_SUPPORTED_HANDLE_TYPES: none
        120 => hopper as i32, // CLUSTER_LAUNCH
        121 => 0,       // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        122 | 123 => 0, // CAN_USE_64_BIT_STREAM_MEM_OPS, _WAIT_VALUE_NOR
        124 | 125 => 0, // DMA_BUF_SUPPORTED, IPC_EVENT_SUPPORTED
        126 => {
            if hopper {
                4
            } else {
                1
            }
        } // MEM_SYNC_DOMAIN_COUNT
        127 => hopper as i32, // TENSOR_MAP_ACCESS_SUPPORTED
        128 | 129 => 0, // HANDLE_TYPE_FABRIC_SUPPORTED, UNIFIED_FUNCTION_POINTERS
        130 => 0,       // NUMA_CONFIG: none
        131 => -1,      // NUMA_ID
        132 | 133 => 0, // MULTICAST_SUPPORTED, MPS_ENABLED
        134 => -1,      // HOST_NUMA_ID
        135..=138 => 0, // CIG, decompression
        139 => pci_device_id(info), // GPU_PCI_DEVICE_ID
        140 => 0,       // GPU_PCI_SUBSYSTEM_ID
        141..=143 => 0, // HOST_NUMA_* support
        _ => return None,
    };
    Some(v)
}

/// The bus id as `cuDeviceGetPCIBusId` writes it: `domain:bus:device.function` in hex.
pub(crate) fn pci_bus_id(info: &DeviceInfo) -> String {
    format!("0000:{:02X}:00.0", info.pci_bus)
}

/// Parses the forms the driver accepts: `domain:bus:device.function`, `domain:bus:device`
/// and `bus:device.function`, in hex; returns (domain, bus, device).
pub(crate) fn parse_pci_bus_id(text: &str) -> Option<(u32, u32, u32)> {
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    let (rest, _function) = match text.split_once('.') {
        Some((rest, f)) => (rest, Some(hex(f)?)),
        None => (text, None),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    match parts.as_slice() {
        [domain, bus, dev] => Some((hex(domain)?, hex(bus)?, hex(dev)?)),
        [bus, dev] if _function.is_some() => Some((0, hex(bus)?, hex(dev)?)),
        _ => None,
    }
}

/// Copies `text` into a caller's buffer of `len` bytes, truncated and NUL-terminated.
///
/// # Safety
/// `buf` must be null or valid for writes of `len` bytes.
pub(crate) unsafe fn write_c_string(buf: *mut c_char, len: c_int, text: &str) -> DriverResult {
    if buf.is_null() || len <= 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let n = text.len().min(len as usize - 1);
    // SAFETY: buf holds len > n bytes, and text has n readable bytes; they cannot overlap
    // since text is our own string.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    Ok(())
}

/// `CUdevprop`, the legacy properties structure.
#[repr(C)]
pub(crate) struct CUdevprop {
    pub(crate) max_threads_per_block: c_int,
    pub(crate) max_threads_dim: [c_int; 3],
    pub(crate) max_grid_size: [c_int; 3],
    pub(crate) shared_mem_per_block: c_int,
    pub(crate) total_constant_memory: c_int,
    pub(crate) simd_width: c_int,
    pub(crate) mem_pitch: c_int,
    pub(crate) regs_per_block: c_int,
    pub(crate) clock_rate: c_int,
    pub(crate) texture_align: c_int,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a100() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            name: "NVIDIA A100-SXM4-80GB".into(),
            uuid: [7; 16],
            memory: 80 << 30,
            sms: 108,
            compute_capability: (8, 0),
            pci_bus: 0x3b,
        }
    }

    #[test]
    fn attributes_answer_the_common_questions() {
        let d = a100();
        assert_eq!(attribute(&d, 16), Some(108));
        assert_eq!(attribute(&d, 75), Some(8));
        assert_eq!(attribute(&d, 76), Some(0));
        assert_eq!(attribute(&d, 115), Some(1));
        assert_eq!(attribute(&d, 10), Some(32));
        assert_eq!(attribute(&d, 33), Some(0x3b));
        assert_eq!(attribute(&d, 0), None);
        assert_eq!(attribute(&d, 144), None);
        assert!((1..=143).all(|a| attribute(&d, a).is_some()));
    }

    #[test]
    fn pci_bus_ids_round_trip() {
        let d = a100();
        assert_eq!(pci_bus_id(&d), "0000:3B:00.0");
        assert_eq!(parse_pci_bus_id("0000:3B:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci_bus_id("00000000:3b:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci_bus_id("0000:3b:00"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci_bus_id("3b:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci_bus_id("3b"), None);
        assert_eq!(parse_pci_bus_id("zz:00.0"), None);
    }
}
