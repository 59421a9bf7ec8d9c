//! Events: points in a stream that complete when the stream's executor reaches them, stamped
//! with the simulated time the stream had reached, so that two events time the engine work
//! between them.

use crate::ffi::{code, write_out, CUevent, CUresult, CUstream, DriverResult};
use crate::model::capture;
use crate::model::context::{self, Context};
use crate::model::exec::{self, registry::Registry, Work};
use crate::model::graph::Capture;
use crate::model::records::{RecordState, Records};
use crate::model::stream::{self, Stream};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// `CU_EVENT_BLOCKING_SYNC`: waits sleep (they always do here).
pub(crate) const BLOCKING_SYNC: u32 = 0x1;
/// `CU_EVENT_DISABLE_TIMING`: no timestamp.
pub(crate) const DISABLE_TIMING: u32 = 0x2;
/// `CU_EVENT_INTERPROCESS`: requires `DISABLE_TIMING`.
pub(crate) const INTERPROCESS: u32 = 0x4;
/// `CU_EVENT_RECORD_EXTERNAL`: an event record node inside a capture.
const RECORD_EXTERNAL: u32 = 0x1;
/// `CU_EVENT_WAIT_EXTERNAL`: an event wait node inside a capture.
const WAIT_EXTERNAL: u32 = 0x1;
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`.
const STREAM_CAPTURE_ISOLATION: CUresult = 905;

/// An event.
pub(crate) struct Event {
    /// The context it was created in.
    pub ctx: Arc<Context>,
    pub(crate) flags: u32,
    /// Its records, which the executor completes.
    pub(crate) records: Arc<Records>,
    /// The capture it was last recorded in, if that was inside one.
    capture: Mutex<Option<Weak<Capture>>>,
}

pub(crate) static EVENTS: Registry<Event> = Registry::new();

impl Event {
    /// A new event of `ctx`, never recorded.
    pub(crate) fn new(ctx: Arc<Context>, flags: u32) -> Event {
        Event {
            ctx,
            flags,
            records: Arc::default(),
            capture: Mutex::new(None),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, RecordState> {
        self.records.state()
    }

    fn capture_slot(&self) -> MutexGuard<'_, Option<Weak<Capture>>> {
        self.capture.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The capture the event was last recorded in, while it is still in progress.
    pub(crate) fn capture(&self) -> Option<Arc<Capture>> {
        self.capture_slot().as_ref().and_then(Weak::upgrade)
    }
}

/// The live event behind a handle.
pub(crate) fn lookup(handle: CUevent) -> Result<Arc<Event>, CUresult> {
    crate::model::driver::process()?;
    EVENTS.get(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

/// Retires the events of a destroyed context.
fn forget_context(ctx: &Context) {
    EVENTS.remove_where(|e| e.ctx.id == ctx.id);
}
context::teardown_step!(Events, forget_context);

/// Records `event` at the current end of `stream`.
pub(crate) fn record(
    event: CUevent,
    stream: CUstream,
    flags: u32,
    per_thread: bool,
) -> DriverResult {
    let event = lookup(event)?;
    let stream = stream::resolve(stream, per_thread)?;
    if flags & !RECORD_EXTERNAL != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if let Some(capture) = stream.capture() {
        // Inside a capture a record is a point other streams may join the capture at; the
        // graph itself is kept in submission order.
        capture.check()?;
        *event.capture_slot() = Some(Arc::downgrade(&capture));
        return Ok(());
    }
    let n = {
        let mut s = event.state();
        s.recorded += 1;
        *event.capture_slot() = None;
        s.recorded
    };
    exec::submit(stream.lane(), Work::Record(Arc::clone(&event.records), n)).map(drop)
}

/// `cuStreamWaitEvent`: the stream a handle names waits for the latest record of `event`.
pub(crate) fn wait_event(
    handle: CUstream,
    event: CUevent,
    flags: u32,
    per_thread: bool,
) -> DriverResult {
    let stream = stream::resolve(handle, per_thread)?;
    let event = lookup(event)?;
    wait_in_stream(&stream, &event, flags)
}

/// Makes `stream` wait for the latest record of `event`.
fn wait_in_stream(stream: &Arc<Stream>, event: &Arc<Event>, flags: u32) -> DriverResult {
    if flags & !WAIT_EXTERNAL != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if let Some(capture) = event.capture() {
        // Waiting for a captured record draws the stream into that capture.
        return capture::join(stream, &capture);
    }
    if let Some(capture) = stream.capture() {
        if flags & WAIT_EXTERNAL != 0 {
            // An external wait: the graph, replayed in order, has nothing to wait for.
            return capture.check();
        }
        // A capture may not depend on work outside it.
        capture.invalidate();
        return Err(STREAM_CAPTURE_ISOLATION);
    }
    let n = event.state().recorded;
    if n == 0 {
        // Never recorded: nothing to wait for.
        return Ok(());
    }
    exec::submit(stream.lane(), Work::Wait(Arc::clone(&event.records), n)).map(drop)
}

pub(crate) fn elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> DriverResult {
    let (start, end) = (lookup(start)?, lookup(end)?);
    if ms.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if (start.flags | end.flags) & DISABLE_TIMING != 0 {
        return Err(code::CUDA_ERROR_INVALID_HANDLE);
    }
    let mut times = [0u64; 2];
    for (t, e) in times.iter_mut().zip([&start, &end]) {
        let s = e.state();
        if s.recorded == 0 {
            return Err(code::CUDA_ERROR_INVALID_HANDLE);
        }
        if s.done < s.recorded {
            return Err(code::CUDA_ERROR_NOT_READY);
        }
        *t = s.timestamp_ns;
    }
    let delta_ns = times[1] as i128 - times[0] as i128;
    // SAFETY: checked non-null; the caller provides a float to write.
    unsafe { write_out(ms, (delta_ns as f64 / 1e6) as f32) }
}

pub(crate) fn destroy(event: CUevent) -> DriverResult {
    crate::model::driver::process()?;
    // Records in flight keep the event's records alive until they have run.
    EVENTS
        .remove(event)
        .map(drop)
        .ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}
