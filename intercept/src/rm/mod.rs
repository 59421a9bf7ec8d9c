//! The NVIDIA driver's requests to its kernel module, watched: `libcuda` makes and frees the
//! process's channel groups (the units the GPU time-slices between) through `ioctl` on
//! `/dev/nvidiactl`, so the library interposes the C library's `ioctl`, keeps the groups it
//! sees ([`groups`]) and sets their time slice as the container asks ([`lever`]).
//!
//! Every other `ioctl` of the process goes straight on after one byte compare (the request's
//! type is not the RM's `'F'`). An RM request is passed on unchanged, and its answer is
//! read only after the driver accepted it (`ioctl` returned 0: the kernel read and wrote
//! the parameters, so their memory is the caller's and valid). What the library adds, its
//! own controls on the groups, goes to the same driver on the same file.
//!
//! Where a request goes: the next `ioctl` after ours (the C library's), found by the
//! constructor; for RM requests, the driver's own `ioctl` when the driver library defines
//! one — simgpu's does, as the kernel module it stands in for — else the same.

mod groups;
pub(crate) mod lever;

use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use tessera_nvrm::{Request, IOCTL_TYPE};

/// `ioctl`'s C signature, with the variadic argument as the one pointer every RM request
/// passes (on x86-64 and arm64 a variadic pointer is passed as a fixed one).
pub(crate) type Ioctl = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;

/// The next `ioctl` after ours; null until the constructor found it.
static NEXT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// Where RM requests go once the driver is loaded ([`rm_next`]); null until then.
static RM_NEXT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Finds the next `ioctl`; called once, from the constructor, before the application runs.
pub(crate) fn init() {
    // SAFETY: the name is NUL-terminated; RTLD_NEXT searches the objects after ours.
    let p = unsafe { crate::driver::c_dlsym::real_dlsym(libc::RTLD_NEXT, c"ioctl".as_ptr()) };
    if !p.is_null() && !crate::driver::is_ours(p) {
        // Release: pairs with the Acquire in `next`; the address of loaded code, published
        // before any thread could call through it.
        NEXT.store(p, Ordering::Release);
    }
}

/// The system call, for a process where no `ioctl` follows ours (never with a C library).
unsafe extern "C" fn ioctl_syscall(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's request, made as the C library makes it.
    unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int }
}

/// The next `ioctl`.
#[inline]
pub(crate) fn next() -> Ioctl {
    // Acquire: pairs with the Release in `init`.
    let p = NEXT.load(Ordering::Acquire);
    if p.is_null() {
        return ioctl_syscall;
    }
    // SAFETY: `p` is the C library's `ioctl`, whose signature this is.
    unsafe { std::mem::transmute::<*mut c_void, Ioctl>(p) }
}

/// Where RM requests go: the driver library's own `ioctl` if it defines one, else
/// [`next`]. Looked up once the library has opened the driver (an RM request of a process
/// that never loads the CUDA driver, NVML's for one, loads nothing).
pub(crate) fn rm_next() -> Ioctl {
    // Acquire: pairs with the Release below.
    let p = RM_NEXT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: `p` is an `ioctl` found below, whose signature this is.
        return unsafe { std::mem::transmute::<*mut c_void, Ioctl>(p) };
    }
    let Some(driver) = crate::driver::opened(crate::driver::Lib::Cuda) else {
        return next();
    };
    // SAFETY: `driver` is a handle we keep open; the name is NUL-terminated. A handle's
    // lookup searches the driver library, then the libraries it needs (the C library).
    let mut p = unsafe { crate::driver::c_dlsym::real_dlsym(driver.as_ptr(), c"ioctl".as_ptr()) };
    if p.is_null() || crate::driver::is_ours(p) {
        p = next() as *mut c_void;
    }
    // Release: see `init`. Racing threads store the same address.
    RM_NEXT.store(p, Ordering::Release);
    // SAFETY: as above.
    unsafe { std::mem::transmute::<*mut c_void, Ioctl>(p) }
}

/// Our `ioctl`: the C library's, after a look at RM requests.
///
/// # Safety
/// Called from C with `ioctl`'s contract.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { dispatch(fd, request, arg) }
}

/// What our `ioctl` does (apart from the export, for the tests).
///
/// # Safety
/// `ioctl`'s contract.
#[inline(always)]
unsafe fn dispatch(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if Request::type_of(request) != IOCTL_TYPE {
        // SAFETY: the caller's request, passed on unchanged.
        return unsafe { next()(fd, request, arg) };
    }
    // SAFETY: as above.
    unsafe { rm_ioctl(fd, request, arg) }
}

/// An RM request: passed on, then, if the driver accepted it, read.
///
/// # Safety
/// `ioctl`'s contract.
unsafe fn rm_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's request, passed on unchanged.
    let rc = unsafe { rm_next()(fd, request, arg) };
    if rc == 0 {
        let errno = errno();
        let look = std::panic::AssertUnwindSafe(|| {
            // SAFETY: the driver accepted the request, so `arg` points to its parameters.
            match unsafe { groups::after(fd, request, arg) } {
                Some(groups::Seen::Made(group)) => lever::group_made(group),
                Some(groups::Seen::DriverSet(group, us)) => lever::driver_set(group, us),
                None => {}
            }
        });
        let _ = std::panic::catch_unwind(look);
        // What the library did after the call leaves the caller's errno as it was.
        set_errno(errno);
    }
    rc
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// In a forked child: the parent's channel groups are not the child's to change.
pub(crate) fn after_fork_in_child() {
    groups::forget_all();
}

#[cfg(test)]
mod tests;
