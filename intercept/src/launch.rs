//! Kernel launches: the hot path. For now each handler only forwards; the launch gate of
//! compute sharing goes here. Nothing else may be added without measuring it.

use std::ffi::c_void;

/// `cuLaunchKernel` and its `_ptsz` twin.
pub(crate) type LaunchKernel = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> u32;

/// `cuLaunchCooperativeKernel` and its `_ptsz` twin.
pub(crate) type LaunchCooperativeKernel = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
) -> u32;

/// `cuLaunchKernelEx` and its `_ptsz` twin.
pub(crate) type LaunchKernelEx =
    unsafe extern "C" fn(*const c_void, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> u32;

/// # Safety
/// `real` is the driver's `cuLaunchKernel` or `cuLaunchKernel_ptsz`; the arguments are the
/// caller's.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub(crate) unsafe fn launch_kernel(
    real: LaunchKernel,
    f: *mut c_void,
    grid_x: u32,
    grid_y: u32,
    grid_z: u32,
    block_x: u32,
    block_y: u32,
    block_z: u32,
    shared_bytes: u32,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on to the function they were meant for.
    unsafe {
        real(
            f,
            grid_x,
            grid_y,
            grid_z,
            block_x,
            block_y,
            block_z,
            shared_bytes,
            stream,
            params,
            extra,
        )
    }
}

/// # Safety
/// `real` is the driver's `cuLaunchCooperativeKernel` or its `_ptsz` twin; the arguments
/// are the caller's.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub(crate) unsafe fn launch_cooperative_kernel(
    real: LaunchCooperativeKernel,
    f: *mut c_void,
    grid_x: u32,
    grid_y: u32,
    grid_z: u32,
    block_x: u32,
    block_y: u32,
    block_z: u32,
    shared_bytes: u32,
    stream: *mut c_void,
    params: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on to the function they were meant for.
    unsafe {
        real(
            f,
            grid_x,
            grid_y,
            grid_z,
            block_x,
            block_y,
            block_z,
            shared_bytes,
            stream,
            params,
        )
    }
}

/// # Safety
/// `real` is the driver's `cuLaunchKernelEx` or `cuLaunchKernelEx_ptsz`; the arguments are
/// the caller's.
#[inline(always)]
pub(crate) unsafe fn launch_kernel_ex(
    real: LaunchKernelEx,
    config: *const c_void,
    f: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on to the function they were meant for.
    unsafe { real(config, f, params, extra) }
}
