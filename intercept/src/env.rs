//! The environment: the names come from the region crate's contract
//! ([`tessera_region::env`]), declared once for every part; the readers here are the
//! library's own, one of them allocation-free for the `dlsym` path and constructors.

use std::ffi::CStr;

pub(crate) use tessera_region::env::{
    COMPUTE, DEBUG_COUNTERS, LOG, MEMORY_LIMIT, MEMORY_LIMIT_DEVICE, REAL_LIBCUDA, REGION,
    REGION_FALLBACK, REGION_FALLBACK_ENV, TIMESLICE,
};

/// A variable's value, if it is set and is UTF-8.
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A variable's value as the C library holds it, read without allocating or locking: for the
/// `dlsym` path and for constructors. Use it at once: `setenv` may replace it.
pub(crate) fn var_raw(name: &str) -> Option<&'static CStr> {
    let mut buf = [0u8; 64];
    let bytes = name.as_bytes();
    if bytes.len() >= buf.len() || bytes.contains(&0) {
        return None;
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `buf` holds the name and a NUL; getenv only reads it.
    let p = unsafe { libc::getenv(buf.as_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string in the environment block,
    // which stays until the environment is changed; callers use it right away.
    Some(unsafe { CStr::from_ptr(p) })
}
