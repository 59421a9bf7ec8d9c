//! Streams: the legacy default stream of each context, the per-thread default streams, and
//! created ones; how the rest of the driver puts work on them.

use crate::ffi::{
    code, write_out, CUcontext, CUresult, CUstream, DriverResult, CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
};
use crate::model::context::{self, Context, GREATEST_PRIORITY, LEAST_PRIORITY};
use crate::model::driver;
use crate::model::exec::{self, registry::Registry, HostWork, Lane, StreamKind, Work};
use crate::model::graph::{Capture, CaptureSlot, HostKind, Node};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// `CU_STREAM_NON_BLOCKING`: no implicit synchronization with the legacy default stream.
const NON_BLOCKING: u32 = 0x1;

/// A stream.
pub(crate) struct Stream {
    /// Unique in the process (`cuStreamGetId`).
    pub id: u64,
    /// Its context.
    pub ctx: Arc<Context>,
    /// How it synchronizes with the others.
    pub kind: StreamKind,
    pub(crate) priority: i32,
    /// The capture it belongs to, while one is in progress.
    capture: Arc<CaptureSlot>,
}

static STREAMS: Registry<Stream> = Registry::new();
/// The legacy default stream of each context that used one, by context id: made on first
/// use, dropped with the context's created streams.
static LEGACY: Mutex<BTreeMap<u64, Arc<Stream>>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The calling thread's per-thread default streams, one per context it used; their queues
/// go when the thread exits.
struct PerThreadStreams(Vec<Arc<Stream>>);

impl Drop for PerThreadStreams {
    fn drop(&mut self) {
        for stream in self.0.drain(..) {
            exec::release_stream(stream.lane());
        }
    }
}

thread_local! {
    static PER_THREAD: RefCell<PerThreadStreams> = const { RefCell::new(PerThreadStreams(Vec::new())) };
}

impl Stream {
    fn new(ctx: Arc<Context>, kind: StreamKind, priority: i32) -> Arc<Stream> {
        Arc::new(Stream {
            id: NEXT_ID.fetch_add(1, Relaxed),
            ctx,
            kind,
            priority,
            capture: Arc::default(),
        })
    }

    /// A context's legacy default stream, made on first use.
    fn legacy(ctx: Arc<Context>) -> Arc<Stream> {
        let mut legacy = LEGACY.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            legacy
                .entry(ctx.id)
                .or_insert_with(|| Stream::new(ctx, StreamKind::Legacy, LEAST_PRIORITY)),
        )
    }

    fn per_thread(ctx: Arc<Context>) -> Arc<Stream> {
        PER_THREAD.with(|t| {
            let mut t = t.borrow_mut();
            t.0.retain(|s| !s.ctx.is_destroyed());
            if let Some(s) = t.0.iter().find(|s| s.ctx.id == ctx.id) {
                return Arc::clone(s);
            }
            let s = Stream::new(ctx, StreamKind::PerThread, LEAST_PRIORITY);
            t.0.push(Arc::clone(&s));
            s
        })
    }

    /// The stream as its executor knows it.
    pub(crate) fn lane(&self) -> Lane<'_> {
        Lane {
            id: self.id,
            ctx: &self.ctx,
            kind: self.kind,
        }
    }

    /// `CUstream_flags` of the stream.
    pub(crate) fn flags(&self) -> u32 {
        if self.kind == StreamKind::NonBlocking {
            NON_BLOCKING
        } else {
            0
        }
    }

    /// The capture in progress on the stream.
    pub(crate) fn capture(&self) -> Option<Arc<Capture>> {
        self.capture.get()
    }

    /// Starts or ends the stream's part in a capture.
    pub(crate) fn set_capture(&self, capture: Option<Arc<Capture>>) {
        self.capture.set(capture);
    }

    /// Where its capture is kept, for a capture it joins to clear at its end.
    pub(crate) fn capture_slot(&self) -> &Arc<CaptureSlot> {
        &self.capture
    }

    /// Fails (and spoils the capture) if the stream is capturing: for operations a graph
    /// cannot hold, such as synchronization.
    pub(crate) fn refuse_capture(&self) -> DriverResult {
        match self.capture() {
            Some(capture) => {
                capture.invalidate();
                Err(code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            }
            None => Ok(()),
        }
    }

    /// Waits for all the work submitted so far; reports the context's sticky error.
    pub(crate) fn synchronize(self: &Arc<Self>) -> DriverResult {
        self.refuse_capture()?;
        let mark = exec::submit(self.lane(), Work::Marker)?;
        exec::wait_for(mark)?;
        self.ctx.check_sticky()
    }
}

/// The stream a handle names. Null is the legacy default stream, or the calling thread's
/// per-thread default stream when `per_thread` (a `_ptsz`/`_ptds` entry point); the special
/// handles `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` work everywhere.
pub(crate) fn resolve(handle: CUstream, per_thread: bool) -> Result<Arc<Stream>, CUresult> {
    driver::process()?;
    match handle as usize {
        0 if per_thread => Ok(Stream::per_thread(context::current()?)),
        0 | CU_STREAM_LEGACY => Ok(Stream::legacy(context::current()?)),
        CU_STREAM_PER_THREAD => Ok(Stream::per_thread(context::current()?)),
        _ => STREAMS
            .get(handle)
            .filter(|s| !s.ctx.is_destroyed())
            .ok_or(code::CUDA_ERROR_INVALID_HANDLE),
    }
}

/// Puts work a graph can hold on a stream: into the capture if one is in progress,
/// otherwise on the executor.
pub(crate) fn submit_node(stream: &Arc<Stream>, node: Node) -> DriverResult {
    match stream.capture() {
        Some(capture) => capture.add(node),
        None => exec::submit(stream.lane(), node.into_work()).map(drop),
    }
}

/// Runs host work (a copy, a memset, a free) in stream order; it takes no engine time. A
/// capturing stream records it into the graph instead.
pub(crate) fn enqueue_host_work(
    stream: CUstream,
    per_thread: bool,
    kind: HostKind,
    work: HostWork,
) -> DriverResult {
    let stream = resolve(stream, per_thread)?;
    submit_node(&stream, Node::Host(kind, work))
}

/// Runs synchronous work (a synchronous copy or memset) on the calling thread, ordered as an
/// operation of the default stream (legacy, or the per-thread one): after the work submitted
/// before, and before the work submitted after.
pub(crate) fn run_synchronously(per_thread: bool, work: impl FnOnce() + Send) -> DriverResult {
    let stream = resolve(std::ptr::null_mut(), per_thread)?;
    stream.refuse_capture()?;
    exec::run_in_order(stream.lane(), work)
}

/// The device of a stream's context.
pub(crate) fn stream_device(stream: CUstream, per_thread: bool) -> Result<usize, CUresult> {
    Ok(resolve(stream, per_thread)?.ctx.device)
}

/// Retires the created streams and the legacy default stream of a destroyed context.
fn forget_context(ctx: &Context) {
    STREAMS.remove_where(|s| s.ctx.id == ctx.id);
    LEGACY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&ctx.id);
}
context::teardown_step!(Streams, forget_context);

pub(crate) fn create(out: *mut CUstream, flags: u32, priority: i32) -> DriverResult {
    let ctx = context::current()?;
    if out.is_null() || flags & !NON_BLOCKING != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let kind = if flags & NON_BLOCKING != 0 {
        StreamKind::NonBlocking
    } else {
        StreamKind::Blocking
    };
    // Out-of-range priorities are clamped, as the driver does.
    let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
    let handle = STREAMS.insert(Stream::new(ctx, kind, priority));
    // SAFETY: checked non-null; the caller provides a CUstream to write.
    unsafe { write_out(out, handle) }
}

pub(crate) fn destroy(handle: CUstream) -> DriverResult {
    driver::process()?;
    // The default streams cannot be destroyed.
    let stream = STREAMS
        .remove(handle)
        .ok_or(code::CUDA_ERROR_INVALID_HANDLE)?;
    if let Some(capture) = stream.capture() {
        capture.invalidate();
        stream.set_capture(None);
    }
    // Work already submitted still runs; the queue goes when it drains.
    exec::release_stream(stream.lane());
    Ok(())
}

pub(crate) fn query(handle: CUstream, per_thread: bool) -> DriverResult {
    let stream = resolve(handle, per_thread)?;
    stream.refuse_capture()?;
    let idle = match stream.kind {
        // The legacy stream's work includes what it waits for in the blocking streams.
        StreamKind::Legacy => exec::context_idle(&stream.ctx)?,
        _ => exec::stream_idle(stream.lane())?,
    };
    stream.ctx.check_sticky()?;
    if idle {
        Ok(())
    } else {
        Err(code::CUDA_ERROR_NOT_READY)
    }
}

/// A pointer handed back to the application's callback, on the executor thread.
#[derive(Clone, Copy)]
struct UserPtr(*mut c_void);
// SAFETY: the driver API hands the application's pointer to its callback on another thread;
// what it points to is the application's business, as with the real driver.
unsafe impl Send for UserPtr {}
// SAFETY: as for Send; simgpu never dereferences it.
unsafe impl Sync for UserPtr {}

pub(crate) type HostFn = unsafe extern "C" fn(user_data: *mut c_void);
pub(crate) type StreamCallback =
    unsafe extern "C" fn(stream: CUstream, status: CUresult, user_data: *mut c_void);

pub(crate) fn launch_host_func(
    handle: CUstream,
    f: Option<HostFn>,
    user: *mut c_void,
    per_thread: bool,
) -> DriverResult {
    let stream = resolve(handle, per_thread)?;
    let f = f.ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    let user = UserPtr(user);
    let work: HostWork = Arc::new(move || {
        let user = user;
        // SAFETY: the application registered `f` to be called with its pointer, once per
        // run of this stream operation.
        unsafe { f(user.0) }
    });
    submit_node(&stream, Node::Host(HostKind::Function, work))
}

pub(crate) fn add_callback(
    handle: CUstream,
    f: Option<StreamCallback>,
    user: *mut c_void,
    flags: u32,
    per_thread: bool,
) -> DriverResult {
    let stream = resolve(handle, per_thread)?;
    let f = f.ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    if flags != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    stream.refuse_capture()?;
    let (user, named) = (UserPtr(user), UserPtr(handle));
    exec::submit(
        stream.lane(),
        Work::Callback(Box::new(move |status| {
            let (user, named) = (user, named);
            // SAFETY: the application registered `f` to be called once with the stream it
            // named, the status of the stream's work and its pointer.
            unsafe { f(named.0, status, user.0) }
        })),
    )
    .map(drop)
}

pub(crate) fn write_ctx(handle: CUstream, out: *mut CUcontext, per_thread: bool) -> DriverResult {
    let stream = resolve(handle, per_thread)?;
    // SAFETY: write_out checks null; the caller provides a CUcontext to write.
    unsafe { write_out(out, stream.ctx.handle()) }
}
