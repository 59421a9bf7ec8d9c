//! Init, shutdown, error strings and the versions NVML reports for the whole system.

use crate::ffi::{code, write_out, write_str, NvmlReturn};
use crate::session;
use std::ffi::{c_char, c_uint, CStr};

pub use simgpu::{CUDA_DRIVER_VERSION, DRIVER_RELEASE as DRIVER_VERSION};
/// NVML's own version: the CUDA major version, then the driver version.
pub const NVML_VERSION: &str = "13.580.65.06";

nvml_entry! {
    fn nvmlInit() {
        session::init()
    }
    fn nvmlInit_v2() {
        session::init()
    }
    /// The flags (skip GPUs, do not attach) change nothing here: opening the node is cheap and
    /// touches no device.
    fn nvmlInitWithFlags(_flags: c_uint) {
        session::init()
    }
    fn nvmlShutdown() {
        session::shutdown()
    }
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        session::session()?;
        // SAFETY: NVML's contract: `version` is null or holds `length` writable bytes.
        unsafe { write_str(version, length, DRIVER_VERSION) }
    }
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        session::session()?;
        // SAFETY: as for the driver version.
        unsafe { write_str(version, length, NVML_VERSION) }
    }
    fn nvmlSystemGetCudaDriverVersion(version: *mut i32) {
        session::session()?;
        // SAFETY: NVML's contract: `version` is null or writable.
        unsafe { write_out(version, CUDA_DRIVER_VERSION) }
    }
    fn nvmlSystemGetCudaDriverVersion_v2(version: *mut i32) {
        session::session()?;
        // SAFETY: as above.
        unsafe { write_out(version, CUDA_DRIVER_VERSION) }
    }
}

/// A short description of a result code; it never fails and needs no init.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    std::panic::catch_unwind(|| error_string(result))
        .unwrap_or(c"Unknown Error")
        .as_ptr()
}

/// The text of a result code.
pub fn error_string(result: NvmlReturn) -> &'static CStr {
    match result {
        code::SUCCESS => c"Success",
        code::UNINITIALIZED => c"Uninitialized",
        code::INVALID_ARGUMENT => c"Invalid Argument",
        code::NOT_SUPPORTED => c"Not Supported",
        code::NO_PERMISSION => c"Insufficient Permissions",
        code::ALREADY_INITIALIZED => c"Already Initialized",
        code::NOT_FOUND => c"Not Found",
        code::INSUFFICIENT_SIZE => c"Insufficient Size",
        code::INSUFFICIENT_POWER => c"Insufficient External Power",
        code::DRIVER_NOT_LOADED => c"Driver Not Loaded",
        code::TIMEOUT => c"Timeout",
        code::IRQ_ISSUE => c"Interrupt Request Issue",
        code::LIBRARY_NOT_FOUND => c"NVML Shared Library Not Found",
        code::FUNCTION_NOT_FOUND => c"Function Not Found",
        code::CORRUPTED_INFOROM => c"Corrupted infoROM",
        code::GPU_IS_LOST => c"GPU is lost",
        code::RESET_REQUIRED => c"GPU requires restart",
        code::OPERATING_SYSTEM => c"The operating system has blocked the request",
        code::LIB_RM_VERSION_MISMATCH => c"RM has detected an NVML/RM version mismatch",
        code::IN_USE => c"In use by another client",
        code::MEMORY => c"Insufficient Memory",
        code::NO_DATA => c"No data",
        code::VGPU_ECC_NOT_SUPPORTED => c"ECC is not supported for this vGPU",
        code::INSUFFICIENT_RESOURCES => c"Insufficient resources",
        code::FREQ_NOT_SUPPORTED => c"Frequency not supported",
        code::ARGUMENT_VERSION_MISMATCH => c"Struct version mismatch",
        code::DEPRECATED => c"Deprecated",
        code::NOT_READY => c"Not ready",
        code::GPU_NOT_FOUND => c"GPU not found",
        code::INVALID_STATE => c"Invalid state",
        _ => c"Unknown Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_string() {
        for c in (0..=29).chain([999]) {
            assert!(!error_string(c).to_bytes().is_empty());
        }
        assert_eq!(error_string(12345), c"Unknown Error");
        assert_eq!(error_string(code::UNINITIALIZED), c"Uninitialized");
    }

    #[test]
    fn versions_agree() {
        assert!(NVML_VERSION.ends_with(DRIVER_VERSION));
        assert!(NVML_VERSION.starts_with(&format!("{}.", CUDA_DRIVER_VERSION / 1000)));
    }
}
