//! How much GPU time a kind of work holds: per kernel function and per executable graph,
//! learnt from its measured launches, for the in-flight window and for predicting when a
//! stream's queue drains.
//!
//! A launch is measured on its own only now and then (that costs a driver call more); most
//! are measured in groups. A group of launches of one kind teaches that kind its time per
//! launch; a group of several kinds teaches nothing, so each kind is also measured alone at
//! its first launch (it is unknown, and goes alone through the window) and again every
//! [`SAMPLE_EVERY`] launches.

use std::collections::HashMap;

/// Estimates kept, at most (one per kernel function or graph launched).
const ESTIMATES_MAX: usize = 4096;
/// A kind of work is measured alone again after this many launches.
const SAMPLE_EVERY: u32 = 256;

#[derive(Debug, Clone, Copy)]
struct Estimate {
    ns: u64,
    /// Launches since it was last measured alone.
    since_sample: u32,
}

/// The estimates of this process.
#[derive(Debug, Default)]
pub(super) struct Estimates {
    map: HashMap<usize, Estimate>,
}

impl Estimates {
    /// The estimated GPU time of a launch of `work`, `None` before its first measurement.
    pub(super) fn get(&self, work: usize) -> Option<u64> {
        self.map.get(&work).map(|e| e.ns)
    }

    /// Counts a launch of `work`; whether it should be measured alone (unknown yet, or due
    /// for a sample).
    pub(super) fn launch(&mut self, work: usize) -> bool {
        match self.map.get_mut(&work) {
            None => true,
            Some(e) => {
                e.since_sample += 1;
                let due = e.since_sample >= SAMPLE_EVERY;
                if due {
                    // Taken now: the measurement comes back only later, and the launches
                    // meanwhile are not samples.
                    e.since_sample = 0;
                }
                due
            }
        }
    }

    /// Learns that a launch of `work` held the GPU `ns`.
    ///
    /// A measurement is the work's own time plus any other context's time slice that cut
    /// into it, so the estimate follows shorter measurements at once and longer ones by a
    /// quarter of the difference: it stays near the work's own time while neighbours cut
    /// into it, so that a window sized by it keeps the GPU busy, and work that really grew is
    /// learnt within a few measurements (meanwhile the window's count of launches bounds what
    /// a low estimate lets in).
    pub(super) fn learn(&mut self, work: usize, ns: u64) {
        if self.map.len() >= ESTIMATES_MAX && !self.map.contains_key(&work) {
            // Handles of work long unloaded accumulate in a program that compiles kernels
            // as it goes: start over rather than grow without end.
            self.map.clear();
        }
        let e = self.map.entry(work).or_insert(Estimate {
            ns,
            since_sample: 0,
        });
        e.ns = if ns <= e.ns {
            ns
        } else {
            e.ns + (ns - e.ns) / 4
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_work_is_measured_alone_then_sampled() {
        let mut e = Estimates::default();
        assert!(e.launch(1));
        assert!(e.launch(1), "unknown until a measurement comes back");
        e.learn(1, 1_000);
        assert_eq!(e.get(1), Some(1_000));
        let alone = (0..3 * SAMPLE_EVERY).filter(|_| e.launch(1)).count();
        assert_eq!(alone, 3, "sampled once in {SAMPLE_EVERY} launches");
    }

    #[test]
    fn estimates_follow_shorter_at_once_and_longer_slowly() {
        let mut e = Estimates::default();
        e.learn(1, 1_000);
        e.learn(1, 5_000);
        assert_eq!(e.get(1), Some(2_000));
        e.learn(1, 500);
        assert_eq!(e.get(1), Some(500));
    }
}
