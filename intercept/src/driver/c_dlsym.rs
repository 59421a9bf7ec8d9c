//! The C library's own `dlsym`, through which every real function is looked up: found by
//! symbol version, so that it is never our exported `dlsym` (which routes hooked names to our
//! wrappers), and kept in a pointer-sized static that the exported `dlsym` jumps through.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The C library's `dlsym`, found once (by the constructor, or by the first routing if
/// another library's constructor calls `dlsym` before ours ran).
///
/// Its address is read by the jump in the exported `dlsym`, so it must stay a plain
/// pointer-sized static (an `AtomicPtr` has the layout of a pointer).
pub(crate) static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The symbol versions the C library has given `dlsym`, newest first: glibc 2.34 moved it
/// into libc; before, it lived in libdl under the architecture's first glibc version.
#[cfg(target_arch = "aarch64")]
const VERSIONS: [&std::ffi::CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];
#[cfg(not(target_arch = "aarch64"))]
const VERSIONS: [&std::ffi::CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];

/// Stands in for a C library whose `dlsym` we could not find: nothing resolves.
extern "C" fn no_dlsym(_handle: *mut c_void, _symbol: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// The C library's `dlsym`, looked up on first use.
pub(crate) fn real() -> Dlsym {
    // Acquire pairs with the Release store below. The value is the address of code the
    // loader mapped before any of our code ran, so no other data depends on it; the pair
    // only keeps the reasoning simple.
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        p = find_real();
        // Release: see above. Racing threads find the same address.
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: `p` is either the C library's dlsym, found by name and version, or `no_dlsym`;
    // both have dlsym's C signature.
    unsafe { std::mem::transmute::<*mut c_void, Dlsym>(p) }
}

fn find_real() -> *mut c_void {
    for version in VERSIONS {
        // SAFETY: names and version are NUL-terminated; dlvsym is not one we export, so
        // RTLD_NEXT searches the objects after libtessera, where the C library is.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            return p;
        }
    }
    no_dlsym as *mut c_void
}

/// Looks `symbol` up with the C library's `dlsym`, never our routing: how the real driver
/// functions are found.
///
/// # Safety
/// `handle` is a handle from `dlopen` (or a pseudo-handle) and `symbol` a NUL-terminated
/// string.
pub(crate) unsafe fn real_dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract is dlsym's.
    unsafe { real()(handle, symbol) }
}

/// Resolves the real `dlsym` before the app runs.
pub(crate) fn init() {
    let _ = real();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_dlsym_is_the_c_librarys() {
        let p = real() as *const c_void;
        assert_ne!(p, no_dlsym as *const c_void);
        // SAFETY: RTLD_DEFAULT and a NUL-terminated name.
        let getpid = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!getpid.is_null());
    }
}
