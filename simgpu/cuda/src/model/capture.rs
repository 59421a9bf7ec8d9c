//! Stream capture: a stream begins and ends recording its work into a graph, reports the
//! capture it is in, and is drawn into another stream's capture by waiting for an event
//! recorded there. The captures themselves, and their graphs, are [`crate::model::graph`]'s.

use crate::ffi::{code, write_out, CUstream, DriverResult};
use crate::model::exec::StreamKind;
use crate::model::graph::{retire, CUgraph, Capture};
use crate::model::stream::{self, Stream};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;

/// `CUstreamCaptureStatus`.
const CAPTURE_NONE: u32 = 0;
const CAPTURE_ACTIVE: u32 = 1;
const CAPTURE_INVALIDATED: u32 = 2;
/// `CUstreamCaptureMode`: global, thread-local, relaxed.
pub(crate) const CAPTURE_MODE_RELAXED: u32 = 2;

thread_local! {
    pub(crate) static THREAD_CAPTURE_MODE: Cell<u32> = const { Cell::new(0) };
}

/// Draws `stream` into `capture` (it waited for an event recorded inside the capture).
pub(crate) fn join(stream: &Stream, capture: &Arc<Capture>) -> DriverResult {
    capture.check()?;
    match stream.capture() {
        Some(current) if Arc::ptr_eq(&current, capture) => Ok(()),
        // Two captures may not merge.
        Some(current) => {
            current.invalidate();
            capture.invalidate();
            Err(code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        }
        None => {
            stream.set_capture(Some(Arc::clone(capture)));
            capture.add_member(stream.capture_slot());
            Ok(())
        }
    }
}

pub(crate) fn begin(handle: CUstream, mode: u32, per_thread: bool) -> DriverResult {
    let stream = stream::resolve(handle, per_thread)?;
    if mode > CAPTURE_MODE_RELAXED {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if stream.kind == StreamKind::Legacy {
        return Err(code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if stream.capture().is_some() {
        return Err(code::CUDA_ERROR_ILLEGAL_STATE);
    }
    stream.set_capture(Some(Capture::new(stream.id)));
    Ok(())
}

pub(crate) fn end(handle: CUstream, out: *mut CUgraph, per_thread: bool) -> DriverResult {
    let stream = stream::resolve(handle, per_thread)?;
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let capture = stream.capture().ok_or(code::CUDA_ERROR_ILLEGAL_STATE)?;
    if capture.origin() != stream.id {
        capture.invalidate();
        return Err(code::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    }
    stream.set_capture(None);
    for member in capture.take_members() {
        member.set(None);
    }
    let result = if capture.is_invalidated() {
        retire(capture.graph_handle());
        Err(code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    } else {
        Ok(capture.graph_handle())
    };
    // SAFETY: checked non-null; the caller provides a CUgraph to write.
    unsafe { write_out(out, *result.as_ref().unwrap_or(&std::ptr::null_mut()))? };
    result.map(drop)
}

fn capture_status(stream: &Stream) -> (u32, Option<Arc<Capture>>) {
    match stream.capture() {
        None => (CAPTURE_NONE, None),
        Some(c) if c.is_invalidated() => (CAPTURE_INVALIDATED, Some(c)),
        Some(c) => (CAPTURE_ACTIVE, Some(c)),
    }
}

pub(crate) fn is_capturing(handle: CUstream, status: *mut u32, per_thread: bool) -> DriverResult {
    let stream = stream::resolve(handle, per_thread)?;
    // SAFETY: write_out checks null; the caller provides a CUstreamCaptureStatus to write.
    unsafe { write_out(status, capture_status(&stream).0) }
}

/// `cuStreamGetCaptureInfo` in all its versions: the optional outputs are written when
/// non-null; the graph has no dependency nodes to report (its order is its only edge set).
#[allow(clippy::too_many_arguments)]
pub(crate) fn capture_info(
    handle: CUstream,
    per_thread: bool,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> DriverResult {
    let stream = stream::resolve(handle, per_thread)?;
    if status.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let (s, capture) = capture_status(&stream);
    // SAFETY: checked non-null; the caller provides a CUstreamCaptureStatus to write.
    unsafe { write_out(status, s)? };
    let Some(capture) = capture else {
        return Ok(());
    };
    // SAFETY (each write below): non-null, and the caller provides the pointed-to type.
    if !id.is_null() {
        // SAFETY: see above.
        unsafe { write_out(id, capture.id())? };
    }
    if !graph.is_null() {
        // SAFETY: see above.
        unsafe { write_out(graph, capture.graph_handle())? };
    }
    if !deps.is_null() {
        // SAFETY: see above.
        unsafe { write_out(deps, std::ptr::null())? };
    }
    if !edges.is_null() {
        // SAFETY: see above.
        unsafe { write_out(edges, std::ptr::null())? };
    }
    if !num_deps.is_null() {
        // SAFETY: see above.
        unsafe { write_out(num_deps, 0)? };
    }
    Ok(())
}
