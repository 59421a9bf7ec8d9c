//! The `ioctl` this library exports: requests on the driver's RM file go to the RM
//! ([`crate::model::rm`]), every other one to the kernel.

use crate::model::rm;
use std::ffi::{c_int, c_ulong, c_void};

/// The process's `ioctl`, with this driver's RM behind its RM file.
///
/// # Safety
/// Called from C with `ioctl`'s contract.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's request, with `ioctl`'s contract, which `serve` has too.
    unsafe { rm::serve(fd, request, arg) }
}
