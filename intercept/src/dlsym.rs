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

use crate::driver::{self, c_dlsym};
use crate::hooks;
use std::ffi::{c_char, c_void};

/// Our wrapper for `symbol` asked of `handle`, or null to let the real `dlsym` answer.
///
/// Called from the exported `dlsym` with its two arguments; returns only after making sure
/// `c_dlsym::REAL_DLSYM` is set, as the caller jumps through it on null.
extern "C" fn route(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let _ = c_dlsym::real();
    if handle == libc::RTLD_NEXT || symbol.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a non-null `symbol` passed to dlsym is a NUL-terminated string.
    let Some(hook) = (unsafe { hooks::find(symbol) }) else {
        return std::ptr::null_mut();
    };
    if handle == libc::RTLD_DEFAULT || driver::is_handle_of(hook.lib, handle) {
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
        real = sym c_dlsym::REAL_DLSYM,
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
        real = sym c_dlsym::REAL_DLSYM,
    )
}

// On other architectures `dlsym` is not exported: apps that link the driver or use
// cuGetProcAddress are still intercepted, `dlopen` + `dlsym` apps are not.

#[cfg(test)]
mod tests {
    use super::*;

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
