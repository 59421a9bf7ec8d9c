//! One GPU's scheduler, and the tick thread that runs every GPU's in turn.

use super::rates::{self, Claim, Decision};
use super::settle::{self, Replay, Settled, ShareWindow};
use super::turns::{self, Contender, Turns};
use super::{Member, Shared, Tampering, TICK};
use crate::policy::{ComputePolicy, Priority};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tessera_region::layout::{
    ComputeAccount, COMPUTE_DAEMON, COMPUTE_LOCAL, COMPUTE_UNLIMITED, DEFAULT_WINDOW_NS,
    HOLD_BLOCKED, HOLD_OVER_GRANT, PRIORITY_OFFLINE, PRIORITY_ONLINE,
};
use tessera_region::slicing::Slicing;
use tessera_region::{monotonic_ns, Board, BusySpan, MAX_DEVICES};

/// Busy time is settled once it is this old: by then every harvest that could add a span
/// overlapping it has (the library harvests at least every millisecond while it has work
/// in flight).
pub const SETTLE_AGE_NS: u64 = 100_000_000;
/// A bucket's refill stops at this many ticks of its rate while nothing is in flight: no
/// hoarding while idle.
const BUCKET_TICKS: u64 = 2;
/// While launches are in flight their time is charged only as they complete, so the refill
/// that pays for them must not be capped away (a 50 ms kernel at 30 % earns 15 ms while it
/// runs): the refill stops at this much time at the rate instead, which still bounds what
/// a container whose `inflight` is stuck (a crashed process) can hoard.
const IN_FLIGHT_CREDIT_NS: u64 = 250_000_000;
/// How far in the future a span may start (a writer's clock read a moment after the
/// daemon's): later ones are corrupt and dropped.
const FUTURE_SLACK_NS: u64 = 1_000_000_000;
/// The most spans a container may have waiting to be settled: 100 ms of a container that
/// writes a span per 20 µs kernel is 5000; more is a corrupt region, and the oldest go.
const MAX_PENDING_SPANS: usize = 8192;
/// What a blocked `fixed:Q` container may save at its rate while online work runs, to catch
/// up once it stops: enough for the bursts of an online service, little enough that the
/// catch-up stays within a fraction of a second.
const BLOCKED_CREDIT_NS: u64 = 100_000_000;
/// A container that claims work but shows no progress for this long is checked for live
/// processes.
const STALE_NS: u64 = 1_000_000_000;
/// How long the tick thread sleeps while no container is on any GPU (a roster change is
/// seen at the next wake).
const IDLE_SLEEP: Duration = Duration::from_millis(20);
/// The most time one tick's refill covers: after a stall, the buckets' caps would clamp
/// anything more anyway.
const MAX_STEP_NS: u64 = 4 * TICK.as_nanos() as u64;
/// An offline container's in-flight window, in estimated GPU time: what online work can
/// still meet on the GPU when it preempts (work already there cannot be recalled). One
/// kernel of a millisecond or more; several shorter ones.
const OFFLINE_WINDOW_NS: u64 = 1_000_000;
/// The window of a container whose policy does not bind (best-effort, burst, `fixed:100`)
/// while no other container on its GPU has work: no one waits behind its work, so it may
/// queue enough to ride out a busy host's late wake-ups. The tick brings it down to the
/// shared window within one tick of a neighbour's first launch, and what it queued drains
/// within this much GPU time.
const ALONE_WINDOW_NS: u64 = 16_000_000;
/// How often the tick thread looks, between ticks, whether the work of a turn's last
/// holder has left the GPU, so that the next holder starts ([`Handoff`]): a fraction of
/// the GPU's time slice, little enough that the GPU hardly idles between the two.
const HANDOFF_POLL: Duration = Duration::from_micros(200);

/// Runs the tick loop until the scheduler stops, then hands the containers over to their
/// processes ([`hand_over`]).
pub(super) fn run(shared: &Shared) {
    let tick_ns = TICK.as_nanos() as u64;
    let mut generation = None;
    let mut gpus: Vec<GpuScheduler> = Vec::new();
    let mut next = monotonic_ns();
    while !shared.stopping() {
        if generation != Some(shared.roster.generation()) {
            let (g, members) = shared.roster.snapshot();
            generation = Some(g);
            gpus = rebuild(std::mem::take(&mut gpus), &members, &|gpu| {
                shared
                    .slicing
                    .get(gpu)
                    .copied()
                    .unwrap_or(tessera_region::slicing::H200)
            });
        }
        let now = monotonic_ns();
        for g in &mut gpus {
            g.tick(now, shared.board.as_ref());
        }
        if gpus.is_empty() {
            std::thread::sleep(IDLE_SLEEP);
            next = monotonic_ns();
            continue;
        }
        next += tick_ns;
        let now = monotonic_ns();
        if next <= now {
            // Late by a tick or more (a stall): start again from now.
            next = now + tick_ns;
        }
        sleep_passing_turns(&mut gpus, next);
    }
    for g in &gpus {
        g.hand_over_all(shared.board.as_ref());
    }
}

/// Sleeps until `next`, and meanwhile passes on the turns whose last holder's work has left
/// the GPU ([`GpuScheduler::pass_turns`]).
fn sleep_passing_turns(gpus: &mut [GpuScheduler], next: u64) {
    loop {
        let now = monotonic_ns();
        if now >= next {
            return;
        }
        let mut waiting = false;
        for g in gpus.iter_mut() {
            waiting |= g.pass_turns(now);
        }
        let left = Duration::from_nanos(next - now);
        if !waiting {
            std::thread::sleep(left);
            return;
        }
        std::thread::sleep(left.min(HANDOFF_POLL));
    }
}

/// The schedulers of the GPUs that have members, keeping what each knew of a member that is
/// still there.
fn rebuild(
    mut old: Vec<GpuScheduler>,
    members: &[Arc<Member>],
    slicing: &dyn Fn(usize) -> Slicing,
) -> Vec<GpuScheduler> {
    let mut gpus = Vec::new();
    for gpu in 0..MAX_DEVICES {
        let on: Vec<&Arc<Member>> = members
            .iter()
            .filter(|m| m.gpus.contains(&(gpu as u32)))
            .collect();
        if on.is_empty() {
            continue;
        }
        let mut previous = old
            .iter_mut()
            .find(|g| g.gpu == gpu)
            .map(|g| std::mem::take(&mut g.entries))
            .unwrap_or_default();
        let mut entries: Vec<Entry> = on
            .into_iter()
            .map(
                |m| match previous.iter().position(|e| Arc::ptr_eq(&e.member, m)) {
                    Some(i) => previous.swap_remove(i),
                    None => Entry::new(m.clone()),
                },
            )
            .collect();
        assign_board_bits(&mut entries);
        let (last_tick_ns, mut replay) = match old.iter_mut().find(|g| g.gpu == gpu) {
            Some(g) => (
                g.last_tick_ns,
                std::mem::replace(&mut g.replay, Replay::new(slicing(gpu))),
            ),
            None => (0, Replay::new(slicing(gpu))),
        };
        // The containers are numbered afresh: who held the replayed engine is forgotten,
        // and so is whose turn it is.
        replay.renumbered();
        gpus.push(GpuScheduler {
            gpu,
            entries,
            last_tick_ns,
            settled: Settled::default(),
            replay,
            turns: Default::default(),
            handoffs: [None; 2],
        });
    }
    gpus
}

/// One GPU: the containers on it and what the scheduler keeps about each.
pub(super) struct GpuScheduler {
    pub(super) gpu: usize,
    entries: Vec<Entry>,
    last_tick_ns: u64,
    /// Scratch for settling, kept to avoid allocating every tick.
    settled: Settled,
    /// The GPU's time-slicing, replayed over the containers' spans.
    replay: Replay,
    /// Who of the containers that keep the GPU busy holds it: the online containers' turns
    /// and the offline ones' apart (see [`turn_class`]).
    turns: [Turns; 2],
    /// A turn of each class that passed at the last tick while its last holder still had
    /// work in flight: the new holder waits for it.
    handoffs: [Option<Handoff>; 2],
}

/// A turn passed on while the container that held it still had work in flight. The new
/// holder's credit stays banked until that work has left the GPU: had both work on the GPU
/// at once, the GPU would slice between them, and an online request arriving then would
/// wait for both their slices instead of one. `inflight` and `launches` are the last
/// holder's to write, so the wait ends as well after a tick, or the moment it launches
/// anything more (it can only have done so on a bucket it wrote itself, and must not have
/// the GPU to itself for it).
#[derive(Debug, Clone, Copy)]
struct Handoff {
    /// The last holder, whose work drains, and its launch count when the turn passed.
    from: usize,
    from_launches: u64,
    /// The new holder, and what was decided for it at the tick.
    to: usize,
    decision: Decision,
    /// When the new holder starts whatever the last one still has in flight.
    until_ns: u64,
}

/// One container on the GPU.
struct Entry {
    member: Arc<Member>,
    /// Its settled busy time over the last second.
    window: ShareWindow,
    /// Spans settle from its second tick on: older ones predate this scheduler's view.
    fresh: bool,
    /// Its spans not settled yet (younger than [`SETTLE_AGE_NS`]).
    pending: Vec<BusySpan>,
    /// Its counters at the last change of any of them, and when that was.
    progress: [u64; 3],
    progress_ns: u64,
    /// When its live processes were last counted (for staleness).
    checked_ns: u64,
    /// An online container's bit on the node's board for this GPU (kept while it stays).
    board_bit: Option<u32>,
    /// Ticks in a row at which it had no work (its board bit is taken back after
    /// [`IDLE_BIT_TICKS`]).
    idle_ticks: u32,
    /// The bucket as this daemon left it at its last refill, and the container's
    /// `measured_ns` then: between two refills the bucket only falls, by what the library
    /// charges (which it also adds to `measured_ns`), so a bucket found above it was written
    /// by the container, and is put back, less what was charged since.
    left_ns: Option<(i64, u64)>,
    /// Charges seen since (the bucket's fall between refills), not yet refunded: refunds
    /// computed from the spans the container writes never give back more than it paid.
    refundable_ns: u64,
    /// Ticks in a row at which it had work and was not blocked (it takes turns from
    /// [`turns::SATURATED_TICKS`] on).
    busy_ticks: u32,
    /// Its refills kept while it waits for its turn, in ns.
    banked_ns: i64,
    /// Ticks in a row at which its words claimed work, true or not (see
    /// `Member::claiming_ticks`).
    claim_ticks: u32,
    /// Times its board bit was found set and dropped since it last had work: a neighbour
    /// setting it for it (from [`FRAMED_DROPS`] on, offline libraries ignore the bit).
    framed_drops: u32,
    /// The time slice this daemon last left in its region: a region found holding another
    /// than that or the one asked now was written by the container.
    slice_in_region: Option<u32>,
}

impl Entry {
    /// Holds the container's bucket to this daemon's record before a refill: a bucket
    /// raised since the last refill is put back where the daemon left it, less what the
    /// container was charged since (`measured_ns`'s rise); and what it was charged is the
    /// most a refund may give back. Returns the refund allowed of `refund_ns`.
    fn hold_to_record(&mut self, gpu: usize, a: &ComputeAccount, refund_ns: u64) -> u64 {
        // In local mode (the daemon was silent and the processes took over, refilling
        // themselves) the record starts again. The mode is the daemon's own copy where there
        // is one: the region's is the container's to rewrite, and must not switch this
        // check off. Relaxed: see `store_if_changed`.
        let mode = match &self.member.limits {
            Some(limits) => limits.compute_mode(gpu),
            None => a.mode.load(Ordering::Relaxed),
        };
        let Some((left, measured)) = self.left_ns.filter(|_| mode == COMPUTE_DAEMON) else {
            self.left_ns = None;
            let refund = refund_ns.min(self.refundable_ns);
            self.refundable_ns -= refund;
            return refund;
        };
        // Relaxed: a counter (see `ComputeAccount::charge`).
        let charged = a.measured_ns.load(Ordering::Relaxed).wrapping_sub(measured);
        let expected = left.saturating_sub(i64::try_from(charged).unwrap_or(i64::MAX));
        // Relaxed (success and failure): as above. Only a bucket above what the daemon left
        // is certainly tampered with (no charge raises it; a charge straddling the last
        // refill can make the fall since differ from `measured_ns`'s rise); it is lowered
        // to the record less what the container ran since, so it pays for what it ran on
        // the raised bucket.
        if a.bucket_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b > left).then_some(expected)
            })
            .is_ok()
        {
            self.member.note_tampering(Tampering::BUCKET);
        }
        self.refundable_ns = self
            .refundable_ns
            .saturating_add(charged)
            .min(MAX_REFUNDABLE_NS);
        let refund = refund_ns.min(self.refundable_ns);
        self.refundable_ns -= refund;
        refund
    }

    fn new(member: Arc<Member>) -> Entry {
        Entry {
            window: ShareWindow::default(),
            fresh: true,
            pending: Vec::new(),
            progress: [0; 3],
            progress_ns: 0,
            checked_ns: 0,
            board_bit: None,
            idle_ticks: 0,
            left_ns: None,
            refundable_ns: 0,
            busy_ticks: 0,
            claim_ticks: 0,
            framed_drops: 0,
            banked_ns: 0,
            slice_in_region: member.first_timeslice_us(),
            member,
        }
    }

    fn account(&self, gpu: usize) -> &ComputeAccount {
        self.member.region.compute(gpu)
    }

    /// Whether its processes have launches on the GPU that have not completed.
    fn in_flight(&self, gpu: usize) -> bool {
        // Relaxed: a momentary count (untrusted: a hand-off waits on it a tick at most).
        self.account(gpu).inflight.load(Ordering::Relaxed) != 0
    }

    /// Tracks progress and decides staleness: work claimed, no launch, harvest or wait for
    /// a second, and no live process.
    fn observe(&mut self, gpu: usize, now: u64) {
        let a = self.member.region.compute(gpu);
        // Relaxed (all): counters with nothing published under them; a change of any is
        // all that is looked for.
        let progress = [
            a.launches.load(Ordering::Relaxed),
            a.measured_ns.load(Ordering::Relaxed),
            a.throttled_ns.load(Ordering::Relaxed),
        ];
        let stale = &self.member.stale;
        if progress != self.progress || self.progress_ns == 0 {
            self.progress = progress;
            self.progress_ns = now;
            // Relaxed: see `Member::is_stale`.
            stale.store(false, Ordering::Relaxed);
        } else if !claims_work(a) {
            // Relaxed: as above.
            stale.store(false, Ordering::Relaxed);
        } else if now - self.progress_ns >= STALE_NS && now - self.checked_ns >= STALE_NS {
            self.checked_ns = now;
            let dead = self.member.region.processes().is_empty();
            // Relaxed: as above.
            stale.store(dead, Ordering::Relaxed);
        }
    }
}

/// Ticks without work after which an online container's board bit is cleared by the
/// daemon: its library clears it itself when idle, so a bit still set then was set by
/// another container (or left by a crash). Two ticks, so that the moment between a
/// library's setting its bit and raising `active` is never mistaken for idleness.
const IDLE_BIT_TICKS: u32 = 2;

/// Drops of an idle container's board bit after which offline libraries ignore the bit until
/// it has work: its own library clears its bit when its work ends, so a bit set again and
/// again while it has none is a neighbour's doing (an online container can write the whole
/// board). Its first request after that waits for a tick of the daemon's, as the block
/// does.
const FRAMED_DROPS: u32 = 3;
/// The most refund a container can have owing: a second of charges.
const MAX_REFUNDABLE_NS: u64 = 1_000_000_000;

/// Gives every online container on the GPU a bit of the board's word (keeping the bits of
/// those that had one; at most 64, the rest go without and are stopped by the preemption
/// thread alone); offline containers have none.
fn assign_board_bits(entries: &mut [Entry]) {
    let mut taken = 0u64;
    for e in entries.iter_mut() {
        if e.member.priority != Priority::Online {
            e.board_bit = None;
        }
        if let Some(bit) = e.board_bit {
            taken |= 1 << bit;
        }
    }
    for e in entries.iter_mut() {
        if e.member.priority == Priority::Online && e.board_bit.is_none() && taken != u64::MAX {
            let bit = (!taken).trailing_zeros();
            taken |= 1 << bit;
            e.board_bit = Some(bit);
        }
    }
}

/// Whether the account's words say the container has work: launches in flight, waiting,
/// or `active` raised. Untrusted words: any non-zero value counts.
fn claims_work(a: &ComputeAccount) -> bool {
    // SeqCst (all): the preemption thread reads these right after a futex wake and must
    // see the raise that woke it; the tick reads the same way so that both decide alike.
    a.active.load(Ordering::SeqCst) != 0
        || a.waiting.load(Ordering::SeqCst) != 0
        || a.inflight.load(Ordering::SeqCst) != 0
}

/// Whether the member has work on `gpu` now (a stale member has none, nor one whose claims
/// the watchdog found untrue).
pub(super) fn has_work(m: &Member, gpu: usize) -> bool {
    !m.is_stale() && !m.claims_ignored(gpu) && claims_work(m.region.compute(gpu))
}

/// Blocks an offline container: it launches nothing new until unblocked. When it was not
/// blocked: stamps `blocked_at_ns`, counts a preemption and wakes the launches sleeping in
/// the gate (so that one waiting for room in its window sees the block at once). The store
/// comes first; the bookkeeping after it costs the preemption nothing.
pub(super) fn block(m: &Member, gpu: usize) {
    let a = m.region.compute(gpu);
    // The daemon's own word first: it stands whatever the container writes into `blocked`.
    if let Some(limits) = &m.limits {
        limits.set_compute_hold(gpu, HOLD_BLOCKED, true);
    }
    // SeqCst (both): the library loads `blocked` before every launch; sequential
    // consistency keeps this store ordered with the active words the deciding thread just
    // read. The load first keeps an unchanged word's cache line unwritten.
    if a.blocked.load(Ordering::SeqCst) == 0 && a.blocked.swap(1, Ordering::SeqCst) == 0 {
        // Relaxed (both): a timestamp for the scenario runner and a counter for status;
        // nothing is published under them.
        a.blocked_at_ns.store(monotonic_ns(), Ordering::Relaxed);
        a.preemptions.fetch_add(1, Ordering::Relaxed);
        a.wake_gate();
    }
}

/// Lifts a block, clears the library's record of when it saw one, and wakes the launches
/// sleeping in the gate. Where online containers share the GPU only the preemption thread
/// lifts blocks, and it reads the online words again afterwards and blocks again if online
/// work came meanwhile.
pub(super) fn unblock(m: &Member, gpu: usize) {
    let a = m.region.compute(gpu);
    let held = m
        .limits
        .as_ref()
        .is_some_and(|l| l.set_compute_hold(gpu, HOLD_BLOCKED, false));
    // SeqCst (both): the refiller's "change the block, then wake" of the gate protocol
    // (`ComputeAccount::wake_gate`). The load first: see `block`.
    let blocked = a.blocked.load(Ordering::SeqCst) != 0 && a.blocked.swap(0, Ordering::SeqCst) != 0;
    if blocked || held {
        // Relaxed: a timestamp for the scenario runner; cleared after the unblock so that
        // the next block's first sighting records afresh.
        a.blocked_seen_ns.store(0, Ordering::Relaxed);
        a.wake_gate();
    }
}

/// Whether a container is blocked on `gpu`, by its region's word or the daemon's own.
pub(super) fn is_blocked(m: &Member, gpu: usize) -> bool {
    // SeqCst: part of the unblock decision; `unblock` loads the word again anyway.
    m.region.compute(gpu).blocked.load(Ordering::SeqCst) != 0
        || m.limits
            .as_ref()
            .is_some_and(|l| l.compute_hold(gpu) & HOLD_BLOCKED != 0)
}

/// Stores `value` in `word` unless it holds it already (keeps the cache line the library
/// reads at every launch from bouncing every tick).
fn store_if_changed(word: &std::sync::atomic::AtomicU32, value: u32) {
    // Relaxed (both): settings read afresh at every launch; nothing is published under
    // them.
    if word.load(Ordering::Relaxed) != value {
        word.store(value, Ordering::Relaxed);
    }
}

/// Sets a device's mode through the region (which keeps the header's summary bit in step
/// and wakes the gate) when it or the summary bit differs, and the daemon's copy in the
/// limits file, which the library obeys whatever the region says.
fn set_mode(m: &Member, gpu: usize, mode: u32) {
    let limited = mode != COMPUTE_UNLIMITED;
    // Whether the daemon's copy says this already: then a region that differs was changed
    // by the container.
    let mut had = false;
    if let Some(limits) = &m.limits {
        had = limits.compute_mode(gpu) == mode
            && (limits.compute_limited() & (1 << gpu) != 0) == limited;
        if !had {
            limits.set_compute_mode(gpu, mode);
        }
    }
    let region = &m.region;
    // Relaxed: see `store_if_changed`.
    let current = region.compute(gpu).mode.load(Ordering::Relaxed);
    let bit = region.header_compute_limited() & (1 << gpu) != 0;
    if current != mode || bit != limited {
        // The library's own take-over (local mode, the daemon silent) is no tampering;
        // a device made unlimited, or its summary bit cleared, is.
        if had && (current == COMPUTE_UNLIMITED || !bit) {
            m.note_tampering(Tampering::COMPUTE_WORDS);
        }
        region.set_compute_mode(gpu, mode);
    }
}

/// The window of a container that shares its GPU (or whose policy binds).
fn shared_window_ns(priority: Priority) -> u64 {
    match priority {
        Priority::Online => DEFAULT_WINDOW_NS,
        Priority::Offline => OFFLINE_WINDOW_NS,
    }
}

/// The limits a container's account holds whatever its share: the daemon meters it (so
/// its launches go through the gate and its in-flight window holds from its first launch,
/// even while no other container shares the GPU and its rate is the whole GPU), its
/// priority, and its window of `window_ns`.
fn configure(m: &Member, gpu: usize, priority: Priority, window_ns: u64) {
    let a = m.region.compute(gpu);
    store_if_changed(
        &a.priority,
        match priority {
            Priority::Online => PRIORITY_ONLINE,
            Priority::Offline => PRIORITY_OFFLINE,
        },
    );
    // 0 is the default count; the window that matters is the GPU time.
    store_if_changed(&a.window, 0);
    // Relaxed (both): see `store_if_changed`.
    if a.window_ns.load(Ordering::Relaxed) != window_ns {
        a.window_ns.store(window_ns, Ordering::Relaxed);
    }
    set_mode(m, gpu, COMPUTE_DAEMON);
}

/// Writes a container's limits into its region on each of its GPUs before any of its
/// processes can launch (the daemon calls this when it adds or changes a container, before
/// it answers): its window, priority and mode, and for a container new to metering, the
/// credit of its guarantee for the first ticks, so that its first launches find tokens and
/// none of them runs ungated before the scheduler's first tick sees it.
pub(super) fn prime(m: &Member) {
    let (region, policy, priority) = (&m.region, m.policy, m.priority);
    for gpu in m
        .gpus
        .iter()
        .map(|&g| g as usize)
        .filter(|&g| g < MAX_DEVICES)
    {
        let a = region.compute(gpu);
        // Relaxed: a setting of the daemon's own.
        let fresh = a.mode.load(Ordering::Relaxed) != COMPUTE_DAEMON;
        configure(m, gpu, priority, shared_window_ns(priority));
        if fresh {
            let ppm = policy.guarantee().min(100) * (rates::WHOLE_PPM / 100);
            store_if_changed(&a.share_target_ppm, ppm);
            store_if_changed(&a.refill_ppm, ppm);
            let first = BUCKET_TICKS * TICK.as_nanos() as u64 * u64::from(ppm)
                / u64::from(rates::WHOLE_PPM);
            a.credit(i64::try_from(first).unwrap_or(i64::MAX), i64::MAX);
            a.wake_gate();
        }
    }
}

/// Leaves a container's device to its own processes when the scheduler stops: a metered
/// one goes to LOCAL mode at `share_ppm` (its processes refill the bucket themselves, so
/// the last limits stay in force), and any block is lifted.
pub(super) fn hand_over(m: &Member, gpu: usize, share_ppm: u32) {
    let (region, a) = (&m.region, m.region.compute(gpu));
    if let Some(limits) = &m.limits {
        // Its processes take over; nothing of the daemon's holds them any more.
        limits.set_compute_mode(gpu, COMPUTE_LOCAL);
        limits.set_compute_hold(gpu, HOLD_OVER_GRANT, false);
    }
    // Relaxed: see `store_if_changed`.
    if a.mode.load(Ordering::Relaxed) == COMPUTE_DAEMON {
        // Relaxed (both): read by the processes' next refill, which the mode change below
        // (followed by a gate wake-up) starts.
        a.local_share_ppm.store(share_ppm, Ordering::Relaxed);
        a.last_refill_ns.store(monotonic_ns(), Ordering::Relaxed);
        region.set_compute_mode(gpu, COMPUTE_LOCAL);
    }
    unblock(m, gpu);
}

impl GpuScheduler {
    /// One tick: settle, decide, block, refill, wake; and keep the board's bits.
    fn tick(&mut self, now: u64, board: Option<&Board>) {
        let tick_ns = TICK.as_nanos() as u64;
        let step = match self.last_tick_ns {
            0 => tick_ns,
            last => now.saturating_sub(last).min(MAX_STEP_NS),
        };
        self.last_tick_ns = now;
        // The daemon is alive: its words in the limits files stand.
        for e in &self.entries {
            if let Some(limits) = &e.member.limits {
                limits.beat(now);
            }
        }
        let refunds = self.settle(now);
        let gpu = self.gpu;
        for e in &mut self.entries {
            e.observe(gpu, now);
            e.claim_ticks = if claims_work(e.account(gpu)) {
                e.claim_ticks.saturating_add(1)
            } else {
                0
            };
            e.member.claiming(gpu, e.claim_ticks);
        }

        // Decide, and block. Lifting a block is the preemption thread's alone wherever an
        // online container shares the GPU: it lifts it when the online work's `active`
        // word drops, and blocks again the moment it rises. A tick lifting it from claims
        // read a moment ago could let an offline launch through between an online raise
        // and the block that follows it. Where no online container is on the GPU any more
        // (a roster change), the tick lifts what is left.
        let claims: Vec<Claim> = self
            .entries
            .iter()
            .map(|e| Claim {
                policy: e.member.policy,
                priority: e.member.priority,
                demanding: has_work(&e.member, gpu),
            })
            .collect();
        let decisions = rates::decide(&claims);
        let online_here = self
            .entries
            .iter()
            .any(|e| e.member.priority == Priority::Online);
        for (e, d) in self.entries.iter().zip(&decisions) {
            if d.blocked {
                block(&e.member, gpu);
            } else if !online_here {
                unblock(&e.member, gpu);
            }
        }

        // The containers with work now; one whose policy cannot bind, with no neighbour
        // working that it must share with, gets the large window (see `ALONE_WINDOW_NS`).
        let working = claims.iter().filter(|c| c.demanding).count();
        let working_online = claims
            .iter()
            .filter(|c| c.demanding && c.priority == Priority::Online)
            .count();
        let unbound = |p: ComputePolicy| !matches!(p, ComputePolicy::Fixed(q) if q < 100);
        // What each container keeps if this daemon goes silent: its share when every
        // container here has work (its processes take over with it, see
        // `Region::take_over_if_daemon_silent`).
        let fallback = rates::decide(&self.everyone_working());
        // Containers that keep the GPU busy take turns.
        let contenders: Vec<Contender> = self
            .entries
            .iter_mut()
            .zip(claims.iter().zip(&decisions))
            .map(|(e, (claim, d))| {
                // Blocked by online work, an offline container's launches wait in its gate:
                // it still has work (it claims it).
                e.busy_ticks = if claim.demanding {
                    e.busy_ticks.saturating_add(1)
                } else {
                    0
                };
                // Relaxed: a momentary figure for choosing a turn's holder.
                let bucket = e.account(gpu).bucket_ns.load(Ordering::Relaxed);
                Contender {
                    saturated: e.busy_ticks >= turns::SATURATED_TICKS,
                    runnable: !d.blocked,
                    credit_ns: bucket.saturating_add(e.banked_ns),
                }
            })
            .collect();
        // Each class takes turns among its own: offline work gives way to online work
        // whenever that has any, so an offline holder blocked by it must never keep an
        // online container waiting for the turn.
        let before: Vec<Option<usize>> = self.turns.iter().map(Turns::holder).collect();
        let holders: Vec<Option<usize>> = (0..self.turns.len())
            .map(|class| {
                let own: Vec<Contender> = contenders
                    .iter()
                    .zip(&self.entries)
                    .map(|(c, e)| Contender {
                        saturated: c.saturated && turn_class(e.member.priority) == class,
                        ..*c
                    })
                    .collect();
                self.turns[class].plan(now, tick_ns, &own)
            })
            .collect();
        // A hand-off from the last tick ends here in any case.
        for (class, handoff) in self.handoffs.iter_mut().enumerate() {
            *handoff = match (before[class], holders[class]) {
                (Some(from), Some(to))
                    if from != to && self.entries.get(from).is_some_and(|e| e.in_flight(gpu)) =>
                {
                    Some(Handoff {
                        from,
                        // Relaxed: compared for a change, untrusted either way.
                        from_launches: self.entries[from]
                            .account(gpu)
                            .launches
                            .load(Ordering::Relaxed),
                        to,
                        decision: decisions[to],
                        until_ns: now + tick_ns,
                    })
                }
                _ => None,
            };
        }
        for (i, ((((e, d), refund), claim), keep)) in self
            .entries
            .iter_mut()
            .zip(&decisions)
            .zip(refunds)
            .zip(&claims)
            .zip(&fallback)
            .enumerate()
        {
            let class = turn_class(e.member.priority);
            let role = match holders[class] {
                Some(h) if h == i && self.handoffs[class].is_some_and(|x| x.to == i) => Role::Waits,
                Some(h) if h == i => Role::Holds,
                Some(_) if contenders[i].saturated => Role::Waits,
                _ => Role::Free,
            };
            let member = e.member.clone();
            let a = member.region.compute(gpu);
            e.idle_ticks = if claim.demanding {
                0
            } else {
                e.idle_ticks.saturating_add(1)
            };
            let refund = e.hold_to_record(gpu, a, refund);
            store_if_changed(&a.local_share_ppm, keep.share_ppm);
            // An online container is alone when no other online container works (offline
            // work gives way to it anyway); an offline one keeps its small window wherever
            // online work may start, since what it has queued is what online work meets.
            let alone = match e.member.priority {
                Priority::Online => working_online == usize::from(claim.demanding),
                Priority::Offline => !online_here && working == usize::from(claim.demanding),
            };
            let window_ns = if alone && unbound(e.member.policy) {
                ALONE_WINDOW_NS
            } else {
                shared_window_ns(e.member.priority)
            };
            configure(&e.member, gpu, e.member.priority, window_ns);
            let asked = e.member.timeslice_us();
            let found = e.member.region.timeslice_us();
            if found != asked {
                e.member.region.set_timeslice_us(asked);
                if found != e.slice_in_region {
                    e.member.note_tampering(Tampering::TIMESLICE);
                }
            }
            e.slice_in_region = asked;
            a.set_board_bit(board.and(e.board_bit));
            store_if_changed(&a.share_target_ppm, d.rate_ppm);
            e.member.grant(gpu, d.rate_ppm, now);
            store_if_changed(&a.share_measured_ppm, e.window.share_ppm());
            // Relaxed: a figure for status, written with the share it dates.
            a.share_measured_until_ns
                .store(e.window.until_ns(), Ordering::Relaxed);
            // Relaxed: see `hold_to_record`; read before the refill's credit, so a charge
            // landing between the two is counted in the next tick's fall.
            let measured = a.measured_ns.load(Ordering::Relaxed);
            // What the library may count as accruing until the next refill: nothing while it
            // waits for its turn or is blocked.
            let accruing = if role == Role::Waits || d.blocked {
                0
            } else {
                d.rate_ppm
            };
            store_if_changed(&a.refill_ppm, accruing);
            let left = refill(a, d, step, refund, now, role, &mut e.banked_ns);
            e.left_ns = Some((left, measured));
        }
        if let Some(board) = board {
            self.keep_board(board);
        }
    }

    /// Starts the new holder of each turn handed over at the last tick ([`Handoff`]) once the
    /// last holder's work has left the GPU, or its time is up: what was banked for it goes
    /// into its bucket, and its gate wakes. Returns whether a hand-off still waits.
    pub(super) fn pass_turns(&mut self, now: u64) -> bool {
        let gpu = self.gpu;
        for slot in 0..self.handoffs.len() {
            let Some(h) = self.handoffs[slot] else {
                continue;
            };
            let drained = self.entries.get(h.from).is_none_or(|e| {
                // Relaxed: see `Handoff`.
                !e.in_flight(gpu)
                    || e.account(gpu).launches.load(Ordering::Relaxed) != h.from_launches
            });
            if !drained && now < h.until_ns {
                continue;
            }
            self.handoffs[slot] = None;
            let Some(e) = self.entries.get_mut(h.to) else {
                continue;
            };
            let member = e.member.clone();
            let a = member.region.compute(gpu);
            // As at a tick: a bucket it raised meanwhile is put back first.
            e.hold_to_record(gpu, a, 0);
            // Relaxed: see `hold_to_record`.
            let measured = a.measured_ns.load(Ordering::Relaxed);
            let accruing = if h.decision.blocked {
                0
            } else {
                h.decision.rate_ppm
            };
            store_if_changed(&a.refill_ppm, accruing);
            let left = refill(a, &h.decision, 0, 0, now, Role::Holds, &mut e.banked_ns);
            e.left_ns = Some((left, measured));
        }
        self.handoffs.iter().any(Option::is_some)
    }

    /// Drops the board bits of this GPU that belong to no online container still here,
    /// alive and with work in the last [`IDLE_BIT_TICKS`] ticks (a crashed process leaves
    /// its bit set, as it leaves `active` up; an online container can set any bit of the
    /// board, its idle neighbours' too).
    fn keep_board(&mut self, board: &Board) {
        let gpu = self.gpu;
        let mask = self
            .entries
            .iter()
            .filter(|e| {
                !e.member.is_stale()
                    && !e.member.claims_ignored(gpu)
                    && e.idle_ticks < IDLE_BIT_TICKS
            })
            .filter_map(|e| e.board_bit)
            .fold(0u64, |m, bit| m | 1 << bit);
        let dropped = board.retain(self.gpu, mask);
        for e in &mut self.entries {
            if e.idle_ticks == 0 {
                e.framed_drops = 0;
            }
            if e.board_bit.is_some_and(|bit| dropped & 1 << bit != 0) && !e.member.is_stale() {
                e.member.note_tampering(Tampering::BOARD);
                e.framed_drops = e.framed_drops.saturating_add(1);
            }
        }
        // The bits offline libraries ignore, however often they are set again: all but those
        // of live containers here whose claims are true and whose bit no neighbour keeps
        // setting.
        let ignore = !self
            .entries
            .iter()
            .filter(|e| {
                !e.member.is_stale()
                    && !e.member.claims_ignored(gpu)
                    && e.framed_drops < FRAMED_DROPS
            })
            .filter_map(|e| e.board_bit)
            .fold(0u64, |m, bit| m | 1 << bit);
        for e in &self.entries {
            if let (Priority::Offline, Some(limits)) = (e.member.priority, &e.member.limits) {
                limits.set_board_ignore(gpu, ignore);
            }
        }
    }

    /// Collects every container's new spans and settles those older than
    /// [`SETTLE_AGE_NS`] (a span reaching past that is cut, its rest kept for later); returns
    /// each container's refund in ns (in `entries`' order) and moves the share windows on.
    fn settle(&mut self, now: u64) -> Vec<u64> {
        let gpu = self.gpu;
        let horizon = now.saturating_sub(SETTLE_AGE_NS);
        // Time before this is settled already: the part of a span there (one harvested
        // late) stays charged as it was, never refunded.
        let before = self.replay.settled_to().unwrap_or(0);
        let mut spans: Vec<Vec<BusySpan>> = Vec::with_capacity(self.entries.len());
        let mut pieces: Vec<Vec<(u64, u64)>> = Vec::with_capacity(self.entries.len());
        for e in &mut self.entries {
            let new = e.member.region.compute(gpu).take_spans(now);
            // The window ends with the millisecond the horizon is in: its part before the
            // horizon is settled now, the rest at the next tick.
            e.window.advance(horizon / settle::BIN_NS);
            if std::mem::take(&mut e.fresh) {
                // Spans from before this scheduler knew the container: dropped.
                spans.push(Vec::new());
                pieces.push(Vec::new());
                continue;
            }
            // Untrusted: a span that starts in the future is dropped, and what waits is
            // bounded, so that no region can make the daemon hold more and more.
            e.pending.extend(
                new.into_iter()
                    .filter(|s| s.start_ns <= now + FUTURE_SLACK_NS),
            );
            if e.pending.len() > MAX_PENDING_SPANS {
                let excess = e.pending.len() - MAX_PENDING_SPANS;
                e.pending.drain(..excess);
            }
            pieces.push(settle::pieces(&e.pending));
            spans.push(e.pending.clone());
        }
        let slices: Vec<u64> = self
            .entries
            .iter()
            .map(|e| e.member.slice_in_force_ns())
            .collect();
        self.replay
            .advance(&spans, &pieces, &slices, horizon, &mut self.settled);
        let settled = self.replay.settled_to().unwrap_or(before);
        for &(i, ms, ns) in &self.settled.per_ms {
            if let Some(e) = self.entries.get_mut(i) {
                e.window.add(ms, ns);
            }
        }
        // What each container's processes paid for the time settled now, less what it held
        // then: its refund. Spans over by then go.
        let mut refunds = Vec::with_capacity(self.entries.len());
        for (e, attributed) in self.entries.iter_mut().zip(&self.settled.attributed) {
            let paid: u64 = e
                .pending
                .iter()
                .map(|s| s.end_ns.min(settled).saturating_sub(s.start_ns.max(before)))
                .sum();
            refunds.push(paid.saturating_sub(*attributed));
            e.pending.retain(|s| s.end_ns > settled);
        }
        refunds
    }

    /// Every container as working and online: the claims whose shares each keeps when the
    /// daemon stops or goes silent.
    fn everyone_working(&self) -> Vec<Claim> {
        self.entries
            .iter()
            .map(|e| Claim {
                policy: e.member.policy,
                priority: Priority::Online,
                demanding: true,
            })
            .collect()
    }

    /// When the scheduler stops: every container keeps the share it would get if all of
    /// them had work ([`hand_over`]); no one keeps a board bit, since no one would drop it.
    fn hand_over_all(&self, board: Option<&Board>) {
        for e in &self.entries {
            e.account(self.gpu).set_board_bit(None);
        }
        if let Some(board) = board {
            board.retain(self.gpu, 0);
        }
        for (e, d) in self
            .entries
            .iter()
            .zip(rates::decide(&self.everyone_working()))
        {
            hand_over(&e.member, self.gpu, d.share_ppm);
        }
    }
}

/// Which of a GPU's [`Turns`] a container of `priority` takes part in.
fn turn_class(priority: Priority) -> usize {
    match priority {
        Priority::Online => 0,
        Priority::Offline => 1,
    }
}

/// A container's part in the GPU's turns ([`turns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// No turns for it: its refill goes into its bucket, with what was banked for it.
    Free,
    /// It holds the turn: its refill and what was banked go into its bucket.
    Holds,
    /// It waits for its turn: its refill is banked, and so is what its bucket holds.
    Waits,
}

/// Refills a bucket for `step_ns` at the decided rate and gives back the refund, as its
/// `role` in the turns says (`banked`: what is kept for it, in and out); wakes the gate
/// when the bucket turns positive. Only the refill is capped ([`BUCKET_TICKS`] ticks of the
/// rate while nothing is in flight, [`IN_FLIGHT_CREDIT_NS`] at the rate while launches are,
/// as much as is banked for a turn's holder): the refund returns time the container was
/// charged for others' time slices, and always reaches the bucket (or the bank) whatever
/// it holds, or overlapping containers would get less than their shares. Returns the
/// bucket it left.
fn refill(
    a: &ComputeAccount,
    d: &Decision,
    step_ns: u64,
    refund_ns: u64,
    now: u64,
    role: Role,
    banked: &mut i64,
) -> i64 {
    let ppm = u64::from(d.rate_ppm.min(rates::WHOLE_PPM));
    let whole = u64::from(rates::WHOLE_PPM);
    let add = step_ns * ppm / whole;
    if role == Role::Waits {
        // Relaxed (success and failure): see `ComputeAccount::credit`; what the bucket
        // held is moved to the bank, so that the container launches nothing until its turn
        // (a charge racing with this leaves a debt, paid from the bank later).
        let held = a
            .bucket_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b > 0).then_some(0)
            })
            .map_or(0, |b| b.max(0));
        let cap = i64::try_from(IN_FLIGHT_CREDIT_NS * ppm / whole).unwrap_or(i64::MAX);
        *banked = banked
            .saturating_add(held)
            .saturating_add(i64::try_from(add + refund_ns).unwrap_or(i64::MAX))
            .min(cap.max(held));
        // Relaxed: see below.
        a.last_refill_ns.store(now, Ordering::Relaxed);
        return a.bucket_ns.load(Ordering::Relaxed).min(0);
    }
    let add = add.saturating_add(u64::try_from(std::mem::take(banked)).unwrap_or(0));
    // Relaxed: a momentary count (untrusted; any non-zero value counts); either answer
    // only picks the cap. A blocked container keeps what it earns while it waits, up to
    // the catch-up cap, to spend once online work stops.
    let span = if d.blocked {
        BLOCKED_CREDIT_NS
    } else if a.inflight.load(Ordering::Relaxed) == 0 {
        BUCKET_TICKS * TICK.as_nanos() as u64
    } else {
        IN_FLIGHT_CREDIT_NS
    };
    let cap = span * ppm / whole;
    let cap = if role == Role::Holds {
        cap.max(add)
    } else {
        cap
    };
    let (old, mut new) = a.credit(
        i64::try_from(add).unwrap_or(i64::MAX),
        i64::try_from(cap).unwrap_or(i64::MAX),
    );
    if refund_ns > 0 {
        new = a
            .credit(i64::try_from(refund_ns).unwrap_or(i64::MAX), i64::MAX)
            .1;
    }
    // Relaxed: a timestamp for people and for a library that wants to see the daemon
    // alive; nothing is published under it.
    a.last_refill_ns.store(now, Ordering::Relaxed);
    if old <= 0 && new > 0 {
        a.wake_gate();
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Box<ComputeAccount> {
        // SAFETY: all-zero bytes are a valid ComputeAccount (integers and atomics).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    fn at(rate_ppm: u32) -> Decision {
        Decision {
            rate_ppm,
            share_ppm: rate_ppm,
            blocked: false,
        }
    }

    #[test]
    fn refunds_reach_a_full_bucket() {
        let a = account();
        let tick = TICK.as_nanos() as u64;
        // 30 % for ten ticks: capped at two ticks of the rate.
        refill(&a, &at(300_000), 10 * tick, 0, 1, Role::Free, &mut 0);
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 3_000_000);
        // A refund on top of a full bucket is kept whole.
        refill(&a, &at(300_000), tick, 20_000_000, 2, Role::Free, &mut 0);
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 23_000_000);
    }

    #[test]
    fn refill_is_not_capped_away_while_kernels_run() {
        let a = account();
        let tick = TICK.as_nanos() as u64;
        a.inflight.store(1, Ordering::Relaxed);
        for _ in 0..10 {
            refill(&a, &at(300_000), tick, 0, 1, Role::Free, &mut 0);
        }
        // 50 ms at 30 %: all of it, to pay for the kernel when it completes.
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 15_000_000);
        // Still bounded.
        for _ in 0..1000 {
            refill(&a, &at(300_000), tick, 0, 1, Role::Free, &mut 0);
        }
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 75_000_000);
    }
}
