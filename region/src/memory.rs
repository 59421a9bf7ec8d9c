//! A container's memory cap on one device: reservations that can never pass it, across
//! threads and processes, by a single byte.

use crate::layout::{DeviceAccount, UNLIMITED};
use std::sync::atomic::{AtomicU64, Ordering};

/// A reservation that would pass the container's cap on a device. Nothing was reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverCap {
    /// The cap in force, in bytes.
    pub cap: u64,
    /// The container's usage the reservation was measured against, in bytes.
    pub used: u64,
}

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the container's memory cap of {} bytes is reached ({} bytes in use); free memory or raise the cap",
            self.cap, self.used
        )
    }
}

impl std::error::Error for OverCap {}

/// One device's account of a container, seen as a cap with a counter under it; and the
/// device's word in the container's limits file, where it has one: the container is held
/// to the lower of the two caps (it can write the region's, not the limits file's).
pub(crate) struct MemoryCap<'a>(pub &'a DeviceAccount, pub Option<&'a AtomicU64>);

impl MemoryCap<'_> {
    /// The cap; `None` when unlimited.
    pub fn cap(&self) -> Option<u64> {
        let cap = self.load_cap();
        (cap != UNLIMITED).then_some(cap)
    }

    /// The cap in force: the region's, or the limits file's where that is lower.
    fn load_cap(&self) -> u64 {
        // Relaxed (both): each cap is a single word with no data published under it; a
        // reservation racing with a change may be judged against either value.
        let own = self.0.memory_cap.load(Ordering::Relaxed);
        self.1
            .map_or(own, |declared| own.min(declared.load(Ordering::Relaxed)))
    }

    /// Sets the cap. Lowering it below the current usage takes nothing back: further
    /// reservations fail until usage drops under it.
    pub fn set_cap(&self, cap: Option<u64>) {
        // Relaxed: as in `cap`.
        self.0
            .memory_cap
            .store(cap.unwrap_or(UNLIMITED), Ordering::Relaxed);
    }

    /// Bytes the container holds now.
    pub fn used(&self) -> u64 {
        // Relaxed: a momentary figure; nothing else is read on the strength of it.
        self.0.memory_used.load(Ordering::Relaxed)
    }

    /// Adds `bytes` to the container's usage if the sum stays within the cap, as one
    /// compare-and-swap loop: every growth of `memory_used` is a successful CAS from a value
    /// that, plus its bytes, was within the cap, so concurrent reservations in any number of
    /// processes never together pass it.
    pub fn reserve(&self, bytes: u64) -> Result<(), OverCap> {
        reserve_within(&self.0.memory_used, || self.load_cap(), bytes)
    }

    /// Adds `bytes` the container holds already to its usage, whatever its cap (memory
    /// taken over from elsewhere, see `Region::hold_slot`).
    pub(crate) fn count_held(&self, bytes: u64) {
        // Relaxed: a counter with no data behind it (see `reserve`).
        let _ = self
            .0
            .memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_add(bytes))
            });
    }
}

/// A counter of bytes the accounting works on: a word of a region, or, in the tests, a
/// model checker's, so that the model walks the code that ships.
pub(crate) trait Counter {
    /// As [`AtomicU64::fetch_update`].
    fn fetch_update<F: FnMut(u64) -> Option<u64>>(
        &self,
        set: Ordering,
        fetch: Ordering,
        f: F,
    ) -> Result<u64, u64>;
    /// Adds `bytes`; returns what it held.
    fn fetch_add(&self, bytes: u64, order: Ordering) -> u64;
    /// Stores `bytes`; returns what it held.
    fn swap(&self, bytes: u64, order: Ordering) -> u64;
}

impl Counter for AtomicU64 {
    #[inline]
    fn fetch_update<F: FnMut(u64) -> Option<u64>>(
        &self,
        set: Ordering,
        fetch: Ordering,
        f: F,
    ) -> Result<u64, u64> {
        AtomicU64::fetch_update(self, set, fetch, f)
    }

    #[inline]
    fn fetch_add(&self, bytes: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_add(self, bytes, order)
    }

    #[inline]
    fn swap(&self, bytes: u64, order: Ordering) -> u64 {
        AtomicU64::swap(self, bytes, order)
    }
}

/// Adds `bytes` to the container's count `used` if the sum stays within `cap()`, as one
/// compare-and-swap loop: every growth of the count is a successful CAS from a value that,
/// plus its bytes, was within the cap, so concurrent reservations in any number of
/// processes never together pass it.
pub(crate) fn reserve_within(
    used: &impl Counter,
    cap: impl Fn() -> u64,
    bytes: u64,
) -> Result<(), OverCap> {
    let mut seen_cap = UNLIMITED;
    // Relaxed (success and failure): the counter is the only data here, and the CAS
    // itself is what makes reservations exclusive (all read-modify-writes of one atomic
    // are totally ordered). The memory that the caller then allocates is the driver's,
    // not published through this counter.
    used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        // Re-read at every try, so a raised cap is seen.
        seen_cap = cap();
        now.checked_add(bytes).filter(|&total| total <= seen_cap)
    })
    .map(drop)
    .map_err(|now| OverCap {
        cap: seen_cap,
        used: now,
    })
}

/// Records in a process's slot `bytes` just reserved for it in the container's count.
pub(crate) fn record_in_slot(slot: &impl Counter, bytes: u64) {
    // Relaxed: a counter with no data behind it. Added after the container's count, so
    // the slot never holds bytes the container does not count.
    slot.fetch_add(bytes, Ordering::Relaxed);
}

/// Gives back up to `bytes` a process's `slot` holds, to the container's count `used`:
/// never more than the slot holds, so a double free in the caller cannot hand out another
/// process's memory.
pub(crate) fn give_back(used: &impl Counter, slot: &impl Counter, bytes: u64) {
    let taken = take_at_most(slot, bytes);
    take_at_most(used, taken);
}

/// Gives all a dead process's `slot` holds back to the container's count `used`.
pub(crate) fn reap(used: &impl Counter, slot: &impl Counter) {
    // Relaxed: the swap takes the figure exactly once (read-modify-writes see the latest
    // value); the subtraction is a counter with no data behind it. The slot's figure is
    // taken first: if this process dies in between, the container keeps the bytes
    // counted (a leak) rather than counting them back twice.
    let bytes = slot.swap(0, Ordering::Relaxed);
    take_at_most(used, bytes);
}

/// Subtracts up to `bytes` from `counter`, stopping at zero (a counter spoiled by a buggy
/// process must not wrap around and block everyone); returns what it took.
pub(crate) fn take_at_most(counter: &impl Counter, bytes: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    // Relaxed: a counter with no data behind it; the read-modify-write alone guarantees
    // that two takers never both take the same bytes.
    match counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
        Some(held - held.min(bytes))
    }) {
        Ok(held) | Err(held) => held.min(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(cap: u64) -> DeviceAccount {
        DeviceAccount {
            memory_cap: AtomicU64::new(cap),
            memory_used: AtomicU64::new(0),
            context_bytes: AtomicU64::new(0),
            uuid: [AtomicU64::new(0), AtomicU64::new(0)],
            reserved: [0; 24],
        }
    }

    #[test]
    fn reserves_up_to_exactly_the_cap() {
        let a = account(1000);
        let m = MemoryCap(&a, None);
        m.reserve(600).unwrap();
        assert_eq!(
            m.reserve(401),
            Err(OverCap {
                cap: 1000,
                used: 600
            })
        );
        m.reserve(400).unwrap();
        assert_eq!(
            m.reserve(1),
            Err(OverCap {
                cap: 1000,
                used: 1000
            })
        );
        m.reserve(0).unwrap();
        take_at_most(&a.memory_used, 1000);
        assert_eq!(m.used(), 0);
        take_at_most(&a.memory_used, 5);
        assert_eq!(m.used(), 0, "never below zero");
    }

    #[test]
    fn unlimited_still_counts_and_never_wraps() {
        let a = account(UNLIMITED);
        let m = MemoryCap(&a, None);
        assert_eq!(m.cap(), None);
        m.reserve(u64::MAX - 1).unwrap();
        assert!(m.reserve(2).is_err());
        assert_eq!(m.used(), u64::MAX - 1);
    }

    #[test]
    fn a_lowered_cap_stops_new_reservations_only() {
        let a = account(1000);
        let m = MemoryCap(&a, None);
        m.reserve(800).unwrap();
        m.set_cap(Some(500));
        assert_eq!(m.cap(), Some(500));
        assert_eq!(
            m.reserve(1),
            Err(OverCap {
                cap: 500,
                used: 800
            })
        );
        assert_eq!(m.used(), 800);
        m.set_cap(None);
        m.reserve(1).unwrap();
    }

    #[test]
    fn threads_never_pass_the_cap() {
        let a = account(10_000);
        let m = MemoryCap(&a, None);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (m, a) = (&m, &a);
                s.spawn(move || {
                    let mut held = 0;
                    for i in 0..20_000u64 {
                        let n = 1 + (i * 7 + t * 13) % 997;
                        if m.reserve(n).is_ok() {
                            held += n;
                        }
                        assert!(m.used() <= 10_000);
                        if i % 3 == 0 {
                            take_at_most(&a.memory_used, held);
                            held = 0;
                        }
                    }
                    take_at_most(&a.memory_used, held);
                });
            }
        });
        assert_eq!(m.used(), 0);
    }
}

/// The accounting's code under a model checker: processes reserving, giving back (twice, as
/// a buggy caller may) and a reaper taking back a dead process's slot, in every
/// interleaving (to a bound on preemptions).
#[cfg(test)]
mod model {
    use super::*;
    use loom::sync::atomic::AtomicU64 as ModelAtomic;
    use loom::sync::Arc;

    impl Counter for ModelAtomic {
        fn fetch_update<F: FnMut(u64) -> Option<u64>>(
            &self,
            set: Ordering,
            fetch: Ordering,
            f: F,
        ) -> Result<u64, u64> {
            ModelAtomic::fetch_update(self, set, fetch, f)
        }

        fn fetch_add(&self, bytes: u64, order: Ordering) -> u64 {
            ModelAtomic::fetch_add(self, bytes, order)
        }

        fn swap(&self, bytes: u64, order: Ordering) -> u64 {
            ModelAtomic::swap(self, bytes, order)
        }
    }

    /// A container's count and two processes' slots.
    struct Container {
        used: ModelAtomic,
        slots: [ModelAtomic; 2],
    }

    const CAP: u64 = 100;

    /// Reserves `bytes` for process `p` as a slot does; returns whether it got them.
    fn reserve(c: &Container, p: usize, bytes: u64) -> bool {
        let ok = reserve_within(&c.used, || CAP, bytes).is_ok();
        if ok {
            record_in_slot(&c.slots[p], bytes);
        }
        ok
    }

    #[test]
    fn the_cap_holds_and_every_byte_comes_back_once() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let c = Arc::new(Container {
                used: ModelAtomic::new(0),
                slots: [ModelAtomic::new(0), ModelAtomic::new(0)],
            });
            // Process 0 lives on: it reserves 60, gives back 30 twice over (the second
            // time more than it holds) and reserves again.
            let live = {
                let c = c.clone();
                loom::thread::spawn(move || {
                    let first = reserve(&c, 0, 60);
                    give_back(&c.used, &c.slots[0], 30);
                    give_back(&c.used, &c.slots[0], 40);
                    let second = reserve(&c, 0, 50);
                    (first, second)
                })
            };
            // Process 1 reserves 70 and dies; a reaper takes its slot back.
            let dying = {
                let c = c.clone();
                loom::thread::spawn(move || reserve(&c, 1, 70))
            };
            let got_70 = dying.join().unwrap();
            let reaper = {
                let c = c.clone();
                loom::thread::spawn(move || reap(&c.used, &c.slots[1]))
            };
            // Whenever it looks, the count is within the cap.
            let observer = {
                let c = c.clone();
                loom::thread::spawn(move || {
                    // Relaxed: a look at the count alone.
                    assert!(c.used.load(Ordering::Relaxed) <= CAP);
                })
            };
            let (got_60, got_50) = live.join().unwrap();
            reaper.join().unwrap();
            observer.join().unwrap();
            // Relaxed (all): every thread has been joined.
            let used = c.used.load(Ordering::Relaxed);
            let held = c.slots[0].load(Ordering::Relaxed);
            assert_eq!(c.slots[1].load(Ordering::Relaxed), 0);
            assert_eq!(
                used, held,
                "the container counts what its live process holds"
            );
            assert_eq!(held, if got_50 { 50 } else { 0 });
            // Process 0 got its 60 unless process 1 held its 70 then; and its 50, then
            // or later, always (30 of its own left at most, and 70 reaped).
            assert!(got_60 || got_70);
            assert!(got_50 || got_70);
        });
    }
}
