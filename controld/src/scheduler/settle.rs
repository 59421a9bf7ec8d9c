//! Settling the busy spans of the containers on one GPU.
//!
//! The library charges each completed kernel's event interval to its container's bucket and
//! records it as a busy span (`tessera_region::spans`). When several containers have work on
//! one GPU, the GPU time-slices them, and a slice that cuts into a kernel lies inside that
//! kernel's interval: the spans of two containers overlap, and each was charged for the
//! other's slice. Settling finds who had the engine in each overlap and refunds the rest.
//!
//! The rule: a span starts when its context had the engine (its START event is written
//! then), and a context that takes the engine keeps it for a time slice unless its work runs
//! out. So in an overlap the container whose latest span began last is the one running, for
//! up to [`TIMESLICE_NS`] after that start, and the containers whose spans reach past its
//! own were suspended meanwhile; past that slice, they alternate, and share the time
//! equally. A span that ends inside the leader's was not cut by it (the two were placed a
//! little over each other) and keeps its time. A container's own spans (its streams and
//! processes) are merged first: it is charged for the time it held the GPU, not the sum over
//! its streams. A container alone keeps exactly its union.
//!
//! Proportional splitting, the rule before, charges a container whose short kernel ran
//! inside a neighbour's cut kernel for only part of it (a `fixed:20` container measured 20 %
//! while it got 26 % of the engine); the latest-start rule charges it all of it.

use tessera_region::BusySpan;

/// A millisecond: the unit of the share window.
pub const BIN_NS: u64 = 1_000_000;

/// The time slice a context keeps the engine for once it takes it (simgpu's default
/// quantum; NVIDIA's default time slice is of the same order).
pub const TIMESLICE_NS: u64 = 1_000_000;

/// The most busy time one container's millisecond may hold in the share window: more is a
/// corrupt figure and is clamped.
pub const MAX_RAW_NS: u64 = 64 * BIN_NS;

/// What settling gave each container, in the order of the inputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settled {
    /// Busy time it is charged in the end, in ns.
    pub attributed: Vec<u64>,
    /// What its spans covered less what it is charged: given back to its bucket.
    pub refund: Vec<u64>,
    /// Its attributed time per millisecond of the node clock, `(container, ms, ns)`.
    pub per_ms: Vec<(usize, u64, u64)>,
}

/// Settles the spans of the containers on one GPU, `spans[i]` being container `i`'s
/// (untrusted values: a span that ends before it starts is ignored), into `out`.
pub fn settle(spans: &[Vec<BusySpan>], out: &mut Settled) {
    let n = spans.len();
    out.attributed.clear();
    out.attributed.resize(n, 0);
    out.refund.clear();
    out.per_ms.clear();
    let raw: Vec<u64> = spans
        .iter()
        .map(|v| v.iter().map(BusySpan::len_ns).sum())
        .collect();
    // Each container's starts, sorted, and the union of its spans: edges `(time, is a
    // start, container, the piece's end)`.
    let mut starts: Vec<Vec<u64>> = Vec::with_capacity(n);
    let mut edges: Vec<(u64, bool, usize, u64)> = Vec::new();
    for (i, v) in spans.iter().enumerate() {
        let mut v: Vec<BusySpan> = v
            .iter()
            .filter(|s| s.end_ns > s.start_ns)
            .copied()
            .collect();
        v.sort_unstable_by_key(|s| s.start_ns);
        starts.push(v.iter().map(|s| s.start_ns).collect());
        let mut piece: Option<BusySpan> = None;
        for s in v {
            match piece.as_mut() {
                Some(p) if s.start_ns <= p.end_ns => p.end_ns = p.end_ns.max(s.end_ns),
                _ => {
                    if let Some(p) = piece.replace(s) {
                        edges.push((p.start_ns, true, i, p.end_ns));
                        edges.push((p.end_ns, false, i, p.end_ns));
                    }
                }
            }
        }
        if let Some(p) = piece {
            edges.push((p.start_ns, true, i, p.end_ns));
            edges.push((p.end_ns, false, i, p.end_ns));
        }
    }
    // Ends before starts at the same instant: touching pieces do not overlap.
    edges.sort_unstable_by_key(|&(t, is_start, _, _)| (t, is_start));
    let mut covering: Vec<Cover> = Vec::new();
    let mut last = 0;
    for (t, is_start, who, end) in edges {
        if t > last && !covering.is_empty() {
            attribute(last, t, &covering, &starts, out);
        }
        last = t;
        if is_start {
            covering.push(Cover { who, end });
        } else if let Some(k) = covering.iter().position(|c| c.who == who) {
            covering.swap_remove(k);
        }
    }
    out.refund.extend(
        raw.iter()
            .zip(&out.attributed)
            .map(|(r, a)| r.saturating_sub(*a)),
    );
}

/// A container covering the time being swept, and where its merged piece ends.
#[derive(Debug, Clone, Copy)]
struct Cover {
    who: usize,
    end: u64,
}

/// Attributes `[a, b)`, covered by `covering`, by the latest-start rule.
///
/// Only a container whose piece reaches past the leader's was suspended for it (a time
/// slice cut into its kernel, which resumed after the leader's ran). A piece that ends
/// inside the leader's was not cut by it: the two were placed a little over each other (each
/// library places its spans on the node clock from its own bounds, good to tens of
/// microseconds), and each keeps that time.
fn attribute(a: u64, b: u64, covering: &[Cover], starts: &[Vec<u64>], out: &mut Settled) {
    if let [only] = covering {
        give(out, only.who, a, b);
        return;
    }
    // The latest start at or before `a` of each covering container.
    let latest = |c: usize| {
        let s = &starts[c];
        match s.partition_point(|&x| x <= a) {
            0 => 0,
            k => s[k - 1],
        }
    };
    let Some(leader) = covering
        .iter()
        .copied()
        .max_by_key(|c| (latest(c.who), c.who))
    else {
        return;
    };
    // Those the leader's piece lies inside: suspended while it ran.
    let cut: Vec<usize> = covering
        .iter()
        .filter(|c| c.who != leader.who && c.end >= leader.end)
        .map(|c| c.who)
        .collect();
    for c in covering
        .iter()
        .filter(|c| c.who != leader.who && c.end < leader.end)
    {
        give(out, c.who, a, b);
    }
    let turn_end = latest(leader.who).saturating_add(TIMESLICE_NS).clamp(a, b);
    give(out, leader.who, a, turn_end);
    if turn_end < b {
        // Past the leader's slice, it and the containers it cut into alternate: equal
        // parts, the remainder of the division to the leader.
        let k = cut.len() as u64 + 1;
        let part = (b - turn_end) / k;
        let mut from = turn_end;
        for &c in &cut {
            give(out, c, from, from + part);
            from += part;
        }
        give(out, leader.who, from, b);
    }
}

/// Charges container `who` for `[a, b)`, split by millisecond.
fn give(out: &mut Settled, who: usize, a: u64, b: u64) {
    if b <= a {
        return;
    }
    out.attributed[who] += b - a;
    let mut t = a;
    while t < b {
        let ms = t / BIN_NS;
        let to = b.min((ms + 1) * BIN_NS);
        match out.per_ms.last_mut() {
            Some((w, m, ns)) if *w == who && *m == ms => *ns += to - t,
            _ => out.per_ms.push((who, ms, to - t)),
        }
        t = to;
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

    fn span(a_us: u64, b_us: u64) -> BusySpan {
        BusySpan {
            start_ns: a_us * 1000,
            end_ns: b_us * 1000,
        }
    }

    fn run(spans: &[Vec<BusySpan>]) -> Settled {
        let mut out = Settled::default();
        settle(spans, &mut out);
        out
    }

    #[test]
    fn a_container_alone_is_charged_the_union_of_its_spans() {
        let s = run(&[vec![span(0, 1000)]]);
        assert_eq!((s.attributed, s.refund), (vec![1_000_000], vec![0]));
        // Two streams at once: the time it held the GPU, the overlap given back.
        let s = run(&[vec![span(0, 1000), span(400, 1600)], vec![]]);
        assert_eq!(s.attributed, [1_600_000, 0]);
        assert_eq!(s.refund, [600_000, 0]);
    }

    #[test]
    fn a_kernel_inside_a_cut_one_is_charged_to_its_own_container() {
        // A's kernel is cut by B's slice: A's span covers B's whole 1 ms kernel.
        let s = run(&[vec![span(300, 2300)], vec![span(1000, 2000)]]);
        assert_eq!(s.attributed, [1_000_000, 1_000_000]);
        assert_eq!(s.refund, [1_000_000, 0]);
    }

    #[test]
    fn past_a_slice_the_covering_containers_share_equally() {
        // Two long kernels started 1 ms apart, both running to 10 ms: B leads for a slice
        // from 1 ms, then 8 ms are shared.
        let s = run(&[vec![span(0, 10_000)], vec![span(1000, 10_000)]]);
        assert_eq!(s.attributed, [1_000_000 + 4_000_000, 1_000_000 + 4_000_000]);
        assert_eq!(s.attributed.iter().sum::<u64>(), 10_000_000);
    }

    #[test]
    fn spans_placed_a_little_over_each_other_keep_their_time() {
        // A ran to 1.05 ms, B from 1.0 ms: B's span does not lie inside A's, so neither
        // was cut; the 50 µs are a placement error, not a shared slice.
        let s = run(&[vec![span(50, 1050)], vec![span(1000, 2000)]]);
        assert_eq!(s.attributed, [1_000_000, 1_000_000]);
        assert_eq!(s.refund, [0, 0]);
    }

    #[test]
    fn corrupt_spans_are_ignored_and_touching_ones_do_not_overlap() {
        let bad = BusySpan {
            start_ns: 5_000_000,
            end_ns: 1_000_000,
        };
        let s = run(&[vec![bad, span(0, 1000)], vec![span(1000, 2000)]]);
        assert_eq!(s.attributed, [1_000_000, 1_000_000]);
        assert_eq!(s.refund, [0, 0]);
    }

    #[test]
    fn attributed_time_is_kept_per_millisecond() {
        let s = run(&[vec![span(500, 2500)]]);
        let mine: Vec<(u64, u64)> = s.per_ms.iter().map(|&(_, m, ns)| (m, ns)).collect();
        assert_eq!(mine, [(0, 500_000), (1, 1_000_000), (2, 500_000)]);
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
