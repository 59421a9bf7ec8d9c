//! `dlsym`, exported by libtessera so that an app which `dlopen`s the driver and looks its
//! functions up still reaches our wrappers.
//!
//! A hooked name (one in the hook table) asked of the real driver's handle, of NVML's for
//! NVML names, or of `RTLD_DEFAULT`, gets our wrapper. Everything else — other names, other
//! handles, `RTLD_NEXT` — goes to the C library's `dlsym` by a tail jump: the real `dlsym`
//! then sees the original caller's return address, which is what `RTLD_NEXT` resolves from,
//! so another preloaded library that uses `dlsym(RTLD_NEXT, …)` keeps working.
//!
//! The routing allocates nothing, takes no lock of ours and cannot panic.

use crate::hooks;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The C library's `dlsym`, found once (by the constructor, or by the first routing if
/// another library's constructor calls `dlsym` before ours ran).
///
/// Its address is read by the jump in the exported `dlsym`, so it must stay a plain
/// pointer-sized static (an `AtomicPtr` has the layout of a pointer).
static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

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

/// Our wrapper for `symbol` asked of `handle`, or null to let the real `dlsym` answer.
///
/// Called from the exported `dlsym` with its two arguments; returns only after making sure
/// `REAL_DLSYM` is set, as the caller jumps through it on null.
extern "C" fn route(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let _ = real();
    if handle == libc::RTLD_NEXT || symbol.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a non-null `symbol` passed to dlsym is a NUL-terminated string.
    let Some(hook) = (unsafe { hooks::find(symbol) }) else {
        return std::ptr::null_mut();
    };
    if handle == libc::RTLD_DEFAULT || crate::driver::is_handle_of(hook.lib, handle) {
        return hook.wrapper.as_ptr();
    }
    std::ptr::null_mut()
}

/// The exported `dlsym`: asks [`route`], returns its wrapper if there is one, else jumps to
/// the C library's `dlsym` with the caller's registers and return address untouched.
///
/// # Safety
/// dlsym's contract: `handle` a handle from `dlopen` or a pseudo-handle, `symbol` a
/// NUL-terminated string.
#[cfg(all(not(test), target_arch = "x86_64"))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // On entry rsp is 8 below a 16-byte boundary (the return address); two pushes and 8
    // more bytes make it aligned for the call, as the ABI requires.
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {route}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        route = sym route,
        real = sym REAL_DLSYM,
    )
}

/// The exported `dlsym` for aarch64; see the x86_64 one. x0/x1 are kept in the frame across
/// the call; the frame is popped before the jump so that the real `dlsym` sees the caller's
/// link register.
///
/// # Safety
/// As for x86_64.
#[cfg(all(not(test), target_arch = "aarch64"))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {route}",
        "cbz x0, 2f",
        "ldp x29, x30, [sp], #32",
        "ret",
        "2:",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        route = sym route,
        real = sym REAL_DLSYM,
    )
}

// On other architectures `dlsym` is not exported: apps that link the driver or use
// cuGetProcAddress are still intercepted, `dlopen` + `dlsym` apps are not.

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

    #[test]
    fn routes_hooked_names_of_the_default_scope_only() {
        let hook = hooks::HOOKS.first().unwrap();
        let mut name = hook.name.as_bytes().to_vec();
        name.push(0);
        let name = name.as_ptr().cast::<c_char>();
        assert_eq!(route(libc::RTLD_DEFAULT, name), hook.wrapper.as_ptr());
        assert!(route(libc::RTLD_NEXT, name).is_null());
        assert!(route(libc::RTLD_DEFAULT, c"getpid".as_ptr()).is_null());
        assert!(route(libc::RTLD_DEFAULT, std::ptr::null()).is_null());
    }
}
