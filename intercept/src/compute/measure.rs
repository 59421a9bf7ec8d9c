//! GPU time measured on the application's own streams with CUDA events, at about one driver
//! call per many launches.
//!
//! A GPU stamps an event when it reaches it in its stream, and reaches it only while the
//! context holds the engine. Launches on a stream are measured in *groups*: the launches
//! admitted one after another while the stream's queue is deep, closed by one END event
//! recorded right after the group's last launch. A group that starts on an idle stream
//! (by the estimates, see below) gets a START event before its first launch; any other
//! group starts where the previous group's END ran, since its first kernel queued behind
//! that group (or, if the stream drained meanwhile after all, no earlier than the launch).
//! So a group's interval is the time its kernels held the GPU, plus any other context's
//! time slice that cut into them, which the daemon's settlement takes out.
//!
//! A group closes when it holds [`GROUP_LAUNCHES`] launches or a part of the window's time,
//! when the stream's queue may drain before the next launch comes (by the estimates and the
//! last gap between launches: then the END goes in right behind the last kernel, never
//! after an idle gap), before the application synchronizes, and before the gate waits for
//! room. Deep queues thus cost one record per group; a launch on an idle stream costs a
//! START and an END.
//!
//! Groups are harvested when their END is due by the estimates (every gated launch looks at
//! one word first), while the gate waits, and after the application's synchronizations:
//! `cuEventElapsedTime` from the context's anchor ([`super::timeline`]) to the END both
//! places the group on the node clock and says whether it completed. What a harvested group
//! adds to the union of this process's busy time on the device ([`super::held`]) is charged
//! to the container's bucket and written as busy spans; its launches leave the window.
//!
//! The window counts time *held* in flight: per stream the estimates of its launches not yet
//! harvested, and for the process the longest of its streams' queues (streams run at once),
//! so that a container's streams run as concurrently under a share as alone. The container's
//! window adds its processes' parts (processes are different contexts, which the GPU
//! time-slices).

use super::board;
use super::estimate::Estimates;
use super::events::{self, Elapsed, Event, POOL_MAX};
use super::held::Held;
use super::timeline::{Anchor, REANCHOR_NS};
use crate::fork_lock::{self, ForkGuard, ForkLock};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tessera_cuda_abi::{CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
use tessera_region::layout::{ComputeAccount, COMPUTE_LOCAL, PRIORITY_ONLINE};
use tessera_region::{monotonic_ns, Region, MAX_DEVICES};

/// A group closes at this many launches: a bound on the launches one END frees.
const GROUP_LAUNCHES: u32 = 32;
/// ... or at this part of the window's GPU time, so that the window frees in steps small
/// enough to keep the GPU busy.
const GROUP_WINDOW_PARTS: u64 = 4;
/// ... or when its stream's queue holds less than this many of the last gap between two
/// launches (the next launch may come after the queue drained) ...
const DEFER_GAPS: u64 = 4;
/// ... or less than this.
const DEFER_MIN_NS: u64 = 50_000;
/// A group found not complete is asked again after half its estimate, within these bounds.
const RETRY_MIN_NS: u64 = 20_000;
const RETRY_MAX_NS: u64 = 1_000_000;
/// A group closed after its stream may have drained ran no later than its estimate after its
/// start plus this much: its END went in after an idle gap, which is not the group's.
const LATE_SLACK_NS: u64 = 2_000_000;

/// What a launch puts on the GPU, as the window counts it: the kernel's function or the
/// executable graph (whose held time is learnt from its earlier launches), and the GPU time
/// it took a place in the window for.
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
            0 | CU_STREAM_LEGACY => StreamKey::Legacy { ctx },
            CU_STREAM_PER_THREAD => StreamKey::PerThread {
                ctx,
                thread: thread_id(),
            },
            s => StreamKey::Created(s),
        }
    }

    /// A handle that names the stream for the plain (not `_ptsz`) entry points.
    pub(crate) fn handle(self) -> *mut c_void {
        match self {
            StreamKey::Legacy { .. } => CU_STREAM_LEGACY as *mut c_void,
            StreamKey::PerThread { .. } => CU_STREAM_PER_THREAD as *mut c_void,
            StreamKey::Created(s) => s as *mut c_void,
        }
    }
}

/// The calling thread, as a number unique among live threads.
fn thread_id() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// The kinds of work in a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kinds {
    None,
    One(usize),
    Many,
}

/// Launches measured together.
#[derive(Debug)]
struct Group {
    launches: u32,
    estimate_ns: u64,
    kinds: Kinds,
    /// Recorded before its first launch (the stream was idle), and when.
    start: Option<(Event, u64)>,
    /// When its first launch was made: its kernels ran no earlier.
    first_launch_ns: u64,
    /// Its one launch measured on its own, to learn that work's time.
    alone: bool,
}

impl Group {
    fn new(start: Option<(Event, u64)>, now: u64, alone: bool) -> Group {
        Group {
            launches: 0,
            estimate_ns: 0,
            kinds: Kinds::None,
            start,
            first_launch_ns: now,
            alone,
        }
    }

    fn add(&mut self, work: Work) {
        self.launches += 1;
        self.estimate_ns += work.estimate_ns;
        self.kinds = match self.kinds {
            Kinds::None => Kinds::One(work.handle),
            Kinds::One(h) if h == work.handle => Kinds::One(h),
            _ => Kinds::Many,
        };
    }
}

/// A closed group, its END recorded.
#[derive(Debug)]
struct Mark {
    group: Group,
    end: Event,
    /// When the END was recorded: it ran no earlier.
    recorded_ns: u64,
    /// When to ask whether it completed.
    due_ns: u64,
    /// Closed after its stream may have drained.
    late: bool,
}

/// What is measured on one stream.
#[derive(Debug)]
struct Track {
    ctx: usize,
    device: usize,
    /// Launches admitted whose END is not recorded yet.
    open: Option<Group>,
    /// Closed groups, oldest first.
    pending: VecDeque<Mark>,
    /// The estimates of every launch of the stream not harvested yet: its queue.
    queued_ns: u64,
    /// When its queue drains, by the estimates (node clock).
    busy_until: u64,
    /// Its last launch, and the gap before it.
    last_launch_ns: u64,
    gap_ns: u64,
    /// Launches made on it so far: an application's event recorded after launch `n` stands
    /// for the stream's whole queue while no launch came after it.
    launches: u64,
    /// Where its last harvested END ran, as an offset from its context's anchor.
    prev_end: Option<i64>,
}

impl Track {
    fn new(ctx: usize, device: usize) -> Track {
        Track {
            ctx,
            device,
            open: None,
            pending: VecDeque::new(),
            queued_ns: 0,
            busy_until: 0,
            last_launch_ns: 0,
            gap_ns: u64::MAX,
            launches: 0,
            prev_end: None,
        }
    }
}

/// A context's anchor and idle events.
#[derive(Debug, Default)]
struct Clock {
    anchor: Option<Anchor>,
    pool: Vec<Event>,
}

/// This process's part of a device's window: its launches in flight, and the time they hold
/// (its longest stream queue), as added to the container's account.
#[derive(Debug, Default, Clone, Copy)]
struct Mine {
    launches: u32,
    held_ns: u64,
}

/// What this process measures.
#[derive(Default)]
struct Book {
    /// The fork generation it belongs to; a fork child starts afresh.
    generation: u32,
    tracks: HashMap<StreamKey, Track>,
    clocks: HashMap<usize, Clock>,
    estimates: Estimates,
    held: Vec<Held>,
    mine: [Mine; MAX_DEVICES],
    /// The application's events: the stream each was last recorded on, and how many
    /// launches that stream had then.
    app_events: HashMap<usize, (StreamKey, u64)>,
    /// Scratch for the fresh pieces of a harvested interval.
    fresh: Vec<(u64, u64)>,
}

/// The earliest time a pending group is due to be asked about (node clock): a gated launch
/// harvests only once it has passed, without taking the lock before.
static NEXT_DUE: AtomicU64 = AtomicU64::new(u64::MAX);

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

/// Lowers [`NEXT_DUE`] to `due`.
fn due_by(due: u64) {
    // Relaxed: a hint; a harvest that comes a moment late loses nothing.
    NEXT_DUE.fetch_min(due, Ordering::Relaxed);
}

impl Book {
    /// An event of context `ctx` (current on this thread), from the pool or new.
    fn take_event(&mut self, ctx: usize) -> Option<Event> {
        if let Some(e) = self.clocks.get_mut(&ctx).and_then(|c| c.pool.pop()) {
            return Some(e);
        }
        events::create()
    }

    /// The longest queue of this process's streams on `device`.
    fn longest_queue(&self, device: usize) -> u64 {
        self.tracks
            .values()
            .filter(|t| t.device == device)
            .map(|t| t.queued_ns)
            .max()
            .unwrap_or(0)
    }

    /// After the queues on `device` changed: this process's held time there, and the change
    /// given to (or taken from) the container's account, with `launches` more (or fewer).
    fn refigure(&mut self, region: &Region, device: usize, launches: i64) {
        let Some(mine) = self.mine.get(device).copied() else {
            return;
        };
        let held = self.longest_queue(device);
        let acct = region.compute(device);
        let more = u32::try_from(launches.max(0)).unwrap_or(u32::MAX);
        let fewer = u32::try_from((-launches).max(0)).unwrap_or(u32::MAX);
        if held >= mine.held_ns {
            acct.join_window_by(more, held - mine.held_ns);
            acct.leave_window(fewer, 0);
        } else {
            acct.join_window_by(more, 0);
            acct.leave_window(fewer, mine.held_ns - held);
        }
        self.mine[device] = Mine {
            launches: (i64::from(mine.launches) + launches).max(0) as u32,
            held_ns: held,
        };
    }

    /// Closes the open group of the track at `key`: records its END. A group whose END
    /// cannot be recorded leaves the window unmeasured.
    fn close(&mut self, region: &Region, key: StreamKey, now: u64) {
        let Some(track) = self.tracks.get(&key) else {
            return;
        };
        let (ctx, device) = (track.ctx, track.device);
        if track.open.is_none() {
            return;
        }
        let end = self
            .take_event(ctx)
            .filter(|&e| events::record(e, key.handle()));
        let Some(track) = self.tracks.get_mut(&key) else {
            return;
        };
        let Some(group) = track.open.take() else {
            return;
        };
        // Relaxed: see `anything_in_flight`.
        OPEN_GROUPS.fetch_sub(1, Ordering::Relaxed);
        let late = track.busy_until <= now;
        match end {
            Some(end) => {
                let due = track.busy_until.max(now);
                track.pending.push_back(Mark {
                    group,
                    end,
                    recorded_ns: now,
                    due_ns: due,
                    late,
                });
                // Relaxed: see `anything_in_flight`.
                PENDING.fetch_add(1, Ordering::Relaxed);
                due_by(due);
            }
            None => {
                // Not measurable: it leaves the window now.
                track.queued_ns = track.queued_ns.saturating_sub(group.estimate_ns);
                let launches = group.launches;
                if let Some((start, _)) = group.start {
                    self.give_event(ctx, start);
                }
                self.refigure(region, device, -i64::from(launches));
            }
        }
    }

    fn give_event(&mut self, ctx: usize, e: Event) {
        let pool = &mut self.clocks.entry(ctx).or_default().pool;
        if pool.len() < POOL_MAX {
            pool.push(e);
        }
        // Past the pool's size the event is left alive: destroying it here could race with
        // a thread still synchronizing on it (see `oldest_end`). Rare, and bounded.
    }
}

/// A launch admitted into the window, to hand to [`launched`] with the driver's answer.
#[derive(Debug)]
pub(crate) struct Admission {
    key: StreamKey,
    ctx: usize,
    device: usize,
    work: Work,
    /// Recorded before the launch: the stream was idle.
    start: Option<(Event, u64)>,
    alone: bool,
}

impl Admission {
    /// The device the launch was admitted on.
    pub(crate) fn device(&self) -> usize {
        self.device
    }
}

/// The estimated GPU time of a launch of `work` (a kernel's function or an executable
/// graph), `None` before its first measurement, and whether this launch is to be measured
/// on its own (counts the launch).
pub(crate) fn estimate(work: usize) -> (Option<u64>, bool) {
    let mut guard = lock();
    let book = guard.book();
    let alone = book.estimates.launch(work);
    (book.estimates.get(work), alone)
}

/// Why [`enter`] took no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// The window is full.
    Window,
    /// The launch would hold the GPU longer than what is in flight already, and there is no
    /// credit for that.
    Credit,
}

/// Takes a place in the window on `device` for a launch of `work` on `key` (in context
/// `ctx`), by the container's window (with a daemon) or this process's (`local`: so that a
/// process killed with launches in flight cannot hold the others' window). Without credit
/// (`no_credit`: the bucket is empty), only a launch that adds nothing to the time this
/// process holds in flight may go: a stream shorter than the longest runs beside it, as it
/// would alone, and is paid for by the union the harvest charges. A place is given back
/// with [`launched`] or [`leave`].
#[allow(clippy::too_many_arguments)] // a launch's whole description
pub(crate) fn enter(
    region: &Region,
    acct: &ComputeAccount,
    device: usize,
    key: StreamKey,
    ctx: usize,
    work: Work,
    alone: bool,
    local: bool,
    no_credit: bool,
) -> Result<Admission, NoRoom> {
    if device >= MAX_DEVICES {
        return Err(NoRoom::Window);
    }
    let mut guard = lock();
    let book = guard.book();
    let track = book
        .tracks
        .entry(key)
        .or_insert_with(|| Track::new(ctx, device));
    if track.ctx != ctx || track.device != device {
        // The handle now names a stream of another context: start over on it once what
        // was measured on the old one is harvested (or dropped as gone).
        if !track.pending.is_empty() || track.open.is_some() {
            return Err(NoRoom::Window);
        }
        *track = Track::new(ctx, device);
    }
    let now = monotonic_ns();
    let (queued, idle, has_open) = (
        track.queued_ns,
        track.busy_until <= now,
        track.open.is_some(),
    );
    let mine = book.mine[device];
    let held = mine.held_ns.max(queued + work.estimate_ns);
    let more = held - mine.held_ns;
    if no_credit && (more > 0 || mine.launches == 0) {
        return Err(NoRoom::Credit);
    }
    let room = if local {
        mine.launches < acct.window_or_default()
            && (mine.held_ns == 0 || held <= acct.window_ns_or_default())
    } else {
        acct.enter_window(more)
    };
    if !room {
        return Err(NoRoom::Window);
    }
    if local {
        acct.join_window_by(1, more);
    }
    book.mine[device] = Mine {
        launches: mine.launches + 1,
        held_ns: held,
    };
    if let Some(track) = book.tracks.get_mut(&key) {
        track.queued_ns += work.estimate_ns;
    }
    // A launch measured alone needs an END right before it; a launch onto a stream that
    // drained needs the open group closed (late) and a START.
    if has_open && (alone || idle) {
        book.close(region, key, now);
    }
    let start = if idle {
        book.take_event(ctx).and_then(|e| {
            if events::record(e, key.handle()) {
                Some((e, monotonic_ns()))
            } else {
                book.give_event(ctx, e);
                None
            }
        })
    } else {
        None
    };
    Ok(Admission {
        key,
        ctx,
        device,
        work,
        start,
        alone,
    })
}

/// Gives back the place `a` took (a launch stopped after all, or refused by the driver).
pub(crate) fn leave(region: &Region, a: Admission) {
    let mut guard = lock();
    let book = guard.book();
    if let Some(track) = book.tracks.get_mut(&a.key) {
        track.queued_ns = track.queued_ns.saturating_sub(a.work.estimate_ns);
    }
    if let Some((start, _)) = a.start {
        book.give_event(a.ctx, start);
    }
    book.refigure(region, a.device, -1);
}

/// After the launch of `a` returned `ok`: adds it to its stream's open group and closes the
/// group when it should (see the module's comment); a failed launch leaves the window.
pub(crate) fn launched(region: &Region, a: Admission, ok: bool) {
    if !ok {
        leave(region, a);
        return;
    }
    let window_ns = region.compute(a.device).window_ns_or_default();
    let mut guard = lock();
    let book = guard.book();
    let now = monotonic_ns();
    let mut unused_start = None;
    let close = {
        let Some(track) = book.tracks.get_mut(&a.key) else {
            return;
        };
        let group = match track.open.as_mut() {
            Some(group) => {
                // Another thread opened a group on this stream meanwhile: it holds this
                // launch too, and this START is not needed.
                unused_start = a.start.map(|(s, _)| s);
                group
            }
            None => {
                // Relaxed: see `anything_in_flight`.
                OPEN_GROUPS.fetch_add(1, Ordering::Relaxed);
                track.open.insert(Group::new(a.start, now, a.alone))
            }
        };
        group.add(a.work);
        let (alone, launches, estimate) = (group.alone, group.launches, group.estimate_ns);
        track.busy_until = track.busy_until.max(now) + a.work.estimate_ns;
        track.gap_ns = now.saturating_sub(track.last_launch_ns);
        track.last_launch_ns = now;
        track.launches += 1;
        let left = track.busy_until - now;
        alone
            || launches >= GROUP_LAUNCHES
            || estimate >= window_ns / GROUP_WINDOW_PARTS
            || left < track.gap_ns.saturating_mul(DEFER_GAPS).max(DEFER_MIN_NS)
    };
    if let Some(s) = unused_start {
        book.give_event(a.ctx, s);
    }
    if close {
        book.close(region, a.key, now);
    }
}

/// Which open groups to close.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope {
    /// The groups of one stream.
    Stream(StreamKey),
    /// The groups of one context's streams.
    Context(usize),
    /// The groups on one device.
    Device(usize),
    /// The group an application's event waits for, if that event was recorded after the
    /// last launch on its stream (else the stream's queue goes on past it); every group if
    /// the event is not known.
    Event(usize),
    /// Every group.
    All,
}

/// The most application events remembered; past it they are forgotten (a synchronization
/// on a forgotten event closes every open group: a record more per stream).
const APP_EVENTS_MAX: usize = 4096;

/// Notes that the application recorded its event `event` on `stream` (`per_thread`: a
/// `_ptsz` entry point), in context `ctx`.
pub(crate) fn app_event_recorded(event: usize, stream: *mut c_void, per_thread: bool, ctx: usize) {
    let key = StreamKey::of(stream, per_thread, ctx);
    let mut guard = lock();
    let book = guard.book();
    let Some(track) = book.tracks.get(&key) else {
        // No launch measured on that stream: nothing of ours for it to stand for.
        book.app_events.remove(&event);
        return;
    };
    let launches = track.launches;
    if book.app_events.len() >= APP_EVENTS_MAX && !book.app_events.contains_key(&event) {
        book.app_events.clear();
    }
    book.app_events.insert(event, (key, launches));
}

/// Closes the open groups in `scope` (before a synchronization or a wait: their kernels are
/// still queued, so their ENDs go right behind them).
pub(crate) fn close_open(region: &Region, scope: Scope) {
    let mut guard = lock();
    let book = guard.book();
    let scope = match scope {
        Scope::Event(e) => match book.app_events.get(&e) {
            Some(&(key, launches)) => match book.tracks.get(&key) {
                Some(t) if t.launches == launches => Scope::Stream(key),
                // Launched on since, or nothing of ours there: its queue goes on.
                _ => return,
            },
            None => Scope::All,
        },
        other => other,
    };
    let keys: Vec<StreamKey> = book
        .tracks
        .iter()
        .filter(|(k, t)| {
            t.open.is_some()
                && match scope {
                    Scope::Stream(s) => **k == s,
                    Scope::Context(c) => t.ctx == c,
                    Scope::Device(d) => t.device == d,
                    Scope::Event(_) | Scope::All => true,
                }
        })
        .map(|(k, _)| *k)
        .collect();
    let now = monotonic_ns();
    for key in keys {
        book.close(region, key, now);
    }
}

/// When to harvest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Harvest {
    /// Only groups due by the estimates, and at most once every [`HARVEST_EVERY_NS`] (a
    /// gated launch).
    Due,
    /// Every group, oldest first on each stream, until one has not completed (a wait, a
    /// synchronization).
    All,
}

/// A gated launch harvests at most this often: the bucket learns what ran within this
/// long, well inside a refill period, and a process with many short groups pays a driver
/// call per harvest rather than per group.
const HARVEST_EVERY_NS: u64 = 250_000;

/// When this process last harvested (node clock).
static LAST_HARVEST: AtomicU64 = AtomicU64::new(0);

/// Harvests completed groups of this process: charges the container's bucket and busy
/// spans with what they add to the time this process held each device, takes their
/// launches out of the window, and wakes the device's gate when launches left it. With
/// `idle_check` (after a synchronization) it also clears `active` where nothing is left in
/// flight or waiting; the launch gate passes `false`, since the launch it harvests for is
/// work of its own. Returns how many launches completed.
pub(crate) fn harvest(region: &Region, how: Harvest, idle_check: bool) -> usize {
    if how == Harvest::Due {
        let now = monotonic_ns();
        // Relaxed (both): hints; a harvest that comes a moment late loses nothing.
        if now < NEXT_DUE.load(Ordering::Relaxed)
            || now < LAST_HARVEST.load(Ordering::Relaxed) + HARVEST_EVERY_NS
        {
            return 0;
        }
    }
    let mut done = [0u32; MAX_DEVICES];
    let mut total = 0;
    {
        let mut guard = lock();
        let book = guard.book();
        let now = monotonic_ns();
        // Relaxed: see above.
        LAST_HARVEST.store(now, Ordering::Relaxed);
        let keys: Vec<StreamKey> = book
            .tracks
            .iter()
            .filter(|(_, t)| !t.pending.is_empty())
            .map(|(k, _)| *k)
            .collect();
        let mut next_due = u64::MAX;
        for key in keys {
            if let Some((device, n)) = harvest_stream(book, region, key, how, now) {
                if let Some(d) = done.get_mut(device) {
                    *d += n;
                }
                total += n as usize;
            }
            if let Some(m) = book.tracks.get(&key).and_then(|t| t.pending.front()) {
                next_due = next_due.min(m.due_ns);
            }
        }
        // Relaxed: see `due_by`. Stored under the lock, with every pending group seen.
        NEXT_DUE.store(next_due, Ordering::Relaxed);
        book.tracks
            .retain(|_, t| t.open.is_some() || !t.pending.is_empty() || t.queued_ns > 0);
    }
    for (device, &n) in done.iter().enumerate() {
        if n > 0 {
            if idle_check {
                settle_active(region, device);
            }
            region.compute(device).wake_gate();
        }
    }
    total
}

/// The context's anchor, or a new one at `end` if `end` completed (its first completed END);
/// `None` while `end` has not completed, or if its context is gone (`Err`).
fn anchor_for(
    book: &mut Book,
    ctx: usize,
    end: Event,
    recorded: u64,
) -> Result<Option<Anchor>, ()> {
    if let Some(a) = book.clocks.get(&ctx).and_then(|c| c.anchor) {
        return Ok(Some(a));
    }
    match events::elapsed(end, end) {
        Elapsed::Done(_) => {
            let a = Anchor::new(end, recorded, monotonic_ns());
            book.clocks.entry(ctx).or_default().anchor = Some(a);
            Ok(Some(a))
        }
        Elapsed::Pending => Ok(None),
        Elapsed::Gone => Err(()),
    }
}

/// Where the END of `mark` ran, as an offset from the anchor (whose bounds a completed END
/// tightens), or why not.
fn offset_of(anchor: &mut Anchor, mark: &Mark) -> Elapsed {
    let answer = events::elapsed(anchor.event, mark.end);
    if let Elapsed::Done(g) = answer {
        // Read after the driver said the END completed: an upper bound on when it ran.
        anchor.bound(g, Some(mark.recorded_ns), Some(monotonic_ns()));
    }
    answer
}

/// Harvests the due groups of the stream at `key` that completed: the newest of them is
/// asked first (one driver call), then, if it has not completed, the oldest. Consecutive
/// groups are charged as one interval (their kernels queued back to back), split only
/// where a group started on an idle stream, was closed late, or is measured alone. Returns
/// the stream's device and the launches harvested.
fn harvest_stream(
    book: &mut Book,
    region: &Region,
    key: StreamKey,
    how: Harvest,
    now: u64,
) -> Option<(usize, u32)> {
    let (ctx, device, due) = {
        let t = book.tracks.get(&key)?;
        let due = match how {
            Harvest::All => t.pending.len(),
            Harvest::Due => t.pending.iter().take_while(|m| m.due_ns <= now).count(),
        };
        (t.ctx, t.device, due)
    };
    if due == 0 {
        return None;
    }
    let (end, recorded) = {
        let m = &book.tracks.get(&key)?.pending[0];
        (m.end, m.recorded_ns)
    };
    let mut anchor = match anchor_for(book, ctx, end, recorded) {
        Ok(Some(a)) => a,
        Ok(None) => {
            retry(book, key, 0, now);
            return None;
        }
        Err(()) => return Some(drop_stream(book, region, key)),
    };
    // The newest completed group among the due ones, and its END's offset.
    let mut newest = None;
    for i in [due - 1, 0] {
        let mark = &book.tracks.get(&key)?.pending[i];
        match offset_of(&mut anchor, mark) {
            Elapsed::Done(g) => {
                newest = Some((i, g));
                break;
            }
            Elapsed::Pending => retry(book, key, i, now),
            Elapsed::Gone => return Some(drop_stream(book, region, key)),
        }
        if due == 1 {
            break;
        }
    }
    book.clocks.entry(ctx).or_default().anchor = Some(anchor);
    let (last, last_offset) = newest?;
    let marks: Vec<Mark> = book.tracks.get_mut(&key)?.pending.drain(..=last).collect();
    // Relaxed: see `anything_in_flight`.
    PENDING.fetch_sub(marks.len(), Ordering::Relaxed);
    let launches: u32 = marks.iter().map(|m| m.group.launches).sum();
    let mut from = 0;
    while from < marks.len() {
        // A segment: from `from` to the first group that ends one.
        let mut to = from;
        while to + 1 < marks.len() && !splits(&marks[to], &marks[to + 1]) {
            to += 1;
        }
        let offset = if to == last {
            Some(last_offset)
        } else {
            match offset_of(&mut anchor, &marks[to]) {
                Elapsed::Done(g) => Some(g),
                _ => None,
            }
        };
        charge_segment(book, region, key, &mut anchor, &marks[from..=to], offset);
        from = to + 1;
    }
    // The anchor moves on to the newest END once it is far: its bounds carried, every
    // stream of the context re-based on it.
    let newest_end = marks[last].end;
    let mut retire: Vec<Event> = marks
        .iter()
        .flat_map(|m| [Some(m.end), m.group.start.map(|(s, _)| s)])
        .flatten()
        .filter(|&e| e != anchor.event)
        .collect();
    if last_offset >= REANCHOR_NS {
        retire.retain(|&e| e != newest_end);
        retire.push(anchor.event);
        anchor = anchor.moved_to(newest_end, last_offset);
        for t in book.tracks.values_mut().filter(|t| t.ctx == ctx) {
            t.prev_end = t.prev_end.map(|g| g - last_offset);
        }
    }
    book.clocks.entry(ctx).or_default().anchor = Some(anchor);
    for e in retire {
        book.give_event(ctx, e);
    }
    book.refigure(region, device, -i64::from(launches));
    Some((device, launches))
}

/// Whether the groups `a` then `b` of a stream are charged apart: `b` started on an idle
/// stream (its START says when), `a` was closed late (its END is clamped), or either is a
/// launch measured alone.
fn splits(a: &Mark, b: &Mark) -> bool {
    b.group.start.is_some() || a.late || a.group.alone || b.group.alone
}

/// Asks about the stream's `i`th pending group again later.
fn retry(book: &mut Book, key: StreamKey, i: usize, now: u64) {
    if let Some(m) = book.tracks.get_mut(&key).and_then(|t| t.pending.get_mut(i)) {
        let retry = (m.group.estimate_ns / 2).clamp(RETRY_MIN_NS, RETRY_MAX_NS);
        m.due_ns = m.due_ns.max(now + retry);
    }
}

/// The stream's context is gone: its groups leave the window unmeasured, its events are not
/// reused. Returns its device and the launches that left.
fn drop_stream(book: &mut Book, region: &Region, key: StreamKey) -> (usize, u32) {
    let Some(t) = book.tracks.get_mut(&key) else {
        return (0, 0);
    };
    let device = t.device;
    let launches: u32 = t.pending.iter().map(|m| m.group.launches).sum();
    // Relaxed: see `anything_in_flight`.
    PENDING.fetch_sub(t.pending.len(), Ordering::Relaxed);
    t.pending.clear();
    t.queued_ns = t.open.as_ref().map_or(0, |g| g.estimate_ns);
    t.prev_end = None;
    let ctx = t.ctx;
    book.clocks.remove(&ctx);
    book.refigure(region, device, -i64::from(launches));
    (device, launches)
}

/// Charges the completed groups `marks` of the stream at `key`, which ran back to back,
/// as one interval ending at `end` (an offset from `anchor`; `None` if the driver could not
/// say, when they are only taken off the queue), and learns from them.
fn charge_segment(
    book: &mut Book,
    region: &Region,
    key: StreamKey,
    anchor: &mut Anchor,
    marks: &[Mark],
    end: Option<i64>,
) {
    let Some(track) = book.tracks.get(&key) else {
        return;
    };
    let (device, prev_end) = (track.device, track.prev_end);
    let estimate: u64 = marks.iter().map(|m| m.group.estimate_ns).sum();
    let launches: u32 = marks.iter().map(|m| m.group.launches).sum();
    if let Some(t) = book.tracks.get_mut(&key) {
        t.queued_ns = t.queued_ns.saturating_sub(estimate);
        t.prev_end = end;
    }
    let (Some(first), Some(last), Some(end)) = (marks.first(), marks.last(), end) else {
        return;
    };
    let start = first
        .group
        .start
        .and_then(|(s, recorded)| match events::elapsed(anchor.event, s) {
            Elapsed::Done(g) => {
                anchor.bound(g, Some(recorded), None);
                Some(anchor.at(g))
            }
            _ => None,
        })
        .unwrap_or_else(|| {
            // Queued behind the previous group, or launched after it.
            let after_previous = prev_end.map_or(0, |g| anchor.at(g));
            after_previous.max(first.group.first_launch_ns)
        });
    let mut end = anchor.at(end);
    if last.late {
        let latest = start.saturating_add(estimate).saturating_add(LATE_SLACK_NS);
        end = end.min(latest);
    }
    let start = start.min(end);
    let ns = end - start;
    let kinds = marks
        .iter()
        .fold(Kinds::None, |k, m| match (k, m.group.kinds) {
            (Kinds::None, x) => x,
            (Kinds::One(a), Kinds::One(b)) if a == b => Kinds::One(a),
            _ => Kinds::Many,
        });
    if let (Kinds::One(work), Some(n)) = (kinds, std::num::NonZeroU64::new(launches.into())) {
        book.estimates.learn(work, ns / n);
    }
    // What is still queued behind these runs after them: the prediction of when the queue
    // drains follows the GPU where it runs slower than the estimates (a neighbour's slices,
    // estimates that follow the shortest measurements).
    if let Some(t) = book.tracks.get_mut(&key) {
        t.busy_until = t.busy_until.max(end.saturating_add(t.queued_ns));
    }
    let end = if is_local(region.compute(device)) {
        // No daemon settles the other containers' time slices out of this interval (they
        // cut into its kernels): what it held is what the estimates say, which follow the
        // shortest measurements.
        end.min(start.saturating_add(estimate))
    } else {
        end
    };
    charge(book, region, device, start, end);
}

/// Charges the container for what `[start, end)` adds to the time this process held
/// `device`, and writes those pieces as busy spans.
fn charge(book: &mut Book, region: &Region, device: usize, start: u64, end: u64) {
    if book.held.len() <= device {
        book.held.resize_with(device + 1, Held::default);
    }
    let fresh_ns = book.held[device].add(start, end, &mut book.fresh);
    if fresh_ns == 0 {
        return;
    }
    let acct = region.compute(device);
    acct.charge(fresh_ns);
    for &(s, e) in &book.fresh {
        acct.add_span(s, e);
    }
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

/// The oldest END this process is waiting for on `device`, to wait on when the window is
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
    events::synchronize(e);
}

/// Open groups and closed groups not harvested yet, in this process.
static OPEN_GROUPS: AtomicUsize = AtomicUsize::new(0);
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Whether this process measures launches (a synchronization then has groups to close and
/// harvest): one load or two when it does not.
#[inline]
pub(crate) fn anything_in_flight() -> bool {
    // Relaxed (both): counts kept under the book's lock; a hint here, since what a stale
    // answer skips is harvested at the next gated launch or synchronization.
    PENDING.load(Ordering::Relaxed) != 0 || OPEN_GROUPS.load(Ordering::Relaxed) != 0
}

/// Whether this process uses local mode on `acct`'s device.
pub(crate) fn is_local(acct: &ComputeAccount) -> bool {
    // Relaxed: a setting read afresh at every launch.
    acct.mode.load(Ordering::Relaxed) == COMPUTE_LOCAL
}

/// In a fork child: the parent's measurements are not the child's. Async-signal-safe:
/// atomic stores only (the book itself is replaced at its next use, by generation).
pub(crate) fn after_fork_in_child() {
    // Relaxed: the child has one thread until it returns from fork.
    NEXT_DUE.store(u64::MAX, Ordering::Relaxed);
    OPEN_GROUPS.store(0, Ordering::Relaxed);
    PENDING.store(0, Ordering::Relaxed);
}
