//! The time this process held a device: the union of its streams' busy intervals.
//!
//! A time-sliced GPU gives a context all of its SMs during its slice, and runs the kernels of
//! its streams at once; what the context takes from its neighbours is the time it holds the
//! GPU, not the sum over its streams. So each measured interval is charged only for the part
//! that no other interval of this process on the device covered, and that part alone is
//! written to the region as busy spans: the spans of one process never overlap, and a
//! container whose four streams run at once pays for one.

/// How long intervals are kept to compare later ones with: longer than any delay between
/// two streams' harvests of work that ran at once.
const KEEP_NS: u64 = 1_000_000_000;
/// The most intervals kept; past it the oldest go (a process with very many streams pays
/// for a little overlap, never less than its union).
const KEEP_MAX: usize = 256;

/// The union of a process's busy intervals on one device, as disjoint `[start, end)` pairs
/// in order.
#[derive(Debug, Default)]
pub(super) struct Held {
    intervals: Vec<(u64, u64)>,
}

impl Held {
    /// Adds `[start, end)`, putting into `fresh` the pieces of it that were not held yet (in
    /// order), and returns their total length.
    pub(super) fn add(&mut self, start: u64, end: u64, fresh: &mut Vec<(u64, u64)>) -> u64 {
        fresh.clear();
        if end <= start {
            return 0;
        }
        let v = &mut self.intervals;
        // The first interval that ends after `start`: everything before it lies wholly
        // before the new one.
        let first = v.partition_point(|&(_, e)| e < start);
        let mut cursor = start;
        let mut last = first;
        while last < v.len() && v[last].0 <= end {
            let (s, e) = v[last];
            if s > cursor {
                fresh.push((cursor, s));
            }
            cursor = cursor.max(e);
            last += 1;
        }
        if cursor < end {
            fresh.push((cursor, end));
        }
        // Merge [first, last) with the new interval.
        let merged = if first < last {
            (start.min(v[first].0), end.max(v[last - 1].1))
        } else {
            (start, end)
        };
        v.splice(first..last, std::iter::once(merged));
        if let Some(&(_, newest)) = v.last() {
            let keep_from = newest.saturating_sub(KEEP_NS);
            let old = v.partition_point(|&(_, e)| e < keep_from);
            let excess = v.len().saturating_sub(KEEP_MAX);
            v.drain(..old.max(excess));
        }
        fresh.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_no_earlier_interval_covered_is_new() {
        let mut h = Held::default();
        let mut fresh = Vec::new();
        assert_eq!(h.add(100, 200, &mut fresh), 100);
        assert_eq!(fresh, [(100, 200)]);
        // Four streams at once: the others add nothing.
        assert_eq!(h.add(100, 200, &mut fresh), 0);
        assert!(fresh.is_empty());
        assert_eq!(h.add(150, 250, &mut fresh), 50);
        assert_eq!(fresh, [(200, 250)]);
        // Harvested out of order, and spanning a gap: only the gap and the tail are new.
        assert_eq!(h.add(300, 400, &mut fresh), 100);
        assert_eq!(h.add(50, 450, &mut fresh), 50 + 50 + 50);
        assert_eq!(fresh, [(50, 100), (250, 300), (400, 450)]);
        assert_eq!(h.intervals, [(50, 450)]);
        // Empty and reversed intervals hold nothing.
        assert_eq!(h.add(500, 500, &mut fresh), 0);
        assert_eq!(h.add(600, 550, &mut fresh), 0);
    }

    #[test]
    fn old_intervals_are_forgotten() {
        let mut h = Held::default();
        let mut fresh = Vec::new();
        for i in 0..(KEEP_MAX as u64 + 50) {
            h.add(i * 1_000, i * 1_000 + 10, &mut fresh);
        }
        assert_eq!(h.intervals.len(), KEEP_MAX);
        h.add(10 * KEEP_NS, 10 * KEEP_NS + 10, &mut fresh);
        assert_eq!(h.intervals.len(), 1);
    }
}
