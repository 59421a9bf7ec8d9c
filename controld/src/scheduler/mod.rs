//! The compute scheduler: each GPU's time shared among the containers on it (`docs/compute-sharing.md`).
//!
//! Two threads. The *tick* thread wakes every [`TICK`] and, for each GPU in turn (one
//! `GpuScheduler` each), reads every container's compute account on it (untrusted:
//! clamped), settles the busy bins old enough to be complete and normalises their overlap
//! (refunding what a container was charged for others' time slices), computes each
//! container's share from the policies and the demand ([`rates`]), applies priority,
//! refills the token buckets and wakes throttled launches. The *preemption* thread sleeps
//! on the `active` words of the online containers (`futex_waitv`) and blocks the
//! offline containers of a GPU the moment online work starts there, without waiting for a
//! tick (module `preempt`).
//!
//! Both learn the containers from a [`Roster`] that the daemon's state publishes on every
//! change (add, remove, change, adoption, a replaced region).

mod gpu;
mod preempt;
pub mod rates;
pub mod settle;
pub mod turns;

use crate::policy::{ComputePolicy, Priority};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_region::futex::{self, Sharing};
use tessera_region::slicing::Slicing;
use tessera_region::{Region, TimesliceOutcome, MAX_DEVICES};

/// Time between two ticks: the scheduler's accounting period, which the library counts
/// refills ahead by.
pub const TICK: Duration = Duration::from_nanos(tessera_region::compute::REFILL_PERIOD_NS);

/// One container as the scheduler sees it.
#[derive(Debug)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Its region.
    pub region: Arc<Region>,
    /// Its limits file, where the daemon made one: the words of the daemon's that its
    /// processes obey whatever they write into the region (mode, holds, the heartbeat).
    pub limits: Option<Arc<tessera_region::Limits>>,
    /// The GPUs it may use.
    pub gpus: Vec<u32>,
    /// Its compute policy.
    pub policy: ComputePolicy,
    /// Its priority.
    pub priority: Priority,
    /// The time slice its processes are asked to set on their channel groups, in µs; 0 for
    /// the driver's. It changes in place as neighbours come and go (an online container's
    /// default depends on them), so that the scheduler keeps what it knows of it.
    timeslice_us: AtomicU32,
    /// What it asked when it was made: what the roster wrote into its region then.
    first_timeslice_us: Option<u32>,
    /// Set by the tick thread while the container's region claims work but it has made no
    /// progress for a second and has no live process: a crashed process left its `active`
    /// or `inflight` up. Such a container is treated as idle (it must not block offline
    /// work forever).
    stale: AtomicBool,
    /// What the tick found its processes writing into its region that the daemon put back
    /// ([`Tampering`] bits), for status.
    tampering: AtomicU32,
    /// Per GPU, what the ticks granted it: the daemon's own figures, where the region's
    /// copy is the container's to write. A lock, not atomics: the share, the count and
    /// its time change together, and a status read between two of them would weigh a
    /// watchdog pass against a tick's worth of time too much or too little (the tick
    /// takes it once per container every 5 ms, status once per read).
    grants: [Mutex<Grant>; MAX_DEVICES],
    /// Per GPU, ticks in a row at which its region claimed work (the tick's count).
    claiming_ticks: [AtomicU32; MAX_DEVICES],
    /// Per GPU, set by the watchdog while it claims work that NVML shows it does not do:
    /// its claims count for nothing (it blocks no offline work, and its board bit is
    /// ignored).
    claims_ignored: [AtomicBool; MAX_DEVICES],
}

/// What the ticks granted a container on one GPU.
#[derive(Debug, Clone, Copy)]
struct Grant {
    /// The share the last tick granted, in ppm ([`UNGRANTED`] before the first).
    ppm: u32,
    /// The GPU time granted up to `at_ns`: each tick's share over the time to the next.
    total_ns: u64,
    /// When the last tick granted (node clock).
    at_ns: u64,
}

/// [`Grant::ppm`] before a tick granted anything.
const UNGRANTED: u32 = u32::MAX;

/// The GPU time a container was granted on a GPU since the scheduler first did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantedTime {
    /// GPU time granted, in ns.
    pub ns: u64,
    /// Up to when (node clock, ns of `CLOCK_MONOTONIC`).
    pub until_ns: u64,
}

/// Kinds of tampering the scheduler finds in a region and undoes, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tampering(pub u32);

impl Tampering {
    /// Its token bucket raised between two refills (put back where the daemon left it).
    pub const BUCKET: Tampering = Tampering(1);
    /// Its board bit found set while it had no work (cleared): set by another container.
    pub const BOARD: Tampering = Tampering(2);
    /// The time slice its region asks changed by a process of its own (put back).
    pub const TIMESLICE: Tampering = Tampering(4);
    /// Its compute mode, limited bits or block rewritten in its region (put back; the
    /// library obeys the daemon's copy in the limits file).
    pub const COMPUTE_WORDS: Tampering = Tampering(8);

    /// A line for status per kind in `bits`.
    pub fn describe(bits: u32) -> Vec<&'static str> {
        let mut lines = Vec::new();
        if bits & Tampering::BUCKET.0 != 0 {
            lines.push("its compute bucket was raised by a process of its own; put back where controld left it (it gains no GPU time)");
        }
        if bits & Tampering::BOARD.0 != 0 {
            lines.push("its bit on the priority board was set while it had no work (by another online container); cleared");
        }
        if bits & Tampering::COMPUTE_WORDS.0 != 0 {
            lines.push("its compute mode or block was rewritten in its region by a process of its own; put back (its processes obey controld's copy in the limits file)");
        }
        if bits & Tampering::TIMESLICE.0 != 0 {
            lines.push("the GPU time slice its region asks was changed by a process of its own; put back (its processes, which own their channel groups, can still set another on them)");
        }
        lines
    }
}

impl Member {
    /// A member that is not stale.
    pub fn new(
        name: String,
        region: Arc<Region>,
        limits: Option<Arc<tessera_region::Limits>>,
        gpus: Vec<u32>,
        policy: ComputePolicy,
        priority: Priority,
        timeslice_us: Option<u32>,
    ) -> Member {
        Member {
            name,
            region,
            limits,
            gpus: gpus
                .into_iter()
                .filter(|&g| (g as usize) < MAX_DEVICES)
                .collect(),
            policy,
            priority,
            timeslice_us: AtomicU32::new(timeslice_us.unwrap_or(0)),
            first_timeslice_us: timeslice_us,
            stale: AtomicBool::new(false),
            tampering: AtomicU32::new(0),
            grants: [const {
                Mutex::new(Grant {
                    ppm: UNGRANTED,
                    total_ns: 0,
                    at_ns: 0,
                })
            }; MAX_DEVICES],
            claiming_ticks: [const { AtomicU32::new(0) }; MAX_DEVICES],
            claims_ignored: [const { AtomicBool::new(false) }; MAX_DEVICES],
        }
    }

    /// Records that its region has claimed work on `gpu` for `ticks` ticks in a row.
    pub(crate) fn claiming(&self, gpu: usize, ticks: u32) {
        if let Some(word) = self.claiming_ticks.get(gpu) {
            // Relaxed: a figure for the watchdog, with nothing published under it.
            word.store(ticks, Ordering::Relaxed);
        }
    }

    /// For how long its region has claimed work on `gpu` without a break.
    pub fn claiming_for(&self, gpu: usize) -> Duration {
        // Relaxed: see `claiming`.
        let ticks = self
            .claiming_ticks
            .get(gpu)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        TICK * ticks
    }

    /// Sets whether its claims of work on `gpu` are ignored; returns whether that changed.
    pub fn ignore_claims(&self, gpu: usize, ignored: bool) -> bool {
        // Relaxed: a verdict read afresh by the scheduler's threads.
        self.claims_ignored
            .get(gpu)
            .is_some_and(|w| w.swap(ignored, Ordering::Relaxed) != ignored)
    }

    /// Whether its claims of work on `gpu` are ignored.
    pub fn claims_ignored(&self, gpu: usize) -> bool {
        // Relaxed: see `ignore_claims`.
        self.claims_ignored
            .get(gpu)
            .is_some_and(|w| w.load(Ordering::Relaxed))
    }

    /// Records the share the tick at `now_ns` granted it on `gpu`, and counts the share
    /// the tick before granted over the time since.
    pub(crate) fn grant(&self, gpu: usize, ppm: u32, now_ns: u64) {
        let Some(grant) = self.grants.get(gpu) else {
            return;
        };
        let mut g = grant.lock().unwrap_or_else(|p| p.into_inner());
        if g.ppm != UNGRANTED {
            let ns = u128::from(now_ns.saturating_sub(g.at_ns)) * u128::from(g.ppm)
                / u128::from(rates::WHOLE_PPM);
            g.total_ns = g
                .total_ns
                .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX));
        }
        g.ppm = ppm;
        g.at_ns = now_ns;
    }

    /// What the ticks granted it on `gpu`; `None` before the first.
    fn grant_on(&self, gpu: usize) -> Option<Grant> {
        let g = *self
            .grants
            .get(gpu)?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        (g.ppm != UNGRANTED).then_some(g)
    }

    /// The share the scheduler last granted it on `gpu` (0 to 1); `None` before it did.
    pub fn granted(&self, gpu: usize) -> Option<f64> {
        self.grant_on(gpu)
            .map(|g| f64::from(g.ppm) / f64::from(rates::WHOLE_PPM))
    }

    /// The GPU time the scheduler granted it on `gpu` up to its last tick; `None` before
    /// it did. A share swings with every online request on the GPU; this is what a use
    /// over a span of time is weighed against.
    pub fn granted_time(&self, gpu: usize) -> Option<GrantedTime> {
        self.grant_on(gpu).map(|g| GrantedTime {
            ns: g.total_ns,
            until_ns: g.at_ns,
        })
    }

    /// Records tampering of `kind` found in its region.
    pub(crate) fn note_tampering(&self, kind: Tampering) {
        // Relaxed: a set of flags for status; nothing is published under them.
        self.tampering.fetch_or(kind.0, Ordering::Relaxed);
    }

    /// The [`Tampering`] bits found so far.
    pub fn tampering(&self) -> u32 {
        // Relaxed: see `note_tampering`.
        self.tampering.load(Ordering::Relaxed)
    }

    /// The time slice its processes are asked to set on their channel groups, in µs;
    /// `None` for the driver's.
    pub fn timeslice_us(&self) -> Option<u32> {
        // Relaxed: a single word, with nothing published under it; the tick brings the
        // region in line with whatever it reads.
        match self.timeslice_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(us),
        }
    }

    /// Asks another time slice of it ([`Roster::publish`]); the tick writes it into its
    /// region.
    fn ask_timeslice(&self, us: Option<u32>) {
        // Relaxed: see `timeslice_us`.
        self.timeslice_us.store(us.unwrap_or(0), Ordering::Relaxed);
    }

    /// What the roster wrote into its region's time slice when it was made.
    pub(crate) fn first_timeslice_us(&self) -> Option<u32> {
        self.first_timeslice_us
    }

    /// The time slice its channel groups run, for replaying the GPU's slicing, in ns; 0
    /// for the GPU's own. The one controld asked, where its processes report it set; the
    /// GPU's otherwise (refused, not yet set, or a report it did not ask: a process can
    /// claim no other slice than the one asked).
    pub(crate) fn slice_in_force_ns(&self) -> u64 {
        match (
            self.timeslice_us(),
            self.region.timeslice_report().outcome(),
        ) {
            (Some(asked), TimesliceOutcome::Set { us, .. }) if us == asked => {
                u64::from(asked) * 1_000
            }
            _ => 0,
        }
    }

    fn same_as(&self, other: &Member) -> bool {
        self.name == other.name
            && Arc::ptr_eq(&self.region, &other.region)
            && self.gpus == other.gpus
            && self.policy == other.policy
            && self.priority == other.priority
            && match (&self.limits, &other.limits) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    fn is_stale(&self) -> bool {
        // Relaxed: a hint the tick thread refreshes every second; nothing is published
        // under it.
        self.stale.load(Ordering::Relaxed)
    }
}

/// The containers the scheduler serves: published by the daemon's state on every change,
/// read by the scheduler's threads when its generation moves.
#[derive(Debug, Default)]
pub struct Roster {
    members: Mutex<Arc<Vec<Arc<Member>>>>,
    generation: AtomicU64,
    /// Futex word (private to this process) bumped and woken on every change and at stop,
    /// so that the preemption thread re-arms at once.
    rearm: AtomicU32,
}

impl Roster {
    /// Replaces the members. A member unchanged from the previous set keeps its identity
    /// (and what the scheduler learnt about it); a change of its time slice alone is asked
    /// of it in place.
    pub fn publish(&self, members: Vec<Member>) {
        let mut current = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let next: Vec<Arc<Member>> = members
            .into_iter()
            .map(|m| {
                current
                    .iter()
                    .find(|old| old.same_as(&m))
                    .map(|old| {
                        old.ask_timeslice(m.timeslice_us());
                        old.clone()
                    })
                    .unwrap_or_else(|| {
                        // New or changed: its limits are in its region before this returns,
                        // so before the daemon answers whoever asked for it.
                        gpu::prime(&m);
                        m.region.set_timeslice_us(m.first_timeslice_us);
                        Arc::new(m)
                    })
            })
            .collect();
        *current = Arc::new(next);
        drop(current);
        // Release: pairs with the Acquire load in `snapshot`'s callers' generation check;
        // the members themselves are behind the mutex.
        self.generation.fetch_add(1, Ordering::Release);
        self.poke();
    }

    /// The members now and the generation they belong to.
    pub fn snapshot(&self) -> (u64, Arc<Vec<Arc<Member>>>) {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        // Acquire: pairs with the Release bump in `publish`; read under the lock, so the
        // generation is never older than the members returned with it.
        (self.generation.load(Ordering::Acquire), members.clone())
    }

    /// The generation now: a change of it means [`Roster::snapshot`] has news.
    pub fn generation(&self) -> u64 {
        // Acquire: see `snapshot`.
        self.generation.load(Ordering::Acquire)
    }

    /// Wakes the preemption thread.
    fn poke(&self) {
        // SeqCst: the preemption thread loads `rearm` before it reads what it waits for;
        // a bump after that load makes its futex wait return at once.
        self.rearm.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.rearm, Sharing::Private);
    }
}

/// What the scheduler's threads share.
struct Shared {
    roster: Arc<Roster>,
    /// The node's priority board: the tick gives online containers their bits and drops
    /// the bits of containers that are gone.
    board: Option<tessera_region::Board>,
    /// How each GPU time-slices contexts, by index (the H200's past the end).
    slicing: Vec<Slicing>,
    stop: AtomicBool,
}

impl Shared {
    fn stopping(&self) -> bool {
        // Relaxed: a flag with no data behind it.
        self.stop.load(Ordering::Relaxed)
    }
}

/// The running scheduler.
pub struct Scheduler {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Scheduler {
    /// Starts the tick and preemption threads over `roster`, with the node's priority
    /// `board` if there is one and each GPU's time-slicing (by index; the H200's for a GPU
    /// not listed).
    pub fn spawn(
        roster: Arc<Roster>,
        board: Option<tessera_region::Board>,
        slicing: Vec<Slicing>,
    ) -> std::io::Result<Scheduler> {
        let shared = Arc::new(Shared {
            roster,
            board,
            slicing,
            stop: AtomicBool::new(false),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("compute-tick".into())
                .spawn(move || gpu::run(&s))?,
        );
        let s = shared.clone();
        let preempt = std::thread::Builder::new()
            .name("compute-preempt".into())
            .spawn(move || preempt::run(&s));
        match preempt {
            Ok(t) => threads.push(t),
            Err(e) => {
                Scheduler { shared, threads }.stop();
                return Err(e);
            }
        }
        Ok(Scheduler { shared, threads })
    }

    /// Stops both threads. The containers keep their limits: every metered one is put in
    /// LOCAL mode at the share it gets when every container on its GPU has work (its
    /// processes refill their bucket themselves), and blocks are lifted, since no one
    /// would lift them.
    pub fn stop(self) {
        // Relaxed: see `Shared::stopping`; the poke below and the tick's short sleep make
        // the threads look at it.
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.roster.poke();
        // The tick thread hands the containers over as it ends.
        for t in self.threads {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_granted_is_each_ticks_share_over_the_time_to_the_next() {
        let init = tessera_region::RegionInit {
            name: "granted".into(),
            memory_caps: [None; MAX_DEVICES],
        };
        let region = Arc::new(Region::anonymous(&init).expect("an anonymous region"));
        let m = Member::new(
            "granted".into(),
            region,
            None,
            vec![0],
            ComputePolicy::BestEffort,
            Priority::Offline,
            None,
        );
        assert_eq!(m.granted_time(0), None);
        let ms = 1_000_000;
        // The whole GPU for 10 ms, nothing for 10 (an online request), half for 20.
        m.grant(0, rates::WHOLE_PPM, 100 * ms);
        m.grant(0, 0, 110 * ms);
        m.grant(0, rates::WHOLE_PPM / 2, 120 * ms);
        m.grant(0, 0, 140 * ms);
        assert_eq!(
            m.granted_time(0),
            Some(GrantedTime {
                ns: 20 * ms,
                until_ns: 140 * ms
            })
        );
        assert_eq!(m.granted(0), Some(0.0));
        assert_eq!(m.granted_time(1), None);
    }
}
