//! NVML's ABI facts that more than one part speaks: its result codes and the value it writes
//! for a figure it cannot give. The preload library answers and reads NVML calls, simgpu's
//! `libnvidia-ml.so.1` returns them, the benchmarks read them; declared once, here.

/// NVML's result code (`nvmlReturn_t`).
pub type NvmlReturn = u32;

/// The values of `nvmlReturn_t` (`NVML_SUCCESS`, `NVML_ERROR_<NAME>`).
pub mod code {
    use super::NvmlReturn;
    pub const SUCCESS: NvmlReturn = 0;
    pub const UNINITIALIZED: NvmlReturn = 1;
    pub const INVALID_ARGUMENT: NvmlReturn = 2;
    pub const NOT_SUPPORTED: NvmlReturn = 3;
    pub const NO_PERMISSION: NvmlReturn = 4;
    pub const ALREADY_INITIALIZED: NvmlReturn = 5;
    pub const NOT_FOUND: NvmlReturn = 6;
    pub const INSUFFICIENT_SIZE: NvmlReturn = 7;
    pub const INSUFFICIENT_POWER: NvmlReturn = 8;
    pub const DRIVER_NOT_LOADED: NvmlReturn = 9;
    pub const TIMEOUT: NvmlReturn = 10;
    pub const IRQ_ISSUE: NvmlReturn = 11;
    pub const LIBRARY_NOT_FOUND: NvmlReturn = 12;
    pub const FUNCTION_NOT_FOUND: NvmlReturn = 13;
    pub const CORRUPTED_INFOROM: NvmlReturn = 14;
    pub const GPU_IS_LOST: NvmlReturn = 15;
    pub const RESET_REQUIRED: NvmlReturn = 16;
    pub const OPERATING_SYSTEM: NvmlReturn = 17;
    pub const LIB_RM_VERSION_MISMATCH: NvmlReturn = 18;
    pub const IN_USE: NvmlReturn = 19;
    pub const MEMORY: NvmlReturn = 20;
    pub const NO_DATA: NvmlReturn = 21;
    pub const VGPU_ECC_NOT_SUPPORTED: NvmlReturn = 22;
    pub const INSUFFICIENT_RESOURCES: NvmlReturn = 23;
    pub const FREQ_NOT_SUPPORTED: NvmlReturn = 24;
    pub const ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
    pub const DEPRECATED: NvmlReturn = 26;
    pub const NOT_READY: NvmlReturn = 27;
    pub const GPU_NOT_FOUND: NvmlReturn = 28;
    pub const INVALID_STATE: NvmlReturn = 29;
    pub const UNKNOWN: NvmlReturn = 999;
}

/// `NVML_VALUE_NOT_AVAILABLE`: what NVML writes for a figure it cannot give, such as the
/// memory of a process in another container.
pub const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
