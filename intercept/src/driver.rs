//! The real libraries: the CUDA driver (`libcuda.so.1`, or `TESSERA_REAL_LIBCUDA`) and NVML
//! (`libnvidia-ml.so.1`), and their symbols, looked up with the C library's own `dlsym` so
//! that none of our wrappers is ever taken for a real function.

pub(crate) mod c_dlsym;

use std::ffi::{c_char, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A real library the hooks forward to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lib {
    /// The CUDA driver API.
    Cuda,
    /// The management library.
    Nvml,
}

/// A handle slot that tried and failed to open its library; never a valid handle (handles
/// are addresses of loader records).
const FAILED: usize = 1;

/// The handles we opened, by [`Lib`]: null until first needed, then a handle or [`FAILED`].
static HANDLES: [AtomicPtr<c_void>; 2] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

impl Lib {
    fn slot(self) -> &'static AtomicPtr<c_void> {
        match self {
            Lib::Cuda => &HANDLES[0],
            Lib::Nvml => &HANDLES[1],
        }
    }

    /// The file the loader is asked for. Read with `getenv` (no allocation), as this runs
    /// on the `dlsym` path too.
    fn file_name(self) -> &'static CStr {
        match self {
            Lib::Cuda => match crate::env::var_raw(crate::env::REAL_LIBCUDA) {
                Some(name) if !name.is_empty() => name,
                _ => c"libcuda.so.1",
            },
            Lib::Nvml => c"libnvidia-ml.so.1",
        }
    }
}

/// Our own handle on `lib`, opening it on first use; `None` if it cannot be loaded (said
/// once, as an error when `TESSERA_REAL_LIBCUDA` names it, else at debug level).
pub(crate) fn handle(lib: Lib) -> Option<NonNull<c_void>> {
    let slot = lib.slot();
    // Acquire pairs with the Release stores below: nothing is read through the handle, but
    // the loader's own records for it are complete before any thread sees the value.
    let h = slot.load(Ordering::Acquire);
    if h as usize == FAILED {
        return None;
    }
    if let Some(h) = NonNull::new(h) {
        return Some(h);
    }
    let name = lib.file_name();
    // RTLD_NOW: a driver that cannot be bound fails here, not with a lazy-binding abort in
    // the middle of a call. RTLD_LOCAL: the app's global namespace stays as it built it.
    // The handle is kept for the life of the process.
    // SAFETY: `name` is NUL-terminated; dlopen has no other precondition.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        let why = dl_error();
        if lib == Lib::Cuda && std::env::var_os(crate::env::REAL_LIBCUDA).is_some() {
            crate::tlog!(
                error,
                "cannot load {}={name:?}: {why}",
                crate::env::REAL_LIBCUDA
            );
        } else {
            crate::tlog!(debug, "cannot load {name:?}: {why}");
        }
        // Release: see the Acquire above. Racing threads store the same outcome.
        slot.store(FAILED as *mut c_void, Ordering::Release);
        return None;
    }
    // Release: see the Acquire above. Two racing threads get the same handle from the
    // loader, so either store is right; the extra reference is never dropped.
    slot.store(h, Ordering::Release);
    NonNull::new(h)
}

/// Our handle on `lib` if we have opened it already; never opens it.
pub(crate) fn opened(lib: Lib) -> Option<NonNull<c_void>> {
    // Acquire: as in `handle`.
    let h = lib.slot().load(Ordering::Acquire);
    if h as usize == FAILED {
        return None;
    }
    NonNull::new(h)
}

/// Whether `handle` is the app's handle on `lib`. Never loads anything: when we have not
/// opened `lib` yet, only an already-loaded library is asked for (`RTLD_NOLOAD`), as the
/// app cannot hold a handle on a library that is not loaded. Runs on the `dlsym` path.
pub(crate) fn is_handle_of(lib: Lib, handle: *mut c_void) -> bool {
    let slot = lib.slot();
    // Acquire: as in `handle`.
    let h = slot.load(Ordering::Acquire);
    if !h.is_null() {
        return h == handle;
    }
    // SAFETY: the name is NUL-terminated; RTLD_NOLOAD never loads, it only takes a reference
    // to a loaded library, which we keep.
    let h = unsafe { libc::dlopen(lib.file_name().as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return false;
    }
    // A loaded library is a valid handle for `handle()` too. Release: as in `handle`; a
    // racing store holds the same value (or FAILED, which only stops later lookups).
    let _ = slot.compare_exchange(
        std::ptr::null_mut(),
        h,
        Ordering::Release,
        Ordering::Relaxed,
    );
    h == handle
}

/// The real `name` in `lib`, or `None` when the library or the symbol is missing — or when
/// the address found is one of ours (a `TESSERA_REAL_LIBCUDA` pointing back at us), which
/// would call itself forever.
pub(crate) fn resolve(lib: Lib, name: &CStr) -> Option<NonNull<c_void>> {
    let h = handle(lib)?;
    // SAFETY: `h` is a live handle we keep open; `name` is NUL-terminated.
    let p = NonNull::new(unsafe { c_dlsym::real_dlsym(h.as_ptr(), name.as_ptr()) })?;
    if is_ours(p.as_ptr()) {
        crate::tlog!(
            error,
            "the real driver's {name:?} is inside libtessera itself; check {}",
            crate::env::REAL_LIBCUDA
        );
        return None;
    }
    Some(p)
}

/// Whether `p` lies inside this library.
pub(crate) fn is_ours(p: *const c_void) -> bool {
    let here = object_base(is_ours as *const c_void);
    here.is_some() && object_base(p) == here
}

/// The load address of the object containing `p`.
fn object_base(p: *const c_void) -> Option<usize> {
    // SAFETY: Dl_info is plain data, valid when zeroed.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for the address and writes `info`.
    let found = unsafe { libc::dladdr(p, &mut info) } != 0;
    (found && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

/// The loader's last error message.
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message owned by the loader.
    let p: *const c_char = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated, valid until the next dl* call on this thread.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Points `lib` at a library file for the tests, as if it were the real one.
#[cfg(test)]
pub(crate) fn open_for_tests(lib: Lib, path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the handle is kept for the life of the test process.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "cannot load {path:?}: {}", dl_error());
    lib.slot().store(h, Ordering::Release);
}
