//! Lost devices, for testing what a node does when a GPU fails: `SIMGPU_FAULTS` names a file
//! of device indices (whitespace-separated); every per-device query on a listed device
//! answers `NVML_ERROR_GPU_IS_LOST`, as NVML does for a GPU that fell off the bus. The file
//! is read at each query, so a test fails and restores a device while monitors run.

use crate::ffi::{code, NvmlReturn};

/// `Err(GPU_IS_LOST)` when the faults file lists `index`.
pub fn check(index: usize) -> Result<(), NvmlReturn> {
    let Some(path) = std::env::var_os(simgpu::config::ENV_FAULTS) else {
        return Ok(());
    };
    // A missing or unreadable file lists nothing.
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lost = text
        .split_whitespace()
        .any(|word| word.parse::<usize>() == Ok(index));
    if lost {
        Err(code::GPU_IS_LOST)
    } else {
        Ok(())
    }
}
