//! The calling thread's current context and its device: the one place that maps what the
//! driver says (a context, a CUDA ordinal) to the node GPU index that the caps and the
//! compute accounts are kept by ([`crate::visibility::account`]), for memory and compute
//! alike.
//!
//! A metered launch must not pay two driver calls to learn what it already knew at the
//! previous launch, so the answer is kept per thread, and every hooked call that changes a
//! thread's current context forgets it: `cuCtxSetCurrent`, `cuCtxPushCurrent`,
//! `cuCtxPopCurrent` and the context creations on the calling thread; a destroyed,
//! released or reset context on every thread (its handle may name another context later).
//! A thread with no current context is never cached: the CUDA runtime makes its primary
//! context current lazily, and the next launch asks again.

use crate::hooks::real;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use tessera_cuda_abi::CUDA_SUCCESS;
use tessera_region::MAX_DEVICES;

/// A thread's current context, as the driver gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Current {
    /// The context's handle.
    pub(crate) context: usize,
    /// The node GPU index of its device (the index of the caps and accounts).
    pub(crate) device: usize,
}

/// Bumped whenever a context may have gone on some thread: every thread's answer is stale.
static EVERYWHERE: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// The answer last given on this thread, and the value of [`EVERYWHERE`] it was read
    /// under.
    static CACHED: Cell<Option<(u32, Current)>> = const { Cell::new(None) };
}

/// The calling thread's current context and its device; `None` without one (the driver
/// then fails the call itself). No driver call while the thread's answer is known.
#[inline]
pub(crate) fn get() -> Option<Current> {
    // Relaxed: a destroy on another thread that this load misses raced with this thread's
    // use of the context, which the driver's contract forbids.
    let now = EVERYWHERE.load(Ordering::Relaxed);
    match CACHED.get() {
        Some((seen, current)) if seen == now => Some(current),
        _ => ask(now),
    }
}

#[cold]
fn ask(now: u32) -> Option<Current> {
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let mut dev: i32 = -1;
    // SAFETY: both functions write one value to the valid locals passed.
    let ok = unsafe {
        real::cuCtxGetCurrent::real()?(&mut ctx) == CUDA_SUCCESS
            && real::cuCtxGetDevice::real()?(&mut dev) == CUDA_SUCCESS
    };
    let ordinal = usize::try_from(dev).ok().filter(|&d| d < MAX_DEVICES)?;
    if !ok || ctx.is_null() {
        return None;
    }
    let current = Current {
        context: ctx as usize,
        device: crate::visibility::account(ordinal),
    };
    CACHED.set(Some((now, current)));
    Some(current)
}

/// The calling thread's current context may have changed.
pub(crate) fn changed_here() {
    CACHED.set(None);
}

/// A context may be gone: every thread asks the driver again.
pub(crate) fn changed_everywhere() {
    changed_here();
    // Relaxed: see `get`.
    EVERYWHERE.fetch_add(1, Ordering::Relaxed);
}

/// `cuCtxSetCurrent`.
///
/// # Safety
/// `real` is the driver's function; the argument is the caller's.
pub(crate) unsafe fn ctx_set_current(real: real::cuCtxSetCurrent::Real, ctx: *mut c_void) -> u32 {
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(ctx) };
    changed_here();
    rc
}

/// `cuCtxPushCurrent` and its `_v2`.
///
/// # Safety
/// `real` is the driver's function; the argument is the caller's.
pub(crate) unsafe fn ctx_push_current(
    real: real::cuCtxPushCurrent_v2::Real,
    ctx: *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(ctx) };
    changed_here();
    rc
}

/// `cuCtxPopCurrent` and its `_v2`.
///
/// # Safety
/// `real` is the driver's function; the argument is the caller's.
pub(crate) unsafe fn ctx_pop_current(
    real: real::cuCtxPopCurrent_v2::Real,
    ctx: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(ctx) };
    changed_here();
    rc
}
