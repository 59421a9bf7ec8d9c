//! Turns: containers that keep a GPU busy take it one at a time.
//!
//! A GPU time-slices the contexts that have work: every time slice (2.08 ms on an H200)
//! it saves the running kernels' state and switches, and no kernel advances during the
//! switch (0.16 ms). Two containers that both always have work lose 7 % of the GPU that
//! way, three lose it as well, and the guarantees of the policies cannot all be met
//! (`fixed:30` beside `fixed:70` got 30 % and 65 %). A launch gate can do what the GPU's
//! scheduler cannot: keep all but one of them from having work on the GPU at all. So while
//! two or more containers on a GPU have had work for [`SATURATED_TICKS`] ticks in a row,
//! they take turns: one holds the GPU, and the others' refills are kept for them (banked)
//! instead of going into their buckets, so that their launches wait; a turn passes when
//! the holder has held it for [`TURN_NS`] or is about to run out of credit, to the one
//! owed the most. Each still gets its policy's share (its credit accrues at its rate
//! whether it holds the turn or not); the GPU switches once a turn instead of every slice.
//!
//! Only containers that keep the GPU busy take turns: work that comes and goes (an online
//! service's requests) never waits for a turn, and the GPU's own slicing shares it. Online
//! and offline containers take turns apart, each class among its own: a blocked offline
//! holder keeps its turn while online work runs, and must not hold up an online container
//! that keeps the GPU busy too.

/// Ticks in a row with work after which a container takes turns.
pub const SATURATED_TICKS: u32 = 4;
/// The longest turn: a container kept waiting waits at most this long for each other
/// container taking turns.
pub const TURN_NS: u64 = 40_000_000;

/// One container as turns see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender {
    /// It has had work for [`SATURATED_TICKS`] ticks in a row (blocked by online work or
    /// not: an offline container keeps its place in the turns while a request runs).
    pub saturated: bool,
    /// It may launch now (not blocked).
    pub runnable: bool,
    /// What it may still run: its bucket and what is banked for it, in ns.
    pub credit_ns: i64,
}

/// Who holds the GPU, on one GPU.
#[derive(Debug, Default)]
pub struct Turns {
    holder: Option<usize>,
    /// When the holder's turn began, moved on by the time it could not run (blocked), so
    /// that a turn counts the time it had.
    began_ns: u64,
    /// When the turns were last planned.
    planned_ns: u64,
}

impl Turns {
    /// The container holding the turn as last planned.
    pub fn holder(&self) -> Option<usize> {
        self.holder
    }

    /// Forgets the holder (the containers' numbering changed).
    pub fn renumbered(&mut self) {
        self.holder = None;
    }

    /// The holder of the turn at `now` among `contenders`, `None` while fewer than two are
    /// saturated (no turns). A holder keeps its turn while it is saturated, has held it
    /// less than [`TURN_NS`], and has credit for at least `tick_ns` more; else the turn
    /// goes to the saturated container owed the most (the next in order on a tie).
    pub fn plan(&mut self, now: u64, tick_ns: u64, contenders: &[Contender]) -> Option<usize> {
        let since = now.saturating_sub(std::mem::replace(&mut self.planned_ns, now));
        let saturated: Vec<usize> = (0..contenders.len())
            .filter(|&i| contenders[i].saturated)
            .collect();
        if saturated.len() < 2 {
            self.holder = None;
            return None;
        }
        if self
            .holder
            .is_some_and(|h| contenders.get(h).is_some_and(|c| !c.runnable))
        {
            // Blocked: its turn waits with it.
            self.began_ns = self.began_ns.saturating_add(since);
        }
        let keeps = self.holder.is_some_and(|h| {
            contenders.get(h).is_some_and(|c| {
                c.saturated
                    && now.saturating_sub(self.began_ns) < TURN_NS
                    && c.credit_ns > i64::try_from(tick_ns).unwrap_or(i64::MAX)
            })
        });
        if !keeps {
            let after = self.holder.map_or(contenders.len(), |h| h + 1);
            let n = contenders.len();
            let next = (0..n)
                .map(|k| (after + k) % n)
                .filter(|&i| contenders[i].saturated && Some(i) != self.holder)
                .max_by_key(|&i| {
                    (
                        contenders[i].credit_ns,
                        std::cmp::Reverse((i + n - after) % n),
                    )
                })
                .unwrap_or(saturated[0]);
            self.holder = Some(next);
            self.began_ns = now;
        }
        self.holder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: u64 = 5_000_000;

    fn c(saturated: bool, credit_ms: i64) -> Contender {
        Contender {
            saturated,
            runnable: true,
            credit_ns: credit_ms * 1_000_000,
        }
    }

    #[test]
    fn a_blocked_holder_keeps_its_turn_and_the_time_left_in_it() {
        let mut t = Turns::default();
        let all = [c(true, 50), c(true, 10)];
        assert_eq!(t.plan(0, TICK, &all), Some(0));
        // Blocked by online work for a while: the turns go on when it lifts.
        let mut blocked = all;
        blocked.iter_mut().for_each(|x| x.runnable = false);
        for k in 1..=20 {
            assert_eq!(t.plan(k * TICK, TICK, &blocked), Some(0));
        }
        assert_eq!(
            t.plan(21 * TICK, TICK, &all),
            Some(0),
            "the blocked time is not its turn's"
        );
    }

    #[test]
    fn no_turns_below_two_saturated() {
        let mut t = Turns::default();
        assert_eq!(t.plan(0, TICK, &[c(true, 10), c(false, 50)]), None);
        assert_eq!(t.plan(0, TICK, &[]), None);
    }

    #[test]
    fn the_turn_goes_to_the_one_owed_most_and_is_kept_while_it_lasts() {
        let mut t = Turns::default();
        assert_eq!(
            t.plan(0, TICK, &[c(true, 10), c(true, 30), c(true, 20)]),
            Some(1)
        );
        // Kept while it has credit and time.
        assert_eq!(
            t.plan(TICK, TICK, &[c(true, 50), c(true, 30), c(true, 20)]),
            Some(1)
        );
        // About to run out of credit: passed on.
        assert_eq!(
            t.plan(2 * TICK, TICK, &[c(true, 50), c(true, 4), c(true, 20)]),
            Some(0)
        );
        // Held for a whole turn: passed on, though it has credit left.
        let long = 2 * TICK + TURN_NS;
        assert_eq!(
            t.plan(long, TICK, &[c(true, 500), c(true, 4), c(true, 20)]),
            Some(2)
        );
        // A holder that stops having work loses the turn.
        assert_eq!(
            t.plan(long + 1, TICK, &[c(true, 5), c(true, 4), c(false, 20)]),
            Some(0)
        );
    }

    #[test]
    fn ties_go_round_robin() {
        let mut t = Turns::default();
        let all = [c(true, 0), c(true, 0), c(true, 0)];
        let order: Vec<Option<usize>> = (0..4).map(|k| t.plan(k * TURN_NS, TICK, &all)).collect();
        assert_eq!(order, [Some(0), Some(1), Some(2), Some(0)]);
    }
}
