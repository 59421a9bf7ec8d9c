//! Settling the busy spans of the containers on one GPU: who held the GPU, by replaying the
//! GPU's time-slicing.
//!
//! The library charges what each process's measured intervals add to the time it held the
//! GPU and writes those pieces as busy spans (`tessera_region::spans`); a span's ends are
//! moments its context held the engine (an event is stamped only then). When several
//! containers have work on one GPU, the GPU time-slices them: a context keeps the engine for
//! a time slice while others wait, then the GPU switches, round robin, losing a switch's
//! dead time in which no kernel advances; a context that runs out of work gives the engine
//! up at once. A slice that cuts into a kernel lies inside that kernel's interval, so the
//! spans of containers overlap, and each was charged for the others' slices and the
//! switches.
//!
//! Settling replays that scheduler over the containers' spans, with the GPU's own slice and
//! switch costs ([`Slicing`]): while a container's spans cover a moment it has work queued,
//! and while several have work the replayed engine gives each its slice in turn, the
//! switches to nobody. The spans' ends keep the replay in step with the hardware: a
//! container whose span begins holds the engine then (whoever the replay had there was cut
//! a switch before), and one whose span ends held it until then. Each container is charged
//! what the replay gave it and refunded the rest of what it paid; a container alone keeps
//! exactly its union.
//!
//! Two rules came before this one, each right on an ideal GPU and wrong on a real one. The
//! latest-start rule (the container whose latest span began last leads for a 1 ms slice,
//! then the overlapping ones share equally) charged the switches' dead time to someone and
//! assumed simgpu's old 1 ms slice: on an H200 (2.08 ms slices, 0.16 ms switches) three
//! saturating containers were measured at 99 % of the GPU while they got 78 %, and their
//! buckets, paying for 27 % too much, left 22 % of the GPU idle. Proportional splitting,
//! before it, undercharged a short kernel that ran inside a neighbour's cut one.

use tessera_region::slicing::Slicing;
use tessera_region::BusySpan;

/// A millisecond: the unit of the share window.
pub const BIN_NS: u64 = 1_000_000;

/// The most busy time one container's millisecond may hold in the share window: more is a
/// corrupt figure and is clamped.
pub const MAX_RAW_NS: u64 = 64 * BIN_NS;

/// What settling gave each container, in the order of the inputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settled {
    /// Busy time it is charged in the end, in ns.
    pub attributed: Vec<u64>,
    /// Its attributed time per millisecond of the node clock, `(container, ms, ns)`.
    pub per_ms: Vec<(usize, u64, u64)>,
}

impl Settled {
    fn reset(&mut self, n: usize) {
        self.attributed.clear();
        self.attributed.resize(n, 0);
        self.per_ms.clear();
    }

    /// Charges container `who` for `[a, b)`, split by millisecond.
    fn give(&mut self, who: usize, a: u64, b: u64) {
        if b <= a {
            return;
        }
        self.attributed[who] += b - a;
        let mut t = a;
        while t < b {
            let ms = t / BIN_NS;
            let to = b.min((ms + 1) * BIN_NS);
            match self.per_ms.last_mut() {
                Some((w, m, ns)) if *w == who && *m == ms => *ns += to - t,
                _ => self.per_ms.push((who, ms, to - t)),
            }
            t = to;
        }
    }
}

/// A container's busy time from its spans (untrusted: a span that ends before it starts is
/// ignored): sorted, disjoint `(start, end)` pairs. Its processes' spans may overlap (each
/// process's own never do): it held the GPU whenever one of them did.
pub fn pieces(spans: &[BusySpan]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = spans
        .iter()
        .filter(|s| s.end_ns > s.start_ns)
        .map(|s| (s.start_ns, s.end_ns))
        .collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// One GPU's replayed scheduler, kept from settlement to settlement.
///
/// It walks the containers' stamps in time order (the ends of their spans: moments each
/// held the engine). Consecutive stamps of one container make a *run*, which lies in one
/// of its turns; between two runs of different containers the engine switched. Where: at
/// the moment the first one's span ended if it ran out of work then (then an idle switch
/// follows), else where its slice ran out, a time slice after its turn began, kept between
/// its last stamp and a switch before the other's first stamp (and exactly a switch before
/// it when that stamp begins the other's span: it got the engine then). The next turn
/// begins a switch later. So the replayed turns follow the GPU's own cadence of slices and
/// switches, re-aligned by every stamp, and each container is given its turns; the
/// switches are nobody's.
#[derive(Debug)]
pub struct Replay {
    slicing: Slicing,
    /// Stamps up to here are replayed.
    stamped_to: Option<u64>,
    /// Attribution is final up to here: the time paid for before it is settled.
    settled_to: Option<u64>,
    /// The run in progress.
    run: Option<Run>,
}

/// The run in progress: whose, when its turn began, its latest stamp, and whether its span
/// ended there (it ran out of work).
#[derive(Debug, Clone, Copy)]
struct Run {
    who: usize,
    turn: u64,
    last: u64,
    drained: bool,
}

/// A stamp: when, whose, and whether it begins one of the container's pieces (it got the
/// engine then, after having had no work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp {
    at: u64,
    who: usize,
    begins: bool,
}

impl Replay {
    /// A replay of a GPU that slices as `slicing` says.
    pub fn new(slicing: Slicing) -> Replay {
        Replay {
            slicing,
            stamped_to: None,
            settled_to: None,
            run: None,
        }
    }

    /// Where the last settlement ended: the time paid for before it is settled.
    pub fn settled_to(&self) -> Option<u64> {
        self.settled_to
    }

    /// Forgets the run in progress (the containers' numbering changed).
    pub fn renumbered(&mut self) {
        self.run = None;
    }

    /// Replays the stamps of `spans[i]` (container `i`'s spans, as they come, overlapping
    /// where its processes' did) up to `horizon`, with `pieces[i]` its busy time ([`pieces`]
    /// of the same spans) and `slices[i]` the time slice its channel groups run (ns; 0 or
    /// absent: the GPU's), and settles what that decides. Into `out`: what each container
    /// held from the last settlement's end to this one's ([`Replay::settled_to`]).
    pub fn advance(
        &mut self,
        spans: &[Vec<BusySpan>],
        pieces: &[Vec<(u64, u64)>],
        slices: &[u64],
        horizon: u64,
        out: &mut Settled,
    ) {
        let n = pieces.len();
        out.reset(n);
        if self.run.is_some_and(|r| r.who >= n) {
            self.run = None;
        }
        let after = self.stamped_to;
        let mut stamps: Vec<Stamp> = Vec::new();
        for (who, v) in spans.iter().enumerate() {
            for s in v.iter().filter(|s| s.end_ns > s.start_ns) {
                for at in [s.start_ns, s.end_ns] {
                    if at <= horizon && after.is_none_or(|a| at > a) {
                        let begins = pieces[who].binary_search_by_key(&at, |p| p.0).is_ok();
                        stamps.push(Stamp { at, who, begins });
                    }
                }
            }
        }
        stamps.sort_unstable();
        stamps.dedup();
        let from = self
            .settled_to
            .or_else(|| stamps.first().map(|s| s.at))
            .unwrap_or(horizon);
        let mut settled = from;
        for stamp in stamps {
            settled = self.step(stamp, pieces, slices, settled, out);
        }
        // A run with no other container's work since it began is its container's alone up
        // to the horizon: settle it there.
        if let Some(r) = self.run.as_mut() {
            let alone = (0..n).all(|i| i == r.who || !covers(&pieces[i], r.turn, horizon));
            if alone && horizon > settled {
                // Its work goes on past the horizon, or ended at its last stamp.
                let end = if r.drained { r.last } else { horizon };
                out.give(r.who, r.turn.max(settled), end);
                settled = horizon;
                r.turn = r.turn.max(end);
            }
        } else {
            settled = settled.max(horizon);
        }
        self.stamped_to = Some(horizon.max(after.unwrap_or(0)));
        self.settled_to = Some(settled.max(from));
    }

    /// Replays one stamp; gives what it decides (after `settled`) and returns how far
    /// attribution is final.
    fn step(
        &mut self,
        stamp: Stamp,
        pieces: &[Vec<(u64, u64)>],
        slices: &[u64],
        settled: u64,
        out: &mut Settled,
    ) -> u64 {
        let sl = self.slicing;
        let slice = |who: usize| slices.get(who).copied().unwrap_or(0);
        let covered_after = |who: usize, at: u64| covers(&pieces[who], at, at + 1);
        let Some(mut r) = self.run else {
            self.run = Some(Run {
                who: stamp.who,
                turn: stamp.at,
                last: stamp.at,
                drained: !covered_after(stamp.who, stamp.at),
            });
            return settled;
        };
        let own = |who: usize| match slice(who) {
            0 => sl.timeslice_ns,
            ns => ns,
        };
        if r.who == stamp.who {
            if stamp.begins && r.drained {
                // It ran out of work, then got the engine again with new work: a turn of
                // its own began now. Up to where it ran out, a neighbour with work took
                // its turns in between.
                let n = pieces.len();
                let other = (0..n)
                    .find(|&i| i != r.who && covers(&pieces[i], r.last.saturating_sub(1), r.last));
                let turn = match other {
                    Some(o) => {
                        let (a, b) = (own(r.who), own(o));
                        let sw = sl.switch_between_ns(slice(r.who), slice(o));
                        let since = piece_start(&pieces[o], r.last).max(r.turn);
                        let fits = |end: u64| end + 2 * sw + b < r.last;
                        alternate(out, settled, (r.who, o), (r.turn, since), (a, b, sw), fits).0
                    }
                    None => r.turn,
                };
                out.give(r.who, turn.max(settled), r.last.max(turn));
                // Between its running out and its new work, a neighbour with work held the
                // engine (after a switch each way).
                let mid = r.last + (stamp.at - r.last) / 2;
                if let Some(o) = (0..n).find(|&i| i != r.who && covers(&pieces[i], mid, mid + 1)) {
                    let back = sl.switch_between_ns(slice(o), slice(r.who));
                    let from = (r.last + sl.idle_switch_ns).max(settled);
                    out.give(o, from, stamp.at.saturating_sub(back));
                }
                r.turn = stamp.at;
            }
            r.last = stamp.at;
            r.drained = !covered_after(stamp.who, stamp.at);
            self.run = Some(r);
            return settled;
        }
        // The engine switched from `r.who` to `stamp.who`. Where `stamp.who` had work
        // during `r.who`'s run (its piece began before), the engine alternated, a slice of
        // `r.who`'s and one of its, up to `r.who`'s last turn: those turns are given as
        // they went. Then `r.who`'s last turn ends where it ran out of work, where
        // `stamp.who`'s work began, or after its slice.
        let switch_ns = sl.switch_between_ns(slice(r.who), slice(stamp.who));
        let (a, b) = (own(r.who), own(stamp.who));
        let since = piece_start(&pieces[stamp.who], stamp.at).max(r.turn);
        // Whether another round fits after an `r.who` turn ending at `end`: its turn, then
        // `r.who`'s next one, before `r.who`'s last stamp (it ran out of work there) or
        // before `stamp.who`'s last turn.
        let fits = |end: u64| {
            if r.drained {
                end + 2 * switch_ns + b < r.last
            } else {
                !stamp.begins && end + 3 * switch_ns + b + a <= stamp.at
            }
        };
        let (turn, end) = alternate(
            out,
            settled,
            (r.who, stamp.who),
            (r.turn, since),
            (a, b, switch_ns),
            fits,
        );
        let (start, end, next) = if r.drained {
            let end = r.last.max(turn);
            (turn, end, (end + sl.idle_switch_ns).min(stamp.at))
        } else {
            let latest = stamp.at.saturating_sub(switch_ns).max(r.last).max(turn);
            let end = if stamp.begins {
                latest
            } else {
                end.clamp(r.last.max(turn), latest)
            };
            (turn, end, (end + switch_ns).min(stamp.at))
        };
        out.give(r.who, start.max(settled), end);
        let turn = if stamp.begins { stamp.at } else { next };
        self.run = Some(Run {
            who: stamp.who,
            turn,
            last: stamp.at,
            drained: !covered_after(stamp.who, stamp.at),
        });
        settled.max(end.min(turn))
    }
}

/// Gives the turns of `who` (first) and `other` as the engine alternated them from `turn`,
/// `other` having had work from `since`: `who` a slice of `a` (at least up to `since`), a
/// switch, `other` one of `b`, a switch, while `fits` holds for the end of `who`'s turn.
/// Returns where `who`'s last turn began and where its slice would end.
fn alternate(
    out: &mut Settled,
    settled: u64,
    (who, other): (usize, usize),
    (turn, since): (u64, u64),
    (a, b, switch_ns): (u64, u64, u64),
    fits: impl Fn(u64) -> bool,
) -> (u64, u64) {
    let (mut turn, mut end) = (turn, (turn + a).max(since));
    let mut rounds = 0;
    while fits(end) && rounds < MAX_ROUNDS {
        out.give(who, turn.max(settled), end);
        let theirs = end + switch_ns;
        out.give(other, theirs.max(settled), theirs + b);
        turn = theirs + b + switch_ns;
        end = turn + a;
        rounds += 1;
    }
    (turn, end)
}

/// The most alternations of two containers' turns replayed between two stamps; a longer
/// stretch (a region's spans made up to cost the daemon work) is given to the one that held
/// the engine last.
const MAX_ROUNDS: u32 = 1_000;

/// Where the piece of `pieces` (sorted, disjoint) that ends at or covers `at` began; `at`
/// itself if none does.
fn piece_start(pieces: &[(u64, u64)], at: u64) -> u64 {
    let i = pieces.partition_point(|p| p.1 < at);
    match pieces.get(i) {
        Some(p) if p.0 <= at => p.0,
        _ => at,
    }
}

/// Whether `pieces` (sorted, disjoint) cover any of `[a, b)`.
fn covers(pieces: &[(u64, u64)], a: u64, b: u64) -> bool {
    let i = pieces.partition_point(|p| p.1 <= a);
    pieces.get(i).is_some_and(|p| p.0 < b)
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

    /// The end of the window on the node clock (0 before the first advance).
    pub fn until_ns(&self) -> u64 {
        self.newest.map_or(0, |ms| (ms + 1) * BIN_NS)
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

    const H200: Slicing = tessera_region::slicing::H200;
    const MS: u64 = 1_000_000;

    fn span(a: u64, b: u64) -> BusySpan {
        BusySpan {
            start_ns: a,
            end_ns: b,
        }
    }

    /// Replays `spans` in one settlement up to `horizon`.
    fn run(spans: &[Vec<BusySpan>], horizon: u64) -> Settled {
        run_sliced(spans, &[], horizon)
    }

    /// Like [`run`], with the containers' own slices.
    fn run_sliced(spans: &[Vec<BusySpan>], slices: &[u64], horizon: u64) -> Settled {
        let pieces: Vec<Vec<(u64, u64)>> = spans.iter().map(|v| pieces(v)).collect();
        let mut out = Settled::default();
        Replay::new(H200).advance(spans, &pieces, slices, horizon, &mut out);
        out
    }

    /// Back-to-back kernels of `len` from `a` to `b`, one span each.
    fn kernels(a: u64, b: u64, len: u64) -> Vec<BusySpan> {
        (a..b)
            .step_by(len as usize)
            .map(|s| span(s, s + len))
            .collect()
    }

    #[test]
    fn a_container_alone_keeps_its_union() {
        let s = run(&[vec![span(0, MS), span(3 * MS, 5 * MS)]], 10 * MS);
        assert_eq!(s.attributed, [3 * MS]);
        let s = run(&[kernels(0, 10 * MS, MS), vec![]], 10 * MS);
        assert_eq!(s.attributed, [10 * MS, 0]);
    }

    /// A GPU's own schedule of containers that always have work: turns of a slice round
    /// robin, a switch between, each container running back-to-back kernels of `kernel[i]`
    /// (a kernel cut by the slice ends in its container's next turn). Returns each one's
    /// spans (a kernel each, from its start to its end) and the time it held the engine.
    fn round_robin(kernel: &[u64], turns: usize) -> (Vec<Vec<BusySpan>>, Vec<u64>, u64) {
        round_robin_sliced(kernel, &vec![0; kernel.len()], turns)
    }

    /// Like [`round_robin`], each container's turns as long as its own slice (`slices[i]`,
    /// 0 for the GPU's), a switch costing what the two slices around it make it.
    fn round_robin_sliced(
        kernel: &[u64],
        slices: &[u64],
        turns: usize,
    ) -> (Vec<Vec<BusySpan>>, Vec<u64>, u64) {
        let n = kernel.len();
        let own = |who: usize| match slices[who] {
            0 => H200.timeslice_ns,
            ns => ns,
        };
        let mut spans = vec![vec![]; n];
        let mut held = vec![0; n];
        // Per container: its kernel in progress (start, work left).
        let mut current: Vec<Option<(u64, u64)>> = vec![None; n];
        let mut at = 0;
        for turn in 0..turns {
            let who = turn % n;
            let end = at + own(who);
            let mut now = at;
            while now < end {
                let (start, left) = current[who].unwrap_or((now, kernel[who]));
                let run = left.min(end - now);
                now += run;
                if run == left {
                    spans[who].push(span(start, now));
                    current[who] = None;
                } else {
                    current[who] = Some((start, left - run));
                }
            }
            held[who] += own(who);
            at = end + H200.switch_between_ns(slices[who], slices[(turn + 1) % n]);
        }
        (spans, held, at)
    }

    #[test]
    fn round_robin_turns_are_given_whole_and_switches_to_nobody() {
        for kernel in [
            [500_000, 500_000],
            [1_000_000, 20_000],
            [700_000, 1_300_000],
        ] {
            let (spans, held, end) = round_robin(&kernel, 60);
            let s = run(&spans, end);
            for (who, (&got, &want)) in s.attributed.iter().zip(&held).enumerate() {
                assert!(
                    got.abs_diff(want) <= want / 50,
                    "kernels {kernel:?}, {who}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn a_container_of_short_slices_is_given_its_short_turns() {
        // Offline work in 100 µs slices beside online work in the GPU's: the short one
        // held the engine about a twentieth of the time, and is charged that, not half,
        // though most of its turns end no kernel (its 500 µs kernels take five).
        let slices = [100_000, 0];
        let (spans, held, end) = round_robin_sliced(&[500_000, 300_000], &slices, 200);
        let s = run_sliced(&spans, &slices, end);
        for (who, (&got, &want)) in s.attributed.iter().zip(&held).enumerate() {
            assert!(
                got.abs_diff(want) <= want / 20,
                "{who}: {got} vs {want} ({:?})",
                s.attributed
            );
        }
        // Replayed as if both ran the GPU's slices, the short one pays for far more.
        let wrong = run(&spans, end);
        assert!(wrong.attributed[0] > 3 * held[0], "{:?}", wrong.attributed);
    }

    #[test]
    fn two_containers_of_short_slices_are_charged_what_they_held() {
        // Both offline at 100 µs: most turns of the long kernels end none, and the short
        // kernels' container runs out of work at the end of each turn of its.
        let slices = [100_000, 100_000];
        for kernel in [
            [1_000_000, 2_000_000],
            [500_000, 300_000],
            [2_000_000, 50_000],
            [50_000, 2_000_000],
        ] {
            let (spans, held, end) = round_robin_sliced(&kernel, &slices, 400);
            let s = run_sliced(&spans, &slices, end);
            for (who, (&got, &want)) in s.attributed.iter().zip(&held).enumerate() {
                assert!(
                    got.abs_diff(want) <= want * 3 / 20,
                    "kernels {kernel:?}, {who}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn a_burst_that_begins_a_span_is_its_own() {
        // B runs 1 ms kernels from 0; F's 1 ms of work began when it got the engine at
        // 10.3 ms (B cut a switch before), and B resumed after an idle switch.
        let mut b = kernels(0, 10 * MS, MS);
        b.push(span(10 * MS, 12 * MS));
        b.extend(kernels(12 * MS, 30 * MS, MS));
        let f = vec![span(10_300_000, 11_300_000)];
        let s = run(&[f, b], 30 * MS);
        assert_eq!(s.attributed[0], MS);
        let rest = 30 * MS - MS - H200.switch_ns - H200.idle_switch_ns;
        assert!(
            s.attributed[1].abs_diff(rest) <= 300_000,
            "{:?}",
            s.attributed
        );
    }

    #[test]
    fn settlements_go_on_where_the_last_ended() {
        let spans = [kernels(0, 100 * MS, MS), kernels(MS / 2, 100 * MS, MS)];
        let pieces: Vec<Vec<(u64, u64)>> = spans.iter().map(|v| pieces(v)).collect();
        let mut replay = Replay::new(H200);
        let mut total = [0u64; 2];
        let mut out = Settled::default();
        for h in (5..=100).step_by(5) {
            replay.advance(&spans, &pieces, &[], h * MS, &mut out);
            total[0] += out.attributed[0];
            total[1] += out.attributed[1];
        }
        let whole = run(&spans, 100 * MS);
        for (got, want) in total.iter().zip(&whole.attributed) {
            assert!(got.abs_diff(*want) <= MS, "{total:?} {whole:?}");
        }
        assert!(replay.settled_to().is_some_and(|t| t <= 100 * MS));
    }

    #[test]
    fn parts_are_kept_per_millisecond() {
        let mut s = Settled::default();
        s.reset(2);
        s.give(0, 500_000, 2_500_000);
        s.give(1, 0, 100);
        assert_eq!(s.attributed, [2_000_000, 100]);
        assert_eq!(
            s.per_ms,
            [
                (0, 0, 500_000),
                (0, 1, 1_000_000),
                (0, 2, 500_000),
                (1, 0, 100)
            ]
        );
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
