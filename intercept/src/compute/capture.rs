//! Stream captures: work put into a stream being captured goes into a graph, not onto the
//! GPU, and is gated when the graph is launched; the launch gate must not meter it, nor
//! record its events into the capture.
//!
//! Asking the driver (`cuStreamIsCapturing`) at every launch is a driver call per launch,
//! almost always answered "no". So the captures this process begins are counted: while none
//! is in progress no stream can be capturing (a stream joins a capture only by waiting on
//! an event recorded inside one), and the gate asks nothing; while one is, it asks the
//! driver at every launch, as it must (a stream may have joined).

use crate::fork_lock::ForkLock;
use crate::hooks::real;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use tessera_cuda_abi::{CUDA_SUCCESS, CU_STREAM_PER_THREAD};

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_NONE: u32 = 0;

/// Captures begun in this process and not ended.
static CAPTURES: AtomicU32 = AtomicU32::new(0);
/// The streams of those captures (the per-thread default stream keyed by its thread too),
/// so that an end is counted once and only for a begin that was.
static STREAMS: ForkLock<Vec<(usize, usize)>> = ForkLock::new(Vec::new());

/// Whether work on `stream` goes into a graph being captured (it is gated when the graph
/// is launched) — or the driver cannot say, in which case the launch is not gated either.
#[inline]
pub(super) fn capturing(stream: *mut c_void, per_thread: bool) -> bool {
    // Acquire: pairs with the Release increment in `begin`, made before the driver began
    // the capture; a launch ordered after that begin by the application sees it.
    if CAPTURES.load(Ordering::Acquire) == 0 {
        return false;
    }
    ask(stream, per_thread)
}

#[cold]
fn ask(stream: *mut c_void, per_thread: bool) -> bool {
    let Some(is_capturing) = real::cuStreamIsCapturing::real() else {
        return true;
    };
    let stream = if per_thread && stream.is_null() {
        CU_STREAM_PER_THREAD as *mut c_void
    } else {
        stream
    };
    let mut status = CAPTURE_NONE;
    // SAFETY: the caller's stream (or a special handle); writes one status to our local.
    let rc = unsafe { is_capturing(stream, &mut status) };
    rc != CUDA_SUCCESS || status != CAPTURE_NONE
}

/// The key of a capture's stream.
fn key(stream: *mut c_void, per_thread: bool) -> (usize, usize) {
    let s = stream as usize;
    if s == CU_STREAM_PER_THREAD || (per_thread && s == 0) {
        // SAFETY: pthread_self has no preconditions.
        (CU_STREAM_PER_THREAD, unsafe { libc::pthread_self() }
            as usize)
    } else {
        (s, 0)
    }
}

/// Counts a capture about to begin on `stream` (before the driver begins it, so that no
/// launch into it can miss the count); `begun` with the driver's answer.
fn begin(stream: *mut c_void, per_thread: bool, begun: impl FnOnce() -> u32) -> u32 {
    // Release: see `capturing`.
    CAPTURES.fetch_add(1, Ordering::Release);
    let rc = begun();
    if rc == CUDA_SUCCESS {
        STREAMS.lock().push(key(stream, per_thread));
    } else {
        // Relaxed: taking back the count just taken.
        CAPTURES.fetch_sub(1, Ordering::Relaxed);
    }
    rc
}

/// After an end of the capture on `stream` that returned `rc`: uncounted if it was counted
/// and the stream captures no more (an end refused, say on the wrong thread, leaves the
/// capture going).
fn end(stream: *mut c_void, per_thread: bool, rc: u32) {
    if rc != CUDA_SUCCESS && ask(stream, per_thread) {
        return;
    }
    let k = key(stream, per_thread);
    let mut streams = STREAMS.lock();
    if let Some(i) = streams.iter().position(|&s| s == k) {
        streams.swap_remove(i);
        // Relaxed: the end of a capture orders nothing for launches; counting too long
        // only costs them a driver call.
        CAPTURES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// In a fork child: no capture is in progress there.
pub(super) fn after_fork_in_child() {
    // Relaxed: the child has one thread until it returns from fork. The streams' list is
    // replaced at its next lock (a fork lock), and an end not found there counts nothing.
    CAPTURES.store(0, Ordering::Relaxed);
}

/// `cuStreamBeginCapture` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; the argument is the caller's.
pub(crate) unsafe fn begin_capture<const PER_THREAD: bool>(
    real: real::cuStreamBeginCapture::Real,
    stream: *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on.
    begin(stream, PER_THREAD, || unsafe { real(stream) })
}

/// `cuStreamBeginCapture_v2` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; the arguments are the caller's.
pub(crate) unsafe fn begin_capture_v2<const PER_THREAD: bool>(
    real: real::cuStreamBeginCapture_v2::Real,
    stream: *mut c_void,
    mode: u32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    begin(stream, PER_THREAD, || unsafe { real(stream, mode) })
}

/// `cuStreamEndCapture` and its `_ptsz` twin (`PER_THREAD`).
///
/// # Safety
/// `real` is the driver's function; the arguments are the caller's.
pub(crate) unsafe fn end_capture<const PER_THREAD: bool>(
    real: real::cuStreamEndCapture::Real,
    stream: *mut c_void,
    graph: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(stream, graph) };
    end(stream, PER_THREAD, rc);
    rc
}
