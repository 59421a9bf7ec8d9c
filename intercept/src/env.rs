//! The environment contract: every `TESSERA_*` variable the library reads, named once.

use std::ffi::CStr;

/// The container's region file, shared by all of its processes (set by `controld`).
pub(crate) const REGION: &str = "TESSERA_REGION";

/// `env` lets a process whose region file cannot be used (unreadable, foreign, of another
/// layout version, spoiled) run under the memory caps of its environment; unset, such a
/// process gets a cap of 0 bytes on every device, so that a cap that was meant never turns
/// into none.
pub(crate) const REGION_FALLBACK: &str = "TESSERA_REGION_FALLBACK";

/// The memory cap of every device, like `4GiB`, when no region says otherwise; followed by
/// `_<index>` (`TESSERA_MEMORY_LIMIT_0`), one device's cap, which overrides it.
pub(crate) const MEMORY_LIMIT: &str = "TESSERA_MEMORY_LIMIT";

/// A standalone compute share, like `fixed:30`: enforced by the container's processes
/// among themselves on every device `controld` does not manage.
pub(crate) const COMPUTE: &str = "TESSERA_COMPUTE";

/// The real driver to load instead of `libcuda.so.1`: a file name or a path.
pub(crate) const REAL_LIBCUDA: &str = "TESSERA_REAL_LIBCUDA";

/// How much the library says on stderr: `off`, `error` (the default), `warn`, `info`, `debug`.
pub(crate) const LOG: &str = "TESSERA_LOG";

/// `1` turns on the per-hook call counters read through `tessera_debug_counter`.
pub(crate) const DEBUG_COUNTERS: &str = "TESSERA_DEBUG_COUNTERS";

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
