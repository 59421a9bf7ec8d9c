//! Whether a pod fits a node's cards, and on which: the one judgement that filter,
//! prioritize, bind and preempt all make, so that every node filter passes is one bind can
//! place the pod on, and a node filter fails for good is one that no eviction can help.
//!
//! - A share (core below 100) fits a healthy card with its core and its memory free; the
//!   card policy picks among those: `binpack` the fullest, `spread` the emptiest.
//! - Whole cards (100·n core) take n empty healthy cards that together hold the memory
//!   request. Of those, the ones that fit best: the least memory that still holds it (then
//!   the lowest index), so that a large card stays free for the pod that needs it.
//! - A node whose healthy cards could not hold the pod even if every pod left them
//!   ([`Misfit::Never`]) is failed as unresolvable: kube-scheduler then tries no preemption
//!   there.

use super::cluster::{load, Card, Used};
use super::policy::Policy;
use crate::ids::{CORES_PER_GPU, MEMORY_UNIT};
use crate::requests::Ask;
use std::cmp::Reverse;

/// Why a pod does not fit a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// What the cards hold now is in the way: evicting pods may make room.
    Taken(String),
    /// The node's healthy cards cannot hold the pod even empty: no eviction helps.
    Never(String),
}

impl Misfit {
    /// The reason, as the scheduler shows it.
    pub fn reason(&self) -> &str {
        match self {
            Misfit::Taken(why) | Misfit::Never(why) => why,
        }
    }
}

/// Whether a share fits on a card now.
pub fn share_fits(card: &Card, used: &Used, ask: &Ask) -> bool {
    card.healthy
        && used.core + ask.core <= CORES_PER_GPU
        && used.memory.saturating_add(ask.memory) <= card.memory
}

/// The cards of one node (by index, each with what is taken of it) that `ask` takes under
/// `policy`, by position; or why it does not fit.
pub fn fit(cards: &[(&Card, Used)], ask: &Ask, policy: Policy) -> Result<Vec<usize>, Misfit> {
    // The common case first, without gathering anything.
    if !ask.is_whole() {
        if let Some(i) = best_share(cards, ask, policy) {
            return Ok(vec![i]);
        }
    }
    if cards.is_empty() {
        return Err(Misfit::Never(
            "the node has no Tessera GPU (no GPU object names it)".into(),
        ));
    }
    let healthy: Vec<usize> = (0..cards.len()).filter(|&i| cards[i].0.healthy).collect();
    if healthy.is_empty() {
        return Err(Misfit::Never(format!(
            "all {} of the node's GPUs fail their health check",
            cards.len()
        )));
    }
    if ask.is_whole() {
        return whole(cards, &healthy, ask);
    }
    let largest = healthy
        .iter()
        .map(|&i| cards[i].0.memory)
        .max()
        .unwrap_or(0);
    if ask.memory > largest {
        return Err(Misfit::Never(format!(
            "asks {} GiB of GPU memory on one card, more than any card here has ({} GiB)",
            ask.memory.div_ceil(MEMORY_UNIT),
            largest / MEMORY_UNIT
        )));
    }
    let most = healthy
        .iter()
        .map(|&i| {
            let (card, used) = &cards[i];
            (
                CORES_PER_GPU - used.core.min(CORES_PER_GPU),
                card.memory.saturating_sub(used.memory),
            )
        })
        .max()
        .unwrap_or((0, 0));
    Err(Misfit::Taken(format!(
        "no GPU has {ask} free (the freest has {} core and {} GiB)",
        most.0,
        most.1 / MEMORY_UNIT
    )))
}

/// The card a share takes under `policy`; ties go to the lower index.
fn best_share(cards: &[(&Card, Used)], ask: &Ask, policy: Policy) -> Option<usize> {
    let fitting = (0..cards.len())
        .filter(|&i| share_fits(cards[i].0, &cards[i].1, ask))
        .map(|i| (i, load(cards[i].0, &cards[i].1)));
    let best = match policy {
        Policy::Binpack => fitting.fold(None, |best: Option<(usize, f64)>, (i, l)| match best {
            Some((_, b)) if b >= l => best,
            _ => Some((i, l)),
        }),
        Policy::Spread => fitting.fold(None, |best: Option<(usize, f64)>, (i, l)| match best {
            Some((_, b)) if b <= l => best,
            _ => Some((i, l)),
        }),
    };
    best.map(|(i, _)| i)
}

/// Whole cards: n empty healthy cards that together hold the memory request.
fn whole(cards: &[(&Card, Used)], healthy: &[usize], ask: &Ask) -> Result<Vec<usize>, Misfit> {
    let wanted = ask.cards();
    if healthy.len() < wanted {
        return Err(Misfit::Never(format!(
            "asks {wanted} whole GPUs; the node has {} healthy",
            healthy.len()
        )));
    }
    let memory = |i: usize| cards[i].0.memory;
    // The largest cards hold the most: if the n largest cannot hold the request, no n can.
    let mut largest: Vec<u64> = healthy.iter().map(|&i| memory(i)).collect();
    largest.sort_unstable_by_key(|&m| Reverse(m));
    let most: u64 = largest[..wanted].iter().sum();
    if ask.memory > most {
        return Err(Misfit::Never(format!(
            "asks {} GiB on {wanted} whole GPUs; the node's {wanted} largest hold {} GiB",
            ask.memory.div_ceil(MEMORY_UNIT),
            most / MEMORY_UNIT
        )));
    }
    let empty: Vec<usize> = healthy
        .iter()
        .copied()
        .filter(|&i| cards[i].1.is_empty())
        .collect();
    if let Some(chosen) = best_whole(cards, &empty, wanted, ask.memory) {
        return Ok(chosen);
    }
    Err(Misfit::Taken(if empty.len() < wanted {
        format!(
            "asks {wanted} whole GPUs; {} of the node's {} healthy GPUs are free",
            empty.len(),
            healthy.len()
        )
    } else {
        format!(
            "asks {} GiB on {wanted} whole GPUs; no {wanted} of the free GPUs hold that much",
            ask.memory.div_ceil(MEMORY_UNIT)
        )
    }))
}

/// Of the `empty` cards, `wanted` that together hold `bytes` with the least memory, then
/// the lowest indices; by position, in index order. An exact search: a node has few cards,
/// and a greedy choice can miss the best (for 100 GiB on two of 90, 60, 55 and 10 GiB, 90 +
/// 10, not 60 + 55).
fn best_whole(
    cards: &[(&Card, Used)],
    empty: &[usize],
    wanted: usize,
    bytes: u64,
) -> Option<Vec<usize>> {
    let memory = |i: usize| cards[i].0.memory;
    let index = |i: usize| cards[i].0.index;
    // Smallest first, so that a sum that is already no better ends the branch.
    let mut by_size = empty.to_vec();
    by_size.sort_by_key(|&i| (memory(i), index(i)));
    if by_size.len() < wanted {
        return None;
    }
    let mut search = Search {
        sizes: by_size.iter().map(|&i| memory(i)).collect(),
        bytes,
        best: None,
        taken: Vec::with_capacity(wanted),
    };
    search.from(0, wanted, 0);
    let (_, positions) = search.best?;
    let mut chosen: Vec<usize> = positions.into_iter().map(|p| by_size[p]).collect();
    chosen.sort_by_key(|&i| index(i));
    Some(chosen)
}

/// The exact search of [`best_whole`], over card sizes in ascending order.
struct Search {
    sizes: Vec<u64>,
    bytes: u64,
    /// The least total found and its positions in `sizes`.
    best: Option<(u64, Vec<usize>)>,
    taken: Vec<usize>,
}

impl Search {
    /// Takes `left` more cards from position `start` on, `sum` held so far.
    fn from(&mut self, start: usize, left: usize, sum: u64) {
        if left == 0 {
            // Equal sums keep the first found: the smaller cards, which come first by index
            // among equals.
            if sum >= self.bytes && self.best.as_ref().is_none_or(|(b, _)| sum < *b) {
                self.best = Some((sum, self.taken.clone()));
            }
            return;
        }
        let n = self.sizes.len();
        for p in start..=n - left {
            let with = sum + self.sizes[p];
            // The rest are no smaller: a sum already no better cannot improve.
            if self.best.as_ref().is_some_and(|(b, _)| with >= *b) {
                return;
            }
            // The largest `left - 1` after p are the most the rest can add.
            let most: u64 = self.sizes[n - (left - 1)..].iter().sum();
            if with + most < self.bytes {
                continue;
            }
            self.taken.push(p);
            self.from(p + 1, left - 1, with);
            self.taken.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = MEMORY_UNIT;

    fn card(index: u32, gib: u64) -> Card {
        Card {
            uuid: format!("GPU-{index}"),
            node: "a".into(),
            index,
            memory: gib * GIB,
            healthy: true,
        }
    }

    fn ask(core: u32, gib: u64) -> Ask {
        Ask {
            core,
            memory: gib * GIB,
        }
    }

    fn taken(core: u32, gib: u64) -> Used {
        Used {
            core,
            memory: gib * GIB,
            pods: 1,
        }
    }

    #[test]
    fn a_whole_card_with_memory_takes_the_card_that_holds_it() {
        // A T4 at index 0, an A100-80GB at index 1.
        let (t4, a100) = (card(0, 16), card(1, 80));
        let node = [(&t4, Used::default()), (&a100, Used::default())];
        assert_eq!(fit(&node, &ask(100, 40), Policy::Binpack), Ok(vec![1]));
        // Memory a T4 holds: the T4, keeping the large card free.
        assert_eq!(fit(&node, &ask(100, 8), Policy::Spread), Ok(vec![0]));
        assert_eq!(fit(&node, &ask(200, 90), Policy::Binpack), Ok(vec![0, 1]));
        // The A100 taken: a 40 GiB whole card waits (preemption could free it).
        let busy = [(&t4, Used::default()), (&a100, taken(10, 1))];
        assert!(matches!(
            fit(&busy, &ask(100, 40), Policy::Binpack),
            Err(Misfit::Taken(_))
        ));
    }

    #[test]
    fn what_no_eviction_helps_is_never() {
        let (a, b) = (card(0, 80), card(1, 80));
        let node = [(&a, Used::default()), (&b, Used::default())];
        let never = |ask: Ask| match fit(&node, &ask, Policy::Binpack) {
            Err(Misfit::Never(why)) => why,
            other => panic!("{ask:?}: {other:?}"),
        };
        assert!(never(ask(100, 90)).contains("90 GiB"));
        assert!(never(ask(300, 0)).contains("2 healthy"));
        assert!(never(ask(30, 81)).contains("more than any card"));
        assert_eq!(fit(&node, &ask(200, 160), Policy::Binpack), Ok(vec![0, 1]));
        assert!(matches!(
            fit(&[], &ask(30, 1), Policy::Binpack),
            Err(Misfit::Never(_))
        ));
        let sick = Card {
            healthy: false,
            ..card(0, 80)
        };
        assert!(matches!(
            fit(&[(&sick, Used::default())], &ask(30, 1), Policy::Binpack),
            Err(Misfit::Never(_))
        ));
    }

    #[test]
    fn whole_cards_fit_best_among_mixed_sizes() {
        let cards = [card(0, 80), card(1, 16), card(2, 40), card(3, 16)];
        let node: Vec<(&Card, Used)> = cards.iter().map(|c| (c, Used::default())).collect();
        // Two cards, 50 GiB: 40 + 16 beats 80 + anything.
        assert_eq!(fit(&node, &ask(200, 50), Policy::Binpack), Ok(vec![1, 2]));
        // Two cards, 30 GiB: both T4s.
        assert_eq!(fit(&node, &ask(200, 30), Policy::Binpack), Ok(vec![1, 3]));
        // 100 GiB on two: only the 80 with the 40 (or more) hold it.
        assert_eq!(fit(&node, &ask(200, 100), Policy::Binpack), Ok(vec![0, 2]));
        // Where taking the largest first and then smaller ones misses the best: 90 + 10.
        let cards = [card(0, 60), card(1, 90), card(2, 55), card(3, 10)];
        let node: Vec<(&Card, Used)> = cards.iter().map(|c| (c, Used::default())).collect();
        assert_eq!(fit(&node, &ask(200, 100), Policy::Binpack), Ok(vec![1, 3]));
        // Equal sums: the lower indices.
        let cards = [card(0, 40), card(1, 40), card(2, 40)];
        let node: Vec<(&Card, Used)> = cards.iter().map(|c| (c, Used::default())).collect();
        assert_eq!(fit(&node, &ask(200, 50), Policy::Binpack), Ok(vec![0, 1]));
    }

    #[test]
    fn the_best_whole_cards_are_the_least_memory_that_holds_the_pod() {
        // Against every subset, on small nodes of mixed sizes.
        let sizes = [16, 24, 40, 48, 80, 94];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for _ in 0..500 {
            let count = 1 + next(8) as u32;
            let cards: Vec<Card> = (0..count)
                .map(|i| card(i, sizes[next(sizes.len() as u64) as usize]))
                .collect();
            let node: Vec<(&Card, Used)> = cards.iter().map(|c| (c, Used::default())).collect();
            let wanted = 1 + next(u64::from(count)) as u32;
            let want = ask(100 * wanted, next(100 * u64::from(wanted)));
            let best = (0u32..1 << count)
                .filter(|m| m.count_ones() == wanted)
                .map(|m| {
                    let held: u64 = (0..count)
                        .filter(|i| m & (1 << i) != 0)
                        .map(|i| cards[i as usize].memory)
                        .sum();
                    held
                })
                .filter(|&held| held >= want.memory)
                .min();
            match (fit(&node, &want, Policy::Binpack), best) {
                (Ok(chosen), Some(least)) => {
                    let held: u64 = chosen.iter().map(|&i| cards[i].memory).sum();
                    assert_eq!(chosen.len() as u32, wanted);
                    assert_eq!(held, least, "{cards:?} {want:?}: {chosen:?}");
                }
                (Err(Misfit::Never(_)), None) => {}
                (got, least) => panic!("{cards:?} {want:?}: {got:?}, best {least:?}"),
            }
        }
    }
}
