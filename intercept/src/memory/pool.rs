//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`.
//!
//! Counted when allocated, given back when the free has run in stream order — as the
//! driver frees — not when it is queued: until then the memory is still in use by the work
//! queued before the free. Behind the free an event is recorded on the stream (an event,
//! not a host function: a host function would stall the stream's later work until a CPU
//! thread has run it). Recorded events are polled lazily: before every counted allocation,
//! every memory query and every asynchronous free, with one relaxed load when none is
//! pending. A free the event cannot follow (a stream being captured into a graph, or an
//! event that cannot be made or recorded) is given back at once, as before.

use super::registry::{Allocation, Key};
use super::{forget_then, Site};
use crate::container::{self, Container};
use crate::fork_lock::{ForkGuard, ForkLock};
use crate::hooks::real;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_cuda_abi::{CUDA_ERROR_NOT_READY, CUDA_SUCCESS, CU_STREAM_PER_THREAD};

/// `CU_EVENT_DISABLE_TIMING`: the cheapest event.
const EVENT_DISABLE_TIMING: u32 = 0x2;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_NONE: u32 = 0;

/// A free queued on a stream whose bytes are still counted.
struct Pending {
    /// Recorded on the stream right behind the free.
    event: usize,
    /// The context current at the free, which the event belongs to.
    context: usize,
    allocation: Allocation,
}

static PENDING: ForkLock<Vec<Pending>> = ForkLock::new(Vec::new());
/// How many frees are pending: lets the allocation path skip the lock when none is.
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);

fn pending() -> ForkGuard<'static, Vec<Pending>> {
    // Pushes and retains leave the list consistent even if a panic interrupts a caller.
    PENDING.lock()
}

/// Gives back the frees that have run. Cheap when none is pending.
pub(crate) fn settle() {
    // Relaxed: a hint. Missing a free pushed a moment ago only keeps its bytes counted
    // until the next poll — later than they could be given back, never earlier.
    if PENDING_COUNT.load(Ordering::Relaxed) != 0 {
        settle_pending();
    }
}

#[cold]
fn settle_pending() {
    let (Some(c), Some(query), Some(destroy)) = (
        container::get(),
        real::cuEventQuery::real(),
        real::cuEventDestroy_v2::real(),
    ) else {
        return;
    };
    let mut done = Vec::new();
    {
        let mut list = pending();
        list.retain(|p| {
            // SAFETY: an event we created and have not destroyed.
            let rc = unsafe { query(p.event as *mut c_void) };
            if rc == CUDA_ERROR_NOT_READY {
                return true;
            }
            done.push((rc, p.event, p.allocation));
            false
        });
        // Relaxed: read only as a hint (see `settle`); the lock orders the list itself.
        PENDING_COUNT.store(list.len(), Ordering::Relaxed);
    }
    for (rc, event, a) in done {
        if rc == CUDA_SUCCESS {
            // SAFETY: our event, complete, and taken out of the list: destroyed once.
            unsafe { destroy(event as *mut c_void) };
        }
        // Another answer means the event is gone with its context (see `forget_context`
        // for the usual way); the handle may name someone else's event now, so it is left
        // alone. Either way the free has run or its context is gone.
        c.release(a.device, a.bytes, a.generation);
    }
}

/// Gives back the pending frees of a context the driver has just destroyed: destroying it
/// waited for its streams, and took its events with it.
pub(crate) fn forget_context(c: &Container, context: usize) {
    // Relaxed: as in `settle`; a free pushed meanwhile by another thread is on a stream of
    // a context that thread still uses.
    if PENDING_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut gone = Vec::new();
    {
        let mut list = pending();
        list.retain(|p| {
            let keep = p.context != context;
            if !keep {
                gone.push(p.allocation);
            }
            keep
        });
        // Relaxed: as in `settle_pending`.
        PENDING_COUNT.store(list.len(), Ordering::Relaxed);
    }
    for a in gone {
        c.release(a.device, a.bytes, a.generation);
    }
}

/// Whether `stream` is being captured into a graph (or cannot be asked): a free there runs
/// when the graph does, which an event recorded now does not follow.
fn capturing(stream: *mut c_void) -> bool {
    let Some(is_capturing) = real::cuStreamIsCapturing::real() else {
        return true;
    };
    let mut status = CAPTURE_NONE;
    // SAFETY: a stream the driver has just accepted for the free; status is a valid local.
    let rc = unsafe { is_capturing(stream, &mut status) };
    rc != CUDA_SUCCESS || status != CAPTURE_NONE
}

/// Records an event behind the free of `allocation` on `stream` and keeps its bytes counted
/// until the event completes; gives them back now if that cannot be done.
fn give_back_in_stream_order(c: &Container, allocation: Allocation, stream: *mut c_void) {
    match record_behind(stream) {
        Some((event, context)) => {
            let mut list = pending();
            list.push(Pending {
                event,
                context,
                allocation,
            });
            // Relaxed: as in `settle_pending`.
            PENDING_COUNT.store(list.len(), Ordering::Relaxed);
        }
        None => c.release(allocation.device, allocation.bytes, allocation.generation),
    }
}

/// An event recorded on `stream` now, and its context.
fn record_behind(stream: *mut c_void) -> Option<(usize, usize)> {
    if capturing(stream) {
        return None;
    }
    let site = Site::current()?;
    let (create, record, destroy) = (
        real::cuEventCreate::real()?,
        real::cuEventRecord::real()?,
        real::cuEventDestroy_v2::real()?,
    );
    let mut event: *mut c_void = std::ptr::null_mut();
    // SAFETY: event is a valid out-pointer; the current context owns the new event.
    if unsafe { create(&mut event, EVENT_DISABLE_TIMING) } != CUDA_SUCCESS || event.is_null() {
        return None;
    }
    // SAFETY: our new event and the caller's stream, which the driver accepted for the free.
    if unsafe { record(event, stream) } != CUDA_SUCCESS {
        // The stream belongs to another context than the current one, for instance.
        // SAFETY: our event, never recorded, destroyed once.
        unsafe { destroy(event) };
        return None;
    }
    Some((event as usize, site.context))
}

/// # Safety
/// `real` is the driver's `cuMemAllocAsync` (or its `_ptsz` twin); the arguments are the
/// caller's, unchanged.
pub(crate) unsafe fn mem_alloc_async(
    real: real::cuMemAllocAsync::Real,
    dptr: *mut u64,
    bytes: usize,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes dptr on success.
    unsafe { super::counted(dptr, bytes as u64, || real(dptr, bytes, stream)) }
}

/// # Safety
/// `real` is the driver's `cuMemAllocFromPoolAsync` (or its `_ptsz` twin); the arguments
/// are the caller's, unchanged.
pub(crate) unsafe fn mem_alloc_from_pool_async(
    real: real::cuMemAllocFromPoolAsync::Real,
    dptr: *mut u64,
    bytes: usize,
    pool: *mut c_void,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: as in `mem_alloc_async`.
    unsafe { super::counted(dptr, bytes as u64, || real(dptr, bytes, pool, stream)) }
}

/// # Safety
/// `real` is the driver's `cuMemFreeAsync` (or its `_ptsz` twin); the arguments are the
/// caller's, unchanged.
pub(crate) unsafe fn mem_free_async(
    real: real::cuMemFreeAsync::Real,
    dptr: u64,
    stream: *mut c_void,
) -> u32 {
    settle();
    // SAFETY: the caller's arguments, passed on.
    let free = || unsafe { real(dptr, stream) };
    if dptr == 0 {
        return free();
    }
    // The `_ptsz` twin's null stream is this thread's default stream: named explicitly so
    // that the legacy event calls reach the same stream.
    let per_thread = real::cuMemFreeAsync_ptsz::real().is_some_and(|f| f as usize == real as usize);
    let ordered = if per_thread && stream.is_null() {
        CU_STREAM_PER_THREAD as *mut c_void
    } else {
        stream
    };
    forget_then(Key::Pointer(dptr), free, |c, a| {
        give_back_in_stream_order(c, a, ordered)
    })
}
