//! The executors: one thread per device of this process runs the work of every stream on
//! that device, in stream order, kernels on the device's engine.
//!
//! Every operation gets a sequence number when it is submitted. The executor runs, among the
//! heads of its stream queues, the runnable one with the lowest number: a wait on an event is
//! runnable once the awaited record has run, and the legacy default stream and the blocking
//! streams of its context wait for each other's earlier work (non-blocking streams do not).
//! Time is simulated time: a kernel is ready when it was submitted and its stream's previous
//! operation had ended, and the engine says when it ran; a record takes the time its kernel
//! ended, or the time its process next had the engine ([`Stamp`]), so that events measure
//! engine time.

pub(crate) mod registry;

use crate::ffi::{code, CUresult, DriverResult};
use crate::model::context::Context;
use crate::model::kernel::KernelLaunch;
use crate::model::records::Records;
use simgpu::clock::now_ns;
use simgpu::device::MAX_DEVICES;
use simgpu::node::Process;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, OnceLock};

/// Work that runs on the host, in stream order, and takes no engine time (copies, memsets,
/// frees, host functions). `Fn` so that a captured graph can replay it.
pub(crate) type HostWork = Arc<dyn Fn() + Send + Sync>;

/// One operation of a stream.
pub(crate) enum Work {
    /// A kernel: engine time, then its effect on memory.
    Kernel(Arc<KernelLaunch>),
    /// Host work.
    Host(HostWork),
    /// A stream callback, told the context's error state.
    Callback(Box<dyn FnOnce(CUresult) + Send>),
    /// The `n`th record of an event.
    Record(Arc<Records>, u64),
    /// Waits until the `n`th record of an event has run.
    Wait(Arc<Records>, u64),
    /// Stops the executor until a host thread, which does synchronous work, lets it go.
    Rendezvous(Ticket),
    /// Nothing: a point in the stream to wait for.
    Marker,
}

/// How a stream synchronizes with the others of its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// The context's legacy default stream: waits for, and is waited for by, blocking streams.
    Legacy,
    /// A thread's per-thread default stream: blocking, otherwise like a created stream.
    PerThread,
    /// A created stream without `CU_STREAM_NON_BLOCKING`.
    Blocking,
    /// A created stream with `CU_STREAM_NON_BLOCKING`.
    NonBlocking,
}

impl StreamKind {
    /// Whether it synchronizes implicitly with the legacy default stream.
    pub(crate) fn syncs_with_legacy(self) -> bool {
        matches!(self, StreamKind::Blocking | StreamKind::PerThread)
    }
}

/// A stream as its executor knows it: the key of its queue, its context, and how it
/// synchronizes with the other streams of the context.
#[derive(Clone, Copy)]
pub(crate) struct Lane<'a> {
    pub(crate) id: u64,
    pub(crate) ctx: &'a Arc<Context>,
    pub(crate) kind: StreamKind,
}

struct Op {
    seq: u64,
    submit_ns: u64,
    work: Work,
}

struct Queue {
    /// The stream's context, kept alive while the queue has work.
    ctx: Arc<Context>,
    kind: StreamKind,
    ops: VecDeque<Op>,
    /// When the stream's last operation ended, in simulated time.
    last_end_ns: u64,
    /// Whether that operation was a kernel.
    after_kernel: bool,
    submitted: u64,
    completed: u64,
    /// The handle is gone: drop the queue once it drains.
    released: bool,
    /// The sequence number of its kernel running now (taken off `ops`, not yet finished):
    /// the stream's next operation waits for it, and so do the streams it synchronizes
    /// with.
    running: Option<u64>,
}

/// Per context: when the last operations of the legacy stream and of the blocking streams
/// ended, for the implicit synchronization between them.
#[derive(Default, Clone, Copy)]
struct Ends {
    legacy: u64,
    blocking: u64,
}

#[derive(Default)]
struct State {
    queues: HashMap<u64, Queue>,
    ends: HashMap<u64, Ends>,
    /// The executor sleeps on `wake` for new work: a submission must wake it.
    sleeping: bool,
    /// Host threads waiting on `done`: completions wake them, and only then (a wake-up is
    /// a system call, made with the lock held).
    done_waiters: usize,
}

/// One device's executor.
pub(crate) struct Executor {
    device: usize,
    state: Mutex<State>,
    /// Wakes the executor thread: new work, or an event it may wait for.
    wake: Condvar,
    /// Wakes host threads waiting for completions.
    done: Condvar,
    started: Once,
    /// Operations submitted so far: the executor watches it for a moment before it sleeps.
    submitted: AtomicU64,
    /// When the last was (node clock).
    submitted_ns: AtomicU64,
}

/// `CUDA_ERROR_LAUNCH_FAILED`: what a context reports after simgpu itself failed running
/// an operation.
const LAUNCH_FAILED: CUresult = 719;

/// How long an executor holding the engine for a record waits for the kernel that follows.
/// An assumption of simgpu's: a context whose channel runs dry keeps the engine this long
/// before the GPU switches away, so that a launch queued a few microseconds after the
/// record that marks its start does not go to the back of the queue between the two (which
/// would put other processes' slices inside the measured interval).
const LINGER: std::time::Duration = std::time::Duration::from_micros(200);

/// How long an executor that ran out of work watches for more before it sleeps. A GPU's
/// front end polls its channels and costs the host nothing; a sleeping executor costs each
/// submission a wake-up (a system call, and on a virtual machine an interrupt between CPUs:
/// microseconds that a real launch does not pay), so it stays awake between the launches of
/// a busy application.
const IDLE_POLL_NS: u64 = 20_000;

/// Kernels of one context that run at once, at most (a GPU's concurrent kernel limit is of
/// this order).
const CONCURRENT_KERNELS: usize = 32;

/// The longest a batch of concurrent kernels runs before it looks for kernels to join.
const JOIN_NS: u64 = 1_000_000;
/// ... and while the process submits work (its last submission at most [`SUBMITTING_NS`]
/// ago) and the context has streams with no kernel in the batch: a GPU starts a kernel of
/// another stream the moment it arrives, and a program whose launches trickle in (one
/// throttled by its share, say) would otherwise run its streams one at a time for a
/// millisecond each time. Kernels shorter than two of these run whole: each chunk costs the
/// executor a wake-up, which a simulated GPU must not spend more often than it needs.
const JOIN_SUBMITTING_NS: u64 = 20_000;
const SUBMITTING_NS: u64 = 200_000;

/// Sequence numbers, process-wide so that they also order work across devices.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

static EXECUTORS: [OnceLock<Executor>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

thread_local! {
    static ON_EXECUTOR: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is an executor (running a host function or callback), where
/// waiting for stream work would wait for itself.
pub(crate) fn on_executor_thread() -> bool {
    ON_EXECUTOR.with(|c| c.get())
}

fn executor(device: usize) -> Result<&'static Executor, CUresult> {
    let process = crate::model::driver::process()?;
    let slot = EXECUTORS
        .get(device)
        .ok_or(code::CUDA_ERROR_INVALID_DEVICE)?;
    let exec = slot.get_or_init(|| Executor {
        device,
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        done: Condvar::new(),
        started: Once::new(),
        submitted: AtomicU64::new(0),
        submitted_ns: AtomicU64::new(0),
    });
    exec.started.call_once(|| {
        std::thread::Builder::new()
            .name(format!("simgpu-exec{device}"))
            .spawn(move || exec.run(process))
            .expect("cannot start an executor thread");
    });
    Ok(exec)
}

impl Executor {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Work runs outside the lock and the state is updated in whole steps, so a poisoned
        // lock still guards consistent data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, cv: &Condvar, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        cv.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a completion (a host thread).
    fn wait_done<'a>(&self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.done_waiters += 1;
        let mut state = self.wait(&self.done, state);
        state.done_waiters -= 1;
        state
    }

    /// Wakes the host threads waiting for completions, if any (called with the lock held,
    /// after a completion).
    fn notify_done(&self, state: &State) {
        if state.done_waiters > 0 {
            self.done.notify_all();
        }
    }

    fn run(&'static self, process: &'static Process) {
        ON_EXECUTOR.with(|c| c.set(true));
        let engine = process.engine(self.device);
        let config = process.node().config();
        let mut holding = false;
        // Whether the engine is held for a record that waited for it, with no kernel run
        // since, and whether the executor has already waited a moment for one.
        let mut held_for_record = false;
        let mut lingered = false;
        let mut state = self.lock();
        loop {
            let Some((id, op, ready, stamp)) = state.pick() else {
                if holding && held_for_record && !lingered {
                    // A record is followed by the launch it marks a few microseconds later
                    // (two driver calls): see `LINGER`.
                    lingered = true;
                    state = self
                        .wake
                        .wait_timeout(state, LINGER)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                if holding {
                    held_for_record = false;
                    drop(state);
                    engine.idle();
                    holding = false;
                    state = self.lock();
                } else {
                    // Relaxed: a hint to stay awake; whether there is work is decided under
                    // the lock below.
                    let seen = self.submitted.load(Relaxed);
                    drop(state);
                    let until = now_ns() + IDLE_POLL_NS;
                    while self.submitted.load(Relaxed) == seen && now_ns() < until {
                        std::hint::spin_loop();
                    }
                    state = self.lock();
                    if !state.has_runnable() {
                        // Set and cleared under the lock that `submit` reads it under: a
                        // submission either sees it and wakes this wait, or came before it
                        // and was found just above.
                        state.sleeping = true;
                        state = self.wait(&self.wake, state);
                        state.sleeping = false;
                    }
                }
                continue;
            };
            let ctx = Arc::clone(&state.queues[&id].ctx);
            if let Work::Kernel(kernel) = &op.work {
                if ctx.sticky_error().is_none() {
                    let first = Running {
                        id,
                        kernel: Arc::clone(kernel),
                        ctx,
                        ready,
                        remaining: kernel.duration_ns(&config),
                    };
                    if let Some(q) = state.queues.get_mut(&id) {
                        q.running = Some(op.seq);
                    }
                    drop(state);
                    state = self.run_batch(first, &engine, &config, &mut holding);
                    held_for_record = false;
                    lingered = false;
                    continue;
                }
            }
            drop(state);

            let is_host = matches!(
                op.work,
                Work::Host(_) | Work::Callback(_) | Work::Rendezvous(_)
            );
            if is_host && holding {
                // Host work does not use the engine: let other processes have it meanwhile.
                engine.idle();
                holding = false;
            }
            let is_record = matches!(op.work, Work::Record(..));
            let is_kernel = matches!(op.work, Work::Kernel(..));
            lingered = false;
            held_for_record = if is_kernel {
                false
            } else {
                held_for_record || (is_record && stamp == Stamp::WhenScheduled)
            };
            let end = run_op(op.work, ready, stamp, &ctx, &engine, &mut holding);

            state = self.lock();
            state.finish(id, end, is_kernel);
            self.notify_done(&state);
            if is_record {
                // A stream on another device may wait for this record.
                drop(state);
                wake_others(self.device);
                state = self.lock();
            }
        }
    }
}

/// A kernel running in a batch.
struct Running {
    id: u64,
    kernel: Arc<KernelLaunch>,
    ctx: Arc<Context>,
    ready: u64,
    /// Kernel time it still needs, in ns.
    remaining: u64,
}

impl Executor {
    /// Runs `first` and, beside it, the kernels that become runnable on the same context's
    /// other streams, up to [`CONCURRENT_KERNELS`] at once, as a GPU runs one context's
    /// streams concurrently: engine time passes once for all of them (the process is
    /// charged the union of its busy time), and each ends when its own time has run. At
    /// each chunk's end the operations that take no time (event records and waits, markers)
    /// run too, so that a stream whose kernel ended can start its next one; host work
    /// waits until the batch drains. Returns with the state locked.
    fn run_batch<'s>(
        &'s self,
        first: Running,
        engine: &simgpu::engine::Engine<'_>,
        config: &simgpu::config::NodeConfig,
        holding: &mut bool,
    ) -> MutexGuard<'s, State> {
        let ctx_id = first.ctx.id;
        let mut batch = vec![first];
        let mut started = false;
        // Whether a stream of the context could send a kernel to join: one with no kernel in
        // the batch (learnt at each chunk's end; at first, assumed).
        let mut joinable = true;
        loop {
            let ready = batch.iter().map(|r| r.ready).min().unwrap_or(0);
            // Chunks of at most a join interval, so that work queued on other streams
            // meanwhile joins soon; one chunk when the batch is full.
            let shortest = batch.iter().map(|r| r.remaining).min().unwrap_or(0);
            // Relaxed: a hint for how soon to look again.
            let submitting =
                now_ns().saturating_sub(self.submitted_ns.load(Relaxed)) < SUBMITTING_NS;
            let dt = if batch.len() >= CONCURRENT_KERNELS {
                shortest
            } else if submitting && joinable && shortest >= 2 * JOIN_SUBMITTING_NS {
                JOIN_SUBMITTING_NS
            } else {
                shortest.min(JOIN_NS)
            };
            // The first chunk starts when the first kernel is ready; the others go on from
            // where the last ended.
            let span = if std::mem::replace(&mut started, true) {
                engine.run_on(dt)
            } else {
                engine.run(ready, dt)
            };
            *holding = true;
            for r in &mut batch {
                r.remaining -= dt.min(r.remaining);
            }
            let mut state = self.lock();
            let (done, rest): (Vec<Running>, Vec<Running>) =
                batch.into_iter().partition(|r| r.remaining == 0);
            batch = rest;
            for r in done {
                engine.completed(r.kernel.duration_ns(config));
                match catch_unwind(AssertUnwindSafe(|| r.kernel.apply())) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => r.ctx.fail(e),
                    Err(_) => r.ctx.fail(LAUNCH_FAILED),
                }
                state.finish(r.id, span.end_ns, true);
            }
            self.notify_done(&state);
            // What can go on now: operations that take no time, and kernels joining.
            loop {
                let room = batch.len() < CONCURRENT_KERNELS;
                let Some((id, op, ready, stamp)) = state.pick_if(|work, ctx| match work {
                    Work::Kernel(_) => room && ctx == ctx_id,
                    Work::Record(..) | Work::Wait(..) | Work::Marker => true,
                    _ => false,
                }) else {
                    break;
                };
                let ctx = Arc::clone(&state.queues[&id].ctx);
                if let Work::Kernel(kernel) = &op.work {
                    if ctx.sticky_error().is_none() {
                        if let Some(q) = state.queues.get_mut(&id) {
                            q.running = Some(op.seq);
                        }
                        batch.push(Running {
                            id,
                            kernel: Arc::clone(kernel),
                            ctx,
                            ready,
                            remaining: kernel.duration_ns(config),
                        });
                        continue;
                    }
                }
                let is_record = matches!(op.work, Work::Record(..));
                drop(state);
                let end = run_op(op.work, ready, stamp, &ctx, engine, holding);
                if is_record {
                    wake_others(self.device);
                }
                state = self.lock();
                state.finish(id, end, false);
                self.notify_done(&state);
            }
            joinable = state.queues.iter().any(|(id, q)| {
                q.ctx.id == ctx_id && q.running.is_none() && batch.iter().all(|r| r.id != *id)
            });
            if batch.is_empty() {
                return state;
            }
        }
    }
}

fn wake_others(device: usize) {
    for exec in EXECUTORS.iter().filter_map(OnceLock::get) {
        if exec.device != device {
            // Taking the lock orders this wake-up after the waiter's check of the event.
            let _state = exec.lock();
            exec.wake.notify_all();
        }
    }
}

/// When a record takes its timestamp. A GPU writes an event's timestamp when it processes
/// the record in the context's channel, which it does only while the context has the
/// engine: a record queued right behind a kernel is written as that kernel ends, any other
/// waits for the context's turn (for a record right before a kernel: when the kernel starts,
/// not when it was queued behind other processes' slices).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stamp {
    /// Queued behind a kernel of its stream and submitted before that kernel ended.
    KernelEnd,
    /// On an idle stream or behind other work: when the process next has the engine.
    WhenScheduled,
}

/// Runs one operation with [`execute`]; a failure (or a panic of simgpu's own) fails the
/// context, and the operation then ends when it was ready.
fn run_op(
    work: Work,
    ready: u64,
    stamp: Stamp,
    ctx: &Context,
    engine: &simgpu::engine::Engine<'_>,
    holding: &mut bool,
) -> u64 {
    match catch_unwind(AssertUnwindSafe(|| {
        execute(work, ready, stamp, ctx, engine, holding)
    })) {
        Ok(Ok(end)) => end,
        Ok(Err(e)) => {
            ctx.fail(e);
            ready
        }
        Err(_) => {
            ctx.fail(LAUNCH_FAILED);
            ready
        }
    }
}

/// Runs one operation; returns when it ended in simulated time.
fn execute(
    work: Work,
    ready: u64,
    stamp: Stamp,
    ctx: &Context,
    engine: &simgpu::engine::Engine<'_>,
    holding: &mut bool,
) -> Result<u64, CUresult> {
    match work {
        // A failed context runs nothing more, as on a GPU; the kernels of a live context
        // run in batches (`Executor::run_batch`).
        Work::Kernel(_) => Ok(ready),
        // Host work takes the time it takes on the CPU, counted from when the stream was
        // ready for it (not from when this thread got to it).
        Work::Host(f) => {
            let start = now_ns();
            f();
            Ok(ready + (now_ns() - start))
        }
        Work::Callback(f) => {
            let start = now_ns();
            f(ctx.sticky_error().unwrap_or(code::CUDA_SUCCESS));
            Ok(ready + (now_ns() - start))
        }
        Work::Record(event, n) => {
            let at = match stamp {
                Stamp::KernelEnd => ready,
                Stamp::WhenScheduled => {
                    let span = engine.run(ready, 0);
                    *holding = true;
                    span.start_ns
                }
            };
            event.complete(n, at);
            Ok(at)
        }
        Work::Wait(event, _) => Ok(ready.max(event.timestamp_ns())),
        Work::Rendezvous(ticket) => {
            let start = now_ns();
            ticket.meet();
            Ok(ready + (now_ns() - start))
        }
        Work::Marker => Ok(ready),
    }
}

impl State {
    /// Takes the runnable head with the lowest sequence number, when it is ready, and
    /// whether it was queued behind a kernel that ended just before it (see [`Stamp`]).
    fn pick(&mut self) -> Option<(u64, Op, u64, Stamp)> {
        self.pick_if(|_, _| true)
    }

    /// [`State::pick`], if `accept` takes the head's work (and its context's id); else
    /// nothing is taken, since what comes first in order must run first.
    fn pick_if(&mut self, accept: impl Fn(&Work, u64) -> bool) -> Option<(u64, Op, u64, Stamp)> {
        let mut best: Option<(u64, u64)> = None;
        for (id, q) in &self.queues {
            let Some(head) = q.ops.front() else { continue };
            if q.running.is_some()
                || best.is_some_and(|(seq, _)| seq < head.seq)
                || !self.runnable(q, head)
            {
                continue;
            }
            best = Some((head.seq, *id));
        }
        let (_, id) = best?;
        let q = self.queues.get_mut(&id)?;
        if !accept(&q.ops.front()?.work, q.ctx.id) {
            return None;
        }
        let op = q.ops.pop_front()?;
        let ends = self.ends.get(&q.ctx.id).copied().unwrap_or_default();
        let stamp = if q.after_kernel && op.submit_ns <= q.last_end_ns {
            Stamp::KernelEnd
        } else {
            Stamp::WhenScheduled
        };
        let mut ready = op.submit_ns.max(q.last_end_ns);
        match q.kind {
            StreamKind::Legacy => ready = ready.max(ends.blocking),
            StreamKind::Blocking | StreamKind::PerThread => ready = ready.max(ends.legacy),
            StreamKind::NonBlocking => {}
        }
        Some((id, op, ready, stamp))
    }

    /// Whether some queue's head may run now.
    fn has_runnable(&self) -> bool {
        self.queues.values().any(|q| {
            q.running.is_none() && q.ops.front().is_some_and(|head| self.runnable(q, head))
        })
    }

    fn runnable(&self, q: &Queue, head: &Op) -> bool {
        if let Work::Wait(event, n) = &head.work {
            if !event.reached(*n) {
                return false;
            }
        }
        let ctx = q.ctx.id;
        let earlier = |other: &Queue, pred: fn(StreamKind) -> bool| {
            other.ctx.id == ctx
                && pred(other.kind)
                && other
                    .running
                    .or(other.ops.front().map(|h| h.seq))
                    .is_some_and(|seq| seq < head.seq)
        };
        match q.kind {
            StreamKind::Legacy => !self
                .queues
                .values()
                .any(|o| earlier(o, StreamKind::syncs_with_legacy)),
            StreamKind::Blocking | StreamKind::PerThread => !self
                .queues
                .values()
                .any(|o| earlier(o, |k| k == StreamKind::Legacy)),
            StreamKind::NonBlocking => true,
        }
    }

    fn finish(&mut self, id: u64, end: u64, kernel: bool) {
        let Some(q) = self.queues.get_mut(&id) else {
            return;
        };
        q.running = None;
        q.last_end_ns = q.last_end_ns.max(end);
        q.after_kernel = kernel;
        q.completed += 1;
        let ends = self.ends.entry(q.ctx.id).or_default();
        match q.kind {
            StreamKind::Legacy => ends.legacy = ends.legacy.max(end),
            StreamKind::Blocking | StreamKind::PerThread => ends.blocking = ends.blocking.max(end),
            StreamKind::NonBlocking => {}
        }
        if q.released && q.ops.is_empty() {
            self.queues.remove(&id);
        }
    }
}

/// Where a stream stood when work was submitted: wait for it with [`wait_for`].
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    stream: u64,
    device: usize,
    count: u64,
}

/// Appends work to a stream; it runs after everything submitted to the stream before.
pub(crate) fn submit(stream: Lane<'_>, work: Work) -> Result<Mark, CUresult> {
    let device = stream.ctx.device;
    let exec = executor(device)?;
    let mut state = exec.lock();
    let q = state.queues.entry(stream.id).or_insert_with(|| Queue {
        ctx: Arc::clone(stream.ctx),
        kind: stream.kind,
        ops: VecDeque::new(),
        last_end_ns: 0,
        after_kernel: false,
        submitted: 0,
        completed: 0,
        released: false,
        running: None,
    });
    // Numbered under the executor's lock, so that numbers and queue order agree.
    let seq = NEXT_SEQ.fetch_add(1, Relaxed);
    q.ops.push_back(Op {
        seq,
        submit_ns: now_ns(),
        work,
    });
    q.submitted += 1;
    let mark = Mark {
        stream: stream.id,
        device,
        count: q.submitted,
    };
    let sleeping = state.sleeping;
    drop(state);
    // Relaxed: see `IDLE_POLL_NS`; the queue itself is behind the lock. Bumped after the
    // lock is released, so that the polling executor does not take it while this thread
    // still holds it (and make the release a wake-up).
    exec.submitted.fetch_add(1, Relaxed);
    exec.submitted_ns.store(now_ns(), Relaxed);
    if sleeping {
        // The executor set `sleeping` under the lock and waits on `wake`, releasing it
        // atomically: it is waiting now, and this wakes it.
        exec.wake.notify_all();
    }
    Ok(mark)
}

/// Blocks until the work up to `mark` has run.
pub(crate) fn wait_for(mark: Mark) -> DriverResult {
    if on_executor_thread() {
        return Err(code::CUDA_ERROR_NOT_PERMITTED);
    }
    let exec = executor(mark.device)?;
    let mut state = exec.lock();
    while state
        .queues
        .get(&mark.stream)
        .is_some_and(|q| q.completed < mark.count)
    {
        state = exec.wait_done(state);
    }
    Ok(())
}

/// Whether every operation submitted to the stream has run.
pub(crate) fn stream_idle(stream: Lane<'_>) -> Result<bool, CUresult> {
    let exec = executor(stream.ctx.device)?;
    let state = exec.lock();
    Ok(state
        .queues
        .get(&stream.id)
        .is_none_or(|q| q.completed == q.submitted))
}

/// Whether every operation submitted to the streams of a context has run.
pub(crate) fn context_idle(ctx: &Context) -> Result<bool, CUresult> {
    let exec = executor(ctx.device)?;
    let state = exec.lock();
    Ok(state
        .queues
        .values()
        .filter(|q| q.ctx.id == ctx.id)
        .all(|q| q.completed == q.submitted))
}

/// Blocks until every operation submitted so far to the streams of a context has run.
pub(crate) fn synchronize_context(ctx: &Context) -> DriverResult {
    if on_executor_thread() {
        return Err(code::CUDA_ERROR_NOT_PERMITTED);
    }
    let exec = executor(ctx.device)?;
    let mut state = exec.lock();
    let marks: Vec<(u64, u64)> = state
        .queues
        .iter()
        .filter(|(_, q)| q.ctx.id == ctx.id)
        .map(|(id, q)| (*id, q.submitted))
        .collect();
    for (id, count) in marks {
        while state.queues.get(&id).is_some_and(|q| q.completed < count) {
            state = exec.wait_done(state);
        }
    }
    Ok(())
}

/// Waits for all the work of a context; reports its sticky error.
pub(crate) fn synchronize(ctx: &Context) -> DriverResult {
    synchronize_context(ctx)?;
    ctx.check_sticky()
}

/// A context being deactivated first lets its queued work run to the end (an executor's
/// own thread cannot wait for it, and goes on).
fn drain(ctx: &Context) {
    let _ = synchronize_context(ctx);
}
crate::model::context::teardown_step!(Drain, drain);

/// The stream's handle is gone: its queue goes once drained.
pub(crate) fn release_stream(stream: Lane<'_>) {
    let Ok(exec) = executor(stream.ctx.device) else {
        return;
    };
    let mut state = exec.lock();
    if let Some(q) = state.queues.get_mut(&stream.id) {
        q.released = true;
        if q.ops.is_empty() && q.completed == q.submitted {
            state.queues.remove(&stream.id);
        }
    }
}

/// Drops the queues of a destroyed context (after it was synchronized).
fn forget_context(ctx: &Context) {
    let Ok(exec) = executor(ctx.device) else {
        return;
    };
    let mut state = exec.lock();
    state.queues.retain(|_, q| q.ctx.id != ctx.id);
    state.ends.remove(&ctx.id);
}
crate::model::context::teardown_step!(Queues, forget_context);

/// A synchronous operation's place in a stream: the executor stops there and lets the host
/// thread that queued it do its work, so that the work is ordered like an operation of the
/// stream without leaving the caller's thread (and its borrows).
pub(crate) struct Ticket(Arc<Meeting>);

struct Meeting {
    phase: Mutex<Phase>,
    cv: Condvar,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Arrived,
    Done,
    /// The operation was dropped without running.
    Abandoned,
}

impl Meeting {
    fn set(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
        self.cv.notify_all();
    }

    fn wait_while(&self, pred: impl Fn(Phase) -> bool) -> Phase {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        while pred(*phase) {
            phase = self.cv.wait(phase).unwrap_or_else(|e| e.into_inner());
        }
        *phase
    }
}

impl Ticket {
    /// On the executor: hands over to the host thread and waits until it is done.
    fn meet(&self) {
        self.0.set(Phase::Arrived);
        self.0.wait_while(|p| p == Phase::Arrived);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut phase = self.0.phase.lock().unwrap_or_else(|e| e.into_inner());
        if *phase == Phase::Queued {
            *phase = Phase::Abandoned;
            self.0.cv.notify_all();
        }
    }
}

/// Lets the executor go on when dropped, even if the synchronous work panicked.
struct Release<'a>(&'a Meeting);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.set(Phase::Done);
    }
}

/// Runs `work` on the calling thread at its place in `stream`: after the work submitted
/// before it, and before the work submitted after it.
pub(crate) fn run_in_order(stream: Lane<'_>, work: impl FnOnce()) -> DriverResult {
    if on_executor_thread() {
        return Err(code::CUDA_ERROR_NOT_PERMITTED);
    }
    let meeting = Arc::new(Meeting {
        phase: Mutex::new(Phase::Queued),
        cv: Condvar::new(),
    });
    submit(stream, Work::Rendezvous(Ticket(Arc::clone(&meeting))))?;
    if meeting.wait_while(|p| p == Phase::Queued) == Phase::Abandoned {
        return Err(stream
            .ctx
            .sticky_error()
            .unwrap_or(code::CUDA_ERROR_CONTEXT_IS_DESTROYED));
    }
    let _release = Release(&meeting);
    stream.ctx.check_sticky()?;
    work();
    Ok(())
}
