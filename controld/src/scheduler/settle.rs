//! Settling the 1 ms busy bins of the containers on one GPU.
//!
//! The library charges each completed kernel's event interval to its container's bins. When
//! several containers have work on one GPU, the GPU time-slices them, and a slice that cuts
//! into a kernel lies inside that kernel's interval, so one millisecond can hold more than
//! a millisecond of raw busy time. Settling scales every bin whose containers' raw times
//! add up to more than its length down to that length, in proportion; the difference is
//! refunded to the containers' buckets. A container alone keeps exactly what it was
//! charged.

/// A bin's length: one millisecond.
pub const BIN_NS: u64 = 1_000_000;

/// The most raw busy time one container's bin may hold: its in-flight kernels on several
/// streams may overlap each other, so a bin can honestly exceed 1 ms, but not by this much.
/// Anything above is a corrupt region and is clamped.
pub const MAX_RAW_NS: u64 = 64 * BIN_NS;

/// One settled bin: each container's share of it (normalised) and its refund, in the order
/// of the raw figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settled {
    /// Busy time charged in the end, in ns; the sum is at most [`BIN_NS`] unless only one
    /// container ran (a container alone is charged what it measured).
    pub normalised: Vec<u64>,
    /// Raw less normalised, in ns: given back to the container's bucket.
    pub refund: Vec<u64>,
}

/// Settles one bin of raw busy times (untrusted: each is clamped to [`MAX_RAW_NS`]) into
/// `out`, reusing its vectors.
pub fn settle_bin(raw: &[u64], out: &mut Settled) {
    out.normalised.clear();
    out.refund.clear();
    let clamped = raw.iter().map(|&r| r.min(MAX_RAW_NS));
    let total: u64 = clamped.clone().sum();
    let sharing = raw.iter().filter(|&&r| r > 0).count() > 1;
    for r in clamped {
        let n = if sharing && total > BIN_NS {
            // u128: 64 ms × 1 ms does not fit a u64 product comfortably with many containers.
            (u128::from(r) * u128::from(BIN_NS) / u128::from(total)) as u64
        } else {
            r
        };
        out.normalised.push(n);
        out.refund.push(r - n);
    }
}

/// A container's settled busy time over the last second of settled milliseconds: its
/// measured share.
pub struct ShareWindow {
    /// Normalised ns per settled millisecond, indexed by `ms % WINDOW_MS`.
    ring: Box<[u64; WINDOW_MS]>,
    sum: u64,
    /// The newest millisecond the window covers; `None` before the first settlement.
    newest: Option<u64>,
}

/// The measured share's window: one second of bins.
pub const WINDOW_MS: usize = 1000;

impl Default for ShareWindow {
    fn default() -> Self {
        ShareWindow {
            ring: Box::new([0; WINDOW_MS]),
            sum: 0,
            newest: None,
        }
    }
}

impl ShareWindow {
    /// Moves the window to end at millisecond `to_ms`: the milliseconds it passes start
    /// empty, the oldest drop out.
    pub fn advance(&mut self, to_ms: u64) {
        let from = match self.newest {
            Some(newest) if to_ms <= newest => return,
            Some(newest) => newest,
            None => to_ms,
        };
        let steps = (to_ms - from).min(WINDOW_MS as u64);
        for ms in to_ms - steps + 1..=to_ms {
            let slot = &mut self.ring[(ms % WINDOW_MS as u64) as usize];
            self.sum -= *slot;
            *slot = 0;
        }
        self.newest = Some(to_ms);
    }

    /// Adds settled busy time to millisecond `ms`; ignored outside the window.
    pub fn add(&mut self, ms: u64, ns: u64) {
        let Some(newest) = self.newest else { return };
        if ms > newest || ms + WINDOW_MS as u64 <= newest {
            return;
        }
        let slot = &mut self.ring[(ms % WINDOW_MS as u64) as usize];
        let new = slot.saturating_add(ns).min(MAX_RAW_NS);
        self.sum = self.sum - *slot + new;
        *slot = new;
    }

    /// The share of the window's time it was busy, in ppm (at most the whole).
    pub fn share_ppm(&self) -> u32 {
        let window_ns = WINDOW_MS as u64 * BIN_NS;
        (self.sum.min(window_ns) / (window_ns / 1_000_000)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(raw: &[u64]) -> Settled {
        let mut out = Settled::default();
        settle_bin(raw, &mut out);
        out
    }

    #[test]
    fn a_container_alone_keeps_what_it_measured() {
        let s = settle(&[1_000_000]);
        assert_eq!((s.normalised, s.refund), (vec![1_000_000], vec![0]));
        // Alone with overlapping streams: still its own time, nothing to give back.
        let s = settle(&[1_600_000, 0]);
        assert_eq!(s.normalised, [1_600_000, 0]);
    }

    #[test]
    fn overlapping_containers_are_scaled_to_the_bin() {
        // Two trainers time-sliced in one ms: each event covers the whole ms.
        let s = settle(&[1_000_000, 1_000_000]);
        assert_eq!(s.normalised, [500_000, 500_000]);
        assert_eq!(s.refund, [500_000, 500_000]);
        let s = settle(&[900_000, 300_000]);
        assert_eq!(s.normalised, [750_000, 250_000]);
        assert_eq!(s.refund, [150_000, 50_000]);
    }

    #[test]
    fn bins_under_a_millisecond_are_left_alone() {
        let s = settle(&[400_000, 500_000]);
        assert_eq!(s.normalised, [400_000, 500_000]);
        assert_eq!(s.refund, [0, 0]);
    }

    #[test]
    fn a_corrupt_bin_is_clamped() {
        let s = settle(&[u64::MAX, 1_000_000]);
        assert!(s.normalised.iter().sum::<u64>() <= BIN_NS);
        assert!(s.normalised[1] > 0);
    }

    #[test]
    fn the_share_window_covers_one_second() {
        let mut w = ShareWindow::default();
        w.add(5, 1_000_000); // before the first advance: nothing to add to
        for ms in 0..2000 {
            w.advance(ms);
            w.add(ms, if ms >= 1500 { 300_000 } else { 1_000_000 });
        }
        // The last 1000 ms: 500 full, 500 at 30 %.
        assert_eq!(w.share_ppm(), 650_000);
        // A late bin of a millisecond inside the window adds to it; one outside is dropped.
        w.add(1998, 100_000);
        w.add(900, 1_000_000);
        assert_eq!(w.share_ppm(), 650_100);
        // A corrupt figure counts as at most MAX_RAW_NS.
        w.add(1999, u64::MAX);
        assert_eq!(w.share_ppm(), 650_100 - 300 + 64_000);
        // A jump past the whole window empties it.
        w.advance(10_000);
        assert_eq!(w.share_ppm(), 0);
    }
}
