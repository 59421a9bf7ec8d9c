//! GPU time measured on the application's own streams with CUDA events.
//!
//! Around each admitted launch a START and an END event are recorded on the stream. A GPU
//! writes an event's timestamp when it processes the record in the context's channel, which
//! it does only while the context has the engine: a START queued behind other processes'
//! time slices is written when this context's turn comes and the kernel starts, so
//! `elapsed(START, END)` is the kernel's own time, not the time it spent queued (only a
//! slice that cuts into the kernel itself is inside it, which the daemon's settlement of
//! overlapping time takes care of). Without a START (the driver refused one) the kernel's
//! time is `elapsed(previous END, END)`. Completed ENDs are harvested in stream order at
//! gated launches, in the gate's wait loop and after the application's synchronizations,
//! never as a synchronization of their own.
//!
//! Where the time lands on the node clock (for the busy bins the daemon settles overlap
//! with): each stream keeps an anchor event, a START, and bounds on when it ran. A START
//! cannot run before it was recorded (a lower bound), and an END found complete at a
//! harvest ran before that harvest (an upper bound, `now - elapsed(anchor, END)`); the
//! upper bound, tightened by every harvest, is the estimate. Without an anchor (no START
//! completed, or the driver cannot say), intervals end at the moment of the harvest.

use super::board;
use crate::fork_lock::{self, ForkGuard, ForkLock};
use crate::hooks::real;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use tessera_region::layout::{ComputeAccount, PRIORITY_ONLINE};
use tessera_region::{monotonic_ns, Region, MAX_DEVICES};

const SUCCESS: u32 = 0;
/// `CUDA_ERROR_NOT_READY`.
const NOT_READY: u32 = 600;
/// `CU_STREAM_LEGACY`, a handle for the legacy default stream valid everywhere.
pub(crate) const STREAM_LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`, the calling thread's per-thread default stream.
pub(crate) const STREAM_PER_THREAD: usize = 2;
/// Events kept for reuse per context, at most.
const POOL_MAX: usize = 64;
/// Estimates kept, at most (one per kernel function or graph launched).
const ESTIMATES_MAX: usize = 4096;

/// A CUDA event handle.
type Event = usize;

/// What a launch puts on the GPU, as the window counts it: the kernel's function or the
/// executable graph (whose measured time is known from its earlier launches), and the
/// GPU time it took a place in the window for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work {
    pub(crate) handle: usize,
    pub(crate) estimate_ns: u64,
}

/// Which stream a launch went to: the legacy default stream of a context, a thread's
/// per-thread default stream in a context, or a created stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StreamKey {
    Legacy { ctx: usize },
    PerThread { ctx: usize, thread: usize },
    Created(usize),
}

impl StreamKey {
    /// The key of `stream` as given to a launch (`per_thread`: a `_ptsz` entry point).
    pub(crate) fn of(stream: *mut c_void, per_thread: bool, ctx: usize) -> StreamKey {
        match stream as usize {
            0 if per_thread => StreamKey::PerThread {
                ctx,
                thread: thread_id(),
            },
            0 | STREAM_LEGACY => StreamKey::Legacy { ctx },
            STREAM_PER_THREAD => StreamKey::PerThread {
                ctx,
                thread: thread_id(),
            },
            s => StreamKey::Created(s),
        }
    }

    /// A handle that names the stream for the plain (not `_ptsz`) entry points.
    pub(crate) fn handle(self) -> *mut c_void {
        match self {
            StreamKey::Legacy { .. } => STREAM_LEGACY as *mut c_void,
            StreamKey::PerThread { .. } => STREAM_PER_THREAD as *mut c_void,
            StreamKey::Created(s) => s as *mut c_void,
        }
    }
}

/// The calling thread, as a number unique among live threads.
fn thread_id() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// A START event and the node-clock time at which it was recorded (it ran then or later).
type Start = (Event, u64);

/// A stream's anchor: a completed START and bounds on when it ran, on the node clock.
#[derive(Clone, Copy)]
struct Anchor {
    event: Event,
    /// It ran no earlier than this.
    lower: u64,
    /// It ran no later than this: the estimate.
    upper: u64,
}

/// An anchor is moved to a newer START after this much GPU time: `cuEventElapsedTime`
/// answers in `f32` milliseconds, whose resolution coarsens as the span grows (60 ns at
/// one second).
const REANCHOR_NS: u64 = 1_000_000_000;

impl Anchor {
    /// When `at_gpu` ns after the anchor ran, on the node clock.
    fn at(&self, at_gpu: u64) -> u64 {
        self.upper.max(self.lower) + at_gpu
    }

    /// Learns from an event `at_gpu` ns after the anchor that was recorded at `recorded`
    /// (a START) and found complete at `seen` (by a harvest).
    fn bound(&mut self, at_gpu: u64, recorded: Option<u64>, seen: u64) {
        if let Some(r) = recorded {
            self.lower = self.lower.max(r.saturating_sub(at_gpu));
        }
        self.upper = self.upper.min(seen.saturating_sub(at_gpu));
    }
}

/// One admitted launch being measured.
struct Mark {
    /// Recorded before the kernel.
    start: Option<Start>,
    end: Event,
    /// What was launched, and the place it took in the window.
    work: Work,
}

/// What is measured on one stream.
struct Track {
    ctx: usize,
    device: usize,
    pending: VecDeque<Mark>,
    /// The END of the last harvested launch, the start of the next one without a START.
    prev_end: Option<Event>,
    /// Where the stream's intervals are put on the node clock.
    anchor: Option<Anchor>,
}

/// What this process measures.
#[derive(Default)]
struct Book {
    /// The fork generation it belongs to; a fork child starts afresh.
    generation: u32,
    tracks: HashMap<StreamKey, Track>,
    /// Idle events per context.
    pool: HashMap<usize, Vec<Event>>,
    /// The measured GPU time of each kind of work, by handle ([`estimate`]).
    estimates: HashMap<usize, u64>,
}

/// Marks pending in this process, all streams together: lets a synchronization skip the
/// harvest with one load when nothing is measured.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Launches this process has in flight per device, and their estimated GPU time (its part
/// of the region's `inflight` and `inflight_ns`; its own window in local mode).
static MINE: [AtomicU32; MAX_DEVICES] = [const { AtomicU32::new(0) }; MAX_DEVICES];
static MINE_NS: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The book; a fork child finds it afresh (see [`Guard::book`]).
static BOOK: ForkLock<Option<Book>> = ForkLock::new(None);

struct Guard(ForkGuard<'static, Option<Book>>);

impl Guard {
    fn book(&mut self) -> &mut Book {
        let generation = fork_lock::generation();
        let book = self.0.get_or_insert_with(Book::default);
        if book.generation != generation {
            // A fork child: the parent's streams, events and contexts are not its own.
            *book = Book {
                generation,
                ..Book::default()
            };
        }
        book
    }
}

fn lock() -> Guard {
    Guard(BOOK.lock())
}

/// Whether this process has launches being measured.
#[inline]
pub(crate) fn anything_pending() -> bool {
    // Relaxed: a hint; a harvest it skips happens at the next gated launch or sync.
    PENDING.load(Ordering::Relaxed) != 0
}

/// Takes a place in this process's own window on `device` (local mode), by the limits of
/// the container's account `acct`.
pub(crate) fn enter_mine(acct: &ComputeAccount, device: usize, estimate_ns: u64) -> bool {
    match (MINE.get(device), MINE_NS.get(device)) {
        (Some(n), Some(ns)) => tessera_region::compute::enter_window(
            n,
            ns,
            acct.window_or_default(),
            acct.window_ns_or_default(),
            estimate_ns,
        ),
        _ => false,
    }
}

/// Counts an admitted launch in this process's part of the container's window.
pub(crate) fn join_mine(device: usize, estimate_ns: u64) {
    if let (Some(n), Some(ns)) = (MINE.get(device), MINE_NS.get(device)) {
        // Relaxed (both): this process's own counts; see `enter_window`.
        n.fetch_add(1, Ordering::Relaxed);
        ns.fetch_add(estimate_ns, Ordering::Relaxed);
    }
}

/// Takes `launches` launches estimated at `estimate_ns` in all off this process's counts.
pub(crate) fn leave_mine(device: usize, launches: u32, estimate_ns: u64) {
    if let (Some(n), Some(ns)) = (MINE.get(device), MINE_NS.get(device)) {
        tessera_region::compute::leave_window(n, ns, launches, estimate_ns);
    }
}

/// Takes `launches` completed (or failed) launches estimated at `estimate_ns` in all off
/// this process's and the container's windows.
pub(crate) fn uncount(region: &Region, device: usize, launches: u32, estimate_ns: u64) {
    leave_mine(device, launches, estimate_ns);
    region.compute(device).leave_window(launches, estimate_ns);
}

/// The estimated GPU time of `work` (a kernel's function or an executable graph): what its
/// launches measured lately, or `None` before the first one completes.
pub(crate) fn estimate(work: usize) -> Option<u64> {
    let mut guard = lock();
    guard.book().estimates.get(&work).copied()
}

/// Learns from a launch of `work` that measured `ns`. A measurement is the work's own time
/// plus any other context's time slice that cut into it, so the estimate follows shorter
/// measurements at once and longer ones by a quarter of the difference: it stays near the
/// work's own time while neighbours cut into it, so a window sized by it keeps the GPU
/// busy, and work that really grew is learnt within a few launches (meanwhile the window's
/// count of launches bounds what a low estimate lets in).
fn learn(estimates: &mut HashMap<usize, u64>, work: usize, ns: u64) {
    if estimates.len() >= ESTIMATES_MAX && !estimates.contains_key(&work) {
        // Handles of work long unloaded accumulate in a program that compiles kernels as it
        // goes: start over rather than grow without end.
        estimates.clear();
    }
    let e = estimates.entry(work).or_insert(ns);
    *e = if ns <= *e { ns } else { *e + (ns - *e) / 4 };
}

/// An event of context `ctx` (current on this thread), from the pool or new.
fn take_event(book: &mut Book, ctx: usize) -> Option<Event> {
    if let Some(e) = book.pool.get_mut(&ctx).and_then(Vec::pop) {
        return Some(e);
    }
    let create = real::cuEventCreate::real()?;
    let mut e: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one handle to our local; flags 0 keep timing on.
    (unsafe { create(&mut e, 0) } == SUCCESS && !e.is_null()).then_some(e as usize)
}

fn give_event(book: &mut Book, ctx: usize, e: Event) {
    let pool = book.pool.entry(ctx).or_default();
    if pool.len() < POOL_MAX {
        pool.push(e);
    }
    // Past the pool's size the event is left alive: destroying it here could race with a
    // thread still synchronizing on it (see `oldest_end`). Rare, and bounded by launches.
}

fn record(e: Event, stream: *mut c_void) -> bool {
    let Some(record) = real::cuEventRecord::real() else {
        return false;
    };
    // SAFETY: an event of the current context and a stream handle the driver just accepted
    // (or a special handle valid everywhere).
    unsafe { record(e as *mut c_void, stream) == SUCCESS }
}

/// Before an admitted launch on `key`: records a START. Returns it, to pass to
/// [`after_launch`].
pub(crate) fn before_launch(key: StreamKey, ctx: usize, device: usize) -> Option<Start> {
    let mut guard = lock();
    let book = guard.book();
    let track = book.tracks.entry(key).or_insert_with(|| Track {
        ctx,
        device,
        pending: VecDeque::new(),
        prev_end: None,
        anchor: None,
    });
    if track.ctx != ctx || track.device != device {
        // The handle now names a stream of another context: start over on it.
        track.ctx = ctx;
        track.device = device;
        track.prev_end = None;
        track.anchor = None;
    }
    let e = take_event(book, ctx)?;
    let at = monotonic_ns();
    if record(e, key.handle()) {
        Some((e, at))
    } else {
        give_event(book, ctx, e);
        None
    }
}

/// After the launch: records the END, or gives the START back if the launch failed or
/// the END cannot be recorded. Returns whether the launch is being measured (if not, the
/// caller takes it off the in-flight counts).
pub(crate) fn after_launch(
    key: StreamKey,
    ctx: usize,
    start: Option<Start>,
    work: Work,
    launched: bool,
) -> bool {
    let mut guard = lock();
    let book = guard.book();
    let end = if launched {
        take_event(book, ctx).filter(|&e| {
            let ok = record(e, key.handle());
            if !ok {
                give_event(book, ctx, e);
            }
            ok
        })
    } else {
        None
    };
    let Some(end) = end else {
        if let Some((s, _)) = start {
            give_event(book, ctx, s);
        }
        return false;
    };
    let Some(track) = book.tracks.get_mut(&key) else {
        return false;
    };
    track.pending.push_back(Mark { start, end, work });
    // Relaxed: see `anything_pending`.
    PENDING.fetch_add(1, Ordering::Relaxed);
    true
}

/// Whether an event's work has completed: `Some(true)` done, `Some(false)` not yet,
/// `None` if the driver no longer knows it (its context is gone).
fn query_done(e: Event) -> Option<bool> {
    let query = real::cuEventQuery::real()?;
    // SAFETY: an event handle this library created; a destroyed one is an error code.
    match unsafe { query(e as *mut c_void) } {
        SUCCESS => Some(true),
        NOT_READY => Some(false),
        _ => None,
    }
}

fn elapsed_ns(from: Event, to: Event) -> Option<u64> {
    let elapsed = real::cuEventElapsedTime::real()?;
    let mut ms = 0f32;
    // SAFETY: writes one float to our local; both events are ours and complete.
    let rc = unsafe { elapsed(&mut ms, from as *mut c_void, to as *mut c_void) };
    (rc == SUCCESS && ms.is_finite() && ms >= 0.0).then(|| (f64::from(ms) * 1e6) as u64)
}

/// Harvests every completed END of this process: charges the container's bucket, busy bins
/// and measured time on the device, and takes the launches off the in-flight counts. Wakes
/// the device's gate when launches were taken off and someone waits. With `idle_check`
/// (after a synchronization) it also clears `active` where nothing is left in flight or
/// waiting; the launch gate passes `false`, since the launch it harvests for is work of its
/// own (clearing there would drop the flag in the middle of a burst of launches). Returns
/// how many launches completed.
pub(crate) fn harvest(region: &Region, idle_check: bool) -> usize {
    if !anything_pending() {
        return 0;
    }
    let mut done = [(0u32, 0u64); MAX_DEVICES];
    let mut total = 0;
    {
        let mut guard = lock();
        let book = guard.book();
        let Book {
            tracks,
            pool,
            estimates,
            ..
        } = book;
        for track in tracks.values_mut() {
            while let Some(mark) = track.pending.front() {
                let state = query_done(mark.end);
                // Read after the query: the END had completed by then, so this is an upper
                // bound on when it ran. A clock read before the query is not (the thread may
                // be descheduled between the two while the END completes), and one such
                // sample would pull the stream's anchor early for good.
                let now = monotonic_ns();
                if state == Some(false) {
                    break;
                }
                let mark = track.pending.pop_front().expect("front exists");
                // Relaxed: see `anything_pending`.
                PENDING.fetch_sub(1, Ordering::Relaxed);
                if let Some((n, ns)) = done.get_mut(track.device) {
                    *n += 1;
                    *ns += mark.work.estimate_ns;
                }
                total += 1;
                let recycle = pool.entry(track.ctx).or_default();
                let mut retire = |e: Event| {
                    if recycle.len() < POOL_MAX {
                        recycle.push(e);
                    }
                };
                if state != Some(true) {
                    // Its context is gone: nothing to measure, nothing to reuse.
                    track.prev_end = None;
                    track.anchor = None;
                    continue;
                }
                let from = mark.start.map(|(s, _)| s).or(track.prev_end);
                let ns = from.and_then(|f| elapsed_ns(f, mark.end)).unwrap_or(0);
                if mark.start.is_some() {
                    learn(estimates, mark.work.handle, ns);
                }
                let (start_at, end_at) = place(&mut track.anchor, &mark, ns, now, &mut retire);
                if let Some(prev) = track.prev_end.replace(mark.end) {
                    retire(prev);
                }
                if ns > 0 && track.device < MAX_DEVICES {
                    let acct = region.compute(track.device);
                    acct.charge(ns);
                    acct.add_span(start_at, end_at);
                }
            }
        }
    }
    for (device, &(n, ns)) in done.iter().enumerate() {
        if n > 0 {
            uncount(region, device, n, ns);
            if idle_check {
                settle_active(region, device);
            }
            region.compute(device).wake_gate();
        }
    }
    total
}

/// Where a harvested launch ran on the node clock, `(start, end)`: from the stream's anchor,
/// which the launch's own events first tighten (or become, for the stream's first START
/// and once the anchor is [`REANCHOR_NS`] old). Without an anchor, it ended at `now`.
/// Events the anchor no longer needs go to `retire`.
fn place(
    anchor: &mut Option<Anchor>,
    mark: &Mark,
    ns: u64,
    now: u64,
    retire: &mut impl FnMut(Event),
) -> (u64, u64) {
    if let Some((start, recorded)) = mark.start {
        match *anchor {
            None => {
                *anchor = Some(Anchor {
                    event: start,
                    lower: recorded,
                    upper: u64::MAX,
                })
            }
            Some(mut a) => match elapsed_ns(a.event, start) {
                Some(g) => {
                    a.bound(g, Some(recorded), u64::MAX);
                    if g >= REANCHOR_NS {
                        retire(a.event);
                        a = Anchor {
                            event: start,
                            lower: a.lower.saturating_add(g),
                            upper: a.upper.saturating_add(g),
                        };
                    } else {
                        retire(start);
                    }
                    *anchor = Some(a);
                }
                // The anchor is unusable (a reset context): start again from this START.
                None => {
                    retire(a.event);
                    *anchor = Some(Anchor {
                        event: start,
                        lower: recorded,
                        upper: u64::MAX,
                    });
                }
            },
        }
    }
    let Some(a) = anchor.as_mut() else {
        return (now.saturating_sub(ns), now);
    };
    let Some(g) = elapsed_ns(a.event, mark.end) else {
        return (now.saturating_sub(ns), now);
    };
    a.bound(g, None, now);
    let end = a.at(g).min(now);
    (end.saturating_sub(ns), end)
}

/// Clears the device's `active` flag when the container has nothing in flight or waiting
/// (and, for an online container, wakes `controld`'s preemption thread).
pub(crate) fn settle_active(region: &Region, device: usize) {
    let acct = region.compute(device);
    // Relaxed (loads): momentary figures; a launch racing with the clear raises the flag
    // again at its next launch, and the daemon also reads `inflight` and `waiting`.
    if acct.inflight.load(Ordering::Relaxed) == 0 && acct.waiting.load(Ordering::Relaxed) == 0 {
        // Relaxed: see above.
        let cleared = acct
            .active
            .compare_exchange(1, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        // Relaxed: a setting of the daemon's, read afresh each time. An online container
        // wakes the daemon's preemption thread, which lifts the offline blocks at once.
        if cleared && acct.priority.load(Ordering::Relaxed) == PRIORITY_ONLINE {
            board::clear(acct, device);
            // SeqCst: a launch on another thread may have raised the flag again between
            // the clear above and the board's: its bit must stand.
            if acct.active.load(Ordering::SeqCst) != 0 {
                board::raise(acct, device);
            }
            acct.wake_active();
        }
    }
}

/// The oldest END this process is waiting for on `device`, to wait on when its window is
/// full. The event may be recycled meanwhile; waiting on it then waits for a later launch
/// of this process, which is also fine.
pub(crate) fn oldest_end(device: usize) -> Option<Event> {
    let mut guard = lock();
    let book = guard.book();
    book.tracks
        .values()
        .filter(|t| t.device == device)
        .filter_map(|t| t.pending.front().map(|m| m.end))
        .next()
}

/// Waits for an event with the real `cuEventSynchronize`.
pub(crate) fn wait_event(e: Event) {
    if let Some(sync) = real::cuEventSynchronize::real() {
        // SAFETY: an event handle this library created; a stale one returns an error.
        unsafe { sync(e as *mut c_void) };
    }
}

/// In a fork child: the parent's measurements are not the child's. Async-signal-safe:
/// atomic stores only (the book itself is replaced at its next use, by generation).
pub(crate) fn after_fork_in_child() {
    // Relaxed throughout: the child has one thread until it returns from fork.
    PENDING.store(0, Ordering::Relaxed);
    for m in &MINE {
        m.store(0, Ordering::Relaxed);
    }
    for m in &MINE_NS {
        m.store(0, Ordering::Relaxed);
    }
}
