//! The driver calls of measuring, each one counted in the cost of a metered launch: events
//! made once and kept in a pool per context, recorded on the application's streams, and read
//! against one another with `cuEventElapsedTime`, which also says whether they completed
//! (`CUDA_ERROR_NOT_READY`), so that no separate query is needed.

use crate::hooks::real;
use std::ffi::c_void;
use tessera_cuda_abi::{CUDA_ERROR_NOT_READY, CUDA_SUCCESS};

/// A CUDA event handle of this library's.
pub(super) type Event = usize;

/// Idle events kept per context, at most.
pub(super) const POOL_MAX: usize = 128;

/// A new timing event in the current context.
pub(super) fn create() -> Option<Event> {
    let create = real::cuEventCreate::real()?;
    let mut e: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one handle to our local; flags 0 keep timing on.
    (unsafe { create(&mut e, 0) } == CUDA_SUCCESS && !e.is_null()).then_some(e as usize)
}

/// Records `e` at the end of `stream` (a handle the plain entry points take).
pub(super) fn record(e: Event, stream: *mut c_void) -> bool {
    let Some(record) = real::cuEventRecord::real() else {
        return false;
    };
    // SAFETY: an event of the current context and a stream handle the application's launch
    // just used (or a special handle valid everywhere).
    unsafe { record(e as *mut c_void, stream) == CUDA_SUCCESS }
}

/// What the driver says of two events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elapsed {
    /// Both completed: the second ran this many ns after the first (negative: before).
    Done(i64),
    /// One of them has not completed yet.
    Pending,
    /// The driver knows one of them no more (its context is gone) or cannot time them.
    Gone,
}

/// The time from `from` to `to`, both events of this library's in one context.
pub(super) fn elapsed(from: Event, to: Event) -> Elapsed {
    let Some(elapsed) = real::cuEventElapsedTime::real() else {
        return Elapsed::Gone;
    };
    let mut ms = 0f32;
    // SAFETY: writes one float to our local; both events are ours.
    match unsafe { elapsed(&mut ms, from as *mut c_void, to as *mut c_void) } {
        CUDA_SUCCESS if ms.is_finite() => Elapsed::Done((f64::from(ms) * 1e6) as i64),
        CUDA_ERROR_NOT_READY => Elapsed::Pending,
        _ => Elapsed::Gone,
    }
}

/// Waits for `e` with the real `cuEventSynchronize` (a stale handle returns an error).
pub(super) fn synchronize(e: Event) {
    if let Some(sync) = real::cuEventSynchronize::real() {
        // SAFETY: an event handle this library created.
        unsafe { sync(e as *mut c_void) };
    }
}
