//! Utilization from busy time. The node counts, per device and per process, the nanoseconds
//! its engine ran kernels; a utilization is the growth of such a counter over a window divided
//! by the window. Each query records the counters it read, so the next query measures from
//! there: the window is the time since an earlier query (at least [`MIN_WINDOW_NS`], so that
//! a burst of queries does not divide by nearly nothing).
//!
//! Samples closer together than [`MIN_SPACING_NS`] are not kept, so a fast poller neither
//! floods the history nor drags its newest entry forward.

use simgpu::node::Snapshot;
use std::collections::VecDeque;

/// The shortest window a utilization is measured over.
pub const MIN_WINDOW_NS: u64 = 100_000_000;
/// A sample this soon after the newest kept one is not kept.
const MIN_SPACING_NS: u64 = 10_000_000;
/// Samples kept; with [`MIN_SPACING_NS`] that is at least 2.5 s of history.
const CAPACITY: usize = 256;

/// The busy counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// When, on the node clock.
    pub taken_ns: u64,
    /// When, in microseconds of the wall clock (NVML's sample timestamps).
    pub wall_us: u64,
    /// Engine busy time per device.
    pub device_busy: Vec<u64>,
    /// Engine busy time per live process (pid) and device.
    pub process_busy: Vec<(u32, Vec<u64>)>,
}

impl Sample {
    /// The counters of a snapshot.
    pub fn from_snapshot(snapshot: &Snapshot, wall_us: u64) -> Sample {
        Sample {
            taken_ns: snapshot.taken_ns,
            wall_us,
            device_busy: snapshot.devices.iter().map(|d| d.busy_ns).collect(),
            process_busy: snapshot
                .processes
                .iter()
                .map(|p| (p.pid, p.devices.iter().map(|u| u.busy_ns).collect()))
                .collect(),
        }
    }

    fn process(&self, pid: u32, device: usize) -> u64 {
        self.process_busy
            .iter()
            .find(|(p, _)| *p == pid)
            .and_then(|(_, busy)| busy.get(device).copied())
            .unwrap_or(0)
    }
}

/// What ran on one device between two samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Its length.
    pub ns: u64,
    /// Device utilization in percent.
    pub device_percent: u32,
    /// Per process (pid) that ran kernels in the window: utilization in percent.
    pub processes: Vec<(u32, u32)>,
}

/// Utilization of `device` between samples `from` and `to`.
pub fn window(from: &Sample, to: &Sample, device: usize) -> Window {
    let ns = to.taken_ns.saturating_sub(from.taken_ns);
    let busy = |s: &Sample| s.device_busy.get(device).copied().unwrap_or(0);
    let processes = to
        .process_busy
        .iter()
        .filter_map(|(pid, _)| {
            let ran = to
                .process(*pid, device)
                .saturating_sub(from.process(*pid, device));
            (ran > 0).then(|| (*pid, percent(ran, ns)))
        })
        .collect();
    Window {
        ns,
        device_percent: percent(busy(to).saturating_sub(busy(from)), ns),
        processes,
    }
}

/// `busy` over `window` in whole percent, rounded, at most 100.
pub fn percent(busy: u64, window: u64) -> u32 {
    if window == 0 {
        return 0;
    }
    let p = (busy as u128 * 100 + window as u128 / 2) / window as u128;
    p.min(100) as u32
}

/// The samples this process has taken, oldest first.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Keeps `sample`, unless the newest kept one is too recent for it to add anything.
    pub fn record(&mut self, sample: Sample) {
        if let Some(last) = self.samples.back() {
            if sample.taken_ns < last.taken_ns + MIN_SPACING_NS {
                return;
            }
        }
        if self.samples.len() == CAPACITY {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The newest sample at least [`MIN_WINDOW_NS`] before `now_ns`.
    pub fn base(&self, now_ns: u64) -> Option<&Sample> {
        let limit = now_ns.checked_sub(MIN_WINDOW_NS)?;
        self.samples.iter().rev().find(|s| s.taken_ns <= limit)
    }

    /// The newest sample taken at or before `wall_us` on the wall clock.
    pub fn base_at_wall(&self, wall_us: u64) -> Option<&Sample> {
        self.samples.iter().rev().find(|s| s.wall_us <= wall_us)
    }

    /// The oldest sample.
    pub fn oldest(&self) -> Option<&Sample> {
        self.samples.front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, device: u64, processes: &[(u32, u64)]) -> Sample {
        Sample {
            taken_ns: ms * 1_000_000,
            wall_us: ms * 1000,
            device_busy: vec![device * 1_000_000],
            process_busy: processes
                .iter()
                .map(|&(pid, busy)| (pid, vec![busy * 1_000_000]))
                .collect(),
        }
    }

    #[test]
    fn percent_rounds_and_clamps() {
        assert_eq!(percent(0, 0), 0);
        assert_eq!(percent(1, 3), 33);
        assert_eq!(percent(2, 3), 67);
        assert_eq!(percent(5, 3), 100);
    }

    #[test]
    fn window_splits_busy_time_by_process() {
        let from = sample(1000, 100, &[(7, 60), (8, 40)]);
        let to = sample(2000, 1100, &[(7, 560), (8, 540), (9, 0)]);
        let w = window(&from, &to, 0);
        assert_eq!(w.ns, 1_000_000_000);
        assert_eq!(w.device_percent, 100);
        // A process that ran nothing in the window has no sample.
        assert_eq!(w.processes, vec![(7, 50), (8, 50)]);
        // A process that appeared during the window counts from zero.
        let w = window(&sample(0, 0, &[]), &sample(200, 50, &[(3, 50)]), 0);
        assert_eq!((w.device_percent, w.processes), (25, vec![(3, 25)]));
        // An unknown device reads as idle rather than failing.
        assert_eq!(window(&from, &to, 5).device_percent, 0);
    }

    #[test]
    fn base_is_the_newest_sample_old_enough() {
        let mut h = History::default();
        assert!(h.base(10_000_000_000).is_none());
        h.record(sample(1000, 0, &[]));
        h.record(sample(1500, 0, &[]));
        h.record(sample(1550, 0, &[]));
        assert_eq!(h.base(1_600_000_000).unwrap().taken_ns, 1_500_000_000);
        assert_eq!(h.base(1_560_000_000).unwrap().taken_ns, 1_000_000_000);
        assert!(h.base(1_050_000_000).is_none());
        assert_eq!(h.base_at_wall(1_520_000).unwrap().wall_us, 1_500_000);
        assert_eq!(h.oldest().unwrap().taken_ns, 1_000_000_000);
    }

    #[test]
    fn bursts_do_not_flush_history() {
        let mut h = History::default();
        h.record(sample(0, 0, &[]));
        for us in 0..10_000 {
            let mut s = sample(1000, 0, &[]);
            s.taken_ns += us * 1000;
            h.record(s);
        }
        assert_eq!(h.samples.len(), 2);
        assert_eq!(h.oldest().unwrap().taken_ns, 0);
        for i in 0..1000 {
            h.record(sample(2000 + i * 20, 0, &[]));
        }
        assert_eq!(h.samples.len(), CAPACITY);
    }
}
