//! Synchronizations: after the application waits for its work, the launch gate harvests
//! what completed, so that the container's bucket, window and `active` flag follow at once.

use super::measure;
use crate::container;
use crate::hooks::real;
use std::ffi::c_void;

/// Harvests completed launches if this process measures any (one load otherwise).
#[inline]
fn after_sync() {
    if measure::anything_pending() {
        if let Some(c) = container::get() {
            measure::harvest(c.region(), true);
        }
    }
}

/// `cuStreamSynchronize` and its `_ptsz` twin.
///
/// # Safety
/// `real` is the driver's function; `stream` is the caller's.
pub(crate) unsafe fn stream_synchronize(
    real: real::cuStreamSynchronize::Real,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on to the function it was meant for.
    let rc = unsafe { real(stream) };
    after_sync();
    rc
}

/// `cuCtxSynchronize`.
///
/// # Safety
/// `real` is the driver's function.
pub(crate) unsafe fn ctx_synchronize(real: real::cuCtxSynchronize::Real) -> u32 {
    // SAFETY: the driver's function, called as the application called ours.
    let rc = unsafe { real() };
    after_sync();
    rc
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `real` is the driver's function; `event` is the caller's.
pub(crate) unsafe fn event_synchronize(
    real: real::cuEventSynchronize::Real,
    event: *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on to the function it was meant for.
    let rc = unsafe { real(event) };
    after_sync();
    rc
}
