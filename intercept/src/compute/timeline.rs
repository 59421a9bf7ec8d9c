//! Where a context's events ran, on the node clock.
//!
//! The GPU stamps an event when it reaches it, on one timer for every stream of a context,
//! so the events of all of a context's streams are placed against one *anchor* event of
//! that context: `cuEventElapsedTime(anchor, e)` says exactly how far apart they ran, and
//! what is left is where the anchor itself ran on the node clock. Each event gives bounds on
//! that: it ran no earlier than it was recorded (`recorded - offset`), and no later than
//! the moment a harvest found it complete (`seen - offset`). The upper bound, tightened by
//! every harvest, is the estimate; it closes in on the truth within the first few events.
//! One anchor per context (rather than per stream) places the spans of concurrent streams
//! exactly against each other, so that their union, the time the context held the GPU, is
//! exact too.

use super::events::Event;

/// An anchor is moved to a newer event after this much GPU time: `cuEventElapsedTime`
/// answers in `f32` milliseconds, whose resolution coarsens as the distance grows (60 ns at
/// one second).
pub(super) const REANCHOR_NS: i64 = 1_000_000_000;

/// A context's anchor: a completed event and bounds on when it ran.
#[derive(Debug, Clone, Copy)]
pub(super) struct Anchor {
    pub(super) event: Event,
    /// It ran no earlier than this.
    lower: u64,
    /// It ran no later than this: the estimate.
    upper: u64,
}

impl Anchor {
    /// An anchor at `event`, recorded at `recorded` and found complete at `seen`.
    pub(super) fn new(event: Event, recorded: u64, seen: u64) -> Anchor {
        Anchor {
            event,
            lower: recorded,
            upper: seen.max(recorded),
        }
    }

    /// Learns from an event `offset` ns after the anchor (negative: before) that was
    /// recorded at `recorded` (if it is known) and found complete at `seen`.
    pub(super) fn bound(&mut self, offset: i64, recorded: Option<u64>, seen: Option<u64>) {
        if let Some(r) = recorded {
            self.lower = self.lower.max(shift(r, -offset));
        }
        if let Some(s) = seen {
            self.upper = self.upper.min(shift(s, -offset));
        }
    }

    /// Where an event `offset` ns after the anchor ran, on the node clock.
    pub(super) fn at(&self, offset: i64) -> u64 {
        shift(self.upper.max(self.lower), offset)
    }

    /// The same anchor moved to `event`, `offset` ns after it.
    pub(super) fn moved_to(&self, event: Event, offset: i64) -> Anchor {
        Anchor {
            event,
            lower: shift(self.lower, offset),
            upper: shift(self.upper, offset),
        }
    }
}

/// `t + delta`, saturating at the ends of the clock.
fn shift(t: u64, delta: i64) -> u64 {
    if delta >= 0 {
        t.saturating_add(delta as u64)
    } else {
        t.saturating_sub(delta.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harvests_tighten_the_estimate_from_above() {
        // The anchor ran at 1_000; recorded at 900, first seen complete at 1_500.
        let mut a = Anchor::new(7, 900, 1_500);
        assert_eq!(a.at(0), 1_500);
        // An event 2_000 after it, seen at 3_100: the anchor ran by 1_100.
        a.bound(2_000, None, Some(3_100));
        assert_eq!(a.at(0), 1_100);
        assert_eq!(a.at(2_000), 3_100);
        // An event 500 before it, recorded at 560: the anchor ran at 1_060 or later, and
        // the estimate stays the upper bound.
        a.bound(-500, Some(560), Some(9_000));
        assert_eq!(a.at(-500), 600);
        // Bounds that cross (a clock read late) keep the lower one.
        a.bound(0, Some(1_200), None);
        assert_eq!(a.at(0), 1_200);
    }

    #[test]
    fn moving_the_anchor_carries_its_bounds() {
        let a = Anchor::new(1, 100, 300).moved_to(2, 1_000);
        assert_eq!((a.event, a.lower, a.upper), (2, 1_100, 1_300));
        assert_eq!(a.at(-1_000), 300);
    }
}
