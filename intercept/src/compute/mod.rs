//! The launch gate: compute shares enforced at kernel launch.
//!
//! Every path that puts kernels on the GPU (`cuLaunchKernel`, `cuLaunchKernelEx`,
//! `cuLaunchCooperativeKernel`, `cuGraphLaunch`, and their `_ptsz` twins) asks [`admit`]
//! first. In a container limited on no device that is two loads: the container (a
//! `OnceLock`) and the region header's `compute_limited` bits. Otherwise the gate finds the
//! launch's device (the current context, cached per thread) and, if that device is limited,
//! admits the launch while the device is not blocked, the container's GPU-time bucket is
//! positive and its in-flight window has room; else the thread counts itself in `waiting`
//! and sleeps on the region's `gate` futex word (at most 1 ms at a time, harvesting
//! completions and, in local mode, refilling between sleeps) or, when only the window is
//! full, on the completion of its own oldest launch. Admitted launches are measured with
//! events ([`measure`]) and charged as they complete: never a synchronization per kernel.
//!
//! `TESSERA_COMPUTE=fixed:Q` without a daemon puts the region's devices in local mode (see
//! `container::local_share`): the processes refill the bucket themselves.

mod board;
mod measure;
pub(crate) mod sync;

use crate::container;
use crate::hooks::real;
use measure::{StreamKey, Work};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use tessera_region::layout::{ComputeAccount, COMPUTE_LOCAL, PRIORITY_ONLINE};
use tessera_region::{monotonic_ns, Region, MAX_DEVICES};

const SUCCESS: u32 = 0;
/// The longest a throttled launch sleeps before it looks again.
const WAIT_NS: u64 = 1_000_000;
/// The longest it sleeps for room in a window held by other processes' launches.
const WINDOW_WAIT_NS: u64 = 200_000;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_NONE: u32 = 0;

/// An admitted launch, to hand to [`launched`] with the driver's answer.
pub(crate) struct Ticket {
    region: &'static Region,
    device: usize,
    key: StreamKey,
    ctx: usize,
    start: Option<(usize, u64)>,
    work: Work,
}

/// The gate, before a launch of `work` (a kernel's function or an executable graph) on
/// `stream` (`per_thread`: a `_ptsz` entry point). `None`: launch ungated and unmeasured.
/// Otherwise the launch was admitted; pass the ticket to [`launched`].
#[inline(always)]
pub(crate) fn admit(stream: *mut c_void, per_thread: bool, work: *mut c_void) -> Option<Ticket> {
    let c = container::get()?;
    let region = c.region();
    if region.compute_limited() == 0 {
        return None;
    }
    admit_limited(region, stream, per_thread, work as usize)
}

#[inline(never)]
fn admit_limited(
    region: &'static Region,
    stream: *mut c_void,
    per_thread: bool,
    handle: usize,
) -> Option<Ticket> {
    let (ctx, device) = current_device()?;
    if region.compute_limited() & (1 << device) == 0 || capturing(stream, per_thread) {
        return None;
    }
    // Work never measured yet is taken for a whole window: it goes alone until its first
    // completion says how long it runs (a graph of a hundred kernels is not let in a
    // hundred times over on a guess).
    let estimate_ns =
        measure::estimate(handle).unwrap_or_else(|| region.compute(device).window_ns_or_default());
    let work = Work {
        handle,
        estimate_ns,
    };
    if !wait_for_admission(region, device, work) {
        return None;
    }
    let key = StreamKey::of(stream, per_thread, ctx);
    let start = measure::before_launch(key, ctx, device);
    Some(Ticket {
        region,
        device,
        key,
        ctx,
        start,
        work,
    })
}

/// After an admitted launch returned `rc`: measures it, or gives its place in the window
/// back if it failed or cannot be measured.
pub(crate) fn launched(t: Ticket, rc: u32) {
    if !measure::after_launch(t.key, t.ctx, t.start, t.work, rc == SUCCESS) {
        measure::uncount(t.region, t.device, 1, t.work.estimate_ns);
        measure::settle_active(t.region, t.device);
        t.region.compute(t.device).wake_gate();
    }
}

thread_local! {
    /// The last context this thread launched in, and its device.
    static CURRENT: Cell<(usize, usize)> = const { Cell::new((0, usize::MAX)) };
}

/// The current context and its device (cached per thread by context handle).
fn current_device() -> Option<(usize, usize)> {
    let get = real::cuCtxGetCurrent::real()?;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one handle to our local.
    if unsafe { get(&mut ctx) } != SUCCESS || ctx.is_null() {
        return None;
    }
    let (cached, device) = CURRENT.get();
    if cached == ctx as usize && device < MAX_DEVICES {
        return Some((cached, device));
    }
    let get_device = real::cuCtxGetDevice::real()?;
    let mut dev = -1;
    // SAFETY: writes one int to our local.
    if unsafe { get_device(&mut dev) } != SUCCESS {
        return None;
    }
    let device = usize::try_from(dev).ok().filter(|&d| d < MAX_DEVICES)?;
    CURRENT.set((ctx as usize, device));
    Some((ctx as usize, device))
}

/// Whether work on `stream` goes into a graph being captured (it is gated when the graph
/// is launched) — or the driver cannot say, in which case the launch is not gated either.
fn capturing(stream: *mut c_void, per_thread: bool) -> bool {
    let Some(is_capturing) = real::cuStreamIsCapturing::real() else {
        return true;
    };
    let stream = if per_thread && stream.is_null() {
        measure::STREAM_PER_THREAD as *mut c_void
    } else {
        stream
    };
    let mut status = CAPTURE_NONE;
    // SAFETY: the caller's stream (or a special handle); writes one status to our local.
    let rc = unsafe { is_capturing(stream, &mut status) };
    rc != SUCCESS || status != CAPTURE_NONE
}

/// Why a launch cannot go yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Blocked,
    Empty,
    WindowFull,
}

/// Waits until the launch of `work` may go on `device`; `false` if the device became
/// unlimited.
fn wait_for_admission(region: &Region, device: usize, work: Work) -> bool {
    let acct = region.compute(device);
    raise_active(acct, device);
    let mut waiting_since = None;
    let admitted = loop {
        if !acct.is_limited() {
            break false;
        }
        let now = monotonic_ns();
        if region.take_over_if_daemon_silent(device, now) {
            crate::tlog!(
                warn,
                "controld has not refilled device {device} for 100 ms; its processes keep its last share themselves until a daemon adopts the region"
            );
        }
        acct.refill_local(now);
        measure::harvest(region, false);
        if waiting_since.is_none() {
            if try_admit(acct, device, work).is_ok() {
                break true;
            }
            // SeqCst: the waiter's half of the protocol in `tessera_region`'s compute
            // module: counted before `gate` is loaded.
            acct.waiting.fetch_add(1, Ordering::SeqCst);
            waiting_since = Some(monotonic_ns());
            continue;
        }
        // SeqCst: see above; loaded after counting, checked after loading.
        let seen = acct.gate.load(Ordering::SeqCst);
        match try_admit(acct, device, work) {
            Ok(()) => break true,
            Err(Refusal::WindowFull) => match measure::oldest_end(device) {
                Some(end) => measure::wait_event(end),
                None => {
                    acct.wait_gate(seen, WINDOW_WAIT_NS);
                }
            },
            Err(Refusal::Blocked | Refusal::Empty) => {
                acct.wait_gate(seen, WAIT_NS);
            }
        }
    };
    if admitted {
        // A synchronization on another thread may have cleared the flag since it was
        // raised above (nothing was in flight yet): raise it again (one load otherwise).
        raise_active(acct, device);
    }
    if let Some(since) = waiting_since {
        // SeqCst: pairs with the count above (the waiter leaves the protocol).
        acct.waiting.fetch_sub(1, Ordering::SeqCst);
        // Relaxed: a statistic.
        acct.throttled_ns
            .fetch_add(monotonic_ns().saturating_sub(since), Ordering::Relaxed);
    }
    admitted
}

/// Raises the device's `active` flag if it is down, noting when; an online container also
/// sets its bit on the node's board, which stops offline launches at once, and wakes
/// `controld`'s preemption thread, which blocks the offline containers too.
fn raise_active(acct: &ComputeAccount, device: usize) {
    // Relaxed: the flag is a signal with no data behind it except the timestamp, which is
    // stored first and read by the daemon only as a statistic.
    if acct.active.load(Ordering::Relaxed) != 0 {
        return;
    }
    let now = monotonic_ns();
    // Relaxed: see above.
    acct.active_raised_ns.store(now, Ordering::Relaxed);
    // Relaxed: a setting of the daemon's, read afresh each time.
    let online = acct.priority.load(Ordering::Relaxed) == PRIORITY_ONLINE;
    if online {
        board::raise(acct, device);
    }
    // SeqCst: the flag is set before the wake-up's system call is made; the futex protocol
    // of the daemon (load, check, wait on the loaded value) then never misses it.
    if acct
        .active
        .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
        && online
    {
        acct.wake_active();
    }
}

/// One attempt to take a place: not blocked, bucket positive, room in the window for the
/// work's estimate (the container's window, with a daemon; this process's, in local mode,
/// so that a process killed with launches in flight cannot hold the others' window).
fn try_admit(acct: &ComputeAccount, device: usize, work: Work) -> Result<(), Refusal> {
    // SeqCst: part of the sleep protocol (checked after `gate` is loaded).
    if acct.blocked.load(Ordering::SeqCst) != 0 || board::online_elsewhere(acct, device) {
        let now = monotonic_ns();
        // Relaxed: a timestamp for statistics; only the first finder after an unblock
        // writes it (the daemon sets it back to 0 when it lifts the block).
        let _ = acct
            .blocked_seen_ns
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        return Err(Refusal::Blocked);
    }
    // SeqCst: as for `blocked`.
    if acct.bucket_ns.load(Ordering::SeqCst) <= 0 {
        return Err(Refusal::Empty);
    }
    let estimate = work.estimate_ns;
    // Relaxed: a setting read afresh at every launch.
    if acct.mode.load(Ordering::Relaxed) == COMPUTE_LOCAL {
        if !measure::enter_mine(acct, device, estimate) {
            return Err(Refusal::WindowFull);
        }
        acct.join_window(estimate);
    } else if !acct.enter_window(estimate) {
        return Err(Refusal::WindowFull);
    } else {
        measure::join_mine(device, estimate);
    }
    // SeqCst (both): a block that lands after the check above but before this launch is
    // counted must still stop it. Counting first and checking again orders the two: either
    // this load sees the daemon's store, or the count came before that store in the single
    // total order, so anyone who reads the count after seeing the block sees this launch
    // among those admitted before it.
    acct.launches.fetch_add(1, Ordering::SeqCst);
    if acct.blocked.load(Ordering::SeqCst) != 0 || board::online_elsewhere(acct, device) {
        // Relaxed: taking back the count just taken.
        acct.launches.fetch_sub(1, Ordering::Relaxed);
        measure::leave_mine(device, 1, estimate);
        acct.leave_window(1, estimate);
        return Err(Refusal::Blocked);
    }
    Ok(())
}

/// In a fork child: the parent's launches and events are not the child's.
/// Async-signal-safe.
pub(crate) fn after_fork_in_child() {
    measure::after_fork_in_child();
}
