//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`.
//! Counted when allocated and given back when the free is queued: the caller no longer
//! holds the memory from then on, and the pool reuses it for the next allocation.

use super::registry::Key;
use super::{counted, forget};
use std::ffi::c_void;

/// # Safety
/// `real` is the driver's `cuMemAllocAsync` (or its `_ptsz` twin); the arguments are the
/// caller's, unchanged.
pub(crate) unsafe fn mem_alloc_async(
    real: unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> u32,
    dptr: *mut u64,
    bytes: usize,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes dptr on success.
    unsafe { counted(dptr, bytes as u64, || real(dptr, bytes, stream)) }
}

/// # Safety
/// `real` is the driver's `cuMemAllocFromPoolAsync` (or its `_ptsz` twin); the arguments
/// are the caller's, unchanged.
pub(crate) unsafe fn mem_alloc_from_pool_async(
    real: unsafe extern "C" fn(*mut u64, usize, *mut c_void, *mut c_void) -> u32,
    dptr: *mut u64,
    bytes: usize,
    pool: *mut c_void,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: as in `mem_alloc_async`.
    unsafe { counted(dptr, bytes as u64, || real(dptr, bytes, pool, stream)) }
}

/// # Safety
/// `real` is the driver's `cuMemFreeAsync` (or its `_ptsz` twin); the arguments are the
/// caller's, unchanged.
pub(crate) unsafe fn mem_free_async(
    real: unsafe extern "C" fn(u64, *mut c_void) -> u32,
    dptr: u64,
    stream: *mut c_void,
) -> u32 {
    if dptr == 0 {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(dptr, stream) };
    }
    // SAFETY: the caller's arguments, passed on.
    forget(Key::Pointer(dptr), || unsafe { real(dptr, stream) })
}
