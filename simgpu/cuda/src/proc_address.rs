//! `cuGetProcAddress`: resolving a driver function by base name, the CUDA version the
//! caller was built for, and whether it wants the per-thread default stream.
//!
//! The revisions of each base name, their versions and per-thread variants, and how a request
//! resolves among them are the ABI crate's (`tessera_cuda_abi::proc_address`). The symbol it
//! names is looked up in this library itself, never in the global scope, so that a library
//! preloaded in front of the driver is never returned as the driver's own function; a
//! revision this library does not implement (the 32-bit `cuMemAlloc` of CUDA 2.0, say) is not
//! found.

use crate::ffi::{code, CUresult};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;
use tessera_cuda_abi::proc_address::{self, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
use tessera_cuda_abi::QueryResult;

/// This library's own handle, for looking its symbols up.
fn own_library() -> usize {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        // SAFETY: Dl_info is plain data; dladdr fills it for an address in a loaded object.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let here = own_library as *const c_void;
        // SAFETY: `here` is an address in this library; `info` is valid for writes.
        let found = unsafe { libc::dladdr(here, &mut info) } != 0 && !info.dli_fname.is_null();
        if !found {
            return 0;
        }
        // SAFETY: dli_fname names this loaded library; RTLD_NOLOAD only takes a reference
        // to it (never loads anything), which we keep for the life of the process.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) as usize }
    })
}

/// The address of one of this library's exported symbols.
fn own_symbol(symbol: &str) -> Option<*mut c_void> {
    let handle = own_library();
    if handle == 0 {
        return None;
    }
    let name = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: handle is a live library handle and name a NUL-terminated string.
    let p = unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// When set to a file name, every request is appended to that file as a line
/// `<version> <flags> <name> <symbol>` (`-` for a request that does not resolve): the record
/// of what a program, like NVIDIA's runtime, asks the driver for.
const ENV_TRACE: &str = "SIMGPU_TRACE_PROC_ADDRESS";

fn trace(name: &str, version: c_int, flags: u64, symbol: Option<&str>) {
    static FILE: OnceLock<Option<std::ffi::OsString>> = OnceLock::new();
    let Some(path) = FILE.get_or_init(|| std::env::var_os(ENV_TRACE)) else {
        return;
    };
    let line = format!("{version} {flags} {name} {}\n", symbol.unwrap_or("-"));
    // One write of one short line to a file opened for appending: lines of concurrent
    // callers do not interleave.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

/// Both revisions of `cuGetProcAddress`.
///
/// # Safety
/// `symbol` must be null or a NUL-terminated string; `pfn` null or valid for a write of a
/// pointer; `status` null or valid for a write of an int.
unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut QueryResult,
) -> Result<(), CUresult> {
    if symbol.is_null() || pfn.is_null() || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: pfn is non-null and valid for a write, by the contract.
    unsafe { pfn.write(std::ptr::null_mut()) };
    // SAFETY: symbol is non-null and NUL-terminated, by the contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let version = u32::try_from(cuda_version).unwrap_or(0);
    let per_thread = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    let found = proc_address::resolve(name.as_bytes(), version, per_thread).and_then(|e| {
        own_symbol(e.symbol)
            .map(|p| (e.symbol, p))
            .ok_or(QueryResult::SymbolNotFound)
    });
    trace(
        name,
        cuda_version,
        flags,
        found.as_ref().ok().map(|(s, _)| *s),
    );
    let (result, outcome) = match found {
        Ok((_, p)) => {
            // SAFETY: as above.
            unsafe { pfn.write(p) };
            (QueryResult::Success, Ok(()))
        }
        Err(why) => (why, Err(code::CUDA_ERROR_NOT_FOUND)),
    };
    if !status.is_null() {
        // SAFETY: non-null, and valid for a write of an int by the contract.
        unsafe { status.write(result) };
    }
    outcome
}

cuda_entry! {
    fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) {
        // SAFETY: the arguments carry the driver API's contract for this entry point.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
    }

    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        cuda_version: c_int,
        flags: u64,
        symbol_status: *mut c_int,
    ) {
        // SAFETY: as above; CUdriverProcAddressQueryResult is an int-sized enum.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, symbol_status.cast()) }
    }

    fn cuProfilerInitialize(_config: *const c_char, _output: *const c_char, _mode: c_int) {
        Ok(())
    }

    fn cuProfilerStart() {
        Ok(())
    }

    fn cuProfilerStop() {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_point_reports_not_found_with_null() {
        let mut p: *mut c_void = std::ptr::dangling_mut();
        let mut status = QueryResult::Success;
        // SAFETY: all pointers are valid locals; the name is NUL-terminated.
        let rc =
            unsafe { get_proc_address(c"cuNoSuchThing".as_ptr(), &mut p, 12080, 0, &mut status) };
        assert_eq!(rc, Err(code::CUDA_ERROR_NOT_FOUND));
        assert!(p.is_null());
        assert_eq!(status, QueryResult::SymbolNotFound);
        // SAFETY: as above.
        let rc =
            unsafe { get_proc_address(c"cuMemAllocAsync".as_ptr(), &mut p, 11000, 0, &mut status) };
        assert_eq!(rc, Err(code::CUDA_ERROR_NOT_FOUND));
        assert_eq!(status, QueryResult::VersionNotSufficient);
        // SAFETY: as above.
        let rc = unsafe { get_proc_address(c"cuInit".as_ptr(), &mut p, 12080, 7, &mut status) };
        assert_eq!(rc, Err(code::CUDA_ERROR_INVALID_VALUE));
    }
}
