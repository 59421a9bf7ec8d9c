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
        let mut cap = UNLIMITED;
        // Relaxed (success and failure): the counter is the only data here, and the CAS
        // itself is what makes reservations exclusive (all read-modify-writes of one atomic
        // are totally ordered). The memory that the caller then allocates is the driver's,
        // not published through this counter.
        self.0
            .memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                // Re-read at every try, so a raised cap is seen.
                cap = self.load_cap();
                used.checked_add(bytes).filter(|&total| total <= cap)
            })
            .map(drop)
            .map_err(|used| OverCap { cap, used })
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

    /// Takes `bytes` off the container's usage, never below zero (a counter spoiled by a
    /// buggy process must not wrap around and block everyone).
    pub fn release(&self, bytes: u64) {
        take_at_most(&self.0.memory_used, bytes);
    }
}

/// Subtracts up to `bytes` from `counter`, stopping at zero; returns what it took.
pub(crate) fn take_at_most(counter: &AtomicU64, bytes: u64) -> u64 {
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
        m.release(1000);
        assert_eq!(m.used(), 0);
        m.release(5);
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
                let m = &m;
                s.spawn(move || {
                    let mut held = 0;
                    for i in 0..20_000u64 {
                        let n = 1 + (i * 7 + t * 13) % 997;
                        if m.reserve(n).is_ok() {
                            held += n;
                        }
                        assert!(m.used() <= 10_000);
                        if i % 3 == 0 {
                            m.release(held);
                            held = 0;
                        }
                    }
                    m.release(held);
                });
            }
        });
        assert_eq!(m.used(), 0);
    }
}
