//! The launch gate: compute shares enforced at kernel launch.
//!
//! Every path that puts kernels on the GPU (`cuLaunchKernel`, `cuLaunchKernelEx`,
//! `cuLaunchCooperativeKernel`, `cuGraphLaunch`, and their `_ptsz` twins) asks [`admit`]
//! first. In a container limited on no device that is two loads: the container (a
//! `OnceLock`) and the region header's `compute_limited` bits. Otherwise the gate finds the
//! launch's device (the current context, kept per thread by [`crate::current`]: no driver
//! call) and, unless a capture is in progress somewhere in the process ([`capture`]: then
//! it asks the driver whether this stream captures), admits the launch while the device is
//! not blocked, the container's GPU-time bucket is positive and its in-flight window has
//! room for the time the launch adds to what the container holds in flight; else the
//! thread counts itself in `waiting` and sleeps on the region's `gate` futex word (at most
//! 1 ms at a time, harvesting completions and, in local mode, refilling between sleeps) or,
//! when only the window is full, on the completion of its own oldest launches. Admitted
//! launches are measured in groups with events ([`measure`]) and charged as they complete:
//! never a synchronization per kernel, and about one driver call per many launches.
//!
//! `TESSERA_COMPUTE=fixed:Q` without a daemon puts the region's devices in local mode (see
//! `container::local_share`): the processes refill the bucket themselves.

mod board;
pub(crate) mod capture;
mod estimate;
mod events;
mod held;
pub(crate) mod measure;
pub(crate) mod sync;
mod timeline;

use crate::container;
use crate::current;
use measure::{Admission, Harvest, NoRoom, StreamKey, Work};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use tessera_cuda_abi::CUDA_SUCCESS;
use tessera_region::layout::{ComputeAccount, PRIORITY_ONLINE};
use tessera_region::{monotonic_ns, Region};

/// The longest a throttled launch sleeps before it looks again.
const WAIT_NS: u64 = 1_000_000;
/// The longest it sleeps for room in a window held by other processes' launches.
const WINDOW_WAIT_NS: u64 = 200_000;

/// An admitted launch, to hand to [`launched`] with the driver's answer.
pub(crate) struct Ticket {
    region: &'static Region,
    admission: Admission,
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
    let here = current::get()?;
    let device = here.device;
    if region.compute_limited() & (1 << device) == 0 || capture::capturing(stream, per_thread) {
        return None;
    }
    // Work never measured yet is taken for a whole window: it goes alone until its first
    // completion says how long it runs (a graph of a hundred kernels is not let in a
    // hundred times over on a guess).
    let (known, alone) = measure::estimate(handle);
    let estimate_ns = known.unwrap_or_else(|| region.compute(device).window_ns_or_default());
    let work = Work {
        handle,
        estimate_ns,
    };
    let key = StreamKey::of(stream, per_thread, here.context);
    let admission = wait_for_admission(region, device, key, here.context, work, alone)?;
    Some(Ticket { region, admission })
}

/// After an admitted launch returned `rc`: measures it, or gives its place in the window
/// back if it failed.
pub(crate) fn launched(t: Ticket, rc: u32) {
    let device = t.admission.device();
    measure::launched(t.region, t.admission, rc == CUDA_SUCCESS);
    if rc != CUDA_SUCCESS {
        measure::settle_active(t.region, device);
        t.region.compute(device).wake_gate();
    }
}

/// Why a launch cannot go yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Blocked,
    Empty,
    WindowFull,
}

/// Waits until the launch of `work` on `key` may go on `device`; `None` if the device
/// became unlimited (the launch goes ungated).
fn wait_for_admission(
    region: &Region,
    device: usize,
    key: StreamKey,
    ctx: usize,
    work: Work,
    alone: bool,
) -> Option<Admission> {
    let acct = region.compute(device);
    raise_active(region, acct, device);
    let mut waiting_since = None;
    let admitted = loop {
        let now = monotonic_ns();
        // By the region's mode, or the daemon's copy of it, which the container cannot
        // change.
        if !region.device_limited(device, now) {
            break None;
        }
        if region.take_over_if_daemon_silent(device, now) {
            crate::tlog!(
                warn,
                "controld has not refilled device {device} for 100 ms; its processes keep its last share themselves until a daemon adopts the region"
            );
        }
        if !region.daemon_meters(device, now) {
            acct.refill_local(now);
        }
        if waiting_since.is_none() {
            measure::harvest(region, Harvest::Due, false);
            match try_admit(region, acct, device, key, ctx, work, alone) {
                Ok(a) => break Some(a),
                Err(refusal) => {
                    if refusal == Refusal::WindowFull {
                        // Room comes from completions: what is open must be measurable.
                        measure::close_open(region, measure::Scope::Device(device));
                    }
                }
            }
            // SeqCst: the waiter's half of the protocol in `tessera_region`'s compute
            // module: counted before `gate` is loaded.
            acct.waiting.fetch_add(1, Ordering::SeqCst);
            waiting_since = Some(monotonic_ns());
            continue;
        }
        measure::harvest(region, Harvest::All, false);
        // SeqCst: see above; loaded after counting, checked after loading.
        let seen = acct.gate.load(Ordering::SeqCst);
        match try_admit(region, acct, device, key, ctx, work, alone) {
            Ok(a) => break Some(a),
            Err(Refusal::WindowFull) => {
                measure::close_open(region, measure::Scope::Device(device));
                match measure::oldest_end(device) {
                    Some(end) => measure::wait_event(end),
                    None => {
                        acct.wait_gate(seen, WINDOW_WAIT_NS);
                    }
                }
            }
            Err(Refusal::Blocked | Refusal::Empty) => {
                // A launch that waits: a changed time slice reaches the channel groups now
                // too, so that it reaches a container that is never idle (one load when
                // nothing changed).
                crate::rm::lever::sync(region);
                acct.wait_gate(seen, WAIT_NS);
            }
        }
    };
    if admitted.is_some() {
        // A synchronization on another thread may have cleared the flag since it was
        // raised above (nothing was in flight yet): raise it again (one load otherwise).
        raise_active(region, acct, device);
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

/// Raises the device's `active` flag if it is down, noting when, and brings the time slice
/// of the process's channel groups in line with the region ([`crate::rm::lever::sync`]); an
/// online container also
/// sets its bit on the node's board, which stops offline launches at once, and wakes
/// `controld`'s preemption thread, which blocks the offline containers too.
fn raise_active(region: &Region, acct: &ComputeAccount, device: usize) {
    // Relaxed: the flag is a signal with no data behind it except the timestamp, which is
    // stored first and read by the daemon only as a statistic.
    if acct.active.load(Ordering::Relaxed) != 0 {
        return;
    }
    // Work starts after idle: the channel groups take a changed time slice now, before the
    // GPU runs any of it (one load when nothing changed).
    crate::rm::lever::sync(region);
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
/// work's held time (the container's window, with a daemon; this process's, in local mode,
/// so that a process killed with launches in flight cannot hold the others' window).
fn try_admit(
    region: &Region,
    acct: &ComputeAccount,
    device: usize,
    key: StreamKey,
    ctx: usize,
    work: Work,
    alone: bool,
) -> Result<Admission, Refusal> {
    let now = monotonic_ns();
    // SeqCst: part of the sleep protocol (checked after `gate` is loaded). The daemon's
    // hold, in the limits file, stands whatever the region's `blocked` word says.
    if acct.blocked.load(Ordering::SeqCst) != 0
        || board::online_elsewhere(region, acct, device, now)
        || region.compute_hold(device, now) != 0
    {
        // Relaxed: a timestamp for statistics; only the first finder after an unblock
        // writes it (the daemon sets it back to 0 when it lifts the block).
        let _ = acct
            .blocked_seen_ns
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        return Err(Refusal::Blocked);
    }
    let no_credit = !acct.has_credit(now);
    let local = measure::is_local(acct);
    let admission = measure::enter(
        region, acct, device, key, ctx, work, alone, local, no_credit,
    )
    .map_err(|no| match no {
        NoRoom::Window => Refusal::WindowFull,
        NoRoom::Credit => Refusal::Empty,
    })?;
    // SeqCst (both): a block that lands after the check above but before this launch is
    // counted must still stop it. Counting first and checking again orders the two: either
    // this load sees the daemon's store, or the count came before that store in the single
    // total order, so anyone who reads the count after seeing the block sees this launch
    // among those admitted before it.
    acct.launches.fetch_add(1, Ordering::SeqCst);
    if acct.blocked.load(Ordering::SeqCst) != 0
        || board::online_elsewhere(region, acct, device, now)
        || region.compute_hold(device, now) != 0
    {
        // Relaxed: taking back the count just taken.
        acct.launches.fetch_sub(1, Ordering::Relaxed);
        measure::leave(region, admission);
        return Err(Refusal::Blocked);
    }
    Ok(admission)
}

/// In a fork child: the parent's launches, events and captures are not the child's.
/// Async-signal-safe.
pub(crate) fn after_fork_in_child() {
    measure::after_fork_in_child();
    capture::after_fork_in_child();
}
