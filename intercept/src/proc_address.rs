//! `cuGetProcAddress` (CUDA 11.3) and `cuGetProcAddress_v2` (12.0): how every CUDA runtime
//! since 11.3 finds the driver's functions, so they must answer with our wrappers.
//!
//! The real lookup runs first; a failure, and the status it reports, pass through unchanged.
//! On success, when the request names a base name we hook, the driver's answer is replaced
//! by our wrapper of the same revision: chosen, like the driver chooses, by the caller's CUDA
//! version and the per-thread-default-stream flag (see [`hooks::for_proc_address`]). A
//! request for `cuGetProcAddress` itself gets our own revision of it, so lookups made
//! through the returned function are ours too.

use crate::hooks;
use crate::hooks::real;
use std::ffi::{c_char, c_int, c_void, CStr};
use tessera_cuda_abi::proc_address::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
use tessera_cuda_abi::{QueryResult, CUDA_SUCCESS};

/// # Safety
/// `real` is the driver's `cuGetProcAddress`; the arguments are the caller's.
pub(crate) unsafe fn get_proc_address(
    real: real::cuGetProcAddress::Real,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(symbol, pfn, cuda_version, flags) };
    if rc == CUDA_SUCCESS {
        // SAFETY: the driver accepted the arguments: `symbol` is a string, `pfn` writable.
        unsafe { substitute(symbol, pfn, cuda_version, flags) };
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuGetProcAddress_v2`; the arguments are the caller's.
pub(crate) unsafe fn get_proc_address_v2(
    real: real::cuGetProcAddress_v2::Real,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) };
    let found = rc == CUDA_SUCCESS
        && (symbol_status.is_null()
            // SAFETY: non-null, and the driver just wrote it.
            || unsafe { *symbol_status } == QueryResult::Success as c_int);
    if found {
        // SAFETY: as in `get_proc_address`.
        unsafe { substitute(symbol, pfn, cuda_version, flags) };
    }
    rc
}

/// Replaces the driver's answer in `*pfn` with our wrapper, where we hook that revision.
///
/// # Safety
/// `symbol` is null or a NUL-terminated string; `pfn` is null or valid for reads and writes.
unsafe fn substitute(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) {
    // SAFETY: null or valid for reads, by the contract.
    if symbol.is_null() || pfn.is_null() || unsafe { *pfn }.is_null() {
        return;
    }
    let Ok(version) = u32::try_from(cuda_version) else {
        return;
    };
    // SAFETY: non-null and NUL-terminated, by the contract.
    let base = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    if let Some(hook) = hooks::for_proc_address(&hooks::HOOKS, base, version, per_thread) {
        // SAFETY: valid for writes, by the contract.
        unsafe { *pfn = hook.wrapper.as_ptr() };
    }
}
