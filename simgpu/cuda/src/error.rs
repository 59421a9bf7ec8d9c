//! `cuGetErrorName` and `cuGetErrorString`: every result code of the 12.8 driver, with its
//! name and a one-line description, as the ABI crate declares them.

use crate::ffi::{code, CUresult};
use std::ffi::{c_char, CStr};
use tessera_cuda_abi::result::{lookup, ResultCode};

/// Writes the string `pick` chooses for `error` to `out`; an unknown code gets NULL and
/// `CUDA_ERROR_INVALID_VALUE`, as the driver does.
///
/// # Safety
/// `out` must be null or valid for a write of a pointer.
unsafe fn describe(
    error: CUresult,
    out: *mut *const c_char,
    pick: fn(&ResultCode) -> &'static CStr,
) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let found = lookup(error);
    let text = found.map_or(std::ptr::null(), |r| pick(r).as_ptr());
    // SAFETY: non-null, and the caller promises it is valid for a write of a pointer.
    unsafe { out.write(text) };
    found.map(|_| ()).ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

cuda_entry! {
    fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) {
        // SAFETY: the driver API's contract: p_str is null or points to a `const char *`.
        unsafe { describe(error, p_str, |r| r.name) }
    }

    fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) {
        // SAFETY: as for cuGetErrorName.
        unsafe { describe(error, p_str, |r| r.text) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_write_the_strings() {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: p is a valid out-pointer.
        assert_eq!(unsafe { cuGetErrorString(2, &mut p) }, code::CUDA_SUCCESS);
        // SAFETY: the driver wrote a pointer to a static NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"out of memory");
        // SAFETY: as above.
        assert_eq!(unsafe { cuGetErrorName(201, &mut p) }, code::CUDA_SUCCESS);
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"CUDA_ERROR_INVALID_CONTEXT");
    }

    #[test]
    fn unknown_code_is_invalid_value_with_null() {
        let mut p: *const c_char = c"sentinel".as_ptr();
        // SAFETY: p is a valid out-pointer.
        let rc = unsafe { cuGetErrorName(12345, &mut p) };
        assert_eq!(rc, code::CUDA_ERROR_INVALID_VALUE);
        assert!(p.is_null());
        let mut p: *const c_char = c"sentinel".as_ptr();
        // SAFETY: as above.
        let rc = unsafe { cuGetErrorString(717_000, &mut p) };
        assert_eq!(rc, code::CUDA_ERROR_INVALID_VALUE);
        assert!(p.is_null());
        // SAFETY: a null out-pointer is allowed by the contract and refused.
        let rc = unsafe { cuGetErrorString(0, std::ptr::null_mut()) };
        assert_eq!(rc, code::CUDA_ERROR_INVALID_VALUE);
    }
}
