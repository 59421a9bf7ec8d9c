//! Synchronizations: before the application waits for its work, the groups it launched are
//! closed (their kernels are still queued, so each END goes right behind its last kernel);
//! after, the launch gate harvests what completed, so that the container's bucket, window
//! and `active` flag follow at once.

use super::measure::{self, Harvest, Scope, StreamKey};
use crate::container;
use crate::current;
use crate::hooks::real;
use std::ffi::c_void;
use tessera_cuda_abi::CUDA_SUCCESS;

/// Runs the synchronization `wait`, closing the groups in `scope` (when there is a
/// container and this process measures anything: one load or two otherwise) before and
/// harvesting `how` after.
#[inline]
fn around(scope: impl FnOnce() -> Option<Scope>, how: Harvest, wait: impl FnOnce() -> u32) -> u32 {
    let region = match container::get() {
        Some(c) if measure::anything_in_flight() => c.region(),
        _ => return wait(),
    };
    if let Some(scope) = scope() {
        measure::close_open(region, scope);
    }
    let rc = wait();
    measure::harvest(region, how, true);
    rc
}

/// `cuStreamSynchronize` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; `stream` is the caller's.
pub(crate) unsafe fn stream_synchronize<const PER_THREAD: bool>(
    real: real::cuStreamSynchronize::Real,
    stream: *mut c_void,
) -> u32 {
    around(
        || {
            let ctx = current::get()?.context;
            Some(match StreamKey::of(stream, PER_THREAD, ctx) {
                // The legacy stream waits for the context's blocking streams too.
                StreamKey::Legacy { .. } => Scope::Context(ctx),
                key => Scope::Stream(key),
            })
        },
        Harvest::All,
        // SAFETY: the caller's argument, passed on to the function it was meant for.
        || unsafe { real(stream) },
    )
}

/// `cuCtxSynchronize`.
///
/// # Safety
/// `real` is the driver's function.
pub(crate) unsafe fn ctx_synchronize(real: real::cuCtxSynchronize::Real) -> u32 {
    around(
        || Some(Scope::Context(current::get()?.context)),
        Harvest::All,
        // SAFETY: the driver's function, called as the application called ours.
        || unsafe { real() },
    )
}

/// `cuEventSynchronize`: the event stands for its stream's work up to its record, which is
/// the stream's whole queue only if nothing was launched there after it (a program that
/// keeps N launches in flight waits on the oldest of them, deep inside the queue). Only the
/// groups due by the estimates are harvested after it: the others' kernels may not have
/// run, and asking would cost a driver call a launch.
///
/// # Safety
/// `real` is the driver's function; `event` is the caller's.
pub(crate) unsafe fn event_synchronize(
    real: real::cuEventSynchronize::Real,
    event: *mut c_void,
) -> u32 {
    around(
        || Some(Scope::Event(event as usize)),
        Harvest::Due,
        // SAFETY: the caller's argument, passed on to the function it was meant for.
        || unsafe { real(event) },
    )
}

/// Notes where the application records its own events (when this process measures
/// anything), so that a synchronization on one closes only the group it waits for.
fn note_record(event: *mut c_void, stream: *mut c_void, per_thread: bool, rc: u32) {
    if rc != CUDA_SUCCESS || !measure::anything_in_flight() {
        return;
    }
    if let Some(here) = current::get() {
        measure::app_event_recorded(event as usize, stream, per_thread, here.context);
    }
}

/// `cuEventRecord` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; the arguments are the caller's.
pub(crate) unsafe fn event_record<const PER_THREAD: bool>(
    real: real::cuEventRecord::Real,
    event: *mut c_void,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on to the function they were meant for.
    let rc = unsafe { real(event, stream) };
    note_record(event, stream, PER_THREAD, rc);
    rc
}

/// `cuEventRecordWithFlags` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; the arguments are the caller's.
pub(crate) unsafe fn event_record_with_flags<const PER_THREAD: bool>(
    real: real::cuEventRecordWithFlags::Real,
    event: *mut c_void,
    stream: *mut c_void,
    flags: u32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on to the function they were meant for.
    let rc = unsafe { real(event, stream, flags) };
    note_record(event, stream, PER_THREAD, rc);
    rc
}
