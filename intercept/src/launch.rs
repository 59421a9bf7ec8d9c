//! Kernel launches: the hot path. Each handler asks the launch gate ([`crate::compute`])
//! first — two loads when the container is limited nowhere — then launches, then tells the
//! gate how the launch went. Nothing else may be added without measuring it.

use crate::compute;
use crate::hooks::real;
use std::ffi::c_void;
use tessera_cuda_abi::CUlaunchConfig;

/// Runs `launch` of `work` (the kernel's function, or the executable graph) through the gate
/// for `stream`.
#[inline(always)]
fn gated(
    stream: *mut c_void,
    per_thread: bool,
    work: *mut c_void,
    launch: impl FnOnce() -> u32,
) -> u32 {
    let ticket = compute::admit(stream, per_thread, work);
    let rc = launch();
    if let Some(t) = ticket {
        compute::launched(t, rc);
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuLaunchKernel` (`PER_THREAD`: `cuLaunchKernel_ptsz`); the
/// arguments are the caller's.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub(crate) unsafe fn launch_kernel<const PER_THREAD: bool>(
    real: real::cuLaunchKernel::Real,
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
    gated(stream, PER_THREAD, f, || {
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
    })
}

/// # Safety
/// `real` is the driver's `cuLaunchCooperativeKernel` (`PER_THREAD`: its `_ptsz` twin); the
/// arguments are the caller's.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub(crate) unsafe fn launch_cooperative_kernel<const PER_THREAD: bool>(
    real: real::cuLaunchCooperativeKernel::Real,
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
    gated(stream, PER_THREAD, f, || {
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
    })
}

/// # Safety
/// `real` is the driver's `cuLaunchKernelEx` (`PER_THREAD`: `cuLaunchKernelEx_ptsz`); the
/// arguments are the caller's: `config`, when not null, points to a `CUlaunchConfig`.
#[inline(always)]
pub(crate) unsafe fn launch_kernel_ex<const PER_THREAD: bool>(
    real: real::cuLaunchKernelEx::Real,
    config: *const CUlaunchConfig,
    f: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    let stream = if config.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: a non-null config is a CUlaunchConfig by the contract; only its stream
        // handle is read, without assuming more alignment than the driver does.
        unsafe { (&raw const (*config).stream).read_unaligned() }
    };
    gated(stream, PER_THREAD, f, || {
        // SAFETY: the caller's arguments, passed on to the function they were meant for.
        unsafe { real(config, f, params, extra) }
    })
}

/// # Safety
/// `real` is the driver's `cuGraphLaunch` (`PER_THREAD`: `cuGraphLaunch_ptsz`); the
/// arguments are the caller's.
#[inline(always)]
pub(crate) unsafe fn graph_launch<const PER_THREAD: bool>(
    real: real::cuGraphLaunch::Real,
    exec: *mut c_void,
    stream: *mut c_void,
) -> u32 {
    gated(stream, PER_THREAD, exec, || {
        // SAFETY: the caller's arguments, passed on to the function they were meant for.
        unsafe { real(exec, stream) }
    })
}
