//! What an export of the hook table is, as the routing sees it: one [`Hook`] per hooked
//! entry, and the checks and codes the exports are built with.

use super::real::RealSlot;
use crate::driver::Lib;
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;

/// What `cuGetProcAddress` knows an entry by: the ABI crate's key of its symbol.
pub(crate) use tessera_cuda_abi::ProcKey;

/// The address of one of our exported functions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wrapper(*const c_void);

// SAFETY: the address of code in this library, never written through nor read as data.
unsafe impl Sync for Wrapper {}

impl Wrapper {
    pub(crate) const fn new(p: *const c_void) -> Wrapper {
        Wrapper(p)
    }

    pub(crate) fn as_ptr(self) -> *mut c_void {
        self.0.cast_mut()
    }
}

/// One hooked entry point.
#[derive(Debug)]
pub(crate) struct Hook {
    /// The exported symbol.
    pub(crate) name: &'static str,
    pub(crate) lib: Lib,
    /// `None` for NVML, which has no versioned lookup.
    pub(crate) proc_key: Option<ProcKey>,
    /// Our exported function.
    pub(crate) wrapper: Wrapper,
    #[cfg_attr(not(test), allow(dead_code))] // read by the coverage test
    pub(crate) real: &'static RealSlot,
    pub(crate) calls: &'static AtomicU64,
}

/// Whether names are strictly increasing, for the compile-time check on the table.
pub(crate) const fn strictly_sorted(names: &[&str]) -> bool {
    let mut i = 1;
    while i < names.len() {
        let (a, b) = (names[i - 1].as_bytes(), names[i].as_bytes());
        let mut j = 0;
        loop {
            if j == a.len() {
                if j == b.len() {
                    return false; // equal: a name declared twice
                }
                break;
            }
            if j == b.len() || a[j] > b[j] {
                return false;
            }
            if a[j] < b[j] {
                break;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// The result code a library returns for a missing function and for a panic.
pub(crate) const fn failure_codes(lib: Lib) -> (u32, u32) {
    match lib {
        Lib::Cuda => (
            tessera_cuda_abi::CUDA_ERROR_NOT_FOUND,
            tessera_cuda_abi::CUDA_ERROR_UNKNOWN,
        ),
        // NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_UNKNOWN
        Lib::Nvml => (13, 999),
    }
}
