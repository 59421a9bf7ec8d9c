//! A container's compute account on one device: the futex words its throttled launches sleep
//! on, its GPU-time token bucket and its in-flight window (its ring of busy spans is in
//! `spans.rs`). The primitives only; the
//! library decides when to launch and `controld` decides the rates.
//!
//! Sleeping without lost wake-ups: a launch that must wait first counts itself in
//! `waiting`, then loads `gate`, then checks once more whether it may launch, and only then
//! sleeps with [`ComputeAccount::wait_gate`] on the value it loaded. A refiller first
//! changes the bucket (or the block), then calls [`ComputeAccount::wake_gate`], which bumps
//! `gate` and wakes the sleepers if `waiting` is not 0. All four steps are `SeqCst`: either
//! the refiller sees the waiter counted (and wakes it; the kernel returns at once from a
//! wait whose word has moved), or the waiter's count comes later in the single total order,
//! and so do its load of `gate` and its check, which then see the refill. Waits also time
//! out (at most a millisecond in the library), so even a lost wake-up costs little.

use crate::futex::Sharing;
use crate::layout::{ComputeAccount, COMPUTE_DAEMON, COMPUTE_LOCAL, COMPUTE_UNLIMITED, PPM_ALL};
use crate::spans::BusySpan;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// How often the processes of a [`COMPUTE_LOCAL`] container refill their bucket.
pub const LOCAL_REFILL_NS: u64 = 1_000_000;
/// The most a [`COMPUTE_LOCAL`] bucket holds: this long at its share (no hoarding while
/// idle beyond a few milliseconds).
pub const LOCAL_BURST_NS: u64 = 5_000_000;
/// How long a device in daemon mode may go without a refill before its processes take over
/// in local mode (`Region::take_over_if_daemon_silent`): the daemon refills every 5 ms, so
/// this long means it died, or stalled badly enough that keeping the last share is better
/// than waiting for it.
pub const DAEMON_SILENT_NS: u64 = 100_000_000;
/// How often `controld` refills the buckets: the most refill a library counts as accrued
/// ahead of the next one ([`ComputeAccount::has_credit`]).
pub const REFILL_PERIOD_NS: u64 = 5_000_000;
/// The deepest debt a bucket is refilled from: a kernel longer than this is not charged in
/// full (it is several seconds of GPU time, far past any refill period).
pub const MAX_DEBT_NS: i64 = 5_000_000_000;

/// The node clock, `CLOCK_MONOTONIC`, in nanoseconds: the clock of every time in a region.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

pub use crate::futex::Woken;

impl ComputeAccount {
    /// Bumps `gate` and wakes every launch sleeping on it. Call it after refilling the
    /// bucket so that it turns positive, after lifting a block, and after changing the mode
    /// (see the module's comment for why no wake-up is lost).
    pub fn wake_gate(&self) {
        // SeqCst: the refiller's half of the protocol in the module's comment; it orders
        // the caller's earlier change before the bump, and the bump before the load of
        // `waiting`.
        self.gate.fetch_add(1, Ordering::SeqCst);
        // SeqCst: as above.
        if self.waiting.load(Ordering::SeqCst) != 0 {
            futex_wake(&self.gate);
        }
    }

    /// Sleeps while `gate` still holds `seen`, at most `timeout_ns`. The caller counted
    /// itself in `waiting` before it loaded `seen` (SeqCst) and uncounts itself afterwards.
    pub fn wait_gate(&self, seen: u32, timeout_ns: u64) -> Woken {
        futex_wait(&self.gate, seen, timeout_ns)
    }

    /// Wakes whoever sleeps on `active` (`controld`'s preemption thread); call it after
    /// raising `active`.
    pub fn wake_active(&self) {
        futex_wake(&self.active);
    }

    /// Sleeps while `active` still holds `seen`, at most `timeout_ns`: a one-word fallback
    /// for a daemon that cannot wait on several words at once.
    pub fn wait_active(&self, seen: u32, timeout_ns: u64) -> Woken {
        futex_wait(&self.active, seen, timeout_ns)
    }

    /// The container's bit on the node's board ([`crate::Board`]), if `controld` gave it
    /// one (`board_bit` holds the bit plus one; 0, or a value past the word, is none).
    pub fn board_bit(&self) -> Option<u32> {
        // Relaxed: a setting of the daemon's, read afresh each time.
        match self.board_bit.load(Ordering::Relaxed) {
            0 => None,
            b if b <= 64 => Some(b - 1),
            _ => None,
        }
    }

    /// Gives the container `bit` on the node's board, or none (`controld`); an unchanged
    /// value is not written again.
    pub fn set_board_bit(&self, bit: Option<u32>) {
        let value = bit.map_or(0, |b| b + 1);
        // Relaxed (both): see `board_bit`.
        if self.board_bit.load(Ordering::Relaxed) != value {
            self.board_bit.store(value, Ordering::Relaxed);
        }
    }

    /// The launch window in force: `window`, or [`DEFAULT_WINDOW`](crate::layout::DEFAULT_WINDOW)
    /// when it is 0.
    pub fn window_or_default(&self) -> u32 {
        // Relaxed: a limit read afresh at every launch; no data is published under it.
        match self.window.load(Ordering::Relaxed) {
            0 => crate::layout::DEFAULT_WINDOW,
            w => w,
        }
    }

    /// The GPU-time window in force: `window_ns`, or
    /// [`DEFAULT_WINDOW_NS`](crate::layout::DEFAULT_WINDOW_NS) when it is 0.
    pub fn window_ns_or_default(&self) -> u64 {
        // Relaxed: a limit read afresh at every launch; no data is published under it.
        match self.window_ns.load(Ordering::Relaxed) {
            0 => crate::layout::DEFAULT_WINDOW_NS,
            w => w,
        }
    }

    /// Takes a place in the window for a launch estimated at `estimate_ns`: at most
    /// `window` launches, and an empty window takes any launch, a busy one only what fits
    /// in `window_ns` beside the estimates already in flight. `false`: no room (nothing
    /// taken). A place is given back with [`ComputeAccount::leave_window`].
    pub fn enter_window(&self, estimate_ns: u64) -> bool {
        let launches = self.window_or_default();
        let window_ns = self.window_ns_or_default();
        enter_window(
            &self.inflight,
            &self.inflight_ns,
            launches,
            window_ns,
            estimate_ns,
        )
    }

    /// Gives back `launches` launches' places in the window and `estimate_ns` of the GPU
    /// time it counts.
    pub fn leave_window(&self, launches: u32, estimate_ns: u64) {
        leave_window(&self.inflight, &self.inflight_ns, launches, estimate_ns);
    }

    /// Counts `launches` launches and `ns` of GPU time more in the window without a limit
    /// (local mode, where each process keeps its own window and the container's counts only
    /// say what is in flight; and a process's held time growing with launches admitted
    /// already).
    pub fn join_window_by(&self, launches: u32, ns: u64) {
        // Relaxed (both): see `enter_window`.
        if launches != 0 {
            self.inflight.fetch_add(launches, Ordering::Relaxed);
        }
        if ns != 0 {
            self.inflight_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Charges `ns` of measured GPU time to the bucket (which may go into debt) and to
    /// `measured_ns`.
    pub fn charge(&self, ns: u64) {
        let debit = i64::try_from(ns).unwrap_or(i64::MAX);
        // Relaxed (both): counters with no data behind them; each read-modify-write is
        // atomic on its own, which is all a token bucket needs.
        self.bucket_ns.fetch_sub(debit, Ordering::Relaxed);
        self.measured_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds `ns` to the bucket (negative: takes it away), starting from no deeper debt than
    /// [`MAX_DEBT_NS`] and keeping it at most `cap_ns`; a bucket already above the cap
    /// is not lowered by a credit. Returns the bucket before and after. The caller wakes the gate
    /// when the bucket turned positive.
    pub fn credit(&self, ns: i64, cap_ns: i64) -> (i64, i64) {
        let step = |b: i64| {
            let to = b.max(-MAX_DEBT_NS).saturating_add(ns);
            if ns >= 0 {
                to.min(cap_ns.max(b))
            } else {
                to
            }
        };
        // Relaxed (success and failure): see `charge`; the caller's `wake_gate` is what
        // orders the refill before the waiters' checks.
        let old = self
            .bucket_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(step(b)))
            .unwrap_or_else(|b| b);
        (old, step(old))
    }

    /// In [`COMPUTE_LOCAL`] mode, refills the bucket at `local_share_ppm` for the time since
    /// `last_refill_ns`, if that is at least [`LOCAL_REFILL_NS`]: whichever process of the
    /// container moves `last_refill_ns` forward (one compare-and-swap) adds the credit, so
    /// each nanosecond of time is credited once. Wakes the gate when the bucket turns
    /// positive. Returns whether it refilled.
    pub fn refill_local(&self, now_ns: u64) -> bool {
        // Relaxed: mode and share are single words set before the first gated launch; a
        // refill racing with a change uses either value.
        if self.mode.load(Ordering::Relaxed) != COMPUTE_LOCAL {
            return false;
        }
        // Relaxed: the compare-and-swap below is what makes the refill exclusive.
        let last = self.last_refill_ns.load(Ordering::Relaxed);
        let elapsed = now_ns.saturating_sub(last);
        if elapsed < LOCAL_REFILL_NS {
            return false;
        }
        // Relaxed (both): whoever wins the swap owns [last, now); the credit it then adds is
        // a read-modify-write of its own.
        if self
            .last_refill_ns
            .compare_exchange(last, now_ns, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: see above.
        let ppm = u64::from(self.local_share_ppm.load(Ordering::Relaxed).min(PPM_ALL));
        // A first refill (last = 0) is credited one burst; after a pause, the cap below
        // keeps an idle container from hoarding.
        let elapsed = if last == 0 { LOCAL_BURST_NS } else { elapsed };
        let add = i64::try_from(elapsed * ppm / u64::from(PPM_ALL)).unwrap_or(i64::MAX);
        // The cap keeps an idle container from hoarding; while launches are in flight their
        // time is not charged yet, and capping then would throw away credit that the
        // charge is about to take (long kernels would get less than their share).
        // Relaxed: a momentary count; either answer is safe.
        let cap = if self.inflight.load(Ordering::Relaxed) == 0 {
            i64::try_from(LOCAL_BURST_NS * ppm / u64::from(PPM_ALL)).unwrap_or(i64::MAX)
        } else {
            i64::MAX
        };
        // Where the container's own spans overlapped (its processes' and streams' intervals
        // include each other's time slices or ran at once), the overlap was charged twice
        // and is given back. Spans read at different refills are not compared: what that
        // misses is a refund forgone, never time given away.
        let mut spans = self.take_spans(now_ns);
        let raw: u64 = spans.iter().map(BusySpan::len_ns).sum();
        let refund = raw.saturating_sub(crate::spans::union_ns(&mut spans));
        let refund = i64::try_from(refund).unwrap_or(i64::MAX);
        let (old, _) = self.credit(add, cap);
        let (_, new) = if refund > 0 {
            self.credit(refund, i64::MAX)
        } else {
            (old, self.bucket_ns.load(Ordering::Relaxed))
        };
        if old <= 0 && new > 0 {
            self.wake_gate();
        }
        true
    }

    /// Whether the container may launch at `now_ns` by its credit: its bucket, and, with a
    /// daemon, what its refill rate (`refill_ppm`) has accrued since the daemon's last
    /// refill, at most a refill period's worth (which the next refill brings anyway).
    pub fn has_credit(&self, now_ns: u64) -> bool {
        // SeqCst: part of the gate's sleep protocol (see the module's comment).
        let bucket = self.bucket_ns.load(Ordering::SeqCst);
        // Relaxed: a mode read afresh at every launch; in local mode the processes refill
        // the bucket themselves, every millisecond.
        if bucket > 0 || self.mode.load(Ordering::Relaxed) != COMPUTE_DAEMON {
            return bucket > 0;
        }
        // Relaxed (both): a rate and a timestamp of the daemon's, read afresh each time; a
        // stale pair admits a launch a moment early or late.
        let ppm = u64::from(self.refill_ppm.load(Ordering::Relaxed).min(PPM_ALL));
        if ppm == 0 {
            return false;
        }
        let since = now_ns
            .saturating_sub(self.last_refill_ns.load(Ordering::Relaxed))
            .min(REFILL_PERIOD_NS);
        let accrued = i64::try_from(since * ppm / u64::from(PPM_ALL)).unwrap_or(i64::MAX);
        bucket.saturating_add(accrued) > 0
    }

    /// Whether this account's mode limits launches.
    pub fn is_limited(&self) -> bool {
        // Relaxed: a mode read afresh at every launch.
        self.mode.load(Ordering::Relaxed) != COMPUTE_UNLIMITED
    }
}

/// Sleeps while `word` (in the region's shared mapping) holds `seen`, at most
/// `timeout_ns`.
fn futex_wait(word: &AtomicU32, seen: u32, timeout_ns: u64) -> Woken {
    crate::futex::wait(
        word,
        Sharing::Shared,
        seen,
        Duration::from_nanos(timeout_ns),
    )
}

/// Wakes every sleeper on `word`, in any process.
fn futex_wake(word: &AtomicU32) {
    crate::futex::wake_all(word, Sharing::Shared);
}

/// The window rule over a pair of counts (a container's, in its account; or a process's own,
/// in local mode): takes a place for a launch estimated at `estimate_ns` if fewer than
/// `launches` are in flight and the window is empty or the estimate fits beside those in
/// flight within `window_ns`. `false`: no room, nothing taken.
pub fn enter_window(
    inflight: &AtomicU32,
    inflight_ns: &AtomicU64,
    launches: u32,
    window_ns: u64,
    estimate_ns: u64,
) -> bool {
    // Relaxed (all): counts; each compare-and-swap keeps its own word exact, and a launch
    // that got a count but not the time gives the count back at once.
    if inflight
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < launches).then_some(n + 1)
        })
        .is_err()
    {
        return false;
    }
    let fits = inflight_ns
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ns| {
            (ns == 0 || ns.saturating_add(estimate_ns) <= window_ns)
                .then(|| ns.saturating_add(estimate_ns))
        })
        .is_ok();
    if !fits {
        let _ = inflight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
    fits
}

/// Gives back what [`enter_window`] took for `launches` launches estimated at `estimate_ns`
/// in all (never below zero: a daemon may have cleared the counts of a container whose
/// processes all died).
pub fn leave_window(
    inflight: &AtomicU32,
    inflight_ns: &AtomicU64,
    launches: u32,
    estimate_ns: u64,
) {
    // Relaxed (both): see `enter_window`.
    let _ = inflight_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ns| {
        Some(ns.saturating_sub(estimate_ns))
    });
    let _ = inflight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        Some(n.saturating_sub(launches))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::COMPUTE_DAEMON;

    fn account() -> Box<ComputeAccount> {
        // SAFETY: all-zero bytes are a valid ComputeAccount (integers and atomics).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    #[test]
    fn credits_are_clamped_and_debt_is_bounded() {
        let a = account();
        a.charge(3_000);
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), -3_000);
        assert_eq!(a.measured_ns.load(Ordering::Relaxed), 3_000);
        assert_eq!(a.credit(10_000, 5_000), (-3_000, 5_000));
        assert_eq!(a.credit(10_000, 5_000), (5_000, 5_000));
        a.bucket_ns.store(-100 * MAX_DEBT_NS, Ordering::Relaxed);
        assert_eq!(a.credit(1, 5_000).1, -MAX_DEBT_NS + 1);
        assert_eq!(a.credit(-10, 5_000).1, -MAX_DEBT_NS - 9);
    }

    #[test]
    fn local_refill_credits_each_nanosecond_once() {
        let a = account();
        a.mode.store(COMPUTE_LOCAL, Ordering::Relaxed);
        a.local_share_ppm.store(300_000, Ordering::Relaxed);
        a.last_refill_ns.store(1_000_000_000, Ordering::Relaxed);
        assert!(!a.refill_local(1_000_500_000)); // under a millisecond
        assert!(a.refill_local(1_002_000_000));
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 600_000);
        assert!(!a.refill_local(1_002_000_000));
        // Capped at the burst.
        assert!(a.refill_local(2_000_000_000));
        assert_eq!(a.bucket_ns.load(Ordering::Relaxed), 1_500_000);
        a.mode.store(COMPUTE_DAEMON, Ordering::Relaxed);
        assert!(!a.refill_local(3_000_000_000));
    }

    #[test]
    fn a_gate_wait_times_out_or_returns_when_the_word_moved() {
        let a = account();
        let t = std::time::Instant::now();
        assert_eq!(a.wait_gate(0, 2_000_000), Woken::TimedOut);
        assert!(t.elapsed() >= std::time::Duration::from_millis(2));
        assert_eq!(a.wait_gate(7, 1_000_000_000), Woken::Woken);
    }
}
