//! Which of the scheduler's proposed victims to evict on one node: kube-scheduler counts
//! `tessera.dev/gpu-core` per node, so its proposal may free enough on the node and still
//! not on any one card. Here a share needs one card freed enough, whole cards need cards
//! emptied that hold the pod's memory; the fewest victims win, lowest priority and largest
//! first. Whether the pod fits once they are gone is [`super::fit`]'s judgement, the one
//! filter and bind make.

use super::cluster::{load, Card, Cluster, Holder, Usage, Used};
use super::fit::fit;
use super::policy::Policy;
use crate::ids::CORES_PER_GPU;
use crate::requests::Ask;
use std::collections::BTreeSet;
use std::time::Instant;

/// What `holder` takes of `card`.
fn taken_by(card: &Card, holder: &Holder) -> Used {
    let (core, memory) = if holder.ask.is_whole() {
        (CORES_PER_GPU, card.memory)
    } else {
        (holder.ask.core, holder.ask.memory)
    };
    Used {
        core,
        memory,
        pods: 1,
    }
}

/// The UIDs to evict on `node` so that `ask` fits, taken only from `allowed` and only of
/// priority below `priority`; `None` when no such set exists.
pub fn victims(
    cluster: &Cluster,
    node: &str,
    ask: &Ask,
    priority: i32,
    allowed: &BTreeSet<&str>,
    usage: &Usage,
    now: Instant,
) -> Option<Vec<String>> {
    let cards = cluster.with_use(node, usage);
    let evictable = |uid: &str, h: &Holder| allowed.contains(uid) && h.priority < priority;
    // Per card: the victims that would make room there and what the card holds after.
    let mut per_card: Vec<Option<(Vec<String>, Used)>> = Vec::new();
    for (card, used) in &cards {
        let mut holders = cluster.holders_of(&card.uuid, now);
        let mut used = *used;
        if ask.is_whole() {
            // A whole card must be emptied: all its holders go, or it cannot be had.
            let all_go = holders.iter().all(|(uid, h)| evictable(uid, h));
            let gone = used.pods as usize == holders.len();
            per_card.push((all_go && gone).then(|| {
                let uids = holders.iter().map(|(uid, _)| uid.to_string()).collect();
                (uids, Used::default())
            }));
            continue;
        }
        holders.retain(|(uid, h)| evictable(uid, h));
        // Lowest priority first, then the largest, so that few go.
        holders.sort_by(|(_, a), (_, b)| {
            let size = |h: &Holder| load(card, &taken_by(card, h));
            a.priority
                .cmp(&b.priority)
                .then(size(b).total_cmp(&size(a)))
        });
        let fits = |used: &Used| fit(&[(*card, *used)], ask, Policy::Binpack).is_ok();
        let mut chosen = Vec::new();
        for (uid, h) in holders {
            if fits(&used) {
                break;
            }
            used.minus(&taken_by(card, h));
            chosen.push(uid.to_string());
        }
        per_card.push(fits(&used).then_some((chosen, used)));
    }
    // The cards in the order of the victims they cost; the fewest that make the pod fit.
    let mut order: Vec<usize> = (0..cards.len())
        .filter(|&i| per_card[i].is_some())
        .collect();
    order.sort_by_key(|&i| per_card[i].as_ref().map_or(0, |(v, _)| v.len()));
    for take in ask.cards()..=order.len() {
        let after: Vec<(&Card, Used)> = cards
            .iter()
            .enumerate()
            .map(|(i, (card, used))| match &per_card[i] {
                Some((_, freed)) if order[..take].contains(&i) => (*card, *freed),
                // Not freed: as it is, which a whole-card pod cannot take.
                _ => (*card, *used),
            })
            .collect();
        let Ok(chosen) = fit(&after, ask, Policy::Binpack) else {
            continue;
        };
        let mut out: Vec<String> = chosen
            .iter()
            .filter(|i| order[..take].contains(i))
            .filter_map(|&i| per_card[i].as_ref())
            .flat_map(|(v, _)| v.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        return Some(out);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MEMORY_UNIT;

    #[test]
    fn victims_free_one_card_and_never_a_higher_priority_pod() {
        let mut cluster = Cluster::default();
        cluster.set_cards((0..2).map(|index| Card {
            uuid: format!("GPU-a{index}"),
            node: "a".into(),
            index,
            memory: 40 * MEMORY_UNIT,
            healthy: true,
        }));
        let holder = |card: u32, core: u32, gib: u64, priority: i32| Holder {
            pod: format!("ns/{card}-{core}"),
            cards: vec![format!("GPU-a{card}")],
            ask: Ask {
                core,
                memory: gib * MEMORY_UNIT,
            },
            priority,
        };
        // Card 0: 50 + 40 core of priority 0. Card 1: 60 of priority 0 and 30 of 500.
        cluster.put_bound("u1", holder(0, 50, 4, 0));
        cluster.put_bound("u2", holder(0, 40, 30, 0));
        cluster.put_bound("u3", holder(1, 60, 4, 0));
        cluster.put_bound("u4", holder(1, 30, 4, 500));
        let now = Instant::now();
        let usage = cluster.usage(None);
        let all: BTreeSet<&str> = ["u1", "u2", "u3", "u4"].into();
        // 50 core: one victim frees it on either card; on card 0 (the first) the largest
        // goes, core and memory counted as shares of the card: u2's 40 core and 30 GiB.
        let ask = Ask {
            core: 50,
            memory: 4 * MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u2".into()])
        );
        // 37 GiB: card 1 cannot free that much memory (u4 outranks the pod), card 0 can,
        // by losing both its pods.
        let ask = Ask {
            core: 10,
            memory: 37 * MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
        // 80 core: card 0 must lose both; card 1 cannot, its 30 outranks the pod.
        let ask = Ask {
            core: 80,
            memory: MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
        // Only what the scheduler proposed: without u2, no card frees 80.
        let some: BTreeSet<&str> = ["u1", "u3", "u4"].into();
        assert_eq!(victims(&cluster, "a", &ask, 100, &some, &usage, now), None);
        // A whole card: the one whose holders may all go.
        let whole = Ask {
            core: 100,
            memory: 0,
        };
        assert_eq!(
            victims(&cluster, "a", &whole, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
    }
}
